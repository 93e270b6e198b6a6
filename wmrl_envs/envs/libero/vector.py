"""The rollouts of one GRPO group in parallel LIBERO processes (Gymnasium ``AsyncVectorEnv``).

A group's G episodes share one initial state (the paper's VLA protocol, ``docs/method.md``,
"Reward mode"), so they can run side by side: :func:`make_libero_vector_env` builds a
Gymnasium :class:`~gymnasium.vector.AsyncVectorEnv` of G :class:`~wmrl_envs.envs.libero.LiberoEnv`
sub-processes (each with its own MuJoCo model and EGL context; processes are started with
``forkserver``, so no render context is inherited across a fork), with autoreset disabled: an
episode ends where LIBERO ends it. :func:`rollout_group` resets every sub-env to the group's
initial state and steps them together until all have ended; a sub-env whose episode ended idles
(:class:`IdleAfterDone` returns its last observation, reward 0 and the same end flags) while the
others go on.

Each process holds a LIBERO simulator (~2 GB resident with images), so G processes need G times
that; ``benchmarks/libero_parallel.py`` measures the speed-up against one process stepping the
G episodes in turn.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np

__all__ = ["IdleAfterDone", "make_libero_vector_env", "rollout_group"]


class IdleAfterDone(gym.Wrapper):
    """A member of a group's vector env.

    After its episode ended (terminated or truncated), ``step`` returns the last observation,
    reward 0.0, the same end flags and ``info["idle"] = True`` instead of raising, so that a vector
    env can step a group whose members end at different times. ``reset`` starts a new episode;
    the reset option ``{"init_state_ids": [s_0, ..., s_{G-1}]}`` gives member ``member`` the
    initial state ``s_member`` (Gymnasium's ``AsyncVectorEnv.reset`` hands every process the same
    options), e.g. to evaluate G held-out states at once.

    Args:
        env: the LIBERO env (or any env with an ``init_state_id`` reset option).
        member: this env's index in the vector env (int >= 0).
    """

    def __init__(self, env: gym.Env, member: int = 0) -> None:
        super().__init__(env)
        self.member = int(member)
        self._last: tuple[Any, bool, bool, dict] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        self._last = None
        opts = dict(options or {})
        if "init_state_ids" in opts:
            ids = list(opts.pop("init_state_ids"))
            if self.member >= len(ids):
                raise ValueError(f"init_state_ids has {len(ids)} entries; member {self.member} has none")
            opts["init_state_id"] = int(ids[self.member])
        return self.env.reset(seed=seed, options=opts or None)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self._last is not None:
            obs, term, trunc, info = self._last
            return obs, 0.0, term, trunc, {**info, "idle": True}
        obs, reward, term, trunc, info = self.env.step(action)
        if term or trunc:
            self._last = (obs, term, trunc, dict(info))
        return obs, reward, term, trunc, {**info, "idle": False}


class _SpacesOnly(gym.Env):
    """What ``AsyncVectorEnv`` builds in the parent process to read the spaces: LiberoEnv's spaces
    and metadata without a simulator (a real env there would cost ~2 GB and seconds, and its render
    context would be made and freed in the caller's process)."""

    def __init__(self, env_kwargs: dict[str, Any]) -> None:
        from wmrl_envs.envs.libero.env import LiberoEnv

        self.metadata = dict(LiberoEnv.metadata)
        self.render_mode = env_kwargs.get("render_mode")
        self.observation_space, self.action_space = LiberoEnv.spaces(
            env_kwargs.get("image_size", 128), env_kwargs.get("images", True)
        )


def _make(task_id: int, env_kwargs: dict[str, Any], member: int) -> Callable[[], gym.Env]:
    parent = os.getpid()

    def thunk() -> gym.Env:
        from wmrl_envs.envs.libero.env import LiberoEnv

        if os.getpid() == parent:  # AsyncVectorEnv reading the spaces in the calling process
            return _SpacesOnly(env_kwargs)
        return IdleAfterDone(LiberoEnv(task_id, **env_kwargs), member)

    return thunk


def make_libero_vector_env(n: int, task_id: int = 0, *, context: str = "forkserver", **env_kwargs: Any) -> gym.vector.AsyncVectorEnv:
    """``n`` LIBERO-Long processes of one task as an ``AsyncVectorEnv`` (autoreset disabled).

    Args:
        n: processes (G, the group size), >= 1.
        task_id: the ``libero_10`` task (0-9).
        context: multiprocessing start method (``"forkserver"`` default; ``"spawn"`` works too).
        **env_kwargs: :class:`~wmrl_envs.envs.libero.LiberoEnv` arguments (``image_size``,
            ``images``, ``max_steps``, ...), the same for every process.

    Raises:
        ValueError: ``n < 1``.
        TypeError: an argument LiberoEnv does not take.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    import inspect

    from wmrl_envs.envs.libero.env import LiberoEnv

    try:  # argument names are checked here; values are checked by each process's LiberoEnv
        inspect.signature(LiberoEnv.__init__).bind(None, int(task_id), **env_kwargs)
    except TypeError as e:
        raise TypeError(f"make_libero_vector_env: {e} (the keyword arguments are LiberoEnv's)") from None
    from gymnasium.vector import AutoresetMode

    return gym.vector.AsyncVectorEnv([_make(int(task_id), dict(env_kwargs), i) for i in range(int(n))],
                                     context=context, autoreset_mode=AutoresetMode.DISABLED)


def rollout_group(
    vec_env: gym.vector.VectorEnv,
    act: Callable[[Any, np.ndarray], np.ndarray],
    init_state_id: int | Sequence[int],
    *,
    max_policy_steps: int | None = None,
    record_final: bool = False,
) -> list[dict[str, Any]]:
    """Roll out one group: every sub-env from its initial state, stepped together until all ended.

    Args:
        vec_env: from :func:`make_libero_vector_env` (G sub-envs).
        act: ``act(batched_obs, active) -> actions`` with ``active`` a (G,) bool mask of the
            episodes still running; returns (G, 7) or (G, k, 7) actions (rows of ended episodes
            are ignored).
        init_state_id: the group's initial state (0-49), or G of them (one per member, e.g. for
            an evaluation of G held-out states).
        max_policy_steps: stop after this many vector steps even if some episode runs on
            (default: until every episode ended; LIBERO truncates at its ``max_steps``).
        record_final: also return each member's last observation (``"final_observation"``).

    Returns:
        G dicts ``{"success": bool, "return": float, "steps": int (vector steps taken by the
        episode), "terminated": bool, "truncated": bool}``.

    Raises:
        ValueError: a list of initial states whose length is not G.
    """
    g = vec_env.num_envs
    if isinstance(init_state_id, (int, np.integer)):
        options: dict[str, Any] = {"init_state_id": int(init_state_id)}
    else:
        ids = [int(s) for s in init_state_id]
        if len(ids) != g:
            raise ValueError(f"got {len(ids)} initial states for a group of {g}")
        options = {"init_state_ids": ids}
    obs, _ = vec_env.reset(options=options)
    active = np.ones(g, dtype=bool)
    out = [{"success": False, "return": 0.0, "steps": 0, "terminated": False, "truncated": False} for _ in range(g)]
    n = 0
    while active.any() and (max_policy_steps is None or n < max_policy_steps):
        actions = np.asarray(act(obs, active.copy()), dtype=np.float64)
        obs, reward, term, trunc, _ = vec_env.step(actions)
        n += 1
        for i in np.flatnonzero(active):
            out[i]["return"] += float(reward[i])
            out[i]["steps"] += 1
            if term[i] or trunc[i]:
                out[i].update(terminated=bool(term[i]), truncated=bool(trunc[i]), success=bool(term[i]))
                if record_final:
                    out[i]["final_observation"] = {k: v[i] for k, v in obs.items()} if isinstance(obs, dict) else obs[i]
                active[i] = False
    if record_final:
        for i in np.flatnonzero(active):  # stopped by max_policy_steps
            out[i]["final_observation"] = {k: v[i] for k, v in obs.items()} if isinstance(obs, dict) else obs[i]
    return out
