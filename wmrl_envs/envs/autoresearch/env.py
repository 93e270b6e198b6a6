"""``AutoResearchEnv``: one ML task per episode; the agent writes Python, real execution scores it.

Each episode draws one task from the registry (:mod:`~wmrl_envs.envs.autoresearch.tasks`).
The observation describes the task (overview, metric and direction, the data files with
their columns, dtypes and shapes) and shows the task's starter script as a working example.
The action is the full Python source of a solution. :meth:`AutoResearchEnv.step` pre-checks
the source on the host (empty / syntax errors are graded without executing anything), writes
the public files into a fresh job folder, runs the program in a sandbox
(:class:`~wmrl_envs.sandbox.base.Sandbox`) and grades ``submission.csv`` against hidden labels
(:mod:`~wmrl_envs.envs.autoresearch.grading`). The reward is the episode score on the WMRL
reward scale (:mod:`~wmrl_envs.envs.autoresearch.scale`).

By default an episode is a single turn. With ``max_turns=K > 1`` the feedback of each turn
(the grader's report and the tail of the program's output, see :func:`format_feedback`) is part of the next
observation, the episode's score is the maximum over turns, and each step's reward is the
increase of that running maximum, so the return equals the episode score.

Contents:
    * :class:`AutoResearchEnv` — the Gymnasium environment (registered as
      ``wmrl/AutoResearch-v0`` by :func:`wmrl_envs.envs.autoresearch.register_envs`).
    * :func:`format_feedback` — the feedback text of a :class:`~.grading.Grade`: the grader's
      report first, then the program's output, quoted line by line (:func:`layout_feedback`,
      :data:`GRADER_PREFIX`, :data:`OUTPUT_PREFIX`), so that nothing a program prints can
      pass for the grader's report.
    * :func:`next_observation` — the observation a step returns, from the previous
      observation and a feedback text (for world models that predict observations).
    * :func:`build_prompt` — the task prompt of an observation.
    * :func:`sanitize_text` — clamp text to the observation charset and a maximum length.
    * :data:`CHARSET`, :data:`PROMPT_MAX_CHARS`, :data:`FEEDBACK_MAX_CHARS`,
      :data:`ACTION_MAX_CHARS`, :data:`TASK_ID_MAX_CHARS` — the text-space parameters.
"""

from __future__ import annotations

import re
import shutil
import string
import tempfile
import warnings
import weakref
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
from gymnasium import spaces

from wmrl_envs.envs.autoresearch.grading import EXEC_ENV, SOLUTION_FILE, Grade, check_source, evaluate
from wmrl_envs.envs.autoresearch.grading import grade as grade_solution
from wmrl_envs.envs.autoresearch.leaderboards import get_leaderboard
from wmrl_envs.envs.autoresearch.submission import SUBMISSION_FILE
from wmrl_envs.envs.autoresearch.taskdata import task_data
from wmrl_envs.envs.autoresearch.tasks import ID_COLUMN, TaskSpec, get_task, list_tasks
from wmrl_envs.sandbox.base import Sandbox, SandboxLimits

__all__ = [
    "AutoResearchEnv",
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
        status: the status (one of :data:`~wmrl_envs.envs.autoresearch.scale.STATUSES`).
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


# ----------------------------------------------------------------------------------------------
# The environment
# ----------------------------------------------------------------------------------------------


def _hidden_paths() -> list[str]:
    from wmrl_envs.envs.autoresearch.secret import sandbox_hidden_paths

    return sandbox_hidden_paths()


def _warn_unhidden(sandbox: Any) -> None:
    """Warn when a given isolating sandbox leaves the task secret, ``wmrl_envs`` or the bundled data readable."""
    if not getattr(sandbox, "isolates", False):
        return  # a non-isolating backend already warned that it hides nothing
    hidden = [str(p) for p in (getattr(sandbox, "hidden_paths", None) or [])]
    need = _hidden_paths()
    missing = [p for p in need if not any(p == h or p.startswith(h.rstrip("/") + "/") for h in hidden)]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        warnings.warn(
            f"the sandbox given to AutoResearchEnv does not hide {shown}"
            f"{'' if hasattr(sandbox, 'hidden_paths') else ' (it has no hidden_paths attribute)'}: a solution "
            "could read the task secret, the task generators or the data sets the tasks are built from. Build it "
            "with hidden_paths=wmrl_envs.envs.autoresearch.secret.sandbox_hidden_paths(), or pass a backend name",
            stacklevel=3,
        )


class AutoResearchEnv(gym.Env):
    """One ML task per episode; the action is Python source, graded by real sandboxed execution.

    Observation (``spaces.Dict``):
        * ``task_id`` — ``Text``: the task id.
        * ``prompt`` — ``Text``: overview, metric and direction, data inventory, starter code.
        * ``feedback`` — ``Text``: the last turn's feedback (:func:`format_feedback`), ``""``
          after reset.
        * ``turn`` — ``Discrete(max_turns + 1)``: turns taken so far (int).

    Action: ``Text`` — the complete Python source of a solution (charset :data:`CHARSET`,
    at most :data:`ACTION_MAX_CHARS` characters; longer or non-ASCII sources are still
    executed as given).

    Reward: the increase of the episode's running maximum score (the first step: its score),
    so the return equals the best score over the episode's turns. Scores follow
    :mod:`~wmrl_envs.envs.autoresearch.scale`: malformed / syntax error 0.0, runtime error
    0.1, ran without a valid submission 0.2, valid ``0.5 + 0.5 * position``.

    Step info: ``status``, ``score``, ``best_score``, ``metric``, ``metric_value``,
    ``position``, ``runtime_s``, ``stdout_tail``, ``stderr_tail``, ``message``, ``task_id``,
    ``turn``, ``executed``, and ``job_dir`` (str, only with ``keep_job_dirs``).

    Args:
        tasks: ``"train"``, ``"heldout"``, ``"all"``, or a list of task ids.
        sandbox: a :class:`~wmrl_envs.sandbox.base.Sandbox` (or any object with a compatible
            ``run_python``), or a backend name for
            :func:`wmrl_envs.sandbox.make_sandbox` (resolved at the first execution; the
            environment then owns and closes it). The default ``"auto"`` picks bubblewrap or
            Docker and never falls back to running code unisolated: where neither works the
            first execution raises :class:`~wmrl_envs.sandbox.base.SandboxUnavailableError`;
            pass ``"subprocess"`` to opt in to no isolation.
        limits: per-run :class:`~wmrl_envs.sandbox.base.SandboxLimits` (``None``: the
            sandbox's defaults).
        max_turns: turns per episode (>= 1).
        workdir_root: folder for job folders (a private temporary folder if ``None``).
        keep_job_dirs: keep job folders after grading (for debugging).
        render_mode: ``None``, ``"ansi"`` (``render()`` returns text) or ``"human"`` (prints).

    Raises:
        ValueError: unknown task id / split, empty task list, ``max_turns < 1``, unknown
            render mode.
        TypeError: ``sandbox`` is neither a str nor an object with ``run_python``.
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 1}

    def __init__(
        self,
        tasks: str | Sequence[str] = "train",
        sandbox: Sandbox | str = "auto",
        limits: SandboxLimits | None = None,
        max_turns: int = 1,
        workdir_root: str | None = None,
        keep_job_dirs: bool = False,
        render_mode: str | None = None,
    ) -> None:
        super().__init__()
        if isinstance(tasks, str):
            if tasks not in ("train", "heldout", "all"):
                raise ValueError(
                    f"tasks must be 'train', 'heldout', 'all' or a list of task ids, got {tasks!r}"
                )
            task_ids = list_tasks(None if tasks == "all" else tasks)
        else:
            task_ids = [get_task(t).task_id for t in tasks]  # validates
            if not task_ids:
                raise ValueError("tasks is an empty list")
            task_ids = list(dict.fromkeys(task_ids))
        if int(max_turns) < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")
        if not isinstance(sandbox, str) and not callable(getattr(sandbox, "run_python", None)):
            raise TypeError(f"sandbox must be a Sandbox instance or a backend name, got {type(sandbox).__name__}")

        self.task_ids: list[str] = task_ids
        self.max_turns = int(max_turns)
        self.limits = limits
        self.keep_job_dirs = bool(keep_job_dirs)
        self.render_mode = render_mode
        self._sandbox_spec = sandbox
        self._sandbox: Any = None if isinstance(sandbox, str) else sandbox
        if not isinstance(sandbox, str):
            _warn_unhidden(sandbox)
        self._owns_sandbox = isinstance(sandbox, str)
        self._workdir_root_arg = workdir_root
        self._root: Path | None = None
        self._owns_root = False
        self._root_finalizer: weakref.finalize | None = None

        text = dict(charset=CHARSET)
        self.observation_space = spaces.Dict(
            {
                "task_id": spaces.Text(max_length=TASK_ID_MAX_CHARS, min_length=1, **text),
                "prompt": spaces.Text(max_length=PROMPT_MAX_CHARS, min_length=0, **text),
                "feedback": spaces.Text(max_length=FEEDBACK_MAX_CHARS, min_length=0, **text),
                "turn": spaces.Discrete(self.max_turns + 1),
            }
        )
        self.action_space = spaces.Text(max_length=ACTION_MAX_CHARS, min_length=0, **text)

        self._task: TaskSpec | None = None
        self._obs: dict | None = None
        self._turn = 0
        self._best = 0.0
        self._done = False
        self._last_grade: Grade | None = None
        self._prompts: dict[str, str] = {}

    # -------------------------------------------------------------------------- helpers
    @property
    def task(self) -> TaskSpec | None:
        """The current episode's task (``None`` before the first reset)."""
        return self._task

    @property
    def last_grade(self) -> Grade | None:
        """The :class:`~wmrl_envs.envs.autoresearch.grading.Grade` of the last step (``None`` after reset)."""
        return self._last_grade

    @property
    def sandbox(self) -> Any:
        """The sandbox, created on first access when the environment was given a backend name.

        An isolating backend made here hides
        :func:`~wmrl_envs.envs.autoresearch.secret.sandbox_hidden_paths` (the task secret's
        folder, this project's installed files, scikit-learn's bundled data sets).
        """
        if self._sandbox is None:
            from wmrl_envs.sandbox import make_sandbox

            self._sandbox = make_sandbox(backend=self._sandbox_spec, limits=self.limits, hidden_paths=_hidden_paths())
        return self._sandbox

    def _workdir_root(self) -> Path:
        """The folder holding this environment's job folders and public-file cache.

        Without ``workdir_root``: a private folder in the system temporary folder, owned by
        this process (:class:`~wmrl_envs.sandbox.jobdirs.OwnedFolder`); making it first
        removes such folders -- and unmounts their tmpfs job folders -- left by environments of
        processes that were killed (so a resumed run cleans up after the killed one).
        """
        if self._root is None:
            if self._workdir_root_arg is None:
                if self.keep_job_dirs:  # kept for the user: never swept
                    self._root = Path(tempfile.mkdtemp(prefix="wmrl-autoresearch-"))
                else:
                    from wmrl_envs.sandbox.jobdirs import OwnedFolder

                    owned = OwnedFolder(None, prefix="wmrl-autoresearch-")
                    self._root = owned.path
                    # also clean up if the env is dropped without close()
                    self._root_finalizer = weakref.finalize(self, owned.remove)
                self._owns_root = True
            else:
                self._root = Path(self._workdir_root_arg)
                self._root.mkdir(parents=True, exist_ok=True)
        return self._root

    def prepare_leaderboards(self, task_ids: Sequence[str] | None = None) -> dict[str, list[float]]:
        """Make sure the leaderboards of the environment's tasks exist under the active secret.

        Under the reference secret this only reads the shipped file; under any other secret a
        task's board is built once per installation (its reference solutions run on the host,
        tens of CPU-seconds per task, progress on stderr) and cached. :meth:`reset` calls this
        for its task, so a build never falls inside :meth:`step`, whose time a caller charges as
        execution cost; call it up front to pay for all boards before training starts.

        Args:
            task_ids: tasks to prepare (default: all of the environment's tasks).

        Returns:
            ``{task_id: reference metric values}``.

        Raises:
            ValueError: a task id that is not one of the environment's tasks.
            RuntimeError: a reference solution failed while building a board.
        """
        ids = list(self.task_ids if task_ids is None else task_ids)
        unknown = [t for t in ids if t not in self.task_ids]
        if unknown:
            raise ValueError(f"task(s) {unknown} are not this environment's tasks: {', '.join(self.task_ids)}")
        return {t: get_leaderboard(t) for t in ids}

    def _prompt(self, task_id: str) -> str:
        if task_id not in self._prompts:
            self._prompts[task_id] = build_prompt(task_id)
        return self._prompts[task_id]

    def _observation(self) -> dict:
        assert self._obs is not None
        return dict(self._obs)

    # -------------------------------------------------------------------------- gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Start an episode on one task.

        Args:
            seed: seeds the environment's ``np_random`` (task sampling).
            options: ``{"task_id": id}`` picks that task (must be one of the environment's
                tasks); otherwise a task is drawn uniformly with ``np_random``.

        Returns:
            ``(observation, info)``; info holds ``task_id``, ``category``, ``split``,
            ``metric``, ``higher_is_better``, ``starter_code``, ``max_turns``.

        Raises:
            ValueError: ``options["task_id"]`` is not one of the environment's tasks, or an
                option other than ``task_id`` was given (e.g. a typo).
        """
        super().reset(seed=seed)
        unknown = set(options or {}) - {"task_id"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; the only option is 'task_id'")
        task_id = (options or {}).get("task_id")
        if task_id is None:
            task_id = self.task_ids[int(self.np_random.integers(len(self.task_ids)))]
        elif task_id not in self.task_ids:
            get_task(task_id)  # unknown ids: the registry's error lists all ids
            raise ValueError(f"task {task_id!r} is not one of this environment's tasks: {', '.join(self.task_ids)}")
        self.prepare_leaderboards([task_id])  # a one-off build belongs to no step's cost
        self._task = get_task(task_id)
        self._turn = 0
        self._best = 0.0
        self._done = False
        self._last_grade = None
        self._obs = {
            "task_id": sanitize_text(task_id, TASK_ID_MAX_CHARS),
            "prompt": self._prompt(task_id),
            "feedback": "",
            "turn": 0,
        }
        info = {
            "task_id": task_id,
            "category": self._task.category,
            "split": self._task.split,
            "metric": self._task.metric,
            "higher_is_better": self._task.higher_is_better,
            "starter_code": self._task.starter_code,
            "max_turns": self.max_turns,
        }
        if self.render_mode == "human":
            self.render()
        return self._observation(), info

    def step(self, action: str) -> tuple[dict, float, bool, bool, dict]:
        """Execute and grade one solution.

        Args:
            action: the complete Python source (str).

        Returns:
            ``(observation, reward, terminated, truncated, info)``; ``terminated`` is ``True``
            once ``max_turns`` turns were taken; ``truncated`` is always ``False``.

            When the sandbox machinery fails during the execution (``run_python`` raises
            ``SandboxUnavailableError`` or a subclass: the sandbox could not start, the Docker
            daemon died...), the turn is **ungraded**, not the agent's fault: ``reward`` 0.0,
            ``info["graded"] = False``, ``info["status"] = "ungraded"``,
            ``info["ungraded_cause"] = "sandbox_unavailable"``, ``info["message"]`` the error;
            the episode terminates (an ungraded turn leaves the whole episode ungraded) and a
            warning is logged. The wrappers drop such rollouts (see ``docs/method.md``,
            "Ungraded rollouts"). What the program causes itself (time-out, memory, crash)
            stays graded. Graded steps carry ``info["graded"] = True``.

        Raises:
            RuntimeError: ``step`` before ``reset`` or after the episode ended.
            TypeError: ``action`` is not a str.
            SandboxUnavailableError: the sandbox backend named at construction cannot be
                created here (a configuration error, raised at the first execution).
        """
        if self._task is None or self._obs is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode is over; call reset() to start a new one")
        if not isinstance(action, str):
            raise TypeError(f"the action must be Python source (str), got {type(action).__name__}")
        import logging

        from wmrl_envs.core.ungraded import CAUSE_KEY, SANDBOX_UNAVAILABLE
        from wmrl_envs.sandbox.base import SandboxUnavailableError

        task = self._task
        if check_source(action) is not None:  # decided on the host: no sandbox, no job folder
            grade, job_dir = grade_solution(task, None, None, source=action), None
        else:
            root = self._workdir_root()
            sandbox = self.sandbox  # a backend that cannot be built here raises: configuration error
            try:
                grade, job_dir = evaluate(
                    task, action, sandbox, workdir_root=root / "jobs", limits=self.limits,
                    cache_dir=root / "public-cache", keep_job_dir=self.keep_job_dirs,
                    leaderboard=get_leaderboard(task.task_id), env=EXEC_ENV,
                )
            except SandboxUnavailableError as exc:  # the machinery failed, not the agent's code
                message = sanitize_text(f"{type(exc).__name__}: {exc}", 1000)
                logging.getLogger(__name__).warning(
                    "AutoResearch step on %s ungraded (%s): %s", task.task_id, SANDBOX_UNAVAILABLE, message
                )
                self._turn += 1
                self._last_grade = None
                self._done = True  # an ungraded turn leaves the episode ungraded: no more turns
                self._obs = next_observation(  # the grader's layout; nothing of the program is quoted
                    self._obs, f"{GRADER_PREFIX}status: ungraded | the sandbox failed, not the program: {' '.join(message.split())}"
                )
                info = {
                    "task_id": task.task_id, "turn": self._turn, "status": "ungraded", "score": None,
                    "best_score": float(self._best), "metric": task.metric, "metric_value": None,
                    "position": None, "runtime_s": 0.0, "executed": False, "message": message,
                    "stdout_tail": "", "stderr_tail": "", "graded": False, CAUSE_KEY: SANDBOX_UNAVAILABLE,
                }
                if self.render_mode == "human":
                    self.render()
                return self._observation(), 0.0, True, False, info
        self._turn += 1
        self._last_grade = grade
        feedback = format_feedback(grade)
        new_best = max(self._best, grade.score)
        reward = float(new_best - self._best)
        self._best = new_best
        terminated = self._turn >= self.max_turns
        self._done = terminated
        self._obs = next_observation(self._obs, feedback)
        info = {
            "task_id": task.task_id,
            "turn": self._turn,
            "status": grade.status,
            "score": float(grade.score),
            "best_score": float(self._best),
            "metric": task.metric,
            "metric_value": grade.metric_value,
            "position": grade.position,
            "runtime_s": float(grade.runtime_s),
            "executed": bool(grade.executed),
            "message": grade.message,
            "stdout_tail": grade.stdout_tail,
            "stderr_tail": grade.stderr_tail,
            "graded": True,
        }
        if job_dir is not None:
            info["job_dir"] = str(job_dir)
        if self.render_mode == "human":
            self.render()
        return self._observation(), reward, terminated, False, info

    def render(self) -> str | None:
        """``"ansi"``: the current observation as text; ``"human"``: print it; else ``None``."""
        if self.render_mode is None or self._obs is None:
            return None
        o = self._obs
        text = f"[{o['task_id']} | turn {o['turn']}/{self.max_turns} | best score {self._best:.4g}]\n"
        text += o["feedback"] if o["feedback"] else o["prompt"]
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        """Close the sandbox if the environment created it; delete its own temporary folder."""
        if self._owns_sandbox and self._sandbox is not None:
            try:
                self._sandbox.close()
            finally:
                self._sandbox = None
        if self._root is not None:
            if self._owns_root and not self.keep_job_dirs:
                if self._root_finalizer is not None:
                    self._root_finalizer()  # rmtree(root, ignore_errors=True), once
                    self._root_finalizer = None
            elif not self._owns_root:
                shutil.rmtree(self._root / "public-cache", ignore_errors=True)
            self._root = None
        super().close()
