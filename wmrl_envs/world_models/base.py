"""The world-model protocol: a frozen, batched predictor of an episode's outcome.

A world model sees what the agent produced (its *action*, e.g. Python source) in the
*context* it produced it (the observation, e.g. the task description) and predicts the
outcome that real execution would give: a raw score ``r̂`` on the environment's reward scale
and, in outcome mode, the observation the environment would return (for AutoResearch: a
predicted sandbox log). See ``docs/method.md`` ("World model").

Anything with a ``predict(contexts, actions)`` method returning one
:class:`WorldModelPrediction` per action plugs into
:class:`wmrl_envs.AnchoredWorldModelWrapper`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

__all__ = ["WorldModel", "WorldModelPrediction"]


@dataclass
class WorldModelPrediction:
    """One world-model prediction.

    Attributes:
        score: raw world-model score ``r̂`` (float, on the environment's reward scale), or
            ``None`` when the world model could not grade this action (it is then dropped
            from the group, not counted as zero).
        status: predicted outcome label (AutoResearch: one of
            :data:`wmrl_envs.envs.autoresearch.scale.STATUSES`), or ``None``.
        feedback: predicted feedback text (imitates a sandbox log), possibly empty.
        observation: predicted next observation for outcome mode, or ``None`` if the world
            model does not predict one (the wrapper then returns the reset observation).
        raw_output: the model's raw text, for debugging (may be empty).
        model_called: ``False`` when a deterministic pre-check decided without the model.
        extras: free-form details (e.g. the quality bucket).
    """

    score: float | None
    status: str | None = None
    feedback: str = ""
    observation: Any = None
    raw_output: str = ""
    model_called: bool = True
    extras: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class WorldModel(Protocol):
    """Batched outcome predictor (frozen during training).

    ``predict(contexts, actions)`` takes two sequences of equal length B — the observation
    each action was taken in, and the action — and returns a list of B
    :class:`WorldModelPrediction`. It must not raise on a single bad action: return a
    prediction with ``score=None`` (ungraded) or a failure status instead.
    """

    def predict(
        self, contexts: Sequence[Any], actions: Sequence[Any]
    ) -> list[WorldModelPrediction]: ...
