"""Loading a VLA: :func:`load_vla` (a Hugging Face-format OpenVLA/MiniVLA folder or hub id, or a
MiniVLA run in the authors' Prismatic format, :func:`load_prismatic_vla`) and :func:`build_tiny_vla`
(a tiny random LLaVA built offline, for tests and CPU smoke runs).

The Prismatic model and processor these loaders build are in :mod:`agents.vla.prismatic` (what is
rebuilt, and from which lines of openvla-mini); the policy that drives any of them is
:class:`agents.vla.policy.VLAPolicy`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch

from agents.vla.prismatic import (
    PRISMATIC_BASE_VLMS,
    QWEN25_CONFIGS,
    PrismaticFormatError,
    PrismaticProcessor,
    PrismaticShapes,
    PrismaticVLA,
    build_prismatic_vla,
)

__all__ = [
    "VLAWeightsNotFoundError",
    "load_vla",
    "build_tiny_vla",
    "load_prismatic_vla",
    "is_prismatic_run",
    "prismatic_vq_folder",
    "prismatic_tokenizer",
    "prismatic_action_vocab_size",
]

_VISION_HEADS = {"dinosiglip-vit-so-224px": {"dino": 16, "siglip": 16}}
"""Attention heads of the vision backbones (timm's ViT-L/14 DINOv2 and SigLIP so400m/14: 16 each)."""

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


class VLAWeightsNotFoundError(FileNotFoundError):
    """The weights of a VLA checkpoint are not on this machine (or not in a loadable format)."""


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "model*.bin")
_HOW_TO_FIX = (
    "To fix: on a machine with network access download a Hugging Face-format checkpoint, e.g. "
    "`hf download openvla/openvla-7b --local-dir /path/to/openvla-7b` (older huggingface_hub: `huggingface-cli download`) (a MiniVLA "
    "checkpoint converted to Hugging Face format likewise), copy the folder here and pass its path "
    "(or call load_vla(..., local_files_only=False) to let transformers download it)."
)


def load_vla(
    path_or_id: str | os.PathLike,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    local_files_only: bool = True,
    prismatic: dict[str, Any] | None = None,
) -> tuple[Any, Any]:
    """Load an OpenVLA/MiniVLA checkpoint (model and processor): Hugging Face format or a Prismatic run.

    A folder is loaded from disk only; a hub id (``"openvla/openvla-7b"``) is resolved in the
    local Hugging Face cache only, unless ``local_files_only=False``. Both use
    ``trust_remote_code=True`` (OpenVLA ships its Prismatic model code with the checkpoint). The
    model class is ``AutoModelForImageTextToText`` or, for remote code that only registers
    ``AutoModelForVision2Seq`` (OpenVLA), the class named in the config's ``auto_map``.

    A folder without Hugging Face weight files that has ``checkpoints/*.pt`` or a ``config.json``
    with a ``"vla"`` entry (the authors' Prismatic format: MiniVLA's releases and fine-tuning runs)
    goes to
    :func:`load_prismatic_vla` (its tokenizer: ``RUN/tokenizer/`` or
    ``Qwen/Qwen2.5-0.5B`` from the local Hugging Face cache).

    Args:
        path_or_id: a folder, or a hub model id.
        dtype: parameter dtype (bfloat16 on GPU).
        device: where to put the model.
        local_files_only: never download (default).
        prismatic: more keyword arguments of :func:`load_prismatic_vla` for a
            Prismatic run (``tokenizer``, ``checkpoint``, ``heads``, ``llm_config``).

    Returns:
        ``(model, processor)``; pass them to :class:`VLAPolicy`.

    Raises:
        VLAWeightsNotFoundError (a ``FileNotFoundError``): the folder does not exist, has no
            ``config.json`` or weight files, or the hub id (a Prismatic run's tokenizer) is not in
            the local cache; the message says what was looked for and how to fix it.
        agents.vla.prismatic.PrismaticFormatError (a ``ValueError``): a Prismatic run this loader
            does not rebuild or cannot read (says which part); see
            :func:`load_prismatic_vla` for its other errors.
    """
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

    src = os.fspath(path_or_id)
    p = Path(src).expanduser()
    looks_like_path = p.exists() or _HUB_ID.fullmatch(src) is None
    if looks_like_path:
        if not p.is_dir():
            raise VLAWeightsNotFoundError(f"VLA checkpoint folder {str(p)!r} does not exist. {_HOW_TO_FIX}")
        if is_prismatic_run(p) and not any(any(p.glob(pat)) for pat in _WEIGHT_PATTERNS):
            clash = {"dtype", "device", "local_files_only"} & set(prismatic or {})
            if clash:
                raise ValueError(f"pass {sorted(clash)} as load_vla's own arguments, not in prismatic=")
            return load_prismatic_vla(p, dtype=dtype, device=device, local_files_only=local_files_only,
                                      **(prismatic or {}))
        if not (p / "config.json").is_file():
            raise VLAWeightsNotFoundError(f"no config.json in VLA checkpoint folder {str(p)!r}. {_HOW_TO_FIX}")
        if not any(any(p.glob(pat)) for pat in _WEIGHT_PATTERNS):
            raise VLAWeightsNotFoundError(
                f"no weight files ({', '.join(_WEIGHT_PATTERNS)}) in VLA checkpoint folder {str(p)!r}. {_HOW_TO_FIX}"
            )
        src, local_files_only = str(p), True
    kw = dict(trust_remote_code=True, local_files_only=local_files_only)
    try:
        config = AutoConfig.from_pretrained(src, **kw)
        processor = AutoProcessor.from_pretrained(src, **kw)
    except OSError as e:  # not in the cache / not on the hub
        where = "the local Hugging Face cache (HF_HOME / HF_HUB_CACHE)" if local_files_only else "the Hugging Face hub"
        raise VLAWeightsNotFoundError(
            f"could not find VLA checkpoint {src!r} (config, processor and weights) in {where}: {e}. {_HOW_TO_FIX}"
        ) from e
    try:
        try:
            model = AutoModelForImageTextToText.from_pretrained(src, config=config, dtype=dtype, **kw)
        except ValueError:
            auto_map = getattr(config, "auto_map", None) or {}
            ref = auto_map.get("AutoModelForVision2Seq") or auto_map.get("AutoModelForImageTextToText")
            if ref is None:
                raise
            from transformers.dynamic_module_utils import get_class_from_dynamic_module

            cls = get_class_from_dynamic_module(ref, src, local_files_only=local_files_only)
            model = cls.from_pretrained(src, config=config, dtype=dtype, **kw)
    except OSError as e:
        raise VLAWeightsNotFoundError(f"could not load the weights of VLA checkpoint {src!r}: {e}. {_HOW_TO_FIX}") from e
    return model.to(device).eval(), processor


def build_tiny_vla(
    *,
    seed: int = 0,
    image_size: int = 32,
    patch_size: int = 8,
    hidden_size: int = 32,
    num_layers: int = 2,
) -> tuple[Any, Any]:
    """A tiny randomly initialised LLaVA-architecture VLA and its processor, built offline.

    Structure of Prismatic/MiniVLA at toy scale: a SigLIP vision tower (``image_size`` pixels,
    ``patch_size`` patches → ``(image_size / patch_size)²`` image tokens per image), LLaVA's MLP
    projector, and a Qwen2 causal LM. The tokenizer is a byte-level BPE without merges (256 byte
    tokens), ``<s>``, ``</s>``, ``<pad>``, ``<image>`` and 256 ``<|extra_i|>`` tokens at the end of
    the vocabulary (516 ids), which become the action tokens — as MiniVLA's Qwen2.5 "extra"
    tokenizer adds unused tokens for its actions. The image processor is transformers' PIL SigLIP
    processor (resize to ``image_size``, rescale, normalise). No file or network access.

    For tests and CPU smoke runs only: the actions are random.

    Args:
        seed: torch seed of the initialisation.
        image_size, patch_size: vision tower geometry.
        hidden_size, num_layers: width and depth of the vision tower and the language model.

    Returns:
        ``(model, processor)``: ``LlavaForConditionalGeneration`` (eval mode, float32) and
        ``LlavaProcessor``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
        Qwen2Config,
        SiglipVisionConfig,
    )
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    tok.add_tokens([f"<|extra_{i}|>" for i in range(256)])
    image_processor = SiglipImageProcessorPil(size={"height": image_size, "width": image_size})
    processor = LlavaProcessor(
        image_processor=image_processor, tokenizer=tok, patch_size=patch_size, vision_feature_select_strategy="full"
    )
    vision = SiglipVisionConfig(
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=image_size,
        patch_size=patch_size,
        vision_use_head=False,
    )
    text = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    cfg = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(cfg).eval()
    return model, processor


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
        agents.vla.load.VLAWeightsNotFoundError: the tokenizer is not on this machine (says how
            to get it).
    """
    from transformers import AutoTokenizer

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
        agents.vla.load.VLAWeightsNotFoundError (a ``FileNotFoundError``): no ``config.json``, no
            checkpoint file, or a tokenizer that is not on this machine (says how to get it).
        PrismaticFormatError (a ``ValueError``): a ``config.json``, ``dataset_statistics.json`` or
            checkpoint that cannot be read; a base VLM, backbone, projector, resize strategy or image
            setting this loader does not rebuild; weights that do not fit it; heads that do not
            divide the widths; a tokenizer whose action ids would be shifted (says which).
        ValueError: ``heads`` with other keys than dino/siglip/llm or non-positive counts.
    """
    from transformers import PretrainedConfig

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
