"""Load MiniVLA runs in the authors' own Prismatic format, without their code, with transformers.

MiniVLA (Belkhale & Sadigh 2024, Stanford-ILIAD/openvla-mini) is released and fine-tuned as
*Prismatic* run folders, which transformers cannot load::

    RUN/config.json                  the training config: {"vla": {"base_vlm", "action_tokenizer", ...}, ...}
    RUN/dataset_statistics.json      action q01/q99 per dataset (un-normalisation)
    RUN/checkpoints/step-*.pt        torch.save({"model": {"vision_backbone", "projector", "llm_backbone"}})

:func:`load_prismatic_vla` reads such a folder into a :class:`PrismaticVLA` (a ``torch.nn.Module``)
and a :class:`PrismaticProcessor` that :class:`agents.vla.policy.VLAPolicy` drives like any other
VLA (:func:`agents.vla.load.load_vla` dispatches Prismatic folders here). What is rebuilt, and
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

Equality with the authors' code is tested, not assumed: ``tests/agents/vla/test_prismatic_golden.py`` compares
pixels, prompt ids, logits and greedy actions with what openvla-mini's own ``load_vla`` /
``predict_action`` compute on a tiny run folder (``tests/golden/make_prismatic_golden.py``). The
math of the policy's GRPO update is in ``docs/method.md``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
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

_DINO_MEAN, _DINO_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
_SIGLIP_MEAN, _SIGLIP_STD = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)
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


