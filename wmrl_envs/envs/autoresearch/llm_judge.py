"""LLM-as-judge world model for AutoResearch: predict a solution's sandbox outcome.

This implements the world model of the WMRL method (Yang et al., arXiv 2608.12564; see
``docs/method.md``, "World model"): a frozen instruction-tuned LLM reads the task overview
and data inventory (the observation's ``"prompt"`` text) and the agent's code, and predicts
the structured outcome real execution would give:

* ``status`` — one of ``malformed`` / ``syntax_err`` / ``runtime_err`` / ``ran_no_sub`` /
  ``valid`` (:data:`wmrl_envs.envs.autoresearch.scale.STATUSES`);
* ``bucket`` — the quality of a valid submission, one of ``low`` / ``fair`` / ``mid`` /
  ``high`` (:data:`~wmrl_envs.envs.autoresearch.scale.QUALITY_BUCKETS`), mapped to a
  leaderboard position ``pos`` by :data:`~wmrl_envs.envs.autoresearch.scale.BUCKET_POSITIONS`
  (0.05 / 0.20 / 0.45 / 0.75);
* ``feedback`` — text imitating the sandbox log (a traceback, the printed metric, ...),
  wrapped in the layout of the real feedback (:func:`format_predicted_feedback`) so that the
  predicted next observation has the form of a real one.

The predicted score is ``score_from_status(status, pos)``, the same scale real grading uses.

Two things are decided without the model (a deterministic pre-check, as in the reference):
empty / whitespace-only code is ``malformed`` (score 0.0) and code that fails
:func:`compile` is ``syntax_err`` (score 0.0, feedback = the SyntaxError as Python prints it),
with the rules and messages of the real grader's host-side check.
Model output that is not a prediction is counted as ``runtime_err`` (score 0.1), as the
reference does, and flagged with ``extras["parse_error"] = True``.

Decoding follows the reference: temperature 0.7, top-p 0.8, top-k 20, the assistant turn
is prefilled with the start of the JSON answer (:data:`PREFILL`, ``{"status": "``), and the
answer is decoded under a JSON constraint (:func:`judge_json_schema`: the status one of
:data:`JUDGE_STATUSES`, the bucket one of the four, the feedback a string of at most
:data:`FEEDBACK_MAX_CHARS` characters, nothing else), so that the model can only write a
valid prediction:

* transformers: an llguidance matcher per sequence masks the logits at every step (it first
  consumes the prefill; near the token budget it closes the feedback string, so the object
  is always complete);
* vLLM in process and ``vllm serve``: vLLM's own structured outputs with the same schema
  (the prompt then stops before the prefill: the schema writes the whole object).

:func:`parse_judge_output` is the strict check of every answer, and the whole check for
generators that cannot be constrained (an OpenAI-compatible server without structured
outputs): exactly one JSON object satisfying the schema, else no prediction.

The judge may share its model object with the agent's policy (a ``peft.PeftModel`` with LoRA
adapters): with ``disable_adapters=True`` (default) it predicts with the adapters disabled,
i.e. with the frozen backbone, always under ``torch.no_grad()``, and restores every
module's train/eval mode (and every parameter's ``requires_grad``) afterwards.

Known limitation (measured with SmolLM2-135M-Instruct on 16 AutoResearch samples): the answer
is always parseable, but the predicted status does not depend on the code. It is the option
listed first in :data:`SYSTEM_PROMPT` (``runtime_err`` here; listing ``valid`` first turns
every prediction into ``valid``): p("runtime") ≈ 0.5-0.6 for the first generated token
whatever the code, and top-p 0.8 at temperature 0.7 keeps only that token. A larger or
fine-tuned judge is needed for a useful signal; ``system_prompt=`` allows prompt experiments.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from wmrl_envs.envs.autoresearch.scale import (
    BUCKET_POSITIONS,
    QUALITY_BUCKETS,
    STATUSES,
    score_from_status,
)
from wmrl_envs.world_models.base import WorldModelPrediction

__all__ = [
    "ParsedJudgement",
    "parse_judge_output",
    "judge_json_schema",
    "JUDGE_STATUSES",
    "FEEDBACK_MAX_CHARS",
    "precheck_code",
    "format_predicted_feedback",
    "LLMJudgeWorldModel",
    "SYSTEM_PROMPT",
    "PREFILL",
    "SOLUTION_FILENAME",
]

SOLUTION_FILENAME = "solution.py"
"""File name the sandbox runs the code under (used in pre-check SyntaxError messages)."""

PREFILL = '{"status": "'
"""Start of the assistant turn, so that the model continues a JSON object."""

SYSTEM_PROMPT = (
    "You simulate a Python sandbox. You read a machine-learning task and a solution script, "
    "and predict what happens when the script is run. Reply with one JSON object: "
    '{"status": "...", "bucket": "...", "feedback": "..."}.\n'
    'status: "runtime_err" if the script raises an exception, "ran_no_sub" if it runs but '
    'writes no valid submission file, "valid" if it writes a valid submission.\n'
    'bucket: how a valid submission ranks on the leaderboard: "low", "fair", "mid" or "high".\n'
    "feedback: the last lines the script prints, e.g. a Python traceback or the validation score."
)
"""System message of the judge (task of the world model, answer format)."""

USER_TEMPLATE = (
    "## Task\n{task}\n\n## Solution ({filename})\n```python\n{code}\n```\n\n"
    "Predict the result of running {filename} in the sandbox. Answer with the JSON object only."
)
"""User message; ``{task}`` is the observation's prompt text, ``{code}`` the action."""

_TRUNC_MARK = "\n... [{n} tokens omitted] ...\n"

_CLOSE_RESERVE = 8
"""Tokens before the budget from which a constrained answer closes its feedback string."""

_LL_TOKENIZERS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
"""llguidance tokenizer per Hugging Face tokenizer (building one takes ~0.5 s)."""

# --------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------

JUDGE_STATUSES: tuple[str, ...] = ("runtime_err", "ran_no_sub", "valid")
"""Statuses the model may predict. ``malformed`` and ``syntax_err`` are never the model's to
decide: the pre-check (:func:`precheck_code`, the real grader's own host-side check) settles
them exactly before the model is asked, so code that reaches the model compiles."""

FEEDBACK_MAX_CHARS = 400
"""Most characters of the predicted program output (``feedback``), the schema's ``maxLength``."""

_FIELDS = ("status", "bucket", "feedback")


def judge_json_schema(max_feedback_chars: int = FEEDBACK_MAX_CHARS) -> dict[str, Any]:
    """JSON schema of one judge prediction (the constraint of constrained decoding).

    ``{"status": <one of JUDGE_STATUSES>, "bucket": <one of QUALITY_BUCKETS>, "feedback":
    <string of at most max_feedback_chars characters>}``: all three required, in this order,
    no other field. The bucket is required whatever the status (it only counts for
    ``valid``), so that every prediction has the same form.

    Args:
        max_feedback_chars: ``maxLength`` of ``feedback`` (int >= 0, characters).

    Returns:
        The schema (a new dict).

    Raises:
        ValueError: ``max_feedback_chars`` is negative.
    """
    if int(max_feedback_chars) < 0:
        raise ValueError(f"max_feedback_chars must be >= 0, got {max_feedback_chars}")
    return {
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": list(JUDGE_STATUSES)},
            "bucket": {"type": "string", "enum": list(QUALITY_BUCKETS)},
            "feedback": {"type": "string", "maxLength": int(max_feedback_chars)},
        },
        "required": list(_FIELDS),
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class ParsedJudgement:
    """A judge answer read from model text.

    Attributes:
        status: one of :data:`JUDGE_STATUSES`.
        bucket: one of :data:`~wmrl_envs.envs.autoresearch.scale.QUALITY_BUCKETS` (it counts
            only when ``status == "valid"``).
        feedback: predicted program output (at most the parser's ``max_feedback_chars``).
    """

    status: str
    bucket: str
    feedback: str = ""

    @property
    def pos(self) -> float | None:
        """Leaderboard position score in [0, 1] of the bucket (valid only), else ``None``."""
        return BUCKET_POSITIONS[self.bucket] if self.status == "valid" else None

    @property
    def score(self) -> float:
        """The predicted score on the AutoResearch reward scale (float in [0, 1])."""
        return score_from_status(self.status, self.pos)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate keys in {keys}")
    return dict(pairs)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicate_keys, parse_constant=_reject_constant)


def _parse_strict(text: Any, max_feedback_chars: int) -> tuple[ParsedJudgement | None, str]:
    """:func:`parse_judge_output` with the reason of a rejection (``""`` when accepted)."""
    if not isinstance(text, str):
        return None, f"not a string ({type(text).__name__})"
    body = text.strip()
    if not body:
        return None, "empty output"
    if not body.startswith("{"):
        return None, "the output does not start with a JSON object"
    try:
        obj, end = _DECODER.raw_decode(body)
    except RecursionError:
        return None, "nested too deeply"
    except ValueError as err:  # json.JSONDecodeError, duplicate keys, NaN/Infinity
        return None, f"not one complete JSON object ({err})"
    if body[end:].strip():
        return None, "text after the JSON object (a second object or prose)"
    if not isinstance(obj, dict):  # pragma: no cover - the body starts with "{"
        return None, "not a JSON object"
    if set(obj) != set(_FIELDS):
        missing, extra = sorted(set(_FIELDS) - set(obj)), sorted(set(obj) - set(_FIELDS))
        return None, f"fields must be exactly {list(_FIELDS)} (missing {missing}, extra {extra})"
    status, bucket, feedback = obj["status"], obj["bucket"], obj["feedback"]
    if status not in JUDGE_STATUSES or not isinstance(status, str):
        return None, f"status {status!r} is not one of {list(JUDGE_STATUSES)}"
    if bucket not in QUALITY_BUCKETS or not isinstance(bucket, str):
        return None, f"bucket {bucket!r} is not one of {list(QUALITY_BUCKETS)}"
    if not isinstance(feedback, str):
        return None, f"feedback is a {type(feedback).__name__}, not a string"
    if len(feedback) > max_feedback_chars:
        return None, f"feedback has {len(feedback)} characters, more than {max_feedback_chars}"
    try:
        feedback.encode("utf-8")
    except UnicodeEncodeError:
        return None, "feedback holds a lone surrogate (not valid Unicode text)"
    return ParsedJudgement(status=status, bucket=bucket, feedback=feedback), ""


def parse_judge_output(text: str, *, max_feedback_chars: int = FEEDBACK_MAX_CHARS) -> ParsedJudgement | None:
    """Read a judge answer, strictly: exactly one JSON object that satisfies
    :func:`judge_json_schema`.

    This is the whole check for generators that cannot be constrained (and a no-op check for
    constrained ones, whose output satisfies the schema by construction). Accepted: optional
    whitespace, ONE JSON object, optional whitespace. Rejected (``None``): anything before
    or after the object (prose, a second object), a truncated object, invalid JSON
    (single quotes, bare words, raw control characters in strings, NaN), duplicate keys,
    a missing or an extra field, a status that is not exactly one of
    :data:`JUDGE_STATUSES` (no synonyms, no other case, nothing around the word), a bucket
    that is not exactly one of ``QUALITY_BUCKETS``, a feedback that is not a string, is
    longer than ``max_feedback_chars`` or holds lone surrogates.

    Args:
        text: the full answer, i.e. ``PREFILL + continuation`` or a whole object (str).
        max_feedback_chars: most characters of ``feedback`` (int).

    Returns:
        A :class:`ParsedJudgement`, or ``None`` when ``text`` is not a prediction (the judge
        then counts it as ``runtime_err``, as the reference does).
    """
    return _parse_strict(text, int(max_feedback_chars))[0]


def _full_answer(continuation: str) -> str:
    """The answer text of a continuation of :data:`PREFILL`: ``PREFILL + continuation``, or
    the continuation itself when it is a whole object (a generator that ignored the prefill;
    ``PREFILL + "{..."`` can never be a valid answer)."""
    return continuation if continuation.lstrip().startswith("{") else PREFILL + continuation



# --------------------------------------------------------------------------------------
# Deterministic pre-check
# --------------------------------------------------------------------------------------


def precheck_code(code: Any, filename: str = SOLUTION_FILENAME) -> tuple[str, str, str] | None:
    """Decide an action without the model when that is certain.

    The rules and messages are those of the real grader's host-side check
    (:func:`wmrl_envs.envs.autoresearch.grading.check_source`), so that predicted and real
    grades agree on these cases.

    Args:
        code: the action (Python source, str).
        filename: script name used in the SyntaxError message.

    Returns:
        ``None`` when the model must decide; otherwise ``(status, message, stderr)``:
        ``"malformed"`` for a non-string, empty/whitespace-only or NUL-containing action
        (``stderr`` empty), ``"syntax_err"`` when :func:`compile` fails (``message`` like
        ``"SyntaxError: '(' was never closed (line 3)"``, ``stderr`` the error as Python prints
        it when running the file).
    """
    from wmrl_envs.envs.autoresearch.grading import check_source

    return check_source(code, filename)  # one implementation: the real grader's


_GRADER_MESSAGES = {
    "runtime_err": "the program exited with status 1",
    "ran_no_sub": "no valid submission file was written",
}


def format_predicted_feedback(
    status: str,
    log: str,
    score: float,
    *,
    bucket: str | None = None,
    message: str | None = None,
    runtime_s: float | None = None,
) -> str:
    """Feedback text in the layout of the real sandbox feedback.

    Built by the real grader's :func:`wmrl_envs.envs.autoresearch.env.layout_feedback`, so
    predicted and real observations have the same form (outcome mode of the WMRL method, Yang
    et al., arXiv 2608.12564; ``docs/method.md``): the grader's report first, the predicted log
    quoted line by line (``| ``), so that a log can never pass for the report::

        [grader] status: runtime_err | score 0.1 | the program exited with status 1
        [grader] $ python solution.py | exit code 1
        | <predicted log lines>

    Args:
        status: one of :data:`~wmrl_envs.envs.autoresearch.scale.STATUSES`.
        log: the predicted program output (may be empty).
        score: the (predicted) score.
        bucket: the quality bucket of a valid prediction.
        message: the grader's explanation; a generic one per status when ``None``.
        runtime_s: seconds to show in the exit line (omitted when ``None``).

    Returns:
        The feedback text (str).
    """
    from wmrl_envs.envs.autoresearch.env import layout_feedback

    if status == "malformed":
        return layout_feedback(status, score, [message or "no Python source"])
    code = 0 if status in ("valid", "ran_no_sub") else 1
    run = f"exit code {code}" + (f" | {runtime_s:.2f} s" if runtime_s is not None else "")
    if status == "valid":
        pos = BUCKET_POSITIONS.get(bucket or "", 0.0)
        msg = message or f"predicted quality {bucket} (position {pos:.3f})"
    else:
        msg = message or _GRADER_MESSAGES.get(status, status)
    return layout_feedback(status, score, [msg], run=run, output=log)


def _task_text(context: Any) -> str:
    if isinstance(context, dict):
        value = context.get("prompt", "")
        return value if isinstance(value, str) else str(value)
    return context if isinstance(context, str) else str(context)


class LLMJudgeWorldModel:
    """World model that asks a causal LM to predict a solution's sandbox outcome.

    Implements :class:`wmrl_envs.world_models.base.WorldModel` following Yang et al.,
    arXiv 2608.12564 (``docs/method.md``, "World model"): see the module docstring.

    Args:
        model: a Hugging Face causal LM (``generate`` API), possibly a ``peft.PeftModel``
            shared with the policy. It is used as is (not copied); its device is the device
            of its first parameter.
        tokenizer: its tokenizer; a chat template is used when present. Padding is done on
            the left whatever the tokenizer's setting.
        max_new_tokens: most generated tokens per prediction (int > 0).
        temperature: sampling temperature; ``<= 0`` means greedy decoding.
        top_p: nucleus-sampling mass in (0, 1].
        top_k: top-k sampling cut-off (int, 0 disables).
        batch_size: most actions per ``generate`` call.
        max_prompt_tokens: most tokens of the whole prompt (chat template + task + code +
            prefill); task text and code are cut in the middle (at line boundaries where
            possible) to fit, the code keeping at least 60 % of the budget left.
        seed: when given, every ``generate`` call is seeded with ``seed + k`` (``k`` counts
            calls) inside :func:`torch.random.fork_rng`, so runs are reproducible and the
            caller's global RNG stream is left untouched; ``None`` uses the global RNG.
        disable_adapters: predict with PEFT adapters (LoRA, ...) disabled, i.e. with the
            frozen backbone (default ``True``).
        system_prompt: replaces :data:`SYSTEM_PROMPT` (for prompt experiments).
        stop_at_brace: without the JSON constraint, stop a sequence's generation at the
            first generated token that contains ``}`` (the end of the JSON answer), which
            saves decoding time (an answer cut there inside the feedback string is no
            prediction). Constrained decoding ends at the object's ``}`` by itself.
        constrained: decode under the JSON constraint (:func:`judge_json_schema`).
            ``None`` (default): whenever the backend can (transformers with llguidance;
            a generator whose ``supports_json_schema`` is true), else only the strict
            parser, with a warning; ``True``: required (``ValueError`` if the backend
            cannot); ``False``: never (the strict parser alone, e.g. to measure the
            constraint's cost).
        max_feedback_chars: ``maxLength`` of the predicted feedback (characters); longer
            unconstrained answers are no prediction.
        decoding: ``"sample"`` (reference: sample the JSON answer and parse it) or
            ``"expected"``: read the model's next-token distribution over the five statuses
            right after :data:`PREFILL` and, given ``valid``, over the four buckets, and
            score the *expected* value ``Σ p(status)·score(status)`` (valid: ``0.5 + 0.5·Σ
            p(bucket)·pos(bucket)``). One prompt pass plus a few tokens, no decoding; the
            status/bucket reported are the most likely ones, the feedback has no model log.
            A small judge whose sampled answer barely depends on the code (SmolLM2-135M:
            always the first listed status) still shifts these probabilities with the code,
            which the isotonic debiaser can use.
        generator: a :class:`~wmrl_envs.world_models.vllm_backend.TextGenerator` that does the
            generation instead of ``model.generate`` — vLLM in process or an OpenAI-compatible
            server (see :meth:`from_vllm`, :meth:`from_server`); the prompt, the parser and the
            scores stay the same, and ``model`` may then be ``None`` (the tokenizer is still
            needed: it renders the chat template and counts tokens). Only
            ``decoding="sample"``.

    Attributes:
        n_model_calls: actions graded by the model so far (int).
        n_generate_calls: batched ``generate`` calls so far (int).
        n_precheck: actions decided by the deterministic pre-check (int).
        n_parse_errors: model answers that were no prediction (int).
        n_forced_close: constrained answers whose feedback was closed at the token budget (int).
        constrained: whether answers are decoded under the JSON constraint (bool).
        json_schema: the constraint (:func:`judge_json_schema`, dict).
        seconds: wall-clock seconds spent in the model (tokenise + generate + decode).
        tokens_generated: generated tokens so far (int, EOS and padding excluded).

    Raises:
        ValueError: invalid sampling or size arguments, ``max_prompt_tokens`` smaller than
            the prompt template (≈215 SmolLM2 tokens) plus 64, ``constrained=True`` with a
            backend that cannot be constrained, or a ``max_new_tokens`` too small for a
            constrained answer.
    """

    droppable_sections: tuple[str, ...] = ("## Starter code",)
    """Markdown headings of task-text sections dropped first when the prompt is too long."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.7,
        top_p: float = 0.8,
        top_k: int = 20,
        batch_size: int = 8,
        max_prompt_tokens: int = 1024,
        seed: int | None = None,
        disable_adapters: bool = True,
        system_prompt: str | None = None,
        stop_at_brace: bool = True,
        decoding: str = "sample",
        generator: Any = None,
        constrained: bool | None = None,
        max_feedback_chars: int = FEEDBACK_MAX_CHARS,
    ) -> None:
        if generator is not None and decoding != "sample":
            raise ValueError("decoding='expected' reads next-token probabilities from the local model; "
                             "with a generator (vLLM / server) use decoding='sample'")
        if generator is None and model is None:
            raise ValueError("pass a model (transformers) or a generator (vLLM / OpenAI-compatible server)")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        if max_prompt_tokens < 128:
            raise ValueError(f"max_prompt_tokens must be >= 128, got {max_prompt_tokens}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.top_k = int(top_k)
        self.batch_size = int(batch_size)
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.seed = seed
        self.disable_adapters = bool(disable_adapters)
        self.system_prompt = SYSTEM_PROMPT if system_prompt is None else str(system_prompt)
        self.stop_at_brace = bool(stop_at_brace)
        if decoding not in ("sample", "expected"):
            raise ValueError(f"decoding must be 'sample' or 'expected', got {decoding!r}")
        self.decoding = decoding
        self.generator = generator
        self._choice_ids: tuple[list[int], list[int], list[int]] | None = None
        self._brace_ids: Any = None
        self.max_feedback_chars = int(max_feedback_chars)
        self.json_schema = judge_json_schema(self.max_feedback_chars)
        self._ll: tuple[Any, str] | None = None  # (llguidance tokenizer, grammar), built lazily
        self.n_forced_close = 0
        self.n_model_calls = 0
        self.n_generate_calls = 0
        self.n_precheck = 0
        self.n_parse_errors = 0
        self.seconds = 0.0
        self.tokens_generated = 0
        if getattr(tokenizer, "pad_token_id", None) is None and getattr(tokenizer, "eos_token", None):
            tokenizer.pad_token = tokenizer.eos_token
        self._overhead = self._n_tokens(self._render("", ""))
        if self.max_prompt_tokens < self._overhead + 64:
            raise ValueError(
                f"max_prompt_tokens={self.max_prompt_tokens} leaves no room for task and code: the "
                f"template alone has {self._overhead} tokens; use at least {self._overhead + 64}"
            )
        self.constrained = self._resolve_constrained(constrained) if decoding == "sample" else False
        if self.constrained and generator is None:
            need = self._n_tokens('ran_no_sub", "bucket": "fair", "feedback": ""}') + _CLOSE_RESERVE
            if self.max_new_tokens < need:
                raise ValueError(
                    f"max_new_tokens={self.max_new_tokens} cannot hold a constrained answer: it needs at "
                    f"least {need} tokens (the fields and {_CLOSE_RESERVE} to close the feedback); raise "
                    "max_new_tokens or pass constrained=False"
                )

    def _resolve_constrained(self, constrained: bool | None) -> bool:
        """Whether this backend decodes under the JSON constraint (see ``constrained``)."""
        if constrained is False:
            return False
        if self.generator is not None:
            ok = bool(getattr(self.generator, "supports_json_schema", False))
            why = (f"the generator {type(self.generator).__name__} cannot constrain its output to a JSON "
                   "schema (supports_json_schema is false)")
        else:
            try:
                self._ll_grammar()
                ok, why = True, ""
            except (ImportError, ValueError, RuntimeError) as err:
                ok, why = False, f"llguidance cannot constrain this tokenizer ({err})"
        if ok:
            return True
        if constrained:
            raise ValueError(f"constrained=True, but {why}; pass constrained=False to rely on the strict parser")
        warnings.warn(f"{why}: judge answers are checked by the strict parser only", RuntimeWarning, stacklevel=3)
        return False

    def _ll_grammar(self) -> tuple[Any, str]:
        """The llguidance tokenizer and the compiled JSON-schema grammar (built once).

        Raises:
            ImportError: llguidance is not installed.
            ValueError: the tokenizer is not a fast (Rust) tokenizer, or the grammar is invalid.
        """
        if self._ll is None:
            try:
                import llguidance
                import llguidance.hf
            except ImportError as err:
                raise ImportError("constrained decoding needs llguidance: pip install llguidance") from err
            try:
                ll_tok = _LL_TOKENIZERS.get(self.tokenizer)
            except TypeError:  # not weak-referenceable
                ll_tok = None
            if ll_tok is None:
                ll_tok = llguidance.hf.from_tokenizer(self.tokenizer)
                try:
                    _LL_TOKENIZERS[self.tokenizer] = ll_tok
                except TypeError:
                    pass
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                self.json_schema,
                overrides={"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "},
            )
            is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, ll_tok)
            if is_error:
                raise ValueError(f"invalid judge grammar: {messages}")
            self._ll = (ll_tok, grammar)
        return self._ll

    @classmethod
    def from_smollm2(cls, *, cache_dir: Any = None, dtype: Any = None, **kwargs: Any) -> "LLMJudgeWorldModel":
        """Build a judge on SmolLM2-135M-Instruct (:func:`~wmrl_envs.world_models.smollm2.load_smollm2`).

        Args:
            cache_dir: cache folder passed to ``load_smollm2``.
            dtype: parameter dtype (default ``torch.float32``).
            **kwargs: constructor keyword arguments (``max_new_tokens``, ``seed``, ...).

        Returns:
            The judge.

        Raises:
            FileNotFoundError: SmolLM2 weights are not installed.
        """
        import torch

        from wmrl_envs.world_models.smollm2 import load_smollm2

        model, tokenizer = load_smollm2(cache_dir=cache_dir, dtype=dtype or torch.float32)
        return cls(model, tokenizer, **kwargs)

    @classmethod
    def from_vllm(cls, model: str, tokenizer: Any = None, *, llm_kwargs: dict[str, Any] | None = None,
                  **kwargs: Any) -> "LLMJudgeWorldModel":
        """A judge generating with an in-process ``vllm.LLM(model)``.

        Args:
            model: model folder or hub id.
            tokenizer: the model's tokenizer (default: ``AutoTokenizer.from_pretrained(model)``).
            llm_kwargs: ``vllm.LLM`` arguments (``gpu_memory_utilization``, ``dtype``, ...).
            **kwargs: constructor keyword arguments (``max_new_tokens``, ``seed``, ...).

        Raises:
            ImportError: vLLM is not installed.
        """
        from wmrl_envs.world_models.vllm_backend import VLLMGenerator

        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model)
        return cls(None, tokenizer, generator=VLLMGenerator(model=model, **(llm_kwargs or {})), **kwargs)

    @classmethod
    def from_server(cls, base_url: str, model: str, tokenizer: Any, *, api_key: str | None = None,
                    timeout_s: float = 120.0, structured_outputs: str | None = "structured_outputs",
                    **kwargs: Any) -> "LLMJudgeWorldModel":
        """A judge generating on an OpenAI-compatible completions server (e.g. ``vllm serve``).

        Args:
            base_url: API root, e.g. ``"http://gpu-node:8000/v1"``.
            model: the served model's name.
            tokenizer: the served model's tokenizer (renders the chat template locally).
            api_key, timeout_s, structured_outputs: see
                :class:`~wmrl_envs.world_models.vllm_backend.OpenAICompatibleGenerator`
                (``structured_outputs=None`` for a server without structured outputs: the
                strict parser alone then decides).
            **kwargs: constructor keyword arguments.
        """
        from wmrl_envs.world_models.vllm_backend import OpenAICompatibleGenerator

        gen = OpenAICompatibleGenerator(base_url, model, api_key=api_key, timeout_s=timeout_s,
                                        structured_outputs=structured_outputs)
        if structured_outputs is None:  # an explicit choice: the strict parser alone, no warning
            kwargs.setdefault("constrained", False)
        return cls(None, tokenizer, generator=gen, **kwargs)

    # ---------------------------------------------------------------- stats
    def stats(self) -> dict[str, float]:
        """Counters as a dict (for logging): calls, pre-checks, parse errors, seconds, tokens/s."""
        return {
            "n_model_calls": self.n_model_calls,
            "n_generate_calls": self.n_generate_calls,
            "n_precheck": self.n_precheck,
            "n_parse_errors": self.n_parse_errors,
            "n_forced_close": self.n_forced_close,
            "seconds": self.seconds,
            "tokens_generated": self.tokens_generated,
            "tokens_per_s": self.tokens_generated / self.seconds if self.seconds > 0 else 0.0,
        }

    # ---------------------------------------------------------------- prompts
    def _n_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _cut_middle(self, text: str, budget: int) -> str:
        """Keep about ``budget`` tokens of ``text``: its head and tail, at line boundaries."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) <= budget:
            return text
        keep = max(budget - 12, 2)  # room for the marker
        n_head = keep // 2
        n_tail = keep - n_head
        head = self.tokenizer.decode(ids[:n_head], skip_special_tokens=False)
        tail = self.tokenizer.decode(ids[len(ids) - n_tail :], skip_special_tokens=False)
        if "\n" in head.rstrip("\n"):  # drop a partial last line of the head
            head = head[: head.rstrip("\n").rfind("\n") + 1]
        if "\n" in tail.lstrip("\n"):  # drop a partial first line of the tail
            tail = tail[tail.find("\n") + 1 :]
        omitted = len(ids) - self._n_tokens(head) - self._n_tokens(tail)
        return head.rstrip("\n") + _TRUNC_MARK.format(n=max(omitted, 1)) + tail.lstrip("\n")

    def _render(self, task: str, code: str) -> str:
        user = USER_TEMPLATE.format(task=task.strip(), code=code.rstrip(), filename=SOLUTION_FILENAME)
        messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}]
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:
            text = f"{self.system_prompt}\n\n{user}\n\nAnswer: "
        return text + PREFILL

    def build_prompt(self, context: Any, code: str) -> str:
        """The full judge prompt (chat template applied, ends with :data:`PREFILL`).

        When task text and code do not fit in ``max_prompt_tokens`` tokens, the task text's
        :attr:`droppable_sections` are removed first (the AutoResearch prompt ends with a
        ``## Starter code`` section, a script the action usually repeats), then task text and
        code are cut in the middle, at line boundaries; the code keeps
        ``max(60 % of the room, room - task)`` tokens.

        Args:
            context: the observation (a dict with ``"prompt"``, or the task text itself).
            code: the action (Python source).

        Returns:
            The prompt text.
        """
        task = _task_text(context)
        room = max(self.max_prompt_tokens - self._overhead - 8, 32)
        n_task, n_code = self._n_tokens(task), self._n_tokens(code)
        if n_task + n_code <= room:
            return self._render(task, code)
        for heading in self.droppable_sections:  # e.g. the env prompt's starter script
            shorter = _drop_section(task, heading)
            if shorter != task:
                task, n_task = shorter, self._n_tokens(shorter)
                if n_task + n_code <= room:
                    return self._render(task, code)
        for _ in range(4):  # re-tokenisation at the cuts may add a few tokens: shrink and retry
            code_budget = min(n_code, max(room - n_task, int(room * 0.6)))
            task_budget = min(n_task, room - code_budget)
            code_budget = min(n_code, room - task_budget)
            prompt = self._render(self._cut_middle(task, task_budget), self._cut_middle(code, code_budget))
            excess = self._n_tokens(prompt) - self.max_prompt_tokens
            if excess <= 0 or room <= 32:  # (room <= 32: cannot shrink further)
                break
            room = max(room - excess - 8, 32)
        return prompt

    # ---------------------------------------------------------------- model plumbing
    @contextlib.contextmanager
    def _frozen_backbone(self) -> Iterator[None]:
        """Eval mode + adapters disabled (if asked) for the duration; both restored after.

        Every module's ``training`` flag and every parameter's ``requires_grad`` flag are
        restored (PEFT's enable/disable toggles ``requires_grad`` of adapter weights).
        """
        model = self.model
        modes = [(m, m.training) for m in model.modules()] if hasattr(model, "modules") else []
        grads = [(p, p.requires_grad) for p in model.parameters()] if hasattr(model, "parameters") else []
        try:
            if hasattr(model, "eval"):
                model.eval()
            with contextlib.ExitStack() as stack:
                if self.disable_adapters:
                    stack.enter_context(_adapters_disabled(model))
                yield
        finally:
            for module, training in modes:
                module.training = training
            for param, requires_grad in grads:
                if param.requires_grad != requires_grad:
                    param.requires_grad_(requires_grad)

    def _device(self) -> Any:
        import torch

        try:
            return next(self.model.parameters()).device
        except (StopIteration, AttributeError):
            return torch.device("cpu")

    def _brace_token_ids(self) -> Any:
        """1-D int64 tensor of the ids of all tokens whose text contains ``}`` (cached)."""
        import torch

        if self._brace_ids is None:
            tok = self.tokenizer
            ids = [i for i, t in enumerate(tok.convert_ids_to_tokens(list(range(len(tok))))) if t and "}" in t]
            self._brace_ids = torch.tensor(ids, dtype=torch.long)
        return self._brace_ids

    def _generate(self, prompts: list[str]) -> list[tuple[str, int]]:
        """Run one batched generation. Returns ``(continuation_text, n_new_tokens)`` per prompt."""
        import torch

        if self.generator is not None:
            seed = None if self.seed is None else int(self.seed) + self.n_generate_calls
            kwargs: dict[str, Any] = {"stop": ["}"] if self.stop_at_brace else []}
            if self.constrained:  # the schema writes the whole object: the prompt stops before the prefill
                prompts = [p[: -len(PREFILL)] if p.endswith(PREFILL) else p for p in prompts]
                kwargs = {"stop": [], "json_schema": self.json_schema}
            texts = self.generator.generate(
                prompts, max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                top_k=self.top_k, seed=seed, **kwargs,
            )
            self.n_generate_calls += 1
            return [(t, self._n_tokens(t)) for t in texts]

        tok = self.tokenizer
        enc = self._encode_left(prompts)
        device = self._device()
        input_ids = enc["input_ids"].to(device)
        attention_mask = enc["attention_mask"].to(device)
        eos = getattr(tok, "eos_token_id", None)
        pad = tok.pad_token_id if tok.pad_token_id is not None else eos
        gen_kwargs: dict[str, Any] = dict(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=self.max_new_tokens,
            pad_token_id=pad,
            eos_token_id=eos,
            use_cache=True,
            num_return_sequences=1,  # whatever the (policy's) generation_config says
        )
        constraint = None
        if self.constrained:
            ll_tok, grammar = self._ll_grammar()
            constraint = _JsonConstraint(
                ll_tok, grammar, tok(PREFILL, add_special_tokens=False)["input_ids"],
                tok('"}', add_special_tokens=False)["input_ids"], eos if isinstance(eos, int) else eos[0],
                batch=input_ids.shape[0], max_new_tokens=self.max_new_tokens, reserve=_CLOSE_RESERVE,
            )
            gen_kwargs["logits_processor"] = _constraint_processor(constraint)
        elif self.stop_at_brace:
            gen_kwargs["stopping_criteria"] = _brace_stopping(self._brace_token_ids())
        if self.temperature > 0:
            gen_kwargs.update(
                do_sample=True, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k
            )
        else:
            gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)

        rng_devices = [device] if device.type == "cuda" else []
        with contextlib.ExitStack() as stack:
            if self.seed is not None:
                stack.enter_context(torch.random.fork_rng(devices=rng_devices))
                torch.manual_seed(int(self.seed) + self.n_generate_calls)
            stack.enter_context(torch.no_grad())
            stack.enter_context(self._frozen_backbone())
            out = self.model.generate(**gen_kwargs)
        self.n_generate_calls += 1
        if constraint is not None:
            self.n_forced_close += constraint.n_forced_close

        new = out[:, input_ids.shape[1] :].cpu()
        stop_ids = set(eos) if isinstance(eos, (list, tuple)) else ({eos} if eos is not None else set())
        if pad is not None:
            stop_ids.add(pad)
        results = []
        for row in new.tolist():
            n = len(row)
            for j, t in enumerate(row):
                if t in stop_ids:
                    n = j
                    break
            results.append((tok.decode(row[:n], skip_special_tokens=True), n))
        return results

    def _choices(self) -> tuple[list[int], list[int], list[int]]:
        """First token ids of each status and bucket word, and the ids of the bridge text."""
        if self._choice_ids is None:
            tok = self.tokenizer
            first = lambda w: tok(w, add_special_tokens=False)["input_ids"][0]  # noqa: E731
            st = [first(w) for w in STATUSES]
            bk = [first(w) for w in QUALITY_BUCKETS]
            if len(set(st)) != len(st) or len(set(bk)) != len(bk):
                raise ValueError("decoding='expected' needs status and bucket words with distinct first tokens")
            bridge = tok('valid", "bucket": "', add_special_tokens=False)["input_ids"]
            self._choice_ids = (st, bk, bridge)
        return self._choice_ids

    def _encode_left(self, prompts: list[str]) -> Any:
        """Tokenise a batch with left padding (whatever the tokenizer's own setting)."""
        tok = self.tokenizer
        old_side = getattr(tok, "padding_side", "left")
        tok.padding_side = "left"
        try:
            return tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        finally:
            tok.padding_side = old_side

    def _expected(self, prompts: list[str]) -> list[tuple[str, str, float, dict[str, float]]]:
        """Expected-score grading of one batch (see ``decoding`` in the class docstring)."""
        import torch

        st, bk, bridge = self._choices()
        tok = self.tokenizer
        enc = self._encode_left(prompts)
        device = self._device()
        ids, attn = enc["input_ids"].to(device), enc["attention_mask"].to(device)
        b = ids.shape[0]
        with torch.no_grad(), self._frozen_backbone():
            out = self.model(input_ids=ids, attention_mask=attn, use_cache=True)
            p_status = torch.softmax(out.logits[:, -1, st].float(), dim=-1)
            nxt = torch.tensor([bridge] * b, device=device)
            attn2 = torch.cat([attn, torch.ones_like(nxt)], dim=1)
            out2 = self.model(input_ids=nxt, attention_mask=attn2, cache=out.past_key_values, use_cache=False)
            p_bucket = torch.softmax(out2.logits[:, -1, bk].float(), dim=-1)
        self.n_generate_calls += 1
        pos = torch.tensor([BUCKET_POSITIONS[w] for w in QUALITY_BUCKETS])
        results = []
        for r in range(b):
            ps, pb = p_status[r].cpu(), p_bucket[r].cpu()
            valid_score = 0.5 + 0.5 * float((pb * pos).sum())
            score = sum(
                float(ps[k]) * (valid_score if w == "valid" else score_from_status(w)) for k, w in enumerate(STATUSES)
            )
            status = STATUSES[int(ps.argmax())]
            bucket = QUALITY_BUCKETS[int(pb.argmax())] if status == "valid" else None
            probs = {w: float(ps[k]) for k, w in enumerate(STATUSES)}
            probs.update({f"bucket_{w}": float(pb[k]) for k, w in enumerate(QUALITY_BUCKETS)})
            results.append((status, bucket, float(score), probs))
        return results

    # ---------------------------------------------------------------- protocol
    def predict(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[WorldModelPrediction]:
        """Predict the sandbox outcome of each action.

        Actions that fail the pre-check (empty → ``malformed``, not compilable →
        ``syntax_err``, both score 0.0) are decided without the model; the others are
        graded by the model in batches of ``batch_size`` (left padding; prompts of similar
        token length are batched together to limit padding). Answers that are no
        prediction (:func:`parse_judge_output`) count as ``runtime_err`` (score 0.1,
        ``extras["parse_error"] = True``), as in the reference.

        Args:
            contexts: B observations (AutoResearch observation dicts with keys
                ``"task_id"``, ``"prompt"``, ``"feedback"``, ``"turn"``).
            actions: B actions (Python source strings).

        Returns:
            B :class:`~wmrl_envs.world_models.base.WorldModelPrediction`, in order, each with
            ``score`` (float in [0, 1]), ``status``, ``feedback`` (the predicted sandbox
            feedback in the layout of the env's ``format_feedback``, see
            :func:`format_predicted_feedback`),
            ``observation`` (``next_observation(context, feedback)`` of the AutoResearch
            env; ``None`` if that fails for this context), ``raw_output`` (the answer
            read: ``PREFILL + continuation``, or the whole object a constrained generator
            or one that ignored the prefill wrote; empty for pre-checked actions),
            ``model_called`` and ``extras`` = ``{"bucket", "parse_error", "new_tokens",
            "log"}`` (``bucket``: ``None`` unless valid; ``log``: the predicted program
            output alone; plus ``"parse_reason"`` (str) for an answer that is no prediction
            and ``"precheck": True`` for pre-checked actions).

        Raises:
            ValueError: ``contexts`` and ``actions`` differ in length.
            ImportError: the AutoResearch env module (``next_observation``) is missing.
        """
        from wmrl_envs.envs.autoresearch.env import next_observation

        if len(contexts) != len(actions):
            raise ValueError(f"got {len(contexts)} contexts but {len(actions)} actions")
        results: list[WorldModelPrediction | None] = [None] * len(actions)
        todo: list[int] = []
        for i, code in enumerate(actions):
            decided = precheck_code(code)
            if decided is None:
                todo.append(i)
                continue
            status, message, stderr = decided
            self.n_precheck += 1
            score = score_from_status(status)
            feedback = format_predicted_feedback(status, stderr, score, message=message, runtime_s=0.0)
            results[i] = WorldModelPrediction(
                score=score,
                status=status,
                feedback=feedback,
                observation=_next_obs(next_observation, contexts[i], feedback),
                raw_output="",
                model_called=False,
                extras={"bucket": None, "parse_error": False, "new_tokens": 0, "precheck": True, "log": stderr},
            )

        if not todo:
            return [r for r in results if r is not None]
        # Batch prompts of similar length together (less left padding; prefill dominates).
        t0 = time.perf_counter()
        prompts = {i: self.build_prompt(contexts[i], actions[i]) for i in todo}
        if len(todo) > self.batch_size:
            lengths = {i: self._n_tokens(prompts[i]) for i in todo}
            todo = sorted(todo, key=lambda i: lengths[i])
        self.seconds += time.perf_counter() - t0
        for start in range(0, len(todo), self.batch_size):
            idx = todo[start : start + self.batch_size]
            t0 = time.perf_counter()
            if self.decoding == "expected":
                for i, (status, bucket, score, probs) in zip(idx, self._expected([prompts[i] for i in idx])):
                    self.n_model_calls += 1
                    feedback = format_predicted_feedback(status, "", score, bucket=bucket)
                    results[i] = WorldModelPrediction(
                        score=score,
                        status=status,
                        feedback=feedback,
                        observation=_next_obs(next_observation, contexts[i], feedback),
                        raw_output="",
                        model_called=True,
                        extras={"bucket": bucket, "parse_error": False, "new_tokens": 0, "log": "", "probs": probs},
                    )
                self.seconds += time.perf_counter() - t0
                continue
            outs = self._generate([prompts[i] for i in idx])
            self.seconds += time.perf_counter() - t0
            for i, (continuation, n_new) in zip(idx, outs):
                self.n_model_calls += 1
                self.tokens_generated += n_new
                raw = _full_answer(continuation)
                parsed, reason = _parse_strict(raw, self.max_feedback_chars)
                if parsed is None:
                    self.n_parse_errors += 1
                    if self.constrained and self.n_parse_errors == 1:
                        warnings.warn(
                            f"a constrained judge answer is no prediction ({reason}): the answer was cut "
                            "at max_new_tokens, or the backend ignored the JSON constraint (a vLLM server "
                            "ignores fields it does not know, e.g. guided_json on vLLM >= 0.12); it counts "
                            "as runtime_err", RuntimeWarning, stacklevel=2)
                    status, bucket, score, log = "runtime_err", None, score_from_status("runtime_err"), ""
                else:
                    status, score = parsed.status, parsed.score
                    bucket = parsed.bucket if status == "valid" else None
                    log = parsed.feedback if re.search(r"\w", parsed.feedback) else ""  # "..." is no log
                feedback = format_predicted_feedback(status, log, score, bucket=bucket)
                results[i] = WorldModelPrediction(
                    score=score,
                    status=status,
                    feedback=feedback,
                    observation=_next_obs(next_observation, contexts[i], feedback),
                    raw_output=raw,
                    model_called=True,
                    extras={"bucket": bucket, "parse_error": parsed is None, "new_tokens": n_new, "log": log,
                            **({"parse_reason": reason} if parsed is None else {})},
                )
        return [r for r in results if r is not None]


def _drop_section(text: str, heading: str) -> str:
    """Remove the markdown section whose heading line starts with ``heading`` (up to the next
    heading of the same or a higher level, or the end)."""
    lines = text.split("\n")
    level = len(heading) - len(heading.lstrip("#"))
    start = next((k for k, line in enumerate(lines) if line.startswith(heading)), None)
    if start is None or level == 0:
        return text
    end = len(lines)
    in_fence = False
    for k in range(start + 1, len(lines)):
        if lines[k].startswith("```"):
            in_fence = not in_fence
        elif not in_fence and re.match(r"#{1,%d} " % level, lines[k]):
            end = k
            break
    return "\n".join(lines[:start] + lines[end:]).rstrip("\n")


class _JsonConstraint:
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


def _constraint_processor(constraint: _JsonConstraint) -> Any:
    """Wrap a :class:`_JsonConstraint` in a ``LogitsProcessorList`` for ``generate``."""
    from transformers import LogitsProcessor, LogitsProcessorList

    class _Processor(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            return constraint(input_ids, scores)

    return LogitsProcessorList([_Processor()])


def _brace_stopping(brace_ids: Any) -> Any:
    """A ``StoppingCriteriaList`` ending each sequence whose last token contains ``}``."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _StopAtBrace(StoppingCriteria):
        def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
            return torch.isin(input_ids[:, -1], brace_ids.to(input_ids.device))

    return StoppingCriteriaList([_StopAtBrace()])


def _next_obs(fn: Any, context: Any, feedback: str) -> Any:
    try:
        return fn(context, feedback)
    except Exception:  # a context the env cannot continue: no predicted observation
        return None


@contextlib.contextmanager
def _adapters_disabled(model: Any) -> Iterator[None]:
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
