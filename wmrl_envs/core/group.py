"""A whole group's scoring, once: the call sequence every group API runs, and its result type.

A group of G rollouts of one task is scored in this order (``docs/method.md``):

1. **world-model prediction** — one batched ``predict`` (while training the world model scores
   every group: anchor pairs), made *before* routing so that a world model that breaks the
   protocol stops the run without having consumed a route or a group id;
2. **route** — :meth:`CorrectionLoop.open_group <wmrl_envs.core.CorrectionLoop.open_group>`
   gives the group its route, id and ρ (a :class:`GroupTicket`);
3. **real execution** of an anchor group — the caller's (env steps, a Ray pool, rollouts made
   before), handed back as an :class:`AnchorExecution` and recorded into the ledger for the group;
4. **close** — the rollouts are counted and the group is corrected
   (:meth:`CorrectionLoop.close_group <wmrl_envs.core.CorrectionLoop.close_group>`).

:class:`GroupScoring` (a part of :class:`~wmrl_envs.core.CorrectionLoop`) runs these steps:
:meth:`~GroupScoring.score_group` all at once, or split in two for a caller whose executions
finish later (the Ray scorer): :meth:`~GroupScoring.begin_group` (steps 1-2, an
:class:`OpenGroup`) and :meth:`~GroupScoring.finish_group` (steps 3-4). The result is a
:class:`GroupRollout`. The per-episode and vector wrappers, which see a group one step at a time,
call the loop's step methods themselves.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Sequence

from wmrl_envs.world_models.base import WorldModelPrediction

from .corrector import GroupCorrection
from .routing import ANCHOR, Route
from .ungraded import CAUSE_KEY, EXECUTION_UNGRADED, WORLD_MODEL_UNGRADED, execution_cause, score_number

__all__ = [
    "STEP_SCORE_KEY",
    "real_score",
    "AnchorExecution",
    "GroupRollout",
    "GroupScoring",
    "GroupTicket",
    "OpenGroup",
    "failure_messages",
    "group_rollout",
    "rollout_cause",
    "score_failure",
    "wm_causes_of",
]


STEP_SCORE_KEY = "step_score"
"""``info`` key in which an env reports a step's own score when its reward is something else
(AutoResearch: the reward is the improvement of the best score so far, the turn's own score is
here). A real step's score is ``info["step_score"]`` where the env reports one and its reward
otherwise (:func:`real_score`), on every path: the per-episode and vector wrappers (outcome mode
aggregates the steps' scores with ``episode_score``), ``score_group``, the Ray pool and verl's
reward function — the quantity a world model predicts per step (``docs/method.md``, "Multi-turn
episodes")."""


def real_score(reward: Any, info: Mapping[str, Any] | None) -> tuple[float | None, str | None, str | None]:
    """The real score of one executed step, by the one rule of every path.

    The score is ``info["step_score"]`` where the env reports one (not ``None``), the reward
    otherwise; the other of the two is not read. The step is ungraded when ``info["graded"]``
    is ``False`` (cause ``info["ungraded_cause"]`` or ``"execution_ungraded"``) or when the
    score is ``None`` or not finite (``"execution_ungraded"``). A score that is not a number
    raises (:func:`~wmrl_envs.core.ungraded.score_number`: ``bool``, ``numpy.bool_`` and
    strings such as ``"0.7"`` included).

    Args:
        reward: the step's reward.
        info: the step's info dict (or ``None``).

    Returns:
        ``(score, cause, message)``: the score (float, ``None`` when ungraded), why it is
        ungraded (``None`` when graded) and the error text to report (``info["message"]``, or
        what was wrong with ``info["step_score"]``; ``None`` when there is none).

    Raises:
        TypeError: the score (the step score, else the reward) is not a number; the message
            names which and how to fix the env.
    """
    info = info or {}
    step = info.get(STEP_SCORE_KEY)
    if info.get("graded", True) is False:
        return None, execution_cause(None, info), None if info.get("message") is None else str(info["message"])
    if step is None:
        score = score_number(reward, "the reward")
        if score is None:
            msg = info.get("message")
            return None, execution_cause(None, info), None if msg is None else str(msg)
        return score, None, None
    score = score_number(step, f"info[{STEP_SCORE_KEY!r}]")
    if score is None:
        return None, EXECUTION_UNGRADED, f"info[{STEP_SCORE_KEY!r}] is not a finite number: {step!r}"
    return score, None, None


@dataclass(frozen=True)
class GroupTicket:
    """One routed group, from :meth:`CorrectionLoop.open_group` to :meth:`CorrectionLoop.close_group`.

    Attributes:
        group_id: running group index (int), ``None`` for an unnumbered evaluation group
            (:meth:`CorrectionLoop.eval_ticket`).
        route: ``"anchor"`` or ``"world_model"``.
        rho: ρ when the group was routed (float): the advantage weight it trains with on anchors.
        training: whether the loop was training when the group was routed (``False``: evaluation,
            nothing is updated and its rollouts are not part of a step).
        step: the training step the group was opened in (int, the
            :class:`~wmrl_envs.core.UngradedMonitor`'s step id): its ungraded rollouts count
            toward that step's stop rule even when it closes after later steps began (a late
            anchor); ``None`` for evaluation tickets.
        epoch: the loop's epoch when the ticket was opened (str): a random token the loop
            draws when it is built and again at every :meth:`CorrectionLoop.load_state_dict`.
            :meth:`CorrectionLoop.close_group` refuses a ticket of another epoch (opened before
            a load, whose group id the loop may have given again since, or by another loop).
    """

    group_id: int | None
    route: Route
    rho: float
    training: bool
    step: int | None = None
    epoch: str = ""


def rollout_cause(route: Route, reward: float | None, wm_cause: str | None, exec_cause: str | None) -> str | None:
    """Why a rollout has no training reward (``None``: it has one).

    Anchor rollouts train on their real score (cause: the execution's, default
    ``"execution_ungraded"``); world-model rollouts on their calibrated score (cause: the world
    model's, default ``"world_model_ungraded"``).
    """
    if reward is not None:
        return None
    if route == ANCHOR:
        return exec_cause or EXECUTION_UNGRADED
    return wm_cause or WORLD_MODEL_UNGRADED


def score_failure(route: Route, raw: float | None, wm_cause: str | None, world_model_called: bool) -> str | None:
    """A failed world-model score that does not leave its rollout ungraded: on an anchor row
    (whose real score exists) the world model was called and gave no score."""
    if route == ANCHOR and world_model_called and raw is None:
        return wm_cause or WORLD_MODEL_UNGRADED
    return None


def failure_messages(preds: Sequence[WorldModelPrediction] = (), infos: Sequence[Mapping[str, Any]] = ()) -> dict[str, str]:
    """``{cause: error text}`` of a group's failed predictions and executions (for the warning
    and the stop rule's error)."""
    out: dict[str, str] = {}
    for p in preds:
        if p.score is None and p.ungraded_cause and p.extras.get("error"):
            out[p.ungraded_cause] = str(p.extras["error"])
    for info in infos:
        c = info.get(CAUSE_KEY)
        if c and (info.get("error") or info.get("message")):
            out[str(c)] = str(info.get("error") or info.get("message"))
    return out


def wm_causes_of(preds: Sequence[WorldModelPrediction], g: int) -> list[str | None]:
    """Per rollout: the cause of its missing world-model score (``None`` where it has one, or
    where the world model was not called: ``preds`` empty)."""
    if not preds:
        return [None] * g
    return [None if p.score is not None else p.ungraded_cause for p in preds]


@dataclass
class GroupRollout:
    """A whole group scored at once (``score_group``, ``score_trajectories``, the Ray scorer).

    Attributes:
        group_id: running group index (int).
        correction: the :class:`~wmrl_envs.core.GroupCorrection` (scores, ρ, ungraded causes).
        observations: G observations after the step (real on anchors, predicted otherwise).
        infos: G per-rollout info dicts (inner env info on anchors; each has a ``"wmrl"`` key).
        predictions: G world-model predictions (empty when the world model was not called).
        execution_seconds: wall-clock seconds of the real steps (0 on WM groups).
        world_model_seconds: wall-clock seconds of world-model inference.
    """

    group_id: int
    correction: GroupCorrection
    observations: list[Any]
    infos: list[dict[str, Any]]
    predictions: list[WorldModelPrediction] = field(default_factory=list)
    execution_seconds: float = 0.0
    world_model_seconds: float = 0.0

    @property
    def route(self) -> Route:
        """``"anchor"`` or ``"world_model"`` (``correction.route``)."""
        return self.correction.route

    @property
    def rewards(self) -> list[float | None]:
        """G training rewards (real on anchors, calibrated WM on WM groups); ``None`` = ungraded
        (drop the row; ``infos[i]["wmrl"]["ungraded_cause"]`` says why). ``correction.rewards``."""
        return self.correction.rewards

    @property
    def advantage_weight(self) -> float:
        """ρ at routing for anchor groups, 1.0 otherwise (``correction.advantage_weight``)."""
        return self.correction.advantage_weight


def group_rollout(
    corr: GroupCorrection,
    observations: list[Any],
    infos: list[dict[str, Any]],
    predictions: Sequence[WorldModelPrediction] = (),
    execution_seconds: float = 0.0,
    world_model_seconds: float = 0.0,
) -> GroupRollout:
    """A :class:`GroupRollout` whose ``infos[i]["wmrl"]`` describe rollout ``i`` of ``corr``."""
    assert corr.group_id is not None
    for i, info in enumerate(infos):
        info["wmrl"] = {
            "route": corr.route,
            "group_id": corr.group_id,
            "episode_in_group": i,
            "raw_score": corr.raw_scores[i],
            "calibrated_score": corr.calibrated_scores[i],
            "real_score": corr.real_scores[i],
            "graded": corr.rewards[i] is not None,
            CAUSE_KEY: corr.ungraded_causes[i] if corr.ungraded_causes else None,
            "advantage_weight": corr.advantage_weight,
        }
    return GroupRollout(corr.group_id, corr, observations, infos, list(predictions), execution_seconds,
                        world_model_seconds)


@dataclass
class AnchorExecution:
    """The real execution of an anchor group's G rollouts, as its caller hands it to the loop.

    Attributes:
        real: G real scores r (``None``: ungraded, cause in ``causes``).
        causes: G causes of an ungraded real score (``None`` where graded); empty: none.
        observations: G observations after the rollouts (``None``: the caller has none; the
            group's ``observations`` argument, or its contexts, stand in).
        infos: G info dicts of the rollouts (``None``: empty dicts).
        seconds: wall-clock seconds of the group's execution (``GroupRollout.execution_seconds``).
        record: per rollout ``(wall seconds, CPU-seconds or None)``, or ``(wall seconds,
            CPU-seconds or None, reported price or None)`` (``info["execution_cost"]``), to add to
            the ledger as one execution each (:meth:`CorrectionLoop.record_execution`); ``None``: nothing to add
            (executed earlier and accounted by the caller, or already in a shared ledger).
        recorded: executions already in the loop's ledger (a pool that shares it) to count for
            the group (the execution budget's per-group cost); used when ``record`` is ``None``.
    """

    real: Sequence[float | None]
    causes: Sequence[str | None] = ()
    observations: Sequence[Any] | None = None
    infos: Sequence[Mapping[str, Any]] | None = None
    seconds: float = 0.0
    record: Sequence[tuple[float, float | None] | tuple[float, float | None, float | None]] | None = None
    recorded: int = 0


@dataclass
class OpenGroup:
    """A group predicted and routed, waiting for its real execution (:meth:`GroupScoring.begin_group`).

    Attributes:
        ticket: the loop's :class:`GroupTicket` (id, route, ρ at routing).
        contexts: the G contexts (what the world model conditioned on).
        actions: the G actions (or trajectories, reward mode) the world model scored.
        predictions: the G :class:`~wmrl_envs.world_models.WorldModelPrediction` (empty when the
            world model was not called).
        raw_scores: G raw world-model scores r̂ (``None``: no score).
        world_model_seconds: wall-clock seconds of the batched world-model call.
    """

    ticket: GroupTicket
    contexts: list[Any]
    actions: list[Any]
    predictions: list[WorldModelPrediction]
    raw_scores: list[float | None]
    world_model_seconds: float = 0.0


class GroupScoring:
    """The group call sequence of :class:`~wmrl_envs.core.CorrectionLoop` (this module's docstring)."""

    def begin_group(
        self,
        contexts: Sequence[Any],
        actions: Sequence[Any],
        *,
        route: Route | None = None,
        on_eval_anchors: bool = False,
        prior_cost: Mapping[str, float] | None = None,
    ) -> OpenGroup:
        """Steps 1-2: predict the group (:meth:`predict_group`), then route it (:meth:`open_group`).

        Args:
            contexts: G contexts the world model conditions on.
            actions: G actions (outcome mode) or :class:`~wmrl_envs.world_models.Trajectory`
                objects (reward mode).
            route: force ``"anchor"``/``"world_model"`` (``None``: the schedule, or
                ``eval_route`` while evaluating).
            on_eval_anchors: the world model also scores evaluation anchor groups.
            prior_cost: see :meth:`open_group`.

        Returns:
            An :class:`OpenGroup`; finish it with :meth:`finish_group`.

        Raises:
            ValueError: ``contexts`` and ``actions`` of different lengths, an unknown ``route``, a
                world-model route without a world model.
            RuntimeError: the world model broke the protocol (nothing was routed then).
            ExecutionBudgetSpent: see :meth:`open_group`.
        """
        g = len(actions)
        if len(contexts) != g:
            raise ValueError(f"got {len(contexts)} contexts for {g} actions; pass one context per rollout")
        preds, wm_secs = self.predict_group(route, contexts, actions, on_eval_anchors=on_eval_anchors)  # type: ignore[attr-defined]
        ticket = self.open_group(route, prior_cost=prior_cost)  # type: ignore[attr-defined]
        raw = [p.score for p in preds] if preds else [None] * g
        return OpenGroup(ticket, list(contexts), list(actions), preds, raw, wm_secs)

    def finish_group(
        self,
        group: OpenGroup,
        execution: AnchorExecution | None = None,
        *,
        observations: Sequence[Any] | None = None,
        rho_from: Literal["routing", "close"] = "routing",
        keep_actions: bool = True,
        where: str | None = None,
    ) -> GroupRollout:
        """Steps 3-4: record an anchor group's execution, count the G rollouts, close the group.

        Args:
            group: from :meth:`begin_group`.
            execution: the anchor group's real execution (required on the anchor route, ignored
                on the world-model route).
            observations: G final observations known already (reward mode: the trajectories'
                last); default: an anchor group's executed ones, a world-model group's predicted
                ones (a copy of the context where the world model predicts none).
            rho_from: see :meth:`close_group`.
            keep_actions: ``True``: the actions and contexts go to :meth:`close_group` (the
                advisor's blind-spot keys; a world model that learns); ``False``: only when the
                world model learns.
            where: how a warning names the group (default ``"group <id>"``).

        Returns:
            The :class:`GroupRollout` (each ``infos[i]["wmrl"]`` describes rollout ``i``).

        Raises:
            ValueError: an anchor group without ``execution``, or lengths that are not G; the
                errors of :meth:`close_group`.
            TooManyUngradedError: the stop rule fired (the group is corrected and counted first).
        """
        ticket, preds, g = group.ticket, group.predictions, len(group.actions)
        real: list[float | None] | None = None
        exec_causes: list[str | None] | None = None
        exec_secs = 0.0
        infos: list[dict[str, Any]]
        if ticket.route == ANCHOR:
            if execution is None:
                raise ValueError(f"group {ticket.group_id} is an anchor group: pass its real execution "
                                 "(AnchorExecution) to finish it")
            if len(execution.real) != g:
                raise ValueError(f"the execution has {len(execution.real)} real scores for a group of {g} rollouts")
            if execution.record is not None:
                for dt, cpu, *price in execution.record:
                    self.record_execution(dt, 1, cpu_seconds=cpu, ticket=ticket,  # type: ignore[attr-defined]
                                          cost=price[0] if price else None)
            elif execution.recorded:
                self.attribute_executions(ticket, int(execution.recorded))  # type: ignore[attr-defined]
            real = list(execution.real)
            exec_causes = list(execution.causes) or [None] * g
            exec_secs = float(execution.seconds)
            obs_out = list(execution.observations) if execution.observations is not None else (
                list(observations) if observations is not None else [copy.deepcopy(c) for c in group.contexts])
            infos = [dict(i) for i in execution.infos] if execution.infos is not None else [{} for _ in range(g)]
        elif observations is not None:
            obs_out, infos = list(observations), [{} for _ in range(g)]
        elif preds:
            obs_out = [copy.deepcopy(p.observation if p.observation is not None else c)
                       for p, c in zip(preds, group.contexts)]
            infos = [{"feedback": p.feedback, "status": p.status} for p in preds]
        else:
            obs_out, infos = [copy.deepcopy(c) for c in group.contexts], [{} for _ in range(g)]
        self.count_episodes(g)  # type: ignore[attr-defined]
        teach = keep_actions or self.learns  # type: ignore[attr-defined]
        corr = self.close_group(  # type: ignore[attr-defined]
            ticket, group.raw_scores, real, wm_causes=wm_causes_of(preds, g), exec_causes=exec_causes,
            world_model_called=bool(preds), messages=failure_messages(preds, infos), rho_from=rho_from, where=where,
            actions=group.actions if teach else None, contexts=group.contexts if teach else None,
        )
        return group_rollout(corr, obs_out, infos, preds, exec_secs, group.world_model_seconds)

    def score_group(
        self,
        contexts: Sequence[Any],
        actions: Sequence[Any],
        execute: Callable[[GroupTicket], AnchorExecution] | None = None,
        *,
        route: Route | None = None,
        on_eval_anchors: bool = False,
        prior_cost: Mapping[str, float] | None = None,
        observations: Sequence[Any] | None = None,
        rho_from: Literal["routing", "close"] = "routing",
        keep_actions: bool = True,
        where: str | None = None,
    ) -> GroupRollout:
        """Score one group: predict, route, execute an anchor group (``execute(ticket)``), close.

        The method's one call sequence (``docs/method.md``): :meth:`begin_group` (the world model
        scores the G actions in one batched call, then the group is routed and its ticket opened)
        then :meth:`finish_group` (corrected, counted, closed). Every wrapper, the Ray scorer and the
        LIBERO protocol score a group through it.

        Args:
            contexts: G contexts the world model conditions on (a wrapper passes the observation
                the group's reset returned, once per rollout).
            actions: G actions (outcome mode) or G trajectories (reward mode).
            execute: called as ``execute(ticket)`` only when the group is routed to ``"anchor"``,
                after routing; it runs the G rollouts for real and returns their
                :class:`AnchorExecution` (real scores, ``None`` = ungraded, with causes). Charge
                its executions with ``ledger.record_execution(..., ticket=ticket)``.
            route: force ``"anchor"``/``"world_model"`` (``None``: the schedule).
            on_eval_anchors: the world model also scores evaluation anchor groups.
            prior_cost: executions per route a group of this kind costs before one has closed
                (the execution budget counts open groups at it; see :meth:`open_group`).
            observations, rho_from, keep_actions, where: see :meth:`finish_group`.

        Returns:
            The :class:`GroupRollout`: ``route``, ``rewards`` (real on anchor groups, calibrated
            world-model scores otherwise, ``None`` = ungraded), ``advantage_weight`` (ρ on anchor
            groups, 1.0 otherwise), ``group_id``, and the ``correction`` with the raw scores.

        Raises:
            ValueError: lengths that are not G, an unknown route, or an anchor group without
                ``execute`` (the ticket stays open).
            RuntimeError: the world model broke its protocol (nothing was routed).
            ExecutionBudgetSpent: ``on_budget_spent="stop"`` and the execution budget is spent.
            TooManyUngradedError: the stop rule fired (the group is corrected and counted first).
        """
        group = self.begin_group(contexts, actions, route=route, on_eval_anchors=on_eval_anchors,
                                 prior_cost=prior_cost)
        execution = execute(group.ticket) if group.ticket.route == ANCHOR and execute is not None else None
        return self.finish_group(group, execution, observations=observations, rho_from=rho_from,
                                 keep_actions=keep_actions, where=where)
