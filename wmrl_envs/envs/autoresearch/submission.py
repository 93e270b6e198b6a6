"""Reading an agent's ``submission.csv`` and computing the task metric.

Whatever the file holds, a problem with it is a reason returned to the grader (the agent's
``ran_no_sub``), never an exception: the host reads at most :func:`submission_max_bytes`
bytes and parses two columns (``docs/autoresearch.md``, "What the grader reads").
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path
from stat import S_ISREG
from typing import Sequence

import numpy as np
import pandas as pd

from wmrl_envs.envs.autoresearch.taskdata import TaskData, task_data
from wmrl_envs.envs.autoresearch.tasks import ID_COLUMN, LABEL_METRICS, TaskSpec, get_task

__all__ = [
    "SUBMISSION_FILE",
    "SUBMISSION_BYTES_PER_ROW",
    "SUBMISSION_HEADER_BYTES",
    "MAX_SUBMISSION_COLUMNS",
    "submission_max_bytes",
    "read_submission",
    "compute_metric",
]

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
