"""What a training group costs in real executions, for an ``execution_budget``.

:class:`GroupCosts` is held by :class:`~wmrl_envs.core.CorrectionLoop` (``docs/method.md``,
"Adaptive anchor fraction", step 7). It keeps, for every training group opened and not yet closed,
its route and the real executions credited to it (each execution names its group by its ticket:
:meth:`CorrectionLoop.record_execution(..., ticket=) <wmrl_envs.core.CorrectionLoop.record_execution>`),
and the callers' prior cost of a group per route (what one group costs before any group of the
route has closed). From these and what the closed groups measured
(:meth:`AdaptiveAnchorFraction.executions_per_group
<wmrl_envs.core.adaptive.AdaptiveAnchorFraction.executions_per_group>`) it prices a group of each
route, the executions the open groups will still make, and whether one more group fits in what is
left of the budget: a budgeted run spends what fits, a group at a time.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from .routing import ANCHOR, WORLD_MODEL

if TYPE_CHECKING:
    from .adaptive import AdaptiveAnchorFraction

__all__ = ["GroupCosts", "BudgetCosts"]


@dataclass(frozen=True)
class BudgetCosts:
    """The prices an execution budget works with, in real executions.

    Attributes:
        anchor: one anchor group (``None``: not known yet: nothing measured, no prior).
        world_model: one world-model group (0.0 in outcome mode; as much as an anchor group in
            reward mode, where every episode executes).
        in_flight: what the training groups opened and not closed will still execute (their
            route's price, or before one is known their own prior, less what they recorded).
    """

    anchor: float | None
    world_model: float
    in_flight: float

    def of(self, route: str) -> float:
        """The price of one group of ``route`` (0.0 where unknown)."""
        return (self.anchor or 0.0) if route == ANCHOR else self.world_model


class GroupCosts:
    """Real executions per open training group, and the prices of a group per route.

    Not thread-safe by itself: the loop calls it under its lock. Runtime only: the open groups
    are not part of a saved state (a load clears them, :meth:`clear_open`); the priors stay.

    Example:
        >>> costs = GroupCosts()
        >>> costs.set_prior({"anchor": 16.0, "world_model": 16.0})
        >>> costs.open(0, "anchor"); costs.open(1, "world_model")
        >>> costs.credit(1, 4)
        True
        >>> costs.price(None, size=None).in_flight  # 16 + (16 - 4)
        28.0
        >>> costs.close(1)
        ('world_model', 4)
    """

    def __init__(self) -> None:
        # group id -> [route, executions credited, its prior cost (None: none given), the caller's
        # estimate of the executions still to come (0.0: none given)]
        self._open: dict[int, list] = {}
        # the latest prior cost per route given by a caller (executions of one group)
        self._prior: dict[str, float] = {}

    @property
    def n_open(self) -> int:
        """Training groups open (int)."""
        return len(self._open)

    def set_prior(self, prior_cost: Mapping[str, float]) -> None:
        """Keep ``{route: executions one group of that route makes}`` as the prior of the routes
        it names (used until a group of the route has closed).

        Raises:
            ValueError: a key that is not ``"anchor"``/``"world_model"``, or a value that is not a
                number >= 0 (nothing is kept then).
        """
        for k, v in prior_cost.items():
            if k not in (ANCHOR, WORLD_MODEL) or isinstance(v, bool) or not (isinstance(v, numbers.Real) and v >= 0):
                raise ValueError(f"prior_cost maps 'anchor'/'world_model' to executions >= 0, got {k!r}: {v!r}")
        self._prior.update({k: float(v) for k, v in prior_cost.items()})

    def open(self, group_id: int, route: str) -> None:
        """A training group of ``route`` opened (with the route's prior cost as known now)."""
        self._open[int(group_id)] = [route, 0, self._prior.get(route), 0.0]

    def expect(self, group_id: int | None, executions_left: float) -> bool:
        """The caller's estimate of the executions the open training group ``group_id`` will still
        make (it knows its rollouts' progress, e.g. a vector env): the group counts in flight at
        least at this (replacing an earlier estimate). Returns whether the group is open."""
        entry = self._open.get(group_id) if group_id is not None else None
        if entry is None:
            return False
        entry[3] = max(0.0, float(executions_left))
        return True

    def credit(self, group_id: int | None, count: int) -> bool:
        """Credit ``count`` executions to the open training group ``group_id``.

        Returns:
            Whether the group is open (an evaluation group, ``None``, or a closed one: ``False``,
            nothing credited).
        """
        entry = self._open.get(group_id) if group_id is not None else None
        if entry is None:
            return False
        entry[1] += int(count)
        return True

    def only_open(self) -> int | None:
        """The id of the only open training group (``None``: none, or several)."""
        return next(iter(self._open)) if len(self._open) == 1 else None

    def close(self, group_id: int | None) -> tuple[str, int] | None:
        """Forget a closed group; returns ``(route, executions credited)`` (``None``: not an open
        training group)."""
        entry = self._open.pop(group_id, None) if group_id is not None else None
        return None if entry is None else (entry[0], int(entry[1]))

    def clear_open(self) -> None:
        """Forget the open groups (a load: their tickets can no longer close)."""
        self._open.clear()

    def price(self, adaptive: AdaptiveAnchorFraction | None, size: int | None) -> BudgetCosts:
        """The prices of a group per route and the executions in flight.

        A route's price is what its closed training groups executed on average
        (``adaptive.executions_per_group``); before any closed, what the other route's closed groups
        executed scaled by the ratio of the routes' priors (reward mode: the same price, as both
        routes execute every episode) when both priors are given, else the latest prior (0 without
        one). An
        anchor group costs at least its size (one execution per rollout, ``size``: the last anchor
        group's, ``None`` if none) and at least a world-model group. An open group counts at its
        route's price, or while that is unknown at its own prior, less what it recorded — or at the caller's
        estimate of what it will still execute (:meth:`expect`) when that is more (a group whose
        rollouts run longer than the price says).

        Args:
            adaptive: the loop's adaptive fraction (``None``: nothing measured).
            size: rollouts of the last anchor group (``None``: none yet).
        """
        def measured(route: str) -> float | None:
            # the closed groups' mean, with the route's prior counted as one more group: the first
            # groups to close are few (and, with many lanes, the short ones), so a price from them
            # alone lets a burst of lanes open at once and overrun the budget
            e, n = (0, 0) if adaptive is None else adaptive.group_executions.get(route, (0, 0))
            if not n:
                return None
            prior = self._prior.get(route)
            return e / n if prior is None else (e + prior) / (n + 1)

        def transfer(value: float | None, source: str, target: str) -> float | None:
            # the other route's measured price, scaled by the priors' ratio (reward mode: 1, both
            # routes execute every episode; outcome mode: 0 for a world-model group)
            ps, pt = self._prior.get(source), self._prior.get(target)
            return None if value is None or ps is None or pt is None or ps <= 0 else value * pt / ps

        wm_measured = measured(WORLD_MODEL)
        anchor_measured = measured(ANCHOR)
        wm_known = wm_measured if wm_measured is not None else transfer(anchor_measured, ANCHOR, WORLD_MODEL)
        wm_cost = (wm_known if wm_known is not None else self._prior.get(WORLD_MODEL)) or 0.0
        if anchor_measured is None:
            anchor_measured = transfer(wm_measured, WORLD_MODEL, ANCHOR)
        wm_measured = wm_known
        base = anchor_measured if anchor_measured is not None else self._prior.get(ANCHOR)
        # an anchor group executes at least what a world-model group does (reward mode: the same)
        anchor = None if base is None and size is None and not wm_cost else max(base or 0.0, size or 0.0, wm_cost)
        known = {ANCHOR: None if anchor_measured is None and size is None and wm_measured is None else anchor,
                 WORLD_MODEL: wm_measured}
        in_flight = 0.0
        for route, n, prior, left in self._open.values():
            cost = known[route] if known[route] is not None else prior
            in_flight += max(0.0, (cost or 0.0) - n, left)
        return BudgetCosts(anchor, wm_cost, in_flight)

    @staticmethod
    def fits(costs: BudgetCosts, route: str, used: int, budget: int) -> bool:
        """Whether one more group of ``route`` fits: the executions made (``used``), those in flight
        and the group's own price stay within ``budget``. A group whose price is 0 (an outcome-mode
        world-model group executes nothing; or nothing is known yet) always fits."""
        cost = costs.of(route)
        return cost <= 0 or used + costs.in_flight + cost <= budget + 1e-9

    @staticmethod
    def anchor_slots(costs: BudgetCosts, used: int, budget: int, groups: int) -> int | None:
        """The anchor groups a step of ``groups`` groups can pay, spending what fits: the step's
        world-model groups are charged only as many as what is left pays (not the whole step up
        front), and each anchor group costs its price over a world-model group's.

        Returns:
            An int >= 0, or ``None`` (no cap: an anchor group costs no more than a world-model
            group, as in reward mode, or its price is unknown).
        """
        if costs.anchor is None:
            return None
        extra = costs.anchor - costs.world_model
        if extra <= 0:
            return None
        left = budget - used - costs.in_flight
        paid = groups if costs.world_model <= 0 else min(groups, max(0, int(left // costs.world_model)))
        return max(0, int((left - paid * costs.world_model) // extra))
