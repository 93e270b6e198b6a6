"""The WMRL corrections as plain objects (no Gymnasium dependency).

Contents:
    - :class:`AnchorRouter` — seeded routing of whole groups to ``anchor`` / ``world_model``.
    - :class:`IsotonicDebiaser` — online debiasing (isotonic map from anchor pairs).
    - :class:`InverseVarianceDenoiser`, :func:`group_disagreement` — inverse-variance denoising (ρ).
    - :class:`WMRLCorrector`, :class:`GroupCorrection` — the group-level API combining both.
    - :class:`CorrectionConfig` — the correction settings, declared once (:mod:`.config`).
    - :class:`CorrectionLoop`, :class:`GroupTicket` — the method's group step in the order it
      runs: route, world-model prediction, (execution), close (:mod:`.loop`).
    - :func:`predict_checked`, :func:`world_model_idle` — the one checked, bounded world-model
      call (:mod:`.world_model_call`).
    - :class:`CostLedger` — counts and seconds per cost source.
    - :class:`UngradedMonitor`, :class:`TooManyUngradedError` — ungraded rollouts (the machinery
      failed): counts by cause, warnings and the stop rule (:mod:`.ungraded`).

The wrapper (:mod:`wmrl_envs.wrappers`) and all adapters share these objects.
"""

from __future__ import annotations

from .config import CorrectionConfig
from .corrector import GroupCorrection, WMRLCorrector
from .debias import IsotonicDebiaser
from .denoise import InverseVarianceDenoiser, group_disagreement
from .ledger import EXECUTION, GENERATION, UPDATE, WORLD_MODEL_SOURCE, CostLedger
from .routing import ANCHOR, WORLD_MODEL, AnchorRouter, Route
from .ungraded import TooManyUngradedError, UngradedMonitor
from .world_model_call import predict_checked, world_model_idle
from .loop import CorrectionLoop, GroupTicket

__all__ = [
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
    "predict_checked",
    "world_model_idle",
    "CostLedger",
    "EXECUTION",
    "WORLD_MODEL_SOURCE",
    "GENERATION",
    "UPDATE",
    "UngradedMonitor",
    "TooManyUngradedError",
]
