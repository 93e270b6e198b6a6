"""Gymnasium wrappers.

Contents:
    - :class:`AnchoredWorldModelWrapper` — routes groups of episodes to real execution
      (anchors) or a world model and applies the WMRL corrections.
    - :class:`GroupRollout` — result of scoring a whole group at once.
    - :class:`AnchoredWorldModelVectorWrapper` (:mod:`.vector`) — the vector twin for
      ``gymnasium.vector`` envs (Sync/Async, every autoreset mode): the sub-envs of one lane
      run one group at a time, sharing its route.
    - :class:`RoutedSubEnv`, :func:`make_vector_env` (:mod:`.routed_sub_env`) — the per-sub-env
      switch that skips the inner step on world-model routes, and the vector env built of them.
    - :mod:`.common` — what both wrappers share (``build_loop``, ``LoopState``: ``training``,
      ``plan_step`` and the state; everything else is read on ``wrapper.loop``).
    - :func:`rollout_rng`, :func:`seed_rollout` (:mod:`.rollout_streams`) — each rollout of a
      seeded group its own random stream (the group shares only its task).
"""

from __future__ import annotations

from .anchored import AnchoredWorldModelWrapper, GroupRollout
from .rollout_streams import rollout_rng, seed_rollout
from .routed_sub_env import RoutedSubEnv, make_vector_env
from .vector import AnchoredWorldModelVectorWrapper

__all__ = [
    "AnchoredWorldModelWrapper", "GroupRollout", "AnchoredWorldModelVectorWrapper", "RoutedSubEnv", "make_vector_env",
    "rollout_rng", "seed_rollout",
]
