"""Scale-out: real executions on a pool of Ray actors (optional dependency ``ray``).

Contents:
    - :class:`~wmrl_envs.distributed.ray_pool.RayExecutionPool` — executes rollouts
      (``reset(seed, options)`` + ``step(action)``) of an expensive env on ``num_workers`` Ray
      actors; ``execute_group`` returns a future at once; execution seconds go to a
      :class:`~wmrl_envs.core.CostLedger`.
    - :class:`~wmrl_envs.distributed.scorer.AsyncAnchoredScorer` — the WMRL group path on top of
      it: routes and world-model-scores groups at submission, closes them on the wrapper's
      :class:`~wmrl_envs.core.CorrectionLoop` when their real scores arrive.
    - :class:`~wmrl_envs.distributed.ray_pool.GroupExecution`,
      :class:`~wmrl_envs.distributed.ray_pool.GroupExecutionFuture`,
      :class:`~wmrl_envs.distributed.scorer.PendingGroup` — the results and handles.

Importing this package does not import Ray; building a pool does (``ImportError`` with the
install command when it is missing). Deployment on a cluster: ``docs/scale_out.md``.
"""

from __future__ import annotations

from .ray_pool import (
    ExecutionWorker,
    GroupExecution,
    GroupExecutionFuture,
    RayExecutionPool,
)
from .scorer import AsyncAnchoredScorer, PendingGroup

__all__ = [
    "RayExecutionPool",
    "GroupExecution",
    "GroupExecutionFuture",
    "AsyncAnchoredScorer",
    "PendingGroup",
    "ExecutionWorker",
]
