"""``RoutedSubEnv``: the switch inside each sub-env of a vector env that skips the expensive
inner ``step`` on world-model routes, and :func:`make_vector_env`, which builds a vector env of
such sub-envs for :class:`~wmrl_envs.wrappers.vector.AnchoredWorldModelVectorWrapper`.

This is what runs in the sub-env (possibly in a worker process of an ``AsyncVectorEnv``): it
knows nothing of the method, only the plan ``(route, seed, options)`` the vector wrapper sends
it with ``set_attr``.
"""

from __future__ import annotations

from typing import Any, Callable, Literal

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv

from wmrl_envs.core import WORLD_MODEL, Route
from wmrl_envs.core.ledger import Stopwatch, execution_cpu_seconds

from .rollout_streams import seed_rollout

__all__ = ["RoutedSubEnv", "make_vector_env", "PLAN_ATTR", "END_ATTR", "MEMBER_ATTR", "EXEC_SECONDS_KEY", "EXEC_CPU_KEY"]

PLAN_ATTR = "wmrl_plan"
"""Name of the :class:`RoutedSubEnv` attribute the vector wrapper sets with ``set_attr``."""

END_ATTR = "wmrl_end_episode"
"""Name of the :class:`RoutedSubEnv` attribute (bool) the vector wrapper sets before a step in
which the world model predicts that a world-model episode ends (a prediction's ``terminated``):
the placeholder step then terminates. Consumed (reset to ``False``) by that step."""

MEMBER_ATTR = "wmrl_group_member"
"""Name of the :class:`RoutedSubEnv` attribute that holds the sub-env's index in its group (set
once by the vector wrapper): the rollout index of its random stream
(:mod:`~wmrl_envs.wrappers.rollout_streams`)."""

EXEC_SECONDS_KEY = "wmrl_exec_seconds"
"""Info key in which :class:`RoutedSubEnv` reports the seconds of each real inner step (the
vector wrapper moves it into its ledger and removes it from the infos)."""

EXEC_CPU_KEY = "wmrl_exec_cpu_seconds"
"""Info key in which :class:`RoutedSubEnv` reports the CPU-seconds of each real inner step
(float; NaN: not measured), moved into the ledger by the vector wrapper like
:data:`EXEC_SECONDS_KEY`. It is the inner env's ``info["execution_cpu_s"]`` when it reports one,
else the CPU measured around the step in the sub-env's own process (one sub-env per worker
process of an ``AsyncVectorEnv``, the sub-envs one after another in a ``SyncVectorEnv``: exact
in both)."""

class RoutedSubEnv(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Per-sub-env switch that skips the inner ``step`` on world-model routes (outcome mode).

    Put it OUTERMOST on every sub-env of a vector env wrapped by
    :class:`AnchoredWorldModelVectorWrapper` (:func:`make_vector_env` does). It holds a
    *plan* the vector wrapper sets with ``VectorEnv.set_attr`` before a step/reset:
    ``wmrl_plan = (route, seed, options)``:

    * ``route == "world_model"``: ``step`` does NOT call the inner env; it returns
      ``(last_observation, 0.0, t >= episode_steps or wmrl_end_episode, False, {})`` (a
      placeholder the vector wrapper replaces by the world model's prediction;
      ``wmrl_end_episode``, :data:`END_ATTR`, is set by the vector wrapper for the step whose
      prediction ends the episode, and cleared by the step). Any other route (``"anchor"``,
      ``None``): the inner ``step`` runs and ``info["wmrl_exec_seconds"]`` gets its
      wall-clock seconds (float), ``info["wmrl_exec_cpu_seconds"]`` its CPU-seconds
      (:data:`EXEC_CPU_KEY`).
    * ``seed``/``options``: used by ``reset`` when the caller gives none (an autoreset, or
      ``reset(options={"reset_mask": ...})`` whose remaining options are empty).

    ``wmrl_group_member`` (:data:`MEMBER_ATTR`, set once by the vector wrapper): the sub-env's
    index ``m`` in its group. A reset with a seed ``s`` (given or from the plan) then gives the
    inner env the task that ``reset(seed=s)`` draws and rollout ``m``'s own random stream
    (``np_random`` = :func:`~wmrl_envs.wrappers.rollout_streams.rollout_rng` ``(s, m)``), so that
    the G members of a group reset with one seed do not draw the same outcome noise.

    Without a plan (``None``) and without a member index the wrapper is transparent.

    Args:
        env: the sub-env (the expensive one).
        episode_steps: steps after which a world-model episode terminates (the vector wrapper
            overwrites it with its own ``episode_steps``).

    Attributes:
        inner_step_calls: real inner ``step`` calls (int).
        skipped_steps: steps answered without the inner env (int).
    """

    def __init__(self, env: gym.Env, episode_steps: int = 1) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, episode_steps=episode_steps)
        gym.Wrapper.__init__(self, env)
        if episode_steps < 1:
            raise ValueError(f"episode_steps must be >= 1, got {episode_steps}")
        self.wmrl_plan: tuple[Route | None, int | None, dict[str, Any] | None] | None = None
        self.wmrl_episode_steps = int(episode_steps)
        self.wmrl_end_episode = False
        self.wmrl_group_member: int | None = None
        self.inner_step_calls = 0
        self.skipped_steps = 0
        self._last_obs: Any = None
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset the inner env; missing ``seed``/empty ``options`` come from the plan; a seeded
        reset then gives the inner env its member's own random stream (see the class docstring)."""
        plan = self.wmrl_plan
        if plan is not None:
            if seed is None:
                seed = plan[1]
            if not options:
                options = plan[2]
        obs, info = self.env.reset(seed=seed, options=options)
        if self.wmrl_group_member is not None:
            seed_rollout(self.env, seed, self.wmrl_group_member)
        self._last_obs = obs
        self._t = 0
        self.wmrl_end_episode = False
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """Real inner step, or (world-model route) a placeholder without calling the inner env."""
        self._t += 1
        end_now, self.wmrl_end_episode = bool(self.wmrl_end_episode), False
        plan = self.wmrl_plan
        if plan is not None and plan[0] == WORLD_MODEL:
            self.skipped_steps += 1
            return self._last_obs, 0.0, self._t >= self.wmrl_episode_steps or end_now, False, {}
        sw = Stopwatch()
        obs, reward, terminated, truncated, info = self.env.step(action)
        dt, cpu = sw.read()
        self.inner_step_calls += 1
        self._last_obs = obs
        info = dict(info)
        info[EXEC_SECONDS_KEY] = dt
        charged = execution_cpu_seconds(info, cpu)
        info[EXEC_CPU_KEY] = float("nan") if charged is None else charged  # a float for the vector info
        return obs, reward, terminated, truncated, info


def make_vector_env(
    env_fn: Callable[[], gym.Env],
    num_envs: int,
    *,
    vectorization: Literal["sync", "async"] = "sync",
    autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    episode_steps: int = 1,
    **vector_kwargs: Any,
) -> VectorEnv:
    """A ``SyncVectorEnv``/``AsyncVectorEnv`` of ``num_envs`` copies of ``env_fn()``, each
    wrapped (outermost) in :class:`RoutedSubEnv`, ready for :class:`AnchoredWorldModelVectorWrapper`.

    Args:
        env_fn: builds one sub-env (for ``"async"`` it must be picklable by cloudpickle).
        num_envs: number of sub-envs (a multiple of the wrapper's ``group_size``).
        vectorization: ``"sync"`` (one process) or ``"async"`` (one process per sub-env).
        autoreset_mode: a ``gymnasium.vector.AutoresetMode`` (or its string value).
        episode_steps: steps of a world-model episode (the wrapper sets its own value anyway).
        **vector_kwargs: passed to the vector env's constructor (e.g. ``shared_memory``).

    Returns:
        The vector env.

    Raises:
        ValueError: unknown ``vectorization`` or ``num_envs < 1``.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    fns = [_RoutedFactory(env_fn, episode_steps) for _ in range(num_envs)]
    if vectorization == "sync":
        return SyncVectorEnv(fns, autoreset_mode=autoreset_mode, **vector_kwargs)
    if vectorization == "async":
        return AsyncVectorEnv(fns, autoreset_mode=autoreset_mode, **vector_kwargs)
    raise ValueError(f"vectorization must be 'sync' or 'async', got {vectorization!r}")


class _RoutedFactory:
    """Picklable ``lambda: RoutedSubEnv(env_fn(), episode_steps)``."""

    def __init__(self, env_fn: Callable[[], gym.Env], episode_steps: int) -> None:
        self.env_fn = env_fn
        self.episode_steps = episode_steps

    def __call__(self) -> RoutedSubEnv:
        return RoutedSubEnv(self.env_fn(), self.episode_steps)
