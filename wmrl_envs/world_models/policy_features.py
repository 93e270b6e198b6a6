"""A causal LM's own representation of (context, action) as a learned world model's features
(:class:`PolicyHiddenStateFeaturizer`), for LLM policies.

A group's rollouts share their context, and the backbone is frozen while the head learns, so the
context's part of the forward pass is the same every time: it is computed once per distinct
context text and its key/value cache and hidden states are kept (least recently used dropped
first), and each action then runs only its own tokens on top of that cache. For the main job's
AutoResearch features that divides a prediction's CPU by about 2–3 (a ~40-token task text, a
~25-token solution line). The math of the learned world model: ``docs/method.md``, "A world
model that learns from its anchors".
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import nullcontext
from typing import Any, Callable, Sequence

import numpy as np

from wmrl_envs.utils import check_arg

__all__ = ["PolicyHiddenStateFeaturizer"]


def _is_int(v: Any, lo: int) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, np.integer)) and v >= lo


def _as_text(x: Any) -> str:
    return x if isinstance(x, str) else ("" if x is None else str(x))


class PolicyHiddenStateFeaturizer:
    """A causal LM's own representation of prompt + completion as features (for LLM policies):
    the last layer's hidden state mean-pooled over the tokens of ``prompt + completion``, in
    float32, no generation.

    The prompt (``prompt_text(context)``) and the completion (``completion_text(action)``) are
    tokenized apart and the completion's tokens run on the prompt's key/value cache: one forward
    pass per distinct prompt (kept for later calls, ``prompt_cache`` prompts at most) and one per
    batch of completions. The features are those of one forward pass over the concatenated token
    ids (within float32 round-off). A text longer than ``max_length`` tokens keeps its last
    ``max_length`` tokens (where the completion is) and is run whole, without the cache.

    For an LLM policy this is the policy's backbone. The head is refitted on stored features and
    the prompt's cache is reused, so the features must not drift while the policy trains: pass a
    frozen copy (or the reference model), or a ``forward_context`` that disables the trained
    adapters, not the weights being updated.

    Args:
        model: a ``transformers`` causal LM (``output_hidden_states`` is requested per call).
        tokenizer: its tokenizer.
        max_length: tokens per text at most (int >= 1).
        batch_size: completions per forward pass (int >= 1).
        prompt_text, completion_text: turn a context / an action into text (default ``str``).
        forward_context: ``() -> context manager`` entered around the forward passes, e.g. one
            disabling the policy's LoRA adapters (peft's ``disable_adapter()``): frozen features.
        prompt_cache: distinct prompts whose cache is kept between calls (int >= 0; 0: none, each
            call still encodes a prompt once for all its completions). About 46 KB per prompt
            token for SmolLM2-135M in float32.

    Call: ``featurizer(contexts, actions)`` with two sequences of the same length B (lists, not
    bare strings), one context and one action per rollout.

    Returns (call): float32 (B, hidden_size).

    Attributes:
        dim: D = ``model.config.hidden_size``.
        prompt_passes: forward passes over a prompt so far (int; a cached prompt costs none).

    Raises:
        TypeError: ``model`` has no ``config.hidden_size`` or ``tokenizer`` is not callable.
        ValueError: ``max_length``, ``batch_size`` < 1 or ``prompt_cache`` < 0; at call, contexts
            and actions of different lengths or given as a bare string, or a tokenizer with neither
            a pad nor an eos token.
    """

    def __init__(self, model: Any, tokenizer: Any, *, max_length: int = 512, batch_size: int = 8,
                 prompt_text: Callable[[Any], str] = _as_text, completion_text: Callable[[Any], str] = _as_text,
                 forward_context: Callable[[], Any] | None = None, prompt_cache: int = 64) -> None:
        if not isinstance(getattr(getattr(model, "config", None), "hidden_size", None), (int, np.integer)):
            raise TypeError(f"model must be a transformers causal LM with config.hidden_size, got {type(model).__name__}: "
                            "pass e.g. AutoModelForCausalLM.from_pretrained(...) (a frozen copy of the policy)")
        if not callable(tokenizer):
            raise TypeError(f"tokenizer must be callable like a transformers tokenizer, got {type(tokenizer).__name__}: "
                            "pass the model's AutoTokenizer.from_pretrained(...)")
        for name, v in (("max_length", max_length), ("batch_size", batch_size)):
            check_arg(_is_int(v, 1), name, "an integer >= 1", v)
        check_arg(_is_int(prompt_cache, 0), "prompt_cache", "an integer >= 0", prompt_cache)
        check_arg(forward_context is None or callable(forward_context), "forward_context", "None or a callable", forward_context)
        self.model, self.tokenizer = model, tokenizer
        self.max_length, self.batch_size, self.prompt_cache = int(max_length), int(batch_size), int(prompt_cache)
        self.prompt_text, self.completion_text, self.forward_context = prompt_text, completion_text, forward_context
        self.prompt_passes = 0
        self._prompts: OrderedDict[str, tuple[list, Any, int]] = OrderedDict()

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def __call__(self, contexts: Sequence[Any], actions: Sequence[Any]) -> np.ndarray:
        import torch

        hidden = int(self.model.config.hidden_size)
        if isinstance(contexts, str) or isinstance(actions, str):
            raise ValueError("contexts and actions must be sequences with one entry per rollout, got a bare string: "
                             "wrap one rollout as featurizer([context], [action])")
        if len(contexts) != len(actions):
            raise ValueError(f"{len(contexts)} contexts but {len(actions)} actions: pass one context per action")
        rows = [(self.prompt_text(c), self.completion_text(a)) for c, a in zip(contexts, actions)]
        if not rows:
            return np.zeros((0, hidden), np.float32)
        out = np.zeros((len(rows), hidden), np.float32)
        pad = getattr(self.tokenizer, "pad_token", None)
        if pad is None and getattr(self.tokenizer, "eos_token", None) is None:
            raise ValueError("the tokenizer has neither a pad token nor an eos token to pad a batch with: "
                             "set tokenizer.pad_token before featurizing")
        pad_id = self.tokenizer.pad_token_id if pad is not None else self.tokenizer.eos_token_id
        was_training = bool(getattr(self.model, "training", False))
        by_prompt: dict[str, list[tuple[int, list[int]]]] = {}
        whole: list[int] = []
        try:
            self.model.eval()
            with torch.inference_mode(), (self.forward_context() if self.forward_context is not None else nullcontext()):
                for i, (p, c) in enumerate(rows):
                    p_ids = self._prompt_ids(p)
                    c_ids = list(self.tokenizer(c, add_special_tokens=False)["input_ids"])
                    if len(p_ids) + len(c_ids) > self.max_length or not p_ids:
                        whole.append(i)
                    else:
                        by_prompt.setdefault(p, []).append((i, c_ids))
                for p, items in by_prompt.items():
                    self._on_prompt(p, items, pad_id, out)
                for i in whole:
                    ids = (self._prompt_ids(rows[i][0]) + list(self.tokenizer(rows[i][1], add_special_tokens=False)
                                                                ["input_ids"]))[-self.max_length:] or [pad_id]
                    h = self.model(input_ids=torch.tensor([ids], device=self._device()), output_hidden_states=True)
                    out[i] = h.hidden_states[-1][0].float().mean(0).cpu().numpy()
        finally:
            self.model.train(was_training)
        return out

    # ------------------------------------------------------------------ internals
    def _device(self) -> Any:
        return next(self.model.parameters()).device

    def _prompt_ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text)["input_ids"]) if text else []

    def _prompt_state(self, text: str) -> tuple[list, Any, int]:
        """``(the key/value cache's (keys, values) per layer, the last layer's hidden state summed over
        the prompt's P tokens (float32, (H,)), P)`` of one prompt: kept, or from one forward pass."""
        import torch

        hit = self._prompts.get(text)
        if hit is not None:
            self._prompts.move_to_end(text)
            return hit
        ids = torch.tensor([self._prompt_ids(text)], device=self._device())
        res = self.model(input_ids=ids, use_cache=True, output_hidden_states=True, logits_to_keep=1)
        self.prompt_passes += 1
        cache = res.past_key_values if getattr(res, "cache", None) is None else res.cache
        state = ([(la.keys, la.values) for la in cache.layers], res.hidden_states[-1][0].float().sum(0), int(ids.shape[1]))
        if self.prompt_cache > 0:
            self._prompts[text] = state
            while len(self._prompts) > self.prompt_cache:
                self._prompts.popitem(last=False)
        return state

    def _on_prompt(self, text: str, items: list[tuple[int, list[int]]], pad_id: int, out: np.ndarray) -> None:
        """Features of the completions ``items`` (row, token ids) of one prompt into ``out``."""
        import torch
        from transformers import DynamicCache

        layers, p_sum, n_p = self._prompt_state(text)
        dev = self._device()
        for k in range(0, len(items), self.batch_size):
            part = items[k:k + self.batch_size]
            width = max(len(ids) for _, ids in part)
            if width == 0:  # only empty completions: the prompt's own mean
                for i, _ in part:
                    out[i] = (p_sum / n_p).cpu().numpy()
                continue
            comp = torch.tensor([ids + [pad_id] * (width - len(ids)) for _, ids in part], device=dev)
            mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for _, ids in part], device=dev)
            cache = DynamicCache(ddp_cache_data=layers)
            cache.batch_repeat_interleave(len(part))
            attn = torch.cat([torch.ones(len(part), n_p, dtype=mask.dtype, device=dev), mask], dim=1)
            h = self.model(input_ids=comp, cache=cache, attention_mask=attn, use_cache=False,
                           output_hidden_states=True, logits_to_keep=1).hidden_states[-1].float()
            m = mask.unsqueeze(-1).to(h.dtype)
            pooled = (p_sum.unsqueeze(0) + (h * m).sum(1)) / (n_p + m.sum(1))
            for (i, _), v in zip(part, pooled.cpu().numpy()):
                out[i] = v
