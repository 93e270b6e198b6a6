"""Robometer, the reward model of LIBERO episodes, as a reward-mode world model.

Robometer (Qwen3-VL plus progress and success heads) reads the task instruction and frames of
an episode and returns, per frame, a task progress in [0, 1] and a success probability; the
episode reward built from it and the simulator's sparse success as the anchor are in
``docs/method.md``, "Reward mode". The package is split where the pieces differ in what they
need:

    * :mod:`.reward` — :func:`robometer_reward`, :func:`uniform_frame_indices`: the reference
      reward (numpy only, no model).
    * :mod:`.model` — :class:`RobometerModel` (``torch.nn.Module``: backbone + heads) and
      :class:`RobometerHeadConfig` (how the heads read the backbone).
    * :mod:`.processor` — :class:`RobometerProcessor` (frames + instruction -> model inputs;
      needs no torchvision) and the input format (:data:`PROGRESS_PROMPT`,
      :data:`SPECIAL_TOKENS`).
    * :mod:`.loading` — checkpoint lookup and format (:func:`load_checkpoint`,
      :func:`save_checkpoint`, :class:`RobometerWeightsNotFoundError`) and
      :func:`build_tiny_robometer`, a random miniature for tests and CPU smoke runs.
    * :mod:`.world_model` — :class:`RobometerWorldModel`, the adapter to the
      :class:`~wmrl_envs.world_models.base.WorldModel` protocol.

Importing the package imports torch (the reward math alone is :mod:`.reward`).
"""

from __future__ import annotations

from .loading import RobometerWeightsNotFoundError, build_tiny_robometer, load_checkpoint, save_checkpoint
from .model import RobometerHeadConfig, RobometerModel
from .processor import (
    IMAGE_PAD,
    MAX_VISUAL_TOKENS,
    MIN_VISUAL_TOKENS,
    PROG_TOKEN,
    PROGRESS_PROMPT,
    SPECIAL_TOKENS,
    VISION_END,
    VISION_START,
    RobometerProcessor,
)
from .reward import robometer_reward, uniform_frame_indices
from .world_model import FrameScores, RobometerWorldModel

__all__ = [  # sorted
    "build_tiny_robometer",
    "FrameScores",
    "IMAGE_PAD",
    "load_checkpoint",
    "MAX_VISUAL_TOKENS",
    "MIN_VISUAL_TOKENS",
    "PROG_TOKEN",
    "PROGRESS_PROMPT",
    "robometer_reward",
    "RobometerHeadConfig",
    "RobometerModel",
    "RobometerProcessor",
    "RobometerWeightsNotFoundError",
    "RobometerWorldModel",
    "save_checkpoint",
    "SPECIAL_TOKENS",
    "uniform_frame_indices",
    "VISION_END",
    "VISION_START",
]
