"""The WMRL method as plain objects (no Gymnasium dependency), in the order it runs.

Start at :class:`CorrectionLoop` (:mod:`.loop`): one group step, each step a method —

1. settings: :class:`CorrectionConfig` (:mod:`.config`), declared once for every CLI and wrapper;
2. route: :class:`AnchorRouter` (:mod:`.routing`) — seeded routing of whole groups to
   ``anchor`` / ``world_model``; :meth:`CorrectionLoop.open_group` gives a :class:`GroupTicket`;
3. world-model prediction: :func:`predict_checked` (:mod:`.world_model_call`) — one checked,
   bounded, timed batched call; :func:`world_model_idle`;
4. real execution on anchors: the caller's (an env step, a sandbox, a Ray pool);
5. close: :class:`WMRLCorrector` (:mod:`.corrector`) calibrates with :class:`IsotonicDebiaser`
   (:mod:`.debias`), updates ρ with :class:`InverseVarianceDenoiser` and
   :func:`group_disagreement` (:mod:`.denoise`) and returns a :class:`GroupCorrection`;
   :class:`UngradedMonitor`, :class:`TooManyUngradedError` (:mod:`.ungraded`) account rollouts
   the machinery left without a score; :class:`CostLedger` (:mod:`.ledger`) counts every
   source and charges its wall-clock and CPU-seconds (:class:`Stopwatch`,
   :func:`execution_cpu_seconds`, the env info key :data:`EXECUTION_CPU_KEY`);
6. advice: :class:`AnchorAdvisor` (:mod:`.advisor`) collects the training anchor groups
   (:meth:`CorrectionLoop.advise`) and recommends an anchor fraction from the within-group
   correlation and the costs per rollout (:class:`CostRates`), with a verdict (:class:`AnchorAdvice`).

The math is in ``docs/method.md``; the wrappers (:mod:`wmrl_envs.wrappers`), the Ray scorer and
the adapters are plumbing around the loop.
"""

from __future__ import annotations

from .adaptive import AdaptiveAnchorFraction, ExecutionBudgetSpent, ExecutionBudgetWait
from .advisor import (
    AnchorAdvice,
    AnchorAdvisor,
    CostRates,
    GradientNoiseScale,
    optimal_anchor_fraction,
    pooled_within_group_correlation,
    predicted_speedup,
)
from .config import CorrectionConfig
from .corrector import GroupCorrection, WMRLCorrector
from .debias import IsotonicDebiaser
from .denoise import InverseVarianceDenoiser, group_disagreement
from .ledger import (
    EXECUTION,
    EXECUTION_COST_KEY,
    EXECUTION_CPU_KEY,
    GENERATION,
    UPDATE,
    WORLD_MODEL_SOURCE,
    CostLedger,
    Stopwatch,
    execution_cpu_seconds,
    reported_execution_cost,
    process_cpu_seconds,
)
from .routing import ANCHOR, WORLD_MODEL, AnchorRouter, Route
from .ungraded import TooManyUngradedError, UngradedMonitor
from .world_model_call import predict_checked, world_model_idle
from .group import AnchorExecution, GroupRollout, OpenGroup
from .loop import CorrectionLoop, GroupTicket

__all__ = [
    "AdaptiveAnchorFraction",
    "ExecutionBudgetSpent",
    "ExecutionBudgetWait",
    "ANCHOR",
    "WORLD_MODEL",
    "Route",
    "AnchorRouter",
    "IsotonicDebiaser",
    "InverseVarianceDenoiser",
    "group_disagreement",
    "WMRLCorrector",
    "GroupCorrection",
    "CorrectionConfig",
    "CorrectionLoop",
    "GroupTicket",
    "GroupRollout",
    "AnchorExecution",
    "OpenGroup",
    "predict_checked",
    "world_model_idle",
    "CostLedger",
    "Stopwatch",
    "process_cpu_seconds",
    "execution_cpu_seconds",
    "EXECUTION_CPU_KEY",
    "EXECUTION_COST_KEY",
    "reported_execution_cost",
    "EXECUTION",
    "WORLD_MODEL_SOURCE",
    "GENERATION",
    "UPDATE",
    "UngradedMonitor",
    "TooManyUngradedError",
    "AnchorAdvisor",
    "AnchorAdvice",
    "CostRates",
    "GradientNoiseScale",
    "optimal_anchor_fraction",
    "pooled_within_group_correlation",
    "predicted_speedup",
]
