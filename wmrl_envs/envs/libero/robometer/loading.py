"""Loading Robometer: the checkpoint lookup and format, and a tiny random model for tests.

:func:`load_checkpoint` / :func:`save_checkpoint` read and write a checkpoint folder
(:meth:`RobometerWorldModel.from_pretrained <.world_model.RobometerWorldModel.from_pretrained>`
and ``save_pretrained`` wrap them); :func:`build_tiny_robometer` builds the same architecture
at toy size (its scores mean nothing). Only this loading and the processing code are
exercised here, on the tiny model.

What we assumed about the checkpoint (from the public ``robometer`` / ``reward_fm``
repositories and the LeRobot port, read for reference; nothing was run against the real
weights, which cannot be downloaded here): the released checkpoint (e.g.
``robometer/Robometer-4B``, base ``Qwen/Qwen3-VL-4B-Instruct``) is a folder with
``config.json`` (the backbone's ``Qwen3VLConfig``, vocabulary resized for 5 added tokens),
``*.safetensors`` holding one state dict whose backbone keys start with ``model.`` (a
``Qwen3VLModel``, no LM head) and whose head keys are ``progress_head.*``, ``success_head.*``,
``preference_head.*`` and ``frame_pool_attn.weight``, tokenizer and image-processor files, and
``config.yaml`` (the training configuration). The number of progress bins is read from the
weights. PEFT-adapter checkpoints (adapter files plus ``custom_heads.safetensors``) are not
supported.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import torch

from .model import RobometerHeadConfig, RobometerModel
from .processor import IMAGE_PAD, VISION_END, VISION_START, RobometerProcessor
from .reward import check_count

__all__ = ["RobometerWeightsNotFoundError", "load_checkpoint", "save_checkpoint", "build_tiny_robometer"]

logger = logging.getLogger(__name__)

_HEAD_PREFIXES = ("progress_head.", "preference_head.", "success_head.", "frame_pool_attn.")


class RobometerWeightsNotFoundError(FileNotFoundError):
    """The Robometer checkpoint (or a file it needs) could not be found.

    Subclasses :class:`FileNotFoundError`; the message says what was looked for and how to
    get it (download the checkpoint on a machine with internet access and pass its folder).
    """


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


def load_checkpoint(
    path_or_hub_id: str | Path,
    *,
    device: Any = None,
    dtype: Any = None,
    local_files_only: bool | None = None,
    revision: str | None = None,
    head_config: RobometerHeadConfig | None = None,
) -> tuple[RobometerModel, RobometerProcessor]:
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

    Returns:
        ``(model, processor)``: the :class:`RobometerModel` on ``device``, in eval mode,
        gradients off (Robometer-4B takes about 9 GB of memory in bfloat16 and 18 GB in
        float32), and its :class:`RobometerProcessor` (the folder's chat template when it has
        one).

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
    return model, processor


def save_checkpoint(model: RobometerModel, processor: RobometerProcessor, folder: str | Path) -> Path:
    """Write ``model`` and ``processor`` in the checkpoint layout :func:`load_checkpoint` reads.

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
    model.model.config.save_pretrained(str(out))
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    processor.tokenizer.save_pretrained(str(out))
    processor.image_processor.save_pretrained(str(out))
    cfg = model.head_config
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
    if processor.chat_template:
        (out / "chat_template.jinja").write_text(processor.chat_template, encoding="utf-8")
    return out


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
    num_layers = check_count("num_layers", num_layers)
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
