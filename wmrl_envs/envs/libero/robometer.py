"""``RobometerWorldModel``: the Robometer reward model as a reward-mode world model (LIBERO).

In the WMRL recipe for vision-language-action agents (Yang et al., arXiv 2608.12564;
``docs/method.md``, "Reward mode") the world model of a robot-manipulation episode
is *Robometer*, a reward model built on Qwen3-VL: it reads the task instruction and frames of
the episode and returns, for every frame, a task *progress* in [0, 1] and a *success*
probability. The reference reward samples 8 frames uniformly (first and last included) and
scores the episode with the mean progress of the last 3 frames minus that of the first 3
(:func:`robometer_reward`); the simulator's sparse success is the anchor.

Contents:
    * :func:`robometer_reward`, :func:`uniform_frame_indices` — the reference reward (no model).
    * :class:`RobometerModel` — a Qwen3-VL backbone plus Robometer's heads (``torch.nn.Module``).
    * :class:`RobometerHeadConfig` — how the heads read the backbone (bins, token, pooling).
    * :class:`RobometerProcessor` — frames + instruction -> model inputs (tokenizer + Qwen-VL
      image processor; needs no torchvision).
    * :class:`RobometerWorldModel` — the world model: ``predict(contexts, trajectories)``,
      :meth:`~RobometerWorldModel.score_frames`, :meth:`~RobometerWorldModel.from_pretrained`,
      :meth:`~RobometerWorldModel.save_pretrained`.
    * :func:`build_tiny_robometer` — a randomly initialised miniature of the same architecture
      (tests and CPU smoke runs; its scores mean nothing).
    * :class:`RobometerWeightsNotFoundError` — raised when a checkpoint cannot be found.

What we assumed about Robometer's format (from the public ``robometer`` / ``reward_fm``
repositories and the LeRobot port, read for reference; nothing was run against the real
weights, which cannot be downloaded here):

* **Checkpoint layout.** The released checkpoint (e.g. ``robometer/Robometer-4B``, base
  ``Qwen/Qwen3-VL-4B-Instruct``) is a folder with ``config.json`` (the backbone's
  ``Qwen3VLConfig``, vocabulary resized for 5 added tokens), ``*.safetensors`` holding one
  state dict whose backbone keys start with ``model.`` (a ``Qwen3VLModel``, no LM head) and
  whose head keys are ``progress_head.*``, ``success_head.*``, ``preference_head.*`` and
  ``frame_pool_attn.weight``, tokenizer and image-processor files, and ``config.yaml`` (the
  training configuration). PEFT-adapter checkpoints (adapter files plus
  ``custom_heads.safetensors``) are not supported.
* **Heads.** Each head is ``Linear(h, h/2) -> LayerNorm -> GELU -> Dropout -> Linear(h/2, o)``
  on the last hidden state (h = the language model's hidden size). The released model predicts
  progress as ``o = 10`` discrete bins (progress = softmax-weighted mean of 10 bin centres
  evenly spaced on [0, 1]); a head with ``o = 1`` ends in a sigmoid (continuous progress). The
  success head gives one logit (success probability = its sigmoid). The number of bins is read
  from the checkpoint's weights.
* **Input format** (multi-image mode with per-frame progress tokens, the released default):
  one user turn of the Qwen3-VL chat template, rendered with ``add_vision_id=True`` and no
  generation prompt — the :data:`PROGRESS_PROMPT` text with the instruction, then for every
  frame ``Picture i: <|vision_start|><|image_pad|>…<|vision_end|>`` followed by the added token
  ``<|prog_token|>``. The heads read the last hidden state at each ``<|prog_token|>``. The
  added tokens, in this order, are ``<|split_token|>``, ``<|reward_token|>``,
  ``<|pref_token|>``, ``<|sim_token|>``, ``<|prog_token|>`` (:data:`SPECIAL_TOKENS`).
  Checkpoints trained without progress tokens instead pool each frame's image tokens between
  ``<|vision_start|>`` and ``<|vision_end|>`` (mean, last token, or learned attention);
  video-mode checkpoints are not supported.
* **Frames.** Frames are fed at their own resolution, rounded to a multiple of the patch size
  times the merge size (32 px for Qwen3-VL) and kept within 4…16384 visual tokens (the Qwen-VL
  helper library's defaults for images); the image processor does not resize again. A LIBERO
  128x128 frame gives 16 visual tokens. Frames are used as given (no flipping).
* **Chat template.** The checkpoint's own template is used when its folder has one; otherwise
  the user turn is written out directly (``<|im_start|>user\\n…<|im_end|>\\n``, no system
  turn), which we believe is what Qwen3-VL's template renders for this message.

Only the *loading* and *processing* code is exercised here on a tiny random model; the numbers
that the real checkpoint gives have not been checked against the upstream implementation.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from wmrl_envs.core.ungraded import UNSCORABLE, WORLD_MODEL_ERROR
from wmrl_envs.world_models.base import WorldModelPrediction

__all__ = [
    "PROGRESS_PROMPT",
    "SPECIAL_TOKENS",
    "RobometerWeightsNotFoundError",
    "robometer_reward",
    "uniform_frame_indices",
    "RobometerHeadConfig",
    "RobometerModel",
    "RobometerProcessor",
    "RobometerWorldModel",
    "FrameScores",
    "build_tiny_robometer",
]

logger = logging.getLogger(__name__)

PROGRESS_PROMPT = (
    "The task for the robot is '{task}'. Given the trajectory video, predict the task progress at "
    "each frame, how far along the robot is towards completing the task, a float between 0 and 1, "
    "where 0 is the starting state and 1 is when the task is completed. If the robot is not "
    "performing the same task, predict 0 progress."
)
"""Instruction text of a progress query; ``{task}`` is the task instruction. This is the
input format the released checkpoint was trained on, so it is kept word for word."""

SPECIAL_TOKENS: tuple[str, ...] = (
    "<|split_token|>",
    "<|reward_token|>",
    "<|pref_token|>",
    "<|sim_token|>",
    "<|prog_token|>",
)
"""Tokens Robometer adds to the Qwen tokenizer, in the order they were added (the checkpoint's
embedding rows follow this order). Only ``<|prog_token|>`` is read at inference."""

PROG_TOKEN = "<|prog_token|>"
VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"

MIN_VISUAL_TOKENS = 4
"""Fewest visual tokens per frame (merged patches); frames smaller than this are upscaled."""
MAX_VISUAL_TOKENS = 16384
"""Most visual tokens per frame; larger frames are downscaled."""

_HEAD_PREFIXES = ("progress_head.", "preference_head.", "success_head.", "frame_pool_attn.")


class RobometerWeightsNotFoundError(FileNotFoundError):
    """The Robometer checkpoint (or a file it needs) could not be found.

    Subclasses :class:`FileNotFoundError`; the message says what was looked for and how to
    get it (download the checkpoint on a machine with internet access and pass its folder).
    """


# ---------------------------------------------------------------------------- reference reward
def _check_count(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def uniform_frame_indices(T_plus_1: int, n: int = 8) -> np.ndarray:
    """Indices of ``n`` frames spaced uniformly over an episode, first and last frame included.

    Index ``i`` is ``round(i * T / (n - 1))`` (halves rounded up) for ``i = 0 … n-1``, where
    ``T = T_plus_1 - 1`` is the last frame's index; so with ``n >= 2`` the first index is 0
    and the last is ``T``. An episode with fewer than ``n`` frames repeats frames (the indices
    are non-decreasing), so the result always has ``n`` entries. ``n = 1`` gives ``[T]``.
    Reference: ``docs/method.md``, "Reward mode" (8 uniformly sampled frames).

    Args:
        T_plus_1: number of frames ``T + 1`` (observations o_0 … o_T), an int >= 1.
        n: number of indices, an int >= 1.

    Returns:
        ``np.ndarray`` of shape ``(n,)``, dtype ``int64``, values in ``[0, T_plus_1 - 1]``.

    Raises:
        ValueError: ``T_plus_1`` or ``n`` is not an int >= 1.

    Example:
        >>> uniform_frame_indices(15, 8).tolist()
        [0, 2, 4, 6, 8, 10, 12, 14]
        >>> uniform_frame_indices(3, 8).tolist()
        [0, 0, 1, 1, 1, 1, 2, 2]
    """
    frames = _check_count("T_plus_1 (number of frames)", T_plus_1)
    n = _check_count("n (number of indices)", n)
    last = frames - 1
    if n == 1:
        return np.array([last], dtype=np.int64)
    positions = np.arange(n, dtype=np.float64) * last / (n - 1)
    return np.minimum(np.floor(positions + 0.5), last).astype(np.int64)


def robometer_reward(progress: Sequence[float] | np.ndarray, n_frames: int = 8, k: int = 3) -> float:
    """Robometer's reference episode reward: late progress minus early progress.

    ``mean(p[-k:]) - mean(p[:k])`` over the progress values ``p`` of ``n_frames`` uniformly
    sampled frames (``docs/method.md``, "Reward mode": 8 frames, k = 3). ``progress`` is normally
    those ``n_frames`` values; a sequence of any other length (e.g. dense progress of every
    frame) is first subsampled with :func:`uniform_frame_indices` to ``n_frames`` values.
    The two windows overlap when ``2k > n_frames``.

    Args:
        progress: per-frame progress values (floats, normally in [0, 1]), in frame order,
            at least one value, all finite; a 1-d sequence or array.
        n_frames: number of sampled frames (int >= 1).
        k: frames averaged at each end (int, ``1 <= k <= n_frames``).

    Returns:
        The reward, a float in [-1, 1] for progress in [0, 1].

    Raises:
        ValueError: ``progress`` is empty, not 1-d, not numeric or has NaN/inf values;
            ``n_frames`` or ``k`` is not a positive int, or ``k > n_frames``.

    Example:
        >>> round(robometer_reward([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]), 10)
        0.5
    """
    n_frames = _check_count("n_frames", n_frames)
    k = _check_count("k", k)
    if k > n_frames:
        raise ValueError(f"k={k} frames per end cannot exceed n_frames={n_frames}")
    try:
        values = np.asarray(progress, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"progress must be a sequence of numbers, got {type(progress).__name__}: {exc}") from exc
    if values.ndim != 1:
        raise ValueError(f"progress must be 1-d (one value per frame), got shape {values.shape}")
    if values.size == 0:
        raise ValueError("progress is empty: need at least one per-frame progress value")
    if not np.all(np.isfinite(values)):
        bad = np.flatnonzero(~np.isfinite(values)).tolist()
        raise ValueError(f"progress has NaN or infinite values at positions {bad[:10]}")
    if values.size != n_frames:
        values = values[uniform_frame_indices(values.size, n_frames)]
    return float(values[-k:].mean() - values[:k].mean())


# ---------------------------------------------------------------------------- model
@dataclass
class RobometerHeadConfig:
    """How Robometer's heads read the backbone.

    Attributes:
        progress_bins: number of discrete progress bins (int >= 2; progress = softmax-weighted
            mean of bin centres ``linspace(0, 1, bins)``), or ``None`` for a continuous head
            that ends in a sigmoid. The released checkpoint uses 10.
        use_per_frame_progress_token: read the hidden state at the ``<|prog_token|>`` placed
            after every frame (released default); ``False`` pools each frame's image tokens.
        frame_pooling: pooling when not using progress tokens: ``"mean"``, ``"boundary"``
            (last image token) or ``"attention"`` (learned ``frame_pool_attn`` weights).
        frame_pooling_attn_temperature: softmax temperature of attention pooling (> 0).
        dropout: dropout rate inside the heads (inactive at inference).
    """

    progress_bins: int | None = 10
    use_per_frame_progress_token: bool = True
    frame_pooling: str = "mean"
    frame_pooling_attn_temperature: float = 1.0
    dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.progress_bins is not None and (
            isinstance(self.progress_bins, bool) or int(self.progress_bins) < 2
        ):
            raise ValueError(f"progress_bins must be None (continuous) or an int >= 2, got {self.progress_bins!r}")
        if self.frame_pooling not in ("mean", "boundary", "attention"):
            raise ValueError(
                f"frame_pooling must be 'mean', 'boundary' or 'attention', got {self.frame_pooling!r}"
            )
        if not self.frame_pooling_attn_temperature > 0:
            raise ValueError(
                f"frame_pooling_attn_temperature must be > 0, got {self.frame_pooling_attn_temperature}"
            )

    @classmethod
    def from_experiment_yaml(cls, path: str | Path, **overrides: Any) -> RobometerHeadConfig:
        """Read the head settings from a Robometer training ``config.yaml``.

        Uses ``model.use_per_frame_progress_token``, ``model.frame_pooling``,
        ``model.frame_pooling_attn_temperature`` and ``model``/``loss``
        ``.progress_loss_type`` (``"discrete"`` -> ``progress_discrete_bins`` bins).
        Missing or interpolated (``${...}``) values keep their defaults.

        Raises:
            ValueError: the file describes a video-mode model (``use_multi_image: false``),
                which is not supported, or has invalid values.
        """
        import yaml

        with open(path, encoding="utf-8") as fh:
            loaded = yaml.safe_load(fh) or {}
        sections = [loaded.get(name) or {} for name in ("model", "loss", "data")]

        def get(key: str) -> Any:
            for section in sections:
                value = section.get(key) if isinstance(section, dict) else None
                if value is not None and not (isinstance(value, str) and value.startswith("${")):
                    return value
            return None

        kwargs: dict[str, Any] = {}
        multi_image = get("use_multi_image")
        if multi_image is False:
            raise ValueError(
                f"{path}: use_multi_image is false (video-mode Robometer); only multi-image "
                "checkpoints are supported"
            )
        token = get("use_per_frame_progress_token")
        if token is not None:
            kwargs["use_per_frame_progress_token"] = bool(token)
        for key in ("frame_pooling", "frame_pooling_attn_temperature"):
            if get(key) is not None:
                kwargs[key] = get(key)
        loss_type = get("progress_loss_type")
        if isinstance(loss_type, str):
            discrete = loss_type.lower() == "discrete"
            kwargs["progress_bins"] = int(get("progress_discrete_bins") or 10) if discrete else None
        kwargs.update(overrides)
        return cls(**kwargs)


def _make_head(hidden: int, out: int, dropout: float, sigmoid: bool) -> nn.Sequential:
    """``Linear(h, h/2) -> LayerNorm -> GELU -> Dropout -> Linear(h/2, out) [-> Sigmoid]``."""
    layers = [
        nn.Linear(hidden, hidden // 2),
        nn.LayerNorm(hidden // 2),
        nn.GELU(),
        nn.Dropout(dropout),
        nn.Linear(hidden // 2, out),
    ]
    if sigmoid:
        layers.append(nn.Sigmoid())
    return nn.Sequential(*layers)


class RobometerModel(nn.Module):
    """Qwen3-VL backbone plus Robometer's progress, success and preference heads.

    The parameter names equal those of the released checkpoint (``model.*`` for the
    backbone, ``progress_head.*``, ``success_head.*``, ``preference_head.*``,
    ``frame_pool_attn.weight``), so its state dict loads as is.

    Args:
        backbone: a ``transformers.Qwen3VLModel`` (the model without LM head), whose
            ``config.text_config.hidden_size`` is ``h``.
        head_config: :class:`RobometerHeadConfig` (default: 10 progress bins, progress
            tokens).

    Heads are created in the backbone's dtype; the preference head is kept for the
    state-dict layout but never used here.
    """

    def __init__(self, backbone: Any, head_config: RobometerHeadConfig | None = None) -> None:
        super().__init__()
        cfg = head_config or RobometerHeadConfig()
        self.head_config = cfg
        self.model = backbone
        text_config = getattr(backbone.config, "text_config", None)
        hidden = getattr(text_config, "hidden_size", None) or getattr(backbone.config, "hidden_size", None)
        if hidden is None:
            raise ValueError(f"cannot read the hidden size from {type(backbone.config).__name__}")
        self.hidden_size = int(hidden)
        bins = cfg.progress_bins
        self.progress_head = _make_head(self.hidden_size, bins or 1, cfg.dropout, sigmoid=bins is None)
        self.preference_head = _make_head(self.hidden_size, 1, cfg.dropout, sigmoid=False)
        self.success_head = _make_head(self.hidden_size, 1, cfg.dropout, sigmoid=False)
        self.frame_pool_attn = nn.Linear(self.hidden_size, 1, bias=False)
        dtype = next(backbone.parameters()).dtype
        for module in (self.progress_head, self.preference_head, self.success_head, self.frame_pool_attn):
            module.to(dtype=dtype)

    @property
    def device(self) -> torch.device:
        """Device of the first parameter."""
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """dtype of the first parameter."""
        return next(self.parameters()).dtype

    def decode_progress(self, head_output: torch.Tensor) -> torch.Tensor:
        """Progress in [0, 1] from the progress head's output ``(F, bins)`` or ``(F, 1)`` -> ``(F,)`` float32."""
        out = head_output.float()
        if self.head_config.progress_bins is None:
            return out.reshape(out.shape[0])
        centres = torch.linspace(0.0, 1.0, out.shape[-1], device=out.device, dtype=out.dtype)
        return (torch.softmax(out, dim=-1) * centres).sum(dim=-1)

    def frame_embeddings(
        self,
        hidden: torch.Tensor,
        input_ids: torch.Tensor,
        *,
        prog_token_id: int,
        vision_start_id: int,
        vision_end_id: int,
    ) -> list[torch.Tensor]:
        """Per-frame embeddings of each sequence: a list of B tensors ``(F_b, h)``.

        ``hidden`` is the last hidden state ``(B, L, h)``, ``input_ids`` ``(B, L)``.

        Raises:
            ValueError: a sequence has no progress token / vision span.
        """
        result = []
        for b in range(input_ids.shape[0]):
            ids, states = input_ids[b], hidden[b]
            if self.head_config.use_per_frame_progress_token:
                pos = (ids == prog_token_id).nonzero(as_tuple=True)[0]
                if pos.numel() == 0:
                    raise ValueError(f"sequence {b} has no {PROG_TOKEN} token")
                result.append(states[pos])
                continue
            starts = (ids == vision_start_id).nonzero(as_tuple=True)[0].tolist()
            ends = (ids == vision_end_id).nonzero(as_tuple=True)[0].tolist()
            if not starts or len(starts) != len(ends):
                raise ValueError(f"sequence {b}: {len(starts)} {VISION_START} but {len(ends)} {VISION_END} tokens")
            frames = []
            for s, e in zip(starts, ends):
                span = states[s + 1 : e]
                if span.shape[0] == 0:
                    frames.append((states[s] + states[e]) / 2)
                elif self.head_config.frame_pooling == "mean":
                    frames.append(span.mean(dim=0))
                elif self.head_config.frame_pooling == "boundary":
                    frames.append(span[-1])
                else:
                    temperature = self.head_config.frame_pooling_attn_temperature
                    scores = self.frame_pool_attn(span).squeeze(-1) / temperature
                    frames.append((torch.softmax(scores, dim=0).unsqueeze(-1) * span).sum(dim=0))
            result.append(torch.stack(frames))
        return result

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        pixel_values: torch.Tensor,
        image_grid_thw: torch.Tensor,
        mm_token_type_ids: torch.Tensor | None = None,
        *,
        prog_token_id: int,
        vision_start_id: int,
        vision_end_id: int,
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-frame progress and success probability of each sequence of a batch.

        Args:
            input_ids: ``(B, L)`` int64 token ids (right-padded).
            attention_mask: ``(B, L)`` 1 for tokens, 0 for padding.
            pixel_values: ``(P, C·t·p·p)`` flattened patches of all frames of the batch.
            image_grid_thw: ``(N_frames, 3)`` int64 patch grid of every frame, in order.
            mm_token_type_ids: ``(B, L)`` int, 1 at image tokens (built if ``None``).
            prog_token_id, vision_start_id, vision_end_id: token ids.

        Returns:
            B pairs ``(progress, success_prob)``, each a float32 tensor ``(F_b,)`` with
            values in [0, 1] (F_b = frames of sequence b).
        """
        if mm_token_type_ids is None:
            image_id = getattr(self.model.config, "image_token_id", None)
            mm_token_type_ids = (input_ids == image_id).int()
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            pixel_values=pixel_values.to(self.dtype),
            image_grid_thw=image_grid_thw,
            mm_token_type_ids=mm_token_type_ids,
            output_hidden_states=True,
            return_dict=True,
        )
        hidden = out.hidden_states[-1] if getattr(out, "hidden_states", None) else out.last_hidden_state
        frames = self.frame_embeddings(
            hidden,
            input_ids,
            prog_token_id=prog_token_id,
            vision_start_id=vision_start_id,
            vision_end_id=vision_end_id,
        )
        counts = [f.shape[0] for f in frames]
        stacked = torch.cat(frames, dim=0)
        progress = self.decode_progress(self.progress_head(stacked))
        success = torch.sigmoid(self.success_head(stacked).float().reshape(-1))
        return list(zip(progress.split(counts), success.split(counts)))


# ---------------------------------------------------------------------------- processing
def _to_uint8_frame(frame: Any) -> np.ndarray:
    """One frame as ``uint8 (H, W, 3)``; floats with max <= 1 are taken as [0, 1]."""
    arr = np.asarray(frame)
    if arr.ndim == 2:
        arr = np.repeat(arr[..., None], 3, axis=-1)
    if arr.ndim != 3 or arr.shape[-1] not in (1, 3, 4):
        raise ValueError(f"a frame must be an (H, W, 3) image, got shape {arr.shape}")
    if arr.shape[-1] == 1:
        arr = np.repeat(arr, 3, axis=-1)
    elif arr.shape[-1] == 4:
        arr = arr[..., :3]
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"a frame must be non-empty, got shape {arr.shape}")
    if arr.dtype != np.uint8:
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.number):
            raise ValueError(f"a frame must hold numbers, got dtype {arr.dtype}")
        arr = arr.astype(np.float64)
        if not np.all(np.isfinite(arr)):
            raise ValueError("a frame has NaN or infinite pixel values")
        if arr.size and arr.max() <= 1.0:
            arr = arr * 255.0
        arr = np.clip(np.rint(arr), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(arr)


def _qwen_chat_text(prompt: str, n_frames: int, add_vision_id: bool = True) -> str:
    """The user turn of a progress query, written out as Qwen3-VL's template renders it."""
    parts = ["<|im_start|>user\n", prompt]
    for i in range(n_frames):
        if add_vision_id:
            parts.append(f"Picture {i + 1}: ")
        parts.append(VISION_START + IMAGE_PAD + VISION_END + PROG_TOKEN)
    parts.append("<|im_end|>\n")
    return "".join(parts)


class RobometerProcessor:
    """Turns (instruction, frames) queries into Robometer's model inputs.

    It does what ``Qwen3VLProcessor`` does for images, without its video processor (which
    needs torchvision): frames are resized to the Qwen-VL grid (a multiple of
    ``patch_size · merge_size`` pixels per side, within :data:`MIN_VISUAL_TOKENS` …
    :data:`MAX_VISUAL_TOKENS` visual tokens), converted to patches by the Qwen-VL image
    processor (``do_resize=False``), the chat text gets one ``<|image_pad|>`` per visual token,
    and the texts are tokenised with right padding. See the module docstring for the text.

    Args:
        tokenizer: the checkpoint's tokenizer; Robometer's :data:`SPECIAL_TOKENS` are added
            when missing, its pad token defaults to EOS, padding is set to the right.
        image_processor: a Qwen2-VL/Qwen3-VL image processor (``patch_size``, ``merge_size``,
            ``temporal_patch_size``; the PIL or the torchvision variant).
        chat_template: a Jinja chat template rendered with ``add_vision_id=True``; ``None``
            writes the Qwen3-VL user turn directly.
        prompt_template: query text with a ``{task}`` field (default :data:`PROGRESS_PROMPT`).
        min_pixels, max_pixels: pixel bounds of a resized frame (default from
            :data:`MIN_VISUAL_TOKENS` / :data:`MAX_VISUAL_TOKENS`).

    Raises:
        ValueError: the tokenizer lacks the Qwen vision tokens.
    """

    def __init__(
        self,
        tokenizer: Any,
        image_processor: Any,
        *,
        chat_template: str | None = None,
        prompt_template: str = PROGRESS_PROMPT,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.chat_template = chat_template
        if "{task}" not in prompt_template:
            raise ValueError("prompt_template must contain a '{task}' field")
        self.prompt_template = prompt_template
        vocab = tokenizer.get_vocab()
        for token in (VISION_START, VISION_END, IMAGE_PAD):
            if token not in vocab:
                raise ValueError(f"tokenizer lacks the Qwen-VL token {token}: not a Qwen-VL tokenizer")
        added = [t for t in SPECIAL_TOKENS if t not in vocab]
        for token in added:  # one at a time, in order, as the checkpoint's embedding rows were made
            tokenizer.add_special_tokens({"additional_special_tokens": [token]})
        if added:
            logger.info("added Robometer tokens %s to the tokenizer", added)
        if getattr(tokenizer, "pad_token_id", None) is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "right"
        self.patch_size = int(getattr(image_processor, "patch_size", 16))
        self.merge_size = int(getattr(image_processor, "merge_size", 2))
        factor = self.patch_size * self.merge_size
        self.factor = factor
        self.min_pixels = int(min_pixels) if min_pixels is not None else MIN_VISUAL_TOKENS * factor * factor
        self.max_pixels = int(max_pixels) if max_pixels is not None else MAX_VISUAL_TOKENS * factor * factor
        ids = tokenizer.convert_tokens_to_ids
        self.prog_token_id = int(ids(PROG_TOKEN))
        self.vision_start_id = int(ids(VISION_START))
        self.vision_end_id = int(ids(VISION_END))
        self.image_token_id = int(ids(IMAGE_PAD))

    @classmethod
    def wrap(cls, processor: Any, **kwargs: Any) -> RobometerProcessor:
        """A :class:`RobometerProcessor` from itself or any processor with ``tokenizer`` and
        ``image_processor`` attributes (e.g. ``transformers.Qwen3VLProcessor``; its chat
        template is kept)."""
        if isinstance(processor, cls):
            return processor
        tokenizer = getattr(processor, "tokenizer", None)
        image_processor = getattr(processor, "image_processor", None)
        if tokenizer is None or image_processor is None:
            raise TypeError(
                f"processor must have .tokenizer and .image_processor, got {type(processor).__name__}"
            )
        kwargs.setdefault("chat_template", getattr(processor, "chat_template", None))
        return cls(tokenizer, image_processor, **kwargs)

    def resized_size(self, height: int, width: int) -> tuple[int, int]:
        """``(height, width)`` in pixels a frame is resized to (multiples of :attr:`factor`)."""
        f = self.factor
        if max(height, width) / min(height, width) > 200:
            raise ValueError(f"frame aspect ratio above 200: {height}x{width}")
        h, w = max(f, round(height / f) * f), max(f, round(width / f) * f)
        if h * w > self.max_pixels:
            beta = math.sqrt(height * width / self.max_pixels)
            h, w = max(f, math.floor(height / beta / f) * f), max(f, math.floor(width / beta / f) * f)
        elif h * w < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (height * width))
            h, w = math.ceil(height * beta / f) * f, math.ceil(width * beta / f) * f
        return int(h), int(w)

    def _pil(self, frame: np.ndarray) -> Any:
        from PIL import Image

        image = Image.fromarray(frame)  # uint8 (H, W, 3) -> RGB
        h, w = self.resized_size(frame.shape[0], frame.shape[1])
        if (h, w) != (frame.shape[0], frame.shape[1]):
            image = image.resize((w, h), resample=Image.Resampling.BICUBIC)
        return image

    def text(self, instruction: str, n_frames: int) -> str:
        """The chat text of one query with ``n_frames`` frames (one ``<|image_pad|>`` per frame)."""
        prompt = self.prompt_template.format(task=instruction)
        if self.chat_template is None:
            return _qwen_chat_text(prompt, n_frames)
        content: list[dict[str, Any]] = [{"type": "text", "text": prompt}]
        for _ in range(n_frames):
            content.append({"type": "image"})
            content.append({"type": "text", "text": PROG_TOKEN})
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": content}],
            chat_template=self.chat_template,
            tokenize=False,
            add_generation_prompt=False,
            add_vision_id=True,
            enable_thinking=False,
        )

    def __call__(self, queries: Sequence[tuple[str, Sequence[Any]]]) -> dict[str, torch.Tensor]:
        """Encode a batch of queries.

        Args:
            queries: B pairs ``(instruction, frames)``; frames are ``uint8 (H, W, 3)`` arrays
                (other shapes/dtypes are converted by the same rules as in ``predict``),
                at least one per query.

        Returns:
            dict of tensors: ``input_ids`` / ``attention_mask`` / ``mm_token_type_ids``
            ``(B, L)``, ``pixel_values`` ``(P, 3·t·p·p)`` float32, ``image_grid_thw``
            ``(N_frames, 3)`` int64.

        Raises:
            ValueError: a query has no frames or a frame is not an image.
        """
        texts: list[str] = []
        images: list[Any] = []
        for instruction, frames in queries:
            frames = list(frames)
            if not frames:
                raise ValueError("a query needs at least one frame")
            texts.append(self.text(str(instruction), len(frames)))
            images.extend(self._pil(_to_uint8_frame(f)) for f in frames)
        vision = self.image_processor(images=images, do_resize=False, return_tensors="pt")
        grid = torch.as_tensor(vision["image_grid_thw"], dtype=torch.long)
        n_tokens = (grid.prod(dim=-1) // (self.merge_size**2)).tolist()
        expanded: list[str] = []
        cursor = 0
        for text in texts:
            pieces = text.split(IMAGE_PAD)
            out = [pieces[0]]
            for piece in pieces[1:]:
                out.append(IMAGE_PAD * int(n_tokens[cursor]) + piece)
                cursor += 1
            expanded.append("".join(out))
        if cursor != len(n_tokens):
            raise ValueError(f"chat text has {cursor} image slots for {len(n_tokens)} frames")
        enc = self.tokenizer(expanded, padding=True, return_tensors="pt")
        input_ids = enc["input_ids"]
        return {
            "input_ids": input_ids,
            "attention_mask": enc["attention_mask"],
            "mm_token_type_ids": (input_ids == self.image_token_id).int(),
            "pixel_values": torch.as_tensor(vision["pixel_values"]),
            "image_grid_thw": grid,
        }


# ---------------------------------------------------------------------------- loading helpers
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+(@[\w.\-/]+)?$")

_FIX_HINT = (
    "Download the checkpoint on a machine with internet access, e.g. "
    "`huggingface-cli download robometer/Robometer-4B --local-dir Robometer-4B` "
    "(or `huggingface_hub.snapshot_download`), copy the folder here and pass its path to "
    "RobometerWorldModel.from_pretrained(...)."
)


def _resolve_folder(path_or_hub_id: str | Path, *, local_files_only: bool | None, revision: str | None) -> Path:
    text = str(path_or_hub_id)
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise RobometerWeightsNotFoundError(
                f"Robometer checkpoint {str(path)!r} is a file; expected a folder with config.json, "
                f"*.safetensors and tokenizer files. {_FIX_HINT}"
            )
        return path
    if not _HUB_ID.match(text) or text.startswith((".", "~", "/")):
        raise RobometerWeightsNotFoundError(
            f"Robometer checkpoint folder {str(path)!r} does not exist (looked for a local folder "
            f"with config.json, *.safetensors and tokenizer files). {_FIX_HINT}"
        )
    repo_id, _, rev = text.partition("@")
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(
            repo_id=repo_id,
            revision=rev or revision,
            local_files_only=bool(local_files_only),
            allow_patterns=["*.json", "*.safetensors", "*.yaml", "*.txt", "*.jinja", "*.model", "*.tiktoken"],
        )
    except Exception as exc:  # offline, unknown repo, gated, no cache ...
        raise RobometerWeightsNotFoundError(
            f"Robometer checkpoint {text!r}: no local folder of that name, and the model hub copy "
            f"could not be fetched or found in the local cache ({type(exc).__name__}: {exc}). "
            f"{_FIX_HINT}"
        ) from exc
    return Path(folder)


def _chat_template_of(folder: Path, tokenizer: Any) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    js = folder / "chat_template.json"
    if js.is_file():
        try:
            value = json.loads(js.read_text(encoding="utf-8")).get("chat_template")
        except (OSError, ValueError, AttributeError):
            value = None
        if isinstance(value, str) and value:
            return value
    value = getattr(tokenizer, "chat_template", None)
    return value if isinstance(value, str) and value else None


def _read_head_state(folder: Path) -> dict[str, Any]:
    from safetensors import safe_open

    state: dict[str, Any] = {}
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as fh:
            for key in fh.keys():
                if key.startswith(_HEAD_PREFIXES):
                    state[key] = fh.get_tensor(key)
    return state


# ---------------------------------------------------------------------------- world model
@dataclass
class _Query:
    index: int
    instruction: str
    frames: list[np.ndarray]
    frame_indices: list[int]
    n_observations: int


@dataclass
class FrameScores:
    """Robometer's output for one query.

    Attributes:
        progress: per-frame progress, ``float32 (F,)`` in [0, 1].
        success_prob: per-frame success probability, ``float32 (F,)`` in [0, 1].
    """

    progress: np.ndarray
    success_prob: np.ndarray


class RobometerWorldModel:
    """Robometer as a reward-mode world model (``docs/method.md``, "Reward mode").

    Implements :class:`wmrl_envs.world_models.base.WorldModel`. In reward mode the
    :class:`~wmrl_envs.AnchoredWorldModelWrapper` passes ``contexts[i]`` = the reset
    observation (a dict with ``"instruction"``; a plain string is taken as the instruction)
    and ``actions[i]`` = a :class:`~wmrl_envs.world_models.base.Trajectory` whose
    observations carry camera frames ``obs[image_key]`` (``uint8 (H, W, 3)``; floats in
    [0, 1] and gray/RGBA images are converted). All trajectories of a call are encoded and run
    through the model in batches of ``batch_size`` trajectories.

    Rewards:
        * ``reward="reference"``: the model sees ``n_frames`` uniformly sampled frames
          (:func:`uniform_frame_indices`), and ``score`` =
          :func:`robometer_reward` of their progress (``mean(last k) - mean(first k)``,
          in [-1, 1]).
        * ``reward="dense"``: the model sees every ``dense_stride``-th frame (the last frame
          always included; at most ``max_dense_frames`` frames, uniformly subsampled beyond
          that), and ``score`` = the progress of the last frame (in [0, 1]).

    Every prediction's ``extras`` holds ``"progress"`` (list of floats, one per frame seen),
    ``"success_probs"`` (list of floats), ``"success_prob"`` (float, at the last frame seen),
    ``"frame_indices"`` (list of ints: the observation indices seen), ``"n_observations"``
    (int) and ``"reward_mode"``.
    ``score`` is ``None`` (ungraded) when the trajectory has no frames, a frame is not an
    image, the instruction is missing — an input that cannot be scored:
    ``ungraded_cause="unscorable_input"``, ``model_called=False``, counted by the wrappers but
    not warned about — or when the model raised on it: ``ungraded_cause="world_model_error"``,
    logged with ``logging.warning`` and, like any failure of the machinery, counted toward the
    wrappers' stop rule (``docs/method.md``, "Ungraded rollouts"). ``extras["error"]`` says
    why. ``predict`` never raises on one bad trajectory.

    Args:
        model: a :class:`RobometerModel` (used as is; its device is its parameters').
        processor: a :class:`RobometerProcessor` or anything with ``tokenizer`` and
            ``image_processor`` (see :meth:`RobometerProcessor.wrap`).
        image_key: observation key of the camera frame (default ``"agentview_image"``).
        instruction_key: key of the task instruction in the context / first observation.
        reward: ``"reference"`` or ``"dense"``.
        n_frames: frames sampled for the reference reward (int >= 1, default 8).
        k: frames averaged at each end by the reference reward (``1 <= k <= n_frames``).
        dense_stride: frame stride of dense mode (int >= 1).
        max_dense_frames: most frames per trajectory in dense mode (``None``: no limit).
        batch_size: trajectories per forward pass (int >= 1).

    Attributes:
        n_model_calls: trajectories scored by the model so far (int).
        n_forward_calls: forward passes so far (int).
        n_failed: trajectories returned ungraded (int).
        seconds: wall-clock seconds spent encoding + in the model (float).
        frames_seen: frames fed to the model so far (int).

    Raises:
        ValueError: invalid ``reward``, sizes or ``k``.

    Example:
        >>> import numpy as np
        >>> from wmrl_envs.world_models.base import Trajectory
        >>> wm = RobometerWorldModel(*build_tiny_robometer(seed=0))
        >>> obs = [{"agentview_image": np.zeros((64, 64, 3), np.uint8)} for _ in range(5)]
        >>> pred = wm.predict([{"instruction": "open the drawer"}], [Trajectory(obs, [0] * 4, True)])[0]
        >>> len(pred.extras["progress"]), -1.0 <= pred.score <= 1.0
        (8, True)
    """

    def __init__(
        self,
        model: Any,
        processor: Any,
        *,
        image_key: str = "agentview_image",
        instruction_key: str = "instruction",
        reward: Literal["reference", "dense"] = "reference",
        n_frames: int = 8,
        k: int = 3,
        dense_stride: int = 1,
        max_dense_frames: int | None = None,
        batch_size: int = 4,
    ) -> None:
        if reward not in ("reference", "dense"):
            raise ValueError(f"reward must be 'reference' or 'dense', got {reward!r}")
        self.n_frames = _check_count("n_frames", n_frames)
        self.k = _check_count("k", k)
        if self.k > self.n_frames:
            raise ValueError(f"k={k} frames per end cannot exceed n_frames={n_frames}")
        self.dense_stride = _check_count("dense_stride", dense_stride)
        self.max_dense_frames = (
            None if max_dense_frames is None else _check_count("max_dense_frames", max_dense_frames)
        )
        self.batch_size = _check_count("batch_size", batch_size)
        self.reward = reward
        self.image_key = str(image_key)
        self.instruction_key = str(instruction_key)
        self.model = model
        self.processor = RobometerProcessor.wrap(processor)
        n_embed = model.model.get_input_embeddings().weight.shape[0]
        if len(self.processor.tokenizer) > n_embed:
            raise ValueError(
                f"tokenizer has {len(self.processor.tokenizer)} tokens but the model embeds only {n_embed}: "
                "tokenizer and checkpoint do not match"
            )
        model.eval()
        self.n_model_calls = 0
        self.n_forward_calls = 0
        self.n_failed = 0
        self.seconds = 0.0
        self.frames_seen = 0

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(
        cls,
        path_or_hub_id: str | Path,
        *,
        device: Any = None,
        dtype: Any = None,
        local_files_only: bool | None = None,
        revision: str | None = None,
        head_config: RobometerHeadConfig | None = None,
        **kwargs: Any,
    ) -> RobometerWorldModel:
        """Load a Robometer checkpoint (see the module docstring for the layout).

        A path that exists is used as the checkpoint folder (nothing is downloaded); otherwise
        ``path_or_hub_id`` is taken as a model-hub id (``owner/name``, optionally
        ``@revision``) and fetched with ``huggingface_hub.snapshot_download`` (or found in its
        cache). The backbone is loaded with ``transformers.Qwen3VLModel.from_pretrained``, the
        tokenizer with ``AutoTokenizer`` and the image processor with ``AutoImageProcessor``
        (all with ``local_files_only=True`` on the resolved folder); the heads are read from the
        folder's ``*.safetensors``, the head settings from ``config.yaml`` when present (the
        number of progress bins always from the weights).

        Args:
            path_or_hub_id: checkpoint folder or hub id (e.g. ``"robometer/Robometer-4B"``).
            device: torch device (default: CUDA when available, else CPU).
            dtype: parameter dtype (default: ``bfloat16`` on CUDA, ``float32`` on CPU).
            local_files_only: for a hub id, only look in the local hub cache.
            revision: hub revision (branch, tag or commit) when not given after ``@``.
            head_config: overrides the head settings read from the checkpoint.
            **kwargs: :class:`RobometerWorldModel` constructor arguments.

        Returns:
            The world model, in eval mode, gradients off. Robometer-4B takes about 9 GB of
            memory in bfloat16 and 18 GB in float32.

        Raises:
            RobometerWeightsNotFoundError: (a ``FileNotFoundError``) no such folder, the hub
                is unreachable / the repo unknown / not cached, or the folder lacks
                ``config.json``, ``*.safetensors``, tokenizer or image-processor files or the
                Robometer head weights.
            ValueError: the folder is not a Qwen3-VL Robometer checkpoint (other backbone,
                backbone weights missing, video-mode heads).
        """
        from transformers import AutoConfig, AutoImageProcessor, AutoTokenizer, Qwen3VLModel

        folder = _resolve_folder(path_or_hub_id, local_files_only=local_files_only, revision=revision)
        missing = [name for name in ("config.json",) if not (folder / name).is_file()]
        if not list(folder.glob("*.safetensors")):
            missing.append("*.safetensors (weights)")
        if missing:
            raise RobometerWeightsNotFoundError(
                f"Robometer checkpoint folder {str(folder)!r} lacks {', '.join(missing)}. {_FIX_HINT}"
            )
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
        if getattr(config, "model_type", None) != "qwen3_vl":
            raise ValueError(
                f"{folder}/config.json describes a {getattr(config, 'model_type', '?')!r} model; "
                "Robometer checkpoints here must have a Qwen3-VL ('qwen3_vl') backbone"
            )
        heads = _read_head_state(folder)
        if "progress_head.4.weight" not in heads or "success_head.4.weight" not in heads:
            raise RobometerWeightsNotFoundError(
                f"no Robometer head weights (progress_head.*, success_head.*) in {folder}/*.safetensors: "
                f"is this the base Qwen3-VL model rather than a Robometer checkpoint? {_FIX_HINT}"
            )
        if head_config is None:
            yaml_path = folder / "config.yaml"
            head_config = (
                RobometerHeadConfig.from_experiment_yaml(yaml_path) if yaml_path.is_file() else RobometerHeadConfig()
            )
        out_features = int(heads["progress_head.4.weight"].shape[0])
        head_config = RobometerHeadConfig(
            progress_bins=None if out_features == 1 else out_features,
            use_per_frame_progress_token=head_config.use_per_frame_progress_token,
            frame_pooling=head_config.frame_pooling,
            frame_pooling_attn_temperature=head_config.frame_pooling_attn_temperature,
            dropout=head_config.dropout,
        )
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        device = torch.device(device)
        if dtype is None:
            dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
            image_processor = AutoImageProcessor.from_pretrained(str(folder), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise RobometerWeightsNotFoundError(
                f"could not load the tokenizer / image processor from {folder} "
                f"({type(exc).__name__}: {exc}). {_FIX_HINT}"
            ) from exc
        from transformers.utils import logging as hf_logging

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the head keys are "unexpected" for the backbone: we check below
        try:
            backbone, info = Qwen3VLModel.from_pretrained(
                str(folder), config=config, dtype=dtype, local_files_only=True, output_loading_info=True
            )
        except RuntimeError as exc:  # size mismatches, failed key conversions
            raise ValueError(f"{folder}: the backbone weights do not fit its config.json: {exc}") from exc
        finally:
            hf_logging.set_verbosity(verbosity)
        missing_keys = list(info.get("missing_keys") or [])
        if missing_keys:
            raise ValueError(
                f"{folder}: {len(missing_keys)} backbone weights missing from the checkpoint "
                f"(e.g. {sorted(missing_keys)[:5]}); expected keys 'model.language_model.*' and 'model.visual.*'"
            )
        extra = sorted(k for k in (info.get("unexpected_keys") or []) if not k.startswith(_HEAD_PREFIXES))
        if extra:
            logger.warning("%s: %d unused weights in the checkpoint, e.g. %s", folder, len(extra), extra[:5])
        model = RobometerModel(backbone, head_config)
        result = model.load_state_dict(
            {k: v.to(dtype) for k, v in heads.items()}, strict=False
        )
        unexpected = [k for k in result.unexpected_keys]
        missing_heads = [k for k in result.missing_keys if k.startswith(("progress_head.", "success_head."))]
        if unexpected or missing_heads:
            raise ValueError(
                f"{folder}: head weights do not fit (unexpected {unexpected[:5]}, missing {missing_heads[:5]})"
            )
        model.to(device)
        model.requires_grad_(False)
        model.eval()
        template = _chat_template_of(folder, tokenizer)
        processor = RobometerProcessor(tokenizer, image_processor, chat_template=template)
        return cls(model, processor, **kwargs)

    def save_pretrained(self, folder: str | Path) -> Path:
        """Write the model in the checkpoint layout :meth:`from_pretrained` reads.

        Files: ``config.json`` (backbone config), ``model.safetensors`` (``model.*`` backbone
        keys + head keys), tokenizer and image-processor files, ``config.yaml`` (head settings)
        and ``chat_template.jinja`` when a template is set.

        Returns:
            The folder (created if needed).
        """
        import yaml
        from safetensors.torch import save_file

        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        self.model.model.config.save_pretrained(str(out))
        state = {k: v.detach().cpu().contiguous() for k, v in self.model.state_dict().items()}
        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
        self.processor.tokenizer.save_pretrained(str(out))
        self.processor.image_processor.save_pretrained(str(out))
        cfg = self.model.head_config
        discrete = cfg.progress_bins is not None
        (out / "config.yaml").write_text(
            yaml.safe_dump(
                {
                    "model": {
                        "use_multi_image": True,
                        "use_per_frame_progress_token": cfg.use_per_frame_progress_token,
                        "frame_pooling": cfg.frame_pooling,
                        "frame_pooling_attn_temperature": cfg.frame_pooling_attn_temperature,
                        "progress_loss_type": "discrete" if discrete else "l2",
                        "progress_discrete_bins": cfg.progress_bins or 10,
                    }
                },
                sort_keys=False,
            ),
            encoding="utf-8",
        )
        if self.processor.chat_template:
            (out / "chat_template.jinja").write_text(self.processor.chat_template, encoding="utf-8")
        return out

    # ------------------------------------------------------------------ stats
    def stats(self) -> dict[str, float]:
        """Counters as a dict (for logging): calls, forward passes, failures, seconds, frames/s."""
        return {
            "n_model_calls": self.n_model_calls,
            "n_forward_calls": self.n_forward_calls,
            "n_failed": self.n_failed,
            "seconds": self.seconds,
            "frames_seen": self.frames_seen,
            "frames_per_s": self.frames_seen / self.seconds if self.seconds > 0 else 0.0,
        }

    # ------------------------------------------------------------------ scoring
    def score_frames(
        self, queries: Sequence[tuple[str, Sequence[Any]]], *, batch_size: int | None = None
    ) -> list[FrameScores]:
        """Per-frame progress and success probability of several (instruction, frames) queries.

        Args:
            queries: pairs ``(instruction, frames)``, frames ``uint8 (H, W, 3)`` arrays, at
                least one frame each.
            batch_size: queries per forward pass (default ``self.batch_size``).

        Returns:
            One :class:`FrameScores` per query, in order.

        Raises:
            ValueError: a query has no frames or a bad frame; any model error is raised too
                (``predict`` is the forgiving entry point).
        """
        size = self.batch_size if batch_size is None else _check_count("batch_size", batch_size)
        results: list[FrameScores] = []
        device = next(self.model.parameters()).device
        for start in range(0, len(queries), size):
            chunk = list(queries[start : start + size])
            t0 = time.perf_counter()
            inputs = self.processor(chunk)
            inputs = {k: v.to(device) for k, v in inputs.items()}
            with torch.inference_mode():
                outputs = self.model(
                    **inputs,
                    prog_token_id=self.processor.prog_token_id,
                    vision_start_id=self.processor.vision_start_id,
                    vision_end_id=self.processor.vision_end_id,
                )
            self.seconds += time.perf_counter() - t0
            self.n_forward_calls += 1
            for (instruction, frames), (progress, success) in zip(chunk, outputs):
                n = len(list(frames))
                if progress.shape[0] != n:
                    raise ValueError(f"model returned {progress.shape[0]} progress values for {n} frames")
                results.append(
                    FrameScores(
                        progress=progress.float().cpu().numpy().astype(np.float32),
                        success_prob=success.float().cpu().numpy().astype(np.float32),
                    )
                )
                self.frames_seen += n
        return results

    def _instruction(self, context: Any, observations: Sequence[Any]) -> str:
        if isinstance(context, str):
            return context
        for source in (context, observations[0] if observations else None):
            if isinstance(source, Mapping) and source.get(self.instruction_key) is not None:
                return str(source[self.instruction_key])
        raise ValueError(f"no task instruction: the context has no {self.instruction_key!r} key")

    def _select(self, n_obs: int) -> list[int]:
        if self.reward == "reference":
            return uniform_frame_indices(n_obs, self.n_frames).tolist()
        idx = list(range(0, n_obs, self.dense_stride))
        if idx[-1] != n_obs - 1:
            idx.append(n_obs - 1)
        if self.max_dense_frames is not None and len(idx) > self.max_dense_frames:
            idx = [idx[i] for i in uniform_frame_indices(len(idx), self.max_dense_frames)]
        return idx

    def _prepare(self, i: int, context: Any, action: Any) -> _Query:
        observations = list(getattr(action, "observations", action) or [])
        if not observations:
            raise ValueError("no frames: the trajectory has no observations")
        indices = self._select(len(observations))
        frames = []
        for j in indices:
            obs = observations[j]
            if not isinstance(obs, Mapping) or obs.get(self.image_key) is None:
                raise ValueError(f"observation {j} has no {self.image_key!r} image")
            frames.append(_to_uint8_frame(obs[self.image_key]))
        return _Query(i, self._instruction(context, observations), frames, indices, len(observations))

    def _prediction(self, query: _Query, scores: FrameScores) -> WorldModelPrediction:
        progress = [float(x) for x in scores.progress]
        success = [float(x) for x in scores.success_prob]
        if self.reward == "reference":
            score = robometer_reward(progress, n_frames=self.n_frames, k=self.k)
        else:
            score = progress[-1]
        extras = {
            "reward_mode": self.reward,
            "progress": progress,
            "success_probs": success,
            "success_prob": success[-1],
            "frame_indices": list(query.frame_indices),
            "n_observations": query.n_observations,
        }
        return WorldModelPrediction(score=float(score), extras=extras)

    def predict(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[WorldModelPrediction]:
        """Score a batch of trajectories (see the class docstring).

        Args:
            contexts: B reset observations (dicts with the instruction) or instruction strings.
            actions: B :class:`~wmrl_envs.world_models.base.Trajectory` (or plain lists of
                observation dicts).

        Returns:
            B :class:`~wmrl_envs.world_models.base.WorldModelPrediction`, in order.

        Raises:
            ValueError: ``contexts`` and ``actions`` differ in length (nothing else raises:
                a bad trajectory gets ``score=None`` with ``extras["error"]``).
        """
        if len(contexts) != len(actions):
            raise ValueError(f"got {len(contexts)} contexts for {len(actions)} trajectories")
        preds: list[WorldModelPrediction | None] = [None] * len(actions)
        queries: list[_Query] = []
        for i, (context, action) in enumerate(zip(contexts, actions)):
            try:
                queries.append(self._prepare(i, context, action))
            except (ValueError, TypeError, KeyError, IndexError) as exc:  # an input that cannot be scored
                preds[i] = self._failure(exc, model_called=False, cause=UNSCORABLE)
            except Exception as exc:  # a bad trajectory never fails the batch
                preds[i] = self._failure(exc, model_called=False, cause=WORLD_MODEL_ERROR)
        for start in range(0, len(queries), self.batch_size):
            chunk = queries[start : start + self.batch_size]
            try:
                scored = self.score_frames([(q.instruction, q.frames) for q in chunk], batch_size=len(chunk))
                for q, s in zip(chunk, scored):
                    preds[q.index] = self._prediction(q, s)
                    self.n_model_calls += 1
            except Exception as exc:
                if len(chunk) == 1:
                    preds[chunk[0].index] = self._failure(exc, model_called=True, cause=WORLD_MODEL_ERROR)
                    continue
                logger.warning("Robometer batch of %d failed (%s); scoring one by one", len(chunk), exc)
                for q in chunk:  # isolate the trajectory that fails
                    try:
                        scores = self.score_frames([(q.instruction, q.frames)], batch_size=1)[0]
                        preds[q.index] = self._prediction(q, scores)
                        self.n_model_calls += 1
                    except Exception as inner:
                        preds[q.index] = self._failure(inner, model_called=True, cause=WORLD_MODEL_ERROR)
        return [
            p if p is not None else self._failure(RuntimeError("not scored"), model_called=False, cause=WORLD_MODEL_ERROR)
            for p in preds
        ]

    def _failure(self, exc: BaseException, *, model_called: bool, cause: str) -> WorldModelPrediction:
        self.n_failed += 1
        message = f"{type(exc).__name__}: {exc}"
        if cause == UNSCORABLE:  # the input, not the model: counted by the wrappers, not warned about
            logger.debug("Robometer cannot score a trajectory: %s", message)
        else:
            logger.warning("Robometer failed on a trajectory (%s): %s", cause, message)
        return WorldModelPrediction(
            score=None, model_called=model_called, extras={"reward_mode": self.reward, "error": message},
            ungraded_cause=cause,
        )


# ---------------------------------------------------------------------------- tiny model
_TINY_TEMPLATE = (
    "{%- set ns = namespace(images=0) -%}"
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message.role + '\\n' -}}"
    "{%- if message.content is string -%}{{- message.content -}}"
    "{%- else -%}{%- for item in message.content -%}"
    "{%- if item.type == 'image' -%}{%- set ns.images = ns.images + 1 -%}"
    "{%- if add_vision_id -%}{{- 'Picture ' + ns.images|string + ': ' -}}{%- endif -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif item.type == 'text' -%}{{- item.text -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
"""A Jinja chat template that renders single-image-list user turns the way Qwen3-VL's does
(written for the tiny test model; real checkpoints bring their own)."""


def build_tiny_robometer(
    *,
    seed: int = 0,
    hidden_size: int = 32,
    num_layers: int = 2,
    progress_bins: int | None = 10,
    use_per_frame_progress_token: bool = True,
    frame_pooling: str = "mean",
    with_chat_template: bool = False,
) -> tuple[RobometerModel, RobometerProcessor]:
    """A randomly initialised miniature Robometer: same architecture, tiny sizes.

    The backbone is a ``transformers.Qwen3VLModel`` built from a ``Qwen3VLConfig`` (vision
    tower: ``num_layers`` blocks of width ``hidden_size``, patch 16, merge 2; language model:
    ``num_layers`` layers, width ``hidden_size``, 2 heads of 16 dims, M-RoPE), plus Robometer's
    heads; the tokenizer is byte-level (256 byte tokens, no merges) with the Qwen-VL and
    Robometer special tokens; the image processor is the PIL Qwen2-VL one. Nothing is
    downloaded. For tests and CPU smoke runs only: the scores carry no information.

    Args:
        seed: ``torch.manual_seed`` for the weights (the global RNG is restored afterwards).
        hidden_size: width of both towers (even, >= 32).
        num_layers: layers of each tower (>= 1).
        progress_bins: see :class:`RobometerHeadConfig`.
        use_per_frame_progress_token: see :class:`RobometerHeadConfig`.
        frame_pooling: see :class:`RobometerHeadConfig`.
        with_chat_template: give the processor a Jinja chat template instead of writing the
            user turn directly (both render the same text).

    Returns:
        ``(model, processor)``: a :class:`RobometerModel` (float32, eval mode, CPU) and a
        :class:`RobometerProcessor`.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen3VLConfig, Qwen3VLModel
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    if hidden_size < 32 or hidden_size % 2:
        raise ValueError(f"hidden_size must be even and >= 32, got {hidden_size}")
    num_layers = _check_count("num_layers", num_layers)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    qwen_tokens = [
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", VISION_START, VISION_END, "<|vision_pad|>", IMAGE_PAD,
        "<|video_pad|>",
    ]
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=qwen_tokens,
    )
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=16, merge_size=2, temporal_patch_size=2, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5]
    )
    template = _TINY_TEMPLATE if with_chat_template else None
    processor = RobometerProcessor(tokenizer, image_processor, chat_template=template)
    ids = tokenizer.convert_tokens_to_ids
    head_dim = 16
    heads = max(1, hidden_size // head_dim)
    config = Qwen3VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=heads,
            num_key_value_heads=1,
            head_dim=head_dim,
            max_position_embeddings=4096,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [4, 2, 2],  # sums to head_dim / 2
                "mrope_interleaved": True,
            },
        ),
        vision_config=dict(
            depth=num_layers,
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_heads=heads,
            patch_size=16,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=hidden_size,
            num_position_embeddings=64,
            deepstack_visual_indexes=[0],
        ),
        image_token_id=ids(IMAGE_PAD),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids(VISION_START),
        vision_end_token_id=ids(VISION_END),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        backbone = Qwen3VLModel(config)
        model = RobometerModel(
            backbone,
            RobometerHeadConfig(
                progress_bins=progress_bins,
                use_per_frame_progress_token=use_per_frame_progress_token,
                frame_pooling=frame_pooling,
            ),
        )
    model.float().eval()
    model.requires_grad_(False)
    return model, processor
