"""``AnchoredWorldModelWrapper``: route groups of episodes to real execution or a world model.

The wrapper turns any expensive Gymnasium env into a WMRL env (Yang et al., arXiv
2608.12564; see ``docs/method.md``). Episodes come in *groups* of ``group_size`` consecutive
episodes that share their reset arguments (the G rollouts GRPO samples for one task). Each
group is routed as a whole:

* ``anchor`` — the inner env's real ``step`` runs AND the world model predicts; the agent is
  rewarded with the real score, and the anchor pairs update the corrections;
* ``world_model`` — in *outcome* mode the inner ``step`` is never called: the world model
  predicts the observation/feedback and the score, and the agent is rewarded with the
  calibrated score ``f̂(r̂)``. In *reward* mode (robot manipulation, LIBERO) the inner env
  steps for the dynamics in every episode, the world model (a reward model such as
  Robometer) scores the trajectory, and the real reward (the simulator's sparse success) is
  withheld from the agent.

Every step's ``info["wmrl"]`` carries the route, group id, raw and calibrated world-model
score, real score (anchors), whether the rollout was graded, and the advantage weight ``ρ``
that a GRPO learner multiplies into the group's advantages.

Two ways to use it:

* the standard per-episode Gymnasium API (``reset``/``step``), which works with any loop;
* :meth:`AnchoredWorldModelWrapper.score_group`, which scores a whole group of single-step
  episodes at once (batched world-model inference) — what GRPO trainers such as ``wmrl train``
  use; in reward mode :meth:`AnchoredWorldModelWrapper.score_trajectories` does the same for
  a group of trajectories that were rolled out elsewhere (e.g. in a vector env).

Both share one :class:`~wmrl_envs.core.AnchorRouter`, one
:class:`~wmrl_envs.core.WMRLCorrector` and one :class:`~wmrl_envs.core.CostLedger`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, Sequence, SupportsFloat, TypeVar

import gymnasium as gym
import numpy as np

from wmrl_envs.core import (
    ANCHOR,
    EXECUTION,
    WORLD_MODEL,
    WORLD_MODEL_SOURCE,
    AnchorRouter,
    InverseVarianceDenoiser,
    CostLedger,
    GroupCorrection,
    IsotonicDebiaser,
    Route,
    WMRLCorrector,
)
from wmrl_envs.core.ungraded import (
    CAUSE_KEY,
    SANDBOX_UNAVAILABLE,
    WORLD_MODEL_ERROR,
    WORLD_MODEL_INVALID,
    WORLD_MODEL_TIMEOUT,
    WORLD_MODEL_UNGRADED,
    UngradedMonitor,
    execution_cause,
)
from wmrl_envs.world_models.base import Trajectory, WorldModel, WorldModelPrediction

__all__ = ["AnchoredWorldModelWrapper", "GroupRollout"]

ObsType = TypeVar("ObsType")
ActType = TypeVar("ActType")

_SENTINEL = object()

logger = logging.getLogger(__name__)


def aggregate_episode_score(scores: Sequence[float | None], how: str) -> float | None:
    """An episode's score from its per-step world-model scores: ``"max"`` (AutoResearch: best
    turn), ``"last"`` or ``"sum"``.

    Order-independent for ``"max"`` and ``"sum"``: a step without a finite score (``None``,
    NaN, inf) makes the episode ungraded (``None``) whatever its position — a NaN never wins or
    loses a ``max`` depending on where it stands. ``None`` for an empty sequence.
    """
    vals: list[float] = []
    for v in scores:
        if v is None:
            return None
        f = float(v)
        if not math.isfinite(f):
            return None
        vals.append(f)
    if not vals:
        return None
    if how == "max":
        return max(vals)
    if how == "last":
        return vals[-1]
    return float(sum(vals))


_CALL_LOCKS: dict[int, threading.Lock] = {}
_CALL_LOCKS_GUARD = threading.Lock()


def _call_lock(world_model: Any) -> threading.Lock:
    """One lock per world-model object: never two ``predict`` calls on it at once (a call that
    timed out may still be running in its thread)."""
    key = id(world_model)
    with _CALL_LOCKS_GUARD:
        lock = _CALL_LOCKS.get(key)
        if lock is None:
            lock = _CALL_LOCKS[key] = threading.Lock()
            try:
                weakref.finalize(world_model, _CALL_LOCKS.pop, key, None)
            except TypeError:  # not weak-referenceable: the lock stays (a few bytes)
                pass
    return lock


def world_model_idle(world_model: Any, timeout_s: float | None = None) -> bool:
    """Whether no ``predict`` call on ``world_model`` is running (waits up to ``timeout_s``
    seconds for one that timed out to return; ``None`` waits for ever).

    A trainer whose world model shares weights with the policy (the LLM judge is the policy's
    backbone with its adapters disabled) must not update the policy while a timed-out call is
    still running on those weights; ``wmrl train`` checks this before every update.

    Returns:
        ``True`` when idle (within the wait), ``False`` when a call is still running.
    """
    lock = _call_lock(world_model)
    if not lock.acquire(timeout=-1 if timeout_s is None else max(0.0, float(timeout_s))):
        return False
    lock.release()
    return True


def _failed_batch(n: int, cause: str, message: str) -> list[WorldModelPrediction]:
    return [
        WorldModelPrediction(score=None, status="ungraded", extras={"error": message}, ungraded_cause=cause)
        for _ in range(n)
    ]


def _call_with_deadline(
    world_model: WorldModel, contexts: list[Any], actions: list[Any], timeout_s: float | None
) -> tuple[list[Any] | None, str | None, str]:
    """``world_model.predict`` bounded by ``timeout_s``: ``(preds, None, "")`` or ``(None, cause, message)``."""
    name = type(world_model).__name__
    lock = _call_lock(world_model)
    if timeout_s is None:
        with lock:
            try:
                return list(world_model.predict(contexts, actions)), None, ""
            except Exception as exc:  # noqa: BLE001 - every failure of the model is an ungraded batch
                return None, WORLD_MODEL_ERROR, f"{name}.predict raised {type(exc).__name__}: {exc}"
    deadline = time.monotonic() + float(timeout_s)
    if not lock.acquire(timeout=float(timeout_s)):
        return None, WORLD_MODEL_TIMEOUT, (
            f"{name}.predict: an earlier call that timed out is still running after {timeout_s:g} s more"
        )
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["preds"] = list(world_model.predict(contexts, actions))
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            box["exc"] = exc
        finally:
            lock.release()

    # a daemon thread: a call that never returns cannot keep the interpreter from exiting
    worker = threading.Thread(target=run, name=f"wmrl-predict-{name}", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        return None, WORLD_MODEL_TIMEOUT, (
            f"{name}.predict did not return within world_model_timeout_s={timeout_s:g} s for a batch of "
            f"{len(actions)} (its thread keeps running in the background; later calls wait for it)"
        )
    if "exc" in box:
        exc = box["exc"]
        if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: not ours to swallow
            raise exc
        return None, WORLD_MODEL_ERROR, f"{name}.predict raised {type(exc).__name__}: {exc}"
    return box["preds"], None, ""


def predict_checked(
    world_model: WorldModel,
    contexts: Sequence[Any],
    actions: Sequence[Any],
    ledger: CostLedger,
    *,
    timeout_s: float | None = None,
) -> list[WorldModelPrediction]:
    """One batched ``world_model.predict`` call, checked, bounded and timed into ``ledger``.

    Shared by every wrapper (per-episode, group and vector APIs) and the Ray scorer, so that
    all of them enforce the same protocol, the same failure contract
    (:mod:`wmrl_envs.core.ungraded`) and account world-model seconds the same way:

    * ``predict`` raises -> every prediction of the batch is ungraded, cause
      ``"world_model_error"`` (logged with ``logging.warning``);
    * ``predict`` runs longer than ``timeout_s`` -> ungraded, cause ``"world_model_timeout"``.
      The call runs in a daemon thread that is abandoned at the deadline: Python cannot stop
      a thread, so a hung call keeps its thread (and whatever it holds, e.g. a GPU) until it
      returns, if ever; later calls on the same world model wait for it (within their own
      deadline) rather than run concurrently with it;
    * a score that is not a finite number (NaN, inf, a non-number) becomes ``None``, cause
      ``"world_model_invalid"`` — a NaN never enters an episode's per-turn scores;
    * ``score=None`` without a cause gets ``"world_model_ungraded"``.

    Args:
        world_model: the world model.
        contexts, actions: B contexts and B actions.
        ledger: gets ``("world_model", seconds, B)`` (also for a call that raised or timed out:
            its time was spent; not for a protocol error, which stops the run).
        timeout_s: seconds one call may take (``None``: no limit, the call runs in the caller's
            thread).

    Returns:
        B :class:`WorldModelPrediction` (new objects where this function changed one).

    Raises:
        RuntimeError: ``predict`` returned not one prediction per action (a protocol bug).
        TypeError: a prediction is not a :class:`WorldModelPrediction`.
    """
    contexts, actions = list(contexts), list(actions)
    t0 = time.perf_counter()
    raw, cause, message = _call_with_deadline(world_model, contexts, actions, timeout_s)
    dt = time.perf_counter() - t0
    name = type(world_model).__name__
    if raw is None:
        assert cause is not None
        ledger.add(WORLD_MODEL_SOURCE, dt, len(actions))  # its time was spent
        logger.warning("world model failed, %d prediction(s) ungraded (%s): %s", len(actions), cause, message)
        return _failed_batch(len(actions), cause, message)
    if len(raw) != len(actions):
        raise RuntimeError(
            f"world model {name} returned {len(raw)} predictions "
            f"for {len(actions)} actions; predict() must return one per action"
        )
    bad = next((p for p in raw if not isinstance(p, WorldModelPrediction)), None)
    if bad is not None:
        raise TypeError(
            f"world model {name} returned a {type(bad).__name__}; "
            "predict() must return WorldModelPrediction objects (e.g. WorldModelPrediction(score=0.7))"
        )
    ledger.add(WORLD_MODEL_SOURCE, dt, len(actions))
    out: list[WorldModelPrediction] = []
    n_invalid = 0
    for p in raw:
        if p.score is None:
            out.append(p if p.ungraded_cause else dataclasses.replace(p, ungraded_cause=WORLD_MODEL_UNGRADED))
            continue
        try:
            ok = math.isfinite(float(p.score))
        except (TypeError, ValueError):
            ok = False
        if ok:
            out.append(p)
        else:
            n_invalid += 1
            out.append(dataclasses.replace(
                p, score=None, ungraded_cause=WORLD_MODEL_INVALID,
                extras={**p.extras, "error": f"invalid score {p.score!r}", "invalid_score": repr(p.score)},
            ))
    if n_invalid:
        logger.warning("world model %s returned %d non-finite score(s); left ungraded (%s)", name, n_invalid,
                       WORLD_MODEL_INVALID)
    return out


def _wm_causes(preds: Sequence[WorldModelPrediction], g: int) -> list[str | None]:
    """Per rollout: the cause of its missing world-model score, ``None`` where it has one."""
    if not preds:
        return [None] * g
    return [None if p.score is not None else (p.ungraded_cause or WORLD_MODEL_UNGRADED) for p in preds]


def _messages(preds: Sequence[WorldModelPrediction], infos: Sequence[dict[str, Any]] = ()) -> dict[str, str]:
    """``{cause: error text}`` of a group's failed predictions and executions."""
    out: dict[str, str] = {}
    for p in preds:
        if p.score is None and p.ungraded_cause and p.extras.get("error"):
            out[p.ungraded_cause] = str(p.extras["error"])
    for info in infos:
        c = info.get(CAUSE_KEY)
        if c and (info.get("error") or info.get("message")):
            out[str(c)] = str(info.get("error") or info.get("message"))
    return out


def group_info(corr: GroupCorrection, group_id: int, i: int) -> dict[str, Any]:
    """``info["wmrl"]`` of rollout ``i`` of a group scored at once (group APIs)."""
    return {
        "route": corr.route,
        "group_id": group_id,
        "episode_in_group": i,
        "raw_score": corr.raw_scores[i],
        "calibrated_score": corr.calibrated_scores[i],
        "real_score": corr.real_scores[i],
        "graded": corr.rewards[i] is not None,
        CAUSE_KEY: None,
        "advantage_weight": corr.advantage_weight,
    }


@dataclass
class GroupRollout:
    """A whole group scored by :meth:`AnchoredWorldModelWrapper.score_group`.

    Attributes:
        group_id: running group index (int).
        route: ``"anchor"`` or ``"world_model"``.
        rewards: G training rewards (real on anchors, calibrated WM on WM groups); ``None`` =
            ungraded (drop the row; ``infos[i]["wmrl"]["ungraded_cause"]`` says why).
        advantage_weight: ρ for anchor groups, 1.0 otherwise.
        correction: the full :class:`~wmrl_envs.core.GroupCorrection`.
        observations: G observations after the step (real on anchors, predicted otherwise).
        infos: G per-rollout info dicts (inner env info on anchors; each has a ``"wmrl"`` key).
        predictions: G world-model predictions (empty when the wrapper has no world model).
        execution_seconds: wall-clock seconds of the real steps (0 on WM groups).
        world_model_seconds: wall-clock seconds of world-model inference.
    """

    group_id: int
    route: Route
    rewards: list[float | None]
    advantage_weight: float
    correction: GroupCorrection
    observations: list[Any]
    infos: list[dict[str, Any]]
    predictions: list[WorldModelPrediction] = field(default_factory=list)
    execution_seconds: float = 0.0
    world_model_seconds: float = 0.0


class AnchoredWorldModelWrapper(
    gym.Wrapper[ObsType, ActType, ObsType, ActType], gym.utils.RecordConstructorArgs, Generic[ObsType, ActType]
):
    """Route whole groups of episodes to real execution (anchors) or to a world model.

    Args:
        env: the expensive env. Its ``step`` is the real execution.
        world_model: a :class:`~wmrl_envs.world_models.WorldModel` (batched
            ``predict(contexts, actions)``). ``None`` is allowed only with
            ``anchor_fraction=1`` (plain real-execution GRPO, no world-model calls).
        anchor_fraction: target share of groups routed to real execution (default 0.1).
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
            ``min_anchor_groups`` anchors among each block of this many groups). Default:
            ``ceil(1 / anchor_fraction)`` (one anchor group per block at f = 0.1).
        min_anchor_groups: anchors per block at least (default 1).
        episode_steps: steps after which a world-model episode terminates (outcome mode;
            AutoResearch: its ``max_turns``, default 1).
        episode_score: how per-step world-model scores make the episode's score: ``"max"``
            (AutoResearch: max over turns), ``"last"`` or ``"sum"``.
        corrector: the correction object (default: reference debiaser and denoiser, or one
            built from ``debiaser_kwargs``/``denoiser_kwargs``).
        debiaser_kwargs: keyword arguments of :class:`~wmrl_envs.core.IsotonicDebiaser`.
        denoiser_kwargs: keyword arguments of :class:`~wmrl_envs.core.InverseVarianceDenoiser`.
        seed: seed of the anchor router.
        ledger: a :class:`~wmrl_envs.core.CostLedger` to record into (default: a new one).
        eval_route: route of every episode while ``training`` is ``False`` (default
            ``"anchor"``: evaluation on real scores).
        eval_with_world_model: while evaluating on ``"anchor"``, also call the world model
            (to log its scores); default ``False`` (evaluation pays only for execution).
        execution_envs: extra instances of the same env; :meth:`score_group` then executes
            an anchor group's rollouts concurrently on ``env`` and these (threads; use it when
            the real step runs out of process, e.g. in a sandbox). The ledger still records
            each execution's own seconds; the group's wall-clock shrinks.
        world_model_timeout_s: seconds one batched ``world_model.predict`` call may take
            (``None``: no limit). A call past it leaves its batch ungraded (cause
            ``"world_model_timeout"``); see :func:`predict_checked` for what happens to the
            thread of a hung call.
        max_ungraded_share: the stop rule (``docs/method.md``, "Ungraded rollouts"): once this
            share of one training step's rollouts (``groups_per_step`` groups, or the
            ``n_groups`` of :meth:`plan_step`) is ungraded because the machinery failed,
            :class:`~wmrl_envs.core.TooManyUngradedError` is raised (default 0.5; ``None``:
            never stop).

    Ungraded rollouts (:mod:`wmrl_envs.core.ungraded`):
        A sandbox failure (the env reports ``info["graded"] = False`` and
        ``info["ungraded_cause"]``, or its ``step`` raises ``SandboxUnavailableError``), a world
        model that raises, times out or returns a non-finite score leave the rollout
        ungraded: reward ``None`` in the group APIs (``0.0`` with ``info["wmrl"]["graded"] =
        False`` in the per-episode API), cause in ``info["wmrl"]["ungraded_cause"]``, out of
        the anchor pairs and ρ, counted in ``ledger`` (``"ungraded:<cause>"``) and in
        :attr:`ungraded` (an :class:`~wmrl_envs.core.UngradedMonitor`), warned about.

    Training and evaluation (like ``VecNormalize.training`` in Stable-Baselines3):
        With ``training=True`` the wrapper is deliberately non-stationary: groups advance,
        the router draws routes and the corrections learn. With ``training=False`` it is
        frozen: every episode is routed to ``eval_route``, nothing is updated, no group
        bookkeeping is done (``group_id`` is ``None``), so equal seeds and actions give equal
        results — this is the mode in which ``gymnasium.utils.env_checker.check_env``
        passes.

    Raises:
        ValueError: invalid arguments (each message says which and how to fix it).

    Example:
        >>> import gymnasium as gym
        >>> from wmrl_envs import AnchoredWorldModelWrapper
        >>> from wmrl_envs.world_models import WorldModelPrediction
        >>> class EchoWM:  # predicts the action itself as the score
        ...     def predict(self, contexts, actions):
        ...         return [WorldModelPrediction(score=float(a[0])) for a in actions]
        >>> env = AnchoredWorldModelWrapper(gym.make("wmrl/Guess-v0"), EchoWM(),
        ...                                 anchor_fraction=0.5, group_size=2)
        >>> obs, info = env.reset(seed=0)
        >>> info["wmrl"]["route"] in ("anchor", "world_model")
        True
    """

    def __init__(
        self,
        env: gym.Env[ObsType, ActType],
        world_model: WorldModel | None,
        anchor_fraction: float = 0.1,
        group_size: int = 8,
        *,
        mode: Literal["outcome", "reward"] = "outcome",
        groups_per_step: int | None = None,
        min_anchor_groups: int = 1,
        episode_steps: int = 1,
        episode_score: Literal["max", "last", "sum"] = "max",
        corrector: WMRLCorrector | None = None,
        debiaser_kwargs: dict[str, Any] | None = None,
        denoiser_kwargs: dict[str, Any] | None = None,
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
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            anchor_fraction=anchor_fraction,
            group_size=group_size,
            mode=mode,
            groups_per_step=groups_per_step,
            min_anchor_groups=min_anchor_groups,
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
        )
        gym.Wrapper.__init__(self, env)
        if mode not in ("outcome", "reward"):
            raise ValueError(f"mode must be 'outcome' or 'reward', got {mode!r}")
        if reward_timing not in ("episode", "dense"):
            raise ValueError(f"reward_timing must be 'episode' or 'dense', got {reward_timing!r}")
        if dense_every < 1:
            raise ValueError(f"dense_every must be >= 1 (steps between world-model calls), got {dense_every}")
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1 (GRPO needs >= 2 to learn), got {group_size}")
        if episode_steps < 1:
            raise ValueError(f"episode_steps must be >= 1, got {episode_steps}")
        if episode_score not in ("max", "last", "sum"):
            raise ValueError(f"episode_score must be 'max', 'last' or 'sum', got {episode_score!r}")
        if not (isinstance(anchor_fraction, (int, float)) and 0.0 <= anchor_fraction <= 1.0):
            raise ValueError(f"anchor_fraction must be a number in [0, 1], got {anchor_fraction!r}")
        if world_model is None and anchor_fraction != 1.0:
            raise ValueError(
                "world_model=None is only valid with anchor_fraction=1.0 (every group executed "
                f"for real); got anchor_fraction={anchor_fraction}. Pass a world model."
            )
        if world_model is not None and not callable(getattr(world_model, "predict", None)):
            raise ValueError(
                f"world_model must have a predict(contexts, actions) method, got {type(world_model).__name__}"
            )
        if eval_route not in (ANCHOR, WORLD_MODEL):
            raise ValueError(f"eval_route must be 'anchor' or 'world_model', got {eval_route!r}")
        if groups_per_step is None:
            groups_per_step = 1 if anchor_fraction <= 0 else max(1, int(np.ceil(1.0 / anchor_fraction - 1e-9)))
        if groups_per_step < 1:
            raise ValueError(f"groups_per_step must be >= 1, got {groups_per_step}")
        if world_model_timeout_s is not None and not (
            isinstance(world_model_timeout_s, (int, float)) and world_model_timeout_s > 0
        ):
            raise ValueError(
                f"world_model_timeout_s must be a number of seconds > 0 or None (no limit), got {world_model_timeout_s!r}"
            )
        self.world_model = world_model
        self.world_model_timeout_s = None if world_model_timeout_s is None else float(world_model_timeout_s)
        self.group_size = int(group_size)
        self.mode = mode
        self.groups_per_step = int(groups_per_step)
        self.episode_steps = int(episode_steps)
        self.episode_score = episode_score
        self.eval_route: Route = eval_route
        self.eval_with_world_model = bool(eval_with_world_model)
        self.execution_envs = list(execution_envs)
        self.reward_timing = reward_timing
        self.dense_every = int(dense_every)
        self.withheld_info_keys = tuple(withheld_info_keys)
        self.router = AnchorRouter(anchor_fraction, min_anchor_groups=min_anchor_groups, seed=seed)
        if corrector is None:
            corrector = WMRLCorrector(
                IsotonicDebiaser(**(debiaser_kwargs or {})), InverseVarianceDenoiser(**(denoiser_kwargs or {}))
            )
        elif debiaser_kwargs or denoiser_kwargs:
            raise ValueError("pass either corrector= or debiaser_kwargs/denoiser_kwargs, not both")
        self.corrector = corrector
        self.ledger = ledger if ledger is not None else CostLedger()
        self.ungraded = UngradedMonitor(max_ungraded_share, self.groups_per_step, self.ledger)
        self._route_queue: list[Route] = []
        self._reset_group_state()
        self.n_groups_started = 0
        self.n_episodes = 0
        self.inner_step_calls = 0

    # ------------------------------------------------------------------ helpers
    def _reset_group_state(self) -> None:
        self._group_id: int | None = None
        self._group_route: Route | None = None
        self._group_rho = 1.0
        self._group_reset_args: tuple[Any, Any] | None = None
        self._group_raw: list[float | None] = []
        self._group_real: list[float | None] = []
        self._group_causes: list[str | None] = []  # per finished episode: why it has no reward
        self._group_failures: list[str | None] = []  # failed world-model scores on anchor episodes
        self._group_messages: dict[str, str] = {}
        self._episode_in_group = 0  # episodes started in the current group
        self._ep_ctx: Any = None
        self._ep_steps = 0
        self._ep_raw_steps: list[float] = []
        self._ep_raw_graded = True
        self._ep_real_return = 0.0
        self._ep_real_graded = True
        self._ep_wm_cause: str | None = None
        self._ep_real_cause: str | None = None
        self._ep_done = True
        self._eval_active = False
        self._traj: Trajectory | None = None
        self._ep_wm_paid = 0.0  # reward mode: calibrated world-model reward paid so far

    @property
    def training(self) -> bool:
        """``False`` = evaluation: corrections frozen, every episode routed to ``eval_route``."""
        return self.corrector.training

    @training.setter
    def training(self, value: bool) -> None:
        self.corrector.training = value

    @property
    def rho(self) -> float:
        """Current anchor weight ρ."""
        return self.corrector.rho

    def _next_route(self) -> Route:
        if not self._route_queue:
            self._route_queue = list(self.router.route_step(self.groups_per_step))
        return self._route_queue.pop(0)

    def plan_step(self, n_groups: int | None = None, free_slots: int | None = None) -> list[Route]:
        """Draw the routes of the next training step now (replacing any unused ones).

        Call it at the start of each step when the number of groups per step varies, or to
        cap the anchors by the real-execution slots that are free right now; the next
        ``n_groups`` groups then take these routes in order.

        Args:
            n_groups: groups in the coming step (default ``groups_per_step``).
            free_slots: free real-execution slots, in groups (caps the anchor count; the
                realised fraction then reflects the cap).

        Returns:
            The planned routes.
        """
        routes = list(self.router.route_step(n_groups or self.groups_per_step, free_slots=free_slots))
        self._route_queue = list(routes)
        self.ungraded.plan(len(routes))
        return routes

    def _aggregate(self, scores: list[float]) -> float:
        return aggregate_episode_score(scores, self.episode_score)

    def _predict(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[WorldModelPrediction]:
        assert self.world_model is not None
        return predict_checked(self.world_model, contexts, actions, self.ledger, timeout_s=self.world_model_timeout_s)

    def _real_step(self, env: gym.Env, action: Any, fallback_obs: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
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

    def _record_group(
        self,
        corr: GroupCorrection,
        preds: Sequence[WorldModelPrediction],
        exec_causes: Sequence[str | None] | None,
        infos: Sequence[dict[str, Any]] = (),
        *,
        group_id: int | None = None,
    ) -> list[str | None]:
        """Account a scored group's ungraded rollouts (ledger, warning, stop rule); returns the
        per-rollout causes (``None`` = graded)."""
        g = len(corr.rewards)
        wm = _wm_causes(preds, g) if preds else [None] * g
        if corr.route == ANCHOR:
            ex = list(exec_causes) if exec_causes is not None else [None] * g
            causes = [None if r is not None else (ex[i] or execution_cause(None, None)) for i, r in enumerate(corr.rewards)]
            failures = [c for c in wm] if preds else []
        else:
            causes = [None if r is not None else (wm[i] or WORLD_MODEL_UNGRADED) for i, r in enumerate(corr.rewards)]
            failures = []
        self.ungraded.record_group(
            causes, training=self.training, anchor=corr.route == ANCHOR, score_failures=failures,
            messages=_messages(preds, infos),
            where=f"group {group_id}" if group_id is not None else "evaluation group",
        )
        return causes

    def _info(self, **kw: Any) -> dict[str, Any]:
        base = {
            "route": self._group_route,
            "group_id": self._group_id,
            "episode_in_group": self._episode_in_group - 1,
            "raw_score": None,
            "calibrated_score": None,
            "real_score": None,
            "graded": True,
            CAUSE_KEY: None,
            "advantage_weight": self._group_rho if self._group_route == ANCHOR else 1.0,
        }
        base.update(kw)
        return base

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[ObsType, dict[str, Any]]:
        """Start the next episode of the current group, or a new group after G episodes.

        The G episodes of a group share their reset arguments: give ``seed``/``options`` to
        the group's first reset (later resets may omit them and get the same ones).

        Raises:
            ValueError: a later episode of a group passes different ``seed``/``options``.

        An episode reset before it ends is abandoned: it does not count toward its group.
        """
        if not self.training:
            return self._reset_eval(seed, options)
        # The running episode (reset before it ended) is abandoned: it does not count toward
        # its group. Check the arguments first, so that a rejected reset changes nothing.
        abandon = not self._ep_done and self._episode_in_group > 0
        in_group = self._episode_in_group - int(abandon)
        new_group = self._group_id is None or in_group >= self.group_size
        if not new_group and in_group > 0:
            g_seed, g_opts = self._group_reset_args  # type: ignore[misc]
            if (seed is not None and seed != g_seed) or (options is not None and options != g_opts):
                raise ValueError(
                    f"episode {in_group} of group {self._group_id} was reset with "
                    f"seed={seed!r}, options={options!r}, but its group started with seed={g_seed!r}, "
                    f"options={g_opts!r}; all {self.group_size} episodes of a group share one "
                    "task — pass the same arguments, or omit them after the first reset"
                )
            seed, options = g_seed, g_opts
        if abandon:
            self._episode_in_group -= 1
            self.n_episodes -= 1
        if new_group:
            self._reset_group_state()
            self._group_id = self.n_groups_started
            self.n_groups_started += 1
            self._group_route = self._next_route()
            self._group_rho = self.corrector.rho
            self._group_reset_args = (seed, options)
        elif in_group == 0:  # the group's first episode was abandoned: these arguments lead it now
            self._group_reset_args = (seed, options)
        obs, info = self.env.reset(seed=seed, options=options)
        self._episode_in_group += 1
        self.n_episodes += 1
        self._ep_ctx = obs
        self._ep_steps = 0
        self._ep_raw_steps = []
        self._ep_raw_graded = True
        self._ep_real_return = 0.0
        self._ep_real_graded = True
        self._ep_wm_cause = None
        self._ep_real_cause = None
        self._ep_done = False
        self._traj = Trajectory(observations=[obs]) if self.mode == "reward" else None
        self._ep_wm_paid = 0.0
        info = dict(info)
        info["wmrl"] = self._info()
        return obs, info

    def _reset_eval(self, seed: int | None, options: dict[str, Any] | None) -> tuple[ObsType, dict[str, Any]]:
        self._reset_group_state()
        self._eval_active = True
        self._group_route = self.eval_route
        obs, info = self.env.reset(seed=seed, options=options)
        self._ep_ctx = obs
        self._ep_done = False
        self._traj = Trajectory(observations=[obs]) if self.mode == "reward" else None
        self._ep_wm_paid = 0.0
        info = dict(info)
        info["wmrl"] = self._info(episode_in_group=None)
        return obs, info

    def step(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the episode: real step on anchor groups, world-model prediction always.

        On world-model groups the reward is 0 until the episode's last step, which carries
        the calibrated episode score ``f̂(r̂)`` (an ungraded episode gets 0.0 with
        ``info["wmrl"]["graded"] = False`` and the cause in ``info["wmrl"]["ungraded_cause"]``:
        drop it, do not train on it as a zero).

        Raises:
            RuntimeError: ``step`` before ``reset`` or after the episode ended.
            TooManyUngradedError: the stop rule fired at the end of a group.
        """
        if self._group_route is None or self._ep_done:
            raise RuntimeError("step() called without an active episode; call reset() first")
        if self.mode == "reward":
            return self._step_reward_mode(action)
        route = self._group_route
        ctx = self._ep_ctx
        evaluating = self._eval_active
        pred: WorldModelPrediction | None = None
        wm_called = self.world_model is not None and (not evaluating or route == WORLD_MODEL or self.eval_with_world_model)
        if wm_called:
            pred = self._predict([ctx], [action])[0]
            if pred.score is None:  # predict_checked made every non-finite score None
                self._ep_raw_graded = False
                self._note_wm_failure(pred)
            else:
                self._ep_raw_steps.append(float(pred.score))
        self._ep_steps += 1
        if route == ANCHOR:
            t0 = time.perf_counter()
            obs, reward, terminated, truncated, info = self._real_step(self.env, action, ctx)
            self.ledger.add(EXECUTION, time.perf_counter() - t0, 1)
            self.inner_step_calls += 1
            reward = self._note_real_step(reward, info)
        else:
            if pred is not None and pred.observation is not None:
                obs = copy.deepcopy(pred.observation)
            else:
                obs = copy.deepcopy(ctx)
            reward = 0.0
            terminated = self._ep_steps >= self.episode_steps
            truncated = False
            info = {"feedback": pred.feedback if pred is not None else "", "status": pred.status if pred else None}
        self._ep_ctx = obs
        done = bool(terminated or truncated)
        raw_ep = self._aggregate(self._ep_raw_steps) if (self._ep_raw_steps and self._ep_raw_graded) else None
        wm_info: dict[str, Any] = self._info(raw_score=raw_ep)
        if evaluating:
            wm_info["episode_in_group"] = None
        if done and evaluating:
            self._ep_done = True
            cal = self.corrector.calibrate([raw_ep])[0]
            if route == WORLD_MODEL:
                reward = 0.0 if cal is None else float(cal)
                wm_info.update(calibrated_score=cal, graded=cal is not None)
            else:
                real_ep = self._ep_real_return if self._ep_real_graded else None
                wm_info.update(calibrated_score=cal, real_score=real_ep, graded=real_ep is not None)
        elif done:
            self._ep_done = True
            real_ep = (self._ep_real_return if self._ep_real_graded else None) if route == ANCHOR else None
            if route == WORLD_MODEL:
                cal = self.corrector.calibrate([raw_ep])[0]
                reward = 0.0 if cal is None else float(cal)
                wm_info.update(calibrated_score=cal, graded=cal is not None)
            else:
                cal = self.corrector.calibrate([raw_ep])[0]
                wm_info.update(calibrated_score=cal, real_score=real_ep, graded=real_ep is not None)
            self._group_raw.append(raw_ep)
            self._group_real.append(real_ep)
            if self._episode_in_group >= self.group_size:
                corr = self.corrector.correct_group(
                    route, self._group_raw, self._group_real if route == ANCHOR else None, self._group_id
                )
                wm_info["group_disagreement"] = corr.disagreement
        if done:
            self._end_episode(wm_info, route, raw_ep, wm_called, evaluating)
        info["wmrl"] = wm_info
        return obs, float(reward), bool(terminated), bool(truncated), info

    # ------------------------------------------------------------------ ungraded bookkeeping
    def _note_wm_failure(self, pred: WorldModelPrediction) -> None:
        cause = pred.ungraded_cause or WORLD_MODEL_UNGRADED
        if self._ep_wm_cause is None:
            self._ep_wm_cause = cause
        if pred.extras.get("error"):
            self._group_messages[cause] = str(pred.extras["error"])

    def _note_real_step(self, reward: Any, info: dict[str, Any]) -> float:
        """Fold one real step into the episode; returns the reward to hand out (0.0 if ungraded)."""
        cause = execution_cause(reward, info)
        if cause is None:
            self._ep_real_return += float(reward)
            return float(reward)
        self._ep_real_graded = False
        if self._ep_real_cause is None:
            self._ep_real_cause = cause
        if info.get("error") or info.get("message"):
            self._group_messages[cause] = str(info.get("error") or info.get("message"))
        return 0.0

    def _end_episode(
        self, wm_info: dict[str, Any], route: Route, raw_ep: float | None, wm_called: bool, evaluating: bool
    ) -> None:
        """An episode ended: name its cause in ``wm_info``, account it (ledger, warning, stop rule)."""
        if wm_info.get("graded"):
            cause = None
        elif route == ANCHOR:
            cause = self._ep_real_cause or execution_cause(None, None)
        else:
            cause = self._ep_wm_cause or WORLD_MODEL_UNGRADED
        failure = (self._ep_wm_cause or WORLD_MODEL_UNGRADED) if (route == ANCHOR and wm_called and raw_ep is None) else None
        wm_info[CAUSE_KEY] = cause
        if evaluating:
            self.ungraded.record_group([cause], training=False, score_failures=[failure],
                                       messages=self._group_messages, where="evaluation episode")
            return
        self._group_causes.append(cause)
        self._group_failures.append(failure)
        if self._episode_in_group >= self.group_size:
            self.ungraded.record_group(self._group_causes, training=True, anchor=route == ANCHOR,
                                       score_failures=self._group_failures, messages=self._group_messages,
                                       where=f"group {self._group_id}")


    def _step_reward_mode(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
        """Reward mode: the inner env always steps; the world model pays the reward on WM routes."""
        assert self._traj is not None
        route = self._group_route
        evaluating = self._eval_active
        t0 = time.perf_counter()
        obs, real_reward, terminated, truncated, info = self._real_step(self.env, action, self._traj.observations[-1])
        self.ledger.add(EXECUTION, time.perf_counter() - t0, 1)
        self.inner_step_calls += 1
        real_reward = self._note_real_step(real_reward, info)
        self._traj.actions.append(action)
        self._traj.observations.append(obs)
        self._ep_steps += 1
        done = bool(terminated or truncated)
        use_wm = self.world_model is not None and (not evaluating or route == WORLD_MODEL or self.eval_with_world_model)
        dense_now = self.reward_timing == "dense" and self._ep_steps % self.dense_every == 0
        raw: float | None = None
        cal: float | None = None
        if use_wm and (done or dense_now):
            traj = Trajectory(list(self._traj.observations), list(self._traj.actions), done=done)
            pred = self._predict([self._ep_ctx], [traj])[0]
            raw = None if pred.score is None else float(pred.score)
            if raw is None and done:  # the episode's score failed (a failed dense call only pays nothing)
                self._note_wm_failure(pred)
            cal = self.corrector.calibrate([raw])[0]
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
        if evaluating:
            wm_info["episode_in_group"] = None
        if done:
            self._ep_done = True
            real_ep = (self._ep_real_return if self._ep_real_graded else None) if route == ANCHOR else None
            cal_ep = self.corrector.calibrate([raw_ep])[0]
            if route == WORLD_MODEL:
                wm_info.update(calibrated_score=cal_ep, graded=cal_ep is not None)
            else:
                wm_info.update(calibrated_score=cal_ep, real_score=real_ep, graded=real_ep is not None)
            if not evaluating:
                self._group_raw.append(raw_ep)
                self._group_real.append(real_ep)
                if self._episode_in_group >= self.group_size:
                    corr = self.corrector.correct_group(
                        route, self._group_raw, self._group_real if route == ANCHOR else None, self._group_id
                    )
                    wm_info["group_disagreement"] = corr.disagreement
            self._end_episode(wm_info, route, raw_ep, use_wm, evaluating)
        elif cal is not None:
            wm_info["calibrated_score"] = cal
        info["wmrl"] = wm_info
        return obs, reward, bool(terminated), bool(truncated), info

    # ------------------------------------------------------------------ group API
    def score_group(
        self,
        actions: Sequence[ActType],
        *,
        seed: int | None = None,
        options: dict[str, Any] | None = None,
        route: Route | None = None,
    ) -> GroupRollout:
        """Score a whole group of single-step episodes at once (one action per rollout).

        The group is routed like any other (the router's schedule, or ``route`` to force
        one); world-model inference runs as ONE batched ``predict`` call; on anchor groups
        each action is also executed for real (``reset(seed, options)`` then ``step``). The
        corrections are applied and updated exactly as in the per-episode API.

        Args:
            actions: the G actions of the group (G = ``len(actions)``, need not equal
                ``group_size``).
            seed, options: reset arguments shared by the group.
            route: force ``"anchor"``/``"world_model"`` (e.g. evaluation); bypasses the router.

        Returns:
            A :class:`GroupRollout`.

        Raises:
            RuntimeError: a per-episode group is in progress.
            ValueError: empty ``actions`` or an unknown ``route``.
            TooManyUngradedError: the stop rule fired (the group is scored and counted first).
        """
        if self.mode != "outcome":
            raise ValueError(
                "score_group() executes single-step actions (outcome mode); in reward mode roll the "
                "episodes out in the env and score them with score_trajectories()"
            )
        if self._group_route is not None and self._episode_in_group < self.group_size and self._episode_in_group > 0:
            raise RuntimeError(
                "score_group() called while a per-episode group is in progress "
                f"({self._episode_in_group}/{self.group_size} episodes); finish it first"
            )
        if len(actions) == 0:
            raise ValueError("score_group() needs at least one action")
        if route is not None and route not in (ANCHOR, WORLD_MODEL):
            raise ValueError(f"route must be 'anchor' or 'world_model', got {route!r}")
        self._reset_group_state()
        g = len(actions)
        ctx, _ = self.env.reset(seed=seed, options=options)
        if route is None and not self.training:
            route = self.eval_route
        preds: list[WorldModelPrediction] = []
        wm_secs = 0.0
        # evaluation calls the world model only on world-model routes or with
        # eval_with_world_model, as the per-episode API does
        if self.world_model is not None and (self.training or route == WORLD_MODEL or self.eval_with_world_model):
            t0 = time.perf_counter()
            preds = self._predict([ctx] * g, list(actions))
            wm_secs = time.perf_counter() - t0
        if route is None:
            route = self._next_route()
        r: Route = route
        if self.world_model is None and r == WORLD_MODEL:
            raise ValueError("this wrapper has no world model; only route='anchor' is possible")
        group_id = self.n_groups_started
        self.n_groups_started += 1
        raw = [p.score for p in preds] if preds else [None] * g
        observations: list[Any] = []
        infos: list[dict[str, Any]] = []
        real: list[float | None] | None = None
        exec_secs = 0.0
        if r == ANCHOR:
            envs = [self.env, *self.execution_envs]

            def execute(job: tuple[int, Any]) -> tuple[Any, Any, dict, float]:
                i, a = job
                e = envs[i % len(envs)]
                if i > 0:  # self.env was reset above for rollout 0
                    e.reset(seed=seed, options=options)
                t0 = time.perf_counter()
                obs, reward, _term, _trunc, info = self._real_step(e, a, ctx)
                return obs, reward, info, time.perf_counter() - t0

            t_group = time.perf_counter()
            if len(envs) == 1:
                outcomes = [execute((i, a)) for i, a in enumerate(actions)]
            else:
                from concurrent.futures import ThreadPoolExecutor

                # rollout i runs on env i % n; each env runs its rollouts in order
                def lane(k: int) -> list[tuple[int, tuple]]:
                    return [(i, execute((i, actions[i]))) for i in range(k, g, len(envs))]

                with ThreadPoolExecutor(max_workers=len(envs)) as pool:
                    lanes = list(pool.map(lane, range(len(envs))))
                outcomes = [o for _, o in sorted((x for ln in lanes for x in ln), key=lambda t: t[0])]
            exec_secs = time.perf_counter() - t_group
            real = []
            exec_causes: list[str | None] | None = []
            for obs, reward, info, dt in outcomes:
                self.ledger.add(EXECUTION, dt, 1)
                self.inner_step_calls += 1
                cause = execution_cause(reward, info)
                exec_causes.append(cause)
                real.append(float(reward) if cause is None else None)
                observations.append(obs)
                infos.append(dict(info))
        else:
            exec_causes = None
            for p in preds:
                observations.append(copy.deepcopy(p.observation if p.observation is not None else ctx))
                infos.append({"feedback": p.feedback, "status": p.status})
        corr = self.corrector.correct_group(r, raw, real, group_id)
        for i in range(g):
            infos[i]["wmrl"] = group_info(corr, group_id, i)
        self.n_episodes += g
        causes = self._record_group(corr, preds, exec_causes, infos, group_id=group_id)
        for i in range(g):
            infos[i]["wmrl"][CAUSE_KEY] = causes[i]
        return GroupRollout(
            group_id, r, corr.rewards, corr.advantage_weight, corr, observations, infos, preds, exec_secs, wm_secs
        )


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
        vector env, all from one initial state): the group is routed like any other, the world
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
        if route is None and not self.training:
            route = self.eval_route
        preds: list[WorldModelPrediction] = []
        wm_secs = 0.0
        if self.world_model is not None and (self.training or route == WORLD_MODEL or self.eval_with_world_model):
            t0 = time.perf_counter()
            preds = self._predict(list(contexts), [Trajectory(list(t.observations), list(t.actions), True) for t in trajectories])
            wm_secs = time.perf_counter() - t0
        r: Route = route if route is not None else self._next_route()
        if self.world_model is None and r == WORLD_MODEL:
            raise ValueError("this wrapper has no world model; only route='anchor' is possible")
        group_id = self.n_groups_started
        self.n_groups_started += 1
        raw = [p.score for p in preds] if preds else [None] * g
        real = [None if x is None else float(x) for x in real_returns] if r == ANCHOR else None
        corr = self.corrector.correct_group(r, raw, real, group_id)
        infos: list[dict[str, Any]] = [{"wmrl": group_info(corr, group_id, i)} for i in range(g)]
        self.n_episodes += g
        exec_causes = [execution_cause(x, None) for x in real_returns] if r == ANCHOR else None
        causes = self._record_group(corr, preds, exec_causes, group_id=group_id)
        for i in range(g):
            infos[i]["wmrl"][CAUSE_KEY] = causes[i]
        finals = [t.observations[-1] if t.observations else None for t in trajectories]
        return GroupRollout(group_id, r, corr.rewards, corr.advantage_weight, corr, finals, infos, preds, 0.0, wm_secs)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Router, corrections, ledger and counters (JSON-serialisable).

        Save at a group boundary: an unfinished per-episode group is not part of the state.
        """
        return {
            "router": self.router.state_dict(),
            "route_queue": list(self._route_queue),
            "corrector": self.corrector.state_dict(),
            "ledger": self.ledger.state_dict(),
            "n_groups_started": self.n_groups_started,
            "n_episodes": self.n_episodes,
            "inner_step_calls": self.inner_step_calls,
            "groups_per_step": self.groups_per_step,
            "ungraded": self.ungraded.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; the next group continues the saved run."""
        self.router.load_state_dict(state["router"])
        self._route_queue = list(state["route_queue"])
        self.corrector.load_state_dict(state["corrector"])
        self.ledger.load_state_dict(state["ledger"])
        self.n_groups_started = int(state["n_groups_started"])
        self.n_episodes = int(state["n_episodes"])
        self.inner_step_calls = int(state["inner_step_calls"])
        self.groups_per_step = int(state["groups_per_step"])
        self.ungraded.load_state_dict(state.get("ungraded", {}))  # states saved before it existed: zeros
        self._reset_group_state()

    def save(self, path: str | Path) -> None:
        """Write :meth:`state_dict` to a JSON file atomically (the env itself is not saved).

        Like ``VecNormalize.save`` in Stable-Baselines3: save beside the model checkpoint.
        """
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.state_dict()))
        tmp.replace(path)

    def load(self, path: str | Path) -> None:
        """Load a file written by :meth:`save` into this wrapper.

        Raises:
            FileNotFoundError: no such file.
        """
        self.load_state_dict(json.loads(Path(path).read_text()))
