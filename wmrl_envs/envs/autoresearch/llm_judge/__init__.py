"""The LLM judge, AutoResearch's world model of the WMRL method (``docs/method.md``, "World model").

Split where its concerns part:

    * :mod:`.parser` — the answer format: :func:`judge_json_schema`, the strict
      :func:`parse_judge_output` (:func:`parse_judge_output_with_reason`: and why not) and
      :class:`ParsedJudgement`.
    * :mod:`.prompt` — :class:`JudgePrompt` (chat template, token budget) and
      :func:`format_predicted_feedback` (the real feedback's layout).
    * :mod:`.decoding` — the JSON-schema constraint on transformers (llguidance) and the
      frozen-backbone context.
    * :mod:`.judge` — :class:`LLMJudgeWorldModel`: generation on transformers, vLLM or an
      OpenAI-compatible server, and ``predict``.
"""

from __future__ import annotations

from .judge import LLMJudgeWorldModel
from .parser import (
    FEEDBACK_MAX_CHARS,
    JUDGE_STATUSES,
    PREFILL,
    ParsedJudgement,
    judge_json_schema,
    parse_judge_output,
    parse_judge_output_with_reason,
)
from .prompt import (
    SYSTEM_PROMPT,
    USER_TEMPLATE,
    JudgePrompt,
    format_predicted_feedback,
)

__all__ = [
    "ParsedJudgement",
    "parse_judge_output",
    "parse_judge_output_with_reason",
    "judge_json_schema",
    "JUDGE_STATUSES",
    "FEEDBACK_MAX_CHARS",
    "format_predicted_feedback",
    "LLMJudgeWorldModel",
    "JudgePrompt",
    "SYSTEM_PROMPT",
    "USER_TEMPLATE",
    "PREFILL",
]
