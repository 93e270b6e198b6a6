"""The judge's answer format and its strict parser.

The answer is one JSON object ``{"status", "bucket", "feedback"}`` (:func:`judge_json_schema`,
the constraint of constrained decoding); :func:`parse_judge_output` accepts exactly that and
nothing else, which is the whole check for generators that cannot be constrained. Output that
is no prediction counts as ``runtime_err`` (``docs/method.md``, "World model").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from wmrl_envs.envs.autoresearch.grading import BUCKET_POSITIONS, QUALITY_BUCKETS, score_from_status

__all__ = [
    "PREFILL",
    "JUDGE_STATUSES",
    "FEEDBACK_MAX_CHARS",
    "judge_json_schema",
    "ParsedJudgement",
    "parse_judge_output",
    "parse_judge_output_with_reason",
    "full_answer",
]

PREFILL = '{"status": "'
"""Start of the assistant turn, so that the model continues a JSON object."""

JUDGE_STATUSES: tuple[str, ...] = ("runtime_err", "ran_no_sub", "valid")
"""Statuses the model may predict. ``malformed`` and ``syntax_err`` are never the model's to
decide: the pre-check (the real grader's own host-side check, :func:`~wmrl_envs.envs.autoresearch.grading.check_source`) settles
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
        bucket: one of :data:`~wmrl_envs.envs.autoresearch.grading.QUALITY_BUCKETS` (it counts
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


def parse_judge_output_with_reason(
    text: Any, max_feedback_chars: int = FEEDBACK_MAX_CHARS
) -> tuple[ParsedJudgement | None, str]:
    """:func:`parse_judge_output` with the reason of a rejection.

    Returns:
        ``(judgement, "")`` when ``text`` is a prediction, else ``(None, reason)`` (one line
        saying which rule failed; the judge puts it in ``extras["parse_reason"]``). Never raises.
    """
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
    return parse_judge_output_with_reason(text, int(max_feedback_chars))[0]


def full_answer(continuation: str) -> str:
    """The answer text of a continuation of :data:`PREFILL`: ``PREFILL + continuation``, or
    the continuation itself when it is a whole object (a generator that ignored the prefill;
    ``PREFILL + "{..."`` can never be a valid answer)."""
    return continuation if continuation.lstrip().startswith("{") else PREFILL + continuation
