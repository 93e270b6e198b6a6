"""From an execution's output to a score: read the submission, compute the metric, place it on
the task's leaderboard, map the outcome to the reward scale.

:func:`grade_execution` grades one execution of a solution, or a source that the host pre-check
(:func:`check_source`) decides without executing it. Of a program that ran, ``submission.csv`` is
read and validated (:func:`read_submission`: whatever the file holds, a problem with it is a
reason returned to the grader, the agent's ``ran_no_sub``, never an exception; the host reads at
most :func:`submission_max_bytes` bytes and parses two columns; ``docs/autoresearch.md``, "What
the grader reads"), the task metric is computed (:func:`compute_metric`), placed on the
leaderboard the caller gives (:func:`position_score`) and mapped to the reward scale
(:func:`score_from_status`).

The scale is the one the WMRL method uses (Yang et al., arXiv 2608.12564; ``docs/method.md``,
"Reward scale"): a program that does not parse scores 0.0, one that raises at run time 0.1, one
that runs but writes no valid submission 0.2, and a valid submission ``0.5 + 0.5 * pos`` where
``pos`` in [0, 1] is its leaderboard position score. The LLM judge
(:mod:`~wmrl_envs.envs.autoresearch.llm_judge`) decides with the same :func:`check_source` and
maps its predicted status with the same :func:`score_from_status`, so that real and predicted
grades live on one scale.

This module runs nothing and does not know where leaderboards come from: :mod:`.running` runs a
solution in a sandbox and grades it here, :mod:`.leaderboards` builds a task's board by grading
its reference solutions here, and :func:`~.env.evaluate` / :func:`~.env.grade` add the task's
board (:func:`~.leaderboards.get_leaderboard`).
"""

from __future__ import annotations

import csv
import io
import math
import os
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from stat import S_ISREG
from typing import Any, Callable, Literal, Sequence, Union

import numpy as np
import pandas as pd

from wmrl_envs.envs.autoresearch.taskdata import TaskData, task_data
from wmrl_envs.envs.autoresearch.tasks import ID_COLUMN, LABEL_METRICS, TaskSpec, get_task
from wmrl_envs.sandbox.base import ExecutionResult

__all__ = [
    # the reward scale
    "Status",
    "STATUSES",
    "STATUS_SCORES",
    "QUALITY_BUCKETS",
    "BUCKET_POSITIONS",
    "score_from_status",
    "position_score",
    # the submission and the metric
    "SUBMISSION_FILE",
    "SUBMISSION_BYTES_PER_ROW",
    "SUBMISSION_HEADER_BYTES",
    "MAX_SUBMISSION_COLUMNS",
    "submission_max_bytes",
    "read_submission",
    "compute_metric",
    # the grade
    "Grade",
    "Leaderboard",
    "SOLUTION_FILE",
    "TAIL_CHARS",
    "check_source",
    "grade_execution",
]

Status = Literal["malformed", "syntax_err", "runtime_err", "ran_no_sub", "valid"]
"""Outcome of executing (or predicting the execution of) one solution."""

STATUSES: tuple[str, ...] = ("malformed", "syntax_err", "runtime_err", "ran_no_sub", "valid")

STATUS_SCORES: dict[str, float] = {
    "malformed": 0.0,  # empty / not Python at all
    "syntax_err": 0.0,
    "runtime_err": 0.1,
    "ran_no_sub": 0.2,
}
"""Scores of the non-valid statuses; ``valid`` scores ``0.5 + 0.5 * pos``."""

QUALITY_BUCKETS: tuple[str, ...] = ("low", "fair", "mid", "high")
BUCKET_POSITIONS: dict[str, float] = {"low": 0.05, "fair": 0.20, "mid": 0.45, "high": 0.75}
"""Reference mapping of a predicted quality bucket to a leaderboard position score."""


def score_from_status(status: str, pos: float | None = None) -> float:
    """Map an outcome to the reward scale.

    Args:
        status: one of :data:`STATUSES`.
        pos: leaderboard position score in [0, 1]; required when ``status == "valid"``.

    Returns:
        The score in [0, 1] (float).

    Raises:
        ValueError: unknown status, or ``valid`` without a ``pos`` in [0, 1].
    """
    if status == "valid":
        if pos is None or not (0.0 <= float(pos) <= 1.0):
            raise ValueError(f"status 'valid' needs a position score pos in [0, 1], got {pos!r}")
        return 0.5 + 0.5 * float(pos)
    try:
        return STATUS_SCORES[status]
    except KeyError:
        raise ValueError(f"unknown status {status!r}; expected one of {STATUSES}") from None


def position_score(metric_value: float, leaderboard: list[float], higher_is_better: bool) -> float:
    """Leaderboard position score ``pos = (N - p + 1) / N``.

    ``p`` is the first (1-based) rank on the leaderboard whose score the submission ties or
    beats; a submission that beats no entry gets ``p = N + 1`` and so ``pos = 0``.

    Args:
        metric_value: the submission's metric value (task units).
        leaderboard: the N reference scores, in any order.
        higher_is_better: direction of the task metric.

    Returns:
        pos in [0, 1] (float).

    Raises:
        ValueError: empty leaderboard.
    """
    if not leaderboard:
        raise ValueError("leaderboard is empty; a task needs at least one reference score")
    ranked = sorted(leaderboard, reverse=higher_is_better)
    n = len(ranked)
    for p, ref in enumerate(ranked, start=1):
        if (metric_value >= ref) if higher_is_better else (metric_value <= ref):
            return (n - p + 1) / n
    return 0.0


SUBMISSION_FILE = "submission.csv"
"""The file a solution writes its predictions to, in its job folder."""

SUBMISSION_BYTES_PER_ROW = 256
"""Bytes a ``submission.csv`` may spend per test row (:func:`submission_max_bytes`): an id and
a 17-digit float take about 30, so extra columns still fit."""

SUBMISSION_HEADER_BYTES = 64 * 1024
"""Bytes a ``submission.csv`` may spend beyond its rows (:func:`submission_max_bytes`)."""

MAX_SUBMISSION_COLUMNS = 64
"""Most columns a ``submission.csv`` may have (only ``id`` and the target are read)."""

_NAME_CHARS = 40  # characters of a column name quoted in a grader message
_NAMES_SHOWN = 10  # column names listed in a grader message


def _normalise_labels(values: pd.Series, classes: np.ndarray) -> tuple[np.ndarray | None, str]:
    if classes.dtype.kind in "iub":
        num = pd.to_numeric(values, errors="coerce")
        if num.isna().any():
            bad = values[num.isna()].iloc[0]
            return None, f"non-numeric class label {str(bad)[:40]!r}; expected one of {classes.tolist()}"
        arr = num.to_numpy(dtype=np.float64)
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            return None, f"class labels must be integers, one of {classes.tolist()}"
        arr = arr.astype(np.int64)
    else:
        arr = values.astype(str).str.strip().to_numpy(dtype=object)
    unknown = sorted({str(v) for v in set(arr.tolist()) - set(classes.tolist())})
    if unknown:
        shown = ", ".join(repr(u[:40]) for u in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        return None, f"unknown class labels [{shown}]; expected one of {classes.tolist()}"
    return arr, ""


def submission_max_bytes(task: TaskSpec | str) -> int:
    """The largest ``submission.csv`` the grader reads for ``task``, in bytes:
    :data:`SUBMISSION_HEADER_BYTES` + :data:`SUBMISSION_BYTES_PER_ROW` per test row (1.98 MB for
    the largest test set, 7,500 rows; a valid submission takes about an eighth of that).

    Raises:
        ValueError: unknown task id.
    """
    task = get_task(task) if isinstance(task, str) else task
    return SUBMISSION_HEADER_BYTES + SUBMISSION_BYTES_PER_ROW * len(task_data(task.task_id).test_ids)


def _quote_names(names: Sequence[str]) -> str:
    """``['a', 'b', ... and N more]``: at most :data:`_NAMES_SHOWN` names of at most
    :data:`_NAME_CHARS` characters each (longer ones end in ``...``)."""
    shown = [repr(n if len(n) <= _NAME_CHARS else n[: _NAME_CHARS - 3] + "...") for n in names[:_NAMES_SHOWN]]
    more = f", and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
    return "[" + ", ".join(shown) + more + "]"


def _read_bounded(path: Path, limit: int) -> tuple[str | None, str]:
    """The text of ``path`` (UTF-8, a leading BOM dropped) if it is a regular file of at most
    ``limit`` bytes, else ``(None, reason)``. Never reads more than ``limit + 1`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        return None, f"could not open {SUBMISSION_FILE}: {e.strerror}; write it as a regular file"
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not S_ISREG(st.st_mode):
            return None, f"{SUBMISSION_FILE} must be a regular file"
        raw = fh.read(limit + 1) if st.st_size <= limit else b""
    size = max(st.st_size, len(raw))
    if size > limit:
        return None, (f"{SUBMISSION_FILE} is too large ({size} bytes); the grader reads at most {limit} bytes "
                      f"for this task: write only the columns '{ID_COLUMN}' and the target")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        return None, (f"{SUBMISSION_FILE} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); "
                      "write it as UTF-8")
    if "\x00" in text:
        return None, f"{SUBMISSION_FILE} contains NUL bytes; write a plain-text CSV"
    if not text.strip():
        return None, f"{SUBMISSION_FILE} is empty; write a header line '{ID_COLUMN},<target>' and one row per test id"
    return text, ""


def _parse_submission(task: TaskSpec, data: TaskData, text: str) -> tuple[np.ndarray | None, str]:
    label_task = task.metric in LABEL_METRICS
    # Field counts first, with the csv module (linear time): pandas takes minutes on a row far
    # wider than the header when only some columns are read.
    width = 0
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for row in reader:
            if not width:
                width = len(row)
                if width > MAX_SUBMISSION_COLUMNS:
                    return None, (f"{SUBMISSION_FILE} has {width} columns; at most {MAX_SUBMISSION_COLUMNS} are "
                                  f"allowed (only '{ID_COLUMN}' and '{task.target}' are read)")
            elif len(row) > width:
                return None, (f"line {reader.line_num} of {SUBMISSION_FILE} has {len(row)} fields; the header "
                              f"has {width}: write one field per column")
    except csv.Error as e:
        return None, f"could not parse {SUBMISSION_FILE} (line {reader.line_num}): {str(e)[:200]}"
    try:
        header = pd.read_csv(io.StringIO(text), header=None, nrows=1, dtype=str, keep_default_na=False)
    except Exception as e:  # noqa: BLE001 - any parse failure of the agent's file is a format error
        return None, f"could not parse {SUBMISSION_FILE}: {type(e).__name__}: {str(e)[:200]}"
    names = [str(c).strip() for c in header.iloc[0].tolist()] if len(header) else []
    if len(names) > MAX_SUBMISSION_COLUMNS:
        return None, (f"{SUBMISSION_FILE} has {len(names)} columns; at most {MAX_SUBMISSION_COLUMNS} are "
                      f"allowed (only '{ID_COLUMN}' and '{task.target}' are read)")
    seen: set[str] = set()
    dups = sorted({n for n in names if n in seen or seen.add(n)})
    if dups:
        return None, (f"{SUBMISSION_FILE} has duplicate column names {_quote_names(dups)} (names are compared "
                      "after stripping spaces); write each column once")
    missing_cols = [c for c in (ID_COLUMN, task.target) if c not in names]
    if missing_cols:
        return None, (
            f"{SUBMISSION_FILE} lacks column(s) {missing_cols}; expected columns "
            f"['{ID_COLUMN}', '{task.target}'], got {_quote_names(names)}"
        )
    pos = sorted((names.index(ID_COLUMN), names.index(task.target)))
    try:
        sub = pd.read_csv(
            io.StringIO(text),
            usecols=pos,
            dtype=str if label_task else None,
            keep_default_na=not label_task,
            na_values=[""] if label_task else None,
        )
    except Exception as e:  # noqa: BLE001 - any parse failure of the agent's file is a format error
        return None, f"could not parse {SUBMISSION_FILE}: {type(e).__name__}: {str(e)[:200]}"
    sub.columns = [names[i] for i in pos]
    n_test = len(data.test_ids)
    if len(sub) != n_test:
        return None, f"{SUBMISSION_FILE} has {len(sub)} rows; expected {n_test} (one per test id)"
    ids = pd.to_numeric(sub[ID_COLUMN], errors="coerce").to_numpy(dtype=np.float64)
    if not (np.isfinite(ids).all() and np.all(ids == np.round(ids)) and np.all(np.abs(ids) < 2.0**53)):
        return None, f"column '{ID_COLUMN}' must hold the integer ids of test.csv"
    ids = ids.astype(np.int64)
    if len(np.unique(ids)) != len(ids):
        return None, f"column '{ID_COLUMN}' has duplicate ids"
    if not np.array_equal(np.sort(ids), np.sort(data.test_ids)):
        return None, f"column '{ID_COLUMN}' does not match the ids of test.csv"
    col = sub[task.target]
    if col.isna().any():
        return None, f"column '{task.target}' has {int(col.isna().sum())} missing values"
    if label_task:
        values, reason = _normalise_labels(col, data.classes)
        if values is None:
            return None, reason
    else:
        num = pd.to_numeric(col, errors="coerce")
        if num.isna().any():
            bad = col[num.isna()].iloc[0]
            return None, f"column '{task.target}' must be numeric; found {str(bad)[:40]!r}"
        values = num.to_numpy(dtype=np.float64)
        if not np.all(np.isfinite(values)):
            return None, f"column '{task.target}' has non-finite values (inf)"
    order = np.argsort(ids)
    pos_of_id = np.searchsorted(ids[order], data.test_ids)
    return values[order][pos_of_id], ""


def read_submission(task: TaskSpec | str, job_dir: str | Path) -> tuple[np.ndarray | None, str]:
    """Parse and validate ``submission.csv`` of a job folder.

    Checks: the file exists, is a regular file of at most :func:`submission_max_bytes` bytes,
    UTF-8 text without NUL bytes, and parses as CSV; its header (names compared after
    stripping spaces) has at most :data:`MAX_SUBMISSION_COLUMNS` columns, no name twice, and
    the columns ``id`` and the target; one row per test id (no duplicates, none missing or
    extra); no missing predictions; predictions of the right type (class labels from the
    training set for ``accuracy`` / ``macro_f1``, finite numbers otherwise). Only ``id`` and
    the target are read; extra columns are ignored.

    Whatever the file holds, a problem with it is returned as a reason (the agent's
    ``ran_no_sub``), never raised: the host reads at most :func:`submission_max_bytes` bytes
    and parses two columns, so a program cannot make grading slow or memory-hungry.

    Args:
        task: a :class:`TaskSpec` or task id.
        job_dir: the job folder.

    Returns:
        ``(predictions, "")`` with predictions aligned to the test ids (array of length
        ``n_test``: int64/object labels, or float64 scores/values), or ``(None, reason)``
        (``reason``: one line of at most a few hundred characters).

    Raises:
        ValueError: unknown task id.
    """
    task = get_task(task) if isinstance(task, str) else task
    data = task_data(task.task_id)
    path = Path(job_dir) / SUBMISSION_FILE
    if path.is_symlink():
        return None, f"{SUBMISSION_FILE} must be a regular file, not a symbolic link"
    if not path.is_file():
        return None, f"{SUBMISSION_FILE} not found in the working directory"
    text, reason = _read_bounded(path, submission_max_bytes(task))
    if text is None:
        return None, reason
    try:
        return _parse_submission(task, data, text)
    except Exception as e:  # noqa: BLE001 - the file is the agent's: no content may crash the grader
        return None, f"could not read {SUBMISSION_FILE}: {type(e).__name__}: {str(e)[:200]}"


def compute_metric(metric: str, y_true: Sequence | np.ndarray, y_pred: Sequence | np.ndarray) -> float:
    """Compute a task metric.

    Args:
        metric: ``accuracy`` / ``macro_f1`` (labels), ``roc_auc`` (binary 0/1 truth, real
            scores), ``rmse`` / ``mae`` / ``r2`` (real values).
        y_true: ground truth, length n.
        y_pred: predictions, length n.

    Returns:
        The metric value (float).

    Raises:
        ValueError: unknown metric or invalid inputs.
    """
    from sklearn import metrics as skm

    y_true = np.asarray(y_true)
    y_pred = np.asarray(y_pred)
    if metric == "accuracy":
        return float(skm.accuracy_score(y_true, y_pred))
    if metric == "macro_f1":
        return float(skm.f1_score(y_true, y_pred, average="macro", labels=np.unique(y_true)))
    if metric == "roc_auc":
        return float(skm.roc_auc_score(y_true, y_pred.astype(np.float64)))
    if metric == "rmse":
        return float(math.sqrt(skm.mean_squared_error(y_true, y_pred)))
    if metric == "mae":
        return float(skm.mean_absolute_error(y_true, y_pred))
    if metric == "r2":
        return float(skm.r2_score(y_true, y_pred))
    raise ValueError(f"unknown metric {metric!r}")


SOLUTION_FILE = "solution.py"
"""The file name a solution runs under in its job folder."""

TAIL_CHARS = 2000
"""Characters of stdout / stderr kept in a :class:`Grade` (the tail)."""

Leaderboard = Union[Sequence[float], Callable[[str], Sequence[float]]]
"""Reference metric values (task units), or a function ``task_id -> values`` called only when a
submission is valid (looking a board up may build it)."""


@dataclass


class Grade:
    """The graded outcome of one solution on one task.

    Attributes:
        task_id: the task.
        status: one of :data:`STATUSES`.
        score: reward in [0, 1] (:func:`score_from_status`).
        metric: name of the task metric.
        higher_is_better: direction of the metric.
        metric_value: the submission's metric value (task units), ``None`` unless ``valid``.
        position: leaderboard position score in [0, 1], ``None`` unless ``valid``.
        n_reference: number of reference solutions on the task's leaderboard.
        runtime_s: wall-clock seconds of the execution (0.0 when not executed).
        cpu_time_s: CPU-seconds (user + system) of the whole sandboxed process tree
            (``ExecutionResult.cpu_time_s``); 0.0 when not executed, ``None`` when the sandbox
            could not measure it (see :class:`~wmrl_envs.sandbox.base.ExecutionResult`).
        executed: whether the program was run (``False`` for ``malformed`` / ``syntax_err``).
        exit_code: the program's exit status (``None`` when killed or not executed).
        timed_out: whether the wall-clock limit killed it.
        message: the grader's explanation (why the submission is invalid, the syntax error...).
        stdout_tail: last :data:`TAIL_CHARS` characters of stdout.
        stderr_tail: last :data:`TAIL_CHARS` characters of stderr (for ``syntax_err``: the
            error as Python would print it).
        n_rows: number of rows of a valid submission (``None`` otherwise).
    """

    task_id: str
    status: str
    score: float
    metric: str
    higher_is_better: bool
    metric_value: float | None = None
    position: float | None = None
    n_reference: int = 0
    runtime_s: float = 0.0
    cpu_time_s: float | None = 0.0
    executed: bool = False
    exit_code: int | None = None
    timed_out: bool = False
    message: str = ""
    stdout_tail: str = ""
    stderr_tail: str = ""
    n_rows: int | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; expected one of {STATUSES}")

    def to_dict(self) -> dict[str, Any]:
        """The grade as a plain dict (JSON-serialisable)."""
        return asdict(self)


def _tail(text: str | None, n: int = TAIL_CHARS) -> str:
    text = text or ""
    return text if len(text) <= n else text[-n:]


def check_source(source: Any, filename: str = SOLUTION_FILE) -> tuple[str, str, str] | None:
    """Host-side pre-check of a solution, without executing it.

    Args:
        source: the solution's Python source (str expected).

    Returns:
        ``None`` if the source compiles; otherwise ``(status, message, stderr)`` with status
        ``"malformed"`` (not a string, empty / whitespace-only, or containing NUL bytes) or
        ``"syntax_err"`` (``compile()`` fails), and ``stderr`` the error as Python would print
        it when running ``solution.py``.
    """
    if not isinstance(source, str):
        return "malformed", f"the solution is not text (got {type(source).__name__})", ""
    if not source.strip():
        return "malformed", "the solution is empty", ""
    if "\x00" in source:
        return "malformed", "the solution contains NUL bytes", ""
    try:
        compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as e:  # includes IndentationError / TabError
        err = "".join(traceback.format_exception_only(type(e), e))
        return "syntax_err", f"{type(e).__name__}: {e.msg} (line {e.lineno})", err
    except (ValueError, RecursionError, MemoryError, OverflowError) as e:
        return "syntax_err", f"{type(e).__name__}: {e}", f"{type(e).__name__}: {e}\n"
    return None


def _base(task: TaskSpec, status: str, **kw: Any) -> Grade:
    return Grade(
        task_id=task.task_id, status=status, score=score_from_status(status) if status != "valid" else 0.0,
        metric=task.metric, higher_is_better=task.higher_is_better, **kw,
    )


def grade_execution(
    task: TaskSpec | str,
    job_dir: str | Path | None,
    execution_result: ExecutionResult | None,
    *,
    leaderboard: Leaderboard,
    source: str | None = None,
) -> Grade:
    """Grade one execution of a solution.

    Args:
        task: a :class:`TaskSpec` or task id.
        job_dir: the job folder the program ran in (holds ``submission.csv``); may be
            ``None`` when the source fails the pre-check.
        execution_result: the sandbox's result; may be ``None`` when ``source`` is given and
            fails :func:`check_source` (no execution is needed then).
        source: the solution source; when given, :func:`check_source` runs first and decides
            ``malformed`` / ``syntax_err`` without looking at the execution.
        leaderboard: reference metric values, or ``task_id -> values`` (called only for a valid
            submission).

    Returns:
        The :class:`Grade`.

    Raises:
        ValueError: unknown task, or no ``execution_result`` for a source that passes the
            pre-check (or for no source at all).
    """
    task = get_task(task) if isinstance(task, str) else task
    if source is not None:
        pre = check_source(source)
        if pre is not None:
            status, message, err = pre
            return _base(task, status, message=message, stderr_tail=_tail(err))
    if execution_result is None:
        raise ValueError("execution_result is required unless `source` fails the host pre-check")
    r = execution_result
    cpu = getattr(r, "cpu_time_s", None)  # a sandbox-like object may not report it
    common = dict(
        runtime_s=float(r.wall_time_s), cpu_time_s=None if cpu is None else float(cpu), executed=True, exit_code=r.exit_code, timed_out=bool(r.timed_out),
        stdout_tail=_tail(r.stdout), stderr_tail=_tail(r.stderr),
    )
    if r.timed_out:
        return _base(task, "runtime_err", message="killed: wall-clock time limit exceeded", **common)
    extras = getattr(r, "extras", None) or {}
    if extras.get("workdir_limit_exceeded"):  # the program's own doing: it filled its folder
        return _base(task, "runtime_err", message="killed: job folder limit exceeded "
                     f"({extras['workdir_limit_exceeded']})", **common)
    if r.exit_code != 0:
        why = f"exited with status {r.exit_code}" if r.exit_code is not None else (
            f"killed by signal {r.signal}" if r.signal else "killed"
        )
        if extras.get("oom_killed"):
            why += " (memory limit exceeded: a process of the run was OOM-killed)"
        return _base(task, "runtime_err", message=f"the program {why}", **common)
    if job_dir is None:
        raise ValueError("job_dir is required to grade a program that ran")
    preds, reason = read_submission(task, job_dir)
    if preds is None:
        return _base(task, "ran_no_sub", message=reason, **common)
    data = task_data(task.task_id)
    try:
        value = compute_metric(task.metric, data.y_test.to_numpy(), preds)
    except ValueError as e:
        return _base(task, "ran_no_sub", message=f"could not score the submission: {e}", **common)
    if not math.isfinite(value):
        return _base(task, "ran_no_sub", message=f"the metric is not finite ({value})", **common)
    board = list(leaderboard(task.task_id) if callable(leaderboard) else leaderboard)
    pos = position_score(value, board, task.higher_is_better)
    return Grade(
        task_id=task.task_id, status="valid", score=score_from_status("valid", pos), metric=task.metric,
        higher_is_better=task.higher_is_better, metric_value=value, position=pos, n_reference=len(board),
        message=f"valid submission with {len(preds)} rows", n_rows=len(preds), **common,
    )
