"""WMRL inside SkyRL: a skyrl-gym text environment that routes whole groups of samples.

SkyRL (``skyrl-gym`` 0.4.0, ``skyrl.train``) runs text environments of the shape
:class:`skyrl_gym.envs.base_text_env.BaseTextEnv`: the task is fixed in the constructor
``Env(env_config, extras)`` (``extras`` = the dataset row's columns other than the prompt, e.g.
``reward_spec.ground_truth``), ``init(prompt)`` returns the chat the model sees, ``step(text)``
returns ``{"observations", "reward", "done", "metadata"}``, and ``close()`` ends the episode.
Its generator (``SkyRLGymGenerator.agent_loop``) makes one env per sample with
``skyrl_gym.make(env_class, env_config=..., extras=deepcopy(row extras))``, calls ``init``,
then ``step`` per turn, ``get_metrics`` and ``close``.

:func:`register_wmrl_env` registers :class:`WMRLTextEnv` — itself a ``BaseTextEnv`` — under
an id of its own in skyrl-gym's registry, around any registered text env (``"gsm8k"``,
``"gsm8k_multi_turn"``, a user's). SkyRL's trainer uses it unchanged
(``environment.env_class=<id>``). The method (``docs/method.md``) runs in one
:class:`~wmrl_envs.core.CorrectionLoop`, held by a :class:`WMRLSkyRLHub` that every env
instance of the run shares:

* **groups** — SkyRL gives an env no group id: the prompt's ``uid`` and the sample's
  ``repetition_id`` (``TrajectoryID``) stay in the generator. What the G samples of one prompt
  share in the env is an equal copy of the row's ``extras``, and the generator builds their
  envs one after the other (prompt-major, synchronously, before its first ``await``). A
  group is therefore keyed on ``extras[group_key]`` when the row has that column (default
  ``"wmrl_group"``; a generator subclass can set it from ``trajectory_id.instance_id`` in its
  ``_setup_env_extras`` hook), else on a hash of the whole ``extras`` (without the
  ``max_turns`` the generator adds); every ``group_size`` envs made with one key form one group,
  so two rows with equal extras in one batch still give two groups. The route is drawn when the
  group's first env is made; all its envs get the same route and ρ.
* **routes** — anchor: the inner env's ``step`` runs (the real execution, timed into the ledger)
  and, while training, the world model scores every step too (anchor pairs). World model: the
  inner env's ``step`` is never called; the world model predicts each turn's score (the turn's
  own score, as the inner env's turn reward: not a running or episode total) and whether the
  episode ends (``terminated``: a prediction can end it, as the real env ends on a solved task;
  else it ends after the inner env's ``max_turns``). A turn that does not end the episode sends
  the model the next observation, as the real env would: the prediction's ``observation`` (a str
  or a list of chat messages), else ``next_observation(inner_env, action, turn)`` when the hub
  has one (what the real env would send, computed without executing), else a stand-in: the last
  message the env sent, repeated (the prompt's last message on the first turn; the gym
  wrappers' outcome mode likewise repeats the observation). The inner env's constructor and
  ``init`` run on both routes (they give the model its task and prompt).
* **rewards** — an episode's score aggregates its turns (``episode_score``: ``"sum"``, the
  default, as SkyRL's GRPO sums a trajectory's turn rewards; ``"max"``; ``"last"``) by one rule
  on both routes: the inner env's turn rewards on anchors, the world model's turn scores on
  world-model episodes; its training reward is the real score on anchors and ``f̂(r̂)`` on
  world-model episodes. Each step pays what the running training reward gained, so the turn rewards of an
  episode sum to its training reward (on anchors with ``"sum"``: the inner env's own turn
  rewards, unchanged). When the G episodes of a group have ended (``done`` or ``close``),
  :meth:`~wmrl_envs.core.CorrectionLoop.close_group` feeds the anchor pairs to the debiaser and
  the group's disagreement to ρ.
* **ungraded** — SkyRL takes a float reward at every step (its generator asserts it is not
  ``None``) and its advantage estimators have no mask, so an ungraded episode cannot be left
  out of its group's statistics by the env. What this adapter does: the episode ends at the
  ungraded step, its turn rewards sum to ``ungraded_reward`` (default 0.0); it is never fed to
  the corrections as a score (no anchor pair, no calibration point), it is counted in the
  ledger with its cause and by the stop rule (``max_ungraded_share``), and it is marked in the
  step's ``metadata["wmrl"]["ungraded_cause"]`` and in the env metrics SkyRL logs
  (``environment/wmrl_ungraded``: the share of ungraded episodes).
* **ρ** — SkyRL computes advantages in the trainer from the rewards only. With
  ``rho_in_rewards=True`` an anchor episode's turn rewards are multiplied by the ρ of its
  group's ticket; that multiplies its advantages by ρ exactly only when the group mean alone is
  taken off (``trainer.algorithm.grpo_norm_by_std=false``): with the standard deviation a
  per-group scale cancels. Default ``False``: ρ is estimated and logged, not applied.
* **evaluation** — the env cannot tell SkyRL's evaluation batches from training ones, so
  :func:`register_wmrl_env` also registers ``<id>_eval`` (give it as the ``env_class`` of the
  evaluation rows): its groups take the loop's ``eval_route`` (default real execution) and
  update nothing.

One hub per process: SkyRL runs its generator, hence every env, in the process of its
entrypoint task, so :func:`register_wmrl_env` is called there (as SkyRL's examples register
their envs). The hub's state is not part of SkyRL's checkpoints: :meth:`WMRLSkyRLHub.save` /
:meth:`~WMRLSkyRLHub.load` between steps.

Contents: :func:`register_wmrl_env`, :class:`WMRLTextEnv`, :class:`WMRLSkyRLHub`,
:func:`as_world_model`, :data:`GROUP_KEY`.

Example:
    >>> import skyrl_gym                                                     # doctest: +SKIP
    >>> from agents.adapters.skyrl import register_wmrl_env                  # doctest: +SKIP
    >>> hub = register_wmrl_env("wmrl_gsm8k", "gsm8k", my_world_model, group_size=5,
    ...                         groups_per_step=1024, correction=CorrectionConfig(anchor_fraction=0.1))
    >>> env = skyrl_gym.make("wmrl_gsm8k", env_config={}, extras=row_extras)  # what SkyRL does
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Sequence

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from wmrl_envs.core import (
    ANCHOR,
    EXECUTION,
    WORLD_MODEL_SOURCE,
    CorrectionConfig,
    CorrectionLoop,
    GroupTicket,
    Stopwatch,
    execution_cpu_seconds,
    reported_execution_cost,
)
from wmrl_envs.core.ungraded import SANDBOX_UNAVAILABLE, WORLD_MODEL_UNGRADED, execution_cause
from wmrl_envs.world_models import WorldModelPrediction

__all__ = ["GROUP_KEY", "WMRLSkyRLHub", "WMRLTextEnv", "as_world_model", "register_wmrl_env"]

GROUP_KEY = "wmrl_group"
"""Default ``extras`` column that names a sample's group when the row has it."""

EpisodeScore = Literal["sum", "max", "last"]


class _CallableWorldModel:
    """``predict`` over a per-sample function ``fn(context, action) -> float | None | WorldModelPrediction``."""

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def predict(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[WorldModelPrediction]:
        out = []
        for c, a in zip(contexts, actions):
            p = self.fn(c, a)
            if not isinstance(p, WorldModelPrediction):
                p = WorldModelPrediction(score=None if p is None else float(p))
            out.append(p)
        return out


def as_world_model(world_model: Any) -> Any:
    """A world model for the loop: an object with ``predict(contexts, actions)`` as is (e.g.
    :class:`~wmrl_envs.world_models.LearnedWorldModel`), or a plain function
    ``fn(context, action) -> float | None | WorldModelPrediction`` called once per sample.

    Raises:
        TypeError: neither.
    """
    if callable(getattr(world_model, "predict", None)):
        return world_model
    if callable(world_model):
        return _CallableWorldModel(world_model)
    raise TypeError(
        f"world_model must have predict(contexts, actions) or be a function fn(context, action) -> score, "
        f"got {type(world_model).__name__}")


def _aggregate(scores: Sequence[float | None], how: str) -> float | None:
    if not scores or any(s is None for s in scores):
        return None
    vals = [float(s) for s in scores]  # type: ignore[arg-type]
    return sum(vals) if how == "sum" else max(vals) if how == "max" else vals[-1]


def _as_messages(obs: Any) -> list[dict[str, str]]:
    """A predicted observation as SkyRL chat messages (``None`` / ``""``: none)."""
    if obs is None or obs == "":
        return []
    if isinstance(obs, str):
        return [{"role": "user", "content": obs}]
    if isinstance(obs, Mapping):
        return [dict(obs)]
    return [dict(m) for m in obs]


@dataclass
class _Episode:
    raw: float | None
    real: float | None
    wm_cause: str | None
    exec_cause: str | None
    world_model_called: bool
    learn: tuple[Any, str] | None = None  # (context, action) of a one-turn episode


@dataclass
class _Group:
    key: str
    ticket: GroupTicket
    size: int
    joined: int = 0
    episodes: list[_Episode] = field(default_factory=list)
    closed: bool = False
    rewards: list[float | None] = field(default_factory=list)


class WMRLSkyRLHub:
    """The routing and corrections shared by every :class:`WMRLTextEnv` of a run (one process).

    Args:
        world_model: see :func:`as_world_model`.
        group_size: G, samples per prompt (SkyRL's ``generator.n_samples_per_prompt``, int >= 1).
        groups_per_step: prompts per training step (``trainer.train_batch_size``): the router
            draws the routes of this many groups at a time (default ``ceil(1 / anchor_fraction)``).
        correction: a :class:`~wmrl_envs.core.CorrectionConfig` (anchor fraction, floor,
            debiaser, ρ; default: the reference settings).
        seed: the router's seed (int): the same seed gives the same routes in the same order.
        episode_score: ``"sum"`` (default), ``"max"`` or ``"last"``: how an episode's turn
            scores make its score, on both routes.
        ungraded_reward: what an ungraded episode's turn rewards sum to (float, default 0.0).
        rho_in_rewards: multiply anchor episodes' rewards by ρ (see the module docstring).
        next_observation: what the real env would send after a world-model turn that does not end
            the episode, computed without executing: ``f(inner_env, action, turn) -> str | list
            of chat messages | None`` (``turn``: turns taken, 1 after the first). Used when the
            prediction has no ``observation``; ``None`` (default) or a ``None`` return: the
            stand-in (the last message the env sent, repeated; module docstring).
        world_model_timeout_s, max_ungraded_share, eval_route: as in
            :class:`~wmrl_envs.core.CorrectionLoop`.

    Attributes:
        loop: the :class:`~wmrl_envs.core.CorrectionLoop` (router, corrector, ledger).
        group_size, episode_score, ungraded_reward, rho_in_rewards, next_observation: as given.
        closed_groups: ``(key, GroupCorrection)`` of the latest 256 closed groups (list).

    Raises:
        ValueError: ``group_size`` not an integer >= 1; unknown ``episode_score``.
        TypeError: see :func:`as_world_model`; ``next_observation`` not callable.
    """

    def __init__(
        self,
        world_model: Any,
        *,
        group_size: int,
        groups_per_step: int | None = None,
        correction: CorrectionConfig | None = None,
        seed: int = 0,
        episode_score: EpisodeScore = "sum",
        ungraded_reward: float = 0.0,
        rho_in_rewards: bool = False,
        next_observation: Callable[[BaseTextEnv, str, int], Any] | None = None,
        world_model_timeout_s: float | None = None,
        max_ungraded_share: float | None = 0.5,
        eval_route: str = ANCHOR,
    ) -> None:
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise ValueError(f"group_size must be an integer >= 1 (generator.n_samples_per_prompt), got {group_size!r}")
        if episode_score not in ("sum", "max", "last"):
            raise ValueError(f"episode_score must be 'sum', 'max' or 'last', got {episode_score!r}")
        if next_observation is not None and not callable(next_observation):
            raise TypeError("next_observation must be a function f(inner_env, action, turn) -> the next message(s), "
                            f"or None; got {type(next_observation).__name__}")
        wm = None if world_model is None else as_world_model(world_model)
        self.loop = CorrectionLoop(correction, world_model=wm, seed=int(seed), groups_per_step=groups_per_step,
                                   eval_route=eval_route,  # type: ignore[arg-type]
                                   world_model_timeout_s=world_model_timeout_s, max_ungraded_share=max_ungraded_share)
        self.group_size = int(group_size)
        self.episode_score = episode_score
        self.ungraded_reward = float(ungraded_reward)
        self.rho_in_rewards = bool(rho_in_rewards)
        self.next_observation = next_observation
        self.closed_groups: list[tuple[str, Any]] = []
        self._filling: dict[tuple[str, bool], _Group] = {}
        self._open: list[_Group] = []
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ groups
    def join(self, key: str, training: bool = True) -> _Group:
        """The group of the next sample with ``key``: the open one of that key with a free place,
        else a new group routed now by the schedule. An evaluation sample (``training=False``) is
        a group of its own on ``eval_route`` (SkyRL evaluates with ``eval_n_samples_per_prompt``
        samples, default 1; nothing is updated by evaluation groups)."""
        with self._lock:
            if not training:
                return _Group(key, self.loop.eval_ticket(), size=1, joined=1)
            g = self._filling.get((key, training))
            if g is None:
                g = _Group(key, self.loop.open_group(), size=self.group_size)
                self._filling[(key, training)] = g
                self._open.append(g)
            g.joined += 1
            if g.joined >= g.size:
                del self._filling[(key, training)]
            return g

    def finish(self, group: _Group, episode: _Episode) -> None:
        """Record an ended episode; the group's G-th closes it (corrections updated)."""
        with self._lock:
            self.loop.count_episodes(1)
            if group.closed:
                return
            group.episodes.append(episode)
            if len(group.episodes) >= group.size:
                self._close(group)

    def flush(self) -> int:
        """Close every open group with the episodes it has (samples that never ended do not
        count); returns how many were closed. Call it when a batch was cut short."""
        with self._lock:
            open_groups = [g for g in self._open if not g.closed]
            for g in open_groups:
                self._close(g)
            self._filling.clear()
            return len(open_groups)

    def _close(self, g: _Group) -> None:
        g.closed = True
        if g.ticket.training:
            self._open = [x for x in self._open if x is not g]
        if not g.episodes:  # no sample of it ever ended: nothing to correct
            return
        eps = g.episodes
        anchor = g.ticket.route == ANCHOR
        # a world model that learns is taught with one-turn episodes only (as the wrappers do)
        one_turn = all(e.learn is not None for e in eps)
        corr = self.loop.close_group(
            g.ticket, [e.raw for e in eps], [e.real for e in eps] if anchor else None,
            wm_causes=[e.wm_cause for e in eps], exec_causes=[e.exec_cause for e in eps] if anchor else None,
            world_model_called=all(e.world_model_called for e in eps), where=f"SkyRL group {g.key[:12]}",
            contexts=[e.learn[0] for e in eps] if one_turn else None,  # type: ignore[index]
            actions=[e.learn[1] for e in eps] if one_turn else None)  # type: ignore[index]
        g.rewards = list(corr.rewards)
        self.closed_groups.append((g.key, corr))
        del self.closed_groups[:-256]

    # ------------------------------------------------------------------ reporting and state
    def stats(self) -> dict[str, Any]:
        """Flat dict: routing counts, ρ, costs, ungraded counts, open groups and the corrector's stats."""
        with self._lock:
            led, r = self.loop.ledger, self.loop.router
            return {
                "groups": r.n_groups_routed, "anchor_groups": r.n_anchor_groups,
                "realised_anchor_fraction": r.realised_fraction, "anchor_fraction": r.anchor_fraction,
                "rho": float(self.loop.rho), "real_executions": led.count(EXECUTION),
                "world_model_predictions": led.count(WORLD_MODEL_SOURCE), "ungraded": dict(led.ungraded_counts()),
                "open_groups": len(self._open), **self.loop.corrector.stats(),
            }

    def save(self, path: Any) -> None:
        """Save the loop's state (router, corrections, ledger) to ``path`` (JSON); between steps."""
        self.loop.save(path)

    def load(self, path: Any) -> None:
        """Load :meth:`save`'s file (groups in flight are dropped)."""
        with self._lock:
            self.loop.load(path)
            self._filling.clear()
            self._open.clear()


InnerFactory = Callable[..., BaseTextEnv]


def _group_key(extras: Mapping[str, Any], group_key: str | Callable[[Mapping[str, Any]], Any] | None) -> str:
    if callable(group_key):
        return str(group_key(extras))
    if group_key is not None and extras.get(group_key) is not None:
        return str(extras[group_key])
    rest = {k: v for k, v in extras.items() if k != "max_turns"}
    blob = json.dumps(rest, sort_keys=True, default=repr)
    return hashlib.sha1(blob.encode()).hexdigest()


class WMRLTextEnv(BaseTextEnv):
    """A skyrl-gym text env that runs an inner one on anchor groups and a world model otherwise.

    Made by skyrl-gym's ``make`` from the class :func:`register_wmrl_env` registers (which binds
    ``hub``, ``inner``, ``training`` and ``group_key``); see the module docstring for what each
    route does.

    Args:
        env_config: SkyRL's ``environment.skyrl_gym.<id>`` section, passed to the inner env.
        extras: the sample's row extras (passed to the inner env; the group key is taken from them).
        hub, inner, training, group_key: bound by :func:`register_wmrl_env`.

    Attributes:
        route: ``"anchor"`` or ``"world_model"`` (the group's).
        group_id: the loop's group id (``None`` on evaluation groups).
        inner: the inner env (its ``step`` runs on anchors only).
        real_steps: inner ``step`` calls made by this env (int).
    """

    hub: WMRLSkyRLHub
    inner_env: str | InnerFactory
    training: bool = True
    group_key: str | Callable[[Mapping[str, Any]], Any] | None = GROUP_KEY

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if not isinstance(getattr(type(self), "hub", None), WMRLSkyRLHub):
            raise TypeError("WMRLTextEnv is made from the class register_wmrl_env() registers; register it first")
        extras = dict(extras or {})
        inner = self.inner_env
        if isinstance(inner, str):
            import skyrl_gym

            self.inner = skyrl_gym.make(inner, env_config=env_config, extras=copy.deepcopy(extras))
        else:
            self.inner = inner(env_config=env_config, extras=copy.deepcopy(extras))
        self.max_turns = int(getattr(self.inner, "max_turns", 1) or 1)
        self._group = self.hub.join(_group_key(extras, self.group_key), self.training)
        ticket = self._group.ticket
        self.route = ticket.route
        self.group_id = ticket.group_id
        self.real_steps = 0
        self._history: list[dict[str, str]] = []
        self._raws: list[float | None] = []
        self._reals: list[float | None] = []
        self._wm_cause: str | None = None
        self._exec_cause: str | None = None
        self._wm_called = False
        self._paid = 0.0
        self._ended = False
        self._first_turn: tuple[Any, str] | None = None

    # ------------------------------------------------------------------ episode
    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """The inner env's ``init`` (on both routes); the chat so far is kept as the world model's context."""
        obs, meta = self.inner.init(prompt)
        self._history = copy.deepcopy(list(obs))
        return obs, {**dict(meta or {}), "wmrl_route": self.route, "wmrl_group_id": self.group_id}

    def _target(self) -> float | None:
        """The episode's training reward so far (``None``: ungraded)."""
        hub = self.hub
        if self.route == ANCHOR:
            if self._exec_cause:
                return None
            real = _aggregate(self._reals, hub.episode_score)
            if real is None:
                return None
            return real * (float(self._group.ticket.rho) if hub.rho_in_rewards else 1.0)
        if self._wm_cause:
            return None
        raw = _aggregate(self._raws, hub.episode_score)
        return None if raw is None else hub.loop.calibrate([raw])[0]

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One turn: the world model's prediction (world-model route; also on training anchors,
        for the pairs) and, on anchors, the inner env's ``step``.

        Returns:
            SkyRL's step output; ``reward`` (float) is what the episode's training reward gained
            with this turn; ``observations`` on a world-model turn that does not end the episode:
            the next observation (module docstring: the prediction's, ``next_observation``'s or
            the stand-in); ``metadata["wmrl"]`` holds ``route``, ``group_id``, ``raw`` (r̂ of the
            turn), ``ungraded_cause`` and, on world-model turns, ``observation_source``
            (``"world_model"``, ``"next_observation"``, ``"stand_in"``; ``None`` at the end).

        Raises:
            RuntimeError: ``step`` after the episode ended.
        """
        if self._ended:
            raise RuntimeError("step() after the episode ended (done was returned or close() was called)")
        hub, loop, ticket = self.hub, self.hub.loop, self._group.ticket
        self.turns += 1
        context = copy.deepcopy(self._history)
        if self.turns == 1:
            self._first_turn = (context, action)
        pred: WorldModelPrediction | None = None
        if loop.calls_world_model(ticket.route, ticket.training):
            pred = loop.predict([context], [action])[0]
            self._wm_called = True
            self._raws.append(pred.score)
            if pred.score is None and self._wm_cause is None:
                self._wm_cause = pred.ungraded_cause or WORLD_MODEL_UNGRADED
        out_meta: dict[str, Any] = {}
        post = None
        if self.route == ANCHOR:
            from wmrl_envs.sandbox.base import SandboxUnavailableError

            sw = Stopwatch()
            try:
                out = self.inner.step(action)
            except SandboxUnavailableError as exc:
                out = {"observations": [], "reward": None, "done": True,
                       "metadata": {"graded": False, "ungraded_cause": SANDBOX_UNAVAILABLE, "error": str(exc)}}
            wall, cpu = sw.read()
            self.real_steps += 1
            out_meta = dict(out.get("metadata") or {})
            loop.record_execution(wall, 1, cpu_seconds=execution_cpu_seconds(out_meta, cpu), ticket=ticket,
                                  cost=reported_execution_cost(out_meta))
            cause = execution_cause(out.get("reward"), out_meta)
            self._reals.append(None if cause else float(out["reward"]))
            if cause and self._exec_cause is None:
                self._exec_cause = cause
            obs, post = list(out.get("observations") or []), out.get("postprocessed_action")
            done = bool(out.get("done"))
            done = done or cause is not None
        else:
            assert pred is not None
            done = bool(pred.terminated) or self.turns >= self.max_turns or self._wm_cause is not None
            obs, obs_source = ([], None) if done else self._next_observation(pred, action)
        target = self._target()
        if target is not None and self.route == ANCHOR and hub.episode_score == "sum":
            # the inner env's own turn reward (times ρ): exact, no running difference
            scale = float(ticket.rho) if hub.rho_in_rewards else 1.0
            reward = float(self._reals[-1]) * scale  # type: ignore[arg-type]
        else:
            reward = (hub.ungraded_reward if target is None else target) - self._paid
        self._paid += reward
        self._history += [{"role": "assistant", "content": action}, *copy.deepcopy(obs)]
        cause = self._exec_cause if self.route == ANCHOR else self._wm_cause
        meta = {**out_meta, "wmrl": {"route": self.route, "group_id": self.group_id,
                                     "raw": None if pred is None else pred.score, "ungraded_cause": cause}}
        if self.route != ANCHOR:
            meta["wmrl"]["observation_source"] = obs_source
        if done:
            self._end()
        result = BaseTextEnvStepOutput(observations=obs, reward=float(reward), done=done, metadata=meta)
        if post is not None:
            result["postprocessed_action"] = post
        return result

    def _next_observation(self, pred: WorldModelPrediction, action: str) -> tuple[list[dict[str, str]], str]:
        """The observation of a world-model turn that does not end the episode, and where it came
        from: ``"world_model"`` (the prediction's), ``"next_observation"`` (the hub's function) or
        ``"stand_in"`` (the last message the env sent, repeated)."""
        obs = _as_messages(pred.observation)
        if obs:
            return obs, "world_model"
        fn = self.hub.next_observation
        if fn is not None:
            obs = _as_messages(fn(self.inner, action, self.turns))
            if obs:
                return obs, "next_observation"
        last = next((m for m in reversed(self._history) if m.get("role") != "assistant"), None)
        return ([copy.deepcopy(dict(last))] if last is not None else []), "stand_in"

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        anchor = self.route == ANCHOR
        raw = _aggregate(self._raws, self.hub.episode_score) if self._raws else None
        real = _aggregate(self._reals, self.hub.episode_score) if anchor and self._reals else None
        exec_cause = self._exec_cause if anchor else None
        if anchor and real is None and exec_cause is None:
            exec_cause = "execution_ungraded"  # ended before any real step (closed at once)
        wm_cause = self._wm_cause
        if raw is None and wm_cause is None and (not anchor or self._wm_called):
            wm_cause = WORLD_MODEL_UNGRADED
        learn = self._first_turn if self.turns == 1 else None
        self.hub.finish(self._group, _Episode(raw, real, wm_cause, exec_cause, self._wm_called, learn))

    @property
    def ungraded(self) -> bool:
        """Whether the episode has no training reward (its cause is in ``metadata``)."""
        return (self._exec_cause if self.route == ANCHOR else self._wm_cause) is not None

    def get_metrics(self) -> dict[str, Any]:
        """The inner env's metrics (anchor episodes only: it ran) and ``wmrl_anchor``,
        ``wmrl_ungraded`` (0/1 per episode: SkyRL averages them), ``wmrl_rho``."""
        inner = self.inner.get_metrics() if self.route == ANCHOR else {}
        return {**inner, "wmrl_anchor": float(self.route == ANCHOR), "wmrl_ungraded": float(self.ungraded),
                "wmrl_rho": float(self.hub.loop.rho)}

    def close(self) -> None:
        """End the episode (a sample cut short counts with its score so far) and close the inner env."""
        try:
            self._end()
        finally:
            self.inner.close()


def register_wmrl_env(
    env_id: str,
    inner: str | InnerFactory,
    world_model: Any,
    *,
    group_size: int,
    eval_env_id: str | None = None,
    group_key: str | Callable[[Mapping[str, Any]], Any] | None = GROUP_KEY,
    hub: WMRLSkyRLHub | None = None,
    **hub_kwargs: Any,
) -> WMRLSkyRLHub:
    """Register ``env_id`` (training) and ``eval_env_id`` (evaluation) in skyrl-gym's registry.

    Args:
        env_id: the new id (SkyRL's ``environment.env_class`` or the rows' ``env_class``).
        inner: the real env: a registered skyrl-gym id (e.g. ``"gsm8k"``) or a factory
            ``f(env_config=..., extras=...) -> BaseTextEnv``.
        world_model: see :func:`as_world_model`.
        group_size: G (``generator.n_samples_per_prompt``).
        eval_env_id: id of the evaluation twin (default ``env_id + "_eval"``).
        group_key: the ``extras`` column naming a sample's group (default :data:`GROUP_KEY`;
            rows without it are keyed on a hash of their extras), or ``f(extras) -> key``.
        hub: an existing hub to share (then ``world_model``, ``group_size`` and ``hub_kwargs``
            are not used).
        **hub_kwargs: :class:`WMRLSkyRLHub`'s other arguments (``groups_per_step``,
            ``correction``, ``seed``, ``episode_score``, ...).

    Returns:
        The :class:`WMRLSkyRLHub` (routing counts, ρ, ledger; ``save``/``load``).

    Raises:
        skyrl_gym.error.RegistrationError: an id is registered already.
        skyrl_gym.error.Error: ``inner`` is an id skyrl-gym does not know.
    """
    import skyrl_gym
    from skyrl_gym.envs.registration import _find_spec

    if isinstance(inner, str):
        _find_spec(inner)  # fail now, with skyrl-gym's message, not at the first sample
    if hub is None:
        hub = WMRLSkyRLHub(world_model, group_size=group_size, **hub_kwargs)
    eval_env_id = eval_env_id or f"{env_id}_eval"
    for name, training in ((env_id, True), (eval_env_id, False)):
        cls = type(f"WMRLTextEnv[{name}]", (WMRLTextEnv,), {
            "hub": hub, "training": training,
            # staticmethod: a function stored on a class would be bound to the env instance
            "inner_env": inner if isinstance(inner, str) else staticmethod(inner),
            "group_key": staticmethod(group_key) if callable(group_key) else group_key,
            "__module__": __name__})
        # a class (not a closure): SkyRL's metrics look up aggregate_metrics on the entry point
        skyrl_gym.register(id=name, entry_point=cls)
    return hub

