"""Materialise AutoResearch tasks into job folders, grade executed solutions, keep leaderboards.

A *job folder* is the working directory of one execution. It holds only public files:

* ``train.csv`` — the training features plus the target column (last column);
* ``test.csv`` — ``id`` plus the test features, **no labels**;
* ``sample_submission.csv`` — ``id`` plus the target column filled with a placeholder.

The hidden test labels never touch the disk: they stay in this process's memory
(:func:`task_data`), drawn with a seed derived from the installation's task secret
(:mod:`~wmrl_envs.envs.autoresearch.secret`), which never enters a sandbox. After the program ran, :func:`grade` reads ``submission.csv`` from the
job folder, checks its format, computes the task metric and places it on the task's
reference leaderboard (:func:`~wmrl_envs.envs.autoresearch.scale.position_score`), then maps
the outcome to the reward scale with
:func:`~wmrl_envs.envs.autoresearch.scale.score_from_status`.

Contents:
    * :class:`Grade` — the graded outcome of one solution.
    * :class:`TaskData` / :func:`task_data` — a task's canonical data (cached in memory).
    * :func:`write_public_files` — materialise a task into a job folder.
    * :func:`check_source` — host-side pre-check (``malformed`` / ``syntax_err``), no execution.
    * :func:`read_submission` — parse and validate ``submission.csv``.
    * :func:`compute_metric` — the task metrics (accuracy, macro_f1, roc_auc, rmse, mae, r2).
    * :func:`grade` — grade one execution (``ExecutionResult``) of one task.
    * :func:`evaluate` — pre-check, materialise, execute in a sandbox, grade, clean up.
    * :data:`REFERENCE_SOLUTIONS`, :func:`load_leaderboards`, :func:`get_leaderboard`,
      :func:`build_leaderboards`, :func:`main` — the per-task reference leaderboards: for the
      reference task secret shipped as ``leaderboards.json`` next to this module
      (``WMRL_TASK_SECRET=wmrl-reference python -m wmrl_envs.envs.autoresearch.grading``); for
      any other secret built on first use per task and cached beside the secret
      (:func:`ensure_leaderboard`, :func:`leaderboard_cache_dir`).
    * :data:`EXEC_ENV`, :data:`TAIL_CHARS` — execution environment variables and log-tail size.
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import functools
import hashlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from stat import S_ISREG
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from wmrl_envs.envs.autoresearch.scale import STATUSES, position_score, score_from_status
from wmrl_envs.envs.autoresearch.secret import (
    REFERENCE_SECRET,
    SECRET_ENV_VAR,
    derive_seed,
    is_reference_secret,
    secret_dir,
    secret_fingerprint,
    task_secret,
)
from wmrl_envs.envs.autoresearch.tasks import ID_COLUMN, LABEL_METRICS, TaskSpec, get_task, list_tasks
from wmrl_envs.sandbox.base import ExecutionResult, Sandbox, SandboxLimits
from wmrl_envs.sandbox.jobdirs import OwnedFolder

__all__ = [
    "Grade",
    "TaskData",
    "task_data",
    "PUBLIC_FILES",
    "SUBMISSION_FILE",
    "SOLUTION_FILE",
    "EXEC_ENV",
    "TAIL_CHARS",
    "write_public_files",
    "check_source",
    "read_submission",
    "submission_max_bytes",
    "SUBMISSION_BYTES_PER_ROW",
    "SUBMISSION_HEADER_BYTES",
    "MAX_SUBMISSION_COLUMNS",
    "compute_metric",
    "grade",
    "evaluate",
    "REFERENCE_SOLUTIONS",
    "LEADERBOARD_PATH",
    "load_leaderboards",
    "get_leaderboard",
    "ensure_leaderboard",
    "leaderboard_cache_dir",
    "build_leaderboards",
    "main",
]

PUBLIC_FILES: tuple[str, ...] = ("train.csv", "test.csv", "sample_submission.csv")
"""The files every job folder starts with."""

SUBMISSION_FILE = "submission.csv"
SOLUTION_FILE = "solution.py"

EXEC_ENV: dict[str, str] = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",
    "PYTHONUNBUFFERED": "1",
}
"""Environment variables of every execution: one BLAS/OpenMP thread (the timing budget of the
tasks assumes one core) and a fixed hash seed."""

TAIL_CHARS = 2000
"""Characters of stdout / stderr kept in a :class:`Grade` (the tail)."""

SUBMISSION_BYTES_PER_ROW = 256
"""Bytes a ``submission.csv`` may spend per test row (:func:`submission_max_bytes`): an id and
a 17-digit float take about 30, so extra columns still fit."""

SUBMISSION_HEADER_BYTES = 64 * 1024
"""Bytes a ``submission.csv`` may spend beyond its rows (:func:`submission_max_bytes`)."""

MAX_SUBMISSION_COLUMNS = 64
"""Most columns a ``submission.csv`` may have (only ``id`` and the target are read)."""

_NAME_CHARS = 40  # characters of a column name quoted in a grader message
_NAMES_SHOWN = 10  # column names listed in a grader message
_CSV_FLOAT_FORMAT = "%.6g"

LEADERBOARD_PATH = Path(__file__).with_name("leaderboards.json")
"""The shipped leaderboards (JSON)."""


# ----------------------------------------------------------------------------------------------
# Grade
# ----------------------------------------------------------------------------------------------


@dataclass
class Grade:
    """The graded outcome of one solution on one task.

    Attributes:
        task_id: the task.
        status: one of :data:`~wmrl_envs.envs.autoresearch.scale.STATUSES`.
        score: reward in [0, 1] (:func:`~wmrl_envs.envs.autoresearch.scale.score_from_status`).
        metric: name of the task metric.
        higher_is_better: direction of the metric.
        metric_value: the submission's metric value (task units), ``None`` unless ``valid``.
        position: leaderboard position score in [0, 1], ``None`` unless ``valid``.
        n_reference: number of reference solutions on the task's leaderboard.
        runtime_s: wall-clock seconds of the execution (0.0 when not executed).
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


# ----------------------------------------------------------------------------------------------
# Task data and public files
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskData:
    """A task's canonical data, held in memory on the host.

    Attributes:
        task: the :class:`~wmrl_envs.envs.autoresearch.tasks.TaskSpec`.
        X_train: training features, shape ``(n_train, n_features)``.
        y_train: training target, length ``n_train``.
        X_test: test features, shape ``(n_test, n_features)``.
        y_test: hidden test target, length ``n_test`` (never written to a job folder).
        test_ids: int64 array of the ``id`` column of ``test.csv``, length ``n_test``.
        classes: sorted class labels (classification) or ``None`` (regression).
        digest: SHA-256 (hex) of the sizes and the train and test targets: names the data a
            leaderboard was computed on (a leaderboard of other data is stale).
    """

    task: TaskSpec
    X_train: pd.DataFrame
    y_train: pd.Series
    X_test: pd.DataFrame
    y_test: pd.Series
    test_ids: np.ndarray
    classes: np.ndarray | None
    digest: str = ""

    @property
    def train_frame(self) -> pd.DataFrame:
        """``train.csv`` as a DataFrame: features + target column."""
        df = self.X_train.copy()
        df[self.task.target] = self.y_train.to_numpy()
        return df

    @property
    def test_frame(self) -> pd.DataFrame:
        """``test.csv`` as a DataFrame: ``id`` + features (no target)."""
        df = self.X_test.copy()
        df.insert(0, ID_COLUMN, self.test_ids)
        return df

    @property
    def sample_submission(self) -> pd.DataFrame:
        """``sample_submission.csv``: ``id`` + a placeholder target (majority class, 0.5 or mean)."""
        t = self.task
        if t.metric == "roc_auc":
            fill: Any = 0.5
        elif t.problem_type == "classification":
            fill = self.y_train.value_counts().index[0]
        else:
            fill = round(float(self.y_train.mean()), 4)
        return pd.DataFrame({ID_COLUMN: self.test_ids, t.target: [fill] * len(self.test_ids)})


def task_data(task_id: str) -> TaskData:
    """The canonical :class:`TaskData` of a task under the active task secret.

    The data are generated once per process and secret, then cached in memory; the seed comes
    from :func:`~wmrl_envs.envs.autoresearch.secret.derive_seed` (the task secret never leaves
    this process).

    Raises:
        ValueError: unknown task id, or a misconfigured task secret
            (:func:`~wmrl_envs.envs.autoresearch.secret.task_secret`).
    """
    task = get_task(task_id)
    return _task_data_for_seed(task.task_id, derive_seed(task.task_id, task.data_seed))


@functools.lru_cache(maxsize=None)
def _task_data_for_seed(task_id: str, seed: int) -> TaskData:
    task = get_task(task_id)
    X_tr, y_tr, X_te, y_te = task.make_data(seed)
    ids = np.arange(len(X_tr), len(X_tr) + len(X_te), dtype=np.int64)
    classes = np.array(sorted(pd.unique(y_tr))) if task.problem_type == "classification" else None
    return TaskData(task, X_tr, y_tr, X_te, y_te, ids, classes, _data_digest(X_tr, y_tr, X_te, y_te))


def _data_digest(X_tr: pd.DataFrame, y_tr: pd.Series, X_te: pd.DataFrame, y_te: pd.Series) -> str:
    h = hashlib.sha256(f"{X_tr.shape}|{X_te.shape}|{list(X_tr.columns)}".encode())
    for y in (y_tr, y_te):
        h.update(y.to_csv(index=False, header=False, float_format=_CSV_FLOAT_FORMAT).encode())
    return h.hexdigest()


def _write_public_files_uncached(task: TaskSpec, job_dir: Path) -> None:
    data = task_data(task.task_id)
    data.train_frame.to_csv(job_dir / "train.csv", index=False, float_format=_CSV_FLOAT_FORMAT)
    data.test_frame.to_csv(job_dir / "test.csv", index=False, float_format=_CSV_FLOAT_FORMAT)
    data.sample_submission.to_csv(job_dir / "sample_submission.csv", index=False)


def write_public_files(task: TaskSpec | str, job_dir: str | Path, cache_dir: str | Path | None = None) -> list[Path]:
    """Write the public files of a task into a job folder.

    Args:
        task: a :class:`TaskSpec` or a task id.
        job_dir: the job folder (created if missing).
        cache_dir: optional host folder, *outside* any job folder, where the rendered CSVs
            are kept (``cache_dir/<secret fingerprint>/<task_id>/``, one set per task secret)
            so later calls only copy them.

    Returns:
        Paths of the written files (:data:`PUBLIC_FILES`, in order).

    Raises:
        ValueError: unknown task id.
    """
    task = get_task(task) if isinstance(task, str) else task
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    if cache_dir is None:
        _write_public_files_uncached(task, job_dir)
    else:
        cache = Path(cache_dir) / secret_fingerprint()
        src = cache / task.task_id
        if not all((src / f).is_file() for f in PUBLIC_FILES):
            tmp = cache / f".{task.task_id}.{uuid.uuid4().hex}"
            tmp.mkdir(parents=True)
            _write_public_files_uncached(task, tmp)
            try:
                tmp.rename(src)
            except OSError:  # another writer won the race (or a stale partial folder)
                if not all((src / f).is_file() for f in PUBLIC_FILES):
                    shutil.rmtree(src, ignore_errors=True)
                    tmp.rename(src)
                else:
                    shutil.rmtree(tmp, ignore_errors=True)
        for f in PUBLIC_FILES:
            shutil.copyfile(src / f, job_dir / f)
    return [job_dir / f for f in PUBLIC_FILES]


# ----------------------------------------------------------------------------------------------
# Checks, submission parsing and metrics
# ----------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------
# Grading
# ----------------------------------------------------------------------------------------------


def _base(task: TaskSpec, status: str, **kw: Any) -> Grade:
    return Grade(
        task_id=task.task_id, status=status, score=score_from_status(status) if status != "valid" else 0.0,
        metric=task.metric, higher_is_better=task.higher_is_better, **kw,
    )


def grade(
    task: TaskSpec | str,
    job_dir: str | Path | None,
    execution_result: ExecutionResult | None,
    *,
    source: str | None = None,
    leaderboard: Sequence[float] | None = None,
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
        leaderboard: reference metric values; defaults to the shipped leaderboard of the task.

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
    common = dict(
        runtime_s=float(r.wall_time_s), executed=True, exit_code=r.exit_code, timed_out=bool(r.timed_out),
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
    board = list(leaderboard) if leaderboard is not None else get_leaderboard(task.task_id)
    pos = position_score(value, board, task.higher_is_better)
    return Grade(
        task_id=task.task_id, status="valid", score=score_from_status("valid", pos), metric=task.metric,
        higher_is_better=task.higher_is_better, metric_value=value, position=pos, n_reference=len(board),
        message=f"valid submission with {len(preds)} rows", n_rows=len(preds), **common,
    )


def evaluate(
    task: TaskSpec | str,
    source: str,
    sandbox: Sandbox,
    *,
    workdir_root: str | Path | None = None,
    limits: SandboxLimits | None = None,
    cache_dir: str | Path | None = None,
    keep_job_dir: bool = False,
    leaderboard: Sequence[float] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[Grade, Path | None]:
    """Pre-check, materialise, execute in a sandbox and grade one solution.

    Sources that fail :func:`check_source` are graded without any execution (and without a
    job folder).

    The job folder is a :class:`~wmrl_envs.sandbox.jobdirs.JobFolder`: bounded to
    ``workdir_size_mb`` MiB and ``workdir_max_files`` entries (a tmpfs where mounting is
    allowed, so its removal is one ``umount`` and the step ends within the wall-clock limit
    plus a few seconds however many files the program wrote), and removed by the next run
    in ``workdir_root`` if this process is killed first.

    Args:
        task: a :class:`TaskSpec` or task id.
        source: the solution's Python source.
        sandbox: anything with ``run_python(source, workdir, *, limits, env, filename)``.
        workdir_root: where to create the job folder (system temp dir if ``None``).
        limits: per-run limits (``None``: the sandbox's defaults).
        cache_dir: rendered-CSV cache for :func:`write_public_files`.
        keep_job_dir: keep the job folder (else it is deleted after grading); a tmpfs job
            folder is copied to a plain folder ``<job>-kept`` first.
        leaderboard: reference values (default: shipped leaderboard).
        env: environment variables for the program (default :data:`EXEC_ENV`).

    Returns:
        ``(grade, job_dir)``; ``job_dir`` is ``None`` when no folder was created or it was
        deleted.

    Raises:
        ValueError: unknown task, or a job folder bound (``workdir_size_mb``,
            ``workdir_max_files``) too small for the task's public files.
        FileNotFoundError, SandboxUnavailableError: from the sandbox
            (:class:`~wmrl_envs.sandbox.base.SandboxInfrastructureError` when the sandbox
            failed for this run; nothing is graded then).
    """
    task = get_task(task) if isinstance(task, str) else task
    pre = check_source(source)
    if pre is not None:
        return grade(task, None, None, source=source, leaderboard=leaderboard), None
    import errno

    from wmrl_envs.sandbox.jobdirs import JobFolder

    root = Path(workdir_root) if workdir_root is not None else Path(tempfile.gettempdir())
    bounds = limits or getattr(sandbox, "limits", None) or SandboxLimits()
    job = JobFolder(root, bounds, prefix=f"{task.task_id}-")
    kept: Path | None = None
    try:
        try:
            write_public_files(task, job.path, cache_dir=cache_dir)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            raise ValueError(
                f"the job folder's bounds (workdir_size_mb={bounds.workdir_size_mb}, workdir_max_files="
                f"{bounds.workdir_max_files}) cannot hold the public files of task {task.task_id!r}: "
                "raise them in SandboxLimits"
            ) from exc
        result = sandbox.run_python(
            source, job.path, limits=limits, env=dict(EXEC_ENV if env is None else env), filename=SOLUTION_FILE
        )
        g = grade(task, job.path, result, leaderboard=leaderboard)
        if keep_job_dir:
            kept = job.keep()
    finally:
        job.remove()  # one umount for a tmpfs job folder; nothing after keep()
    return g, kept


# ----------------------------------------------------------------------------------------------
# Leaderboards
# ----------------------------------------------------------------------------------------------

REFERENCE_SOLUTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "classification": (
        ("majority", "model = DummyClassifier(strategy='prior')"),
        ("stump", "model = DecisionTreeClassifier(max_depth=2, random_state=0)"),
        ("naive_bayes", "model = GaussianNB()"),
        ("knn", "model = make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=25))"),
        ("logistic", "model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300))"),
        ("decision_tree", "model = DecisionTreeClassifier(max_depth=10, min_samples_leaf=20, random_state=0)"),
        ("random_forest", "model = RandomForestClassifier(n_estimators=60, min_samples_leaf=2, random_state=0)"),
        ("gradient_boosting", "model = HistGradientBoostingClassifier(random_state=0)"),
    ),
    "regression": (
        ("mean", "model = DummyRegressor()"),
        ("stump", "model = DecisionTreeRegressor(max_depth=2, random_state=0)"),
        ("knn", "model = make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors=25))"),
        ("ridge", "model = make_pipeline(StandardScaler(), Ridge(alpha=1.0))"),
        ("decision_tree", "model = DecisionTreeRegressor(max_depth=10, min_samples_leaf=20, random_state=0)"),
        (
            "extra_trees",
            "model = ExtraTreesRegressor(n_estimators=60, max_features=0.33, min_samples_leaf=2, random_state=0)",
        ),
        (
            "random_forest",
            "model = RandomForestRegressor(n_estimators=60, max_features=0.33, min_samples_leaf=2, random_state=0)",
        ),
        ("gradient_boosting", "model = HistGradientBoostingRegressor(random_state=0)"),
    ),
}
"""Reference solutions per problem type: ``(name, model_line)`` pairs, weak to strong. Each is
run as :meth:`TaskSpec.starter_code_with(model_line) <TaskSpec.starter_code_with>`; the
starter's own line is among them (``logistic`` / ``ridge``)."""


class _HostRunner(Sandbox):
    """Runs *trusted* reference scripts with the host Python (no isolation, for leaderboards)."""

    name = "host"
    isolates = False

    def run_python(self, source, workdir, *, limits=None, env=None, filename=SOLUTION_FILE):  # noqa: D102
        workdir = Path(workdir)
        if not workdir.is_dir():
            raise FileNotFoundError(workdir)
        (workdir / filename).write_text(source)
        lim = limits or self.limits
        full_env = {k: v for k, v in os.environ.items() if k != SECRET_ENV_VAR}
        full_env.update(env or {})
        t0 = time.perf_counter()
        try:
            p = subprocess.run(
                [sys.executable, filename], cwd=workdir, env=full_env, capture_output=True, text=True,
                timeout=lim.wall_time_s,
            )
            return ExecutionResult(p.returncode, p.stdout, p.stderr, time.perf_counter() - t0, backend=self.name)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            return ExecutionResult(None, out, err, time.perf_counter() - t0, timed_out=True, backend=self.name)


@functools.lru_cache(maxsize=4)
def _load_leaderboards_cached(path: str, mtime: float) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_leaderboards(path: str | Path | None = None) -> dict:
    """Load a leaderboards JSON file (cached while the file is unchanged).

    Args:
        path: the file; ``None`` for the shipped :data:`LEADERBOARD_PATH`.

    Returns:
        ``{"version": 2, "created": ..., "secret_fingerprint": ..., "environment": {...},
        "tasks": {task_id: {"metric", "higher_is_better", "category", "data_digest",
        "entries": [{"name", "model_line", "metric_value", "runtime_s"}, ...]}}}``
        (``secret_fingerprint``: :func:`~wmrl_envs.envs.autoresearch.secret.secret_fingerprint`
        of the secret the data were drawn with; ``data_digest``: :attr:`TaskData.digest`).
        Treat it as read-only.

    Raises:
        FileNotFoundError: the file does not exist (build it with :func:`build_leaderboards`).
    """
    p = Path(path) if path is not None else LEADERBOARD_PATH
    if not p.is_file():
        raise FileNotFoundError(
            f"leaderboard file {p} not found; build it with "
            "`python -m wmrl_envs.envs.autoresearch.grading --out <path>`"
        )
    return _load_leaderboards_cached(str(p.resolve()), p.stat().st_mtime)


def get_leaderboard(task_id: str, path: str | Path | None = None) -> list[float]:
    """Reference metric values of one task on the data of the active task secret.

    Positions are ranks against these values, so they must come from the same data the agent's
    submission is graded on:

    * ``path`` given: that file's board (it must not record another secret or other data);
    * reference secret (``WMRL_TASK_SECRET=wmrl-reference``): the shipped
      :data:`LEADERBOARD_PATH`;
    * any other secret: this installation's board (:func:`ensure_leaderboard`), built on first
      use by running the task's reference solutions on the host (about 10-40 s per task on
      one core, progress on stderr) and cached beside the secret.

    Returns:
        The values (task units), in reference-solution order.

    Raises:
        ValueError: unknown task id; the task is missing from the file at ``path`` or from the
            shipped file; or the file at ``path`` was built for another secret / other data.
        FileNotFoundError: ``path`` or the shipped file does not exist.
        RuntimeError: a reference solution failed while building a board.
    """
    task = get_task(task_id)  # validates the id
    if path is None and not is_reference_secret():
        return ensure_leaderboard(task.task_id)
    board = load_leaderboards(path)
    shown = path or LEADERBOARD_PATH
    if task.task_id not in board["tasks"]:
        raise ValueError(
            f"task {task.task_id!r} has no leaderboard in {shown}; rebuild it with "
            f"`{SECRET_ENV_VAR}={REFERENCE_SECRET} python -m wmrl_envs.envs.autoresearch.grading --tasks {task.task_id}`"
            if path is None else f"task {task.task_id!r} has no leaderboard in {shown}; build it with build_leaderboards()"
        )
    entry = board["tasks"][task.task_id]
    why = _board_mismatch(board, entry, task.task_id)
    if why:
        if path is not None:
            raise ValueError(f"the leaderboard of task {task.task_id!r} in {shown} {why}; rebuild it with build_leaderboards()")
        if task.task_id not in _STALE_WARNED:
            _STALE_WARNED.add(task.task_id)
            warnings.warn(
                f"the shipped leaderboard of task {task.task_id!r} {why} (another numpy / scikit-learn "
                f"version?): positions may be slightly off; rebuild it with "
                f"`{SECRET_ENV_VAR}={REFERENCE_SECRET} python -m wmrl_envs.envs.autoresearch.grading --tasks {task.task_id}`",
                stacklevel=2,
            )
    return [float(e["metric_value"]) for e in entry["entries"]]


_STALE_WARNED: set[str] = set()


def _board_mismatch(board: Mapping, entry: Mapping, task_id: str) -> str:
    """Why a board does not belong to the active secret's data of ``task_id`` ("" when it does)."""
    fp = board.get("secret_fingerprint")
    if fp is not None and fp != secret_fingerprint():
        return f"was built for another task secret (fingerprint {fp}, active {secret_fingerprint()})"
    digest = entry.get("data_digest")
    if digest is not None and digest != task_data(task_id).digest:
        return "was computed on other data than this installation generates"
    return ""


def leaderboard_cache_dir() -> Path:
    """Folder of this installation's leaderboards for the active (non-reference) secret:
    ``secret_dir() / "leaderboards" / <secret fingerprint>`` (one JSON file per task)."""
    return secret_dir() / "leaderboards" / secret_fingerprint()


def _lazy_jobs() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def ensure_leaderboard(task_id: str, *, n_jobs: int | None = None, verbose: bool = True) -> list[float]:
    """This installation's leaderboard of one task under the active secret, built on first use.

    The board is read from :func:`leaderboard_cache_dir` ``/<task_id>.json``; when that file is
    missing or belongs to other data, the task's :data:`REFERENCE_SOLUTIONS` are run once with
    :func:`build_leaderboards` (a file lock makes concurrent processes wait for one build).

    Args:
        task_id: the task.
        n_jobs: parallel executions of the build (default: up to 4, at most the CPU count).
        verbose: print the build's progress to stderr.

    Returns:
        The reference metric values (task units), in reference-solution order.

    Raises:
        ValueError: unknown task id, or the active secret is the reference one (its board is
            the shipped file, :func:`get_leaderboard`).
        RuntimeError: a reference solution failed.
    """
    task = get_task(task_id)
    if is_reference_secret():
        raise ValueError("the reference secret's leaderboards are the shipped file; use get_leaderboard()")
    folder = leaderboard_cache_dir()
    path = folder / f"{task.task_id}.json"

    def cached() -> list[float] | None:
        if not path.is_file():
            return None
        try:
            board = load_leaderboards(path)
        except (OSError, json.JSONDecodeError):
            return None
        entry = board.get("tasks", {}).get(task.task_id)
        if entry is None or _board_mismatch(board, entry, task.task_id) or "data_digest" not in entry:
            return None
        return [float(e["metric_value"]) for e in entry["entries"]]

    values = cached()
    if values is not None:
        return values
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(folder / f"{task.task_id}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it: wait for it
        values = cached()
        if values is not None:
            return values
        n = len(REFERENCE_SOLUTIONS[task.problem_type])
        if verbose:
            print(
                f"[leaderboard] task {task.task_id!r}: no reference leaderboard yet for this installation's "
                f"task secret; running its {n} reference solutions once (tens of seconds), cached in {folder}",
                file=sys.stderr, flush=True,
            )
        t0 = time.perf_counter()
        build_leaderboards([task.task_id], path=path, n_jobs=n_jobs or _lazy_jobs(), verbose=verbose)
        if verbose:
            print(f"[leaderboard] task {task.task_id!r}: built in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr, flush=True)
    values = cached()
    if values is None:  # pragma: no cover - build_leaderboards wrote the file just now
        raise RuntimeError(f"the leaderboard of task {task.task_id!r} could not be read back from {path}")
    return values


def build_leaderboards(
    task_ids: Sequence[str] | None = None,
    *,
    path: str | Path | None = LEADERBOARD_PATH,
    sandbox: Sandbox | None = None,
    limits: SandboxLimits | None = None,
    n_jobs: int = 1,
    verbose: bool = True,
) -> dict:
    """(Re)compute the reference leaderboards by executing every reference solution.

    Each entry of :data:`REFERENCE_SOLUTIONS` for the task's problem type is run as a full
    script (``task.starter_code_with(model_line)``) in a fresh job folder and graded with
    :func:`read_submission` / :func:`compute_metric`, exactly like an agent's solution.

    The data are those of the active task secret
    (:mod:`~wmrl_envs.envs.autoresearch.secret`); the file records the secret's fingerprint and
    each task's :attr:`TaskData.digest`, so a board is never used with other data.

    Args:
        task_ids: tasks to (re)compute; ``None`` for all. Tasks already in an existing file at
            ``path`` and not listed are kept when that file was built for the same secret
            (otherwise they are dropped).
        path: output JSON file (``None``: do not write). The shipped :data:`LEADERBOARD_PATH`
            may only be written under the reference secret.
        sandbox: executor; ``None`` runs the trusted reference scripts with the host Python.
        limits: per-run limits (default: 600 s wall time).
        n_jobs: executions run in parallel (each single-threaded, see :data:`EXEC_ENV`).
        verbose: print one line per execution to stderr.

    The work folder is a :class:`~wmrl_envs.sandbox.jobdirs.OwnedFolder`
    ``wmrl-leaderboards-*`` in the system temporary folder: removed at the end, and swept by
    the next owned folder made there if the build is killed.

    Returns:
        The leaderboards dict (format of :func:`load_leaderboards`).

    Raises:
        ValueError: unknown task id, or ``path`` is the shipped file and the active secret is
            not the reference one.
        RuntimeError: a reference solution failed (its stderr tail is in the message).
    """
    import sklearn

    ids = list(task_ids) if task_ids is not None else list_tasks()
    tasks = [get_task(t) for t in ids]
    if path is not None and Path(path).resolve() == LEADERBOARD_PATH.resolve() and not is_reference_secret():
        raise ValueError(
            f"the shipped {LEADERBOARD_PATH.name} holds the reference secret's leaderboards: run with "
            f"{SECRET_ENV_VAR}={REFERENCE_SECRET}, or write elsewhere (path=...; "
            "get_leaderboard() builds this installation's boards by itself)"
        )
    fingerprint = secret_fingerprint()
    runner = sandbox or _HostRunner(SandboxLimits(wall_time_s=600.0, cpu_time_s=600.0, memory_mb=8192))
    limits = limits or SandboxLimits(wall_time_s=600.0, cpu_time_s=600.0, memory_mb=8192)
    jobs = [(t, name, line) for t in tasks for name, line in REFERENCE_SOLUTIONS[t.problem_type]]
    # an owned folder: the next build (or job folder) in the temporary folder sweeps it if this
    # process is killed, where a TemporaryDirectory would stay forever
    with OwnedFolder(prefix="wmrl-leaderboards-") as owned:
        tmp = str(owned.path)
        cache = Path(tmp) / "cache"
        for t in tasks:  # render the CSVs once, sequentially
            write_public_files(t, Path(tmp) / "warm" / t.task_id, cache_dir=cache)

        def run_one(job: tuple[TaskSpec, str, str]) -> dict:
            t, name, line = job
            src = t.starter_code_with(line)
            g, _ = evaluate(t, src, runner, workdir_root=Path(tmp) / "jobs", limits=limits, cache_dir=cache,
                            leaderboard=[0.0])
            if g.status != "valid":
                raise RuntimeError(
                    f"reference solution {name!r} failed on task {t.task_id!r}: {g.status}: {g.message}\n{g.stderr_tail}"
                )
            if verbose:
                print(f"[leaderboard] {t.task_id:18s} {name:18s} {t.metric}={g.metric_value:.5f} "
                      f"({g.runtime_s:.2f} s)", file=sys.stderr, flush=True)
            return {"name": name, "model_line": line, "metric_value": g.metric_value, "runtime_s": round(g.runtime_s, 3)}

        with ThreadPoolExecutor(max_workers=max(1, int(n_jobs))) as pool:
            results = list(pool.map(run_one, jobs))

    out: dict = {"version": 2, "tasks": {}}
    if path is not None and Path(path).is_file():
        try:
            old = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            old = {}
        if old.get("secret_fingerprint") == fingerprint:
            out["tasks"].update(old.get("tasks", {}))
    out["created"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    out["secret_fingerprint"] = fingerprint
    out["environment"] = {
        "python": sys.version.split()[0], "numpy": np.__version__, "pandas": pd.__version__,
        "scikit-learn": sklearn.__version__, "exec_env": dict(EXEC_ENV),
        "note": "runtime_s: wall-clock seconds of the whole script (Python start-up included) on the build machine",
    }
    for t in tasks:
        out["tasks"][t.task_id] = {
            "metric": t.metric, "higher_is_better": t.higher_is_better, "category": t.category,
            "data_digest": task_data(t.task_id).digest,
            "entries": [r for (jt, _, _), r in zip(jobs, results) if jt.task_id == t.task_id],
        }
    out["tasks"] = {tid: out["tasks"][tid] for tid in list_tasks() if tid in out["tasks"]}
    if path is not None:
        tmp_path = Path(path).with_name(f".{Path(path).name}.{uuid.uuid4().hex}.tmp")
        tmp_path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        tmp_path.replace(path)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``python -m wmrl_envs.envs.autoresearch.grading [--tasks ID ...] [--out PATH] [--jobs N]``.

    Without ``--out``: under the reference secret (``WMRL_TASK_SECRET=wmrl-reference``) it
    rewrites the shipped ``leaderboards.json``; under any other secret it (re)builds this
    installation's boards (:func:`leaderboard_cache_dir`), which :func:`get_leaderboard` would
    otherwise build task by task on first use.
    """
    ap = argparse.ArgumentParser(description="Recompute the AutoResearch reference leaderboards.")
    ap.add_argument("--tasks", nargs="*", default=None, help="task ids (default: all)")
    ap.add_argument("--out", default=None, help="output JSON (default: the shipped file under the reference "
                    "secret, else this installation's cache)")
    ap.add_argument("--jobs", type=int, default=1, help="parallel executions")
    args = ap.parse_args(argv)
    task_secret()  # a misconfigured secret fails here, before any execution
    if args.out is not None or is_reference_secret():
        out = args.out or str(LEADERBOARD_PATH)
        build_leaderboards(args.tasks, path=out, n_jobs=args.jobs)
        print(f"wrote {out}")
        return 0
    folder = leaderboard_cache_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for tid in (args.tasks if args.tasks is not None else list_tasks()):
        (folder / f"{get_task(tid).task_id}.json").unlink(missing_ok=True)
        ensure_leaderboard(tid, n_jobs=args.jobs)
    print(f"wrote this installation's leaderboards to {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
