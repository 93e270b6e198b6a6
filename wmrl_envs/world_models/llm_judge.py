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
Model output that cannot be parsed is counted as ``runtime_err`` (score 0.1) and flagged
with ``extras["parse_error"] = True``.

Decoding follows the reference: temperature 0.7, top-p 0.8, top-k 20, and the assistant turn
is prefilled with the start of the JSON answer (:data:`PREFILL`, ``{"status": "``) so the
model only has to continue it; :func:`parse_judge_output` then reads ``PREFILL + continuation``
leniently.

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

import ast
import contextlib
import json
import re
import time
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

# --------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------

_STATUS_SYNONYMS: dict[str, str] = {
    # malformed
    "malformed": "malformed",
    "empty": "malformed",
    "no_code": "malformed",
    "not_python": "malformed",
    # syntax errors
    "syntax_err": "syntax_err",
    "syntax_error": "syntax_err",
    "syntaxerror": "syntax_err",
    "syntax": "syntax_err",
    "indentationerror": "syntax_err",
    "indentation_error": "syntax_err",
    "compile_error": "syntax_err",
    "compilation_error": "syntax_err",
    "parse_error": "syntax_err",
    # runtime errors
    "runtime_err": "runtime_err",
    "runtime_error": "runtime_err",
    "runtimeerror": "runtime_err",
    "runtime": "runtime_err",
    "error": "runtime_err",
    "err": "runtime_err",
    "exception": "runtime_err",
    "crash": "runtime_err",
    "crashed": "runtime_err",
    "fail": "runtime_err",
    "failed": "runtime_err",
    "failure": "runtime_err",
    "traceback": "runtime_err",
    "timeout": "runtime_err",
    "timed_out": "runtime_err",
    "killed": "runtime_err",
    # ran, no (valid) submission
    "ran_no_sub": "ran_no_sub",
    "ran_no_submission": "ran_no_sub",
    "ran_without_submission": "ran_no_sub",
    "ran_but_no_submission": "ran_no_sub",
    "no_sub": "ran_no_sub",
    "no_submission": "ran_no_sub",
    "missing_submission": "ran_no_sub",
    "invalid_submission": "ran_no_sub",
    "no_output": "ran_no_sub",
    "invalid": "ran_no_sub",  # "not valid": ran, but no valid submission
    "ran": "ran_no_sub",
    # valid
    "valid": "valid",
    "valid_submission": "valid",
    "success": "valid",
    "successful": "valid",
    "succeeded": "valid",
    "ok": "valid",
    "pass": "valid",
    "passed": "valid",
    "submitted": "valid",
    "completed": "valid",
    "complete": "valid",
    "done": "valid",
}
# longest first, so that "ran_no_sub..." wins over "ran" and "syntax_error" over "syntax"
_STATUS_PREFIXES = sorted(_STATUS_SYNONYMS, key=len, reverse=True)

_BUCKET_SYNONYMS: dict[str, str] = {
    "low": "low",
    "poor": "low",
    "bad": "low",
    "weak": "low",
    "bottom": "low",
    "very_low": "low",
    "fair": "fair",
    "below_average": "fair",
    "ok": "fair",
    "okay": "fair",
    "decent": "fair",
    "mid": "mid",
    "medium": "mid",
    "middle": "mid",
    "average": "mid",
    "moderate": "mid",
    "good": "mid",
    "high": "high",
    "very_good": "high",
    "very_high": "high",
    "excellent": "high",
    "great": "high",
    "strong": "high",
    "top": "high",
    "best": "high",
}
_BUCKET_PREFIXES = sorted(_BUCKET_SYNONYMS, key=len, reverse=True)

_STATUS_KEYS = ("status", "outcome", "result", "state")
_BUCKET_KEYS = ("bucket", "quality_bucket", "quality", "rank", "tier", "score_bucket")
_FEEDBACK_KEYS = ("feedback", "log", "output", "stdout", "stderr", "message")


@dataclass(frozen=True)
class ParsedJudgement:
    """A judge answer read from model text.

    Attributes:
        status: one of :data:`~wmrl_envs.envs.autoresearch.scale.STATUSES`.
        bucket: one of :data:`~wmrl_envs.envs.autoresearch.scale.QUALITY_BUCKETS` when
            ``status == "valid"`` (``"low"`` if the model gave none or an unknown one), else
            the bucket the model gave (ignored for scoring) or ``None``.
        feedback: predicted sandbox log text (may be empty).
        bucket_defaulted: ``True`` when ``status == "valid"`` and the bucket fell back to
            ``"low"``.
    """

    status: str
    bucket: str | None
    feedback: str = ""
    bucket_defaulted: bool = False

    @property
    def pos(self) -> float | None:
        """Leaderboard position score in [0, 1] of the bucket (valid only), else ``None``."""
        return BUCKET_POSITIONS[self.bucket] if self.status == "valid" and self.bucket else None

    @property
    def score(self) -> float:
        """The predicted score on the AutoResearch reward scale (float in [0, 1])."""
        return score_from_status(self.status, self.pos)


def _norm_word(value: str) -> str:
    """Lower-case, map runs of non-alphanumerics to ``_``, strip ``_`` at both ends."""
    return re.sub(r"[^a-z0-9]+", "_", value.strip().lower()).strip("_")


def _match_vocab(value: Any, table: dict[str, str], prefixes: list[str]) -> str | None:
    if value is None or isinstance(value, (dict, list)):
        return None
    word = _norm_word(str(value))
    if not word:
        return None
    if word in table:
        return table[word]
    for key in prefixes:  # "runtime_error_keyerror" -> runtime_err; "valid_csv_written" -> valid
        if word.startswith(key + "_"):
            return table[key]
    return None


def _load_mapping(text: str) -> dict[str, Any] | None:
    """Decode the first ``{...}`` object of ``text`` (JSON, then a Python literal); trailing
    text after the object is ignored."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        obj, _ = json.JSONDecoder(strict=False).raw_decode(text[start:])
        if isinstance(obj, dict):
            return obj
    except ValueError:
        pass
    end = text.find("}", start)
    if end > start:
        try:
            obj = ast.literal_eval(text[start : end + 1])
            if isinstance(obj, dict):
                return obj
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    return None


def _get_key(mapping: dict[str, Any], keys: Sequence[str]) -> Any:
    lowered = {_norm_word(str(k)): v for k, v in mapping.items()}
    for key in keys:
        if key in lowered:
            return lowered[key]
    return None


def _key_pattern(keys: Sequence[str]) -> str:
    alternatives = "|".join(re.escape(k).replace("_", "[ _-]?") for k in keys)
    return r"""(?:^|[\s{,"'])["']?(?:%s)["']?\s*[:=]\s*""" % alternatives


def _scalar_after_key(text: str, keys: Sequence[str]) -> str | None:
    """Value of the first ``key: value`` pair for one of ``keys`` (quoted or bare word)."""
    for key in keys:
        m = re.search(_key_pattern([key]) + r"""(?:"([^"\n]*)"?|'([^'\n]*)'?|([^,}\n"']+))""", text, re.I)
        if m:
            return next(g for g in m.groups() if g is not None)
    return None


def _unescape(value: str) -> str:
    try:
        return json.loads('"' + value + '"', strict=False)
    except ValueError:
        return (
            value.replace("\\n", "\n").replace("\\t", "\t").replace('\\"', '"').replace("\\'", "'")
        )


def _feedback_after_key(text: str) -> str:
    """Feedback string value, tolerating a missing closing quote (truncated generation)."""
    m = re.search(_key_pattern(_FEEDBACK_KEYS) + r"""(["'])""", text, re.I)
    if not m:
        return ""
    quote = m.group(1)
    rest = text[m.end() :]
    close = re.search(r"(?<!\\)%s" % re.escape(quote), rest)
    if close:
        value = rest[: close.start()]
    else:  # truncated: take everything, drop a dangling brace / backslash
        value = re.sub(r"[\s}]*$", "", rest).rstrip("\\")
    return _unescape(value).strip()


def parse_judge_output(text: str) -> ParsedJudgement | None:
    """Read a judge answer from model text, leniently.

    The expected answer is a JSON object ``{"status": ..., "bucket": ..., "feedback": ...}``
    (the judge passes ``PREFILL + continuation``). Tolerated: missing braces, single quotes
    or no quotes, ``=`` instead of ``:``, any case, text before/after the object, a truncated
    feedback string, synonyms (``"error"``/``"exception"`` → ``runtime_err``,
    ``"syntax error"`` → ``syntax_err``, ``"success"``/``"ok"`` → ``valid``,
    ``"no submission"`` → ``ran_no_sub``, ``"medium"`` → ``mid``, ``"poor"`` → ``low``...),
    other key names (``outcome``/``result``, ``quality``, ``log``/``output``). A bare status
    word at the very start (``"valid, mid"``) is accepted too.

    Args:
        text: the model's text (str).

    Returns:
        A :class:`ParsedJudgement`, or ``None`` when no recognisable status is found.
        A valid status without a recognisable bucket gets bucket ``"low"``
        (``bucket_defaulted=True``).
    """
    if not isinstance(text, str) or not text.strip():
        return None
    mapping = _load_mapping(text)
    status = bucket = None
    feedback = ""
    if mapping is not None:
        status = _match_vocab(_get_key(mapping, _STATUS_KEYS), _STATUS_SYNONYMS, _STATUS_PREFIXES)
        bucket = _match_vocab(_get_key(mapping, _BUCKET_KEYS), _BUCKET_SYNONYMS, _BUCKET_PREFIXES)
        fb = _get_key(mapping, _FEEDBACK_KEYS)
        if isinstance(fb, (list, tuple)):
            fb = "\n".join(map(str, fb))
        feedback = str(fb).strip() if fb is not None else ""
    if status is None:
        status = _match_vocab(_scalar_after_key(text, _STATUS_KEYS), _STATUS_SYNONYMS, _STATUS_PREFIXES)
    if status is None:  # a bare leading status word: "valid, mid" / "Error: ..."
        m = re.match(r"""\s*[{\["'`]*\s*([A-Za-z][A-Za-z _-]{0,40})""", text)
        if m:
            words = _norm_word(m.group(1)).split("_")
            for n in range(min(len(words), 4), 0, -1):
                status = _STATUS_SYNONYMS.get("_".join(words[:n]))
                if status:
                    break
    if status is None or status not in STATUSES:
        return None
    if bucket is None:
        bucket = _match_vocab(_scalar_after_key(text, _BUCKET_KEYS), _BUCKET_SYNONYMS, _BUCKET_PREFIXES)
    if bucket is None and status == "valid":  # e.g. 'valid", "high", ...' without a key
        m = re.search(r"\b(%s)\b" % "|".join(QUALITY_BUCKETS), text[:200], re.I)
        bucket = m.group(1).lower() if m else None
    if not feedback:
        feedback = _feedback_after_key(text)
    defaulted = False
    if status == "valid" and bucket not in QUALITY_BUCKETS:
        bucket, defaulted = "low", True
    return ParsedJudgement(status=status, bucket=bucket, feedback=feedback, bucket_defaulted=defaulted)


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

    Mirrors :func:`wmrl_envs.envs.autoresearch.env.format_feedback`, so predicted and real
    observations have the same form (outcome mode of the WMRL method, Yang et al.,
    arXiv 2608.12564; ``docs/method.md``)::

        $ python solution.py
        <predicted log lines>
        [exit code 1]
        [grader] status: runtime_err | the program exited with status 1 | score 0.1

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
    lines = [f"$ python {SOLUTION_FILENAME}"]
    if status == "malformed":
        lines.append(f"[grader] status: malformed | {message or 'no Python source'} | score {score:.4g}")
        return "\n".join(lines)
    if log.strip():
        lines.append(log.rstrip("\n"))
    code = 0 if status in ("valid", "ran_no_sub") else 1
    lines.append(f"[exit code {code}" + (f" | {runtime_s:.2f} s]" if runtime_s is not None else "]"))
    if status == "valid":
        pos = BUCKET_POSITIONS.get(bucket or "", 0.0)
        msg = message or f"predicted quality {bucket} (position {pos:.3f})"
    else:
        msg = message or _GRADER_MESSAGES.get(status, status)
    lines.append(f"[grader] status: {status} | {msg} | score {score:.4g}")
    return "\n".join(lines)


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
        stop_at_brace: stop a sequence's generation at the first generated token that
            contains ``}`` (the end of the JSON answer), which saves decoding time; the
            parser tolerates a feedback string cut there.
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
        n_parse_errors: model answers that could not be parsed (int).
        seconds: wall-clock seconds spent in the model (tokenise + generate + decode).
        tokens_generated: generated tokens so far (int, EOS and padding excluded).

    Raises:
        ValueError: invalid sampling or size arguments, or ``max_prompt_tokens`` smaller than
            the prompt template (≈215 SmolLM2 tokens) plus 64.
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
                    timeout_s: float = 120.0, **kwargs: Any) -> "LLMJudgeWorldModel":
        """A judge generating on an OpenAI-compatible completions server (e.g. ``vllm serve``).

        Args:
            base_url: API root, e.g. ``"http://gpu-node:8000/v1"``.
            model: the served model's name.
            tokenizer: the served model's tokenizer (renders the chat template locally).
            api_key, timeout_s: see :class:`~wmrl_envs.world_models.vllm_backend.OpenAICompatibleGenerator`.
            **kwargs: constructor keyword arguments.
        """
        from wmrl_envs.world_models.vllm_backend import OpenAICompatibleGenerator

        gen = OpenAICompatibleGenerator(base_url, model, api_key=api_key, timeout_s=timeout_s)
        return cls(None, tokenizer, generator=gen, **kwargs)

    # ---------------------------------------------------------------- stats
    def stats(self) -> dict[str, float]:
        """Counters as a dict (for logging): calls, pre-checks, parse errors, seconds, tokens/s."""
        return {
            "n_model_calls": self.n_model_calls,
            "n_generate_calls": self.n_generate_calls,
            "n_precheck": self.n_precheck,
            "n_parse_errors": self.n_parse_errors,
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
            texts = self.generator.generate(
                prompts, max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                top_k=self.top_k, stop=["}"] if self.stop_at_brace else [], seed=seed,
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
        if self.stop_at_brace:
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
        token length are batched together to limit padding). Unparseable answers
        count as ``runtime_err`` (score 0.1, ``extras["parse_error"] = True``).

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
            env; ``None`` if that fails for this context), ``raw_output``
            (``PREFILL + continuation``, empty for pre-checked actions), ``model_called``
            and ``extras`` = ``{"bucket", "parse_error", "new_tokens", "log"}`` (``log``: the
            predicted program output alone; plus ``"precheck": True`` for pre-checked
            actions).

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
                raw = PREFILL + continuation
                parsed = parse_judge_output(raw)
                if parsed is None:
                    self.n_parse_errors += 1
                    status, bucket, score, log = "runtime_err", None, score_from_status("runtime_err"), ""
                else:
                    status, bucket, score = parsed.status, parsed.bucket, parsed.score
                    log = parsed.feedback if re.search(r"\w", parsed.feedback) else ""  # "..." is no log
                feedback = format_predicted_feedback(status, log, score, bucket=bucket)
                results[i] = WorldModelPrediction(
                    score=score,
                    status=status,
                    feedback=feedback,
                    observation=_next_obs(next_observation, contexts[i], feedback),
                    raw_output=raw,
                    model_called=True,
                    extras={"bucket": bucket, "parse_error": parsed is None, "new_tokens": n_new, "log": log},
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
