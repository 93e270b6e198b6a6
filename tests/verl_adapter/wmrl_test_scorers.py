"""Scorer factories for the verl adapter's unit tests (imported by name, as verl's reward_kwargs
name a scorer): a one-step text env and a world model, fakes that isolate the adapter."""

from __future__ import annotations

import time

import gymnasium as gym

from agents.adapters.verl import RolloutScorer
from wmrl_envs.world_models import WorldModelPrediction


class TextEnv(gym.Env):
    """One step; the real score is the share of 'a' in the action (0 for an empty action)."""

    observation_space = gym.spaces.Text(64)
    action_space = gym.spaces.Text(256)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "write", {}

    def step(self, action):
        if "SLOW" in action:
            time.sleep(1.0)
        if "BOOM" in action:
            raise RuntimeError("scorer exploded")
        return "done", action.count("a") / max(len(action), 1), True, False, {}


class LengthWorldModel:
    """Predicts min(len(action), 10) / 10."""

    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=min(len(a), 10) / 10) for a in actions]


def text_scorer() -> RolloutScorer:
    return RolloutScorer(TextEnv(), LengthWorldModel(), lambda text, info: text)
