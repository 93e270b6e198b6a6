"""Anchor scheduling: which groups go to real execution.

Routes are decided per *group* (the G rollouts GRPO samples for one prompt/task), never per
rollout: a group is either an ``anchor`` group (real execution AND world model) or a
``world_model`` group (world model only). Per training step, the number of anchor groups is
``anchor_fraction * groups_in_step`` with stochastic rounding (so its expectation is exact),
optionally capped by the free real-execution slots; a floor of ``min_anchor_groups`` (default 1)
anchor groups holds per *window* of ``anchor_window`` consecutive steps (default 1: per step):
the window's last step takes the anchors the window still lacks. The *realised* fraction is
what is reported. See ``docs/method.md`` ("Anchor scheduling").

Loading a saved state continues the saved run, settings included; when they differ from the
ones the object was built with, one :class:`UserWarning` names each of them
(:func:`warn_saved_settings`).
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

__all__ = ["Route", "ANCHOR", "WORLD_MODEL", "AnchorRouter", "warn_saved_settings"]

Route = Literal["anchor", "world_model"]
ANCHOR: Route = "anchor"
WORLD_MODEL: Route = "world_model"


_ROUTER_SETTINGS = ("anchor_fraction", "min_anchor_groups", "anchor_window")


def warn_saved_settings(what: str, configured: Mapping[str, Any], saved: Mapping[str, Any], *, stacklevel: int = 3) -> list[str]:
    """Warn (one :class:`UserWarning`) that a loaded state's settings replace the configured ones.

    Resuming from a state continues the saved run, so the saved settings are the ones used; this
    tells the user which configured settings that overrides.

    Args:
        what: what was loaded, for the message (e.g. ``"AnchorRouter.load_state_dict"``).
        configured: ``{setting: value}`` in use before the load.
        saved: ``{setting: value}`` after it (the saved ones); only keys of ``configured`` are compared.
        stacklevel: passed to :func:`warnings.warn` (default: the caller of the caller).

    Returns:
        The names of the settings that differ, in ``configured``'s order (empty: no warning).
    """
    changed = [k for k in configured if k in saved and configured[k] != saved[k]]
    if changed:
        listing = ", ".join(f"{k}: configured {configured[k]!r}, saved {saved[k]!r}" for k in changed)
        warnings.warn(
            f"{what}: the loaded state was saved with other settings ({listing}); the saved values are "
            "used from now on (resuming continues the saved run). To run with the configured settings, "
            "start from a fresh state instead of loading this one.",
            UserWarning, stacklevel=stacklevel,
        )
    return changed


def _check_window(anchor_window: object) -> None:
    if not (isinstance(anchor_window, numbers.Integral) and not isinstance(anchor_window, bool) and anchor_window >= 1):
        raise ValueError(f"anchor_window must be an integer number of steps >= 1, got {anchor_window!r}")


class AnchorRouter:
    """Seeded random routing of whole groups to ``anchor`` or ``world_model``.

    Args:
        anchor_fraction: target share f in [0, 1] of groups routed to real execution.
        min_anchor_groups: anchor groups per window of ``anchor_window`` steps at least
            (default 1; 0 allows windows without anchors). Ignored when
            ``anchor_fraction == 0`` (world-model-only training has no anchors).
        seed: seed of the router's own generator (routing is reproducible and independent of
            the agent's sampling).
        anchor_window: steps per window of the floor (integer >= 1, default 1). Windows are
            consecutive blocks of steps counted from the first routed step (``n_steps // anchor_window``).
            Steps are routed by stochastic rounding alone; on the window's last step, if the
            window has fewer than ``min_anchor_groups`` anchor groups, that step takes the
            missing ones (never more than its number of groups; ``free_slots`` still caps it).
            With 1 the floor holds per step, and the draws are those of a router without
            windows (same seed, same routes). A larger window lets a small ``anchor_fraction``
            be the realised one when steps have few groups (e.g. 2 groups per step at f = 0.05
            with a window of 10: at least one anchor group per 10 steps instead of one per step).

    Attributes:
        anchor_fraction, min_anchor_groups, anchor_window, seed: as given.
        n_steps, n_groups_routed, n_anchor_groups: steps, groups and anchor groups routed so far.
        keep_floor: hold the floor of ``min_anchor_groups`` also at ``anchor_fraction == 0``
            (default False; set by an adaptive fraction whose execution budget is spent).
        window_anchor_groups: anchor groups in the current, unfinished window (0 at its start).

    Raises:
        ValueError: ``anchor_fraction`` outside [0, 1], ``min_anchor_groups < 0`` or
            ``anchor_window`` not an integer >= 1.

    Example:
        >>> router = AnchorRouter(anchor_fraction=0.25, seed=0)
        >>> routes = router.route_step(8)
        >>> routes.count("anchor")
        2
    """

    def __init__(
        self, anchor_fraction: float = 0.1, min_anchor_groups: int = 1, seed: int = 0, *, anchor_window: int = 1
    ) -> None:
        if not 0.0 <= anchor_fraction <= 1.0:
            raise ValueError(f"anchor_fraction must be in [0, 1], got {anchor_fraction}")
        if min_anchor_groups < 0:
            raise ValueError(f"min_anchor_groups must be >= 0, got {min_anchor_groups}")
        _check_window(anchor_window)
        self.anchor_fraction = float(anchor_fraction)
        self.min_anchor_groups = int(min_anchor_groups)
        self.anchor_window = int(anchor_window)
        self.seed = int(seed)
        self._rng = np.random.default_rng(seed)
        self.n_groups_routed = 0
        self.n_anchor_groups = 0
        self.n_steps = 0
        self.window_anchor_groups = 0
        # the floor holds even at anchor_fraction 0 (an adaptive fraction whose execution budget
        # is spent keeps it); a plain anchor_fraction of 0 means world-model-only training
        self.keep_floor = False

    def route_step(self, groups_in_step: int, free_slots: int | None = None) -> list[Route]:
        """Routes for the ``groups_in_step`` groups of one training step.

        Args:
            groups_in_step: number of groups in the step (>= 1).
            free_slots: free real-execution slots, in *groups*; caps the anchor count
                (the floor of ``min_anchor_groups`` yields to this cap).

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
        last_of_window = (self.n_steps + 1) % self.anchor_window == 0
        if (self.anchor_fraction > 0 or self.keep_floor) and last_of_window:
            missing = self.min_anchor_groups - self.window_anchor_groups
            k = max(k, min(missing, groups_in_step))
        if free_slots is not None:
            k = min(k, free_slots)
        k = min(k, groups_in_step)
        chosen = set(self._rng.choice(groups_in_step, size=k, replace=False).tolist()) if k else set()
        routes: list[Route] = [ANCHOR if i in chosen else WORLD_MODEL for i in range(groups_in_step)]
        self.n_groups_routed += groups_in_step
        self.n_anchor_groups += k
        self.n_steps += 1
        self.window_anchor_groups = 0 if last_of_window else self.window_anchor_groups + k
        return routes

    @property
    def realised_fraction(self) -> float:
        """Share of all routed groups that were anchors so far (0.0 before any routing)."""
        return self.n_anchor_groups / self.n_groups_routed if self.n_groups_routed else 0.0

    def state_dict(self) -> dict[str, Any]:
        """Settings, counters (the current window's anchor groups too) and generator state
        (JSON-serialisable)."""
        return {
            "anchor_fraction": self.anchor_fraction,
            "min_anchor_groups": self.min_anchor_groups,
            "anchor_window": self.anchor_window,
            "window_anchor_groups": self.window_anchor_groups,
            "seed": self.seed,
            "n_groups_routed": self.n_groups_routed,
            "n_anchor_groups": self.n_anchor_groups,
            "n_steps": self.n_steps,
            "rng": self._rng.bit_generator.state,
            "keep_floor": self.keep_floor,
        }

    def load_state_dict(self, state: dict[str, Any], *, warn: bool = True) -> None:
        """Restore what :meth:`state_dict` returned; the next routes continue the sequence (in
        the middle of a window too). A state saved before windows existed (no ``"anchor_window"``)
        loads as ``anchor_window=1``.

        The saved settings (``anchor_fraction``, ``min_anchor_groups``, ``anchor_window``) replace
        the router's own: with ``warn`` (default), one :class:`UserWarning` names those whose
        saved value differs (:func:`warn_saved_settings`). :class:`~wmrl_envs.core.CorrectionLoop`
        passes ``warn=False`` and warns once for all its settings.

        Raises:
            KeyError: a key of :meth:`state_dict` is missing (``anchor_window`` and
                ``window_anchor_groups`` may be).
            ValueError: ``anchor_window`` is not an integer >= 1. On an error nothing is changed.
        """
        window = state.get("anchor_window", 1)
        _check_window(window)
        values = (
            float(state["anchor_fraction"]), int(state["min_anchor_groups"]), int(window),
            int(state.get("window_anchor_groups", 0)), int(state["seed"]), int(state["n_groups_routed"]),
            int(state["n_anchor_groups"]), int(state["n_steps"]),
        )
        rng = np.random.default_rng()
        rng.bit_generator.state = state["rng"]
        configured = {k: getattr(self, k) for k in _ROUTER_SETTINGS}
        (self.anchor_fraction, self.min_anchor_groups, self.anchor_window, self.window_anchor_groups,
         self.seed, self.n_groups_routed, self.n_anchor_groups, self.n_steps) = values
        self._rng = rng
        self.keep_floor = bool(state.get("keep_floor", False))
        if warn:
            warn_saved_settings("AnchorRouter.load_state_dict", configured,
                                {k: getattr(self, k) for k in _ROUTER_SETTINGS})
