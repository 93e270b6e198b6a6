"""``AnchoredWorldModelWrapper``: the WMRL method as a Gymnasium wrapper around an expensive env.

Episodes come in *groups* of ``group_size`` consecutive episodes that share their reset
arguments (the G rollouts GRPO samples for one task); each group is routed as a whole to real
execution (``anchor``) or to the world model, by the wrapper's
:class:`~wmrl_envs.core.CorrectionLoop`, which also calibrates, updates ρ and the debiaser and
accounts ungraded rollouts. This module is the Gymnasium plumbing around that loop: the
per-episode API (``reset``/``step``, outcome and reward mode), the group API
(:meth:`AnchoredWorldModelWrapper.begin_group`, :meth:`~AnchoredWorldModelWrapper.score_group`)
and, in reward mode, :meth:`~AnchoredWorldModelWrapper.score_trajectories` for groups rolled out
elsewhere. The method itself is in ``docs/method.md``.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Any, Generic, Literal, Mapping, Sequence, SupportsFloat, TypeVar

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec
from gymnasium.utils.env_checker import data_equivalence

from wmrl_envs.core import ANCHOR, WORLD_MODEL, CorrectionConfig, CostLedger, GroupCorrection, Route
from wmrl_envs.core.ledger import Stopwatch, execution_cpu_seconds, reported_execution_cost
from wmrl_envs.core.loop import CorrectionLoop, GroupTicket, rollout_cause, score_failure
from wmrl_envs.core.ungraded import CAUSE_KEY, EXECUTION_ERROR, execution_cause
from wmrl_envs.utils import user_stacklevel
from wmrl_envs.world_models.base import Trajectory, WorldModel, WorldModelPrediction

from .common import (
    EpisodeTally,
    GroupRollout,
    LoopState,
    build_loop,
    reject_removed_kwargs,
    check_episode_args,
    learning_inputs,
)
from .group_api import GroupAPI, real_step
from .rollout_streams import seed_rollout

__all__ = ["AnchoredWorldModelWrapper", "GroupRollout"]

ObsType = TypeVar("ObsType")
ActType = TypeVar("ActType")


class AnchoredWorldModelWrapper(
    gym.Wrapper[ObsType, ActType, ObsType, ActType], gym.utils.RecordConstructorArgs, LoopState, GroupAPI,
    Generic[ObsType, ActType],
):
    """Route whole groups of episodes to real execution (anchors) or to a world model.

    Args:
        env: the expensive env. Its ``step`` is the real execution.
        world_model: a :class:`~wmrl_envs.world_models.WorldModel` (batched
            ``predict(contexts, actions)``). ``None`` is allowed only with
            ``correction=CorrectionConfig(anchor_fraction=1.0)`` (plain real-execution GRPO, no
            world-model calls).
        group_size: G, consecutive episodes per group (they share reset arguments).
        mode: ``"outcome"`` (world-model episodes never call the inner ``step``; the world
            model predicts the outcome of each action) or ``"reward"`` (the inner env steps for
            the dynamics in every episode; the world model is a reward model that scores the
            episode's :class:`~wmrl_envs.world_models.Trajectory`; on world-model episodes the
            real reward and the ``withheld_info_keys`` of ``info`` are withheld from the agent).
        reward_timing: reward mode only. ``"episode"`` (default): the world-model reward is
            paid at the episode's last step, ``f̂(r̂)`` of the whole trajectory (0 before).
            ``"dense"``: the world model also scores the trajectory so far every
            ``dense_every`` steps and pays the increments ``f̂(r̂_t) − f̂(r̂_{t'})`` (potential-
            based shaping; the episode's rewards sum to ``f̂(r̂_T)`` as in ``"episode"``).
        dense_every: steps between world-model calls with ``reward_timing="dense"``.
        withheld_info_keys: reward mode: ``info`` keys removed on world-model episodes (they
            reveal the real outcome; default ``("success", "is_success")``).
        groups_per_step: groups per training step for the anchor schedule (at least
            ``correction.min_anchor_groups`` anchors among each window of ``correction.anchor_window``
            blocks of this many groups; default window 1 block). Default:
            ``ceil(1 / correction.anchor_fraction)`` (one anchor group per block at f = 0.1).
        episode_steps: steps after which a world-model episode terminates (outcome mode;
            AutoResearch: its ``max_turns``, default 1); it ends earlier at a step whose
            prediction has ``terminated=True`` (the real env's own ending, predicted).
        episode_score: outcome mode: how an episode's per-step scores make its score, on both
            routes alike: ``"max"`` (AutoResearch: max over turns), ``"last"`` or ``"sum"``. The
            world model's per-step predictions give the world-model score; the real steps' scores
            give the real score of an anchor episode — each step's ``info["step_score"]``
            (:data:`~wmrl_envs.wrappers.common.STEP_SCORE_KEY`) where the env reports one
            (AutoResearch does: its reward is the improvement of the best score), else its reward.
            (Reward mode: the real score is the return, the world model scores the trajectory.)
        seed: seed of the anchor router.
        ledger: a :class:`~wmrl_envs.core.CostLedger` to record into (default: a new one).
            Each real step is charged its wall-clock seconds and CPU-seconds to
            ``"execution"``: the env's ``info["execution_cpu_s"]`` when it reports one
            (measured or declared), else the CPU measured around the step
            (:func:`~wmrl_envs.core.execution_cpu_seconds`; ``docs/method.md``, "Cost accounting").
        eval_route: route of every episode while ``training`` is ``False`` (default
            ``"anchor"``: evaluation on real scores).
        eval_with_world_model: while evaluating on ``"anchor"``, also call the world model
            (to log its scores); default ``False`` (evaluation pays only for execution).
        execution_envs: extra instances of the same env; :meth:`score_group` then executes
            an anchor group's rollouts concurrently on ``env`` and these (threads; use it when
            the real step runs out of process, e.g. in a sandbox). The ledger still records
            each execution's own seconds; the group's wall-clock shrinks. The steps overlap, so
            an env that reports no ``info["execution_cpu_s"]`` is charged the group's process
            CPU split evenly among its rollouts.
        world_model_timeout_s: seconds one batched ``world_model.predict`` call may take
            (``None``: no limit). A call past it leaves its batch ungraded (cause
            ``"world_model_timeout"``); see :func:`predict_checked` for what happens to the
            thread of a hung call.
        max_ungraded_share: the stop rule (``docs/method.md``, "Ungraded rollouts"): once this
            share of one training step's rollouts (``groups_per_step`` groups, or the
            ``groups_in_step`` of :meth:`plan_step`) is ungraded because the machinery failed,
            :class:`~wmrl_envs.core.TooManyUngradedError` is raised (default 0.5; ``None``:
            never stop).
        correction: the correction settings, a :class:`~wmrl_envs.core.CorrectionConfig`
            (anchor fraction and schedule, debiaser, denoiser; default ``CorrectionConfig()``).
            The settings come this one way: the former keyword arguments ``anchor_fraction``,
            ``min_anchor_groups``, ``debiaser_kwargs``, ``denoiser_kwargs`` and ``corrector``
            raise a ``TypeError`` that says how to write them.
        loop: a :class:`~wmrl_envs.core.CorrectionLoop` to use instead (e.g. one shared by several
            wrappers, whose routes, counts and corrections then add up, or one built with a custom
            ``corrector``); the loop's own settings are used (``groups_per_step``, ``seed``,
            ``eval_route``, ``world_model_timeout_s``, ``max_ungraded_share`` are ignored);
            excludes ``correction`` and ``ledger``; ``world_model`` must be ``None`` or the loop's.

    Attributes:
        n_groups_abandoned: training groups dropped by a reset with other arguments in their
            middle (:meth:`reset`; int).
        loop: the :class:`~wmrl_envs.core.CorrectionLoop`, the one place to read the method's
            state: ``loop.router``, ``loop.corrector``, ``loop.ledger``, ``loop.ungraded``,
            ``loop.rho``, ``loop.world_model``, and :meth:`CorrectionLoop.stats
            <wmrl_envs.core.CorrectionLoop.stats>` (the flat dict a trainer logs). The wrapper
            keeps two shortcuts, ``training`` (read/write) and :meth:`plan_step`.
        last_group: the :class:`~wmrl_envs.core.GroupCorrection` of the last training group the
            per-episode API closed (``None`` before): its ``rewards`` are the group's training
            rewards as :meth:`score_group` would return them (calibrated at the group's close),
            for loops that roll multi-step episodes out one by one and then take a GRPO step.

    ``info["wmrl"]`` (every step; the group APIs: every rollout):
        ``route``, ``group_id`` (``None`` while evaluating in the per-episode API),
        ``episode_in_group``, ``raw_score`` (world model), ``calibrated_score`` (``f̂(r̂)``),
        ``real_score`` (anchors), ``graded``, ``ungraded_cause`` and ``advantage_weight`` (ρ at
        routing on anchor groups, 1.0 otherwise: what a GRPO learner multiplies into the
        group's advantages); the step that closes a group adds ``group_disagreement`` (``s²``).

    Ungraded rollouts (:mod:`wmrl_envs.core.ungraded`):
        A sandbox failure (the env reports ``info["graded"] = False`` and
        ``info["ungraded_cause"]``, or its ``step`` raises ``SandboxUnavailableError``), a world
        model that raises, times out or returns a non-finite score leave the rollout
        ungraded: reward ``None`` in the group APIs (``0.0`` with ``info["wmrl"]["graded"] =
        False`` in the per-episode API), cause in ``info["wmrl"]["ungraded_cause"]``, out of
        the anchor pairs and ρ, counted in ``ledger`` (``"ungraded:<cause>"``) and in
        ``loop.ungraded`` (an :class:`~wmrl_envs.core.UngradedMonitor`), warned about.

    One task, G random streams (``docs/method.md``, "Randomness"):
        Every rollout of a group is reset with the group's ``seed``/``options``: what the
        inner env's ``reset`` draws (the task, the initial state) is shared. After a reset with
        a seed ``s``, rollout ``i`` (its index in :meth:`score_group`, the episode's index in
        its group in the per-episode API) gets its own ``np_random``,
        :func:`~wmrl_envs.wrappers.rollout_streams.rollout_rng` ``(s, i)``, so outcome noise that
        ``step`` draws from ``np_random`` differs between the rollouts and the same seed
        reproduces the same G outcomes. ``seed=None`` leaves the env's generator running.

    Training and evaluation (like ``VecNormalize.training`` in Stable-Baselines3):
        With ``training=True`` the wrapper is deliberately non-stationary: groups advance,
        the router draws routes and the corrections learn. With ``training=False`` it is
        frozen: every episode is routed to ``eval_route``, nothing is updated, the per-episode
        API does no group bookkeeping (``group_id`` is ``None``; the group APIs still number the
        groups they score), so equal seeds and actions give equal results.
        ``gymnasium.utils.env_checker.check_env`` passes in both: while training the spec says
        ``nondeterministic=True`` (so its step-determinism check is skipped; see :attr:`spec`) and
        its seeded resets in the middle of a group abandon that group (:meth:`reset`); frozen, it
        checks determinism too. ``env.spec.make()`` rebuilds the wrapper (the spec records the
        world model).

    Raises:
        ValueError: invalid arguments (each message says which and how to fix it).
        TypeError: a removed correction keyword argument (the message gives its ``CorrectionConfig`` spelling).

    Example:
        >>> import gymnasium as gym
        >>> from wmrl_envs import AnchoredWorldModelWrapper
        >>> from wmrl_envs.core import CorrectionConfig
        >>> from wmrl_envs.world_models import WorldModelPrediction
        >>> class EchoWM:  # predicts the action itself as the score
        ...     def predict(self, contexts, actions):
        ...         return [WorldModelPrediction(score=float(a[0])) for a in actions]
        >>> env = AnchoredWorldModelWrapper(gym.make("wmrl/Guess-v0"), EchoWM(),
        ...                                 group_size=2, correction=CorrectionConfig(anchor_fraction=0.5))
        >>> obs, info = env.reset(seed=0)
        >>> info["wmrl"]["route"] in ("anchor", "world_model")
        True
    """

    def __init__(
        self,
        env: gym.Env[ObsType, ActType],
        world_model: WorldModel | None,
        *,
        group_size: int = 8,
        mode: Literal["outcome", "reward"] = "outcome",
        groups_per_step: int | None = None,
        episode_steps: int = 1,
        episode_score: Literal["max", "last", "sum"] = "max",
        seed: int = 0,
        ledger: CostLedger | None = None,
        eval_route: Route = ANCHOR,
        eval_with_world_model: bool = False,
        execution_envs: Sequence[gym.Env] = (),
        reward_timing: Literal["episode", "dense"] = "episode",
        dense_every: int = 1,
        withheld_info_keys: Sequence[str] = ("success", "is_success"),
        world_model_timeout_s: float | None = None,
        max_ungraded_share: float | None = 0.5,
        correction: CorrectionConfig | None = None,
        loop: CorrectionLoop | None = None,
        **removed: Any,
    ) -> None:
        reject_removed_kwargs("AnchoredWorldModelWrapper", removed)
        # the spec records the world model and a shared loop themselves, not copies (as Gymnasium's
        # wrappers that take a callable record it): env.spec.make() rebuilds this wrapper on them
        gym.utils.RecordConstructorArgs.__init__(
            self,
            _disable_deepcopy=True,
            world_model=world_model,
            group_size=group_size,
            mode=mode,
            groups_per_step=groups_per_step,
            episode_steps=episode_steps,
            episode_score=episode_score,
            seed=seed,
            eval_route=eval_route,
            eval_with_world_model=eval_with_world_model,
            reward_timing=reward_timing,
            dense_every=dense_every,
            withheld_info_keys=tuple(withheld_info_keys),
            world_model_timeout_s=world_model_timeout_s,
            max_ungraded_share=max_ungraded_share,
            correction=correction,
            loop=loop,
        )
        gym.Wrapper.__init__(self, env)
        check_episode_args(mode, group_size, episode_steps, episode_score, world_model=world_model is not None)
        if reward_timing not in ("episode", "dense"):
            raise ValueError(f"reward_timing must be 'episode' or 'dense', got {reward_timing!r}")
        if dense_every < 1:
            raise ValueError(f"dense_every must be >= 1 (steps between world-model calls), got {dense_every}")
        self.loop = build_loop(
            world_model=world_model, groups_per_step=groups_per_step, seed=seed, ledger=ledger, eval_route=eval_route,
            world_model_timeout_s=world_model_timeout_s, max_ungraded_share=max_ungraded_share,
            correction=correction, loop=loop,
        )
        self.group_size = int(group_size)
        self.mode = mode
        self.episode_steps = int(episode_steps)
        self.episode_score = episode_score
        self.eval_with_world_model = bool(eval_with_world_model)
        self.execution_envs = list(execution_envs)
        self.reward_timing = reward_timing
        self.dense_every = int(dense_every)
        self.withheld_info_keys = tuple(withheld_info_keys)
        self._begun: tuple[Any, Any, Any] | None = None  # begin_group(): (seed, options, context)
        self._warned_unfixed_task = False  # warned once: an anchor group executed without reset arguments
        self.last_group: GroupCorrection | None = None
        self.n_groups_abandoned = 0  # groups dropped by a reset with other arguments in their middle
        self._reset_group_state()

    # ------------------------------------------------------------------ helpers
    def _reset_group_state(self) -> None:
        self._ticket: GroupTicket | None = None
        self._group_reset_args: tuple[Any, Any] | None = None
        self._group_raw: list[float | None] = []
        self._group_real: list[float | None] = []
        self._group_wm_causes: list[str | None] = []  # per finished episode: its world model's failure
        self._group_exec_causes: list[str | None] = []  # per finished episode: its execution's failure
        self._group_messages: dict[str, str] = {}
        self._group_inputs: list[tuple[Any, Any] | None] = []  # per finished episode: (context, action) or None
        self._episode_in_group = 0  # episodes started in the current group
        self._ep_ctx: Any = None
        self._ep = EpisodeTally()  # the running episode's scores and failure causes
        self._ep_done = True
        self._ep_wm_paid = 0.0  # reward mode: calibrated world-model reward paid so far

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        self._reset_group_state()
        self._begun = None

    @property
    def spec(self) -> EnvSpec | None:
        """The inner env's spec with this wrapper appended (``None`` when the inner env has none).

        The wrapper's entry records its constructor arguments with the ``world_model`` and a
        shared ``loop`` themselves (not copies), so ``env.spec.make()`` rebuilds the wrapper around
        a new inner env: same world model, same settings, a new loop (or the same shared ``loop``)
        and a new ledger; ``ledger`` and ``execution_envs`` are not recorded (the rebuilt wrapper
        records its own costs and executes on its own env).

        While ``training``, ``nondeterministic`` is ``True``: equal seeds and actions do not give
        equal episodes by design (the G episodes of a group draw their own streams; groups get
        new ids and routes, and the corrections learn), so ``check_env`` skips its
        step-determinism check; with ``training=False`` the wrapper is frozen and the spec says
        what the inner env's does (Gymnasium's ``make`` copies the flag into the rebuilt inner
        env's own spec: rebuild from a spec read with ``training=False`` to keep the inner env's).
        """
        spec = super().spec
        if spec is None or not self.training or spec.nondeterministic:
            return spec
        return dataclasses.replace(spec, nondeterministic=True)

    @property
    def _evaluating(self) -> bool:
        return self._ticket is not None and not self._ticket.training

    def _info(self, **kw: Any) -> dict[str, Any]:
        t = self._ticket
        assert t is not None
        base = {
            "route": t.route,
            "group_id": t.group_id,
            "episode_in_group": self._episode_in_group - 1 if t.training else None,
            "raw_score": None,
            "calibrated_score": None,
            "real_score": None,
            "graded": True,
            CAUSE_KEY: None,
            "advantage_weight": t.rho if t.route == ANCHOR else 1.0,
        }
        base.update(kw)
        return base

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[ObsType, dict[str, Any]]:
        """Start the next episode of the current group, or a new group after G episodes.

        The G episodes of a group share their reset arguments: give ``seed``/``options`` to
        the group's first reset (later resets may omit them, or repeat them, and get the same
        ones). With a seed, episode ``i`` of the group then draws from its own stream
        (``np_random`` = :func:`~wmrl_envs.wrappers.rollout_streams.rollout_rng` ``(seed, i)``,
        class docstring); an evaluation reset (``training`` False) is a plain seeded reset.

        A reset with *other* arguments in the middle of a group (after some of its episodes
        ended; e.g. ``check_env``'s seeded resets) starts a new group with them, as Gymnasium
        expects a reset with a new seed to do: the partial group is abandoned — not counted
        (its episodes leave ``loop.n_episodes``), nothing of it credited (no correction, no anchor
        pairs, no stop-rule record; what it executed stays in the ledger), no open state left in
        the loop (:meth:`CorrectionLoop.abandon_group <wmrl_envs.core.CorrectionLoop.abandon_group>`);
        its route is used up, as the vector wrapper's is for a group some of whose episodes ended
        (the schedule's fraction holds over the groups opened) — counted in
        :attr:`n_groups_abandoned` and warned about (``UserWarning``: the first time, then at 2,
        4, 8, ... abandoned groups).

        An episode reset before it ends is abandoned: it does not count toward its group.
        """
        self._begun = None
        if not self.training:
            return self._reset_eval(seed, options)
        # The running episode (reset before it ended) is abandoned: it does not count toward its group.
        abandon = not self._ep_done and self._episode_in_group > 0
        in_group = self._episode_in_group - int(abandon)  # the group's episodes that ended
        new_group = self._ticket is None or not self._ticket.training or in_group >= self.group_size
        if abandon:
            self._episode_in_group -= 1
            self.loop.count_episodes(-1)
        if not new_group and in_group > 0:
            g_seed, g_opts = self._group_reset_args  # type: ignore[misc]
            if (seed is not None and seed != g_seed) or (
                    options is not None and not data_equivalence(options, g_opts, exact=True)):
                self._abandon_group(in_group, seed, options)
                new_group = True
            else:
                seed, options = g_seed, g_opts
        if new_group:
            self._reset_group_state()
            self._ticket = self.loop.open_group()
            self._group_reset_args = (seed, options)
        elif in_group == 0:  # the group's first episode was abandoned: these arguments lead it now
            self._group_reset_args = (seed, options)
        obs, info = self.env.reset(seed=seed, options=options)
        seed_rollout(self.env, seed, self._episode_in_group)  # the group's task, this episode's own stream
        self._episode_in_group += 1
        self.loop.count_episodes(1)
        self._start_episode(obs)
        info = dict(info)
        info["wmrl"] = self._info()
        return obs, info

    def _abandon_group(self, ended: int, seed: Any, options: Any) -> None:
        """A reset with other arguments after ``ended`` episodes of the group: drop the group
        (uncounted, nothing credited, nothing left open in the loop) and warn."""
        ticket = self._ticket
        assert ticket is not None and self._group_reset_args is not None
        g_seed, g_opts = self._group_reset_args
        self.loop.abandon_group(ticket, episodes=ended)
        self.n_groups_abandoned += 1
        n = self.n_groups_abandoned
        if n & (n - 1) == 0:  # 1, 2, 4, 8, ...: a loop that resets every episode with a new task is told, not flooded
            warnings.warn(
                f"group {ticket.group_id} was abandoned after {ended} of its {self.group_size} episodes: reset with "
                f"seed={seed!r}, options={options!r} while it started with seed={g_seed!r}, options={g_opts!r}. "
                f"It is not counted and nothing of it is credited (no correction, no anchor pairs; what it executed "
                f"stays in the ledger); a new group starts with the new arguments ({n} group(s) abandoned so far: "
                "wrapper.n_groups_abandoned). The episodes of a group share one task: to train, pass the group's "
                "arguments again, or none, until its last episode",
                UserWarning, stacklevel=user_stacklevel(),
            )

    def _start_episode(self, obs: Any) -> None:
        self._ep_ctx = obs
        self._ep = EpisodeTally(traj=Trajectory(observations=[obs]) if self.mode == "reward" else None)
        self._ep_done = False
        self._ep_wm_paid = 0.0

    def _reset_eval(self, seed: int | None, options: dict[str, Any] | None) -> tuple[ObsType, dict[str, Any]]:
        self._reset_group_state()
        self._ticket = self.loop.eval_ticket()
        obs, info = self.env.reset(seed=seed, options=options)
        self._start_episode(obs)
        info = dict(info)
        info["wmrl"] = self._info()
        return obs, info

    def step(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the episode: real step on anchor groups, world-model prediction always.

        On world-model groups the reward is 0 until the episode's last step, which carries
        the calibrated episode score ``f̂(r̂)`` (an ungraded episode gets 0.0 with
        ``info["wmrl"]["graded"] = False`` and the cause in ``info["wmrl"]["ungraded_cause"]``:
        drop it, do not train on it as a zero); that step is the ``episode_steps``-th, or the
        first whose prediction has ``terminated=True``. On anchor groups the env's own rewards
        are handed out and the episode ends when the env ends it; the episode's real score
        (``info["wmrl"]["real_score"]`` at its last step, the group's training reward) is its
        steps' scores aggregated with ``episode_score``, as the world-model score is.

        Raises:
            RuntimeError: ``step`` before ``reset`` or after the episode ended.
            TooManyUngradedError: the stop rule fired at the end of a group.
        """
        if self._ticket is None or self._ep_done:
            raise RuntimeError("step() called without an active episode; call reset() first")
        if self.mode == "reward":
            return self._step_reward_mode(action)
        ticket = self._ticket
        route = ticket.route
        ctx = self._ep_ctx
        pred: WorldModelPrediction | None = None
        wm_called = self.loop.calls_world_model(ticket.route, ticket.training, self.eval_with_world_model)
        if wm_called:
            pred = self.loop.predict([ctx], [action])[0]
            self._ep.add_step_prediction(pred, self._group_messages)
        if self._ep.steps == 0 and self.loop.learns:  # what a learning world model is taught with
            self._ep.first_step = (ctx, copy.deepcopy(action))
        self._ep.steps += 1
        if route == ANCHOR:
            obs, reward, terminated, truncated, info = self._real_step(action, ctx)
            reward = self._note_real_step(reward, info, step_score=True)
        else:
            if pred is not None and pred.observation is not None:
                obs = copy.deepcopy(pred.observation)
            else:
                obs = copy.deepcopy(ctx)
            reward = 0.0
            # the episode ends after episode_steps steps, or where the world model predicts the
            # real env would end it (a prediction's `terminated`)
            terminated = self._ep.steps >= self.episode_steps or (pred is not None and bool(pred.terminated))
            truncated = False
            info = {"feedback": pred.feedback if pred is not None else "", "status": pred.status if pred else None}
        self._ep_ctx = obs
        done = bool(terminated or truncated)
        raw_ep = self._ep.raw_score(self.episode_score)
        wm_info: dict[str, Any] = self._info(raw_score=raw_ep)
        if done:
            self._ep_done = True
            cal = self.loop.calibrate([raw_ep])[0]
            if route == WORLD_MODEL:
                reward = 0.0 if cal is None else float(cal)
                wm_info.update(calibrated_score=cal, graded=cal is not None)
            else:  # the real steps' scores by the same rule as the world model's
                real_ep = self._ep.real_episode_score(self.episode_score)
                wm_info.update(calibrated_score=cal, real_score=real_ep, graded=real_ep is not None)
            self._end_episode(wm_info, raw_ep, wm_called)
        info["wmrl"] = wm_info
        return obs, float(reward), bool(terminated), bool(truncated), info

    def _real_step(self, action: ActType, fallback_obs: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """One real step, timed into the ledger and credited to the group. When the env's ``step``
        raises (not a ``SandboxUnavailableError``, which :func:`real_step` turns into an ungraded
        step), the execution is still recorded, the group is closed as ungraded
        (:meth:`_close_failed_group`) and the exception is re-raised."""
        ticket = self._ticket
        sw = Stopwatch()
        try:
            out = real_step(self.env, action, fallback_obs)
        except Exception as exc:
            wall, cpu = sw.read()
            self.loop.record_execution(wall, 1, cpu_seconds=cpu, ticket=ticket)
            self._close_failed_group(exc)  # may raise TooManyUngradedError (chained to exc)
            raise
        wall, cpu = sw.read()
        self.loop.record_execution(wall, 1, cpu_seconds=execution_cpu_seconds(out[4], cpu), ticket=ticket,
                                   cost=reported_execution_cost(out[4]))
        return out

    def _close_failed_group(self, exc: BaseException) -> None:
        """The env's ``step`` raised: the running episode and the group's episodes not yet run are
        ungraded with cause ``"execution_error"`` and the group is closed now (its finished
        episodes keep their scores), so no group is left open; an evaluation episode is counted
        as ungraded. The episode is over: the next :meth:`reset` starts a new group. The group's
        finished anchor episodes still give their anchor pairs; it is not an advisor group."""
        ticket = self._ticket
        assert ticket is not None
        self._ep_done = True
        self._group_messages[EXECUTION_ERROR] = f"{type(exc).__name__}: {exc}"
        if not ticket.training:
            self.loop.record_ungraded([EXECUTION_ERROR], messages=self._group_messages,
                                      where="evaluation episode")
            return
        missing = self.group_size - len(self._group_raw)  # the running episode and those not started
        anchor = ticket.route == ANCHOR
        contexts, actions = learning_inputs(self._group_inputs + [None] * missing)
        self._episode_in_group = self.group_size  # the group is over
        self.last_group = self.loop.close_group(
            ticket, self._group_raw + [None] * missing,
            (self._group_real + [None] * missing) if anchor else None,
            wm_causes=self._group_wm_causes + [None if anchor else EXECUTION_ERROR] * missing,
            exec_causes=self._group_exec_causes + [EXECUTION_ERROR if anchor else None] * missing,
            world_model_called=False,  # rollouts never run have no missing score to count; no advisor group
            messages=self._group_messages, contexts=contexts, actions=actions,
            where=f"group {ticket.group_id} (the env's step raised {type(exc).__name__})")

    # ------------------------------------------------------------------ ungraded bookkeeping
    def _note_real_step(self, reward: Any, info: dict[str, Any], step_score: bool = False) -> float:
        """Fold one real step into the episode; returns the reward to hand out (0.0 if ungraded).
        ``step_score`` (outcome mode): the step's ``info["step_score"]`` is its score."""
        return self._ep.add_real_step(reward, execution_cause(reward, info), info.get("error") or info.get("message"),
                                      self._group_messages, info if step_score else None)

    def _end_episode(self, wm_info: dict[str, Any], raw_ep: float | None, wm_called: bool) -> None:
        """An episode ended: name its cause in ``wm_info``; the group's last episode closes the
        group in the loop (correction, ledger, warning, stop rule)."""
        ticket = self._ticket
        assert ticket is not None
        route = ticket.route
        score = wm_info["real_score"] if route == ANCHOR else wm_info["calibrated_score"]
        ep = self._ep
        wm_info[CAUSE_KEY] = rollout_cause(route, score, ep.wm_cause, ep.real_cause)
        if not ticket.training:
            self.loop.record_ungraded(
                [wm_info[CAUSE_KEY]], score_failures=[score_failure(route, raw_ep, ep.wm_cause, wm_called)],
                messages=self._group_messages, where="evaluation episode",
            )
            return
        self._group_raw.append(raw_ep)
        self._group_real.append(wm_info["real_score"])
        self._group_wm_causes.append(ep.wm_cause)
        self._group_exec_causes.append(ep.real_cause)
        self._group_inputs.append(ep.learning_input())
        if self._episode_in_group >= self.group_size:
            contexts, actions = learning_inputs(self._group_inputs)
            corr = self.loop.close_group(
                ticket, self._group_raw, self._group_real if route == ANCHOR else None,
                wm_causes=self._group_wm_causes, exec_causes=self._group_exec_causes,
                world_model_called=wm_called, messages=self._group_messages, contexts=contexts, actions=actions,
            )
            self.last_group = corr
            wm_info["group_disagreement"] = corr.disagreement

    def _step_reward_mode(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
        """Reward mode: the inner env always steps; the world model pays the reward on WM routes."""
        ep = self._ep
        assert ep.traj is not None and self._ticket is not None
        ticket = self._ticket
        route = ticket.route
        obs, real_reward, terminated, truncated, info = self._real_step(action, ep.traj.observations[-1])
        real_reward = self._note_real_step(real_reward, info)
        ep.traj.actions.append(action)
        ep.traj.observations.append(obs)
        ep.steps += 1
        done = bool(terminated or truncated)
        use_wm = self.loop.calls_world_model(ticket.route, ticket.training, self.eval_with_world_model)
        dense_now = self.reward_timing == "dense" and ep.steps % self.dense_every == 0
        raw: float | None = None
        cal: float | None = None
        if use_wm and (done or dense_now):
            traj = Trajectory(list(ep.traj.observations), list(ep.traj.actions), done=done)
            pred = self.loop.predict([self._ep_ctx], [traj])[0]
            raw = None if pred.score is None else float(pred.score)
            if raw is None and done:  # the episode's score failed (a failed dense call only pays nothing)
                ep.note_wm_failure(pred, self._group_messages)
            cal = self.loop.calibrate([raw])[0]
        if route == WORLD_MODEL:
            for key in self.withheld_info_keys:
                info.pop(key, None)
            reward = 0.0
            if cal is not None:  # pay the increment of the calibrated score (sums to f̂(r̂_T))
                reward = float(cal) - self._ep_wm_paid
                self._ep_wm_paid = float(cal)
        else:
            reward = float(real_reward) if real_reward is not None else 0.0
        raw_ep = raw if done else None  # the episode's score: the world model on the whole trajectory
        wm_info: dict[str, Any] = self._info(raw_score=raw_ep if done else raw)
        if done:
            self._ep_done = True
            real_ep = ep.real_score if route == ANCHOR else None
            cal_ep = self.loop.calibrate([raw_ep])[0]
            if route == WORLD_MODEL:
                wm_info.update(calibrated_score=cal_ep, graded=cal_ep is not None)
            else:
                wm_info.update(calibrated_score=cal_ep, real_score=real_ep, graded=real_ep is not None)
            self._end_episode(wm_info, raw_ep, use_wm)
        elif cal is not None:
            wm_info["calibrated_score"] = cal
        info["wmrl"] = wm_info
        return obs, reward, bool(terminated), bool(truncated), info
