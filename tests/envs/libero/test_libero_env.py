"""Tests of ``LiberoEnv`` (``wmrl/LIBERO-Long-v0``), the LIBERO-Long simulator env.

The simulator tests need the ``libero`` extra (``pip install -e ".[libero]"``) and headless
GL (EGL/OSMesa); they are skipped when LIBERO is not installed. One env (task 0, 64 px
images) is built per module, plus one short-lived proprio-only env; the file takes ~1-2 min
on 2 CPU cores, mostly simulator construction.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from wmrl_envs.envs.libero import ENV_ID, LiberoEnv, register_envs
from wmrl_envs.envs.libero.env import INSTRUCTION_CHARSET, WAIT_ACTION, quat_to_axis_angle

ROOT = Path(__file__).resolve().parents[3]
SIZE = 64


def _libero():
    return pytest.importorskip("libero.libero", reason="LIBERO not installed (pip install -e '.[libero]')")


@pytest.fixture(scope="module")
def env():
    _libero()
    register_envs()
    e = gym.make(ENV_ID, task_id=0, image_size=SIZE, render_mode="rgb_array")
    yield e.unwrapped
    e.close()


def _put_soup_and_sauce_in_basket(env: LiberoEnv) -> None:
    """Task 0's goal, made true through the simulator state: both cans dropped into the basket."""
    inner = env.libero_env.env
    sim = inner.sim
    basket = sim.data.body_xpos[inner.obj_body_id["basket_1"]].copy()
    for name, dx in [("alphabet_soup_1", -0.025), ("tomato_sauce_1", 0.025)]:
        joint = inner.objects_dict[name].joints[-1]
        qpos = sim.data.get_joint_qpos(joint).copy()
        qpos[:3] = basket + np.array([dx, 0.0, 0.06])
        sim.data.set_joint_qpos(joint, qpos)
        sim.data.set_joint_qvel(joint, np.zeros(6))
    for _ in range(100):  # let them fall in (0.2 s of physics)
        sim.step()
    sim.forward()


# ---------------------------------------------------------------- no simulator needed
def test_import_is_light_and_missing_libero_error_is_clear():
    code = (
        "import sys\n"
        "import wmrl_envs.envs.libero as m\n"
        "assert 'libero' not in sys.modules and 'robosuite' not in sys.modules and 'mujoco' not in sys.modules\n"
        "sys.modules['libero'] = None  # simulate a missing install\n"
        "try:\n"
        "    m.LiberoEnv(0)\n"
        "except ImportError as e:\n"
        "    assert 'pip install -e \".[libero]\"' in str(e), str(e)\n"
        "    print('OK')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-2000:]


def test_quat_to_axis_angle():
    np.testing.assert_allclose(quat_to_axis_angle([0, 0, 0, 1]), np.zeros(3))
    s = np.sqrt(0.5)
    np.testing.assert_allclose(quat_to_axis_angle([0, 0, s, s]), [0, 0, np.pi / 2], atol=1e-12)  # 90 deg about z
    np.testing.assert_allclose(quat_to_axis_angle([1, 0, 0, 0]), [np.pi, 0, 0], atol=1e-12)  # 180 deg about x


def test_splits_and_constructor_validation():
    assert LiberoEnv.TRAIN_STATES == tuple(range(16))
    assert LiberoEnv.HELDOUT_STATES == tuple(range(16, 50))
    assert not set(LiberoEnv.TRAIN_STATES) & set(LiberoEnv.HELDOUT_STATES)
    for kwargs in [{"task_id": 10}, {"task_id": -1}, {"image_size": 0}, {"split": "test"}, {"image_flip": "h"},
                   {"render_mode": "human"}, {"max_steps": 0}, {"render_size": 4}, {"render_size": 64.0}]:
        with pytest.raises(ValueError):
            LiberoEnv(**kwargs)  # validated before LIBERO is imported


# ---------------------------------------------------------------- simulator
def test_spaces_and_env_checker(env):
    from gymnasium.utils.env_checker import check_env
    from gymnasium.utils.passive_env_checker import env_render_passive_checker

    space = env.observation_space
    assert set(space.spaces) == {"agentview_image", "wrist_image", "proprio", "instruction"}
    assert space["agentview_image"].shape == (SIZE, SIZE, 3) and space["agentview_image"].dtype == np.uint8
    assert space["proprio"].shape == (8,) and space["proprio"].dtype == np.float32
    assert env.action_space.shape == (7,) and env.action_space.dtype == np.float32
    assert set(env.instruction) <= set(INSTRUCTION_CHARSET)
    assert env.instruction == "put both the alphabet soup and the tomato sauce in the basket"
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        # the skipped checks would build two more simulators (~10-20 s each): render is checked
        # below, close() in test_proprio_only_env_without_wait_steps
        check_env(env, skip_render_check=True, skip_close_check=True)
        env_render_passive_checker(env)
    assert not record, [str(w.message) for w in record]


def test_reset_observation_and_wait_steps(env):
    obs, info = env.reset(options={"init_state_id": 2})
    assert env.observation_space.contains(obs)
    assert info == {"success": False, "init_state_id": 2, "task_id": 0, "elapsed_steps": 0, "executed_steps": 0}
    img = obs["agentview_image"]
    assert img.dtype == np.uint8 and img.std() > 10  # a real picture, not a blank frame
    # upright: the top rows show the grey wall and robot, the bottom rows the brown table top
    sat = lambda rows: float((rows.max(-1).astype(int) - rows.min(-1)).mean())  # noqa: E731
    assert sat(img[: SIZE // 8]) + 15 < sat(img[-SIZE // 8 :])
    np.testing.assert_array_equal(env.render(), img)
    # the wait steps ran: simulated time advanced by wait_steps control periods (20 Hz)
    init_time = env._init_states[2][0]
    sim = env.libero_env.sim
    assert sim.data.time == pytest.approx(init_time + env.wait_steps * 0.05, abs=1e-6)
    p = obs["proprio"]
    assert 0.5 < p[2] < 1.5 and abs(np.linalg.norm(p[3:6]) - np.pi) < 0.3  # gripper above table, pointing down
    assert p[6] > 0.03 and p[7] < -0.03  # open fingers (WAIT_ACTION opens the gripper)
    assert WAIT_ACTION[-1] == -1 and not WAIT_ACTION[:6].any()


def test_init_state_selection_and_split_bounds(env):
    for split, pool in [("train", LiberoEnv.TRAIN_STATES), ("heldout", LiberoEnv.HELDOUT_STATES)]:
        env.reset(seed=0)  # reseed np_random; draws below are cheap (no simulator reset)
        drawn = {env._choose_init_state({"split": split}) for _ in range(400)}
        assert drawn == set(pool)
    _, info = env.reset(seed=7, options={"split": "heldout"})
    assert info["init_state_id"] in LiberoEnv.HELDOUT_STATES
    _, info2 = env.reset(seed=7, options={"split": "heldout"})
    assert info2["init_state_id"] == info["init_state_id"]  # same seed -> same draw
    _, info = env.reset(options={"init_state_id": 15, "split": "train"})
    assert info["init_state_id"] == 15
    for bad in [{"init_state_id": 50}, {"init_state_id": -1}, {"init_state_id": 1.0}, {"init_state_id": True},
                {"split": "test"}, {"init_state_id": 16, "split": "train"}, {"init_stat_id": 3}]:
        with pytest.raises(ValueError):
            env.reset(options=bad)


def test_same_init_state_same_observation_and_trajectory(env):
    actions = np.random.default_rng(0).uniform(-1, 1, size=(6, 7)).astype(np.float32)

    def rollout(seed):
        obs, _ = env.reset(seed=seed, options={"init_state_id": 3})
        out = env.step(actions)
        return obs, out[0]

    o1, f1 = rollout(1)
    env.reset(options={"init_state_id": 9})  # an episode in between must not leak into the next
    env.step(actions[::-1])
    o2, f2 = rollout(2)
    for key in ("agentview_image", "wrist_image", "proprio"):
        np.testing.assert_array_equal(o1[key], o2[key])
        np.testing.assert_array_equal(f1[key], f2[key])
    o3, _ = env.reset(options={"init_state_id": 4})
    assert not np.array_equal(o1["agentview_image"], o3["agentview_image"])


def test_action_chunks_and_bad_actions(env):
    env.reset(options={"init_state_id": 0})
    obs, r, term, trunc, info = env.step(np.zeros(7, np.float32))
    assert (r, term, trunc, info["executed_steps"], info["elapsed_steps"]) == (0.0, False, False, 1, 1)
    obs, r, term, trunc, info = env.step(np.zeros((4, 7)))
    assert (info["executed_steps"], info["elapsed_steps"]) == (4, 5)
    assert env.observation_space.contains(obs)
    env.step(np.full(7, 3.0))  # out of range: clipped, not an error
    for bad in [np.zeros(6), np.zeros((2, 6)), np.zeros((0, 7)), np.zeros((2, 3, 7)), np.full(7, np.nan),
                [0, 0, 0, np.inf, 0, 0, 0], "forward"]:
        with pytest.raises(ValueError):
            env.step(bad)
    assert env.elapsed_steps == 6  # rejected actions executed nothing


def test_success_reward_terminates(env):
    env.reset(options={"init_state_id": 0})
    assert not env.check_success()
    _put_soup_and_sauce_in_basket(env)
    assert env.check_success()
    obs, r, term, trunc, info = env.step(np.tile(WAIT_ACTION, (5, 1)))  # chunk stops at the success
    assert (r, term, trunc) == (1.0, True, False)
    assert info["success"] is True and info["executed_steps"] == 1
    with pytest.raises(RuntimeError):
        env.step(np.zeros(7))
    _, info = env.reset(options={"init_state_id": 0})  # a reset restores the initial state
    assert not info["success"] and not env.check_success()


def test_truncation_at_max_steps(env, monkeypatch):
    monkeypatch.setattr(env, "max_steps", 5)
    env.reset(options={"init_state_id": 1})
    *_, term, trunc, info = env.step(np.zeros((3, 7)))
    assert not trunc
    *_, term, trunc, info = env.step(np.zeros((4, 7)))  # crosses max_steps: only 2 run
    assert (term, trunc, info["executed_steps"], info["elapsed_steps"]) == (False, True, 2, 5)
    with pytest.raises(RuntimeError):
        env.step(np.zeros(7))
    # the same plumbing reports a success on the step it happens
    monkeypatch.setattr(env, "check_success", lambda: env.elapsed_steps >= 2)
    env.reset(options={"init_state_id": 1})
    _, r, term, trunc, info = env.step(np.zeros((4, 7)))
    assert (r, term, trunc, info["executed_steps"], info["success"]) == (1.0, True, False, 2, True)


def test_proprio_only_env_without_wait_steps():
    _libero()
    e = LiberoEnv(1, images=False, wait_steps=0, multisample=False, render_mode="rgb_array", image_size=32)
    try:
        assert set(e.observation_space.spaces) == {"proprio", "instruction"}
        with pytest.raises(RuntimeError):
            e.step(np.zeros(7))  # before reset
        obs, info = e.reset(options={"init_state_id": 0})
        assert e.observation_space.contains(obs) and info["init_state_id"] == 0
        assert e.libero_env.sim.data.time == pytest.approx(e._init_states[0][0])  # no wait steps
        frame = e.render()  # drawn on demand, multisampling off
        assert frame.shape == (32, 32, 3) and frame.dtype == np.uint8 and frame.std() > 5
        assert e.libero_env.sim.model.vis.quality.offsamples == 0
        assert "cream cheese" in obs["instruction"]
    finally:
        e.close()
    e.close()  # idempotent
    with pytest.raises(RuntimeError):
        e.reset()


def test_another_env_made_and_closed_in_the_process_does_not_blank_the_images(env):
    """robosuite renders into whichever EGL context is current; an env made and closed after this
    one (as AsyncVectorEnv's space-reading env used to be) left it rendering black frames."""
    obs, _ = env.reset(options={"init_state_id": 3})
    before = obs["agentview_image"].copy()
    assert before.mean() > 20  # a real frame, not black
    other = LiberoEnv(task_id=1, image_size=32)
    other.reset(options={"init_state_id": 0})
    other.close()
    obs, _ = env.reset(options={"init_state_id": 3})
    np.testing.assert_array_equal(obs["agentview_image"], before)


def test_render_size_resizes_like_the_authors_evaluation(env):
    """``render_size``: render larger, flip, PIL Lanczos down to ``image_size`` — openvla-mini's
    ``get_libero_image`` (experiments/robot/libero/libero_utils.py l.56-62)."""
    from PIL import Image

    obs, _ = env.reset(options={"init_state_id": 5})  # rendered at SIZE, upright
    small = LiberoEnv(task_id=0, image_size=SIZE // 2, render_size=SIZE)
    try:
        assert small.observation_space["agentview_image"].shape == (SIZE // 2, SIZE // 2, 3)
        got, _ = small.reset(options={"init_state_id": 5})
    finally:
        small.close()
    for key in ("agentview_image", "wrist_image"):
        want = np.array(Image.fromarray(obs[key]).resize((SIZE // 2, SIZE // 2), Image.LANCZOS).convert("RGB"))
        np.testing.assert_array_equal(got[key], want)


def test_spaces_are_known_without_a_simulator(env):
    obs_space, act_space = LiberoEnv.spaces(env.image_size, env.images)
    assert obs_space == env.observation_space and act_space == env.action_space
