"""Held-out evaluation: avg@k leaderboard percentile, as the WMRL paper reports it.

avg@k (Yang et al., arXiv 2608.12564; ``docs/method.md``, "Evaluation"): per task, the best
leaderboard position score ``pos`` over k independent trajectories (a trajectory without a
valid submission counts 0), averaged over the tasks of each category, then averaged across
categories. Reported as a percentile (0–100).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Sequence

__all__ = ["avg_at_k"]


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
