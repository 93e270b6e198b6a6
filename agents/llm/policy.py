"""``LLMPolicy``: a causal language model with LoRA adapters that writes solutions.

The policy samples G completions per prompt (one GRPO group), turns each completion into an
action (Python source for AutoResearch), and computes per-token log-probabilities of its
own samples for the GRPO loss: it is an :class:`agents.grpo.GRPOPolicy`
(:meth:`LLMPolicy.grpo_logprobs` on the flat rows of :class:`PolicySamples`), so
:func:`agents.grpo.grpo_update` trains it. The frozen reference policy is the same
backbone with the LoRA adapters disabled, so policy, reference — and the LLM judge world
model, when it shares the backbone — cost one model in memory (with ``finetune="full"`` the
reference is a frozen copy). Every tensor is built on the model's device.

Two solution modes:

* ``"line"`` (default on CPU): the agent writes only the line ``model = ...`` of the task's
  working starter script (the prompt shows the script's scikit-learn imports and its current
  model line, and the assistant turn is pre-filled with the imports up to ``model =``); the
  action is the starter script with that line replaced. A 135M model cannot write whole
  working scripts (measured: 0 of 8 valid), but single lines give GRPO a signal (syntax error
  0 < runtime error 0.1 < valid 0.5+): 11 of 32 sampled lines built an estimator in a probe
  (showing a placeholder ``model = ...`` instead made the model copy the placeholder).
* ``"script"``: the agent writes the whole script from the observation's task description
  (the GPU-scale configuration with bigger backbones).

Log-probabilities are computed group by group with the prompt encoded once and its key/value
cache repeated for the G completions (exact, and ``P + G·C`` instead of ``G·(P + C)`` tokens).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import torch

from agents.llm.sampling import sample_groups

__all__ = ["LLMPolicy", "PolicySamples", "extract_code"]

_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", re.S)


def extract_code(text: str) -> str:
    """Python source from a completion: the first fenced block if any, else the text itself."""
    m = _FENCE.search(text)
    return (m.group(1) if m else text).strip("\n")


@dataclass
class PolicySamples:
    """Completions of one step, grouped (all outer lists have one entry per group).

    Attributes:
        prompt_ids: token ids of each group's prompt (list[int], unpadded).
        completion_ids: per group, G lists of completion token ids (the sampled tokens,
            ending with EOS/stop token when generation stopped early).
        texts: per group, G decoded completions (str).
        new_tokens: total number of completion tokens sampled (int).
    """

    prompt_ids: list[list[int]]
    completion_ids: list[list[list[int]]]
    texts: list[list[str]]
    new_tokens: int

    def __len__(self) -> int:
        """Rows: completions over all groups (row ``r`` counts group after group)."""
        return sum(len(c) for c in self.completion_ids)

    def row_positions(self, rows: Sequence[int]) -> list[tuple[int, int]]:
        """``(group, completion)`` of each flat row index.

        Raises:
            IndexError: a row outside ``0 … len(self) − 1``.
        """
        flat = [(gi, j) for gi, c in enumerate(self.completion_ids) for j in range(len(c))]
        out = []
        for r in rows:
            if not 0 <= int(r) < len(flat):
                raise IndexError(f"row {int(r)} is outside the {len(flat)} sampled completions")
            out.append(flat[int(r)])
        return out


class LLMPolicy:
    """LoRA-adapted causal LM policy for GRPO.

    Args:
        model: a ``transformers`` causal LM (e.g. from
            :func:`wmrl_envs.world_models.load_smollm2`); it is wrapped with LoRA adapters
            (peft) unless it already is a ``PeftModel``.
        tokenizer: its tokenizer (needs a chat template).
        mode: ``"line"`` or ``"script"`` (see the module docstring).
        lora_r, lora_alpha, lora_dropout: LoRA hyper-parameters.
        target_modules: modules that get adapters (default: attention and MLP projections).
        max_new_tokens: completion budget in tokens.
        temperature: sampling temperature; log-probabilities use the same temperature, so the
            sampled distribution and the optimised one agree.
        seed: seed of the sampling generator.
        finetune: ``"lora"`` (default): train LoRA adapters; the frozen reference of the KL is the
            same backbone with the adapters disabled (no second copy in memory). ``"full"``: train
            every weight; the reference is a frozen copy made here (:attr:`reference_model`,
            twice the weights' memory).
        gradient_checkpointing: recompute activations in the backward pass (transformers'
            gradient checkpointing) to fit longer completions or bigger backbones in memory;
            the update's forward then scores prompt and completion in one pass (no key/value
            cache), which gives the same log-probabilities.
        reference_prompt_cache: how many prompts' key/value caches under the frozen reference
            are kept between calls (least recently used dropped first; 0: none). The reference
            never changes, so a task's prompt is encoded under it once per run instead of once
            per step (bitwise the same log-probabilities); about 46 KB per prompt token for
            SmolLM2-135M in float32 (17 MB for a 370-token prompt).
        baseline: line mode: the ``model = ...`` line the prompt shows as the script's current
            model, :data:`~wmrl_envs.envs.autoresearch.tasks.BASELINE_MODELS` or ``"starter"``
            (the task's own starter line; checked when a prompt is built). The agent's line
            replaces it in the task's starter script either way.
        shown_lines: line mode: per task id, the line to show instead of ``baseline``'s (``wmrl
            train --baseline board-low`` passes each task's weakest leaderboard entry,
            :func:`agents.train.relative.shown_model_line`); tasks not in it show ``baseline``'s.

    Attributes:
        reference_model: the frozen reference with ``finetune="full"`` (``None`` with LoRA).
        device: the ``torch.device`` of the model; every tensor of sampling and log-probs is
            built there.
        n_sample_calls: calls of :meth:`sample` so far (int); the k-th call draws from per-row
            generators seeded from ``seed * 1_000_003 + k`` and the row's index
            (:func:`agents.llm.sampling.row_generators`), so ``(seed, n_sample_calls)`` is the
            whole sampling state (a checkpoint saves it; setting both restarts a stream).

    Raises:
        ValueError: unknown mode or finetune, or non-positive temperature.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        mode: Literal["line", "script"] = "line",
        lora_r: int = 16,
        lora_alpha: int = 32,
        lora_dropout: float = 0.0,
        target_modules: Sequence[str] | None = None,
        max_new_tokens: int = 32,
        temperature: float = 1.0,
        seed: int = 0,
        finetune: Literal["lora", "full"] = "lora",
        gradient_checkpointing: bool = False,
        reference_prompt_cache: int = 16,
        baseline: str = "starter",
        shown_lines: Mapping[str, str] | None = None,
    ) -> None:
        from peft import LoraConfig, PeftModel, get_peft_model

        if mode not in ("line", "script"):
            raise ValueError(f"mode must be 'line' or 'script', got {mode!r}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if finetune not in ("lora", "full"):
            raise ValueError(f"finetune must be 'lora' (adapters) or 'full' (every weight), got {finetune!r}")
        self.finetune = finetune
        self.reference_model = None
        if finetune == "full":
            if isinstance(model, PeftModel):
                raise ValueError("finetune='full' needs a plain transformers model, got a PeftModel (use finetune='lora')")
            import copy

            self.reference_model = copy.deepcopy(model).eval()
            for q in self.reference_model.parameters():
                q.requires_grad_(False)
            for q in model.parameters():
                q.requires_grad_(True)
        elif not isinstance(model, PeftModel):
            cfg = LoraConfig(
                r=lora_r,
                lora_alpha=lora_alpha,
                lora_dropout=lora_dropout,
                target_modules=list(target_modules or ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
                bias="none",
                task_type="CAUSAL_LM",
            )
            model = get_peft_model(model, cfg)
        self.gradient_checkpointing = bool(gradient_checkpointing)
        if self.gradient_checkpointing:
            enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.x's name
            if enable is not None:
                enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if finetune == "lora" and hasattr(model, "enable_input_require_grads"):
                model.enable_input_require_grads()  # frozen embeddings: checkpointed blocks still need a grad path
        self.model = model
        self.tokenizer = tokenizer
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.mode = mode
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.seed = int(seed)
        self.n_sample_calls = 0
        self.reference_prompt_cache = int(reference_prompt_cache)
        self.baseline = str(baseline)
        """Line mode: the model line shown as the script's current one
        (:meth:`~wmrl_envs.envs.autoresearch.tasks.TaskSpec.baseline_model_line`)."""
        self.shown_lines: dict[str, str] = dict(shown_lines or {})
        """Line mode: per task id, the line shown instead of ``baseline``'s."""
        self._prompt_cache: dict[tuple[int, ...], Any] = {}
        self.sampler: Any = None
        """A :class:`agents.llm.vllm_server.VLLMServerSampler` that samples instead of ``generate`` (set by the
        trainer with ``--vllm-url``; ``None``: local ``transformers`` generation)."""

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters."""
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------ prompts
    def build_prompt(self, observation: dict[str, Any], task: Any | None = None,
                     history: Sequence[tuple[str, str]] = ()) -> str:
        """The chat-formatted prompt (with the assistant turn pre-filled) for one observation.

        Args:
            observation: AutoResearch observation dict (keys ``task_id``, ``prompt``, ...).
            task: the task's spec (needed in ``"line"`` mode: its ``overview``, ``metric``,
                ``higher_is_better`` and ``starter_code``).
            history: a multi-turn episode's earlier turns, ``(completion, feedback)`` each: the
                completion the policy wrote (as sampled, without the pre-filled prefix) and the
                feedback it got (real on anchor groups, predicted by the world model otherwise).
                Each becomes an assistant message and a user message with the feedback, before
                the new pre-filled assistant turn.

        Returns:
            The prompt text (str), ending where the model should continue.
        """
        if self.mode == "line":
            if task is None:
                raise ValueError("line mode needs the task spec (task=get_task(observation['task_id']))")
            imports = "\n".join(
                ln for ln in task.starter_code.splitlines() if ln.startswith(("from sklearn", "import sklearn"))
            )
            direction = "higher" if task.higher_is_better else "lower"
            overview = " ".join(str(task.overview).split())[:400]
            current = (self.shown_lines[task.task_id] if task.task_id in self.shown_lines
                       else next(ln for ln in task.starter_code.splitlines() if ln.startswith("model ="))
                       if self.baseline == "starter" else task.baseline_model_line(self.baseline))
            # Issue 28 measured a shorter prompt (imports only in the pre-fill, the overview without its
            # evaluation/submission clauses: ~365 -> ~242 tokens): the untrained policy's valid-action share
            # fell from 61/160 to 48/160 (benchmarks/sampling_cost.py), so the imports stay shown here.
            user = (
                f"Task: {overview}\nMetric: {task.metric} ({direction} is better).\n"
                f"Here is the current model of the script:\n```python\n{imports}\n{current}\n```\n"
                "Write one better line that creates `model`."
            )
            msgs = [
                {"role": "system", "content": "You are an expert machine-learning engineer who writes scikit-learn code."},
                {"role": "user", "content": user},
            ]
            # No trailing space after "=": the tokenizer attaches the space to the next word.
            prefix = f"```python\n{imports}\nmodel ="
        else:
            user = (
                f"{observation['prompt']}\n\nWrite a complete Python script that solves the task "
                "and writes submission.csv. Reply with the code only."
            )
            msgs = [
                {"role": "system", "content": "You are an expert machine-learning engineer."},
                {"role": "user", "content": user},
            ]
            prefix = "```python\n"
        ask = ("Write one better line that creates `model`." if self.mode == "line"
               else "Improve the script. Reply with the code only.")
        for completion, feedback in history:
            said = prefix + (completion.splitlines() or [""])[0] + "\n```" if self.mode == "line" else (
                prefix + extract_code(completion) + "\n```")
            msgs += [{"role": "assistant", "content": said},
                     {"role": "user", "content": f"Result of running it:\n{feedback}\n\n{ask}"}]
        text = self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return text + prefix

    def completion_to_action(self, completion: str, task: Any | None = None) -> str:
        """Turn a completion into the action (Python source).

        In line mode the first line of the completion becomes ``model = <line>`` in the
        task's starter script; in script mode the code is extracted from the completion.
        """
        if self.mode == "line":
            # any line boundary ends the line (a sampled "\r" or U+2028 must not break the script)
            line = (completion.splitlines() or [""])[0].rstrip()
            return task.starter_code_with("model =" + line)
        return extract_code(completion)

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def sample(self, prompts: Sequence[str], group_size: int) -> PolicySamples:
        """Sample ``group_size`` completions for each prompt (batched over all of them).

        Args:
            prompts: one prompt per group (from :meth:`build_prompt`).
            group_size: G, completions per prompt.

        Returns:
            :class:`PolicySamples`.

        Each prompt is encoded once and its key/value cache repeated for its G rows
        (:func:`agents.llm.sampling.sample_groups`; ``generate`` encoded it once per row). Tokens
        are drawn from ``softmax(logits / temperature)`` with local ``torch.Generator`` streams,
        one per row, seeded from ``seed * 1_000_003 + k`` for the k-th call and the row's index:
        the same seed gives the same completions whether the rows are sampled together or one
        by one, and the global torch RNG is neither read nor reseeded. A row ends after the
        token that completes its stop string (``"\n"`` in line mode, a closing fence in script
        mode; kept) or after EOS (kept), and is never padded.
        """
        tok = self.tokenizer
        if self.sampler is not None:  # a vLLM server with the last synced adapter (agents/llm/vllm_server.py)
            enc = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
            ids = self.sampler.sample(prompts, group_size, max_new_tokens=self.max_new_tokens,
                                      temperature=self.temperature, stop=["\n"] if self.mode == "line" else ["```"],
                                      seed=self.seed * 1_000_003 + self.n_sample_calls)
            self.n_sample_calls += 1
            return self._samples(enc, [seq for per in ids for seq in per], group_size)
        was_training = self.model.training
        self.model.eval()
        try:
            enc = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
            seed = self.seed * 1_000_003 + self.n_sample_calls
            self.n_sample_calls += 1
            gen = sample_groups(self.model, tok, enc, group_size, seed=seed, max_new_tokens=self.max_new_tokens,
                                temperature=self.temperature, stop=["\n"] if self.mode == "line" else ["```"])
        finally:
            self.model.train(was_training)
        return self._samples(enc, gen, group_size)

    def _samples(self, enc: list[list[int]], gen: list[list[int]], group_size: int) -> PolicySamples:
        """:class:`PolicySamples` from the prompts' ids and the generated ids (prompt after prompt,
        G each): each completion is cut at its first EOS (kept) or padding."""
        tok = self.tokenizer
        prompts, pad = enc, tok.pad_token_id
        completion_ids: list[list[list[int]]] = []
        texts: list[list[str]] = []
        eos = {tok.eos_token_id, pad}
        n_new = 0
        for gi in range(len(prompts)):
            cids, ctexts = [], []
            for j in range(group_size):
                seq = gen[gi * group_size + j]
                # cut at the first EOS (keep it: the policy chose to stop) or at padding
                cut = len(seq)
                for k, t in enumerate(seq):
                    if t in eos:
                        cut = k + 1 if t == tok.eos_token_id else k
                        break
                seq = (seq[:cut] if cut > 0 else seq[:1]) or [tok.eos_token_id]  # never an empty row
                n_new += len(seq)
                cids.append(seq)
                ctexts.append(tok.decode(seq, skip_special_tokens=True))
            completion_ids.append(cids)
            texts.append(ctexts)
        return PolicySamples(enc, completion_ids, texts, n_new)

    # ------------------------------------------------------------------ log-probs
    def grpo_logprobs(
        self, samples: PolicySamples, rows: Sequence[int], *, reference: bool = False, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Per-token log-probabilities of the sampled completions ``rows`` (the
        :class:`agents.grpo.GRPOPolicy` protocol).

        Consecutive rows of one group are scored in one :meth:`group_logprobs` call (prompt
        encoded once); the parts are right-padded to the longest and stacked in the order of
        ``rows``. The model is put in training mode first (these are the update's forward
        passes; :meth:`sample` keeps its own mode).

        Args:
            samples: the :class:`PolicySamples` the rows index (flat, group after group).
            rows: B flat row indices.
            reference: score under the frozen reference (adapters disabled, no grad).
            with_entropy: also return per-token entropies.

        Returns:
            ``(logprobs, mask, entropy)``: float32 (B, T) tensors (0 at padding) and (B, T)
            entropies or ``None``.

        Raises:
            ValueError: no rows.
            IndexError: a row outside the samples.
        """
        pos = samples.row_positions(rows)
        if not pos:
            raise ValueError("grpo_logprobs needs at least one row")
        self.model.train()
        runs: list[tuple[int, list[int]]] = []
        for gi, j in pos:
            if runs and runs[-1][0] == gi:
                runs[-1][1].append(j)
            else:
                runs.append((gi, [j]))
        parts = [
            self.group_logprobs(samples.prompt_ids[gi], [samples.completion_ids[gi][j] for j in js],
                                reference=reference, with_entropy=with_entropy)
            for gi, js in runs
        ]
        if len(parts) == 1:
            return parts[0]
        width = max(p[0].shape[1] for p in parts)

        def stack(i: int) -> torch.Tensor:
            return torch.cat([torch.nn.functional.pad(p[i], (0, width - p[i].shape[1])) for p in parts])

        return stack(0), stack(1), stack(2) if with_entropy else None

    def group_logprobs(
        self,
        prompt_ids: Sequence[int],
        completion_ids: Sequence[Sequence[int]],
        *,
        reference: bool = False,
        with_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Per-token log-probabilities of G completions of one prompt.

        The prompt is encoded once; its key/value cache is repeated G times for the
        completions (exact, gradients flow through both parts).

        Args:
            prompt_ids: the prompt's token ids, length P.
            completion_ids: G completions (token id lists, lengths <= C).
            reference: use the frozen reference (adapters disabled, no grad).
            with_entropy: also return per-token entropies of the sampling distribution.

        Returns:
            ``(logprobs, mask, entropy)``: float32 tensors of shape (G, C) (log-probs at
            temperature ``self.temperature``), the (G, C) float mask of real tokens, and
            (G, C) entropies or ``None``.
        """
        if reference:
            if self.reference_model is not None:
                with torch.no_grad():
                    lp, mask, ent = self._group_logprobs(prompt_ids, completion_ids, with_entropy, self.reference_model,
                                                         reuse_prompt=True)
            else:
                with torch.no_grad(), self.model.disable_adapter():
                    lp, mask, ent = self._group_logprobs(prompt_ids, completion_ids, with_entropy, reuse_prompt=True)
            return lp.detach(), mask, None if ent is None else ent.detach()
        return self._group_logprobs(prompt_ids, completion_ids, with_entropy)

    def _group_logprobs(self, prompt_ids, completion_ids, with_entropy, model=None, reuse_prompt=False):
        """:meth:`group_logprobs`'s work; ``reuse_prompt``: the model is the frozen reference, so the
        prompt's key/value cache may come from (and go to) :attr:`_prompt_cache`."""
        model = self.model if model is None else model
        dev = self.device
        g = len(completion_ids)
        c = max(len(x) for x in completion_ids)
        pad = self.tokenizer.pad_token_id
        comp = torch.tensor([list(x) + [pad] * (c - len(x)) for x in completion_ids], device=dev)
        mask = torch.tensor([[1.0] * len(x) + [0.0] * (c - len(x)) for x in completion_ids], device=dev)
        p = torch.tensor([list(prompt_ids)], device=dev)
        if self.gradient_checkpointing and model.training:
            # checkpointed blocks cannot return a key/value cache: one pass over prompt + completion
            full = torch.cat([p.expand(g, -1), comp], dim=1)
            out = model(input_ids=full, use_cache=False, logits_to_keep=c + 1)  # no logits over the prompt
            logits = out.logits[:, :-1, :].float() / self.temperature
        else:
            key = tuple(int(x) for x in prompt_ids)
            hit = self._prompt_cache.get(key) if reuse_prompt else None
            if hit is None:
                # only the last prompt position's logits are used: the head is not run over the prompt
                out_p = model(input_ids=p, use_cache=True, logits_to_keep=1)
                cache = out_p.past_key_values if getattr(out_p, "cache", None) is None else out_p.cache
                first_logits = out_p.logits[:, -1:, :]
                if reuse_prompt and hasattr(cache, "layers") and self.reference_prompt_cache > 0:
                    # the frozen reference's prompt encoding never changes: kept for the next steps
                    self._prompt_cache[key] = ([(la.keys, la.values) for la in cache.layers], first_logits)
                    while len(self._prompt_cache) > self.reference_prompt_cache:
                        self._prompt_cache.pop(next(iter(self._prompt_cache)))
            else:
                from transformers import DynamicCache

                self._prompt_cache[key] = self._prompt_cache.pop(key)  # most recently used last
                cache, first_logits = DynamicCache(ddp_cache_data=hit[0]), hit[1]
            cache.batch_repeat_interleave(g)
            attn = torch.ones(g, p.shape[1] + c, dtype=torch.long, device=dev)
            out_c = model(input_ids=comp, cache=cache, attention_mask=attn, use_cache=False)
            first = first_logits.expand(g, 1, -1)
            logits = torch.cat([first, out_c.logits[:, :-1, :]], dim=1).float() / self.temperature
        logp_all = torch.log_softmax(logits, dim=-1)
        lp = logp_all.gather(-1, comp.unsqueeze(-1)).squeeze(-1) * mask
        ent = None
        if with_entropy:
            ent = -(logp_all.exp() * logp_all).sum(-1) * mask
        return lp, mask, ent

    # ------------------------------------------------------------------ params / io
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The trained parameters: the LoRA weights, or every weight with ``finetune="full"``."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """Copy of the trained weights (name -> tensor): the LoRA weights, or every weight with
        ``finetune="full"``."""
        return {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad}

    def load_adapter_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load weights from :meth:`adapter_state_dict`.

        Raises:
            KeyError: a LoRA parameter is missing from ``state``.
        """
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for n, p in params.items():
                if p.requires_grad:
                    if n not in state:
                        raise KeyError(f"adapter checkpoint lacks parameter {n!r}; was it saved with other LoRA settings?")
                    p.copy_(state[n])

    def save_adapter(self, folder: str | Path) -> None:
        """Save the LoRA adapter with peft's ``save_pretrained`` (loadable by peft users)."""
        self.model.save_pretrained(str(folder))
