"""``AnchoredWorldModelVectorWrapper``: the WMRL wrapper for Gymnasium vector envs.

The vector twin of :class:`~wmrl_envs.wrappers.anchored.AnchoredWorldModelWrapper`, for RL
loops that step a ``gymnasium.vector.VectorEnv`` (``SyncVectorEnv``, ``AsyncVectorEnv``, any
autoreset mode). Like the per-episode wrapper it is plumbing around one
:class:`~wmrl_envs.core.CorrectionLoop` (routing, world-model calls, corrections, ungraded
accounting), laid out over sub-envs:

* **lanes and groups** — sub-envs ``[k*G, (k+1)*G)`` form *lane* ``k`` (``num_envs`` must be a
  multiple of ``G = group_size``). The n-th episodes of the G members of lane ``k`` form one
  *group* (what GRPO calls a group: G rollouts of one task), numbered by its *round* n in the
  lane. The group is routed by the loop when its first member starts episode n, all its
  members share that route, and it is closed (pairs, ρ) when all G episodes are done. Members
  may run ahead of each other (episodes of different lengths): each group is tracked until its
  last member finishes.
* **tasks** — ``task_fn(lane, round) -> (seed, options)`` gives the reset arguments of a group,
  so that its G members start from the same task even when the vector env autoresets them
  (autoresets call ``reset()`` without arguments). Without ``task_fn`` the reset arguments
  are the caller's; ``reset(seed=int)`` then seeds sub-env ``i`` of lane ``k`` with
  ``seed + k`` (not ``seed + i``), so that the members of a group start alike.
* **random streams** — the members share the task, not the noise: after a reset with a seed
  ``s``, member ``m`` of its lane (sub-env ``i``, ``m = i % G``) draws from its own stream,
  ``np_random`` = :func:`~wmrl_envs.wrappers.rollout_streams.rollout_rng` ``(s, m)`` (the
  :class:`~wmrl_envs.wrappers.routed_sub_env.RoutedSubEnv` does it, also on autoresets with
  ``task_fn``'s seed; on plain sub-envs the wrapper sets it after its own resets). What ``reset``
  draws is the group's task; outcome noise drawn from ``np_random`` in ``step`` differs per
  member and is reproduced by the same seeds (``docs/method.md``, "Randomness").
* **outcome mode** — the expensive inner ``step`` must not run on world-model routes, but a
  vector env steps every sub-env. Each sub-env therefore carries a small
  :class:`~wmrl_envs.wrappers.routed_sub_env.RoutedSubEnv` wrapper (outermost; :func:`~wmrl_envs.wrappers.routed_sub_env.make_vector_env` applies it): before a
  step, the vector wrapper sends every sub-env whose plan changed its route (and next reset
  arguments) with ``VectorEnv.set_attr("wmrl_plan", [...])`` — one round trip, also across
  processes for ``AsyncVectorEnv`` — and on a world-model route :class:`~wmrl_envs.wrappers.routed_sub_env.RoutedSubEnv` returns
  a placeholder transition *without calling the inner step*. The vector wrapper then runs ONE
  batched world-model ``predict`` over the sub-envs that stepped, replaces the placeholders by
  the predicted observation (when the world model predicts one) and pays the calibrated score
  ``f̂(r̂)`` at the episode's end (``episode_steps`` steps, or the step whose prediction says
  ``terminated``: the batched ``predict`` runs before the vector step, and such a sub-env is told
  to end its placeholder step; as in the per-episode wrapper). An anchor episode's real score
  aggregates its steps' scores with the same ``episode_score``.
  Anchor sub-envs step for real, and the world model also scores them (the anchor pairs).
* **reward mode** — every sub-env steps (the dynamics are cheap); the world model scores
  each finished episode's :class:`~wmrl_envs.world_models.Trajectory` (one batched
  ``predict`` per vector step over the episodes that finished in it); on world-model routes
  the per-step real rewards are replaced by 0 and the episode's last step pays ``f̂(r̂)``, and
  the ``withheld_info_keys`` (``success``...) are removed from the infos (value cleared, mask
  ``False``); anchors pay the real reward and feed the pairs.

``info["wmrl"]`` follows Gymnasium's dict-of-arrays convention (every key ``k`` has a boolean
mask ``_k`` that says which sub-envs carry it), see :meth:`AnchoredWorldModelVectorWrapper.step`.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper
from gymnasium.vector.utils import concatenate, create_empty_array, iterate

from wmrl_envs.core import ANCHOR, WORLD_MODEL, CorrectionConfig, CostLedger, Route
from wmrl_envs.core.adaptive import ExecutionBudgetSpent, ExecutionBudgetWait
from wmrl_envs.core.ledger import Stopwatch
from wmrl_envs.core.loop import CorrectionLoop, GroupTicket
from wmrl_envs.world_models.base import Trajectory, WorldModel, WorldModelPrediction

from .common import EpisodeTally, LoopState, build_loop, check_episode_args, reject_removed_kwargs
from .rollout_streams import rollout_rng
from .routed_sub_env import END_ATTR, MEMBER_ATTR, PLAN_ATTR
from .vector_info import InfoBuilder, bool_array, copy_obs
from .vector_steps import VectorStep, VectorSteps

__all__ = ["AnchoredWorldModelVectorWrapper"]

TaskFn = Callable[[int, int], "tuple[int | None, dict[str, Any] | None]"]


@dataclass
class _Group:
    """Bookkeeping of one group (round ``round`` of lane ``lane``: G episodes, one per member)."""

    lane: int
    round: int
    ticket: GroupTicket
    raw: list[float | None]
    real: list[float | None]
    finished: list[bool]
    abandoned: bool = False
    members_left: int = 0
    wm_causes: list[str | None] = field(default_factory=list)  # per member: its world model's failure
    exec_causes: list[str | None] = field(default_factory=list)  # per member: its execution's failure
    inputs: list[tuple[Any, Any] | None] = field(default_factory=list)  # per member: (context, action) to learn from

    @property
    def route(self) -> Route:
        return self.ticket.route

    @property
    def evaluating(self) -> bool:
        return not self.ticket.training


class AnchoredWorldModelVectorWrapper(VectorWrapper, gym.utils.RecordConstructorArgs, LoopState, VectorSteps):
    """Route whole groups of sub-env episodes to real execution (anchors) or a world model.

    Args:
        env: the vector env (``num_envs`` a multiple of ``group_size``). Outcome mode needs a
            :class:`~wmrl_envs.wrappers.routed_sub_env.RoutedSubEnv` outermost on every sub-env (:func:`~wmrl_envs.wrappers.routed_sub_env.make_vector_env`); reward
            mode needs it only with ``task_fn`` (otherwise plain sub-envs work: each stepped
            sub-env is one execution for its lane's group, at an even share of the vector step's
            wall-clock).
        world_model: batched ``predict(contexts, actions)``; ``None`` only with
            ``correction=CorrectionConfig(anchor_fraction=1.0)``.
        group_size: G, sub-envs per lane (rollouts per group).
        mode: ``"outcome"`` or ``"reward"`` (see the module docstring).
        groups_per_step: groups per block of the anchor schedule (default
            ``ceil(1 / correction.anchor_fraction)``, as in the per-episode wrapper).
        episode_steps: outcome mode: steps after which a world-model episode terminates (earlier
            at a step whose prediction has ``terminated=True``: the world model predicts each
            step before the sub-envs step, and tells a ``RoutedSubEnv`` to end its placeholder
            step then).
        episode_score: outcome mode: per-step scores → episode score, on both routes alike (the
            real per-step score is ``info["step_score"]`` where the env reports one, else the
            reward; as in the per-episode wrapper)
            (``"max"``, ``"last"`` or ``"sum"``).
        task_fn: ``task_fn(lane, round) -> (seed, options)``: the reset arguments shared by the
            G episodes of a group (called once per group, cached).
        seed, ledger, correction, loop: as in
            :class:`~wmrl_envs.wrappers.anchored.AnchoredWorldModelWrapper`: the correction
            settings come one way, ``correction=CorrectionConfig(...)`` or a shared
            ``loop=CorrectionLoop(...)`` (the former ``anchor_fraction``, ``min_anchor_groups``,
            ``corrector``, ``debiaser_kwargs``, ``denoiser_kwargs`` raise a ``TypeError`` that
            says how to write them).
        eval_route: route of every group started while ``training`` is ``False``.
        withheld_info_keys: reward mode: info keys withheld on world-model routes.
        world_model_timeout_s, max_ungraded_share: the per-call world-model time-out and the
            stop rule, as in the per-episode wrapper (``docs/method.md``, "Ungraded
            rollouts"); a step is ``groups_per_step`` groups (or :meth:`plan_step`'s).

    Attributes:
        loop: the :class:`~wmrl_envs.core.CorrectionLoop`, the one place to read the method's
            state (``loop.router``, ``loop.corrector``, ``loop.ledger``, ``loop.rho``,
            ``loop.n_groups_started``, ``loop.stats()``); the wrapper keeps ``training``
            (read/write) and :meth:`plan_step` as shortcuts.
        autoreset_mode: the vector env's ``gymnasium.vector.AutoresetMode``.
        n_lanes: ``num_envs // group_size`` (int).
        n_groups_completed: groups closed (their correction ran; int).
        n_groups_abandoned: groups dropped by a reset before all members finished (int; the loop
            counts them by cause, ``loop.stats()["groups_abandoned"]``, as soon as one is dropped).
        n_groups_open: groups routed and not yet closed nor abandoned (int).
        n_plan_updates: ``set_attr`` round trips that sent routes/tasks to the sub-envs (int).
        n_idle_executions: real executions of sub-envs waiting for the execution budget (plain
            sub-envs step whatever their lane does; with RoutedSubEnv a waiting sub-env takes
            placeholder steps and executes nothing); in the ledger, credited to no group (int).

    Execution budget (``anchor_fraction="auto"``, ``on_budget_spent="stop"``): a lane opens its
    next group only when it fits in what is left of the budget. While other training groups are
    in flight (their price is an estimate until they close) a lane whose group does not fit
    *waits* (:class:`~wmrl_envs.core.adaptive.ExecutionBudgetWait`): its sub-envs run episodes
    that belong to no group (``info["wmrl"]["budget_wait"]``, reward 0, withheld keys removed;
    with RoutedSubEnv placeholder steps of ``episode_steps`` steps that execute nothing) and try
    again when such an episode ends. The run stops
    (:class:`~wmrl_envs.core.adaptive.ExecutionBudgetSpent` from :meth:`step`) only when no
    training group is in flight and none fits.

    Raises:
        ValueError: invalid arguments, ``num_envs`` not a multiple of ``group_size``, or (outcome
            mode / ``task_fn``) sub-envs without :class:`~wmrl_envs.wrappers.routed_sub_env.RoutedSubEnv`.
        TypeError: ``env`` is not a ``gymnasium.vector.VectorEnv``, or a removed correction
            keyword argument was passed (the message gives its ``CorrectionConfig`` spelling).

    Example:
        >>> import numpy as np
        >>> from wmrl_envs.envs.guess import GuessEnv
        >>> from wmrl_envs.world_models import WorldModelPrediction
        >>> from wmrl_envs.wrappers import make_vector_env
        >>> class EchoWM:
        ...     def predict(self, contexts, actions):
        ...         return [WorldModelPrediction(score=float(a[0])) for a in actions]
        >>> venv = make_vector_env(GuessEnv, 4)
        >>> from wmrl_envs.core import CorrectionConfig
        >>> env = AnchoredWorldModelVectorWrapper(venv, EchoWM(), group_size=2,
        ...                                       correction=CorrectionConfig(anchor_fraction=0.5))
        >>> obs, info = env.reset(seed=0)
        >>> obs, rew, term, trunc, info = env.step(np.full((4, 1), 0.5, np.float32))
        >>> info["wmrl"]["route"].tolist()[:2] == [info["wmrl"]["route"][0]] * 2
        True
    """

    def __init__(
        self,
        env: VectorEnv,
        world_model: WorldModel | None,
        *,
        group_size: int = 8,
        mode: Literal["outcome", "reward"] = "outcome",
        groups_per_step: int | None = None,
        episode_steps: int = 1,
        episode_score: Literal["max", "last", "sum"] = "max",
        task_fn: TaskFn | None = None,
        seed: int = 0,
        ledger: CostLedger | None = None,
        eval_route: Route = ANCHOR,
        withheld_info_keys: Sequence[str] = ("success", "is_success"),
        world_model_timeout_s: float | None = None,
        max_ungraded_share: float | None = 0.5,
        correction: CorrectionConfig | None = None,
        loop: CorrectionLoop | None = None,
        **removed: Any,
    ) -> None:
        reject_removed_kwargs("AnchoredWorldModelVectorWrapper", removed)
        gym.utils.RecordConstructorArgs.__init__(
            self, group_size=group_size, mode=mode, groups_per_step=groups_per_step,
            episode_steps=episode_steps, episode_score=episode_score,
            seed=seed, eval_route=eval_route, withheld_info_keys=tuple(withheld_info_keys),
            world_model_timeout_s=world_model_timeout_s, max_ungraded_share=max_ungraded_share, correction=correction,
        )
        VectorWrapper.__init__(self, env)
        check_episode_args(mode, group_size, episode_steps, episode_score, world_model=world_model is not None)
        if env.num_envs % group_size != 0:
            raise ValueError(
                f"num_envs={env.num_envs} is not a multiple of group_size={group_size}; sub-envs "
                "[k*G, (k+1)*G) form lane k — use num_envs = (groups at a time) * group_size"
            )
        self.loop = build_loop(
            world_model=world_model, groups_per_step=groups_per_step, seed=seed, ledger=ledger, eval_route=eval_route,
            world_model_timeout_s=world_model_timeout_s, max_ungraded_share=max_ungraded_share,
            correction=correction, loop=loop,
        )
        mode_meta = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self.autoreset_mode = mode_meta if isinstance(mode_meta, AutoresetMode) else AutoresetMode(mode_meta)
        self.group_size = int(group_size)
        self.n_lanes = env.num_envs // self.group_size
        self.mode = mode
        self.episode_steps = int(episode_steps)
        self.episode_score = episode_score
        self.task_fn = task_fn
        self.withheld_info_keys = tuple(withheld_info_keys)

        self._routed = self._has_routed_sub_envs()
        if mode == "outcome" and not self._routed:
            raise ValueError(
                "outcome mode needs a RoutedSubEnv (wmrl_envs.wrappers) outermost on every sub-env, "
                "so that world-model routes skip the expensive inner step: build the vector env with "
                "make_vector_env(env_fn, num_envs) or wrap each env_fn's env in RoutedSubEnv"
            )
        if task_fn is not None and not self._routed:
            raise ValueError(
                "task_fn needs a RoutedSubEnv on every sub-env (it passes the group's reset arguments "
                "to autoresets): build the vector env with make_vector_env(env_fn, num_envs)"
            )
        # reward mode without task_fn sends a plan only to a sub-env waiting for the budget (route
        # "world_model": a placeholder step, no execution); the plan (None, None, None) is transparent
        self._use_plans = self._routed
        if self._routed:
            self.env.set_attr("wmrl_episode_steps", [self.episode_steps] * self.num_envs)
            # each member's own random stream after a seeded reset (module docstring, "random streams")
            self.env.set_attr(MEMBER_ATTR, [i % self.group_size for i in range(self.num_envs)])

        n = self.num_envs
        self._groups: dict[tuple[int, int], _Group] = {}  # open groups by (lane, round)
        self._next_round = [0] * self.n_lanes  # next round per lane
        self._tasks: dict[tuple[int, int], tuple[int | None, dict[str, Any] | None]] = {}
        self._ep_index = np.zeros(n, dtype=np.int64)  # round of each sub-env's current/next episode
        self._running = np.zeros(n, dtype=bool)  # reset into _ep_index (False: waiting for a reset)
        self._pending_reset = np.zeros(n, dtype=bool)  # NEXT_STEP: the next step resets the sub-env
        self._episodes = [EpisodeTally() for _ in range(n)]
        self._ctx: list[Any] = [None] * n
        self._ctx_predicted = np.zeros(n, dtype=bool)
        self._plans: list[tuple[Route | None, int | None, dict[str, Any] | None] | None] = [None] * n
        self._sent_plans: list[Any] = [object()] * n if (mode == "outcome" or task_fn is not None) else [(None, None, None)] * n
        # sub-envs whose current episode belongs to no group: their lane's next group did not fit in
        # the execution budget while other groups were in flight (ExecutionBudgetWait); they wait
        self._idle = np.zeros(n, dtype=bool)
        # lengths (steps) of the latest training episodes that executed: their residual lengths
        # estimate what the open groups will still execute (for an execution budget)
        self._lengths: deque[int] = deque(maxlen=1024)
        self._started = False
        self._messages: dict[str, str] = {}  # {cause: last error text} for warnings and the stop rule
        self.n_groups_completed = 0
        self.n_groups_abandoned = 0
        self.n_plan_updates = 0
        self.n_idle_executions = 0
        self._prior_cost = self._group_cost_prior()

    def _group_cost_prior(self) -> dict[str, float]:
        """Real executions one group of each route makes, as known before any group closed (what an
        ``execution_budget`` counts the lanes' open groups at; ``CorrectionLoop.open_group``'s
        ``prior_cost``): G × the episode's step limit (the sub-envs' ``spec.max_episode_steps``,
        else a ``TimeLimit``'s, else ``episode_steps``) for an anchor group, and in reward mode
        (every episode executes every step) for a world-model group too; 0 for an outcome-mode
        world-model group."""
        limit = None
        try:
            limit = getattr(self.env.get_attr("spec")[0], "max_episode_steps", None)
            # ``has_wrapper_attr`` first: a failing get_attr would shut an AsyncVectorEnv worker down
            if limit is None and all(bool(x) for x in self.env.call("has_wrapper_attr", "_max_episode_steps")):
                limit = self.env.call("get_wrapper_attr", "_max_episode_steps")[0]
        except Exception:  # noqa: BLE001 - sub-envs that are not gymnasium.Env: no limit known
            limit = None
        steps = float(limit) if isinstance(limit, int) and limit >= 1 else float(self.episode_steps)
        group = self.group_size * steps
        return {ANCHOR: group, WORLD_MODEL: group if self.mode == "reward" else 0.0}

    @property
    def n_groups_open(self) -> int:
        """Groups routed whose episodes have not all finished (nor been abandoned) yet (int)."""
        return len(self._groups)

    # ------------------------------------------------------------------ helpers
    def _has_routed_sub_envs(self) -> bool:
        # ``has_wrapper_attr`` exists on every env, so the probe cannot fail (a failing
        # ``get_attr`` would shut the AsyncVectorEnv worker down)
        try:
            return all(bool(x) for x in self.env.call("has_wrapper_attr", PLAN_ATTR))
        except AttributeError:  # a vector env whose sub-envs are not gymnasium.Env
            return False

    def _task(self, k: int, rnd: int) -> tuple[int | None, dict[str, Any] | None]:
        if self.task_fn is None:
            return (None, None)
        key = (k, rnd)
        if key not in self._tasks:
            out = self.task_fn(k, rnd)
            if out is None:
                out = (None, None)
            if not (isinstance(out, tuple) and len(out) == 2):
                raise TypeError(f"task_fn must return a (seed, options) tuple, got {out!r}")
            self._tasks[key] = (out[0], out[1])
        return self._tasks[key]

    def _open_group(self, k: int, rnd: int) -> _Group | None:
        """The group of round ``rnd`` of lane ``k``, opened now if it is not open (``None``: it does
        not fit in the execution budget while other groups are in flight: its lane waits)."""
        key = (k, rnd)
        rec = self._groups.get(key)
        if rec is not None:
            return rec
        if self.training:
            try:
                # plain sub-envs step whatever their lane does: the budget is kept per vector step
                ticket = self.loop.open_group(prior_cost=self._prior_cost, check_budget=self._routed)
            except ExecutionBudgetWait:
                return None
        else:
            ticket = self.loop.eval_ticket()
        g = self.group_size
        rec = _Group(k, rnd, ticket, [None] * g, [None] * g, [False] * g, members_left=g)
        self._groups[key] = rec
        self._next_round[k] = max(self._next_round[k], rnd + 1)
        return rec

    def _group_of(self, i: int) -> _Group:
        return self._groups[(i // self.group_size, int(self._ep_index[i]))]

    def _join(self, i: int) -> None:
        """Sub-env ``i`` starts an episode of its round's group: open it if needed, or wait (idle)."""
        self._idle[i] = self._open_group(i // self.group_size, int(self._ep_index[i])) is None

    def _update_plan(self, i: int) -> None:
        if not self._use_plans:
            return
        k = i // self.group_size
        rnd = int(self._ep_index[i])
        if self._idle[i]:  # waiting for the budget: placeholder steps, no execution
            route: Route | None = WORLD_MODEL
        else:
            route = self._groups[(k, rnd)].route if self.mode == "outcome" else None
        # same-step autoreset resets inside the step that ends the episode: it needs the NEXT task
        # (an idle episode's end tries the same round again)
        task_round = rnd + 1 if (self._running[i] and not self._idle[i]
                                 and self.autoreset_mode == AutoresetMode.SAME_STEP) else rnd
        seed, options = self._task(k, task_round)
        self._plans[i] = (route, seed, options)

    def _flush_plans(self) -> None:
        if not self._use_plans:
            return
        if any(p != s for p, s in zip(self._plans, self._sent_plans)):
            self.env.set_attr(PLAN_ATTR, list(self._plans))
            self._sent_plans = list(self._plans)
            self.n_plan_updates += 1

    def _new_episode(self, i: int, obs: Any) -> None:
        self._episodes[i] = EpisodeTally(traj=Trajectory(observations=[obs]) if self.mode == "reward" else None)
        self._ctx[i] = obs
        self._ctx_predicted[i] = False

    def _abandon(self, i: int) -> None:
        """The running episode of sub-env ``i`` is dropped (reset before it ended): its group can no
        longer close, and is abandoned in the loop at once (no group left open there)."""
        rec = self._groups.get((i // self.group_size, int(self._ep_index[i])))
        if rec is None:
            return
        self._abandon_in_loop(rec, "reset")
        rec.members_left -= 1
        self._retire(rec)

    def _abandon_in_loop(self, rec: _Group, cause: str, requeue: bool = False) -> None:
        """Mark ``rec`` abandoned and drop it from the loop (once): not in flight for the budget nor
        open in ``loop.stats()``, counted in ``groups_abandoned`` by ``cause``; its ended episodes
        leave ``loop.n_episodes``."""
        if rec.abandoned:
            return
        rec.abandoned = True
        if not rec.evaluating:
            self.loop.abandon_group(rec.ticket, episodes=sum(rec.finished), cause=cause, requeue=requeue)

    def close(self, **kwargs: Any) -> None:
        """Close the vector env; the groups still open are abandoned first (cause ``"closed"``), so
        none stays open in the loop (a shared loop's budget and stats)."""
        groups = getattr(self, "_groups", {})  # (a wrapper whose __init__ raised has none)
        for key in sorted(groups):
            self._abandon_in_loop(groups[key], "closed")
        groups.clear()
        self._started = False
        super().close(**kwargs)

    def _retire(self, rec: _Group) -> None:
        if rec.members_left > 0:
            return
        del self._groups[(rec.lane, rec.round)]
        if rec.abandoned:
            self.n_groups_abandoned += 1
        for key in [key for key in self._tasks if key[0] == rec.lane and key[1] <= rec.round]:
            del self._tasks[key]

    # ------------------------------------------------------------------ gym API
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all sub-envs (a new group in every lane), or those in ``options["reset_mask"]``.

        A full reset abandons the unfinished groups (no pairs, no correction; dropped from the
        loop at once, counted in ``loop.stats()["groups_abandoned"]`` under ``"reset"``, their
        ended episodes taken out of ``loop.n_episodes``); the routes of
        those of which no episode had finished go back to the front of the route queue. With
        ``options={"reset_mask": mask}`` (``np.bool_`` array of shape ``(num_envs,)``; needed
        with ``AutoresetMode.DISABLED``) only the masked sub-envs start their next episode; a
        masked sub-env whose episode was still running abandons it (its group gets no
        correction).

        Args:
            seed: ``None``, an int (sub-env ``i`` of lane ``k`` gets ``seed + k``) or a list of
                ``num_envs`` seeds; overrides ``task_fn``'s seed for this reset. A seeded
                sub-env then draws from its member's own stream (module docstring, "random
                streams"): one task per lane, G outcome-noise streams.
            options: reset options (overrides ``task_fn``'s for this reset), may hold
                ``"reset_mask"``.

        Returns:
            ``(observations, infos)``; ``infos["wmrl"]`` as in :meth:`step` (route, group ids).
        """
        n, g = self.num_envs, self.group_size
        options = dict(options) if options is not None else None
        mask = options.get("reset_mask") if options is not None else None
        if isinstance(seed, (int, np.integer)):
            seed = [int(seed) + i // g for i in range(n)]
        if mask is None or not self._started:
            if mask is not None:
                options.pop("reset_mask")
                if not options:
                    options = None
            # unfinished groups are abandoned (in reverse, so that the routes given back lead the
            # queue in their order); a group none of whose episodes ended gives its route back
            for key in sorted(self._groups, reverse=True):
                rec = self._groups[key]
                self._abandon_in_loop(rec, "reset", requeue=not any(rec.finished))
                self.n_groups_abandoned += 1
            self._groups.clear()
            self._tasks.clear()
            for k in range(self.n_lanes):
                rnd = self._next_round[k]
                rec = self._open_group(k, rnd)
                for i in range(k * g, (k + 1) * g):
                    self._ep_index[i] = rnd
                    self._idle[i] = rec is None
                    self._running[i] = False
                    self._pending_reset[i] = False
                    self._update_plan(i)
            self._flush_plans()
            obs, infos = self.env.reset(seed=seed, options=options)
            reset_idx = list(range(n))
        else:
            mask = np.asarray(mask, dtype=bool)
            for i in np.flatnonzero(mask):
                if self._running[i] and not self._idle[i]:  # a running episode is abandoned
                    self._abandon(int(i))
                    self._ep_index[i] += 1
                self._join(int(i))  # its round's group (open, opened now, or waiting for the budget)
                self._running[i] = False
                self._pending_reset[i] = False
                self._update_plan(int(i))
            self._flush_plans()
            obs, infos = self.env.reset(seed=seed, options=options)
            reset_idx = [int(i) for i in np.flatnonzero(mask)]
        self._started = True
        self._seed_plain_streams(seed, reset_idx)
        obs_list = list(iterate(self.observation_space, obs))
        for i in reset_idx:
            self._running[i] = True
            self._new_episode(i, copy_obs(obs_list[i]))
            self._update_plan(i)
        infos = dict(infos)
        infos["wmrl"] = self._base_info()
        infos["wmrl"]["episode_start"] = bool_array(n, reset_idx)
        infos["wmrl"]["_episode_start"] = np.ones(n, dtype=bool)
        return obs, infos

    def _seed_plain_streams(self, seed: Any, reset_idx: list[int]) -> None:
        """Sub-envs without a RoutedSubEnv (reward mode without ``task_fn``) just reset with a seed
        get their member's own stream here (a RoutedSubEnv does it in its own reset)."""
        if self._routed or not isinstance(seed, (list, tuple)):
            return
        seeded = [i for i in reset_idx if seed[i] is not None]
        if not seeded:
            return
        gens = list(self.env.get_attr("np_random"))
        for i in seeded:
            gens[i] = rollout_rng(int(seed[i]), i % self.group_size)
        self.env.set_attr("np_random", gens)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env; world-model routes are scored by the world model.

        Args:
            actions: batched actions (``action_space``).

        Returns:
            ``(observations, rewards, terminations, truncations, infos)`` as the vector env
            returns them (rewards ``float64 (num_envs,)``), with world-model routes' rewards and
            observations replaced, withheld keys cleared, and ``infos["wmrl"]``: a dict of
            arrays of shape ``(num_envs,)`` with ``_key`` masks —

            * always present (mask all ``True``): ``route`` (object: ``"anchor"`` /
              ``"world_model"``), ``lane`` and ``round`` (the group's lane and its round in the
              lane) and ``episode_in_group`` (int64), ``advantage_weight`` (float64: ρ known when
              the group was routed on
              anchors, 1.0 on world-model routes), ``rho`` (float64, current ρ),
              ``episode_start`` (bool: the sub-env was reset in this step, next-step autoreset),
              ``group_complete`` (bool: this sub-env's episode completed its group and the
              correction ran), ``budget_wait`` (bool: the sub-env's episode belongs to no group,
              its lane waits for the execution budget; ``route``, ``group_id`` and
              ``advantage_weight`` are masked off there, its reward is 0: drop it);
            * ``group_id`` (int64; masked off while evaluating);
            * at the step that ends an episode (outcome mode also at every step, for
              ``raw_score``): ``raw_score``, ``calibrated_score``, ``real_score`` (float64;
              masked off when missing: not graded, or ``real_score`` on world-model routes),
              ``graded`` (bool; ``False`` = ungraded rollout: drop it, do not train on a zero),
              ``ungraded_cause`` (object: ``None`` or the cause, see :mod:`wmrl_envs.core.ungraded`);
            * ``group_disagreement`` (float64) where ``group_complete`` and ``s²`` was defined;
            * outcome mode, world-model routes: ``feedback``, ``status`` (object) of the prediction.

            With same-step autoreset the ``wmrl`` entries of a sub-env whose episode ended
            describe the ended episode (its route, scores), like the reward returned with them.

        Raises:
            RuntimeError: ``step`` before ``reset`` (or after a vector step that raised), or
                (disabled autoreset) a sub-env whose episode ended was not reset with
                ``reset(options={"reset_mask": ...})``.
            ExecutionBudgetSpent: ``anchor_fraction="auto"``, ``on_budget_spent="stop"``: the
                budget is spent (class docstring, "Execution budget"); the groups still open are
                abandoned.
            Exception: whatever the vector env's ``step`` raised, after the open groups were
                closed as ungraded (``execution_error``; ``TooManyUngradedError`` from it when the
                stop rule fires).
        """
        if not self._started:
            raise RuntimeError("step() called before reset(); call reset() first")
        n, g = self.num_envs, self.group_size
        waiting = ~self._running & ~self._pending_reset
        if waiting.any():
            raise RuntimeError(
                f"sub-envs {np.flatnonzero(waiting).tolist()} ended their episodes and wait for a reset: "
                "with AutoresetMode.DISABLED call reset(options={'reset_mask': mask}) first"
            )
        self._flush_plans()
        resetting = self._pending_reset.copy()
        stepped = [i for i in range(n) if not resetting[i]]
        act_list = list(iterate(self.action_space, actions)) if stepped else []
        preds: dict[int, WorldModelPrediction] = {}
        if self.mode == "outcome":
            # outcome mode: ONE batched predict for this vector step, before the step (it needs only
            # each episode's context and action), so that a prediction that ends a world-model
            # episode (`terminated`) reaches its RoutedSubEnv before the placeholder step
            preds = self._predict_outcomes(stepped, act_list)
        if not self._routed and self.training and stepped and self._budget_stops():
            self._check_step_fits(len(stepped))
        sw = Stopwatch()
        try:
            obs, rewards, terms, truncs, infos = self.env.step(actions)
        except Exception as exc:
            wall, step_cpu = sw.read()
            self._fail_step(exc, stepped, wall, step_cpu)  # may raise TooManyUngradedError (from exc)
            raise
        wall, step_cpu = sw.read()
        terms = np.asarray(terms, dtype=bool)
        truncs = np.asarray(truncs, dtype=bool)
        infos = dict(infos)
        same_step = self.autoreset_mode == AutoresetMode.SAME_STEP
        st = VectorStep(stepped, act_list, list(iterate(self.observation_space, obs)),
                        np.array(rewards, dtype=np.float64, copy=True), terms | truncs, infos,
                        infos.get("final_info") if same_step else None, infos.get("final_obs") if same_step else None,
                        same_step, InfoBuilder(n))
        self._record_executions(st, wall, step_cpu)  # each real step's cost, for its lane's group
        preds.update(self._advance_episodes(st))  # reward mode: ONE batched predict over the ended episodes
        for i in stepped:
            self._fold_step(st, i, preds.get(i))
        self._close_ended(st)
        for i in stepped:
            if not st.done[i]:
                self._fill_info(st.w, i)
        self._start_next_episodes(st, resetting)  # after the corrections: new routes see the updated ρ
        self._expect_in_flight()
        w = st.w
        for key in ("episode_start", "group_complete", "budget_wait"):
            w.ensure(key, bool)
        for i in st.completed:
            w.set("group_complete", i, True, bool)
        w.fill("rho", self.loop.rho, np.float64)
        if st.replacements:
            items = [st.replacements.get(i, st.obs_list[i]) for i in range(n)]
            obs = concatenate(
                self.single_observation_space, items, create_empty_array(self.single_observation_space, n)
            )
        if same_step and st.final_obs is not None:
            infos["final_obs"] = st.final_obs
        infos["wmrl"] = w.build()
        return obs, st.rewards, terms, truncs, infos

    def _expect_in_flight(self) -> None:
        """With an execution budget (RoutedSubEnv lanes): tell the loop what each open training group
        will still execute (:meth:`CorrectionLoop.expect_executions`): for each member not finished,
        the mean residual length of the episodes seen so far that ran longer than its episode has
        (all of it for a member not started; at least one step). A group whose episodes run longer
        than its route's mean price then still counts in flight."""
        a = self.loop.adaptive
        if not self._routed or not self._lengths or a is None or a.execution_budget is None:
            return
        for rec, left in self._members_left():
            self.loop.expect_executions(rec.ticket, float(sum(left)))

    def _budget_stops(self) -> bool:
        """Whether an execution budget stops the run (``anchor_fraction="auto"``, an
        ``execution_budget``, ``on_budget_spent="stop"``)."""
        a = self.loop.adaptive
        return a is not None and a.execution_budget is not None and a.on_budget_spent == "stop"

    def _members_left(self) -> list[tuple[_Group, list[float]]]:
        """For each open training group that executes, the steps each unfinished member is expected
        to run still: the mean residual length of the training episodes seen (``_lengths``) that ran
        longer than its episode has so far (all of it for a member not started; at least one step)."""
        lengths = np.asarray(self._lengths, dtype=np.float64)
        cache: dict[int, float] = {}

        def residual(t: int) -> float:
            if t not in cache:
                longer = lengths[lengths > t]
                cache[t] = float(longer.mean() - t) if longer.size else 1.0
            return cache[t]

        g = self.group_size
        out = []
        for rec in self._groups.values():
            if rec.abandoned or rec.evaluating or (self.mode == "outcome" and rec.route != ANCHOR):
                continue
            left = []
            for m in range(g):
                if rec.finished[m]:
                    continue
                i = rec.lane * g + m
                started = int(self._ep_index[i]) == rec.round and self._running[i] and not self._idle[i]
                left.append(residual(self._episodes[i].steps if started else 0))
            out.append((rec, left))
        return out

    def _check_step_fits(self, executions: int) -> None:
        """Plain sub-envs (no RoutedSubEnv) all execute at every vector step, whatever their lane
        does, so a lane gains nothing by waiting: their lanes never wait, and the execution budget
        stops the run before the first vector step it cannot pay, or (once episodes have ended,
        so that their lengths are known) before the steps that the first open group still needs
        to close, all sub-envs executing, go past it: nothing it executes then could be trained
        on. The open groups are abandoned then (cause ``"budget"``)."""
        steps = 1
        if self._lengths:
            ahead = [max(left) for _, left in self._members_left() if left]
            steps = max(1, math.ceil(min(ahead) - 1e-9)) if ahead else 1
        try:
            self.loop.check_executions_fit(executions * steps)
        except ExecutionBudgetSpent:
            for key in sorted(self._groups):
                self._abandon_in_loop(self._groups[key], "budget")
            raise

    def _predict_outcomes(self, stepped: list[int], act_list: list[Any]) -> dict[int, WorldModelPrediction]:
        """Outcome mode: the world model's predictions for the sub-envs about to step (one batched
        ``predict`` over those whose route calls it); a world-model episode whose prediction says
        ``terminated`` is told to end in this step (:data:`~wmrl_envs.wrappers.routed_sub_env.END_ATTR`)."""
        idx = [i for i in stepped if not self._idle[i] and self.loop.calls_world_model(
            self._group_of(i).ticket.route, self._group_of(i).ticket.training)]
        if not idx:
            return {}
        preds = dict(zip(idx, self.loop.predict([self._ctx[i] for i in idx], [act_list[i] for i in idx])))
        end = [False] * self.num_envs
        for i, p in preds.items():
            end[i] = bool(p.terminated) and self._group_of(i).route == WORLD_MODEL
        if any(end):
            self.env.set_attr(END_ATTR, end)
        return preds

    # ------------------------------------------------------------------ infos
    def _fill_info(self, w: InfoBuilder, i: int) -> None:
        """Sub-env ``i``'s base entries: its group's, or (waiting for the budget) ``budget_wait``
        with its lane and round, and no route, group id or weight (masked off)."""
        if not self._idle[i]:
            self._fill_base(w, i, self._group_of(i))
            return
        k = i // self.group_size
        w.set("lane", i, k, np.int64)
        w.set("round", i, int(self._ep_index[i]), np.int64)
        w.set("episode_in_group", i, i - k * self.group_size, np.int64)
        w.set("budget_wait", i, True, bool)
        for key, dtype in (("route", object), ("group_id", np.int64), ("advantage_weight", np.float64)):
            w.ensure(key, dtype)

    def _fill_base(self, w: InfoBuilder, i: int, rec: _Group) -> None:
        t = rec.ticket
        w.set("route", i, t.route, object)
        w.set("lane", i, rec.lane, np.int64)
        w.set("round", i, rec.round, np.int64)
        w.set("episode_in_group", i, i - rec.lane * self.group_size, np.int64)
        if t.group_id is not None:
            w.set("group_id", i, t.group_id, np.int64)
        else:
            w.ensure("group_id", np.int64)
        w.set("advantage_weight", i, t.rho if t.route == ANCHOR else 1.0, np.float64)

    def _base_info(self) -> dict[str, Any]:
        w = InfoBuilder(self.num_envs)
        for i in range(self.num_envs):
            self._fill_info(w, i)
        w.fill("rho", self.loop.rho, np.float64)
        w.ensure("group_complete", bool)
        w.ensure("budget_wait", bool)
        return w.build()

    # ------------------------------------------------------------------ state
    def _extra_state(self) -> dict[str, Any]:
        # unfinished groups are not part of the state: save between full resets
        return {"n_groups_completed": self.n_groups_completed, "next_round": list(self._next_round)}

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        """After the loop's state: the lanes' counters; call :meth:`reset` afterwards."""
        self.n_groups_completed = int(state["n_groups_completed"])
        self._next_round = [int(x) for x in state["next_round"]]
        self._groups.clear()
        self._tasks.clear()
        self._started = False
