"""The group API of :class:`~wmrl_envs.wrappers.anchored.AnchoredWorldModelWrapper`: a whole group
scored at once (``begin_group``, ``score_group``, ``score_trajectories``) by the loop's one group
call sequence, :meth:`CorrectionLoop.score_group <wmrl_envs.core.CorrectionLoop.score_group>`;
and :func:`real_step`, one real step whose unavailable sandbox becomes an ungraded step.
"""

from __future__ import annotations

import copy
import logging
import time
import warnings
from typing import Any, Sequence

import gymnasium as gym

from wmrl_envs.core import ANCHOR, WORLD_MODEL, Route
from wmrl_envs.core.group import AnchorExecution, GroupRollout, GroupTicket, real_score
from wmrl_envs.core.ledger import Stopwatch, execution_cpu_seconds, reported_execution_cost
from wmrl_envs.core.ungraded import CAUSE_KEY, EXECUTION_ERROR, SANDBOX_UNAVAILABLE, execution_cause
from wmrl_envs.world_models.base import Trajectory

from .rollout_streams import seed_rollout

__all__ = ["GroupAPI", "real_step"]

logger = logging.getLogger(__name__)


def real_step(env: gym.Env, action: Any, fallback_obs: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
    """``env.step(action)``; a ``SandboxUnavailableError`` it raises becomes an ungraded,
    terminated step (``info["graded"] = False``, cause ``"sandbox_unavailable"``)."""
    from wmrl_envs.sandbox.base import SandboxUnavailableError

    try:
        obs, reward, terminated, truncated, info = env.step(action)
    except SandboxUnavailableError as exc:
        msg = f"{type(exc).__name__}: {exc}"
        logger.warning("real step ungraded (%s): %s", SANDBOX_UNAVAILABLE, msg)
        return copy.deepcopy(fallback_obs), None, True, False, {
            "graded": False, CAUSE_KEY: SANDBOX_UNAVAILABLE, "status": "ungraded", "error": msg,
        }
    return obs, reward, terminated, truncated, dict(info)


class GroupAPI:
    """Mixed into :class:`~wmrl_envs.wrappers.anchored.AnchoredWorldModelWrapper` (uses its env,
    ``execution_envs``, mode, loop and per-episode state)."""

    def _check_no_episode_group(self, what: str) -> None:
        t = self._ticket
        if t is not None and t.training and 0 < self._episode_in_group < self.group_size:
            raise RuntimeError(
                f"{what} called while a per-episode group is in progress "
                f"({self._episode_in_group}/{self.group_size} episodes); finish it first"
            )

    def begin_group(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset the inner env once for the next group and return its task context.

        The observation is what the policy is prompted with and what the world model conditions
        on; a following :meth:`score_group` called without ``seed``/``options`` scores the
        group on this context without resetting the inner env again for rollout 0 (rollouts
        executed on ``execution_envs`` or after the first are reset with the same arguments).
        A per-episode :meth:`reset` discards it.

        Args:
            seed, options: reset arguments of the group's task.

        Returns:
            ``(observation, info)`` of the inner env's reset.

        Raises:
            RuntimeError: a per-episode group is in progress.
            ValueError: not in outcome mode.
        """
        if self.mode != "outcome":
            raise ValueError("begin_group() prepares a score_group() group (outcome mode)")
        self._check_no_episode_group("begin_group()")
        obs, info = self.env.reset(seed=seed, options=options)
        self._begun = (seed, options, obs)
        return obs, info

    def score_group(
        self,
        actions: Sequence[Any],
        *,
        seed: int | None = None,
        options: dict[str, Any] | None = None,
        route: Route | None = None,
        context: Any | None = None,
    ) -> GroupRollout:
        """Score a whole group of single-step episodes at once (one action per rollout).

        The group is routed like any other (the loop's schedule, or ``route`` to force one);
        world-model inference runs as ONE batched ``predict`` call; on anchor groups each
        action is also executed for real (``reset(seed, options)`` then ``step``; after
        :meth:`begin_group` without ``seed``/``options``, rollout 0 steps the env as
        ``begin_group`` left it). With a seed, rollout ``i`` steps with its own ``np_random``,
        :func:`~wmrl_envs.wrappers.rollout_streams.rollout_rng` ``(seed, i)``: one task, G
        outcome-noise streams, the same G for the same seed (whichever of ``env`` and
        ``execution_envs`` runs it). The corrections are applied and updated exactly as in the
        per-episode API.

        Args:
            actions: the G actions of the group (G = ``len(actions)``, need not equal
                ``group_size``).
            seed, options: reset arguments shared by the group (given: a new reset, and any
                :meth:`begin_group` context is dropped).
            route: force ``"anchor"``/``"world_model"`` (e.g. evaluation); bypasses the router.
            context: the group's task context, the observation an earlier :meth:`begin_group`
                with these ``seed``/``options`` returned (pass them too, unless it is the
                context of the latest :meth:`begin_group`) — for loops that begin every group of a
                step (to build the prompts) before scoring any. The world model conditions on
                it, and the inner env is reset only if the group is executed (an anchor group):
                a world-model group never touches the inner env.

        Returns:
            A :class:`GroupRollout`.

        Raises:
            RuntimeError: a per-episode group is in progress.
            ValueError: not in outcome mode, empty ``actions``, an unknown ``route``, a
                world-model route without a world model, or ``context`` without the
                ``seed``/``options`` it was begun with.
            TooManyUngradedError: the stop rule fired (the group is scored and counted first).
        """
        if self.mode != "outcome":
            raise ValueError(
                "score_group() executes single-step actions (outcome mode); in reward mode roll the "
                "episodes out in the env and score them with score_trajectories()"
            )
        self._check_no_episode_group("score_group()")
        if len(actions) == 0:
            raise ValueError("score_group() needs at least one action")
        if route is not None and route not in (ANCHOR, WORLD_MODEL):
            raise ValueError(f"route must be 'anchor' or 'world_model', got {route!r}")
        self._reset_group_state()
        g = len(actions)
        begun, self._begun = self._begun, None
        env_ready = True  # the inner env stands at this group's task (for rollout 0)
        if context is not None:
            if seed is None and options is None:
                if begun is None or begun[2] is not context:
                    raise ValueError(
                        "score_group(context=...) needs the seed=/options= that begin_group() was called with "
                        "for this context: an anchor group is executed on the inner env reset with them"
                    )
                seed, options, ctx = begun
            else:
                ctx, env_ready = context, False
        elif begun is not None and seed is None and options is None:
            seed, options, ctx = begun
        else:
            ctx, _ = self.env.reset(seed=seed, options=options)
        # the loop predicts before routing (a broken world model consumes no route and no group
        # id), routes, calls execute on an anchor group only, and closes the group

        def execute(ticket: GroupTicket) -> AnchorExecution:
            if not env_ready:
                self.env.reset(seed=seed, options=options)
            t_group = time.perf_counter()
            outcomes = self._execute_group(list(actions), seed, options, ctx)
            exec_secs = time.perf_counter() - t_group
            real, causes, infos = [], [], []
            for _obs, reward, info, _dt, _cpu in outcomes:
                score, cause, message = real_score(reward, info)  # info["step_score"] where the env gives one
                info = dict(info)
                if cause is not None and cause != execution_cause(reward, info):  # a bad step_score
                    info.update({CAUSE_KEY: cause, "message": message})
                real.append(score)
                causes.append(cause)
                infos.append(info)
            return AnchorExecution(
                real=real, causes=causes, observations=[o[0] for o in outcomes], infos=infos, seconds=exec_secs,
                record=[(dt, execution_cpu_seconds(info, cpu), reported_execution_cost(info))
                        for _obs, _r, info, dt, cpu in outcomes])

        return self.loop.score_group([ctx] * g, list(actions), execute, route=route,
                                     on_eval_anchors=self.eval_with_world_model)

    def _execute_group(
        self, actions: list[Any], seed: int | None, options: dict[str, Any] | None, ctx: Any
    ) -> list[tuple[Any, Any, dict, float, float]]:
        """Real steps of an anchor group: rollout i on env ``i % n`` of ``[env, *execution_envs]``
        (threads when n > 1; ``env`` is already reset for rollout 0). Returns per rollout
        ``(obs, reward, info, seconds, measured_cpu_seconds)``: the CPU measured around its step
        (:class:`~wmrl_envs.core.Stopwatch`), or with threads, where the rollouts' steps
        overlap, the group's CPU divided evenly among its rollouts (charged only for the
        rollouts whose env reports no ``info["execution_cpu_s"]``). A step that raises (other than
        a ``SandboxUnavailableError``) leaves its rollout ungraded with cause ``"execution_error"``
        (logged, counted, toward the stop rule; the execution is charged) and the group's other
        rollouts go on: counted, not re-raised, as on the Ray pool."""
        envs = [self.env, *self.execution_envs]
        g = len(actions)
        if g > 1 and seed is None and options is None and not self._warned_unfixed_task:
            self._warned_unfixed_task = True
            warnings.warn(
                "an anchor group is executed without reset arguments: its rollouts after the first reset "
                "the inner env with seed=None, options=None, which gives them one task only if the env has "
                "a single one; pass seed= or options= to begin_group()/score_group() to fix the group's task",
                UserWarning, stacklevel=3,
            )

        def execute(i: int) -> tuple[Any, Any, dict, float, float]:
            e = envs[i % len(envs)]
            if i > 0:  # self.env was reset for rollout 0
                e.reset(seed=seed, options=options)
            seed_rollout(e, seed, i)  # the group's task, rollout i's own random stream
            sw = Stopwatch()
            try:
                obs, reward, _term, _trunc, info = real_step(e, actions[i], ctx)
            except Exception as exc:  # the env's step raised: this rollout is ungraded, counted, the group goes on
                wall, cpu = sw.read()
                msg = f"{type(exc).__name__}: {exc}"
                logger.warning("real step ungraded (%s): %s", EXECUTION_ERROR, msg)
                return copy.deepcopy(ctx), None, {"graded": False, CAUSE_KEY: EXECUTION_ERROR, "status": "ungraded",
                                                  "error": msg}, wall, cpu
            wall, cpu = sw.read()
            return obs, reward, info, wall, cpu

        if len(envs) == 1:
            return [execute(i) for i in range(g)]
        from concurrent.futures import ThreadPoolExecutor

        # rollout i runs on env i % n; each env runs its rollouts in order
        def lane(k: int) -> list[tuple[int, tuple]]:
            return [(i, execute(i)) for i in range(k, g, len(envs))]

        group_sw = Stopwatch()
        with ThreadPoolExecutor(max_workers=len(envs)) as pool:
            lanes = list(pool.map(lane, range(len(envs))))
        share = group_sw.read()[1] / g  # process CPU of overlapping steps: split, not summed
        outs = [o for _, o in sorted((x for ln in lanes for x in ln), key=lambda t: t[0])]
        return [(obs, reward, info, wall, share) for obs, reward, info, wall, _ in outs]

    def score_trajectories(
        self,
        contexts: Sequence[Any],
        trajectories: Sequence[Trajectory],
        real_returns: Sequence[float | None],
        *,
        route: Route | None = None,
    ) -> GroupRollout:
        """Reward mode: score a whole group of finished episodes rolled out elsewhere.

        For GRPO loops that roll a group's G episodes out themselves (e.g. in a Gymnasium
        vector env, all from one initial state; after resetting episode ``i`` with the group's
        seed, :func:`~wmrl_envs.wrappers.rollout_streams.seed_rollout` gives it its own random
        stream, as :meth:`score_group` does): the group is routed like any other, the world
        model scores all G trajectories in ONE batched ``predict`` call, and the training
        rewards are the real returns on anchor groups and the calibrated world-model scores
        ``f̂(r̂)`` on world-model groups — where ``real_returns`` are never used (neither as
        reward nor as a pair): they stay withheld, as in the per-episode API.

        Args:
            contexts: G reset observations (what the world model conditions on, e.g. the
                instruction); one per trajectory.
            trajectories: G :class:`~wmrl_envs.world_models.Trajectory` (``done=True``).
            real_returns: G real episode returns (e.g. sparse success 0/1; ``None`` = could not
                be graded).
            route: force ``"anchor"``/``"world_model"``; bypasses the router.

        Returns:
            A :class:`GroupRollout` (``observations`` = the final observations; ``infos``
            carry ``info["wmrl"]``; the world-model predictions keep dense per-frame values in
            their ``extras`` when the world model gives them).

        Raises:
            ValueError: not in reward mode, empty group, mismatched lengths, unknown route.
        """
        if self.mode != "reward":
            raise ValueError("score_trajectories() is for reward mode; outcome-mode groups use score_group()")
        g = len(trajectories)
        if g == 0:
            raise ValueError("score_trajectories() needs at least one trajectory")
        if len(contexts) != g or len(real_returns) != g:
            raise ValueError(
                f"got {len(contexts)} contexts, {g} trajectories and {len(real_returns)} real returns; "
                "pass one of each per episode of the group"
            )
        if route is not None and route not in (ANCHOR, WORLD_MODEL):
            raise ValueError(f"route must be 'anchor' or 'world_model', got {route!r}")
        self._reset_group_state()
        trajs = [Trajectory(list(t.observations), list(t.actions), True) for t in trajectories]
        finals = [t.observations[-1] if t.observations else None for t in trajectories]

        def execute(ticket: GroupTicket) -> AnchorExecution:  # executed already: the real returns
            return AnchorExecution(real=[None if x is None else float(x) for x in real_returns],
                                   causes=[execution_cause(x, None) for x in real_returns])

        # real_returns reach the loop on anchor groups only; a world model that learns from anchors
        # is taught with the episodes (reward mode: the trajectories)
        return self.loop.score_group(list(contexts), trajs, execute, route=route,
                                     on_eval_anchors=self.eval_with_world_model, observations=finals,
                                     keep_actions=False)
