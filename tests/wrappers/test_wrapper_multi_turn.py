"""Multi-turn episodes score alike on both routes (issue 25, finding 14).

An outcome-mode episode of several steps gets one score: on world-model routes the world model's
per-step scores aggregated with ``episode_score``; on anchor routes the real per-step scores
aggregated with the same rule (the step's ``info["step_score"]`` when the env reports one, as
AutoResearch does because its reward is the improvement of the best score, else the step's
reward). With a perfect world model the same actions give the same score on both routes, under
every rule; and a prediction with ``terminated=True`` ends a world-model episode where the real
env would end it.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.world_models import WorldModelPrediction
from wmrl_envs.wrappers import AnchoredWorldModelVectorWrapper, make_vector_env
from wmrl_envs.wrappers.common import STEP_SCORE_KEY, aggregate_episode_score
from wmrl_envs.core import CorrectionConfig

TURNS = 3
SOLVED = 0.99  # a turn scoring at least this answers the task: the real env terminates


def turn_score(target: float, action) -> float:
    return round(1.0 - abs(float(np.asarray(action).reshape(-1)[0]) - target), 6)


class MultiTurnGuess(gym.Env):
    """Guess a target in up to ``TURNS`` turns; the episode ends early on a solved turn.

    ``reward="score"``: each turn's reward is its score (a third-party env's usual layout).
    ``reward="improvement"``: each turn's reward is the improvement of the best score so far
    (AutoResearch's layout: the return is the best score), and the turn's own score is reported in
    ``info["step_score"]``.
    """

    metadata = {"render_modes": []}

    def __init__(self, reward: str = "score"):
        self.observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Box(0.0, 1.0, (1,), np.float32)
        self.reward_kind = reward
        self.n_steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target = float((options or {}).get("target", 0.5))
        self.t, self.best = 0, 0.0
        return np.array([self.target], np.float32), {}

    def step(self, action):
        self.n_steps += 1
        self.t += 1
        s = turn_score(self.target, action)
        info = {}
        if self.reward_kind == "improvement":
            reward = max(self.best, s) - self.best
            info[STEP_SCORE_KEY] = s
        else:
            reward = s
        self.best = max(self.best, s)
        done = s >= SOLVED or self.t >= TURNS
        return np.array([self.target], np.float32), reward, done, False, info


class PerfectWM:
    """Predicts each turn's real score exactly, and ``terminated`` where the real env ends early
    (``lie_terminated``: claims every turn ends the episode)."""

    def __init__(self, lie_terminated: bool = False):
        self.lie = lie_terminated

    def predict(self, contexts, actions):
        out = []
        for c, a in zip(contexts, actions):
            s = turn_score(float(np.asarray(c).reshape(-1)[0]), a)
            out.append(WorldModelPrediction(score=s, terminated=self.lie or s >= SOLVED))
        return out


def run_episode(env, actions, target=0.5):
    """One episode through the per-episode API; returns (steps taken, its last info["wmrl"])."""
    env.reset(options={"target": target})
    for k, a in enumerate(actions, 1):
        _obs, _r, term, trunc, info = env.step(np.array([a], np.float32))
        if term or trunc:
            return k, info["wmrl"]
    raise AssertionError("the episode did not end")


def per_episode_wrapper(how, reward="score", wm=None):
    # f = 0.5, one anchor per block of 2 groups of 2 episodes: both routes within each block
    return AnchoredWorldModelWrapper(MultiTurnGuess(reward), wm or PerfectWM(), correction=CorrectionConfig(anchor_fraction=0.5), group_size=2,
                                     groups_per_step=2, episode_steps=TURNS, episode_score=how,
                                     max_ungraded_share=None)


ACTIONS = [0.1, 0.4, 0.3]  # target 0.5: turn scores 0.6, 0.9, 0.8 (none solves it)


@pytest.mark.parametrize("reward", ["score", "improvement"])
@pytest.mark.parametrize("how", ["max", "last", "sum"])
def test_the_same_actions_score_alike_on_both_routes_under_every_rule(how, reward):
    env = per_episode_wrapper(how, reward)
    expected = aggregate_episode_score([0.6, 0.9, 0.8], how)
    seen = {}
    for k in range(8):
        steps, w = run_episode(env, ACTIONS)
        assert steps == TURNS
        seen.setdefault(w["route"], []).append((w, env.last_group if k % 2 else None))  # a group closes at its 2nd
    assert set(seen) == {"anchor", "world_model"}
    for w, group in seen["anchor"]:
        # the world model's episode score and the real one, on the same episode (the anchor pair)
        assert w["raw_score"] == pytest.approx(expected) and w["real_score"] == pytest.approx(expected)
        if group is not None:
            assert group.raw_scores == pytest.approx([expected] * 2) and group.real_scores == pytest.approx([expected] * 2)
            assert group.rewards == pytest.approx([expected] * 2)  # the anchor group's training reward
    for w, group in seen["world_model"]:
        assert w["raw_score"] == pytest.approx(expected) and w["real_score"] is None
        if group is not None:
            assert group.raw_scores == pytest.approx([expected] * 2)


def test_a_prediction_that_terminates_ends_the_world_model_episode():
    env = per_episode_wrapper("max")
    lengths = {}
    for _ in range(8):
        steps, w = run_episode(env, [0.5, 0.2, 0.2])  # the first turn solves it (score 1.0)
        lengths.setdefault(w["route"], set()).add(steps)
        assert w["raw_score"] == pytest.approx(1.0)
        if w["route"] == "anchor":
            assert w["real_score"] == pytest.approx(1.0)
    assert lengths == {"anchor": {1}, "world_model": {1}}
    # a prediction's `terminated` is a prediction: on anchors the real env decides alone
    env = per_episode_wrapper("max", wm=PerfectWM(lie_terminated=True))
    lengths = {}
    for _ in range(8):
        steps, w = run_episode(env, ACTIONS)
        lengths.setdefault(w["route"], set()).add(steps)
    assert lengths == {"anchor": {TURNS}, "world_model": {1}}


def test_prediction_terminated_defaults_to_false():
    assert WorldModelPrediction(score=0.5).terminated is False


# ---------------------------------------------------------------------- the vector twin
def _value(w, key, i):
    """Sub-env ``i``'s ``key`` of a dict-of-arrays info (``None`` where its mask is off or absent)."""
    return float(w[key][i]) if key in w and bool(w["_" + key][i]) else None


def vector_episodes(how, reward, actions_by_turn, wm=None, mode=AutoresetMode.NEXT_STEP, steps=14):
    """Two lanes of one sub-env (groups of 2), f = 0.5: per finished episode (route, length, wmrl info)."""
    venv = make_vector_env(lambda: MultiTurnGuess(reward), 2, autoreset_mode=mode, episode_steps=TURNS)
    env = AnchoredWorldModelVectorWrapper(
        venv, wm or PerfectWM(), correction=CorrectionConfig(anchor_fraction=0.5), group_size=2, groups_per_step=2, episode_steps=TURNS,
        episode_score=how, task_fn=lambda k, n: (None, {"target": 0.5}), max_ungraded_share=None,
    )
    env.reset(seed=0)
    turn = np.zeros(2, int)
    out = []
    for _ in range(steps):
        acts = np.array([[actions_by_turn[min(t, len(actions_by_turn) - 1)]] for t in turn], np.float32)
        _obs, _r, term, trunc, info = env.step(acts)
        w = info["wmrl"]
        for i in range(2):
            if w["episode_start"][i]:
                turn[i] = 0
                continue
            turn[i] += 1
            if term[i] or trunc[i]:
                out.append((w["route"][i], int(turn[i]), _value(w, "raw_score", i), _value(w, "real_score", i)))
                turn[i] = 0 if mode != AutoresetMode.NEXT_STEP else turn[i]
        if mode == AutoresetMode.DISABLED and (term | trunc).any():
            env.reset(options={"reset_mask": term | trunc})
            turn[term | trunc] = 0
    env.close()
    return out


@pytest.mark.parametrize("reward", ["score", "improvement"])
@pytest.mark.parametrize("how", ["max", "last", "sum"])
def test_vector_wrapper_scores_both_routes_alike(how, reward):
    expected = aggregate_episode_score([0.6, 0.9, 0.8], how)
    eps = vector_episodes(how, reward, ACTIONS)
    assert {r for r, *_ in eps} == {"anchor", "world_model"}
    for route, length, raw, real in eps:
        assert length == TURNS and raw == pytest.approx(expected)
        assert (real == pytest.approx(expected)) if route == "anchor" else real is None


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED],
                         ids=lambda m: m.value)
def test_vector_wrapper_ends_a_world_model_episode_on_a_terminating_prediction(mode):
    eps = vector_episodes("max", "score", [0.5, 0.2, 0.2], mode=mode)
    assert {r for r, *_ in eps} == {"anchor", "world_model"}
    assert all(length == 1 and raw == pytest.approx(1.0) for _r, length, raw, _real in eps)
    lied = vector_episodes("max", "score", ACTIONS, wm=PerfectWM(lie_terminated=True), mode=mode)
    assert {(r, length) for r, length, *_ in lied} == {("anchor", TURNS), ("world_model", 1)}


def test_a_step_score_that_is_not_a_number_leaves_the_anchor_episode_ungraded():
    class BrokenScore(MultiTurnGuess):
        def step(self, action):
            obs, r, term, trunc, info = super().step(action)
            info[STEP_SCORE_KEY] = float("nan")
            return obs, r, term, trunc, info

    env = AnchoredWorldModelWrapper(BrokenScore(), PerfectWM(), correction=CorrectionConfig(anchor_fraction=1.0), group_size=2, episode_steps=TURNS,
                                    max_ungraded_share=None)
    for _ in range(2):  # the group's two episodes
        steps, w = run_episode(env, ACTIONS)
        assert steps == TURNS and w["real_score"] is None and w["graded"] is False
        assert w["ungraded_cause"] == "execution_ungraded"
    assert env.loop.ledger.count("ungraded:execution_ungraded") == 2
