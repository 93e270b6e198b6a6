"""Load MiniVLA runs in the authors' own Prismatic format, without their code, with transformers.

MiniVLA (Belkhale & Sadigh 2024, Stanford-ILIAD/openvla-mini) is released and fine-tuned as
*Prismatic* run folders, which transformers cannot load::

    RUN/config.json                  the training config: {"vla": {"base_vlm", "action_tokenizer", ...}, ...}
    RUN/dataset_statistics.json      action q01/q99 per dataset (un-normalisation)
    RUN/checkpoints/step-*.pt        torch.save({"model": {"vision_backbone", "projector", "llm_backbone"}})

:func:`load_prismatic_vla` reads such a folder into a :class:`PrismaticVLA` (a ``torch.nn.Module``)
and a :class:`PrismaticProcessor` that :class:`agents.vla.policy.VLAPolicy` drives like any other
VLA (:func:`agents.vla.policy.load_vla` dispatches Prismatic folders here). What is rebuilt, and
from which lines of openvla-mini (commit ``0822b36``):

* vision: ``dinosiglip-vit-so-224px`` (``prismatic/models/backbones/vision/dinosiglip_vit.py``),
  timm's ``vit_large_patch14_reg4_dinov2.lvd142m`` and ``vit_so400m_patch14_siglip_224`` run side
  by side; each gives the output of its *second-to-last* block (``get_intermediate_layers(n={depth -
  2})``), without prefix tokens or final norm, and the two are concatenated per patch. The timm
  weights are mapped onto transformers' ``Dinov2WithRegistersModel`` and ``SiglipVisionModel`` (the
  last block, unused, is dropped), so timm is not needed;
* projector: ``no-align+fused-gelu-mlp`` / ``gelu-mlp`` / ``linear`` (``prismatic/util/nn_utils.py``):
  Linear layers with exact GELU between them, rebuilt from the checkpoint's keys;
* language model: Qwen2.5 (``prismatic/models/backbones/llm/qwen25.py``) as transformers'
  ``Qwen2ForCausalLM``; ``-extra`` backbones add 256 ``<|extra_i|>`` tokens to the tokenizer (the
  ids of MiniVLA's action tokens);
* forward (``prismatic/models/vlms/prismatic.py``): the projected patches go right after the first
  token of the prompt. :class:`PrismaticProcessor` reserves those positions in ``input_ids`` (marked
  by ``image_mask``), so left-padded batches, key/value caches and position ids work as for any
  causal LM; positions count real tokens only (``cumsum(attention_mask) - 1``);
* image transform (``image_resize_strategy = "resize-naive"``): PIL bicubic resize to the square
  input size, scale to [0, 1], normalise with ImageNet mean/std (DINOv2) and 0.5/0.5 (SigLIP); the
  two tensors are stacked on the channel axis (``pixel_values``: (B, 6, H, W)).

Equality with the authors' code is tested, not assumed: ``tests/test_prismatic_golden.py`` compares
pixels, prompt ids, logits and greedy actions with what openvla-mini's own ``load_vla`` /
``predict_action`` compute on a tiny run folder (``tests/golden/make_prismatic_golden.py``). The
math of the policy's GRPO update is in ``docs/method.md``.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

__all__ = [
    "PrismaticVLA",
    "PrismaticProcessor",
    "PrismaticFormatError",
    "PrismaticShapes",
    "MINIVLA_SHAPES",
    "build_prismatic_vla",
    "load_prismatic_vla",
    "is_prismatic_run",
    "prismatic_vq_folder",
    "prismatic_tokenizer",
    "prismatic_action_vocab_size",
    "QWEN25_CONFIGS",
    "PRISMATIC_BASE_VLMS",
]

QWEN25_CONFIGS: dict[str, dict[str, Any]] = {
    "qwen25-0_5b": {
        "hub_id": "Qwen/Qwen2.5-0.5B",
        "num_attention_heads": 14,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 32768,
        "hidden_act": "silu",
        "vocab_rows": 151936,
        "tokenizer_len": 151665,
    },
}
"""What a Prismatic checkpoint does not store about its language model, per LLM backbone (the
``-extra`` / ``-pure`` suffix removed): the hub id whose tokenizer the authors load and the
hyper-parameters of its ``config.json`` that the weights' shapes do not give (Qwen2.5-0.5B: 14
heads, RoPE θ 1e6, RMSNorm ε 1e-6, 32768 positions). Sizes (width, depth, vocabulary rows, key/value
heads, tied head) are read from the weights. ``vocab_rows`` / ``tokenizer_len``: a checkpoint
with that many embedding rows must come with a tokenizer of that many tokens before the 256 extra
ones (Qwen2.5's 151 665), else the action ids would be shifted. Other Qwen2.5 sizes (``qwen25-1_5b``,
...): pass ``llm_config``; other LLM families are not rebuilt."""

PRISMATIC_BASE_VLMS: dict[str, dict[str, Any]] = {
    "prism-qwen25-extra-dinosiglip-224px+0_5b": {
        "vision_backbone_id": "dinosiglip-vit-so-224px", "llm_backbone_id": "qwen25-0_5b-extra",
        "arch_specifier": "no-align+fused-gelu-mlp", "image_resize_strategy": "resize-naive", "llm_max_length": 32768,
    },
    "prism-qwen25-dinosiglip-224px+0_5b": {
        "vision_backbone_id": "dinosiglip-vit-so-224px", "llm_backbone_id": "qwen25-0_5b-pure",
        "arch_specifier": "no-align+fused-gelu-mlp", "image_resize_strategy": "resize-naive", "llm_max_length": 32768,
    },
}
"""The base VLMs of MiniVLA runs (``prismatic/conf/models.py``, ``Prism_Qwen25_0_5B_*``): a VLA
run's ``config.json`` names its base VLM (``vla.base_vlm``) and the authors' loader takes the model
from this registry, as this one does."""

_VISION_HEADS = {"dinosiglip-vit-so-224px": {"dino": 16, "siglip": 16}}
"""Attention heads of the vision backbones (timm's ViT-L/14 DINOv2 and SigLIP so400m/14: 16 each)."""

_DINO_MEAN, _DINO_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
_SIGLIP_MEAN, _SIGLIP_STD = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)
_PROJECTORS = ("fused-gelu-mlp", "gelu-mlp", "linear")
_N_EXTRA = 256

_VQ_FOLDERS = {
    "libero_vq_action_tokenizer": "pretrain_vq+mx-libero_90+fach-7+ng-7+nemb-128+nlatent-512",
    "libero_vq_extra_action_tokenizer": "pretrain_vq+mx-libero_90+fach-7+ng-7+nemb-128+nlatent-512",
    "libero_vq_h0_extra_action_tokenizer": "pretrain_vq+mx-libero_90+fach-0+ng-7+nemb-128+nlatent-512",
    "bridge_vq_extra_action_tokenizer": "pretrain_modvq+mx-bridge_dataset+fach-7+ng-7+nemb-256+nlatent-512",
}
"""VQ folder of each VQ action tokenizer name (``prismatic/vla/action_tokenizer.py``
``ACTION_TOKENIZERS``; the authors keep it under ``vq/`` of their working directory)."""


class PrismaticFormatError(ValueError):
    """A Prismatic run folder this loader cannot read: the message says what and how to fix it."""


# ---------------------------------------------------------------------------------- processor
class PrismaticProcessor:
    """Prompt + image -> model inputs, as openvla-mini's ``PrismaticVLM`` sees them.

    Args:
        tokenizer: the run's Qwen2.5 tokenizer (with the 256 extra tokens for ``-extra`` runs).
        image_size: square input side of both vision towers (224), pixels.
        num_patches: image tokens per image (256 = (224 / 14)²).
        pad_token_id: id written at the image positions (replaced by patch features in the model);
            default the tokenizer's pad id.

    Calling it returns ``input_ids`` int64 (B, n + num_patches) with ``num_patches`` placeholder
    positions after the first token, ``attention_mask`` int64 (B, n + num_patches), ``image_mask``
    int64 (B, n + num_patches) (1 at the image positions) and ``pixel_values`` float32 (B, 6, H, W)
    (DINOv2 channels, then SigLIP channels).
    """

    def __init__(self, tokenizer: Any, *, image_size: int = 224, num_patches: int = 256,
                 pad_token_id: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.image_size = int(image_size)
        self.num_patches = int(num_patches)
        pad = tokenizer.pad_token_id if pad_token_id is None else pad_token_id
        if pad is None:
            pad = tokenizer.eos_token_id
        if pad is None:
            raise PrismaticFormatError("the tokenizer has neither a pad nor an eos token: pass pad_token_id")
        self.pad_token_id = int(pad)

    def pixel_values(self, image: Any) -> torch.Tensor:
        """One image -> float32 (6, H, W): PIL bicubic resize to ``image_size``², /255, then
        ImageNet normalisation (channels 0-2, DINOv2) and 0.5/0.5 (channels 3-5, SigLIP).

        Raises:
            ValueError: not a PIL image or a uint8 (H, W, 3) array with H, W >= 1.
        """
        from PIL import Image

        if isinstance(image, np.ndarray):
            if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3 or 0 in image.shape:
                raise ValueError(f"images must be uint8 (H, W, 3) arrays with H, W >= 1, got {image.dtype} {image.shape}")
            image = Image.fromarray(image)
        elif not isinstance(image, Image.Image):
            raise ValueError(f"images must be PIL images or uint8 (H, W, 3) arrays, got {type(image).__name__}")
        img = image.convert("RGB").resize((self.image_size, self.image_size), Image.BICUBIC)
        x = torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1).float().div(255)
        out = []
        for mean, std in ((_DINO_MEAN, _DINO_STD), (_SIGLIP_MEAN, _SIGLIP_STD)):
            m = torch.tensor(mean, dtype=torch.float32)[:, None, None]
            s = torch.tensor(std, dtype=torch.float32)[:, None, None]
            out.append((x - m) / s)
        return torch.cat(out, 0)

    def __call__(self, images: Any = None, text: str | Sequence[str] | None = None,
                 return_tensors: str = "pt", **_: Any) -> dict[str, torch.Tensor]:
        """Encode B prompts with one image each (a PIL image or uint8 (H, W, 3) array per prompt).

        Raises:
            ValueError: no text, a prompt that tokenises to nothing, a number of images other than
                one per prompt (Prismatic runs with several images per step are not supported), an
                image that is not a PIL image or a uint8 (H, W, 3) array, or ``return_tensors != "pt"``.
        """
        if return_tensors != "pt":
            raise ValueError(f"PrismaticProcessor returns torch tensors only (return_tensors='pt'), got {return_tensors!r}")
        if text is None:
            raise ValueError("PrismaticProcessor needs the prompt text")
        texts = [text] if isinstance(text, str) else list(text)
        if not texts:
            raise ValueError("PrismaticProcessor needs at least one prompt")
        imgs = images if isinstance(images, (list, tuple)) else [images]
        imgs = [im[0] if isinstance(im, (list, tuple)) and len(im) == 1 else im for im in imgs]
        if images is None or any(im is None for im in imgs):
            raise ValueError("PrismaticProcessor needs one image per prompt, got none")
        if len(imgs) != len(texts) or any(isinstance(im, (list, tuple)) for im in imgs):
            counts = [len(im) if isinstance(im, (list, tuple)) else 1 for im in imgs]
            raise ValueError(f"PrismaticProcessor takes exactly one image per prompt, got images per prompt {counts} for "
                             f"{len(texts)} prompt(s) (MiniVLA runs with wrist or history images are not supported)")
        rows = [self.tokenizer(t, add_special_tokens=True).input_ids for t in texts]
        if any(len(r) == 0 for r in rows):
            raise ValueError("a prompt tokenised to no tokens: the image goes after the first token")
        width = max(len(r) for r in rows) + self.num_patches
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        image_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, r in enumerate(rows):
            seq = [r[0]] + [self.pad_token_id] * self.num_patches + list(r[1:])
            ids[b, width - len(seq):] = torch.tensor(seq)
            attn[b, width - len(seq):] = 1
            image_mask[b, width - len(seq) + 1 : width - len(seq) + 1 + self.num_patches] = 1
        pixels = torch.stack([self.pixel_values(im) for im in imgs])
        return {"input_ids": ids, "attention_mask": attn, "image_mask": image_mask, "pixel_values": pixels}


# ---------------------------------------------------------------------------------- model
class PrismaticVLA(torch.nn.Module):
    """MiniVLA's Prismatic VLM: fused DINOv2 + SigLIP patches -> MLP projector -> Qwen2.5 LM.

    Built by :func:`load_prismatic_vla`. ``language_model`` is a ``Qwen2ForCausalLM`` (so
    :class:`agents.vla.policy.VLAPolicy`'s LoRA targets ``.*language_model.*`` match it and the vision
    towers stay frozen).

    Args:
        dino: ``Dinov2WithRegistersModel`` truncated before its last block.
        siglip: ``SiglipVisionModel`` truncated before its last block.
        projector: ``torch.nn.Sequential`` of Linear/GELU mapping (P, D_dino + D_siglip) to the LM width.
        language_model: ``Qwen2ForCausalLM``.
        config: a ``transformers.PretrainedConfig`` with the run's facts (``vla_id``,
            ``action_tokenizer``, ``action_vocab_size``, ``num_patches``, ``norm_stats``...).
    """

    main_input_name = "input_ids"
    base_model_prefix = ""  # a composite root: transformers/peft scope sub-module weight names from here

    def __init__(self, dino: Any, siglip: Any, projector: torch.nn.Module, language_model: Any, config: Any) -> None:
        super().__init__()
        self.dino = dino
        self.siglip = siglip
        self.projector = projector
        self.language_model = language_model
        self.config = config
        self.norm_stats = getattr(config, "norm_stats", None)
        self._n_dino_prefix = 1 + int(dino.config.num_register_tokens)
        # transformers >= 5.2x names the key/value cache ``cache`` (``past_key_values`` deprecated)
        self._lm_cache_kw = "cache" if "cache" in inspect.signature(language_model.forward).parameters else "past_key_values"

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.language_model.get_input_embeddings()

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.language_model.get_output_embeddings()

    def embed_images(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """float (B, 6, H, W) -> (B, P, D_llm): patch features of the second-to-last block of
        each tower (DINOv2 without its class and register tokens), concatenated, projected.

        Raises:
            ValueError: pixels not (B, 6, image_size, image_size).
        """
        size = int(self.config.image_size)
        if pixel_values.dim() != 4 or tuple(pixel_values.shape[1:]) != (6, size, size):
            raise ValueError(f"pixel_values must be (B, 6, {size}, {size}) (DINOv2 then SigLIP channels, from "
                             f"PrismaticProcessor), got {tuple(pixel_values.shape)}")
        d = self.dino(pixel_values=pixel_values[:, :3], output_hidden_states=True).hidden_states[-1]
        s = self.siglip(pixel_values=pixel_values[:, 3:], output_hidden_states=True).hidden_states[-1]
        return self.projector(torch.cat([d[:, self._n_dino_prefix :], s], dim=2))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        image_mask: torch.Tensor | None = None,
        cache: Any = None,
        past_key_values: Any = None,
        use_cache: bool | None = None,
        position_ids: torch.Tensor | None = None,
        logits_to_keep: int = 0,
        **kwargs: Any,
    ) -> Any:
        """Causal-LM forward with the image patches at ``image_mask`` (from :class:`PrismaticProcessor`).

        Args:
            input_ids: int64 (B, L).
            attention_mask: (B, L_past + L) ones for real tokens (left padding: zeros first).
            pixel_values: float (B, 6, H, W), with ``image_mask``; None on cached decoding steps.
            image_mask: (B, L), exactly ``num_patches`` ones per row where the patches go.
            cache (or its older name ``past_key_values``), use_cache, logits_to_keep: as ``Qwen2ForCausalLM``.
            position_ids: default ``cumsum(attention_mask) - 1`` (real tokens only) for the last L.

        Returns:
            ``Qwen2ForCausalLM``'s output (``logits`` (B, L or logits_to_keep, V), and the cache).

        Raises:
            ValueError: pixels without an image mask or an image mask without pixels, a mask with
                the wrong number of positions, or pixels of another size or count than the prompts.
        """
        cache = cache if cache is not None else past_key_values
        embeds = self.language_model.get_input_embeddings()(input_ids)
        if pixel_values is None and image_mask is not None and bool(image_mask.any()):
            raise ValueError("image_mask marks image positions but no pixel_values were given")
        if pixel_values is not None:
            if image_mask is None:
                raise ValueError("pixel_values need image_mask (the image positions): encode with PrismaticProcessor")
            n = int(self.config.num_patches)
            per_row = image_mask.sum(-1)
            if bool((per_row != n).any()):
                raise ValueError(f"image_mask must mark {n} positions per row, got {per_row.tolist()}")
            if pixel_values.shape[0] != input_ids.shape[0]:
                raise ValueError(f"pixel_values has {pixel_values.shape[0]} images for {input_ids.shape[0]} prompts (one each)")
            feats = self.embed_images(pixel_values).to(embeds.dtype)
            embeds = embeds.masked_scatter(image_mask.bool()[..., None].expand_as(embeds), feats)
        if attention_mask is None:
            past = 0 if cache is None else int(cache.get_seq_length())
            attention_mask = torch.ones(input_ids.shape[0], past + input_ids.shape[1], dtype=torch.long,
                                        device=input_ids.device)
        if position_ids is None:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -input_ids.shape[1] :]
        return self.language_model(inputs_embeds=embeds, attention_mask=attention_mask, position_ids=position_ids,
                                   use_cache=use_cache, **{self._lm_cache_kw: cache},
                                   logits_to_keep=logits_to_keep, **kwargs)


# ---------------------------------------------------------------------------------- loading
def is_prismatic_run(folder: str | os.PathLike) -> bool:
    """True when ``folder`` looks like a Prismatic run: ``checkpoints/*.pt``, or a ``config.json``
    with a ``"vla"`` entry (:func:`load_prismatic_vla` then says what is missing or malformed)."""
    p = Path(folder)
    if (p / "checkpoints").is_dir() and any((p / "checkpoints").glob("*.pt")):
        return True
    try:
        cfg = json.loads((p / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and isinstance(cfg.get("vla"), dict)


def prismatic_vq_folder(run: str | os.PathLike, action_tokenizer: str) -> Path | None:
    """Where a run's VQ folder is expected: ``RUN/vq/<the VQ folder the authors' tokenizer of that
    name reads>``, else ``RUN/vq``, whichever holds a ``config.json``; None when ``action_tokenizer``
    is not a VQ one (no ``vq`` in its name) or neither exists."""
    if "vq" not in action_tokenizer:
        return None
    name = _VQ_FOLDERS.get(action_tokenizer)
    cands = ([Path(run) / "vq" / name] if name else []) + [Path(run) / "vq"]
    for cand in cands:
        if (cand / "config.json").is_file():
            return cand
    return None


def _checkpoint_file(run: Path, checkpoint: str | os.PathLike | None) -> Path:
    from agents.vla.policy import VLAWeightsNotFoundError

    if checkpoint is not None:
        c = Path(checkpoint)
        c = run / "checkpoints" / c if not c.is_absolute() and (run / "checkpoints" / c).exists() else c
        if c.is_dir():
            raise VLAWeightsNotFoundError(f"checkpoint {str(checkpoint)!r} is a folder; pass a .pt file (e.g. checkpoints/step-*.pt)")
        if not c.is_file():
            raise VLAWeightsNotFoundError(f"checkpoint {str(checkpoint)!r} not found (looked in {str(run / 'checkpoints')!r} "
                                          "and at the path itself)")
        return c
    folder = run / "checkpoints"
    latest = folder / "latest-checkpoint.pt"
    if latest.is_file():
        return latest
    steps = sorted(folder.glob("step-*.pt"), key=lambda f: int(re.match(r"step-(\d+)", f.name).group(1))
                   if re.match(r"step-(\d+)", f.name) else -1)
    if not steps:
        found = sorted(f.name for f in folder.glob("*.pt")) if folder.is_dir() else []
        raise VLAWeightsNotFoundError(f"no checkpoints/latest-checkpoint.pt or checkpoints/step-*.pt in {str(run)!r} "
                                f"(found {found}); pass checkpoint=FILE")
    return steps[-1]


def _blocks(sd: dict[str, torch.Tensor], prefix: str) -> int:
    idx = {int(m.group(1)) for k in sd if (m := re.match(re.escape(prefix) + r"blocks\.(\d+)\.", k))}
    return max(idx) + 1 if idx else 0


@dataclass(frozen=True)
class PrismaticShapes:
    """Sizes of a DINOv2 + SigLIP / Qwen2 Prismatic VLA: what its checkpoint's tensors give, plus
    the head counts and LM hyper-parameters they do not.

    Attributes:
        dino_width, dino_depth, dino_heads, dino_mlp, dino_registers: the DINOv2 tower (timm depth:
            all blocks, of which the last is unused).
        siglip_width, siglip_depth, siglip_heads, siglip_mlp: the SigLIP tower (same convention).
        patch_size, image_size: both towers' patch and square input side, pixels.
        projector: widths of the projector's Linear layers, input first (e.g. (2176, 8704, 896, 896)).
        llm: ``Qwen2Config`` keyword arguments.
    """

    dino_width: int
    dino_depth: int
    dino_heads: int
    dino_mlp: int
    dino_registers: int
    siglip_width: int
    siglip_depth: int
    siglip_heads: int
    siglip_mlp: int
    patch_size: int
    image_size: int
    projector: tuple[int, ...]
    llm: dict[str, Any]

    @property
    def num_patches(self) -> int:
        """Image tokens per image: (image_size / patch_size)²."""
        return (self.image_size // self.patch_size) ** 2


MINIVLA_SHAPES = PrismaticShapes(
    dino_width=1024, dino_depth=24, dino_heads=16, dino_mlp=4096, dino_registers=4,
    siglip_width=1152, siglip_depth=27, siglip_heads=16, siglip_mlp=4304,
    patch_size=14, image_size=224, projector=(2176, 8704, 896, 896),
    llm=dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
             num_key_value_heads=2, rope_theta=1_000_000.0, rms_norm_eps=1e-6, max_position_embeddings=32768,
             hidden_act="silu", tie_word_embeddings=True, use_sliding_window=False),
)
"""MiniVLA-1B (``prism-qwen25-extra-dinosiglip-224px+0_5b``): timm's ViT-L/14 DINOv2 with 4
registers and SigLIP so400m/14 at 224 px, fused-GELU-MLP projector, Qwen2.5-0.5B with its
vocabulary of 151 936 rows (151 921 tokens with the 256 extra ones, padded to a multiple of 64)."""


def build_prismatic_vla(shapes: PrismaticShapes, config: Any = None) -> PrismaticVLA:
    """A :class:`PrismaticVLA` of the given sizes with random weights (the loader fills them; the
    benchmarks time MiniVLA's exact architecture with it, :data:`MINIVLA_SHAPES`).

    Args:
        shapes: the sizes.
        config: the model's ``PretrainedConfig`` (default one with ``num_patches`` and ``image_size``).

    Raises:
        PrismaticFormatError: a tower with fewer than 2 blocks (Prismatic reads the second-to-last),
            a DINOv2 MLP width that is not a multiple of its width, or a projector whose ends do
            not meet the towers' and the LM's widths.
    """
    from transformers import (
        Dinov2WithRegistersConfig,
        Dinov2WithRegistersModel,
        PretrainedConfig,
        Qwen2Config,
        Qwen2ForCausalLM,
        SiglipVisionConfig,
        SiglipVisionModel,
    )

    s = shapes
    for name, depth in (("DINOv2", s.dino_depth), ("SigLIP", s.siglip_depth)):
        if depth < 2:
            raise PrismaticFormatError(f"the {name} tower has {depth} block(s); Prismatic reads the second-to-last, so it needs >= 2")
    if s.dino_mlp % s.dino_width:
        raise PrismaticFormatError(f"DINOv2 MLP width {s.dino_mlp} is not a multiple of its width {s.dino_width} "
                                   "(transformers builds width x mlp_ratio)")
    fused = s.dino_width + s.siglip_width
    if s.projector[0] != fused or s.projector[-1] != s.llm["hidden_size"]:
        raise PrismaticFormatError(f"projector maps {s.projector[0]} -> {s.projector[-1]}, but the vision features are "
                                   f"{fused} wide and the LM {s.llm['hidden_size']}")
    dino = Dinov2WithRegistersModel(Dinov2WithRegistersConfig(
        hidden_size=s.dino_width, num_hidden_layers=s.dino_depth - 1, num_attention_heads=s.dino_heads,
        mlp_ratio=s.dino_mlp // s.dino_width, hidden_act="gelu", layer_norm_eps=1e-6, image_size=s.image_size,
        patch_size=s.patch_size, num_register_tokens=s.dino_registers, qkv_bias=True, use_swiglu_ffn=False))
    siglip = SiglipVisionModel(SiglipVisionConfig(
        hidden_size=s.siglip_width, intermediate_size=s.siglip_mlp, num_hidden_layers=s.siglip_depth - 1,
        num_attention_heads=s.siglip_heads, image_size=s.image_size, patch_size=s.patch_size,
        hidden_act="gelu", layer_norm_eps=1e-6, vision_use_head=False))  # timm 0.9.10's SigLIP: exact GELU
    layers: list[torch.nn.Module] = []
    for j, (a, b) in enumerate(zip(s.projector[:-1], s.projector[1:])):
        layers += [torch.nn.Linear(a, b)] + ([torch.nn.GELU()] if j + 2 < len(s.projector) else [])
    lm = Qwen2ForCausalLM(Qwen2Config(**s.llm))
    if config is None:
        config = PretrainedConfig(model_type="prismatic")
    config.num_patches, config.image_size = s.num_patches, s.image_size
    return PrismaticVLA(dino, siglip, torch.nn.Sequential(*layers), lm, config).eval()


def _indexed_projector(proj: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The ``linear`` projector is one ``nn.Linear`` (``projector.weight``); the MLPs are
    ``nn.Sequential`` (``projector.0.weight``, ...): name the former like the latter."""
    if "projector.weight" in proj:
        return {f"projector.0.{k.rsplit('.', 1)[-1]}": v for k, v in proj.items()}
    return proj


def _shapes_from_checkpoint(parts: dict[str, dict[str, torch.Tensor]], heads: dict[str, int], base: dict[str, Any],
                            pad_id: int) -> PrismaticShapes:
    """The sizes of a checkpoint's modules, from its tensors' shapes (heads and LM hyper-parameters given)."""
    sd = parts["vision_backbone"]
    need = ["dino_featurizer.cls_token", "dino_featurizer.reg_token", "dino_featurizer.pos_embed",
            "dino_featurizer.patch_embed.proj.weight", "dino_featurizer.blocks.0.mlp.fc1.weight",
            "siglip_featurizer.pos_embed", "siglip_featurizer.patch_embed.proj.weight",
            "siglip_featurizer.blocks.0.mlp.fc1.weight"]
    missing = [k for k in need if k not in sd]
    if missing:
        raise PrismaticFormatError(f"the checkpoint's vision_backbone lacks {missing}: an incomplete checkpoint, or not a "
                                   "dinosiglip-vit-so-224px backbone")
    patch = int(sd["dino_featurizer.patch_embed.proj.weight"].shape[-1])
    n_patch = {t: int(sd[f"{t}_featurizer.pos_embed"].shape[1]) for t in ("dino", "siglip")}
    if n_patch["dino"] != n_patch["siglip"] or patch != int(sd["siglip_featurizer.patch_embed.proj.weight"].shape[-1]):
        raise PrismaticFormatError(f"the towers disagree: DINOv2 gives {n_patch['dino']} patches, SigLIP {n_patch['siglip']}")
    side = int(round(n_patch["dino"] ** 0.5))
    proj = _indexed_projector(parts["projector"])
    idx = sorted({int(m.group(1)) for k in proj if (m := re.match(r"projector\.(\d+)\.weight", k))})
    if not idx:
        raise PrismaticFormatError(f"the checkpoint's projector has no projector.<i>.weight keys (has {sorted(proj)[:6]})")
    widths = [int(proj[f"projector.{idx[0]}.weight"].shape[1])] + [int(proj[f"projector.{i}.weight"].shape[0]) for i in idx]
    llm = parts["llm_backbone"]
    emb = llm.get("llm.model.embed_tokens.weight")
    if emb is None:
        raise PrismaticFormatError("the checkpoint's llm_backbone lacks llm.model.embed_tokens.weight")
    hidden = int(emb.shape[1])
    head = llm.get("llm.lm_head.weight")
    return PrismaticShapes(
        dino_width=int(sd["dino_featurizer.cls_token"].shape[-1]), dino_depth=_blocks(sd, "dino_featurizer."),
        dino_heads=int(heads["dino"]), dino_mlp=int(sd["dino_featurizer.blocks.0.mlp.fc1.weight"].shape[0]),
        dino_registers=int(sd["dino_featurizer.reg_token"].shape[1]),
        siglip_width=int(sd["siglip_featurizer.pos_embed"].shape[-1]), siglip_depth=_blocks(sd, "siglip_featurizer."),
        siglip_heads=int(heads["siglip"]), siglip_mlp=int(sd["siglip_featurizer.blocks.0.mlp.fc1.weight"].shape[0]),
        patch_size=patch, image_size=side * patch, projector=tuple(widths),
        llm=dict(
            vocab_size=int(emb.shape[0]), hidden_size=hidden,
            intermediate_size=int(llm["llm.model.layers.0.mlp.gate_proj.weight"].shape[0]),
            num_hidden_layers=len({int(m.group(1)) for k in llm if (m := re.match(r"llm\.model\.layers\.(\d+)\.", k))}),
            num_attention_heads=int(heads["llm"]),
            num_key_value_heads=int(llm["llm.model.layers.0.self_attn.k_proj.weight"].shape[0]) // (hidden // int(heads["llm"])),
            rope_theta=float(base["rope_theta"]), rms_norm_eps=float(base["rms_norm_eps"]),
            max_position_embeddings=int(base["max_position_embeddings"]), hidden_act=base.get("hidden_act", "silu"),
            tie_word_embeddings=head is None or torch.equal(head, emb), use_sliding_window=False, pad_token_id=pad_id),
    )


def _timm_blocks(sd: dict[str, torch.Tensor], src: str, dst: str, n: int, *, norms: tuple[str, str],
                 attention: str, out_proj: str) -> dict[str, torch.Tensor]:
    """The first ``n`` timm ViT blocks (``{src}blocks.i.{norm1, norm2, attn.qkv, attn.proj, mlp.fc1,
    mlp.fc2}``) under transformers' names (``{dst}i.``): the fused qkv split into q/k/v projections
    under ``attention``, the norms and output projection renamed."""
    out: dict[str, torch.Tensor] = {}
    for i in range(n):
        b, o = f"{src}blocks.{i}.", f"{dst}{i}."
        for a, c in (("norm1", norms[0]), ("norm2", norms[1]), ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2"),
                     ("attn.proj", out_proj)):
            out[o + c + ".weight"], out[o + c + ".bias"] = sd[b + a + ".weight"], sd[b + a + ".bias"]
        qkv = zip(("q_proj", "k_proj", "v_proj"), sd[b + "attn.qkv.weight"].chunk(3), sd[b + "attn.qkv.bias"].chunk(3))
        for part, w, bias in qkv:
            out[o + f"{attention}{part}.weight"], out[o + f"{attention}{part}.bias"] = w, bias
    return out


def _load_weights(model: PrismaticVLA, parts: dict[str, dict[str, torch.Tensor]]) -> None:
    """Copy a checkpoint's weights into ``model`` (timm names -> transformers names; the towers'
    last block, final norms and SigLIP's pooling head are not used by Prismatic and not loaded)."""
    sd = parts["vision_backbone"]
    p, d_dim = "dino_featurizer.", model.dino.config.hidden_size
    new = {
        "embeddings.cls_token": sd[p + "cls_token"],
        "embeddings.register_tokens": sd[p + "reg_token"],
        # timm's no_embed_class: position embeddings for the patches only; transformers adds one to
        # the class token too, so it gets a zero one
        "embeddings.position_embeddings": torch.cat([sd[p + "pos_embed"].new_zeros(1, 1, d_dim), sd[p + "pos_embed"]], 1),
        "embeddings.mask_token": torch.zeros(1, d_dim),
        "embeddings.patch_embeddings.projection.weight": sd[p + "patch_embed.proj.weight"],
        "embeddings.patch_embeddings.projection.bias": sd[p + "patch_embed.proj.bias"],
        "layernorm.weight": torch.ones(d_dim), "layernorm.bias": torch.zeros(d_dim),  # unused (no final norm)
    }
    new.update(_timm_blocks(sd, p, "encoder.layer.", model.dino.config.num_hidden_layers,
                            norms=("norm1", "norm2"), attention="attention.", out_proj="attention.o_proj"))
    for i in range(model.dino.config.num_hidden_layers):  # LayerScale (DINOv2 only)
        b, o = f"{p}blocks.{i}.", f"encoder.layer.{i}."
        new[o + "layer_scale1.lambda1"], new[o + "layer_scale2.lambda1"] = sd[b + "ls1.gamma"], sd[b + "ls2.gamma"]
    model.dino.load_state_dict(new, strict=True)
    p, s_dim = "siglip_featurizer.", model.siglip.config.hidden_size
    new = {
        "embeddings.patch_embedding.weight": sd[p + "patch_embed.proj.weight"],
        "embeddings.patch_embedding.bias": sd[p + "patch_embed.proj.bias"],
        "embeddings.position_embedding.weight": sd[p + "pos_embed"][0],
        "post_layernorm.weight": torch.ones(s_dim), "post_layernorm.bias": torch.zeros(s_dim),  # unused
    }
    new.update(_timm_blocks(sd, p, "encoder.layers.", model.siglip.config.num_hidden_layers,
                            norms=("layer_norm1", "layer_norm2"), attention="self_attn.", out_proj="self_attn.out_proj"))
    prefix = "" if "embeddings.patch_embedding.weight" in model.siglip.state_dict() else "vision_model."
    model.siglip.load_state_dict({prefix + k: v for k, v in new.items()}, strict=True)
    proj = _indexed_projector(parts["projector"])
    idx = sorted({int(m.group(1)) for k in proj if (m := re.match(r"projector\.(\d+)\.weight", k))})
    model.projector.load_state_dict({f"{2 * j}.{k.rsplit('.', 1)[-1]}": v for j, i in enumerate(idx)
                                     for k, v in proj.items() if k.startswith(f"projector.{i}.")}, strict=True)
    state = {k[len("llm."):]: v for k, v in parts["llm_backbone"].items() if k.startswith("llm.")}
    tie = model.language_model.config.tie_word_embeddings
    if tie:
        state.pop("lm_head.weight", None)
    missing, unexpected = model.language_model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (tie and k == "lm_head.weight")]
    if missing or unexpected:
        raise PrismaticFormatError(f"the llm_backbone weights do not fit a Qwen2 LM: missing {missing[:5]}, unexpected {unexpected[:5]}")


def _base_vlm_config(base_vlm: Any) -> dict[str, Any]:
    """The model config of a run's ``vla.base_vlm``, as openvla-mini's ``load_vla`` resolves it
    (``prismatic/models/load.py`` l.184-197): a folder's ``config.json["model"]``, else the
    registry entry of the id (:data:`PRISMATIC_BASE_VLMS`)."""
    if isinstance(base_vlm, str) and Path(base_vlm).is_dir():
        cfg_file = Path(base_vlm) / "config.json"
        try:
            model = json.loads(cfg_file.read_text()).get("model") if cfg_file.is_file() else None
        except (ValueError, AttributeError) as e:
            raise PrismaticFormatError(f"{str(cfg_file)!r} (the base VLM's config) is not a JSON object: {e}") from e
        if not isinstance(model, dict):
            raise PrismaticFormatError(f"base_vlm folder {base_vlm!r} has no config.json with a 'model' entry")
        base_vlm = model.get("model_id")
        if base_vlm not in PRISMATIC_BASE_VLMS and {"vision_backbone_id", "llm_backbone_id"} <= set(model):
            return model
    if base_vlm not in PRISMATIC_BASE_VLMS:
        raise PrismaticFormatError(f"base VLM {base_vlm!r} is not one this loader rebuilds (supported: "
                                   f"{sorted(PRISMATIC_BASE_VLMS)}, MiniVLA's)")
    return dict(PRISMATIC_BASE_VLMS[base_vlm], model_id=base_vlm)


def _add_extra_tokens(tokenizer: Any) -> None:
    if "<|extra_0|>" in tokenizer.get_vocab():
        return
    added = tokenizer.add_tokens([f"<|extra_{i}|>" for i in range(_N_EXTRA)])
    if added != _N_EXTRA:
        raise PrismaticFormatError(f"added {added} of {_N_EXTRA} <|extra_i|> tokens to the tokenizer (some existed)")


def prismatic_tokenizer(source: str | os.PathLike, llm_backbone_id: str, *, max_length: int = 32768,
                        local_files_only: bool = True) -> Any:
    """The LM tokenizer of a Prismatic run, set up as openvla-mini does (``base_llm.py``,
    ``qwen25.py`` l.54-57): ``AutoTokenizer`` with ``model_max_length``, plus 256 ``<|extra_i|>``
    tokens for ``-extra`` LLM backbones (added after the vocabulary: MiniVLA's action token ids).

    Args:
        source: a tokenizer folder or hub id (``Qwen/Qwen2.5-0.5B``).
        llm_backbone_id: the run's ``model.llm_backbone_id`` (e.g. ``qwen25-0_5b-extra``).
        max_length: ``model.llm_max_length``.
        local_files_only: never download (default).

    Raises:
        agents.vla.policy.VLAWeightsNotFoundError: the tokenizer is not on this machine (says how
            to get it).
    """
    from transformers import AutoTokenizer

    from agents.vla.policy import VLAWeightsNotFoundError

    if source is None:
        raise VLAWeightsNotFoundError(f"no tokenizer for LLM backbone {llm_backbone_id!r}: pass tokenizer=FOLDER, put "
                                      "it in RUN/tokenizer/, or give llm_config a 'hub_id'")
    src = os.fspath(source)
    try:
        tok = AutoTokenizer.from_pretrained(src, local_files_only=local_files_only, model_max_length=max_length)
    except (OSError, ValueError) as e:
        raise VLAWeightsNotFoundError(
            f"the tokenizer {src!r} is not on this machine ({e}). To fix: on a machine with network access run "
            f"`hf download {src} tokenizer.json tokenizer_config.json vocab.json merges.txt` (it goes to the Hugging Face "
            "cache; copy that here) or pass tokenizer=FOLDER") from e
    if llm_backbone_id.endswith("-extra"):
        _add_extra_tokens(tok)
    return tok


def prismatic_action_vocab_size(tokenizer: Any, action_tokenizer: str) -> int:
    """Where the action token ids of a Prismatic run end (exclusive), from its action tokenizer's
    name (``prismatic/vla/action_tokenizer.py`` l.49-58): ``len(tokenizer)`` for the ``extra``
    tokenizers (the 256 ``<|extra_i|>`` ids, which must be the last 256 ids), else
    ``tokenizer.vocab_size`` (the last ids of the base vocabulary, OpenVLA's convention).

    Raises:
        PrismaticFormatError: an ``extra`` action tokenizer whose tokenizer does not end with
            ``<|extra_0|>`` ... ``<|extra_255|>`` (the action ids would be shifted).
    """
    if "extra" not in action_tokenizer:
        return int(tokenizer.vocab_size)
    n = len(tokenizer)
    ids = tokenizer.convert_tokens_to_ids([f"<|extra_{i}|>" for i in (0, _N_EXTRA - 1)])
    if ids != [n - _N_EXTRA, n - 1]:
        raise PrismaticFormatError(
            f"action tokenizer {action_tokenizer!r} uses the 256 <|extra_i|> tokens as the last ids of the vocabulary, "
            f"but this tokenizer ({n} tokens) has <|extra_0|>, <|extra_255|> at ids {ids}: tokens were added after them "
            "or they are missing; use the run's own tokenizer")
    return n


def load_prismatic_vla(
    run_dir: str | os.PathLike,
    *,
    tokenizer: Any = None,
    checkpoint: str | os.PathLike | None = None,
    heads: dict[str, int] | None = None,
    llm_config: dict[str, Any] | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    local_files_only: bool = True,
) -> tuple[PrismaticVLA, PrismaticProcessor]:
    """Load a MiniVLA run folder in the authors' Prismatic format (see the module docstring).

    Args:
        run_dir: the run folder (``config.json``, ``dataset_statistics.json``, ``checkpoints/``).
        tokenizer: the LM's tokenizer, or a folder/hub id of one; default ``RUN/tokenizer/`` when
            that folder exists, else the backbone's hub id (``Qwen/Qwen2.5-0.5B``, the one the
            authors load) from the local Hugging Face cache.
            For ``-extra`` backbones the 256 ``<|extra_i|>`` tokens are added unless present.
        checkpoint: a file in ``checkpoints/`` (name or path); default ``latest-checkpoint.pt``,
            else the ``step-*.pt`` with the highest step.
        heads: attention heads ``{"dino", "siglip", "llm"}`` overriding the backbones' (16, 16,
            14 for MiniVLA) — for toy checkpoints; sizes come from the weights. A checkpoint does
            not store its head counts: a wrong count that divides the widths loads and gives wrong
            outputs (one that does not divide them is refused).
        llm_config: ``num_attention_heads``, ``rope_theta``, ``rms_norm_eps``,
            ``max_position_embeddings`` (and ``hub_id``) of an LLM backbone not in
            :data:`QWEN25_CONFIGS`.
        dtype: parameter dtype (bfloat16 on GPU); device: where to put the model.
        local_files_only: never download the tokenizer (default).

    Returns:
        ``(model, processor)``: :class:`PrismaticVLA` (eval mode) and :class:`PrismaticProcessor`;
        ``model.config`` carries ``vla_id``, ``action_tokenizer`` (the run's action tokenizer name),
        ``action_vocab_size`` (where its action ids end: ``len(tokenizer)`` for the "extra"
        tokenizers, ``tokenizer.vocab_size`` otherwise, as ``prismatic/vla/action_tokenizer.py``),
        ``num_patches``, ``image_size`` and ``norm_stats`` (``dataset_statistics.json``).

    Raises:
        agents.vla.policy.VLAWeightsNotFoundError (a ``FileNotFoundError``): no ``config.json``, no
            checkpoint file, or a tokenizer that is not on this machine (says how to get it).
        PrismaticFormatError (a ``ValueError``): a ``config.json``, ``dataset_statistics.json`` or
            checkpoint that cannot be read; a base VLM, backbone, projector, resize strategy or image
            setting this loader does not rebuild; weights that do not fit it; heads that do not
            divide the widths; a tokenizer whose action ids would be shifted (says which).
        ValueError: ``heads`` with other keys than dino/siglip/llm or non-positive counts.
    """
    from transformers import PretrainedConfig

    from agents.vla.policy import VLAWeightsNotFoundError

    run = Path(run_dir).expanduser()
    if not (run / "config.json").is_file():
        raise VLAWeightsNotFoundError(f"no config.json in Prismatic run folder {str(run)!r}: copy the run's config.json "
                                      "(the training config openvla-mini writes next to checkpoints/) into it")
    try:
        raw = json.loads((run / "config.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PrismaticFormatError(f"{str(run / 'config.json')!r} is not valid JSON ({e}); copy the run's config.json again") from e
    vla_cfg = raw.get("vla") if isinstance(raw, dict) else None
    if not isinstance(vla_cfg, dict):
        raise PrismaticFormatError(f"{str(run / 'config.json')!r} lacks the 'vla' entry of a Prismatic VLA run "
                                   "(the training config openvla-mini's vla-scripts/train.py writes)")
    model_cfg = _base_vlm_config(vla_cfg.get("base_vlm"))
    vision_id = model_cfg.get("vision_backbone_id")
    llm_id = str(model_cfg.get("llm_backbone_id"))
    arch = str(model_cfg.get("arch_specifier", ""))
    resize = model_cfg.get("image_resize_strategy")
    if vision_id not in _VISION_HEADS:
        raise PrismaticFormatError(f"vision backbone {vision_id!r} is not rebuilt by this loader (supported: {sorted(_VISION_HEADS)}, "
                                   "MiniVLA's)")
    if not any(arch.endswith(a) for a in _PROJECTORS):
        raise PrismaticFormatError(f"projector {arch!r} is not one of {_PROJECTORS}")
    if resize != "resize-naive":
        raise PrismaticFormatError(f"image_resize_strategy {resize!r} is not supported (MiniVLA's is 'resize-naive')")
    if int(vla_cfg.get("image_sequence_len", 1)) != 1 or vla_cfg.get("use_wrist_image"):
        raise PrismaticFormatError("runs with several images per step (image_sequence_len > 1 or use_wrist_image) "
                                   "are not supported by this loader")
    base_key = re.sub(r"-(extra|pure)$", "", llm_id)
    base = dict(QWEN25_CONFIGS.get(base_key, {}), **(llm_config or {}))
    if not base_key.startswith("qwen25") or not {"num_attention_heads", "rope_theta", "rms_norm_eps",
                                                   "max_position_embeddings"} <= set(base):
        raise PrismaticFormatError(f"LLM backbone {llm_id!r} is not in QWEN25_CONFIGS ({sorted(QWEN25_CONFIGS)}): pass "
                                   "llm_config={'num_attention_heads', 'rope_theta', 'rms_norm_eps', "
                                   "'max_position_embeddings', 'hub_id'} from its Hugging Face config.json")
    n_heads = {**_VISION_HEADS[vision_id], "llm": base["num_attention_heads"], **(heads or {})}
    if set(n_heads) != {"dino", "siglip", "llm"}:
        raise ValueError(f"heads takes the keys 'dino', 'siglip', 'llm', got {sorted(heads or {})}")
    bad = {k: v for k, v in n_heads.items() if isinstance(v, bool) or not isinstance(v, int) or v < 1}
    if bad:
        raise ValueError(f"heads must be positive integers, got {bad}")

    # --- tokenizer (as prismatic/models/backbones/llm/base_llm.py + qwen25.py set it up)
    if tokenizer is None or isinstance(tokenizer, (str, os.PathLike)):
        if tokenizer is None:
            tokenizer = run / "tokenizer" if (run / "tokenizer").is_dir() else base.get("hub_id")
        try:
            tokenizer = prismatic_tokenizer(tokenizer, llm_id, max_length=int(model_cfg.get("llm_max_length", 32768)),
                                            local_files_only=local_files_only)
        except VLAWeightsNotFoundError as e:
            raise VLAWeightsNotFoundError(f"{e}; or copy the tokenizer files into {str(run / 'tokenizer')!r}") from e
    elif llm_id.endswith("-extra"):
        _add_extra_tokens(tokenizer)
    action_name = str(vla_cfg.get("action_tokenizer", "action_tokenizer"))
    action_vocab_size = prismatic_action_vocab_size(tokenizer, action_name)

    # --- weights
    ckpt = _checkpoint_file(run, checkpoint)
    try:
        state = torch.load(ckpt, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # torch raises RuntimeError / UnpicklingError / EOFError / ValueError for bad files
        first = str(e).splitlines()[0] if str(e) else ""
        raise PrismaticFormatError(
            f"cannot read checkpoint {str(ckpt)!r} ({type(e).__name__}: {first}): the file is truncated, corrupt or "
            "not a torch.save of tensors; download or copy it again") from e
    parts = state.get("model", state) if isinstance(state, dict) else None
    if not isinstance(parts, dict) or not {"projector", "llm_backbone"} <= set(parts):
        raise PrismaticFormatError(f"{str(ckpt)!r} is not a Prismatic checkpoint: expected {{'model': {{'vision_backbone', "
                                   f"'projector', 'llm_backbone'}}}}, found keys {sorted(parts) if isinstance(parts, dict) else type(state)}")
    if "vision_backbone" not in parts:
        raise PrismaticFormatError(f"{str(ckpt)!r} has no vision_backbone weights (the run froze it and saved only trained "
                                   "modules); this loader needs them in the checkpoint")
    try:
        shapes = _shapes_from_checkpoint(parts, n_heads, base,
                                         tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    except (KeyError, AttributeError, IndexError) as e:
        raise PrismaticFormatError(f"checkpoint {str(ckpt)!r} lacks a tensor this backbone needs ({e}); is it complete?") from e
    for name, width in (("dino", shapes.dino_width), ("siglip", shapes.siglip_width), ("llm", shapes.llm["hidden_size"])):
        if width % n_heads[name]:
            raise PrismaticFormatError(f"{name} width {width} is not divisible by heads[{name!r}] = {n_heads[name]}: "
                                       "pass the checkpoint's head counts as heads={'dino', 'siglip', 'llm'}")
    rows, expected = shapes.llm["vocab_size"], base.get("tokenizer_len")
    if expected is not None and rows == base.get("vocab_rows") and llm_id.endswith("-extra") \
            and len(tokenizer) != expected + _N_EXTRA:
        raise PrismaticFormatError(
            f"this {llm_id} checkpoint ({rows} embedding rows) was trained with {base.get('hub_id')}'s tokenizer "
            f"({expected} tokens + 256 extra = {expected + _N_EXTRA}), but the tokenizer given has {len(tokenizer)}: "
            "its action ids would be shifted; use that tokenizer")
    if shapes.llm["vocab_size"] < len(tokenizer):
        raise PrismaticFormatError(f"the LM has {shapes.llm['vocab_size']} embedding rows but the tokenizer {len(tokenizer)} "
                                   "tokens: wrong tokenizer for this run?")
    stats_file = run / "dataset_statistics.json"
    try:
        norm_stats = json.loads(stats_file.read_text()) if stats_file.is_file() else None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PrismaticFormatError(f"{str(stats_file)!r} is not valid JSON ({e}); copy the run's file again") from e
    config = PretrainedConfig(
        model_type="prismatic", vla_id=vla_cfg.get("vla_id"), base_vlm=vla_cfg.get("base_vlm"),
        llm_backbone_id=llm_id, vision_backbone_id=vision_id, action_tokenizer=action_name,
        action_vocab_size=action_vocab_size, norm_stats=norm_stats, checkpoint=str(ckpt))
    model = build_prismatic_vla(shapes, config)
    try:
        _load_weights(model, parts)
    except (KeyError, RuntimeError) as e:
        msg = str(e).splitlines()[0] if isinstance(e, KeyError) else " ".join(str(e).split())[:600]
        raise PrismaticFormatError(
            f"the weights of {str(ckpt)!r} do not fit the architecture of its config ({type(e).__name__}: {msg}). "
            "A missing tensor: the checkpoint is incomplete; a size mismatch: tensors of another architecture "
            "than its config.json's base_vlm") from e
    model = model.to(device=device, dtype=dtype).eval()
    processor = PrismaticProcessor(tokenizer, image_size=shapes.image_size, num_patches=shapes.num_patches)
    return model, processor
