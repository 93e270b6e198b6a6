"""The judge's prompt, and the feedback written without the model.

* :class:`JudgePrompt` — system and user messages (:data:`SYSTEM_PROMPT`,
  :data:`USER_TEMPLATE`) in the chat template, task text and code cut to a token budget.
* :func:`format_predicted_feedback` — predicted feedback in the layout of the real feedback
  (:func:`~wmrl_envs.envs.autoresearch.observation.layout_feedback`), so that a predicted
  observation has the form of a real one.
"""

from __future__ import annotations

import re
from typing import Any

from wmrl_envs.envs.autoresearch.grading import BUCKET_POSITIONS, SOLUTION_FILE

from .parser import PREFILL

__all__ = [
    "SYSTEM_PROMPT",
    "USER_TEMPLATE",
    "JudgePrompt",
    "format_predicted_feedback",
]

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

    Built by the real grader's :func:`wmrl_envs.envs.autoresearch.observation.layout_feedback`, so
    predicted and real observations have the same form (outcome mode of the WMRL method, Yang
    et al., arXiv 2608.12564; ``docs/method.md``): the grader's report first, the predicted log
    quoted line by line (``| ``), so that a log can never pass for the report::

        [grader] status: runtime_err | score 0.1 | the program exited with status 1
        [grader] $ python solution.py | exit code 1
        | <predicted log lines>

    Args:
        status: one of :data:`~wmrl_envs.envs.autoresearch.grading.STATUSES`.
        log: the predicted program output (may be empty).
        score: the (predicted) score.
        bucket: the quality bucket of a valid prediction.
        message: the grader's explanation; a generic one per status when ``None``.
        runtime_s: seconds to show in the exit line (omitted when ``None``).

    Returns:
        The feedback text (str).
    """
    from wmrl_envs.envs.autoresearch.observation import layout_feedback

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


class JudgePrompt:
    """The judge's prompt: system and user messages in the tokenizer's chat template, ending
    with :data:`~.parser.PREFILL`, within a token budget.

    Args:
        tokenizer: the judge's Hugging Face tokenizer (a chat template is used when present).
        system_prompt: the system message (default :data:`SYSTEM_PROMPT`).
        max_prompt_tokens: most tokens of the whole prompt (int).

    Attributes:
        overhead: tokens of the prompt with empty task and code (int).

    Raises:
        ValueError: ``max_prompt_tokens`` is smaller than :attr:`overhead` plus 64.
    """

    droppable_sections: tuple[str, ...] = ("## Starter code",)
    """Markdown headings of task-text sections dropped first when the prompt is too long."""

    def __init__(self, tokenizer: Any, *, system_prompt: str = SYSTEM_PROMPT, max_prompt_tokens: int = 1024) -> None:
        self.tokenizer = tokenizer
        self.system_prompt = str(system_prompt)
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.overhead = self.n_tokens(self.render("", ""))
        if self.max_prompt_tokens < self.overhead + 64:
            raise ValueError(
                f"max_prompt_tokens={self.max_prompt_tokens} leaves no room for task and code: the "
                f"template alone has {self.overhead} tokens; use at least {self.overhead + 64}"
            )

    def n_tokens(self, text: str) -> int:
        """Tokens of ``text`` (no special tokens added)."""
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
        omitted = len(ids) - self.n_tokens(head) - self.n_tokens(tail)
        return head.rstrip("\n") + _TRUNC_MARK.format(n=max(omitted, 1)) + tail.lstrip("\n")

    def render(self, task: str, code: str) -> str:
        """The prompt of ``task`` text and ``code`` as given (no cutting), ending with :data:`PREFILL`."""
        user = USER_TEMPLATE.format(task=task.strip(), code=code.rstrip(), filename=SOLUTION_FILE)
        messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}]
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:
            text = f"{self.system_prompt}\n\n{user}\n\nAnswer: "
        return text + PREFILL

    def build(self, context: Any, code: str) -> str:
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
        room = max(self.max_prompt_tokens - self.overhead - 8, 32)
        n_task, n_code = self.n_tokens(task), self.n_tokens(code)
        if n_task + n_code <= room:
            return self.render(task, code)
        for heading in self.droppable_sections:  # e.g. the env prompt's starter script
            shorter = _drop_section(task, heading)
            if shorter != task:
                task, n_task = shorter, self.n_tokens(shorter)
                if n_task + n_code <= room:
                    return self.render(task, code)
        for _ in range(4):  # re-tokenisation at the cuts may add a few tokens: shrink and retry
            code_budget = min(n_code, max(room - n_task, int(room * 0.6)))
            task_budget = min(n_task, room - code_budget)
            code_budget = min(n_code, room - task_budget)
            prompt = self.render(self._cut_middle(task, task_budget), self._cut_middle(code, code_budget))
            excess = self.n_tokens(prompt) - self.max_prompt_tokens
            if excess <= 0 or room <= 32:  # (room <= 32: cannot shrink further)
                break
            room = max(room - excess - 8, 32)
        return prompt


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
