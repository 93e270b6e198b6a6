"""Held-out evaluation: avg@k leaderboard percentile, as the WMRL paper reports it.

avg@k (Yang et al., arXiv 2608.12564; ``docs/method.md``, "Evaluation"): per task, the best
leaderboard position score ``pos`` over k independent trajectories (a trajectory without a
valid submission counts 0), averaged over the tasks of each category, then averaged across
categories. Reported as a percentile (0–100). :func:`avg_at_k_estimate` estimates the same
quantity from n >= k trajectories per task (:func:`expected_best_of_k`), with a lower variance
than one draw of k.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Mapping, Sequence

import numpy as np

__all__ = ["avg_at_k", "expected_best_of_k", "avg_at_k_estimate"]


def avg_at_k(
    positions: Mapping[str, Sequence[float | None]],
    categories: Mapping[str, str],
    k: int | None = None,
) -> dict[str, object]:
    """avg@k leaderboard percentile.

    Args:
        positions: per task id, the position scores ``pos`` in [0, 1] of its trajectories
            (``None`` for a trajectory without a valid submission).
        categories: per task id, its category.
        k: use the first k trajectories of each task (default: all given).

    Returns:
        ``{"overall": float, "per_category": {category: float}, "per_task": {task: float}}``,
        all in percent (0–100).

    Raises:
        ValueError: a task has no trajectories or no category, or ``k < 1``.

    Example:
        >>> avg_at_k({"a": [0.5, None], "b": [None], "c": [1.0]}, {"a": "x", "b": "x", "c": "y"})["overall"]
        62.5
    """
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    per_task: dict[str, float] = {}
    by_cat: dict[str, list[float]] = defaultdict(list)
    for task, pos in positions.items():
        traj = list(pos)[: k if k is not None else None]
        if not traj:
            raise ValueError(f"task {task!r} has no trajectories")
        if task not in categories:
            raise ValueError(f"task {task!r} has no category")
        best = max((float(p) if p is not None else 0.0) for p in traj)
        per_task[task] = 100.0 * best
        by_cat[categories[task]].append(100.0 * best)
    per_cat = {c: sum(v) / len(v) for c, v in sorted(by_cat.items())}
    overall = sum(per_cat.values()) / len(per_cat) if per_cat else float("nan")
    return {"overall": overall, "per_category": per_cat, "per_task": per_task}


def expected_best_of_k(positions: Sequence[float | None], k: int) -> float:
    """Unbiased estimate of avg@k's per-task term, E[best position of k trajectories], from n >= k draws.

    avg@k (:func:`agents.train.evaluation.avg_at_k`) scores a task by the best of k trajectories; one
    draw of k is a noisy estimate of its expectation. With n >= k i.i.d. trajectories, the mean of
    the best over all C(n, k) subsets of size k is unbiased and has a lower variance (the estimator
    of pass@k of Chen et al., 2021, arXiv:2107.03374, applied to the maximum): with the positions
    sorted ascending ``x_(1) <= ... <= x_(n)``, it is ``sum_i x_(i) C(i-1, k-1) / C(n, k)``. With
    ``k == n`` it is the best of the n draws (avg@k itself); with ``k == 1`` their mean.

    Args:
        positions: the n trajectories' position scores in [0, 1]; ``None`` (no valid
            submission) counts as 0, as in avg@k.
        k: trajectories per task of avg@k (1 <= k <= n).

    Returns:
        The estimate in [0, 1] (float).

    Raises:
        ValueError: ``k < 1`` or ``k > n``.

    Example:
        >>> expected_best_of_k([0.0, 0.5, 1.0], 2)  # best of the pairs (0, .5), (0, 1), (.5, 1)
        0.8333333333333334
    """
    from math import comb

    x = np.sort(np.asarray([0.0 if p is None else float(p) for p in positions], dtype=float))
    n = x.size
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}] (draws per task), got k={k}")
    w = np.array([comb(i, k - 1) for i in range(n)], dtype=float) / comb(n, k)
    return float((w * x).sum())


def avg_at_k_estimate(positions: Mapping[str, Sequence[float | None]], categories: Mapping[str, str],
                      k: int, draws: int | None = None) -> tuple[float, dict[str, float], dict[str, float]]:
    """avg@k (percent) from each task's draws, aggregated as :func:`agents.train.evaluation.avg_at_k`.

    Args:
        positions: per task, its trajectories' position scores in draw order (``None``: no
            valid submission); a task without trajectories is left out.
        categories: per task, its category.
        k: k of avg@k (a task with fewer draws uses all of them).
        draws: use only the first ``draws`` trajectories of each task (``None``: all), which is
            an evaluation with fewer draws on the same stream.

    Returns:
        ``(overall, per_category, per_task)``: per task 100 × :func:`expected_best_of_k`;
        per category the mean over its tasks; overall the mean over categories.
    """
    per_task = {}
    for t, p in positions.items():
        p = list(p)[: draws if draws is not None else None]
        if p:
            per_task[t] = 100.0 * expected_best_of_k(p, min(k, len(p)))
    by_cat: dict[str, list[float]] = {}
    for t, v in per_task.items():
        by_cat.setdefault(categories[t], []).append(v)
    per_cat = {c: statistics.fmean(v) for c, v in sorted(by_cat.items())}
    return (statistics.fmean(per_cat.values()) if per_cat else float("nan")), per_cat, per_task
