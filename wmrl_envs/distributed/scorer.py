"""The WMRL group path on a :class:`~wmrl_envs.distributed.ray_pool.RayExecutionPool`:
:class:`AsyncAnchoredScorer` routes and world-model-scores a group at submission
(:meth:`CorrectionLoop.begin_group <wmrl_envs.core.CorrectionLoop.begin_group>`) and finishes it on
the wrapper's loop when its real executions are in (:meth:`CorrectionLoop.finish_group
<wmrl_envs.core.CorrectionLoop.finish_group>`): the loop's one group call sequence, split in two.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from wmrl_envs.core import ANCHOR, WORLD_MODEL, Route
from wmrl_envs.core.group import AnchorExecution, GroupTicket, OpenGroup
from wmrl_envs.core.ungraded import CAUSE_KEY

if TYPE_CHECKING:
    from .ray_pool import GroupExecutionFuture, RayExecutionPool

__all__ = ["AsyncAnchoredScorer", "PendingGroup"]


# ---------------------------------------------------------------------- the shared WMRL path
@dataclass
class PendingGroup:
    """A group submitted to :class:`AsyncAnchoredScorer` (routed and world-model scored).

    Attributes:
        ticket: the loop's :class:`~wmrl_envs.core.GroupTicket` (id, route, ρ at routing).
        raw_scores: world-model raw scores r̂ (G floats or ``None``).
        predictions: the G :class:`~wmrl_envs.world_models.WorldModelPrediction`.
        context: the reset observation the world model conditioned on.
        future: the pool's future (anchor groups), else ``None``.
        world_model_seconds: seconds of the batched world-model call.
        result: the :class:`~wmrl_envs.core.GroupRollout` once corrected.
        actions: the G actions.
        group: the loop's :class:`~wmrl_envs.core.OpenGroup` (:meth:`CorrectionLoop.begin_group
            <wmrl_envs.core.CorrectionLoop.begin_group>`), finished when the executions are in.
    """

    ticket: GroupTicket
    raw_scores: list[float | None]
    predictions: list[Any]
    context: Any
    future: GroupExecutionFuture | None
    world_model_seconds: float = 0.0
    result: Any = None
    actions: list[Any] = field(default_factory=list)  # the G actions (a learning world model is taught with them)
    group: OpenGroup | None = None  # the loop's open group (CorrectionLoop.begin_group), finished at completion
    _collected: bool = field(default=False, repr=False)

    @property
    def group_id(self) -> int:
        """Running group index (the loop's counter)."""
        assert self.ticket.group_id is not None
        return self.ticket.group_id

    @property
    def route(self) -> Route:
        """``"anchor"`` or ``"world_model"``."""
        return self.ticket.route

    @property
    def ready(self) -> bool:
        """``True`` when the real executions (if any) have finished."""
        return self.future is None or self.future.done()


class AsyncAnchoredScorer:
    """Score groups like ``score_group``, with anchor executions running on a :class:`RayExecutionPool`.

    Uses the wrapper's :class:`~wmrl_envs.core.CorrectionLoop` through its public API: a group is
    opened (routed) and world-model scored at :meth:`submit`, and closed when its executions
    have finished. The wrapper's
    inner env is only ``reset`` here (for the world model's context); real steps run on the pool.

    Args:
        wrapper: an outcome-mode :class:`~wmrl_envs.wrappers.anchored.AnchoredWorldModelWrapper`.
        pool: the execution pool (its ledger should be ``wrapper.loop.ledger``; otherwise the
            execution seconds are added to ``wrapper.loop.ledger`` as well).
        ordered: ``True`` (default): groups are corrected strictly in submission order (a
            finished group waits for earlier anchor groups), so results equal the serial
            ``score_group`` ones (an anchor group's weight is ρ at its correction, which is ρ at
            routing in the serial run). ``False``: world-model groups are corrected at
            submission and anchor groups as soon as their executions finish (lower latency; the
            debiaser sees the pairs in completion order; an anchor group trains with the ρ of
            its routing).

    Raises:
        ValueError: the wrapper is not in outcome mode.
    """

    def __init__(self, wrapper: Any, pool: RayExecutionPool, *, ordered: bool = True) -> None:
        if getattr(wrapper, "mode", None) != "outcome":
            raise ValueError("AsyncAnchoredScorer needs an outcome-mode AnchoredWorldModelWrapper")
        self.wrapper = wrapper
        self.pool = pool
        self.ordered = bool(ordered)
        self._queue: deque[PendingGroup] = deque()

    @property
    def n_pending(self) -> int:
        """Groups submitted and not yet returned by :meth:`poll`/:meth:`collect`."""
        return len(self._queue)

    def submit(
        self,
        actions: Sequence[Any],
        *,
        seed: int | None = None,
        options: dict[str, Any] | None = None,
        route: Route | None = None,
    ) -> PendingGroup:
        """Route and world-model-score a group now; anchor executions start on the pool.

        Args:
            actions: the G actions of the group.
            seed, options: reset arguments shared by the group.
            route: force ``"anchor"``/``"world_model"`` (bypasses the router).

        Returns:
            A :class:`PendingGroup` (returned before any real execution finishes).

        Raises:
            ValueError: empty ``actions``, unknown ``route``, or a world-model route without a
                world model.
        """
        w = self.wrapper
        loop = w.loop
        if len(actions) == 0:
            raise ValueError("submit() needs at least one action")
        if route is not None and route not in (ANCHOR, WORLD_MODEL):
            raise ValueError(f"route must be 'anchor' or 'world_model', got {route!r}")
        g = len(actions)
        ctx, _ = w.env.reset(seed=seed, options=options)  # the world model's context, as in score_group
        # the loop's group sequence, split: predict and route now (CorrectionLoop.begin_group), finish
        # when the executions are in (_complete); an execution budget counts the groups submitted and
        # not yet finished at G executions each
        group = loop.begin_group([ctx] * g, list(actions), route=route, on_eval_anchors=w.eval_with_world_model,
                                 prior_cost={ANCHOR: float(g), WORLD_MODEL: 0.0})
        ticket = group.ticket
        fut = self.pool.execute_group(list(actions), seed=seed, options=options) if ticket.route == ANCHOR else None
        pending = PendingGroup(ticket, group.raw_scores, group.predictions, ctx, fut, group.world_model_seconds,
                               actions=list(actions), group=group)
        self._queue.append(pending)
        if not self.ordered and fut is None:
            self._complete(pending)
        return pending

    def _complete(self, p: PendingGroup) -> None:
        """Finish the group (:meth:`CorrectionLoop.finish_group`): its real scores have arrived, or it has none."""
        loop = self.wrapper.loop
        execution = None
        if p.future is not None:
            res = p.future.result()
            g = len(p.raw_scores)
            causes = list(res.causes) or [None] * g
            infos = [dict(i) for i in res.infos]
            for k, err in enumerate(res.errors):
                if err is not None:
                    infos[k]["error"] = err
                if causes[k] is not None:
                    infos[k][CAUSE_KEY] = causes[k]
            # CPU-seconds per rollout (None: not measured, or a GroupExecution built without them)
            cpu = list(res.cpu_seconds) if len(res.cpu_seconds) == len(res.seconds) else [None] * len(res.seconds)
            shared = self.pool.ledger is loop.ledger  # the pool put them in the shared ledger: count them for the group
            execution = AnchorExecution(
                real=list(res.rewards), causes=causes, observations=list(res.observations), infos=infos,
                seconds=float(sum(res.seconds)), record=None if shared else list(zip(res.seconds, cpu, res.reported_costs())),
                recorded=len(res.seconds) if shared else 0)
        # a world model that learns from anchors is taught with the group (keep_actions=False: only then)
        p.result = loop.finish_group(p.group, execution, rho_from="close" if self.ordered else "routing",
                                     keep_actions=False)

    def poll(self) -> list[Any]:
        """Correct and return the groups that can be completed now (never blocks).

        Returns:
            :class:`~wmrl_envs.core.GroupRollout` objects (submission order when
            ``ordered``; otherwise completion order).
        """
        out: list[Any] = []
        if self.ordered:
            while self._queue and self._queue[0].ready:
                p = self._queue.popleft()
                self._complete(p)
                out.append(p.result)
            return out
        keep: deque[PendingGroup] = deque()
        for p in self._queue:
            if p.result is None and p.ready:
                self._complete(p)
            if p.result is not None:
                out.append(p.result)
            else:
                keep.append(p)
        self._queue = keep
        return out

    def collect(self, n: int | None = None, timeout: float | None = None) -> list[Any]:
        """Block until ``n`` more groups (default: all pending) are corrected, and return them.

        Args:
            n: groups to return at least (fewer only on timeout).
            timeout: seconds to wait at most (``None``: no limit).

        Returns:
            A list of :class:`~wmrl_envs.core.GroupRollout`.
        """
        want = self.n_pending if n is None else min(n, self.n_pending)
        deadline = None if timeout is None else time.perf_counter() + timeout
        out = self.poll()
        while len(out) < want:
            waiting = [p.future for p in self._queue if p.future is not None and not p.ready]
            left = None if deadline is None else deadline - time.perf_counter()
            if left is not None and left <= 0:
                break
            if waiting:
                self.pool.wait(waiting, num_returns=1, timeout=left)
            out.extend(self.poll())
        return out
