"""``GuessEnv`` (``wmrl/Guess-v0``): a one-step env with a known score, for tests and demos.

The observation is a target ``t`` in [0, 1] (shape (1,), float32); the action is a guess
``a`` in [0, 1] (shape (1,), float32); the episode ends after one step with the real score
``1 - |a - t|``. :func:`guess_score` computes that score without stepping, which lets a
synthetic world model (:class:`wmrl_envs.world_models.SyntheticWorldModel`) add a known bias
and noise to it. Optionally ``step_seconds`` of sleep make "execution" cost something.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["GuessEnv", "guess_score"]


def guess_score(observation: np.ndarray, action: np.ndarray) -> float:
    """Real score ``1 - |a - t|`` (float in [0, 1]) of guess ``action`` for target ``observation``."""
    return float(1.0 - abs(float(np.asarray(action).reshape(-1)[0]) - float(np.asarray(observation).reshape(-1)[0])))


class GuessEnv(gym.Env[np.ndarray, np.ndarray]):
    """Guess a number: one step, score ``1 - |a - t|``.

    Args:
        step_seconds: seconds to sleep in ``step`` (simulated execution cost, default 0).

    Reset options:
        ``{"target": float}`` fixes the target; otherwise it is drawn from the env's RNG.

    Example:
        >>> env = GuessEnv()
        >>> obs, _ = env.reset(options={"target": 0.25})
        >>> env.step(np.array([0.5], dtype=np.float32))[1]
        0.75
    """

    metadata = {"render_modes": []}

    def __init__(self, step_seconds: float = 0.0) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.step_seconds = float(step_seconds)
        self._target = np.zeros(1, dtype=np.float32)
        self.n_steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if options and "target" in options:
            t = float(options["target"])
            if not 0.0 <= t <= 1.0:
                raise ValueError(f"options['target'] must be in [0, 1], got {t}")
        else:
            t = float(self.np_random.random())
        self._target = np.array([t], dtype=np.float32)
        return self._target.copy(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.step_seconds:
            time.sleep(self.step_seconds)
        self.n_steps += 1
        a = np.clip(np.asarray(action, dtype=np.float32).reshape(1), 0.0, 1.0)
        score = guess_score(self._target, a)
        return self._target.copy(), score, True, False, {"score": score}
