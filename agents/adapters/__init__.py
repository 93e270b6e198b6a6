"""Adapters that drop WMRL into third-party RL loops.

Contents:

* :mod:`agents.adapters.trl` — TRL's ``GRPOTrainer``: :class:`WMRLRewardFunction` (and its
  ``async`` twin :class:`AsyncWMRLRewardFunction`) routes whole groups of completions to real
  execution or the world model; :class:`WMRLGRPOTrainer` multiplies the post-normalisation
  advantages of anchor rows by ρ. Needs ``trl``.
* :mod:`agents.adapters.sb3` — Stable-Baselines3: :func:`make_anchored_vec_env` (a
  ``DummyVecEnv`` of :class:`~wmrl_envs.AnchoredWorldModelWrapper` sharing one corrector and
  ledger), :class:`AnchoredVecEnv` (``training`` flag, ``save``/``load`` of the correction state
  beside the model, like ``VecNormalize``) and :class:`AnchorWeightCallback` (ρ on the
  advantages of anchor episodes in the rollout buffer). Needs ``stable-baselines3``.

Both only call the shared objects of :mod:`wmrl_envs.core` through the wrapper; nothing of the
method is re-implemented here. Importing this package imports neither TRL nor
Stable-Baselines3: names are resolved on first access.
"""

from __future__ import annotations

from wmrl_envs.utils import lazy_exports

__all__ = [
    "WMRLRewardFunction",
    "AsyncWMRLRewardFunction",
    "WMRLGRPOTrainer",
    "WMRLBatch",
    "AnchoredVecEnv",
    "AnchorWeightCallback",
    "make_anchored_vec_env",
]

_LAZY = {
    "WMRLRewardFunction": "agents.adapters.trl",
    "AsyncWMRLRewardFunction": "agents.adapters.trl",
    "WMRLGRPOTrainer": "agents.adapters.trl",
    "WMRLBatch": "agents.adapters.trl",
    "AnchoredVecEnv": "agents.adapters.sb3",
    "AnchorWeightCallback": "agents.adapters.sb3",
    "make_anchored_vec_env": "agents.adapters.sb3",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
