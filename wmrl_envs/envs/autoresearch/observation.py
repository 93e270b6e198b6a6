"""What an AutoResearch observation says: the task prompt, the feedback text, the text space.

Real and predicted observations share this format: :func:`format_feedback` lays out the
grader's report of a real step, the LLM judge's predicted feedback uses the same
:func:`layout_feedback`, and :func:`next_observation` makes the next observation of both.
The feedback starts with the grader's report and quotes every line the program printed, so
that nothing a program prints can pass for the grader (``docs/autoresearch.md``, "The
feedback"). The environment itself is :mod:`.env`.
"""

from __future__ import annotations

import re
import string
from typing import Any, Sequence

from wmrl_envs.envs.autoresearch.grading import SOLUTION_FILE, SUBMISSION_FILE, Grade
from wmrl_envs.envs.autoresearch.taskdata import task_data
from wmrl_envs.envs.autoresearch.tasks import ID_COLUMN, TaskSpec, get_task

__all__ = [
    "format_feedback",
    "layout_feedback",
    "GRADER_PREFIX",
    "OUTPUT_PREFIX",
    "next_observation",
    "build_prompt",
    "sanitize_text",
    "CHARSET",
    "PROMPT_MAX_CHARS",
    "FEEDBACK_MAX_CHARS",
    "ACTION_MAX_CHARS",
    "TASK_ID_MAX_CHARS",
]

CHARSET: str = string.printable
"""Characters allowed in observation and action texts: printable ASCII, newline, tab (and
``\\r``, ``\\x0b``, ``\\x0c``)."""

PROMPT_MAX_CHARS = 16_000
FEEDBACK_MAX_CHARS = 6_000
ACTION_MAX_CHARS = 20_000
TASK_ID_MAX_CHARS = 64

_CHARSET_SET = frozenset(CHARSET)
_TRUNCATION_MARK = "\n...[truncated]...\n"
_REPLACEMENTS = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-",
                 "\u2026": "...", "\u00a0": " ", "\u2192": "->", "\u00d7": "x"}


def sanitize_text(text: Any, max_length: int, *, keep: str = "head") -> str:
    """Clamp a text to :data:`CHARSET` and a maximum length.

    Common typographic characters are mapped to ASCII look-alikes, any other character
    outside the charset becomes ``?``; a too-long text is cut, keeping its beginning
    (``keep="head"``) or its end (``keep="tail"``), with a ``...[truncated]...`` mark.

    Args:
        text: the text (non-str values are converted with ``str``; ``None`` gives ``""``).
        max_length: the most characters of the result (>= 0).
        keep: ``"head"`` or ``"tail"``.

    Returns:
        A str of at most ``max_length`` characters from :data:`CHARSET`.

    Raises:
        ValueError: negative ``max_length`` or unknown ``keep``.
    """
    if max_length < 0:
        raise ValueError(f"max_length must be >= 0, got {max_length}")
    if keep not in ("head", "tail"):
        raise ValueError(f"keep must be 'head' or 'tail', got {keep!r}")
    s = "" if text is None else str(text)
    if any(c not in _CHARSET_SET for c in s):
        s = "".join(c if c in _CHARSET_SET else _REPLACEMENTS.get(c, "?") for c in s)
    if len(s) > max_length:
        mark = _TRUNCATION_MARK if max_length > 4 * len(_TRUNCATION_MARK) else ""
        n = max_length - len(mark)
        s = s[:n] + mark if keep == "head" else mark + s[len(s) - n:]
    return s


# ----------------------------------------------------------------------------------------------
# Prompt and feedback
# ----------------------------------------------------------------------------------------------


def _column_lines(df, max_lines: int = 60) -> list[str]:
    """Describe columns compactly; runs of >= 4 same-pattern numeric columns (f00..f30) are grouped."""
    from pandas.api.types import is_numeric_dtype

    info = [(str(c), str(df[c].dtype), float(df[c].isna().mean())) for c in df.columns]
    numeric = {str(c): is_numeric_dtype(df[c]) for c in df.columns}

    def key(k: int) -> tuple[str, str] | None:
        name, dtype, miss = info[k]
        return None if miss > 0 or not numeric[name] else (re.sub(r"\d+", "#", name), dtype)

    lines: list[str] = []
    i = 0
    while i < len(info):
        j = i
        if key(i) is not None:
            while j + 1 < len(info) and key(j + 1) == key(i):
                j += 1
        if j - i + 1 >= 4:
            lines.append(f"  {info[i][0]} .. {info[j][0]}: {info[i][1]} ({j - i + 1} columns)")
        else:
            for n, d, m in info[i : j + 1]:
                extra = f", {m:.1%} missing" if m > 0 else ""
                if not numeric[n]:
                    cats = sorted(map(str, df[n].dropna().unique()))
                    shown = ", ".join(cats[:8]) + (", ..." if len(cats) > 8 else "")
                    extra += f", categorical: {shown}"
                lines.append(f"  {n}: {d}{extra}")
        i = j + 1
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"  ... ({len(lines) - max_lines} more columns)"]
    return lines


def build_prompt(task: TaskSpec | str) -> str:
    """The task prompt of an observation.

    It holds the task overview, the metric and its direction, the data inventory (files,
    shapes, columns with dtypes / missing rates / categories, the target's classes or
    range), the rules of execution, and the starter script as a working example.

    Args:
        task: a :class:`TaskSpec` or task id.

    Returns:
        Plain text within :data:`CHARSET` and at most :data:`PROMPT_MAX_CHARS` characters.

    Raises:
        ValueError: unknown task id.
    """
    task = get_task(task) if isinstance(task, str) else task
    data = task_data(task.task_id)
    n_tr, n_feat = data.X_train.shape
    n_te = len(data.X_test)
    y = data.y_train
    if task.problem_type == "classification":
        freq = y.value_counts(normalize=True)
        target_desc = "classes " + ", ".join(f"{k} ({v:.1%})" for k, v in sorted(freq.items(), key=lambda kv: str(kv[0])))
    else:
        target_desc = f"mean {y.mean():.4g}, std {y.std():.4g}, min {y.min():.4g}, max {y.max():.4g}"
    parts = [
        f"# Task {task.task_id} ({task.category})",
        "",
        task.overview,
        "",
        "## Data (files in the working directory)",
        f"- train.csv: {n_tr} rows x {n_feat + 1} columns ({n_feat} features + target '{task.target}')",
        f"- test.csv: {n_te} rows x {n_feat + 1} columns ('{ID_COLUMN}' + {n_feat} features; no target)",
        f"- sample_submission.csv: {n_te} rows, columns '{ID_COLUMN}', '{task.target}' (placeholder values)",
        f"Target '{task.target}' ({data.y_train.dtype}): {target_desc}",
        "Feature columns (dtype, missing rate, categories):",
        *_column_lines(data.X_train),
        "",
        "## Execution",
        f"Your program runs as `python {SOLUTION_FILE}` with the data folder as its working directory "
        f"(read files by relative path), one CPU thread, no network and limited time and memory. It must "
        f"write {SUBMISSION_FILE} there. numpy, pandas, scipy and scikit-learn are available.",
        "",
        "## Starter code (a complete, working baseline; the line starting with `model = ` builds the estimator)",
        "```python",
        task.starter_code.rstrip("\n"),
        "```",
    ]
    return sanitize_text("\n".join(parts), PROMPT_MAX_CHARS)


GRADER_PREFIX = "[grader] "
"""Start of every line the grader writes into a feedback text."""

OUTPUT_PREFIX = "| "
"""Start of every line of the program's own output in a feedback text (quoted, so that nothing
the program prints can look like a :data:`GRADER_PREFIX` line)."""

_OUTPUT_CUT_NOTE = GRADER_PREFIX + "(program output cut: its start is left out)"


def _cap_line(line: str, n: int) -> str:
    """``line`` cut to ``n`` characters, ending in ``...`` when cut."""
    return line if len(line) <= n else line[: n - 3] + "..."


def _one_line(text: Any) -> str:
    return " ".join(sanitize_text(text, FEEDBACK_MAX_CHARS).split())


def layout_feedback(
    status: str,
    score: float,
    details: Sequence[str] = (),
    *,
    run: str | None = None,
    output: str = "",
    max_chars: int = FEEDBACK_MAX_CHARS,
) -> str:
    """A feedback text in the grader's layout: the grader's report first, the program's output quoted.

    Layout::

        [grader] status: valid | score 0.9375 | roc_auc = 0.87754 (higher is better) | beats 7 of 8 reference solutions (position 0.875)
        [grader] $ python solution.py | exit code 0 | 2.31 s
        | fitted LogisticRegression on 24000 rows x 37 features; wrote submission.csv with 8000 rows

    Only the grader's lines start with :data:`GRADER_PREFIX`; every line of ``output`` (split
    at any line break, ``\r`` included) starts with :data:`OUTPUT_PREFIX`, so text a program
    prints (or a world model predicts as its log) can neither come before the grader's report
    nor read as one of its lines. Status and score come first on the report line; the details
    after them are collapsed to that one line. When the text would be too long, the start of
    the output is cut (a grader line says so); the grader's lines are always kept (the two
    together take at most half of ``max_chars``: a report line longer than its share ends in
    ``...`` after status and score, and the run line takes at most a quarter). The real
    grader (:func:`format_feedback`) and the world models that predict feedback
    (:func:`wmrl_envs.envs.autoresearch.llm_judge.format_predicted_feedback`) share this layout.

    Args:
        status: the status (one of :data:`~wmrl_envs.envs.autoresearch.grading.STATUSES`).
        score: the score (reward scale, [0, 1]).
        details: further fields of the report line (metric, position, the grader's message).
        run: the second grader line's text after ``$ python solution.py | `` (exit code,
            seconds), or ``None`` for no run line (nothing was executed).
        output: the program's output (stdout then stderr), any text.
        max_chars: the most characters of the result (at least 400).

    Returns:
        Text within :data:`CHARSET` of at most ``max_chars`` characters.

    Raises:
        ValueError: ``max_chars`` below 400.
    """
    if max_chars < 400:
        raise ValueError(f"max_chars must be >= 400, got {max_chars}")
    fields = [f"status: {_one_line(status)}", f"score {float(score):.4g}", *(_one_line(d) for d in details if str(d).strip())]
    report = GRADER_PREFIX + " | ".join(fields)
    head = []
    if run is not None:  # at most a quarter of the text, so the report line keeps room too
        head.append(_cap_line(f"{GRADER_PREFIX}$ python {SOLUTION_FILE} | {_one_line(run)}", max_chars // 4))
    room_report = max_chars // 2 - sum(len(h) + 1 for h in head)  # the grader lines share half the text
    head_text = "\n".join([_cap_line(report, room_report), *head])
    lines = sanitize_text(output, 4 * max_chars, keep="tail").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        return head_text
    body = "\n".join(OUTPUT_PREFIX + line.rstrip() for line in lines)
    room = max_chars - len(head_text) - 1
    if len(body) > room:
        keep = room - len(_OUTPUT_CUT_NOTE) - 1
        tail = body[len(body) - keep:]
        if not tail.startswith(OUTPUT_PREFIX) or body[len(body) - keep - 1] != "\n":  # cut inside a line
            tail = OUTPUT_PREFIX + "..." + tail[len(OUTPUT_PREFIX) + 3:]
        body = _OUTPUT_CUT_NOTE + "\n" + tail
    return head_text + "\n" + body


def format_feedback(grade: Grade) -> str:
    """The feedback text of one graded turn: the grader's report, then the program's quoted output.

    See :func:`layout_feedback` for the layout; e.g. for a program that raised::

        [grader] status: runtime_err | score 0.1 | the program exited with status 1
        [grader] $ python solution.py | exit code 1 | 2.31 s
        | Traceback (most recent call last):
        | ...
        | RuntimeError: boom

    A ``malformed`` action has the report line only (nothing ran); a ``syntax_err`` has the
    run line ``exit code 1`` and the error as Python prints it.

    Args:
        grade: the :class:`~wmrl_envs.envs.autoresearch.grading.Grade`.

    Returns:
        Text within :data:`CHARSET` and at most :data:`FEEDBACK_MAX_CHARS` characters
        (the start of the program's output is cut first).
    """
    if grade.status == "malformed":
        return layout_feedback("malformed", grade.score, [grade.message])
    if grade.timed_out:
        run = f"killed: wall-clock time limit exceeded after {grade.runtime_s:.2f} s"
    elif grade.status == "syntax_err":
        run = f"exit code 1 | {grade.runtime_s:.2f} s"
    elif grade.exit_code is None:
        run = f"killed | {grade.runtime_s:.2f} s"
    else:
        run = f"exit code {grade.exit_code} | {grade.runtime_s:.2f} s"
    if grade.status == "valid":
        direction = "higher is better" if grade.higher_is_better else "lower is better"
        beaten = int(round((grade.position or 0.0) * grade.n_reference))
        details = [
            f"{grade.metric} = {grade.metric_value:.5g} ({direction})",
            f"beats {beaten} of {grade.n_reference} reference solutions (position {grade.position:.3f})",
        ]
    else:
        details = [grade.message]
    out = "\n".join(t.rstrip("\n") for t in (grade.stdout_tail or "", grade.stderr_tail or "") if t.strip())
    return layout_feedback(grade.status, grade.score, details, run=run, output=out)


def next_observation(obs: dict, feedback: str) -> dict:
    """The observation a step returns, from the previous observation and a feedback text.

    The task id and prompt carry over, ``feedback`` is the (sanitised) feedback text and
    ``turn`` increases by one. The environment builds its own step observations with this
    function, so a world model that predicts feedback predicts observations of the same form.
    A feedback longer than :data:`FEEDBACK_MAX_CHARS` keeps its beginning, where the grader's
    report is (:func:`layout_feedback`).

    Args:
        obs: the previous observation (keys ``task_id``, ``prompt``, ``feedback``, ``turn``).
        feedback: the feedback text of the step (real or predicted).

    Returns:
        A new dict with the four keys.

    Raises:
        KeyError: ``obs`` lacks a key.
    """
    return {
        "task_id": str(obs["task_id"]),
        "prompt": str(obs["prompt"]),
        "feedback": sanitize_text(feedback, FEEDBACK_MAX_CHARS, keep="head"),
        "turn": int(obs["turn"]) + 1,
    }
