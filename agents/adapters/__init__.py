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

* :mod:`agents.adapters.skyrl` — SkyRL (``skyrl-gym`` 0.4.0): :func:`register_wmrl_env`
  registers :class:`~agents.adapters.skyrl.WMRLTextEnv`, a skyrl-gym text env around any
  registered one, that routes whole groups of samples through one
  :class:`~agents.adapters.skyrl.WMRLSkyRLHub` (``docs/skyrl.md``). Needs ``skyrl-gym``.

* :mod:`agents.adapters.verl` — verl 0.9.1: :class:`~agents.adapters.verl.WMRLRewardManager`
  and :func:`~agents.adapters.verl.compute_score` (reward manager and function), the
  ``wmrl_grpo`` advantage estimator, and :class:`~agents.adapters.verl_core.WMRLHub`, the state
  they share as one named Ray actor (``docs/verl.md``). Needs ``verl`` (``.venv-verl``);
  :mod:`agents.adapters.verl_core` (the hub and the advantage math) does not.

All only call the shared objects of :mod:`wmrl_envs.core` through the wrapper; nothing of the
method is re-implemented here. Importing this package imports neither TRL, Stable-Baselines3
nor skyrl-gym: names are resolved on first access.
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
    "register_wmrl_env",
    "WMRLTextEnv",
    "WMRLSkyRLHub",
]

_LAZY = {
    "WMRLRewardFunction": "agents.adapters.trl",
    "AsyncWMRLRewardFunction": "agents.adapters.trl",
    "WMRLGRPOTrainer": "agents.adapters.trl",
    "WMRLBatch": "agents.adapters.trl",
    "AnchoredVecEnv": "agents.adapters.sb3",
    "AnchorWeightCallback": "agents.adapters.sb3",
    "make_anchored_vec_env": "agents.adapters.sb3",
    "register_wmrl_env": "agents.adapters.skyrl",
    "WMRLTextEnv": "agents.adapters.skyrl",
    "WMRLSkyRLHub": "agents.adapters.skyrl",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
