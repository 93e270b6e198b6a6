"""``VLAPolicy``: an OpenVLA / MiniVLA-style vision-language-action policy with LoRA, for GRPO.

The agent of the LIBERO transfer experiment (``docs/method.md``, "Reward mode"; Yang et al.,
arXiv 2608.12564): MiniVLA-1B (Belkhale & Sadigh 2024, "MiniVLA: A Better VLA with a Smaller
Footprint", Stanford ILIAD; a Prismatic VLM with a Qwen2.5-0.5B language model) fine-tuned with
LoRA adapters on its language model.

Action representation: OpenVLA's binned action tokens or MiniVLA's VQ action chunks
(:mod:`agents.vla.action_tokenizer`); the policy samples them autoregressively with the logits
restricted to the action ids (the last 256 ids of the vocabulary for the bins, the last
``n_embed`` for VQ), so every sample decodes to a valid action. Its probability model is the
*restricted* distribution (softmax over the 256 action ids at temperature τ): sampling,
:meth:`VLAPolicy.grpo_logprobs` and the frozen reference all use it, so GRPO's ratios and KL
(:mod:`agents.grpo`) are exact.

Backbones: any Hugging Face image-text-to-text model with a processor (``processor(images=...,
text=..., return_tensors="pt")``) — LLaVA-style models (vision tower + projector + causal LM,
the structure of Prismatic/OpenVLA/MiniVLA) are the tested family. :func:`load_vla` loads a
Hugging Face-format OpenVLA/MiniVLA folder or a MiniVLA run in the authors' Prismatic format
(:mod:`agents.vla.prismatic`); :func:`build_tiny_vla` builds a tiny randomly
initialised LLaVA (SigLIP vision tower + Qwen2 language model, like MiniVLA's Qwen2.5) with a
processor made entirely offline, for tests and CPU smoke runs.

Observations are the LIBERO env's dicts ``{"agentview_image": uint8 (H, W, 3), "wrist_image":
uint8 (H, W, 3), "proprio": float32 (8,), "instruction": str}``; OpenVLA/MiniVLA use the
third-person image (and MiniVLA's "wrist" variants the wrist image too, see ``image_keys``) and
the instruction, not the proprioceptive state. Actions come out in the model's normalised
space ([-1, 1] for the bins; a VQ decoder's output is not bounded);
:func:`agents.vla.action_tokenizer.libero_env_actions` maps them to what LIBERO executes with the
checkpoint's q01/q99 statistics (:func:`~agents.vla.action_tokenizer.load_action_stats`), as the
authors' evaluation does.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from agents.vla.action_tokenizer import ActionTokenizer, VQActionTokenizer

__all__ = [
    "VLASamples",
    "VLAPolicy",
    "OPENVLA_PROMPT",
    "MINIVLA_QWEN_PROMPT",
    "LIBERO_IMAGE_KEYS",
    "default_action_vocab_size",
]

OPENVLA_PROMPT = "In: What action should the robot take to {instruction}?\nOut:"
"""OpenVLA's prompt (Kim et al. 2024; ``PurePromptBuilder`` of the OpenVLA code)."""

MINIVLA_QWEN_PROMPT = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nWhat action should the robot take to {instruction}?<|im_end|>\n<|im_start|>assistant\n"
)
"""MiniVLA's prompt for its Qwen2.5 backbone (the Qwen chat format of ``QwenPromptBuilder`` in
Stanford-ILIAD/openvla-mini); pass it as ``prompt_template`` for real MiniVLA checkpoints."""

LIBERO_IMAGE_KEYS = ("agentview_image", "wrist_image")
"""Image keys of the LIBERO observation dict (third-person camera, wrist camera)."""

_LORA_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"


# ---------------------------------------------------------------------------------- samples
@dataclass
class VLASamples:
    """Actions sampled by :meth:`VLAPolicy.sample`, with what GRPO needs to score them again.

    Rows are laid out observation after observation, ``group_size`` rows each (row
    ``i * group_size + j`` is sample j of observation i), so one observation's rows form a GRPO
    group. :meth:`concat` joins the samples of several calls (e.g. all steps of G episodes).

    Attributes:
        prompts: per observation, the prompt text (str) given to the processor.
        images: per observation, the list of uint8 (H, W, 3) images (copies of the observation's
            ``image_keys`` images); the processor is re-run on them when log-probabilities are
            computed, so only the raw images are kept in memory, not pixel tensors.
        obs_index: int64 tensor (N,): the observation of each row.
        tokens: int64 tensor (N, T) of sampled action token ids, ``T = chunk * action_dim`` (bins) or ``groups`` (VQ).
        logprobs: float32 tensor (N, T): log-probabilities of ``tokens`` under the sampling
            policy (restricted distribution at the policy's temperature).
        actions: float32 array (N, chunk, action_dim), decoded normalised actions ([-1, 1] for
            the bins).
        group_size: G of the call(s) (rows per observation; 0 after concatenating calls with
            different G).
        chunk: action steps per sample.
    """

    prompts: list[str]
    images: list[list[np.ndarray]]
    obs_index: torch.Tensor
    tokens: torch.Tensor
    logprobs: torch.Tensor
    actions: np.ndarray
    group_size: int
    chunk: int

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def mask(self) -> torch.Tensor:
        """(N, T) float ones: every row has exactly ``T`` action tokens."""
        return torch.ones(self.tokens.shape, dtype=torch.float32)

    def select(self, rows: Sequence[int]) -> "VLASamples":
        """The samples of ``rows`` (in that order), with only the observations they use.

        Raises:
            IndexError: a row out of range.
        """
        rows_t = torch.as_tensor(list(rows), dtype=torch.long)
        if len(rows_t) and (int(rows_t.min()) < 0 or int(rows_t.max()) >= len(self)):
            raise IndexError(f"rows {list(rows)} out of range for {len(self)} samples")
        obs = self.obs_index[rows_t].tolist()
        keep = list(dict.fromkeys(obs))
        new_of = {o: i for i, o in enumerate(keep)}
        return VLASamples(
            prompts=[self.prompts[o] for o in keep],
            images=[self.images[o] for o in keep],
            obs_index=torch.tensor([new_of[o] for o in obs], dtype=torch.long),
            tokens=self.tokens[rows_t],
            logprobs=self.logprobs[rows_t],
            actions=self.actions[rows_t.numpy()],
            group_size=self.group_size if len(keep) * self.group_size == len(rows_t) else 0,
            chunk=self.chunk,
        )

    @staticmethod
    def concat(parts: Sequence["VLASamples"]) -> "VLASamples":
        """Join samples of several :meth:`VLAPolicy.sample` calls (rows and observations in order).

        Raises:
            ValueError: no parts, or parts with different token counts per row.
        """
        if not parts:
            raise ValueError("nothing to concatenate")
        t = {p.tokens.shape[1] for p in parts}
        if len(t) != 1:
            raise ValueError(f"samples have different tokens per row: {sorted(t)}")
        prompts, images, idx = [], [], []
        for p in parts:
            idx.append(p.obs_index + len(prompts))
            prompts += p.prompts
            images += p.images
        gs = {p.group_size for p in parts}
        return VLASamples(
            prompts=prompts,
            images=images,
            obs_index=torch.cat(idx),
            tokens=torch.cat([p.tokens for p in parts]),
            logprobs=torch.cat([p.logprobs for p in parts]),
            actions=np.concatenate([p.actions for p in parts]),
            group_size=gs.pop() if len(gs) == 1 else 0,
            chunk=parts[0].chunk,
        )


# ---------------------------------------------------------------------------------- policy
class VLAPolicy:
    """LoRA-adapted vision-language model that emits OpenVLA-style action tokens (GRPO policy).

    The frozen reference policy is the same model with the adapters disabled, so policy and
    reference cost one model in memory. The model is kept in eval mode (no dropout; LoRA dropout
    defaults to 0), so sampling and :meth:`grpo_logprobs` compute the same distribution. It is
    an :class:`agents.grpo.GRPOPolicy`: :func:`agents.grpo.grpo_update` trains it on samples of
    :meth:`sample` (old log-probs recorded at sampling: ``old_logprobs=samples.logprobs``).

    Args:
        model: a Hugging Face image-text-to-text model (e.g. ``LlavaForConditionalGeneration``;
            from :func:`load_vla` or :func:`build_tiny_vla`); wrapped with LoRA adapters on the
            language model's attention/MLP projections unless it already is a ``PeftModel``.
        processor: its processor, called as ``processor(images=[PIL images], text=[prompt],
            return_tensors="pt")``; ``processor.tokenizer`` gives the pad id.
        action_tokenizer: an :class:`ActionTokenizer` (default: 256 bins on [-1, 1] ending at
            ``action_vocab_size``) or a :class:`~agents.vla.action_tokenizer.VQActionTokenizer`
            (MiniVLA's VQ models: ``groups`` tokens per sample decode to a chunk of ``horizon``
            actions, of which the first ``chunk`` are kept).
        action_vocab_size: where the action ids end (exclusive) when ``action_tokenizer`` is not
            given; default: OpenVLA's ``text_config.vocab_size - pad_to_multiple_of`` when the
            model config carries ``n_action_bins`` (HF OpenVLA), else ``len(processor.tokenizer)``
            (MiniVLA's "extra" tokenizer, the tiny test model).
        chunk: action steps per sample (bins: ``chunk * action_dim`` tokens are sampled; VQ:
            1..horizon, default 1 as the authors' LIBERO evaluation).
        prompt_template: format string with ``{instruction}`` (default :data:`OPENVLA_PROMPT`;
            :data:`MINIVLA_QWEN_PROMPT` for MiniVLA checkpoints).
        image_keys: observation keys of the images given to the model, in order (default the
            third-person ``agentview_image`` only, as OpenVLA/MiniVLA; add ``"wrist_image"`` for
            MiniVLA's wrist variants / multi-image backbones).
        image_placeholder: text put before the prompt once per image (LLaVA's ``"<image>"``);
            ``"auto"`` uses ``processor.image_token`` when the processor has one, else nothing
            (OpenVLA's Prismatic processor inserts the image itself).
        flip_images: rotate images by 180° (OpenVLA/MiniVLA LIBERO models were trained on
            ``img[::-1, ::-1]`` of LIBERO's raw renders; leave False when the env already does it:
            ``LiberoEnv(image_flip="rot180")`` for OpenVLA-7B, the default ``"vertical"`` for
            openvla-mini's MiniVLA).
        temperature: sampling temperature τ; log-probabilities use the same τ.
        lora_r, lora_alpha, lora_dropout: LoRA hyper-parameters.
        target_modules: peft ``target_modules`` (default: a regex for q/k/v/o and gate/up/down
            projections inside ``language_model``; the vision tower stays frozen and unadapted).
        seed: seed of the sampling generator (call ``k`` uses seed ``seed * 1_000_003 + k``).

    Raises:
        ValueError: non-positive temperature or chunk, no image key, an action id range
            beyond the model's output size, or no ``action_tokenizer`` for a checkpoint whose
            config names a VQ action tokenizer.
    """

    def __init__(
        self,
        model: Any,
        processor: Any,
        *,
        action_tokenizer: ActionTokenizer | VQActionTokenizer | None = None,
        action_vocab_size: int | None = None,
        chunk: int = 1,
        prompt_template: str = OPENVLA_PROMPT,
        image_keys: Sequence[str] = ("agentview_image",),
        image_placeholder: str | None = "auto",
        flip_images: bool = False,
        temperature: float = 1.0,
        lora_r: int = 16,
        lora_alpha: int = 32,
        lora_dropout: float = 0.0,
        target_modules: str | Sequence[str] | None = None,
        seed: int = 0,
    ) -> None:
        from peft import LoraConfig, PeftModel, get_peft_model

        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        if not image_keys:
            raise ValueError("image_keys must name at least one image of the observation")
        tokenizer = getattr(processor, "tokenizer", processor)
        run_tokenizer = getattr(getattr(model, "config", None), "action_tokenizer", None)
        if action_tokenizer is None and isinstance(run_tokenizer, str) and "vq" in run_tokenizer:
            raise ValueError(f"this checkpoint was trained with VQ action tokens ({run_tokenizer}); decoding them as "
                             "bins would give wrong actions: pass action_tokenizer=VQActionTokenizer("
                             "model.config.action_vocab_size, VQ_FOLDER) (agents.vla.load.prismatic_vq_folder finds it)")
        if action_tokenizer is None:
            if action_vocab_size is None:
                action_vocab_size = default_action_vocab_size(model, tokenizer)
            action_tokenizer = ActionTokenizer(action_vocab_size)
        action_tokenizer.n_tokens(chunk)  # a VQ tokenizer refuses chunk > horizon here
        n_out = _output_size(model)
        if n_out is not None and action_tokenizer.token_end > n_out:
            raise ValueError(f"action ids end at {action_tokenizer.token_end} but the model has only {n_out} outputs")
        if not isinstance(model, PeftModel):
            cfg = LoraConfig(
                r=lora_r,
                lora_alpha=lora_alpha,
                lora_dropout=lora_dropout,
                target_modules=target_modules if target_modules is not None else _LORA_TARGETS,
                bias="none",
            )
            with warnings.catch_warnings():  # peft calls a transformers method deprecated in 5.x
                warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
                model = get_peft_model(model, cfg)
        model.eval()
        self.model = model
        self.processor = processor
        self.tokenizer = tokenizer
        self.action_tokenizer = action_tokenizer
        self.chunk = int(chunk)
        self.prompt_template = prompt_template
        self.image_keys = tuple(image_keys)
        if image_placeholder == "auto":
            image_placeholder = getattr(processor, "image_token", None)
        self.image_placeholder = image_placeholder
        self.flip_images = bool(flip_images)
        self.temperature = float(temperature)
        self.seed = int(seed)
        self._n_act_calls = 0
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(tokenizer, "eos_token_id", None) or 0
        self.pad_id = int(pad)
        base_forward = inspect.signature(self.model.get_base_model().forward).parameters
        self._cache_kw = "cache" if "cache" in base_forward else "past_key_values"
        self._has_logits_to_keep = "logits_to_keep" in base_forward

    # ------------------------------------------------------------------ properties
    @property
    def tokens_per_sample(self) -> int:
        """T, action tokens per sample: ``chunk * action_dim`` (bins) or ``groups`` (VQ)."""
        return self.action_tokenizer.n_tokens(self.chunk)

    @property
    def device(self) -> torch.device:
        """Device of the model's parameters."""
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------ inputs
    def build_prompt(self, observation: dict[str, Any]) -> str:
        """Prompt text for one observation: placeholders (one per image) + the template.

        Raises:
            KeyError: the observation lacks ``"instruction"``.
            ValueError: the instruction is not a non-empty string.
        """
        instruction = observation["instruction"]
        if not isinstance(instruction, str) or not instruction.strip():
            raise ValueError(f"the observation's instruction must be a non-empty string, got {instruction!r}")
        instruction = instruction.strip().lower()
        text = self.prompt_template.format(instruction=instruction)
        if self.image_placeholder:
            text = self.image_placeholder * len(self.image_keys) + text
        return text

    def _images(self, observation: dict[str, Any]) -> list[np.ndarray]:
        out = []
        for k in self.image_keys:
            if k not in observation:
                raise KeyError(f"observation lacks image {k!r} (has {sorted(observation)})")
            img = np.asarray(observation[k])
            if img.ndim != 3 or img.shape[-1] != 3 or img.dtype != np.uint8 or 0 in img.shape:
                raise ValueError(f"{k} must be a uint8 (H, W, 3) array with H, W >= 1, got {img.dtype} {img.shape}")
            out.append(img.copy())  # the env may reuse its buffers; samples must keep this step's frame
        return out

    def _encode(self, prompts: Sequence[str], images: Sequence[Sequence[np.ndarray]]) -> dict[str, torch.Tensor]:
        """Processor outputs of several observations, left-padded and collated on the device.

        The processor runs once per observation (so the result of one observation never depends
        on the others in the batch); ``input_ids`` are left-padded with the pad id,
        ``attention_mask`` and other token-aligned (1, n) tensors with 0, every other tensor
        (pixel values, image sizes) is concatenated along its first axis.
        """
        from PIL import Image

        per = []
        for text, imgs in zip(prompts, images):
            pil = [Image.fromarray(np.ascontiguousarray(im[::-1, ::-1] if self.flip_images else im)) for im in imgs]
            enc = self.processor(images=pil, text=[text], return_tensors="pt")
            per.append({k: v for k, v in enc.items() if isinstance(v, torch.Tensor)})
        width = max(int(p["input_ids"].shape[1]) for p in per)
        dev = self.device
        dtype = next(self.model.parameters()).dtype
        out: dict[str, torch.Tensor] = {}
        ids, attn = [], []
        for p in per:
            n = p["input_ids"].shape[1]
            ids.append(torch.cat([torch.full((1, width - n), self.pad_id, dtype=torch.long), p["input_ids"].long()], 1))
            a = p.get("attention_mask", torch.ones(1, n, dtype=torch.long)).long()
            attn.append(torch.cat([torch.zeros(1, width - n, dtype=torch.long), a], 1))
        out["input_ids"] = torch.cat(ids).to(dev)
        out["attention_mask"] = torch.cat(attn).to(dev)
        for k in per[0]:
            if k in ("input_ids", "attention_mask"):
                continue
            parts = [p[k] for p in per]
            if all(v.dim() == 2 and v.shape == p["input_ids"].shape for v, p in zip(parts, per)):
                # token-aligned extras (e.g. token_type_ids, mm_token_type_ids): left-pad with 0 too
                parts = [torch.cat([v.new_zeros(1, width - v.shape[1]), v], 1) for v in parts]
            v = torch.cat(parts)
            out[k] = v.to(dev, dtype=dtype) if v.is_floating_point() else v.to(dev)
        return out

    def _prefill(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Any]:
        """Forward the prompts; returns the last position's logits (B, V) and the cache."""
        kw = dict(inputs, use_cache=True)
        if self._has_logits_to_keep:
            kw["logits_to_keep"] = 1
        out = self.model(**kw)
        cache = getattr(out, "cache", None)
        if cache is None:
            cache = out.past_key_values
        return out.logits[:, -1, :], cache

    def _step(self, ids: torch.Tensor, attn: torch.Tensor, cache: Any) -> torch.Tensor:
        out = self.model(input_ids=ids, attention_mask=attn, use_cache=True, **{self._cache_kw: cache})
        return out.logits

    def _action_logp(self, logits: torch.Tensor) -> torch.Tensor:
        """Log-softmax over the action ids at temperature τ; (..., V) -> (..., n_bins)."""
        at = self.action_tokenizer
        return torch.log_softmax(logits[..., at.token_begin : at.token_end].float() / self.temperature, dim=-1)

    # ------------------------------------------------------------------ acting
    @torch.no_grad()
    def sample(self, observations: Sequence[dict[str, Any]], group_size: int = 1, *, greedy: bool = False) -> VLASamples:
        """Sample ``group_size`` action chunks for each observation (batched over all of them).

        The prompts are encoded once per observation and their key/value cache repeated
        ``group_size`` times; then ``tokens_per_sample`` tokens are drawn one at a time from the softmax
        over the action ids only (temperature τ), so every token is a valid action token.

        Args:
            observations: B LIBERO observation dicts (see the module docstring).
            group_size: G, samples per observation (one GRPO group each).
            greedy: take the most likely token instead of sampling (evaluation; OpenVLA decodes
                greedily); the recorded log-probabilities are still those of the τ-distribution.

        Returns:
            :class:`VLASamples` with B·G rows; ``.actions`` is float32 (B·G, chunk, 7), normalised.

        Raises:
            ValueError: no observations, ``group_size < 1``, or a malformed image.
            KeyError: an observation lacks an image key or the instruction.
        """
        if not observations:
            raise ValueError("sample() needs at least one observation")
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        prompts = [self.build_prompt(o) for o in observations]
        images = [self._images(o) for o in observations]
        g, t_total = int(group_size), self.tokens_per_sample
        inputs = self._encode(prompts, images)
        logits, cache = self._prefill(inputs)
        if g > 1:
            cache.batch_repeat_interleave(g)
            logits = logits.repeat_interleave(g, dim=0)
        attn = inputs["attention_mask"].repeat_interleave(g, dim=0)
        n = attn.shape[0]
        gen = torch.Generator(device=self.device)
        gen.manual_seed(self.seed * 1_000_003 + self._n_act_calls)
        self._n_act_calls += 1
        begin = self.action_tokenizer.token_begin
        toks = torch.empty(n, t_total, dtype=torch.long, device=self.device)
        lps = torch.empty(n, t_total, dtype=torch.float32, device=self.device)
        for t in range(t_total):
            logp = self._action_logp(logits)  # (n, n_bins)
            if greedy:
                k = logp.argmax(dim=-1)
            else:
                k = torch.multinomial(logp.exp(), 1, generator=gen).squeeze(1)
            lps[:, t] = logp.gather(1, k[:, None]).squeeze(1)
            toks[:, t] = k + begin
            if t + 1 < t_total:
                attn = torch.cat([attn, attn.new_ones(n, 1)], dim=1)
                logits = self._step(toks[:, t : t + 1], attn, cache)[:, -1, :]
        toks_cpu = toks.cpu()
        actions = np.ascontiguousarray(self.action_tokenizer.decode_chunk(toks_cpu.numpy())[:, : self.chunk])
        return VLASamples(
            prompts=prompts,
            images=images,
            obs_index=torch.arange(len(prompts)).repeat_interleave(g),
            tokens=toks_cpu,
            logprobs=lps.cpu(),
            actions=actions,
            group_size=g,
            chunk=self.chunk,
        )

    # ------------------------------------------------------------------ log-probs
    def grpo_logprobs(
        self,
        samples: VLASamples,
        rows: Sequence[int] | np.ndarray | torch.Tensor | None = None,
        *,
        reference: bool = False,
        with_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Per-token log-probabilities of sampled action tokens (differentiable w.r.t. LoRA).

        The :class:`agents.grpo.GRPOPolicy` method: :func:`agents.grpo.grpo_update` and
        :func:`agents.grpo.grpo_step` train the policy through it.

        Each distinct observation among ``rows`` is encoded once (images through the vision
        tower, prompt through the LM); its cache is indexed to the rows, which then read their
        T tokens in one teacher-forced pass. Values match :meth:`sample`'s (same restricted
        distribution, same temperature) up to float round-off.

        Args:
            samples: from :meth:`sample` (or :meth:`VLASamples.concat`).
            rows: row indices into ``samples`` (default all), length R.
            reference: score under the frozen reference (adapters disabled, no grad).
            with_entropy: also return per-token entropies of the restricted distribution.

        Returns:
            ``(logprobs, mask, entropy)``: float32 (R, T) log-probabilities on the model's device,
            the (R, T) float mask (all ones: samples have fixed length), and (R, T) entropies or
            ``None``.

        Raises:
            IndexError: a row index is out of range.
        """
        if rows is None:
            rows_t = torch.arange(len(samples))
        else:
            rows_t = torch.as_tensor(np.asarray(rows, dtype=np.int64))
        if rows_t.numel() and (rows_t.min() < 0 or rows_t.max() >= len(samples)):
            raise IndexError(f"row index out of range for {len(samples)} samples")
        if reference:
            with torch.no_grad(), self.model.disable_adapter():
                lp, mask, ent = self._logprobs(samples, rows_t, with_entropy)
            return lp.detach(), mask, None if ent is None else ent.detach()
        return self._logprobs(samples, rows_t, with_entropy)

    def _logprobs(self, samples: VLASamples, rows: torch.Tensor, with_entropy: bool):
        dev = self.device
        obs = samples.obs_index[rows]
        uniq, inv = torch.unique(obs, return_inverse=True)
        inputs = self._encode([samples.prompts[i] for i in uniq.tolist()], [samples.images[i] for i in uniq.tolist()])
        first_logits, cache = self._prefill(inputs)
        inv = inv.to(dev)
        if len(uniq) != len(rows) or not torch.equal(inv, torch.arange(len(rows), device=dev)):
            cache.batch_select_indices(inv)
        first_logits = first_logits[inv]
        toks = samples.tokens[rows].to(dev)
        r, t_total = toks.shape
        logits = [first_logits[:, None, :]]
        if t_total > 1:
            attn = torch.cat([inputs["attention_mask"][inv], inputs["attention_mask"].new_ones(r, t_total - 1)], dim=1)
            logits.append(self._step(toks[:, :-1], attn, cache))
        logp_all = self._action_logp(torch.cat(logits, dim=1))  # (R, T, n_bins)
        k = toks - self.action_tokenizer.token_begin
        lp = logp_all.gather(-1, k.unsqueeze(-1)).squeeze(-1)
        mask = torch.ones(r, t_total, dtype=torch.float32, device=dev)
        ent = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
        return lp, mask, ent

    # ------------------------------------------------------------------ params / io
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The LoRA parameters (the only ones the optimiser updates)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """Copy of the LoRA weights (parameter name -> CPU tensor)."""
        return {n: p.detach().cpu().clone() for n, p in self.model.named_parameters() if p.requires_grad}

    def load_adapter_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load weights from :meth:`adapter_state_dict`.

        Raises:
            KeyError: a LoRA parameter is missing from ``state``.
            ValueError: a tensor's shape differs (other LoRA rank?).
        """
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                if not p.requires_grad:
                    continue
                if n not in state:
                    raise KeyError(f"adapter checkpoint lacks parameter {n!r}; was it saved with other LoRA settings?")
                if tuple(state[n].shape) != tuple(p.shape):
                    raise ValueError(f"parameter {n!r}: checkpoint shape {tuple(state[n].shape)} != model {tuple(p.shape)}")
                p.copy_(state[n])

    def save_adapter(self, folder: str | Path) -> None:
        """Save the LoRA adapter with peft's ``save_pretrained`` (loadable by peft users)."""
        self.model.save_pretrained(str(folder))


# ---------------------------------------------------------------------------------- helpers
def _output_size(model: Any) -> int | None:
    try:
        emb = model.get_output_embeddings()
        if emb is not None and hasattr(emb, "weight"):
            return int(emb.weight.shape[0])
    except (AttributeError, NotImplementedError):
        pass
    return None


def default_action_vocab_size(model: Any, tokenizer: Any) -> int:
    """Where a checkpoint's action token ids end (exclusive).

    A model whose config states it (``config.action_vocab_size``: Prismatic runs, from their action
    tokenizer's name, :func:`agents.vla.load.load_prismatic_vla`) gives it; OpenVLA's Hugging Face
    models (config with ``n_action_bins``): ``text_config.vocab_size - pad_to_multiple_of`` (the
    Llama vocabulary before padding); otherwise ``len(tokenizer)`` (MiniVLA's "extra" Qwen2.5
    tokenizer, the tiny test model).
    """
    cfg = getattr(model, "config", None)
    if cfg is not None and getattr(cfg, "action_vocab_size", None) is not None:
        return int(cfg.action_vocab_size)
    if cfg is not None and getattr(cfg, "n_action_bins", None) is not None:
        text_cfg = getattr(cfg, "text_config", None)
        vocab = getattr(text_cfg, "vocab_size", None)
        pad = getattr(cfg, "pad_to_multiple_of", None) or 0
        if vocab is not None:
            return int(vocab) - int(pad)
    return len(tokenizer)
