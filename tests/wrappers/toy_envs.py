"""Toy environments that several test modules share (imported as ``toy_envs``: pytest puts tests/ on
``sys.path``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["Reach1D"]


class Reach1D(gym.Env):
    """x += 0.25·a (a clipped to x in [-2, 2]); success (reward 1, terminated) when |x − 0.5| < 0.1;
    truncated after ``max_steps`` steps without success. The start is ``options["start"]``
    (default -0.5); ``n_steps`` counts the inner ``step`` calls (the dynamics that ran)."""

    metadata = {"render_modes": []}

    def __init__(self, max_steps: int = 12):
        self.observation_space = spaces.Box(-2.0, 2.0, (1,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.max_steps = max_steps
        self.n_steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = float((options or {}).get("start", -0.5))
        self.t = 0
        return np.array([self.x], np.float32), {}

    def step(self, action):
        self.n_steps += 1
        self.t += 1
        self.x = float(np.clip(self.x + 0.25 * float(np.asarray(action).reshape(-1)[0]), -2, 2))
        success = abs(self.x - 0.5) < 0.1
        trunc = self.t >= self.max_steps and not success
        return np.array([self.x], np.float32), float(success), success, trunc, {"success": success}
