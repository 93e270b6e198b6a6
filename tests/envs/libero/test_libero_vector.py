"""The rollouts of a group in parallel LIBERO processes (``wmrl_envs.envs.libero.vector``): two
real simulator processes under Gymnasium's ``AsyncVectorEnv`` share the group's initial state and
reproduce a serial env's trajectory (~1 min on 2 CPU cores, mostly simulator construction)."""

from __future__ import annotations

import numpy as np
import pytest

from wmrl_envs.envs.libero.vector import IdleAfterDone, make_libero_vector_env, rollout_group

pytestmark = pytest.mark.slow


def test_bad_process_count_is_refused():
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        make_libero_vector_env(0)


def test_two_processes_share_the_initial_state_and_match_a_serial_env():
    pytest.importorskip("libero.libero", reason="LIBERO not installed (pip install -e '.[libero]')")
    from wmrl_envs.envs.libero import LiberoEnv

    vec = make_libero_vector_env(2, 0, image_size=32, max_steps=6)
    env = LiberoEnv(0, image_size=32, max_steps=6)
    try:
        obs, info = vec.reset(options={"init_state_id": 3})
        assert list(info["init_state_id"]) == [3, 3]
        np.testing.assert_array_equal(obs["agentview_image"][0], obs["agentview_image"][1])
        ref, _ = env.reset(options={"init_state_id": 3})
        np.testing.assert_array_equal(ref["agentview_image"], obs["agentview_image"][0])
        rng = np.random.default_rng(0)
        actions = rng.uniform(-1, 1, size=(4, 2, 7))
        for a in actions:  # member 0 follows the serial env step for step; member 1 acts otherwise
            o, r, term, trunc, _ = vec.step(a)
            s, *_ = env.step(a[0])
            np.testing.assert_allclose(o["proprio"][0], s["proprio"], rtol=0, atol=1e-6)
        assert not np.allclose(o["proprio"][0], o["proprio"][1])
        seen = []

        def act(batched_obs, active):
            seen.append(active.copy())
            return rng.uniform(-1, 1, size=(2, 7))

        res = rollout_group(vec, act, init_state_id=5)
        assert [x["steps"] for x in res] == [6, 6] and all(x["truncated"] and not x["success"] for x in res)
        assert len(seen) == 6 and seen[0].all()
    finally:
        vec.close()
        env.close()


def test_idle_after_done_keeps_the_last_step():
    import gymnasium as gym

    class OneStep(gym.Env):
        observation_space = gym.spaces.Discrete(3)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            self.done = False
            return 0, {}

        def step(self, action):
            if self.done:
                raise RuntimeError("no episode is running")
            self.done = True
            return 2, 1.0, True, False, {"success": True}

    e = IdleAfterDone(OneStep())
    e.reset()
    assert e.step(0) == (2, 1.0, True, False, {"success": True, "idle": False})
    assert e.step(1) == (2, 0.0, True, False, {"success": True, "idle": True})
    e.reset()
    assert e.step(0)[1] == 1.0


def test_misnamed_env_arguments_fail_in_the_caller_before_any_process_starts():
    with pytest.raises(TypeError, match="imagesize.*LiberoEnv"):
        make_libero_vector_env(2, 0, imagesize=64)
