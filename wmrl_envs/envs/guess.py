"""``GuessEnv`` (``wmrl/Guess-v0``): a one-step env with a known score, for tests and demos.

The observation is a target ``t`` in [0, 1] (shape (1,), float32); the action is a guess
``a`` in [0, 1] (shape (1,), float32); the episode ends after one step with the real score
``1 - |a - t|``. :func:`guess_score` computes that score without stepping, which lets a
synthetic world model (:class:`wmrl_envs.world_models.SyntheticWorldModel`) add a known bias
and noise to it. An execution is instant; a cost can be *declared*: with ``execution_cost_s``
set, every step reports ``info["execution_cpu_s"] = execution_cost_s``, which the cost ledger
charges (unset: no key, the ledger charges the CPU it measured). No sleep stands in for a cost.
"""

from __future__ import annotations

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
        execution_cost_s: CPU-seconds one execution declares (>= 0), reported as
            ``info["execution_cpu_s"]``; ``None`` (default): no declared cost, the key is left
            out. The step itself is instant either way.

    Raises:
        ValueError: ``execution_cost_s`` is negative or not a finite number.

    Reset options:
        ``{"target": float}`` fixes the target; otherwise it is drawn from the env's RNG.

    Example:
        >>> env = GuessEnv()
        >>> obs, _ = env.reset(options={"target": 0.25})
        >>> env.step(np.array([0.5], dtype=np.float32))[1]
        0.75
    """

    metadata = {"render_modes": []}

    def __init__(self, execution_cost_s: float | None = None) -> None:
        if execution_cost_s is not None and (
            isinstance(execution_cost_s, bool) or not isinstance(execution_cost_s, (int, float, np.floating, np.integer))
            or not np.isfinite(execution_cost_s) or execution_cost_s < 0
        ):
            raise ValueError(f"GuessEnv.execution_cost_s must be a finite number of CPU-seconds >= 0, got {execution_cost_s!r}")
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.execution_cost_s = None if execution_cost_s is None else float(execution_cost_s)
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
        self.n_steps += 1
        a = np.clip(np.asarray(action, dtype=np.float32).reshape(1), 0.0, 1.0)
        score = guess_score(self._target, a)
        info: dict[str, Any] = {"score": score}
        if self.execution_cost_s is not None:
            info["execution_cpu_s"] = self.execution_cost_s
        return self._target.copy(), score, True, False, info
