"""Gymnasium wrappers.

Contents:
    - :class:`AnchoredWorldModelWrapper` — routes groups of episodes to real execution
      (anchors) or a world model and applies the WMRL corrections.
    - :class:`GroupRollout` — result of scoring a whole group at once.
"""

from __future__ import annotations

from .anchored import AnchoredWorldModelWrapper, GroupRollout

__all__ = ["AnchoredWorldModelWrapper", "GroupRollout"]
