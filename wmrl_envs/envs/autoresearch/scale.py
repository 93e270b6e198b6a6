"""The AutoResearch reward scale, shared by real grading and world-model prediction.

The scale is the one the WMRL method uses (Yang et al., arXiv 2608.12564; see
``docs/method.md``, "Reward scale"): a program that does not parse scores 0.0, one that
raises at run time 0.1, one that runs but writes no valid submission 0.2, and a valid
submission ``0.5 + 0.5 * pos`` where ``pos`` in [0, 1] is its leaderboard position score.

Both the real grader (:mod:`wmrl_envs.envs.autoresearch.grading`) and the LLM judge
(:mod:`wmrl_envs.envs.autoresearch.llm_judge`) map a *status* to a score with
:func:`score_from_status`, so that real and predicted grades live on one scale.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "Status",
    "STATUSES",
    "STATUS_SCORES",
    "QUALITY_BUCKETS",
    "BUCKET_POSITIONS",
    "score_from_status",
    "position_score",
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
