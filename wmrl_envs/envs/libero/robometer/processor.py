"""Frames + instruction -> Robometer's model inputs (:class:`RobometerProcessor`), and the input format.

The format follows the authors' code (robometer/robometer ``RBMBatchCollator`` and
``qwen_vl_utils.process_vision_info``); ``tests/envs/libero/test_robometer_golden.py`` checks the prompt
text, the order of frames and progress tokens, the chat-template arguments, the frame sizes and
the resized pixels against golden files written by that code (``tests/golden/robometer``), and
the chat text written without a template against Qwen3-VL-4B-Instruct's own template. The token
ids come from the checkpoint's tokenizer, which cannot be downloaded here, so they are not
checked:

* **Input** (multi-image mode with per-frame progress tokens, the released default): one user
  turn of the Qwen3-VL chat template, rendered with ``add_vision_id=True`` and no generation
  prompt — the :data:`PROGRESS_PROMPT` text with the instruction, then for every frame
  ``Picture i: <|vision_start|><|image_pad|>…<|vision_end|>`` followed by the added token
  ``<|prog_token|>``. The heads read the last hidden state at each ``<|prog_token|>``. The
  added tokens, in this order, are :data:`SPECIAL_TOKENS`. Checkpoints trained without
  progress tokens instead pool each frame's image tokens between ``<|vision_start|>`` and
  ``<|vision_end|>`` (:class:`~.model.RobometerHeadConfig`); video-mode checkpoints are not
  supported.
* **Frames** are fed at their own resolution, rounded to a multiple of the patch size times
  the merge size (32 px for Qwen3-VL) and kept within :data:`MIN_VISUAL_TOKENS` …
  :data:`MAX_VISUAL_TOKENS` visual tokens (the Qwen-VL helper library's defaults for images);
  the image processor does not resize again. A LIBERO 128x128 frame gives 16 visual tokens.
  Frames are used as given (no flipping).
* **Chat template.** The checkpoint's own template is used when its folder has one; otherwise
  the user turn is written out directly (``<|im_start|>user\\n…<|im_end|>\\n``, no system
  turn), which is what Qwen3-VL-4B-Instruct's template renders for this message (checked).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Sequence

import numpy as np
import torch

__all__ = [
    "PROGRESS_PROMPT",
    "SPECIAL_TOKENS",
    "PROG_TOKEN",
    "VISION_START",
    "VISION_END",
    "IMAGE_PAD",
    "MIN_VISUAL_TOKENS",
    "MAX_VISUAL_TOKENS",
    "CHAT_TEMPLATE_KWARGS",
    "RobometerProcessor",
    "to_uint8_frame",
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

def to_uint8_frame(frame: Any) -> np.ndarray:
    """One frame as a contiguous ``uint8 (H, W, 3)`` array.

    Gray ``(H, W)`` / ``(H, W, 1)`` images are repeated to RGB, RGBA loses its alpha; numbers
    other than uint8 are rounded and clipped to [0, 255], and floats with max <= 1 are taken
    as [0, 1] (scaled by 255).

    Raises:
        ValueError: not an image shape, empty, not numeric (bools included), or NaN/inf pixels.
    """
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


CHAT_TEMPLATE_KWARGS = {"tokenize": False, "add_generation_prompt": False, "add_vision_id": True, "enable_thinking": False}
"""How the chat template renders a progress query (Robometer's ``RBMBatchCollator._process_conversation``,
robometer/robometer ``robometer/data/collators/rbm_heads.py``, which also passes ``fps=1``: a
video setting, without effect on images)."""


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

    def messages(self, instruction: str, n_frames: int) -> list[dict[str, Any]]:
        """The conversation of one progress query: one user turn holding the prompt, then each
        frame (``{"type": "image"}``) followed by ``<|prog_token|>`` — the multi-image,
        per-frame-progress-token query of Robometer's ``RBMBatchCollator._process_progress_batch``
        (checked against its output in ``tests/envs/libero/test_robometer_golden.py``)."""
        content: list[dict[str, Any]] = [{"type": "text", "text": self.prompt_template.format(task=instruction)}]
        for _ in range(n_frames):
            content.append({"type": "image"})
            content.append({"type": "text", "text": PROG_TOKEN})
        return [{"role": "user", "content": content}]

    def text(self, instruction: str, n_frames: int) -> str:
        """The chat text of one query with ``n_frames`` frames (one ``<|image_pad|>`` per frame):
        :meth:`messages` rendered by the chat template with :data:`CHAT_TEMPLATE_KWARGS`, or
        written out as Qwen3-VL's template renders it when there is no template."""
        if self.chat_template is None:
            return _qwen_chat_text(self.prompt_template.format(task=instruction), n_frames)
        return self.tokenizer.apply_chat_template(
            self.messages(instruction, n_frames), chat_template=self.chat_template, **CHAT_TEMPLATE_KWARGS
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
            images.extend(self._pil(to_uint8_frame(f)) for f in frames)
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
