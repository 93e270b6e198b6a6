"""Constrained decoding for the judge on transformers: the JSON-schema constraint and its plumbing.

* :func:`judge_grammar` — the llguidance grammar of :func:`~.parser.judge_json_schema`;
* :class:`JsonConstraint` / :func:`constraint_processor` — the logits processor that masks
  every token the schema does not allow (one llguidance matcher per sequence);
* :func:`brace_stopping` — stop unconstrained answers at the first ``}``;
* :func:`frozen_backbone` / :func:`adapters_disabled` — predict with a policy's shared model as
  the frozen backbone (LoRA adapters off, every mode and ``requires_grad`` flag restored).

vLLM and OpenAI-compatible servers constrain with their own structured outputs
(:mod:`wmrl_envs.world_models.vllm_backend`) and need none of this.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Iterator

from .parser import PREFILL

__all__ = [
    "CLOSE_RESERVE",
    "judge_grammar",
    "JsonConstraint",
    "constraint_processor",
    "brace_stopping",
    "frozen_backbone",
    "adapters_disabled",
]

CLOSE_RESERVE = 8
"""Tokens before the budget from which a constrained answer closes its feedback string."""

_LL_TOKENIZERS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
"""llguidance tokenizer per Hugging Face tokenizer (building one takes ~0.5 s)."""


def judge_grammar(tokenizer: Any, json_schema: dict[str, Any]) -> tuple[Any, str]:
    """The llguidance tokenizer of ``tokenizer`` (cached per tokenizer) and the compiled grammar
    of ``json_schema`` (no flexible whitespace: ``", "`` and ``": "`` separators).

    Raises:
        ImportError: llguidance is not installed.
        ValueError: the tokenizer is not a fast (Rust) tokenizer, or the grammar is invalid.
    """
    try:
        import llguidance
        import llguidance.hf
    except ImportError as err:
        raise ImportError("constrained decoding needs llguidance: pip install llguidance") from err
    try:
        ll_tok = _LL_TOKENIZERS.get(tokenizer)
    except TypeError:  # not weak-referenceable
        ll_tok = None
    if ll_tok is None:
        ll_tok = llguidance.hf.from_tokenizer(tokenizer)
        try:
            _LL_TOKENIZERS[tokenizer] = ll_tok
        except TypeError:
            pass
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        json_schema,
        overrides={"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "},
    )
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, ll_tok)
    if is_error:
        raise ValueError(f"invalid judge grammar: {messages}")
    return ll_tok, grammar


@contextlib.contextmanager
def frozen_backbone(model: Any, disable_adapters: bool = True) -> Iterator[None]:
    """Eval mode + adapters disabled (if asked) for the duration; both restored after.

    Every module's ``training`` flag and every parameter's ``requires_grad`` flag are
    restored (PEFT's enable/disable toggles ``requires_grad`` of adapter weights).
    """
    modes = [(m, m.training) for m in model.modules()] if hasattr(model, "modules") else []
    grads = [(p, p.requires_grad) for p in model.parameters()] if hasattr(model, "parameters") else []
    try:
        if hasattr(model, "eval"):
            model.eval()
        with contextlib.ExitStack() as stack:
            if disable_adapters:
                stack.enter_context(adapters_disabled(model))
            yield
    finally:
        for module, training in modes:
            module.training = training
        for param, requires_grad in grads:
            if param.requires_grad != requires_grad:
                param.requires_grad_(requires_grad)


class JsonConstraint:
    """A transformers logits processor that lets each sequence write only a prediction
    satisfying :func:`judge_json_schema` (one llguidance matcher per batch row).

    Each matcher first consumes the prefill tokens, then every step it consumes the token
    just sampled for its row and masks all tokens the schema does not allow next (``-inf``);
    once the object is complete only EOS is allowed. Within ``reserve`` tokens of the budget
    it forces the end of the feedback string (``"}``) at the first step where that is
    allowed (not inside an escape or a multi-byte character), so that the object is complete
    before ``max_new_tokens`` runs out. A row whose matcher fails (it cannot, short of a bug)
    is sent to EOS and its answer then fails the strict parser.
    """

    def __init__(self, ll_tokenizer: Any, grammar: str, prefill_ids: list[int], close_ids: list[int],
                 eos_id: int, batch: int, max_new_tokens: int, reserve: int = 8) -> None:
        import llguidance

        self.matchers = []
        for _ in range(batch):
            m = llguidance.LLMatcher(ll_tokenizer, grammar)
            if not m.consume_tokens(prefill_ids):
                raise RuntimeError(f"the JSON constraint rejects the prefill {PREFILL!r}: {m.get_error()}")
            self.matchers.append(m)
        self.close_ids = list(close_ids)
        self.eos_id = int(eos_id)
        self.max_new_tokens = int(max_new_tokens)
        self.reserve = int(reserve)
        self.prompt_len: int | None = None
        self.n_forced_close = 0

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if self.prompt_len is None:
            self.prompt_len = int(input_ids.shape[1])
        else:
            for row, m in enumerate(self.matchers):
                if not m.is_stopped():
                    m.consume_token(int(input_ids[row, -1]))
        left = self.max_new_tokens - (int(input_ids.shape[1]) - self.prompt_len)
        allowed = torch.zeros(scores.shape, dtype=torch.bool)
        for row, m in enumerate(self.matchers):
            if m.is_error() or m.is_stopped():
                allowed[row, self.eos_id] = True
                continue
            if left <= self.reserve and m.validate_tokens(self.close_ids) == len(self.close_ids):
                allowed[row, self.close_ids[0]] = True
                self.n_forced_close += 1
                continue
            mask = torch.frombuffer(bytearray(m.compute_logit_bias()), dtype=torch.uint8).bool()
            n = min(mask.numel(), scores.shape[1])
            allowed[row, :n] = mask[:n]
        return scores.masked_fill(~allowed.to(scores.device), float("-inf"))


def constraint_processor(constraint: JsonConstraint) -> Any:
    """Wrap a :class:`JsonConstraint` in a ``LogitsProcessorList`` for ``generate``."""
    from transformers import LogitsProcessor, LogitsProcessorList

    class _Processor(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            return constraint(input_ids, scores)

    return LogitsProcessorList([_Processor()])


def brace_stopping(brace_ids: Any) -> Any:
    """A ``StoppingCriteriaList`` ending each sequence whose last token contains ``}``."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _StopAtBrace(StoppingCriteria):
        def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
            return torch.isin(input_ids[:, -1], brace_ids.to(input_ids.device))

    return StoppingCriteriaList([_StopAtBrace()])


@contextlib.contextmanager
def adapters_disabled(model: Any) -> Iterator[None]:
    """Disable PEFT adapters of ``model`` for the duration (a no-op for a plain model).

    ``peft.PeftModel`` uses its ``disable_adapter()`` context manager; a transformers model
    with adapters injected (``model.add_adapter`` / ``inject_adapter_in_model``) has each
    tuner layer switched off and back to its previous state.
    """
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency
        PeftModel = None  # type: ignore[assignment]
    if PeftModel is not None and isinstance(model, PeftModel):
        with model.disable_adapter():
            yield
        return
    layers = []
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer

        layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)] if hasattr(model, "modules") else []
    except ImportError:  # pragma: no cover
        layers = []
    previous = [bool(getattr(m, "disable_adapters", False)) for m in layers]
    try:
        for m in layers:
            m.enable_adapters(False)
        yield
    finally:
        for m, was_disabled in zip(layers, previous):
            m.enable_adapters(not was_disabled)
