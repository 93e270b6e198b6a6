"""Reward mode of AnchoredWorldModelWrapper (docs/method.md, "Reward mode"): the inner env steps in
every episode, the world model pays the reward on world-model episodes and the real success
never reaches the agent there; anchor episodes pay the real success and feed the pairs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from toy_envs import Reach1D
from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.world_models import Trajectory, WorldModelPrediction
from wmrl_envs.core import CorrectionConfig


class ProgressWM:
    """Reward model: progress = 1 − |x_T − 0.5| of the trajectory's last observation."""

    def __init__(self):
        self.calls = []

    def predict(self, contexts, actions):
        out = []
        for traj in actions:
            assert isinstance(traj, Trajectory) and len(traj.observations) == len(traj.actions) + 1
            self.calls.append((len(traj), traj.done))
            out.append(WorldModelPrediction(score=1.0 - abs(float(traj.observations[-1][0]) - 0.5)))
        return out


def run_episode(env, policy, **reset_kw):
    obs, info = env.reset(**reset_kw)
    rewards, infos = [], []
    while True:
        obs, r, term, trunc, info = env.step(policy(obs))
        rewards.append(r)
        infos.append(info)
        if term or trunc:
            return rewards, infos


def forward(obs):
    return np.array([1.0], np.float32)


def test_world_model_episodes_never_leak_success_and_still_step():
    inner = Reach1D()
    wm = ProgressWM()
    env = AnchoredWorldModelWrapper(inner, wm, correction=CorrectionConfig(anchor_fraction=0.0, min_anchor_groups=0), group_size=2, mode="reward")
    for _ in range(2):
        rewards, infos = run_episode(env, forward)
        assert all(i["wmrl"]["route"] == "world_model" for i in infos)
        assert all("success" not in i for i in infos)  # withheld
        # the policy reaches x = 0.5 in 4 steps: real success happened, but the agent sees the WM reward
        assert len(rewards) == 4 and rewards[:-1] == [0.0, 0.0, 0.0]
        assert rewards[-1] == pytest.approx(1.0)  # f̂ is the identity before warm-up, r̂_T = 1
        assert infos[-1]["wmrl"]["real_score"] is None
    assert inner.n_steps == 8  # dynamics ran in every world-model episode
    assert wm.calls == [(4, True), (4, True)]  # one world-model call per episode, on the whole episode
    assert env.loop.corrector.debiaser.n_pairs == 0  # no anchor pairs from world-model groups


def test_anchor_episodes_pay_real_success_and_feed_pairs():
    inner = Reach1D()
    env = AnchoredWorldModelWrapper(inner, ProgressWM(), correction=CorrectionConfig(anchor_fraction=1.0), group_size=3, mode="reward")
    outcomes = []
    for start in (-0.5, -0.5, -0.5):
        rewards, infos = run_episode(env, lambda o: np.array([0.5], np.float32), options={"start": start})
        outcomes.append((rewards, infos))
    for rewards, infos in outcomes:
        assert infos[-1]["success"] is True and rewards[-1] == 1.0 and sum(rewards) == 1.0
        assert infos[-1]["wmrl"]["route"] == "anchor" and infos[-1]["wmrl"]["real_score"] == 1.0
        assert infos[-1]["wmrl"]["raw_score"] == pytest.approx(1.0 - abs(0.5 - 0.5))
    assert env.loop.corrector.debiaser.n_pairs == 3  # the group's (r̂, success) pairs
    # a failing anchor episode: real 0, truncated at 12 steps
    rewards, infos = run_episode(env, lambda o: np.array([-1.0], np.float32))
    assert len(rewards) == 12 and sum(rewards) == 0.0 and infos[-1]["wmrl"]["real_score"] == 0.0


def test_dense_rewards_are_increments_of_the_calibrated_score():
    wm = ProgressWM()
    env = AnchoredWorldModelWrapper(Reach1D(), wm, correction=CorrectionConfig(anchor_fraction=0.0, min_anchor_groups=0), group_size=2,
                                    mode="reward", reward_timing="dense", dense_every=2)
    rewards, infos = run_episode(env, lambda o: np.array([0.34], np.float32))  # x_k = -0.5 + 0.085k, success at k = 11
    assert wm.calls == [(2, False), (4, False), (6, False), (8, False), (10, False), (11, True)]
    xs = -0.5 + 0.085 * np.arange(1, 12)
    progress = 1.0 - np.abs(xs - 0.5)
    paid_at = np.array([2, 4, 6, 8, 10, 11]) - 1
    expected = np.zeros(11)
    expected[paid_at] = np.diff(np.concatenate([[0.0], progress[paid_at]]))
    np.testing.assert_allclose(rewards, expected, atol=1e-6)
    assert "success" not in infos[-1]
    assert sum(rewards) == pytest.approx(progress[-1])  # telescopes to f̂(r̂_T)


def test_score_trajectories_withholds_real_returns_on_world_model_groups():
    env = AnchoredWorldModelWrapper(Reach1D(), ProgressWM(), correction=CorrectionConfig(anchor_fraction=0.5), group_size=2, mode="reward",
                                    groups_per_step=2, seed=3)
    routes = env.plan_step(2)
    assert sorted(routes) == ["anchor", "world_model"]
    trajs = [Trajectory([np.array([x0]), np.array([x1])], [np.zeros(1)], True) for x0, x1 in ((-0.5, 0.4), (-0.5, 0.0))]
    ctx = [t.observations[0] for t in trajs]
    for route in routes:
        g = env.score_trajectories(ctx, trajs, [123.0, -7.0])  # nonsense real returns
        if route == "world_model":
            assert g.route == "world_model"
            assert g.rewards == pytest.approx([0.9, 0.5])  # the world model's scores, not the real returns
            assert all(i["wmrl"]["real_score"] is None for i in g.infos)
        else:
            assert g.rewards == [123.0, -7.0]
            assert g.advantage_weight == env.loop.corrector.rho
    assert env.loop.corrector.debiaser.n_pairs == 2  # only the anchor group's pairs
    with pytest.raises(ValueError, match="one of each"):
        env.score_trajectories(ctx, trajs, [1.0])
    with pytest.raises(ValueError, match="score_trajectories"):
        env.score_group([np.zeros(1)])


def test_reward_mode_arguments_and_outcome_mode_guard():
    with pytest.raises(ValueError, match="reward_timing"):
        AnchoredWorldModelWrapper(Reach1D(), ProgressWM(), mode="reward", reward_timing="often")
    with pytest.raises(ValueError, match="dense_every"):
        AnchoredWorldModelWrapper(Reach1D(), ProgressWM(), mode="reward", dense_every=0)
    out = AnchoredWorldModelWrapper(Reach1D(), ProgressWM())
    with pytest.raises(ValueError, match="reward mode"):
        out.score_trajectories([None], [Trajectory()], [0.0])


@pytest.mark.parametrize("eval_route", ["anchor", "world_model"])
def test_check_env_in_evaluation_mode(eval_route):
    env = AnchoredWorldModelWrapper(Reach1D(), ProgressWM(), mode="reward", eval_route=eval_route)
    env.training = False
    check_env(env, skip_render_check=True)
    rewards, infos = run_episode(env, forward)
    if eval_route == "world_model":
        assert "success" not in infos[-1] and rewards[-1] == pytest.approx(1.0)
    else:
        assert infos[-1]["success"] is True and rewards[-1] == 1.0
