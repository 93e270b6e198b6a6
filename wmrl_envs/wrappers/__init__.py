"""Gymnasium wrappers.

Contents:
    - :class:`AnchoredWorldModelWrapper` — routes groups of episodes to real execution
      (anchors) or a world model and applies the WMRL corrections.
    - :class:`GroupRollout` — result of scoring a whole group at once.
    - :class:`AnchoredWorldModelVectorWrapper`, :class:`RoutedSubEnv`, :func:`make_vector_env`
      (:mod:`.vector`) — the vector twin for ``gymnasium.vector`` envs (Sync/Async, every
      autoreset mode): the sub-envs of one group share a route.
"""

from __future__ import annotations

from .anchored import AnchoredWorldModelWrapper, GroupRollout
from .vector import AnchoredWorldModelVectorWrapper, RoutedSubEnv, make_vector_env

__all__ = ["AnchoredWorldModelWrapper", "GroupRollout", "AnchoredWorldModelVectorWrapper", "RoutedSubEnv", "make_vector_env"]
