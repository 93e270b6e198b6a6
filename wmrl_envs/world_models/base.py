"""The world-model protocol: a frozen, batched predictor of an episode's outcome.

A world model sees what the agent produced (its *action*, e.g. Python source) in the
*context* it produced it (the observation, e.g. the task description) and predicts the
outcome that real execution would give: a raw score ``r̂`` on the environment's reward scale
and, in outcome mode, the observation the environment would return (for AutoResearch: a
predicted sandbox log). See ``docs/method.md`` ("World model").

Anything with a ``predict(contexts, actions)`` method returning one
:class:`WorldModelPrediction` per action plugs into
:class:`wmrl_envs.AnchoredWorldModelWrapper`.

In *reward* mode (LIBERO, robot manipulation) the inner environment steps for the dynamics
and the world model is a reward model: the wrapper hands it the episode so far as a
:class:`Trajectory` in place of an action (context = the reset observation, e.g. with the task
instruction), and the world model returns the episode's score (e.g. Robometer's progress
reward), optionally with dense per-step values in ``extras["progress"]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

__all__ = ["Trajectory", "WorldModel", "WorldModelPrediction"]


@dataclass
class WorldModelPrediction:
    """One world-model prediction.

    Attributes:
        score: raw world-model score ``r̂`` (float, on the environment's reward scale), or
            ``None`` when the world model could not grade this action (it is then dropped
            from the group, not counted as zero).
        status: predicted outcome label (AutoResearch: one of
            :data:`wmrl_envs.envs.autoresearch.grading.STATUSES`), or ``None``.
        feedback: predicted feedback text (imitates a sandbox log), possibly empty.
        observation: predicted next observation for outcome mode, or ``None`` if the world
            model does not predict one (the wrapper then returns the reset observation).
        raw_output: the model's raw text, for debugging (may be empty).
        model_called: ``False`` when a deterministic pre-check decided without the model.
        extras: free-form details (e.g. the quality bucket; ``"error"``: why it is ungraded).
        ungraded_cause: with ``score=None``, why (a cause of :mod:`wmrl_envs.causes`):
            ``"unscorable_input"`` for an input that cannot be scored by its nature (no frames,
            no image), or ``None`` (read as ``"world_model_ungraded"``): counted, not warned
            about, not subject to the stop rule. Any other cause (e.g.
            ``"world_model_error"``) is a failure of the machinery: counted, warned about,
            subject to the stop rule. The wrappers set it themselves when ``predict`` raises
            (``"world_model_error"``), exceeds its time-out (``"world_model_timeout"``) or
            returns a non-finite score (``"world_model_invalid"``; the score becomes ``None``).
        terminated: outcome mode, multi-step episodes: ``True`` when the world model predicts
            that the real env would end the episode with this step (e.g. a task solved at the
            first turn of an env that stops on a solved task). The wrappers end a world-model
            episode there, as the real env ends an anchor episode; on anchor routes it is
            ignored (the real env decides). Default ``False``: a world-model episode then runs
            ``episode_steps`` steps. Predict it only where the real env does end early
            (AutoResearch ends only after ``max_turns`` turns, so its judge leaves it ``False``).
    """

    score: float | None
    status: str | None = None
    feedback: str = ""
    observation: Any = None
    raw_output: str = ""
    model_called: bool = True
    extras: dict[str, Any] = field(default_factory=dict)
    ungraded_cause: str | None = None
    terminated: bool = False


@dataclass
class Trajectory:
    """An episode (or its prefix) as a reward-mode world model sees it.

    Attributes:
        observations: the observations o_0 … o_T (o_0 = the reset observation), T + 1 items
            (for LIBERO: dicts with camera images ``uint8 (H, W, 3)``, ``proprio`` and
            ``instruction``).
        actions: the actions a_0 … a_{T-1} (T items).
        done: ``True`` when the episode has ended (the world model scores a whole episode);
            ``False`` for a prefix (dense rewards during the episode).
    """

    observations: list[Any] = field(default_factory=list)
    actions: list[Any] = field(default_factory=list)
    done: bool = False

    def __len__(self) -> int:
        """Number of steps T (actions taken)."""
        return len(self.actions)


@runtime_checkable
class WorldModel(Protocol):
    """Batched outcome predictor (frozen during training).

    ``predict(contexts, actions)`` takes two sequences of equal length B — the observation
    each action was taken in, and the action — and returns a list of B
    :class:`WorldModelPrediction`. It must not raise on a single bad action: return a
    prediction with ``score=None`` (ungraded, with ``ungraded_cause="unscorable_input"`` when
    the input cannot be scored by its nature) or a failure status instead. A ``predict`` that
    raises or hangs is a failure of the machinery: the wrappers catch it (and bound it with
    their ``world_model_timeout_s``) and leave the whole batch ungraded.

    Optional attribute ``declared_cpu_s_per_prediction`` (float >= 0, CPU-seconds): when a
    world model has it, each ``predict`` call of B predictions is charged ``B ×`` that in the
    cost ledger's ``world_model`` source instead of the CPU measured over the call (for a
    synthetic world model whose real CPU is negligible and that stands for a costly one, so a
    benchmark can set the world-model : execution cost ratio). Without it the measured CPU of
    the call is charged (:func:`~wmrl_envs.core.world_model_call.predict_checked`;
    ``docs/method.md``, "Cost accounting").
    """

    def predict(
        self, contexts: Sequence[Any], actions: Sequence[Any]
    ) -> list[WorldModelPrediction]: ...
