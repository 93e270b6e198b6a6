"""Anchor scheduling: which groups go to real execution.

Routes are decided per *group* (the G rollouts GRPO samples for one prompt/task), never per
rollout: a group is either an ``anchor`` group (real execution AND world model) or a
``world_model`` group (world model only). Per training step, the number of anchor groups is
``anchor_fraction * groups_in_step`` with stochastic rounding (so its expectation is exact), at least
``min_anchor_groups`` (default 1), and optionally capped by the free real-execution slots; the
*realised* fraction is what is reported. See ``docs/method.md`` ("Anchor scheduling").
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

__all__ = ["Route", "ANCHOR", "WORLD_MODEL", "AnchorRouter"]

Route = Literal["anchor", "world_model"]
ANCHOR: Route = "anchor"
WORLD_MODEL: Route = "world_model"


class AnchorRouter:
    """Seeded random routing of whole groups to ``anchor`` or ``world_model``.

    Args:
        anchor_fraction: target share f in [0, 1] of groups routed to real execution.
        min_anchor_groups: anchor groups per step at least (default 1; 0 allows steps
            without anchors). Never more than the step's number of groups. Ignored when
            ``anchor_fraction == 0`` (world-model-only training has no anchors).
        seed: seed of the router's own generator (routing is reproducible and independent of
            the agent's sampling).

    Raises:
        ValueError: ``anchor_fraction`` outside [0, 1] or ``min_anchor_groups < 0``.

    Example:
        >>> router = AnchorRouter(anchor_fraction=0.25, seed=0)
        >>> routes = router.route_step(8)
        >>> routes.count("anchor")
        2
    """

    def __init__(self, anchor_fraction: float = 0.1, min_anchor_groups: int = 1, seed: int = 0) -> None:
        if not 0.0 <= anchor_fraction <= 1.0:
            raise ValueError(f"anchor_fraction must be in [0, 1], got {anchor_fraction}")
        if min_anchor_groups < 0:
            raise ValueError(f"min_anchor_groups must be >= 0, got {min_anchor_groups}")
        self.anchor_fraction = float(anchor_fraction)
        self.min_anchor_groups = int(min_anchor_groups)
        self.seed = int(seed)
        self._rng = np.random.default_rng(seed)
        self.n_groups_routed = 0
        self.n_anchor_groups = 0
        self.n_steps = 0

    def route_step(self, groups_in_step: int, free_slots: int | None = None) -> list[Route]:
        """Routes for the ``groups_in_step`` groups of one training step.

        Args:
            groups_in_step: number of groups in the step (>= 1).
            free_slots: free real-execution slots, in *groups*; caps the anchor count
                (the minimum of one anchor group yields to this cap).

        Returns:
            A list of ``groups_in_step`` routes, ``"anchor"`` or ``"world_model"``.

        Raises:
            ValueError: ``groups_in_step < 1`` or ``free_slots < 0``.
        """
        if groups_in_step < 1:
            raise ValueError(f"a step needs at least one group, got groups_in_step={groups_in_step}")
        if free_slots is not None and free_slots < 0:
            raise ValueError(f"free_slots must be >= 0, got {free_slots}")
        expected = self.anchor_fraction * groups_in_step
        k = int(np.floor(expected))
        if self._rng.random() < expected - k:
            k += 1
        if self.anchor_fraction > 0:
            k = max(k, min(self.min_anchor_groups, groups_in_step))
        if free_slots is not None:
            k = min(k, free_slots)
        k = min(k, groups_in_step)
        chosen = set(self._rng.choice(groups_in_step, size=k, replace=False).tolist()) if k else set()
        routes: list[Route] = [ANCHOR if i in chosen else WORLD_MODEL for i in range(groups_in_step)]
        self.n_groups_routed += groups_in_step
        self.n_anchor_groups += k
        self.n_steps += 1
        return routes

    @property
    def realised_fraction(self) -> float:
        """Share of all routed groups that were anchors so far (0.0 before any routing)."""
        return self.n_anchor_groups / self.n_groups_routed if self.n_groups_routed else 0.0

    def state_dict(self) -> dict[str, Any]:
        """Counters and generator state (JSON-serialisable)."""
        return {
            "anchor_fraction": self.anchor_fraction,
            "min_anchor_groups": self.min_anchor_groups,
            "seed": self.seed,
            "n_groups_routed": self.n_groups_routed,
            "n_anchor_groups": self.n_anchor_groups,
            "n_steps": self.n_steps,
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; the next routes continue the sequence."""
        self.anchor_fraction = float(state["anchor_fraction"])
        self.min_anchor_groups = int(state["min_anchor_groups"])
        self.seed = int(state["seed"])
        self.n_groups_routed = int(state["n_groups_routed"])
        self.n_anchor_groups = int(state["n_anchor_groups"])
        self.n_steps = int(state["n_steps"])
        self._rng = np.random.default_rng()
        self._rng.bit_generator.state = state["rng"]
