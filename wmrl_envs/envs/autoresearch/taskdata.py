"""A task's data on the host and the public files of a job folder.

The hidden test labels never touch the disk: they stay in this process's memory
(:func:`task_data`), drawn with a seed derived from the installation's task secret
(:mod:`~wmrl_envs.envs.autoresearch.secret`, ``docs/autoresearch.md``), which never enters a
sandbox. A job folder starts with only the public files (:data:`PUBLIC_FILES`):

* ``train.csv`` — the training features plus the target column (last column);
* ``test.csv`` — ``id`` plus the test features, **no labels**;
* ``sample_submission.csv`` — ``id`` plus the target column filled with a placeholder.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wmrl_envs.envs.autoresearch.secret import derive_seed, secret_fingerprint
from wmrl_envs.envs.autoresearch.tasks import ID_COLUMN, TaskSpec, get_task

__all__ = ["PUBLIC_FILES", "TaskData", "task_data", "write_public_files"]

PUBLIC_FILES: tuple[str, ...] = ("train.csv", "test.csv", "sample_submission.csv")
"""The files every job folder starts with."""

_CSV_FLOAT_FORMAT = "%.6g"


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
