"""``CorrectionLoop``: the method's group step, once, in the order it runs.

One group of G rollouts (one task) goes through these steps (``docs/method.md``):

1. **route** — :meth:`CorrectionLoop.plan_step` draws the routes of a training step, and
   :meth:`CorrectionLoop.open_group` gives the next group its route, its id and the ρ known at
   that moment (a :class:`GroupTicket`);
2. **world-model prediction** — :meth:`CorrectionLoop.predict` (one checked, bounded, timed
   batched call, :func:`~wmrl_envs.core.world_model_call.predict_checked`), or
   :meth:`CorrectionLoop.predict_group` for a whole group. While training the world model scores
   every group (anchor pairs), so the group APIs call it just *before*
   :meth:`~CorrectionLoop.open_group`: a world model that breaks the protocol then stops the
   run without having consumed a route or a group id;
3. **real execution on anchors** — the caller's (an env ``step``, a sandbox, a Ray pool),
   timed into the ledger (wall-clock and CPU-seconds) with :meth:`CorrectionLoop.record_execution`;
4. **close** — :meth:`CorrectionLoop.close_group`: calibrate ``f̂(r̂)``, feed an anchor group's
   pairs to the debiaser and its disagreement to ρ, account the ungraded rollouts (ledger,
   warning, stop rule), and return the :class:`~wmrl_envs.core.GroupCorrection` the agent
   trains on (rewards, the ρ of its ticket, per-rollout ungraded causes).

A group scored at once runs the four steps in ONE call, :meth:`CorrectionLoop.score_group`
(world model first, then the route; the caller's execution as a callable; ``core/group.py``), or
split for executions that finish later (:meth:`~CorrectionLoop.begin_group` /
:meth:`~CorrectionLoop.finish_group`, the Ray scorer). The wrappers' group APIs, the Ray scorer
and the LIBERO protocol call it; the per-episode and vector wrappers, which see a group a step at
a time, and verl's hub, whose rollouts arrive one by one, call the steps themselves. The
statistics a trainer or a benchmark logs come from :meth:`CorrectionLoop.stats`.

The wrappers (per-episode, vector, the Ray scorer, the TRL/SB3 adapters) are plumbing around
these calls. The loop is built for what comes next: :meth:`~CorrectionLoop.set_anchor_fraction`
changes the schedule from the next drawn step on; tickets may be closed out of order (anchor
results that arrive after their step, counted in their own step by the stop rule) and a group
trains with the ρ of its ticket, the one at routing; a ticket opened before a
:meth:`~CorrectionLoop.load_state_dict` is refused (tickets carry the loop's epoch, which every
load draws again); several wrappers or workers may share one loop (``AnchoredWorldModelWrapper(...,
loop=shared)``): every mutation holds the loop's lock, so counts and pairs add up.
"""

from __future__ import annotations

import dataclasses
import numbers
import secrets
import threading
import time
import warnings
from collections import deque
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from wmrl_envs.world_models.base import WorldModel, WorldModelPrediction
from wmrl_envs.utils import user_stacklevel

from .adaptive import AdaptiveAnchorFraction
from .advisor import AnchorAdvice, AnchorAdvisor, CostRates
from .budget import BudgetCosts, GroupCosts
from .config import CorrectionConfig
from .corrector import GroupCorrection, WMRLCorrector
from .group import GroupScoring, GroupTicket, failure_messages, rollout_cause, score_failure
from .learning import LearningFromAnchors
from .ledger import EXECUTION, WORLD_MODEL_SOURCE, CostLedger
from .loop_state import LoopState
from .routing import ANCHOR, WORLD_MODEL, AnchorRouter, Route
from .ungraded import UngradedMonitor
from .world_model_call import predict_checked

__all__ = [
    "CorrectionLoop",
    "GroupTicket",
    "rollout_cause",
    "score_failure",
    "failure_messages",
    "default_groups_per_step",
]  # GroupTicket and the rollout helpers live in .group (imported here for the callers that name this module)


NO_ANCHORS_WARNING = (
    "anchor_fraction=0: every training group goes to the world model and none is executed for real, so there "
    "are no anchor groups: no anchor pairs, no debiasing (the map stays the identity), rho stays 1, no r and "
    "no advice; the policy trains on the world model's raw scores, uncorrected. Set anchor_fraction > 0 (e.g. "
    "0.1) for WMRL's corrections; keep 0 only for a world-model-only baseline")
"""The warning of a loop built with ``anchor_fraction=0`` (a fixed fraction) and a world model."""


def default_groups_per_step(anchor_fraction: float) -> int:
    """``ceil(1 / anchor_fraction)`` (1 for ``anchor_fraction = 0``): one anchor group per block at f."""
    return 1 if anchor_fraction <= 0 else max(1, int(np.ceil(1.0 / anchor_fraction - 1e-9)))


def _check_groups(n: object, name: str) -> None:
    if not (isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 1):
        raise ValueError(f"{name} must be an integer >= 1, got {n!r}")


class CorrectionLoop(GroupScoring, LearningFromAnchors, LoopState):
    """Router, corrector, ledger and ungraded monitor held once, with the group counters.

    Args:
        config: the correction settings (default :class:`~wmrl_envs.core.CorrectionConfig()`);
            ignored for the objects given explicitly below. Pass a
            :class:`~wmrl_envs.core.CorrectionConfig`, not a dict.
        world_model: the world model (``predict(contexts, actions)``), or ``None`` (only anchor
            groups are possible then). Frozen, or one that learns from the anchor groups (it has
            ``observe``, e.g. :class:`~wmrl_envs.world_models.learned.LearnedWorldModel`): see
            :meth:`close_group`'s ``contexts``.
        seed: seed of the router (int).
        groups_per_step: groups per training step for the schedule and the stop rule (default
            ``ceil(1 / anchor_fraction)``).
        eval_route: route of every group while ``training`` is ``False`` (default ``"anchor"``).
        world_model_timeout_s: seconds one batched ``predict`` may take (``None``: no limit).
        max_ungraded_share: the stop rule's share (``None``: never stop).
        router, corrector, ledger: existing objects to use instead of building them from
            ``config`` (e.g. a corrector shared by several loops).

    Attributes:
        config: the settings the loop's objects use *now* (read-only): read back from the router,
            the corrector, its debiaser and denoiser on each access, so it follows
            :meth:`set_anchor_fraction`, :meth:`load_state_dict` and objects given explicitly
            (``router=``, ``corrector=``) instead of the construction-time ``config``.
        world_model, world_model_timeout_s, router, corrector, ledger, eval_route,
        groups_per_step: as given (or built).
        ungraded: the :class:`~wmrl_envs.core.UngradedMonitor` (writes into ``ledger``).
        n_groups_started: groups routed through :meth:`open_group` so far (the next group id).
        n_groups_closed: groups closed by :meth:`close_group` so far.
        n_groups_abandoned: ``{cause: groups}`` dropped by :meth:`abandon_group` so far (runtime
            only: not part of a saved state).
        n_episodes: rollouts counted with :meth:`count_episodes`.

    Raises:
        TypeError: ``config`` is not a :class:`~wmrl_envs.core.CorrectionConfig` (e.g. a dict).
        ValueError: invalid ``groups_per_step`` (an integer >= 1), ``eval_route``,
            ``world_model_timeout_s`` or ``max_ungraded_share``; a world model without ``predict``.
    """

    STATE_VERSION = 1
    """Version of :meth:`state_dict`'s layout (``"version"`` key)."""

    def __init__(
        self,
        config: CorrectionConfig | None = None,
        *,
        world_model: WorldModel | None = None,
        seed: int = 0,
        groups_per_step: int | None = None,
        eval_route: Route = ANCHOR,
        world_model_timeout_s: float | None = None,
        max_ungraded_share: float | None = 0.5,
        router: AnchorRouter | None = None,
        corrector: WMRLCorrector | None = None,
        ledger: CostLedger | None = None,
    ) -> None:
        if config is not None and not isinstance(config, CorrectionConfig):
            raise TypeError(
                f"config must be a CorrectionConfig (e.g. CorrectionConfig(**settings)), got {type(config).__name__}"
            )
        self._config = config if config is not None else CorrectionConfig()
        if eval_route not in (ANCHOR, WORLD_MODEL):
            raise ValueError(f"eval_route must be 'anchor' or 'world_model', got {eval_route!r}")
        if world_model is not None and not callable(getattr(world_model, "predict", None)):
            raise ValueError(
                f"world_model must have a predict(contexts, actions) method, got {type(world_model).__name__}"
            )
        if world_model_timeout_s is not None and not (
            isinstance(world_model_timeout_s, (int, float)) and world_model_timeout_s > 0
        ):
            raise ValueError(
                f"world_model_timeout_s must be a number of seconds > 0 or None (no limit), got {world_model_timeout_s!r}"
            )
        self.router = router if router is not None else self._config.build_router(seed)
        if groups_per_step is None:
            groups_per_step = default_groups_per_step(self.router.anchor_fraction)
        _check_groups(groups_per_step, "groups_per_step")
        self.world_model = world_model
        self.world_model_timeout_s = None if world_model_timeout_s is None else float(world_model_timeout_s)
        self.corrector = corrector if corrector is not None else self._config.build_corrector()
        self.ledger = ledger if ledger is not None else self._config.build_ledger()
        if callable(getattr(world_model, "bind_execution_cost", None)) and getattr(world_model, "execution_cost", 1) is None:
            world_model.bind_execution_cost(self.ledger)  # a learned model's refit budget: this run's executions
        self.eval_route: Route = eval_route
        self.groups_per_step = int(groups_per_step)
        self.ungraded = UngradedMonitor(max_ungraded_share, self.groups_per_step, self.ledger)
        # every training anchor group's (raw world-model, real) scores, for the anchor-fraction advice
        self.advisor = AnchorAdvisor()
        # the group id of each advisor group (a learned world model rescores them by id)
        self._advisor_ids: deque[int | None] = deque(maxlen=self.advisor.max_groups)
        self._learn_warned = False
        self._wm_state_warned = False  # saving without the world model's state was warned about
        # anchor_fraction="auto": the fraction follows the advisor's f* (None: a fixed fraction)
        self.adaptive: AdaptiveAnchorFraction | None = (
            self._config.build_adaptive() if self._config.adaptive and router is None else None)
        if self.adaptive is not None:
            warnings.warn(
                "anchor_fraction='auto' is experimental: its rule changed in issue 25 (a dead band on r's confidence "
                "bounds, which stopped it chattering, and a change point that forgets the anchor groups from before a "
                "world model breaks, both simulated in benchmarks/adaptive_fraction.py; it reacts to a break only "
                "after a few anchor groups: docs/method.md, 'Adaptive anchor fraction'); the known-truth comparison "
                "with fixed fractions in docs/advisor_check.md was made with the rule before, and it has not been run "
                "on a live benchmark",
                UserWarning, stacklevel=user_stacklevel())
        if self.adaptive is None and self.router.anchor_fraction == 0 and world_model is not None:
            warnings.warn(NO_ANCHORS_WARNING, UserWarning, stacklevel=user_stacklevel())
        self._lock = threading.RLock()
        self._route_queue: list[Route] = []
        self.n_groups_started = 0
        self.n_groups_closed = 0
        self.n_episodes = 0
        self.n_groups_abandoned: dict[str, int] = {}  # {cause: groups dropped by abandon_group}
        # ids of the groups opened and not yet closed (runtime only: not saved, cleared by a load)
        self._open_ids: set[int] = set()
        # the open training groups' executions and the prices of a group (open groups: runtime only,
        # like _open_ids; the priors given to open_group stay)
        self._costs = GroupCosts()
        self._unticketed_warned = False
        # the tickets' epoch: drawn again by every load, so a ticket from before it is refused
        # even when the loaded counter gives its group id again (earlier epochs: for the error)
        self._epoch = secrets.token_hex(8)
        self._past_epochs: set[str] = set()

    @property
    def config(self) -> CorrectionConfig:
        """The :class:`~wmrl_envs.core.CorrectionConfig` the loop's objects use now (read back
        from the router, the corrector, its debiaser and denoiser; see the class docstring)."""
        with self._lock:
            c, deb, den = self.corrector, self.corrector.debiaser, self.corrector.denoiser
            a = self.adaptive
            auto = {} if a is None else dict(
                auto_start_fraction=a.start, f_min=a.f_min, f_max=a.f_max, cost_ratio=a.cost_ratio,
                noise_batch_ratio=a.noise_batch_ratio,
                auto_window=a.window, auto_min_groups=a.min_groups, auto_hysteresis=a.hysteresis,
                execution_budget=a.execution_budget, on_budget_spent=a.on_budget_spent)
            if a is None:  # a fixed fraction: the auto settings are not in use
                auto = {f: CorrectionConfig.__dataclass_fields__[f].default for f in (
                    "auto_start_fraction", "f_min", "f_max", "cost_ratio", "noise_batch_ratio", "auto_window", "auto_min_groups",
                    "auto_hysteresis", "execution_budget", "on_budget_spent")}
            return dataclasses.replace(
                self._config, **auto, anchor_fraction="auto" if a is not None else self.router.anchor_fraction,
                min_anchor_groups=self.router.min_anchor_groups, anchor_window=self.router.anchor_window,
                debias=c.debias, denoise=c.denoise,
                buffer_size=deb.buffer_size, min_pairs=deb.min_pairs, refit_every=deb.refit_every,
                warmup_groups=den.warmup_groups, half_life=den.half_life, rho_target=den.rho_target,
                rho_max=den.rho_max, rho_mode=den.mode, disagreement_floor=den.disagreement_floor,
                cost_basis=self.ledger.cost_basis,
                cost_prices=None if self.ledger.prices is None else dict(self.ledger.prices),
                cost_unit=self.ledger.cost_unit if self.ledger.cost_basis == "per_call" else None,
            )

    # ------------------------------------------------------------------ flags
    @property
    def training(self) -> bool:
        """``False`` = evaluation: corrections frozen, groups routed to ``eval_route``."""
        return self.corrector.training

    @training.setter
    def training(self, value: bool) -> None:
        with self._lock:
            self.corrector.training = value

    @property
    def rho(self) -> float:
        """The anchor weight ρ now (float; 1.0 when denoising is off)."""
        return self.corrector.rho

    @property
    def route_queue(self) -> list[Route]:
        """Routes drawn and not yet used, in order (a copy)."""
        return list(self._route_queue)

    # ------------------------------------------------------------------ 1. route
    def set_anchor_fraction(self, fraction: float) -> None:
        """Change the anchor fraction; it takes effect at the next step the router draws (routes
        already planned keep theirs; ``groups_per_step`` is not changed).

        Raises:
            ValueError: ``fraction`` is not a real number (bools are rejected) in [0, 1].
        """
        if not (isinstance(fraction, numbers.Real) and not isinstance(fraction, bool) and 0.0 <= fraction <= 1.0):
            raise ValueError(f"anchor_fraction must be a number in [0, 1], got {fraction!r}")
        if self.world_model is None and fraction != 1.0:
            raise ValueError("without a world model every group is an anchor: anchor_fraction must stay 1.0")
        if self.adaptive is not None:
            raise ValueError("the anchor fraction is adaptive (anchor_fraction='auto'): it is set by the advisor each "
                             "step; build the loop with a fixed anchor_fraction to set it by hand")
        with self._lock:
            self.router.anchor_fraction = float(fraction)

    def plan_step(self, groups_in_step: int | None = None, free_slots: int | None = None) -> list[Route]:
        """Draw the routes of the next training step now (replacing any unused ones); the
        groups opened from now on belong to this step for the stop rule
        (:meth:`UngradedMonitor.plan <wmrl_envs.core.UngradedMonitor.plan>` with the step's
        groups and anchor groups).

        Args:
            groups_in_step: groups in the coming step (default ``groups_per_step``).
            free_slots: free real-execution slots, in groups (caps the anchor count).

        Returns:
            The planned routes; the next ``groups_in_step`` :meth:`open_group` calls take them in order.

        Raises:
            ValueError: ``groups_in_step`` is not an integer >= 1 (``None`` means the default).
        """
        if groups_in_step is None:
            groups_in_step = self.groups_per_step
        _check_groups(groups_in_step, "groups_in_step")
        with self._lock:
            routes = self._draw_step(int(groups_in_step), free_slots)
            self._route_queue = list(routes)
            self.ungraded.plan(len(routes), routes.count(ANCHOR))  # the stop rule's step
            return routes

    def next_route(self) -> Route:
        """Pop the next planned route (drawing a block of ``groups_per_step`` when none is left;
        a drawn block is a step for the stop rule, as with :meth:`plan_step`)."""
        with self._lock:
            self._peek_route()
            return self._route_queue.pop(0)

    def _peek_route(self, check_budget: bool = True) -> Route:
        """The next planned route, left in the queue (a block is drawn when none is left)."""
        if not self._route_queue:
            self._route_queue = self._draw_step(self.groups_per_step, None, check_budget)
            self.ungraded.plan(len(self._route_queue), self._route_queue.count(ANCHOR))
        return self._route_queue[0]

    def _draw_step(self, groups_in_step: int, free_slots: int | None, check_budget: bool = True) -> list[Route]:
        """Draw one training step's routes; with an adaptive fraction, adapt it first (and cap the
        anchors by what is left of the execution budget; ``check_budget=False``: the caller keeps
        the budget, nothing is refused here)."""
        if self.adaptive is not None and self.training:
            a = self.adaptive
            costs = self._budget_costs()
            # the step's world-model groups are not charged up front (groups_in_step not given): each
            # group is checked when it opens (_check_budget_at_open), so a step spends what fits
            fraction, budget_slots = a.step(self.router.n_steps, self.advisor, self.ledger,
                                            self._advice_calibration(), anchor_cost=costs.anchor,
                                            world_model_cost=costs.world_model, in_flight=costs.in_flight,
                                            enforce_budget=check_budget)
            self.router.anchor_fraction = fraction
            self.router.keep_floor = True  # an adaptive fraction never removes the floor (even at 0)
            if a.execution_budget is not None and not a.budget_spent:
                fit = GroupCosts.anchor_slots(costs, self.ledger.count(EXECUTION), a.execution_budget, groups_in_step)
                if fit is not None:
                    budget_slots = fit if budget_slots is None else min(budget_slots, fit)
            if budget_slots is not None:  # the budget never removes the floor
                budget_slots = max(budget_slots, self.router.min_anchor_groups)
                free_slots = budget_slots if free_slots is None else min(free_slots, budget_slots)
        return list(self.router.route_step(groups_in_step, free_slots=free_slots))

    def _budget_costs(self) -> BudgetCosts:
        """The prices of a training group per route and the executions in flight, in real executions
        (:meth:`GroupCosts.price <wmrl_envs.core.budget.GroupCosts.price>`: measured per closed group
        and route; before a route's first group closed, the latest ``prior_cost`` given to
        :meth:`open_group`)."""
        size = len(self.advisor.groups()[1][-1]) if len(self.advisor) else None
        return self._costs.price(self.adaptive, size)

    def _check_budget_at_open(self, route: Route) -> None:
        """``on_budget_spent="stop"``: refuse a training group that does not fit in what is left of
        the budget once the executions made and in flight are paid (see :meth:`open_group`): wait
        while training groups are in flight, stop when none is."""
        from .adaptive import ExecutionBudgetSpent, ExecutionBudgetWait

        a = self.adaptive
        if a is None or a.execution_budget is None or a.on_budget_spent != "stop":
            return
        costs = self._budget_costs()
        used = self.ledger.count(EXECUTION)
        if not GroupCosts.fits(costs, route, used, a.execution_budget):
            if self._costs.n_open > 0:  # priced at an estimate: they may close cheaper, and a group fit
                raise ExecutionBudgetWait(
                    f"a {route} group (costs {costs.of(route):.0f}) does not fit in the execution budget now "
                    f"({used} of {a.execution_budget} real executions made, {costs.in_flight:.0f} more in flight "
                    f"in {self._costs.n_open} open group(s)); open it once groups in flight have closed")
            a.budget_spent = True
            raise ExecutionBudgetSpent(
                f"the execution budget is spent ({used} of {a.execution_budget} real executions, "
                f"{costs.in_flight:.0f} more in flight; a {route} group costs {costs.of(route):.0f}); training stops "
                "here (on_budget_spent='stop'; 'floor' would go on with the anchor floor only)")

    def check_executions_fit(self, count: int) -> None:
        """For a caller whose real executions do not follow the groups it opens (a plain vector env
        steps every sub-env, whatever its lane does; it opens groups with ``check_budget=False``):
        ``anchor_fraction="auto"`` with ``on_budget_spent="stop"`` and an ``execution_budget``, and
        ``count`` more executions would go past it: the budget is spent (nothing else happens).

        Raises:
            ExecutionBudgetSpent: as said (the budget is declared spent:
                ``stats()["adaptive"]["budget_spent"]``).
        """
        from .adaptive import ExecutionBudgetSpent

        with self._lock:
            a = self.adaptive
            if a is None or a.execution_budget is None or a.on_budget_spent != "stop" or not self.training:
                return
            used = self.ledger.count(EXECUTION)
            if used + int(count) > a.execution_budget:
                a.budget_spent = True
                raise ExecutionBudgetSpent(
                    f"the execution budget is spent: {used} of {a.execution_budget} real executions made and the next "
                    f"{int(count)} would go past it; training stops here (on_budget_spent='stop')")

    def requeue_routes(self, routes: Sequence[Route]) -> None:
        """Give back routes of groups that were opened but never used (they lead the queue again;
        the stop rule's current step forgets those groups)."""
        with self._lock:
            self._route_queue = list(routes) + self._route_queue
            self.ungraded.abandon_groups(len(routes), list(routes).count(ANCHOR))

    def abandon_group(self, ticket: GroupTicket, episodes: int = 0, *, cause: str = "reset",
                      requeue: bool = False) -> bool:
        """Drop an open group that will never close (e.g. a reset with other arguments in its
        middle, a vector env's lane reset mid-group, the env closed): it leaves no open state
        (no group in flight for an execution budget, none in ``stats()["groups_open"]``) and
        nothing is credited (no correction, anchor pairs, advisor or learning data, no stop-rule
        record; the stop rule's step it was opened in forgets it); its ``episodes`` counted
        rollouts leave :attr:`n_episodes`. What it spent (executions, world-model calls) stays in
        the ledger. It is counted by ``cause`` in :attr:`n_groups_abandoned`
        (``stats()["groups_abandoned"]``). Its id is not given again.

        Args:
            ticket: the group's ticket.
            episodes: its rollouts counted with :meth:`count_episodes` (they are taken back).
            cause: why it was dropped (a short name, e.g. ``"reset"``, ``"closed"``).
            requeue: its route was never used (no episode of it ended): the route goes back to the
                front of the route queue (as :meth:`requeue_routes`).

        Returns:
            ``True`` when the group was open and is dropped now; ``False`` for an evaluation
            ticket, one closed or dropped already, or one of another epoch (nothing changes).
        """
        with self._lock:
            gid = ticket.group_id
            if gid is None or gid not in self._open_ids or ticket.epoch != self._epoch:
                return False
            self._open_ids.discard(gid)
            self._costs.close(gid)  # out of the budget's open groups; a partial group prices no route
            if ticket.training and ticket.step is not None:
                self.ungraded.abandon_groups(1, int(ticket.route == ANCHOR), step=ticket.step)
            if requeue and ticket.training:
                self._route_queue.insert(0, ticket.route)
            self.n_episodes -= int(episodes)
            self.n_groups_abandoned[str(cause)] = self.n_groups_abandoned.get(str(cause), 0) + 1
            return True

    def open_group(self, route: Route | None = None, *, prior_cost: Mapping[str, float] | None = None,
                   check_budget: bool = True) -> GroupTicket:
        """Route the next group: its route (``route`` forces one; default: the schedule while
        training, ``eval_route`` while evaluating), a new group id and ρ as of now.

        Args:
            route: force ``"anchor"``/``"world_model"`` (``None``: as above).
            prior_cost: ``{route: real executions one group of that route makes}`` as the caller
                knows them before any group has closed (an execution budget counts the groups
                open at this cost until a closed group of the route measures it; e.g. a vector
                env's lanes in reward mode: G × the episode's step limit for both routes). It is
                kept as the loop's prior for the routes it names. ``None``: the loop's prior so far.
            check_budget: ``False``: the caller keeps the execution budget itself, the group is
                not refused here (a plain vector env steps every sub-env whether its lane has a
                group or not, so it checks each vector step instead:
                :meth:`check_executions_fit`).

        Raises:
            ValueError: unknown ``route``, a world-model route without a world model, or a
                ``prior_cost`` that maps something else than a route to a number >= 0.
            ExecutionBudgetSpent: ``anchor_fraction="auto"`` with ``on_budget_spent="stop"``, a
                training group whose price (what a group of its route executes, as measured so far
                or the prior) does not fit in the budget once the executions made and in flight
                are paid (:meth:`GroupCosts.fits <wmrl_envs.core.budget.GroupCosts.fits>`) while
                no training group is in flight: a run stops at the last group that fits, within
                its budget wherever the price is known, even where a step's executions were not
                known when it was planned (reward mode's first step).
            ExecutionBudgetWait: (a subclass of ``ExecutionBudgetSpent``) the same while training
                groups are in flight: their price is an estimate, so the budget is not declared
                spent and the group's route stays queued; a caller that can wait opens the group
                after some have closed (the vector wrapper's lanes do), one that cannot stops.
        """
        if route is not None and route not in (ANCHOR, WORLD_MODEL):
            raise ValueError(f"route must be 'anchor' or 'world_model', got {route!r}")
        with self._lock:
            training = self.training
            if prior_cost is not None:
                self._costs.set_prior(prior_cost)
            planned = route is None and training
            if route is None:
                route = self._peek_route(check_budget) if training else self.eval_route
            self._check_route(route)
            if training and self.adaptive is not None and check_budget:
                self._check_budget_at_open(route)  # a group refused leaves its route queued
            if planned:
                self._route_queue.pop(0)
            step = self.ungraded.open_group(route == ANCHOR) if training else None
            ticket = GroupTicket(self.n_groups_started, route, self.corrector.rho, training, step, self._epoch)
            self._open_ids.add(ticket.group_id)
            if training:
                self._costs.open(ticket.group_id, route)
            self.n_groups_started += 1
            return ticket

    def eval_ticket(self) -> GroupTicket:
        """An unnumbered evaluation group on ``eval_route`` (no id, no schedule, nothing updated;
        having no id, it is not tracked as open and may be closed more than once)."""
        self._check_route(self.eval_route)
        return GroupTicket(None, self.eval_route, self.corrector.rho, False, epoch=self._epoch)

    def _check_route(self, route: Route) -> None:
        if self.world_model is None and route == WORLD_MODEL:
            raise ValueError("this wrapper has no world model; only route='anchor' is possible")

    # ------------------------------------------------------------------ 2. world model
    def calls_world_model(self, route: Route | None, training: bool | None = None, on_eval_anchors: bool = False) -> bool:
        """Whether a group's rollouts are scored by the world model: always while training (anchor
        pairs; ``route`` may still be ``None``), on world-model routes, and on evaluation anchors
        if ``on_eval_anchors``. ``training`` defaults to the loop's flag now (pass a ticket's)."""
        if training is None:
            training = self.training
        return self.world_model is not None and (training or route == WORLD_MODEL or on_eval_anchors)

    def predict(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[WorldModelPrediction]:
        """One batched world-model call (B contexts, B actions -> B predictions), checked, bounded
        by ``world_model_timeout_s`` and timed into ``ledger``; failures come back ungraded.

        Raises:
            RuntimeError: no world model, or ``predict`` broke the protocol.
        """
        if self.world_model is None:
            raise RuntimeError("this loop has no world model to predict with")
        # the call runs outside the loop's lock (other groups go on meanwhile); its seconds are
        # added under it
        spent = CostLedger()
        try:
            return predict_checked(self.world_model, contexts, actions, spent, timeout_s=self.world_model_timeout_s)
        finally:
            with self._lock:
                self.ledger.merge(spent)

    def predict_group(
        self, route: Route | None, contexts: Sequence[Any], actions: Sequence[Any], *, on_eval_anchors: bool = False
    ) -> tuple[list[WorldModelPrediction], float]:
        """The world-model step of a group about to be opened with ``route`` (``None``: the
        schedule's): :meth:`predict` when :meth:`calls_world_model` says so, else nothing.

        Returns:
            ``(predictions, seconds)``: B predictions (empty when the world model is not called)
            and the call's wall-clock seconds (float).
        """
        if not self.calls_world_model(route if self.training else route or self.eval_route,
                                      on_eval_anchors=on_eval_anchors):
            return [], 0.0
        t0 = time.perf_counter()
        preds = self.predict(contexts, actions)
        return preds, time.perf_counter() - t0

    # ------------------------------------------------------------------ 3. execution (the caller's)
    def record_execution(self, seconds: float, count: int = 1, *, cpu_seconds: float | None = None,
                         ticket: GroupTicket | None = None, cost: float | None = None, in_group: bool = True) -> None:
        """Account ``count`` real executions that took ``seconds`` of wall-clock and
        ``cpu_seconds`` CPU-seconds in all.

        ``cpu_seconds`` is what the env reported in ``info["execution_cpu_s"]`` (measured or
        declared), else what the caller measured around the step
        (:func:`~wmrl_envs.core.ledger.execution_cpu_seconds`); ``None``: not measured (the
        ledger counts such executions in ``cpu_unmeasured``). ``cost`` is the price the executions
        reported together (``info["execution_cost"]``,
        :func:`~wmrl_envs.core.ledger.reported_execution_cost`; ``None``: none), which
        ``cost_basis="per_call"`` charges instead of ``cost_prices["execution"]``.

        The executions are also credited to their group, ``ticket``'s (what a group of each route
        costs in executions, for an ``execution_budget``; the wrappers, the group calls and the
        adapters pass it). Without a ticket they go to the only training group open (one
        group at a time); with several open they are in the ledger only, and with an execution
        budget a warning (once) asks for the ticket: the budget would price groups too low.
        ``in_group=False``: executions that belong to no group (a plain vector env's sub-env
        waiting for the budget still steps): in the ledger only, credited to no group.

        Raises:
            ValueError: negative or non-finite seconds or cost, a bad count.
        """
        with self._lock:
            self.ledger.add(EXECUTION, seconds, count, cpu_seconds=cpu_seconds, cost=cost)
            if in_group:
                self.attribute_executions(ticket, count)

    def attribute_executions(self, ticket: GroupTicket | None, count: int) -> None:
        """Credit ``count`` executions already in the ledger (e.g. added by a Ray pool that shares
        it) to ``ticket``'s group (``None``: the only training group open, if exactly one is; an
        evaluation ticket, a closed group or a ticket from before a load: nothing)."""
        with self._lock:
            if ticket is not None:
                if ticket.epoch == self._epoch:
                    self._costs.credit(ticket.group_id, count)
                return
            only = self._costs.only_open()
            if only is not None:
                self._costs.credit(only, count)
            elif (self._costs.n_open > 1 and not self._unticketed_warned and self.adaptive is not None
                  and self.adaptive.execution_budget is not None):
                self._unticketed_warned = True
                warnings.warn(
                    f"{count} real execution(s) recorded without a ticket while {self._costs.n_open} training groups "
                    "are open: they count in the ledger but for no group, so the execution budget prices a group too "
                    "low; pass record_execution(..., ticket=the group's ticket)", UserWarning,
                    stacklevel=user_stacklevel())

    def expect_executions(self, ticket: GroupTicket, executions_left: float) -> None:
        """The caller's estimate of the real executions ``ticket``'s open training group will still
        make (a vector env knows how far each of its rollouts ran): an execution budget counts the
        group in flight at least at this, rather than at its route's price less what it executed
        (which is 0 for a group already past the mean). Nothing for an evaluation ticket, a closed
        group or a ticket from before a load.

        Raises:
            ValueError: ``executions_left`` is not a finite number >= 0.
        """
        if not (isinstance(executions_left, numbers.Real) and np.isfinite(executions_left) and executions_left >= 0):
            raise ValueError(f"executions_left must be a finite number >= 0, got {executions_left!r}")
        with self._lock:
            if ticket.epoch == self._epoch:
                self._costs.expect(ticket.group_id, float(executions_left))

    def count_episodes(self, n: int) -> None:
        """Add ``n`` rollouts to :attr:`n_episodes` (negative: episodes abandoned)."""
        with self._lock:
            self.n_episodes += int(n)

    # ------------------------------------------------------------------ 4. close
    def calibrate(self, raw: Sequence[float | None]) -> list[float | None]:
        """``f̂(r̂)`` of a batch of raw scores (``None`` stays ``None``)."""
        with self._lock:
            return self.corrector.calibrate(raw)

    def close_group(
        self,
        ticket: GroupTicket,
        raw: Sequence[float | None],
        real: Sequence[float | None] | None = None,
        *,
        wm_causes: Sequence[str | None] | None = None,
        exec_causes: Sequence[str | None] | None = None,
        world_model_called: bool = True,
        messages: Mapping[str, str] | None = None,
        rho_from: Literal["routing", "close"] = "routing",
        where: str | None = None,
        actions: Sequence[Any] | None = None,
        contexts: Sequence[Any] | None = None,
    ) -> GroupCorrection:
        """Close a group (any order): correct it, update the corrections, account its ungraded rollouts.

        The *ticket's* ``training`` flag decides, not the loop's flag now: a training ticket closed
        while the loop evaluates still feeds its anchor pairs and ρ, an evaluation ticket closed
        while the loop trains updates nothing.

        Args:
            ticket: from :meth:`open_group` (still open: each ticket closes once) or
                :meth:`eval_ticket`.
            raw: world-model raw scores r̂ of the G rollouts (``None`` = no score), shape (G,).
            real: real scores r (anchor groups), shape (G,); ignored on world-model groups.
            wm_causes: per rollout, why its world-model score is missing (``None`` where scored).
            exec_causes: per rollout, why its real execution is ungraded (anchor groups).
            world_model_called: whether the world model scored the group (a missing score on an
                anchor row is then a failed score).
            messages: ``{cause: error text}`` for the warning and the stop rule.
            rho_from: the advantage weight of an anchor group: ``"routing"`` (the ticket's ρ) or
                ``"close"`` (ρ now, before this group's own update; the Ray scorer's ordered mode,
                which reproduces a serial run).
            where: how a warning names the group (default ``"group <id>"``).
            actions: the G actions (optional): a training anchor group keeps short keys of them for
                the advisor's blind-spot check (:meth:`AnchorAdvisor.blind_spots`).
            contexts: the G contexts the actions were taken in (optional). With a world model that
                learns (one with ``observe``, e.g.
                :class:`~wmrl_envs.world_models.learned.LearnedWorldModel`), a training anchor
                group's ``(contexts, actions, real scores)`` teach it *after* the group has been
                corrected (its own predictions were made before: out of sample); after a refit the
                debiaser's pairs and the advisor's groups are rescored out of fold
                (:meth:`_learn_from_group`). Without ``actions`` the model cannot learn from the
                group (warned once); without ``contexts`` it gets ``None`` contexts.

        Returns:
            The :class:`~wmrl_envs.core.GroupCorrection` (``ungraded_causes`` filled).

        Raises:
            TypeError: ``ticket`` is not a :class:`GroupTicket`.
            ValueError: the ticket is not open (closed already, opened before a
                :meth:`load_state_dict` — its epoch is not the loop's, even if its group id was
                given again since — or not from this loop); ``rho_from`` not ``"routing"`` or
                ``"close"``; ``wm_causes`` or ``exec_causes`` not of length G; bad route or
                lengths (see :meth:`WMRLCorrector.correct_group`). Nothing is updated then.
            TooManyUngradedError: the stop rule fired (the group is corrected and counted first).
        """
        if not isinstance(ticket, GroupTicket):
            raise TypeError(f"ticket must be a GroupTicket from open_group or eval_ticket, got {type(ticket).__name__}")
        if rho_from not in ("routing", "close"):
            raise ValueError(f"rho_from must be 'routing' or 'close', got {rho_from!r}")
        g = len(raw)
        wm = list(wm_causes) if wm_causes is not None else [None] * g
        ex = list(exec_causes) if exec_causes is not None else [None] * g
        for name, seq in (("wm_causes", wm), ("exec_causes", ex)):
            if len(seq) != g:
                raise ValueError(f"{name} has {len(seq)} entries but raw has {g} (one per rollout)")
        with self._lock:
            if ticket.group_id is not None and ticket.epoch != self._epoch:
                why = ("its ticket was opened before a load_state_dict (the loaded counter may have given "
                       "its id to a new group); open the group again" if ticket.epoch in self._past_epochs
                       else "its ticket comes from another loop")
                raise ValueError(f"group {ticket.group_id} is not open: {why}")
            if ticket.group_id is not None and ticket.group_id not in self._open_ids:
                raise ValueError(
                    f"group {ticket.group_id} is not open: it was closed already, opened before a "
                    "load_state_dict, or comes from another loop (each ticket closes once)"
                )
            rho = ticket.rho if rho_from == "routing" else self.corrector.rho
            corr = self.corrector.correct_group(ticket.route, raw, real, ticket.group_id, rho=rho,
                                                training=ticket.training)
            self._open_ids.discard(ticket.group_id)
            done = self._costs.close(ticket.group_id)
            if done is not None and self.adaptive is not None:
                self.adaptive.note_group(*done)  # (route, executions credited to the group)
            if ticket.training and corr.route == ANCHOR and world_model_called:
                self.advisor.add_group(corr.raw_scores, corr.real_scores,
                                       actions if actions is not None and len(actions) == g else None)
                self._advisor_ids.append(ticket.group_id)
            if ticket.training and corr.route == ANCHOR and self.learns:
                self._learn_from_group(ticket.group_id, contexts, actions, corr.real_scores)
            corr.ungraded_causes = [rollout_cause(corr.route, r, wm[i], ex[i]) for i, r in enumerate(corr.rewards)]
            failures = [score_failure(corr.route, a, wm[i], world_model_called) for i, a in enumerate(corr.raw_scores)]
            self.n_groups_closed += 1
            if where is None:
                where = f"group {ticket.group_id}" if ticket.group_id is not None else "evaluation group"
            self.ungraded.record_group(
                corr.ungraded_causes, training=ticket.training, anchor=corr.route == ANCHOR,
                score_failures=failures, messages=messages, where=where, step=ticket.step,
            )
            return corr

    def record_ungraded(
        self,
        causes: Sequence[str | None],
        *,
        score_failures: Sequence[str | None] = (),
        messages: Mapping[str, str] | None = None,
        where: str = "evaluation episode",
    ) -> None:
        """Account evaluation rollouts that are not part of a group (counted and warned about;
        no stop rule)."""
        with self._lock:
            self.ungraded.record_group(causes, training=False, score_failures=score_failures,
                                       messages=messages, where=where)

    def stats(self) -> dict[str, Any]:
        """What a trainer or a benchmark logs, read under the loop's lock (``json.dumps`` writes
        it; a figure not defined yet is NaN or ``None``).

        Returns:
            A flat dict: the corrector's :meth:`~wmrl_envs.core.WMRLCorrector.stats` (``rho``, the
            anchor weight in use, 1.0 with ``denoise=False``; ``disagreement_ema``, ``anchor_pairs``, ``debiaser_fitted``, ``debiaser_fits``,
            ``calibration_mae_raw``/``_calibrated``, ``calibration_mse_raw``/``_calibrated``,
            ``anchor_groups`` and ``world_model_groups`` corrected, ``flat_map_groups``, ρ's warm-up:
            ``denoiser_groups_counted`` of ``denoiser_warmup_groups``, ``denoiser_groups_no_spread``
            (real scores all equal), ``denoiser_groups_uncalibrated``, ``denoiser_warmup_stalled``); the
            ungraded monitor's :meth:`~wmrl_envs.core.UngradedMonitor.stats`
            (``ungraded_rollouts``, ``rollouts``, ``ungraded_share``, ``ungraded_by_cause``);
            ``denoiser_rho``: the ρ the denoiser estimates (also with ``denoise=False``);
            the router's ``anchor_fraction`` (in force now), ``realised_anchor_fraction``,
            ``groups_routed``, ``anchor_groups_routed`` and ``steps``; the loop's
            ``groups_started``, ``groups_closed``, ``groups_open``, ``groups_abandoned`` (``{cause:
            groups}``, :meth:`abandon_group`), ``episodes``; the ledger's
            ``executions`` and ``world_model_predictions`` (counts) and its
            :meth:`~wmrl_envs.core.CostLedger.cost_summary` (``cost_unit``, ``execution_cost``,
            ``world_model_cost``, ``world_model_cost_share``, in the run's ``cost_basis``); ``r``
            and ``r_groups``: the within-group correlation of the training anchor groups so far, as
            :meth:`advise` computes it (out of sample when the run debiases; without its CI;
            ``None`` until defined), and the groups it rests on; and the adaptive fraction's
            ``adaptive`` (``anchor_fraction="auto"``: ``{"history": [[step, fraction, r], ...],
            "fraction": the fraction in force, "gamma": the cost ratio (``None`` until fixed),
            "budget_spent": bool, "group_executions": {route: [executions, groups]}}``; ``None``
            with a fixed fraction).
        """
        with self._lock:
            r, a = self.router, self.adaptive
            return {
                **self.corrector.stats(),
                **self.ungraded.stats(),
                "denoiser_rho": float(self.corrector.denoiser.rho),
                "anchor_fraction": float(r.anchor_fraction),
                "realised_anchor_fraction": float(r.realised_fraction),
                "groups_routed": int(r.n_groups_routed),
                "anchor_groups_routed": int(r.n_anchor_groups),
                "steps": int(r.n_steps),
                "groups_started": self.n_groups_started,
                "groups_closed": self.n_groups_closed,
                "groups_open": len(self._open_ids),
                "groups_abandoned": dict(self.n_groups_abandoned),
                "episodes": self.n_episodes,
                "executions": self.ledger.count(EXECUTION),
                "world_model_predictions": self.ledger.count(WORLD_MODEL_SOURCE),
                **self.ledger.cost_summary(),
                **self._r_now(),
                "adaptive": None if a is None else {
                    "history": [list(h) for h in a.history], "fraction": a.fraction, "gamma": a.gamma,
                    "budget_spent": bool(a.budget_spent),
                    "group_executions": {k: list(v) for k, v in a.group_executions.items()}},
            }

    def _r_now(self) -> dict[str, Any]:
        """``{"r": float or None (not defined yet), "r_groups": int}`` for :meth:`stats`."""
        r, n = self.advisor.within_group_r(self._advice_calibration())
        return {"r": float(r) if np.isfinite(r) else None, "r_groups": int(n)}

    def advise(self, costs: CostRates | None = None, noise_batch_ratio: float | None = None, *,
               groups_per_step: int | None = None, step_law: str = "adam",
               fitting_share: float = 0.0) -> AnchorAdvice:
        """The anchor-fraction advice for this run's training anchor groups so far
        (:class:`~wmrl_envs.core.advisor.AnchorAdvisor`; ``docs/method.md``, "Choosing the anchor
        fraction"). When the run debiases, world-model scores are calibrated out of sample
        (:func:`~wmrl_envs.core.advisor.crossfit_calibrated`), as WMRL trains on calibrated scores.

        Args:
            costs: per-rollout costs; default: this run's ledger in its ``cost_basis``
                (:meth:`CostRates.from_ledger`: CPU-seconds unless the run chose ``"wall"`` or
                ``"per_call"``).
            noise_batch_ratio: ``B_noise / B`` for the prediction; default: the adaptive
                fraction's (``None`` without one: not measured).
            groups_per_step: the run's groups per step, for pricing real execution at smaller
                batches (``None``: batches as shares of it; :meth:`AnchorAdvisor.advise`).
            step_law: the optimiser's step law, ``"adam"`` or ``"sgd"`` (:meth:`AnchorAdvisor.advise`).
            fitting_share: a world model's one-time fitting over real GRPO's compute to the target
                (:meth:`AnchorAdvisor.advise`; 0: none).

        Raises:
            ValueError: ``costs`` omitted and the ledger has no execution or no world-model call yet.
        """
        with self._lock:
            costs = costs if costs is not None else CostRates.from_ledger(self.ledger)
            b = noise_batch_ratio if noise_batch_ratio is not None else (
                self.adaptive.noise_batch_ratio if self.adaptive is not None else None)
            return self.advisor.advise(costs, calibrate=self._advice_calibration(), noise_batch_ratio=b,
                                       groups_per_step=groups_per_step, step_law=step_law,
                                       fitting_share=fitting_share)
