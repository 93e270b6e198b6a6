"""The main job's task variant (``wmrl train --reward relative``, the default of its presets): a
shown line the policy must improve on, and a reward continuous in the task's metric.

The benchmark's reward (``docs/method.md``, "Reward scale") places a valid submission on the task's
8-entry leaderboard: 9 levels, validity alone worth 0.5, and on several tasks the line the prompt
shows is already at or near the board's best, so a policy that copies it scores what training can
reach (issue 36). This variant changes what ``wmrl train`` shows and rewards, and nothing of the
benchmark (:mod:`agents.experiments`, :class:`~wmrl_envs.envs.autoresearch.env.AutoResearchEnv`'s
own reward):

* **Two halves of the test rows.** Every task's test rows are split once into a *validation* half
  and a *test* half (:func:`split_masks`: a fixed permutation per task id). A submission still
  predicts every test row; its metric is computed on each half separately.
* **The shown line** (``--baseline board-low``): the weakest entry of the task's own leaderboard
  (:func:`shown_model_line`), so that on every task the board's best beats it by a wide margin
  (``benchmarks/relative_task.py`` measures the gap against the test half's noise).
* **The reward** (:meth:`ReferenceLevels.score`): on the validation half, the gain
  ``g = (m - m_shown) / (m_best - m_shown)`` of the submission's metric ``m`` over the shown line's,
  in units of the gap between the board's best entry and the shown line (the direction of the
  metric is in the sign of the gap), mapped to ``0.5 + 0.25 * clip(g, -0.8, 2.0)``: the shown line
  scores 0.5, the board's best 0.75, twice the best's gain 1.0, and a valid submission never less
  than 0.3; a program that fails keeps the benchmark's status scores (0 / 0.1 / 0.2).
* **Held-out figures** are the same score on the test half (``info["relative"]["test_score"]``),
  against the shown line's and the best entry's test-half metrics; the copy-the-shown-line
  baseline scores exactly 0.5 there (:func:`copy_baseline`).

The shown line's and the best entry's metrics on both halves (:class:`ReferenceLevels`) are
measured once per task secret by running the two reference scripts on the host (trusted code,
one Python process for a batch of tasks) and cached beside the leaderboards
(:func:`reference_levels`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = [
    "REWARDS",
    "SCORE_AT_SHOWN",
    "SCORE_AT_BEST",
    "GAIN_RANGE",
    "split_masks",
    "shown_model_line",
    "best_model_line",
    "gain_score",
    "ReferenceLevels",
    "reference_levels",
    "split_metrics",
    "RelativeRewardEnv",
    "copy_baseline",
]

REWARDS = ("relative", "leaderboard")
"""The choices of ``wmrl train --reward``: ``relative`` (this module) or ``leaderboard`` (the
benchmark's position on the task's board)."""

SCORE_AT_SHOWN = 0.5
"""Score of a submission as good as the shown line (on the half it is scored on)."""
SCORE_AT_BEST = 0.75
"""Score of a submission as good as the board's best entry."""
GAIN_RANGE = (-0.8, 2.0)
"""Gains are clipped to this range: valid submissions score in [0.3, 1.0]."""

_SPLIT_SALT = b"wmrl-relative-split-v1:"


def split_masks(task_id: str) -> tuple[np.ndarray, np.ndarray]:
    """The validation and test halves of a task's test rows.

    A fixed permutation per task id (seeded by a hash of the id, not by the task secret: which
    row is in which half reveals no label), the first ``n // 2`` rows of it validation.

    Returns:
        ``(val, test)``: boolean arrays of shape ``(n_test,)`` aligned with the task's test rows
        (:attr:`TaskData.test_ids` order), disjoint, covering every row.

    Raises:
        ValueError: unknown task id.
    """
    from wmrl_envs.envs.autoresearch.taskdata import task_data
    from wmrl_envs.envs.autoresearch.tasks import get_task

    task = get_task(task_id)
    n = len(task_data(task.task_id).test_ids)
    seed = int.from_bytes(hashlib.sha256(_SPLIT_SALT + task.task_id.encode()).digest()[:8], "little")
    perm = np.random.default_rng(seed).permutation(n)
    val = np.zeros(n, dtype=bool)
    val[perm[: n // 2]] = True
    return val, ~val


def split_metrics(task_id: str, preds: np.ndarray) -> dict[str, float]:
    """The task metric of predictions on each half (:func:`split_masks`).

    Args:
        preds: predictions aligned with the test rows (:func:`~wmrl_envs.envs.autoresearch.grading.read_submission`'s).

    Returns:
        ``{"val": float, "test": float}`` in the task's units.

    Raises:
        ValueError: unknown task id, or the metric cannot be computed.
    """
    from wmrl_envs.envs.autoresearch.grading import compute_metric
    from wmrl_envs.envs.autoresearch.taskdata import task_data
    from wmrl_envs.envs.autoresearch.tasks import get_task

    task = get_task(task_id)
    y = task_data(task.task_id).y_test.to_numpy()
    preds = np.asarray(preds)
    return {name: compute_metric(task.metric, y[m], preds[m]) for name, m in zip(("val", "test"), split_masks(task_id))}


def _board(task_id: str) -> list[tuple[str, str, float]]:
    from wmrl_envs.envs.autoresearch.leaderboards import REFERENCE_SOLUTIONS, get_leaderboard
    from wmrl_envs.envs.autoresearch.tasks import get_task

    task = get_task(task_id)
    refs = REFERENCE_SOLUTIONS[task.problem_type]
    return [(name, line, float(v)) for (name, line), v in zip(refs, get_leaderboard(task.task_id))]


def _ranked(task_id: str) -> list[tuple[str, str, float]]:
    """The board's entries best first (ties: reference order)."""
    from wmrl_envs.envs.autoresearch.tasks import get_task

    hib = get_task(task_id).higher_is_better
    return sorted(_board(task_id), key=lambda e: -e[2] if hib else e[2])


def shown_model_line(task_id: str, baseline: str) -> str:
    """The ``model = ...`` line the prompt shows for a baseline.

    Args:
        baseline: ``"board-low"`` (the weakest entry of the task's leaderboard under the active
            secret; may build the board, :func:`~wmrl_envs.envs.autoresearch.leaderboards.get_leaderboard`),
            or one of :meth:`TaskSpec.baseline_model_line`'s (``starter``, ``boosting``).

    Raises:
        ValueError: unknown task id or baseline.
    """
    from wmrl_envs.envs.autoresearch.tasks import get_task

    if baseline == "board-low":
        return _ranked(task_id)[-1][1]
    return get_task(task_id).baseline_model_line(baseline)


def best_model_line(task_id: str) -> tuple[str, str]:
    """``(name, model_line)`` of the best entry of the task's leaderboard (full test set)."""
    name, line, _ = _ranked(task_id)[0]
    return name, line


def gain_score(gain: float) -> float:
    """The reward of a valid submission with gain ``g`` over the shown line:
    ``0.5 + 0.25 * clip(g, -0.8, 2.0)`` (in [0.3, 1.0]; NaN gives 0.3)."""
    g = float(gain)
    if not math.isfinite(g):
        g = GAIN_RANGE[0]
    return SCORE_AT_SHOWN + (SCORE_AT_BEST - SCORE_AT_SHOWN) * min(max(g, GAIN_RANGE[0]), GAIN_RANGE[1])


@dataclass(frozen=True)
class ReferenceLevels:
    """The shown line's and the board's best entry's metrics on both halves of one task.

    Attributes:
        task_id: the task.
        higher_is_better: the metric's direction.
        shown_line: the line the prompt shows.
        best_name, best_line: the board's best entry (on the full test set).
        shown: ``{"val": m, "test": m}`` of the shown line (task units).
        best: the same of the best entry.
    """

    task_id: str
    higher_is_better: bool
    shown_line: str
    best_name: str
    best_line: str
    shown: dict[str, float]
    best: dict[str, float]

    def gain(self, value: float, split: str) -> float:
        """``(value - shown) / (best - shown)`` on ``split`` ("val" or "test"); the gap's sign
        carries the metric's direction. A gap that is not in the best's favour on this half (the
        shown line is the best here) uses the magnitude of the other half's gap."""
        s, b = self.shown[split], self.best[split]
        sign = 1.0 if self.higher_is_better else -1.0
        gap = sign * (b - s)
        if not gap > 0:
            other = self.best["test" if split == "val" else "val"] - self.shown["test" if split == "val" else "val"]
            gap = max(abs(other), 1e-12)
        return sign * (float(value) - s) / gap

    def score(self, value: float, split: str = "val") -> float:
        """The reward of a valid submission whose metric on ``split`` is ``value`` (:func:`gain_score`)."""
        return gain_score(self.gain(value, split))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_DRIVER = '''import json, os, sys, traceback
jobs = json.load(open(sys.argv[1]))
for folder, index, source in jobs:
    os.chdir(folder)
    try:
        exec(compile(source, "solution.py", "exec", dont_inherit=True), {"__name__": "__main__"})
        os.replace("submission.csv", f"ref-{index}.csv")
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
'''


def _run_lines(jobs: Sequence[tuple[str, Sequence[str]]]) -> dict[str, list[np.ndarray]]:
    """Run each task's scripts (its starter with each line) in one host Python process (trusted
    reference code: no sandbox) and return their predictions aligned with the test rows.

    Raises:
        RuntimeError: a script failed or wrote no valid submission.
    """
    from wmrl_envs.envs.autoresearch.grading import read_submission
    from wmrl_envs.envs.autoresearch.running import EXEC_ENV
    from wmrl_envs.envs.autoresearch.secret import SECRET_ENV_VAR
    from wmrl_envs.envs.autoresearch.taskdata import write_public_files
    from wmrl_envs.envs.autoresearch.tasks import get_task

    with tempfile.TemporaryDirectory(prefix="wmrl-reference-levels-") as tmp:
        batch = []
        for task_id, lines in jobs:
            task = get_task(task_id)
            folder = Path(tmp) / task.task_id
            folder.mkdir()
            write_public_files(task, folder)
            batch += [[str(folder), i, task.starter_code_with(line)] for i, line in enumerate(lines)]
        (Path(tmp) / "jobs.json").write_text(json.dumps(batch))
        (Path(tmp) / "driver.py").write_text(_DRIVER)
        env = {k: v for k, v in os.environ.items() if k != SECRET_ENV_VAR}
        env.update(EXEC_ENV)
        p = subprocess.run([sys.executable, str(Path(tmp) / "driver.py"), str(Path(tmp) / "jobs.json")], cwd=tmp,
                           env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"a reference script failed while measuring reference levels:\n{p.stderr[-2000:]}")
        out: dict[str, list[np.ndarray]] = {}
        for task_id, lines in jobs:
            folder = Path(tmp) / get_task(task_id).task_id
            preds = []
            for i in range(len(lines)):
                os.replace(folder / f"ref-{i}.csv", folder / "submission.csv")
                pred, why = read_submission(task_id, folder)
                if pred is None:
                    raise RuntimeError(f"reference line {lines[i]!r} on task {task_id!r}: {why}")
                preds.append(pred)
            out[task_id] = preds
    return out


_MEMORY: dict[tuple[str, str, str], ReferenceLevels] = {}


def _cache_path(task_id: str, shown_line: str) -> Path:
    from wmrl_envs.envs.autoresearch.secret import secret_dir, secret_fingerprint

    key = hashlib.sha256(shown_line.encode()).hexdigest()[:12]
    return secret_dir() / "reference-levels" / secret_fingerprint() / f"{task_id}-{key}.json"


def reference_levels(task_ids: str | Sequence[str], baseline: str) -> dict[str, ReferenceLevels]:
    """The :class:`ReferenceLevels` of tasks for a baseline, measured on first use and cached.

    The cache is one JSON file per task and shown line under ``secret_dir()/reference-levels/<secret
    fingerprint>/``, tied to the task's data digest; missing tasks are measured together in one
    host process (:func:`_run_lines`; about 1.8 CPU-s of start-up plus the fits: a few CPU-s per
    task, more for multi-class boosting).

    Args:
        task_ids: a task id or several.
        baseline: the shown line's baseline (:func:`shown_model_line`).

    Returns:
        ``{task_id: ReferenceLevels}``.

    Raises:
        ValueError: unknown task id or baseline.
        RuntimeError: a reference script failed.
    """
    from wmrl_envs.envs.autoresearch.secret import secret_fingerprint
    from wmrl_envs.envs.autoresearch.taskdata import task_data
    from wmrl_envs.envs.autoresearch.tasks import get_task

    ids = [task_ids] if isinstance(task_ids, str) else list(task_ids)
    fp = secret_fingerprint()
    out: dict[str, ReferenceLevels] = {}
    todo: list[tuple[str, str, str, str]] = []
    for tid in ids:
        task = get_task(tid)
        shown = shown_model_line(tid, baseline)
        key = (fp, tid, shown)
        if key in _MEMORY:
            out[tid] = _MEMORY[key]
            continue
        path = _cache_path(tid, shown)
        try:
            rec = json.loads(path.read_text())
            if rec.get("data_digest") == task_data(tid).digest and rec["levels"]["shown_line"] == shown:
                out[tid] = _MEMORY[key] = ReferenceLevels(**rec["levels"])
                continue
        except (OSError, ValueError, KeyError, TypeError):
            pass
        name, best = best_model_line(tid)
        todo.append((task.task_id, shown, name, best))
    if todo:
        preds = _run_lines([(tid, [shown, best]) for tid, shown, _, best in todo])
        for tid, shown, name, best in todo:
            levels = ReferenceLevels(tid, get_task(tid).higher_is_better, shown, name, best,
                                     split_metrics(tid, preds[tid][0]), split_metrics(tid, preds[tid][1]))
            path = _cache_path(tid, shown)
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"data_digest": task_data(tid).digest, "levels": levels.to_dict()}, indent=1))
            os.replace(tmp, path)
            out[tid] = _MEMORY[(fp, tid, shown)] = levels
    return {tid: out[tid] for tid in ids}


def _relative_env_class() -> type:
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv

    class RelativeRewardEnv(AutoResearchEnv):
        """:class:`~wmrl_envs.envs.autoresearch.env.AutoResearchEnv` with the relative reward.

        A valid submission's ``score`` (and ``step_score``, ``best_score``, the reward: the increase
        of the episode's best, as in the base env) is :meth:`ReferenceLevels.score` of its metric on
        the validation half; other statuses keep the base env's scores. ``info["relative"]`` holds
        ``{"val_metric", "test_metric", "val_score", "test_score"}`` (metrics ``None`` and both
        scores the status score when the submission is not valid). ``info["position"]`` and
        ``info["metric_value"]`` stay the benchmark's (full test set). The feedback text of a
        multi-turn episode is the base env's (it quotes the full test set's metric).

        Args:
            baseline: the shown line's baseline (:func:`shown_model_line`).
            **kwargs: :class:`AutoResearchEnv`'s.
        """

        def __init__(self, *args: Any, baseline: str = "board-low", **kwargs: Any) -> None:
            self._keep_for_caller = bool(kwargs.pop("keep_job_dirs", False))
            super().__init__(*args, keep_job_dirs=True, **kwargs)  # the submission is read back, then removed
            self.baseline = str(baseline)

        def prepare_reference_levels(self, task_ids: Sequence[str] | None = None) -> dict[str, ReferenceLevels]:
            """Measure (or read) the reference levels of ``task_ids`` (default: the env's tasks) now,
            so that no one-off measurement falls inside a step."""
            return reference_levels(list(task_ids if task_ids is not None else self.task_ids), self.baseline)

        def step(self, action: str) -> tuple[dict, float, bool, bool, dict]:  # noqa: D102 - the class says it
            from wmrl_envs.envs.autoresearch.grading import read_submission

            prev = self._best
            obs, reward, terminated, truncated, info = super().step(action)
            job = info.get("job_dir")
            try:
                if not info.get("graded"):
                    return obs, reward, terminated, truncated, info
                score = float(info["score"])
                rel: dict[str, Any] = {"val_metric": None, "test_metric": None, "val_score": score, "test_score": score}
                if info["status"] == "valid":
                    preds, why = read_submission(info["task_id"], job) if job else (None, "no job folder")
                    if preds is None:  # pragma: no cover - the base env has just read the same file
                        raise RuntimeError(f"could not read back a valid submission: {why}")
                    levels = reference_levels(info["task_id"], self.baseline)[info["task_id"]]
                    m = split_metrics(info["task_id"], preds)
                    score = levels.score(m["val"], "val")
                    rel = {"val_metric": m["val"], "test_metric": m["test"], "val_score": score,
                           "test_score": levels.score(m["test"], "test")}
                self._best = max(prev, score)
                info.update(score=score, step_score=score, best_score=self._best, relative=rel)
                return obs, float(self._best - prev), terminated, truncated, info
            finally:
                if job and not self._keep_for_caller:
                    shutil.rmtree(job, ignore_errors=True)
                    info.pop("job_dir", None)

    return RelativeRewardEnv


def __getattr__(name: str) -> Any:  # the env class is built on first use (no gymnasium import at module load)
    if name == "RelativeRewardEnv":
        cls = _relative_env_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


def mean_t_interval(x: Any, level: float = 0.95, bounds: tuple[float, float] | None = None) -> list[float] | None:
    """The Student-t interval of the mean of ``x`` (1-D, e.g. per-task differences) at coverage
    ``level``; ``None`` with fewer than 2 values. Over a handful of tasks a percentile bootstrap is
    far too narrow (:func:`agents.train.arms.paired_over_tasks`). ``bounds`` (lo, hi): the range the
    mean can take (e.g. ``(-0.5, 0.5)`` for a relative score minus the copy's 0.5); the interval is
    clipped to it, which matters from 2 or 3 tasks, where t's quantile is 12.7 or 4.3.

    Example:
        >>> mean_t_interval([0.1, 0.3], bounds=(-0.5, 0.5))
        [-0.5, 0.5]
    """
    import math

    from scipy import stats

    d = np.asarray(x, dtype=float)
    if d.size < 2:
        return None
    half = float(stats.t.ppf((1 + level) / 2, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size))
    lo, hi = float(d.mean() - half), float(d.mean() + half)
    if bounds is not None:
        lo, hi = max(lo, float(bounds[0])), min(hi, float(bounds[1]))
    return [lo, hi]


def copy_baseline(trajectories: Mapping[str, Mapping[str, Any]], n_boot: int = 2000, seed: int = 0,
                  level: float = 0.95) -> dict[str, Any] | None:
    """The policy against copying the shown line, on the test half of the held-out tasks.

    Per task, the policy's figure is the mean of its trajectories' test-half relative scores
    (``info["relative"]["test_score"]``: a failed program scores its status score); copying the shown
    line scores :data:`SCORE_AT_SHOWN` on every task by construction. The policy beats the copy on a
    task when its figure is above that.

    Args:
        trajectories: :func:`agents.train.evaluation.evaluate`'s ``trajectories``; tasks without
            ``test_scores`` are left out.
        n_boot, seed: unused (kept for callers of the percentile bootstrap this replaced: over a
            handful of tasks it was far too narrow, zero-width from 2 tasks).
        level: the coverage of the Student-t interval over tasks of the mean difference
            (:func:`mean_t_interval`, as the arms' comparison), clipped to the difference's range
            [-0.5, 0.5] (a task's figure lies in [0, 1]).

    Returns:
        ``None`` when no task has test scores; else ``{"copy_score": 0.5, "policy_score": mean over
        tasks, "difference": policy - copy, "difference_ci": [lo, hi] or None (fewer than 2 tasks),
        "share_tasks_beaten": float, "n_tasks": int, "per_task": {task: policy figure},
        "best_score": the board's best entry's test-half score (0.75)}``.
    """
    per_task = {t: float(np.mean(v["test_scores"])) for t, v in trajectories.items() if v.get("test_scores")}
    if not per_task:
        return None
    x = np.asarray(list(per_task.values())) - SCORE_AT_SHOWN
    ci = mean_t_interval(x, level, bounds=(-SCORE_AT_SHOWN, 1.0 - SCORE_AT_SHOWN))  # a task's figure is in [0, 1]
    return {"copy_score": SCORE_AT_SHOWN, "best_score": SCORE_AT_BEST, "policy_score": float(x.mean() + SCORE_AT_SHOWN),
            "difference": float(x.mean()), "difference_ci": ci, "share_tasks_beaten": float(np.mean(x > 0)),
            "n_tasks": int(x.size), "per_task": per_task}
