"""``SyntheticWorldModel``: a world model with a known bias and noise, for tests and demos.

It computes the true score with a user-given function (no env step) and returns
``bias(true) + noise``, clipped to [lo, hi]. With a monotone, non-affine ``bias`` the
isotonic debiaser can undo the bias; raising ``noise_std`` mid-run degrades the world model
and should make the anchor weight ρ rise.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .base import WorldModelPrediction

__all__ = ["SyntheticWorldModel"]


class SyntheticWorldModel:
    """Score = clip(bias(true_score(context, action)) + N(0, noise_std²), lo, hi).

    Args:
        true_score: ``f(context, action) -> float``, the real score without executing.
        bias: monotone map applied to the true score (default: identity).
        noise_std: standard deviation of the Gaussian noise (score units). May be changed
            at any time (attribute).
        seed: noise seed.
        clip: ``(lo, hi)`` bounds of the returned score.
        ungraded_prob: probability of returning ``score=None`` (simulated failures).
    """

    def __init__(
        self,
        true_score: Callable[[Any, Any], float],
        bias: Callable[[float], float] | None = None,
        noise_std: float = 0.0,
        seed: int = 0,
        clip: tuple[float, float] = (0.0, 1.0),
        ungraded_prob: float = 0.0,
    ) -> None:
        self.true_score = true_score
        self.bias = bias or (lambda x: x)
        self.noise_std = float(noise_std)
        self.clip = clip
        self.ungraded_prob = float(ungraded_prob)
        self._rng = np.random.default_rng(seed)
        self.n_calls = 0

    def predict(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[WorldModelPrediction]:
        """One prediction per (context, action); see the class docstring."""
        if len(contexts) != len(actions):
            raise ValueError(f"contexts and actions differ in length: {len(contexts)} vs {len(actions)}")
        out = []
        for c, a in zip(contexts, actions):
            self.n_calls += 1
            noise = self._rng.normal(0.0, self.noise_std) if self.noise_std > 0 else 0.0
            if self.ungraded_prob and self._rng.random() < self.ungraded_prob:
                out.append(WorldModelPrediction(score=None, status="ungraded"))
                continue
            s = float(np.clip(self.bias(float(self.true_score(c, a))) + noise, *self.clip))
            out.append(WorldModelPrediction(score=s))
        return out

    def state_dict(self) -> dict[str, Any]:
        """Noise level and generator state."""
        return {"noise_std": self.noise_std, "rng": self._rng.bit_generator.state, "n_calls": self.n_calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.noise_std = float(state["noise_std"])
        self._rng.bit_generator.state = state["rng"]
        self.n_calls = int(state["n_calls"])
