"""wmrl_envs — world-model RL with anchored real execution (Yang et al., arXiv 2608.12564).

Contents:
    - :mod:`wmrl_envs.core` — the method, in the order it runs: :class:`CorrectionLoop` (one
      group step: route, world-model call, close) over the router, the isotonic debiaser, the
      denoiser (ρ), the corrector, the cost ledger; :class:`CorrectionConfig` (the settings).
    - :mod:`wmrl_envs.wrappers` — :class:`AnchoredWorldModelWrapper` and its vector twin
      (Gymnasium plumbing around the loop).
    - :mod:`wmrl_envs.distributed` — real executions on a Ray pool.
    - :mod:`wmrl_envs.world_models` — the world-model protocol, the LLM judge, a synthetic one.
    - :mod:`wmrl_envs.envs` — AutoResearch (sandboxed ML code), LIBERO-Long (robot
      manipulation, optional extra ``libero``), the tiny ``Guess`` env and ``KnownTruth`` (a
      known true score per action and a world model of configurable error: the sweep's env).
    - :mod:`wmrl_envs.sandbox` — bubblewrap / Docker / subprocess sandboxes.

Importing the package registers the Gymnasium ids ``wmrl/AutoResearch-v0``,
``wmrl/LIBERO-Long-v0`` (LIBERO itself is imported only when that env is made),
``wmrl/Guess-v0`` and ``wmrl/KnownTruth-v0``. The method is explained in ``docs/method.md``.
"""

from __future__ import annotations

import gymnasium as gym

from .core import (
    AnchorRouter,
    CorrectionConfig,
    CorrectionLoop,
    CostLedger,
    GroupCorrection,
    InverseVarianceDenoiser,
    IsotonicDebiaser,
    WMRLCorrector,
)
from .wrappers import AnchoredWorldModelWrapper, GroupRollout

__all__ = [
    "AnchoredWorldModelWrapper",
    "GroupRollout",
    "CorrectionConfig",
    "CorrectionLoop",
    "AnchorRouter",
    "IsotonicDebiaser",
    "InverseVarianceDenoiser",
    "WMRLCorrector",
    "GroupCorrection",
    "CostLedger",
    "register_envs",
]

__version__ = "0.1.0"


def register_envs() -> None:
    """Register ``wmrl/AutoResearch-v0``, ``wmrl/LIBERO-Long-v0``, ``wmrl/Guess-v0`` and
    ``wmrl/KnownTruth-v0`` (idempotent)."""
    if "wmrl/Guess-v0" not in gym.registry:
        gym.register(id="wmrl/Guess-v0", entry_point="wmrl_envs.envs.guess:GuessEnv")
    if "wmrl/KnownTruth-v0" not in gym.registry:
        gym.register(id="wmrl/KnownTruth-v0", entry_point="wmrl_envs.envs.known_truth:KnownTruthEnv")
    from .envs.autoresearch import register_envs as _register_autoresearch

    _register_autoresearch()
    from .envs.libero import register_envs as _register_libero

    _register_libero()


register_envs()
