"""``ActionTokenizer``: OpenVLA's binned action tokens, and the un-normalisation of actions.

The VLA policy (:mod:`agents.vla_policy`) writes actions as tokens and reads them back with
this tokenizer; it is pure array code (no model), so it lives apart from the policy.

Action representation (OpenVLA: Kim et al. 2024, arXiv 2406.09246, §3.3 and its
``prismatic/vla/action_tokenizer.py``; MiniVLA keeps it for its non-VQ models): every action
dimension (x, y, z, roll, pitch, yaw, gripper), normalised to [-1, 1], is discretised into
uniform bins and written as one token among the **last 256 ids of the vocabulary**; a 7-D action
is 7 tokens, an action chunk of C steps is ``C * 7`` tokens (step after step).
:func:`unnormalize_actions` maps normalised actions to the robot's range with OpenVLA's q01/q99
statistics.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["ActionTokenizer", "unnormalize_actions"]


class ActionTokenizer:
    """OpenVLA's uniform-bin action tokenizer: continuous actions ↔ the last ``n_bins`` token ids.

    Following OpenVLA's implementation exactly (so real checkpoints decode correctly):
    ``n_bins`` uniformly spaced *edges* span ``[low, high]``; a value is clipped to that range and
    digitised against the edges (``d = #edges <= value``, in ``1..n_bins``; a value on an edge
    goes to the bin above it), and written as token ``vocab_size - d``. Larger values therefore
    get *smaller* ids, and the ids used are ``vocab_size - n_bins .. vocab_size - 1``. Decoding
    returns the centre of bin ``d`` among the ``n_bins - 1`` intervals between edges (``d = n_bins``,
    reached only by ``value == high``, shares the last interval), so a round trip is exact to within
    half a bin width ``(high - low) / (n_bins - 1) / 2`` (≈0.0039 for the default 256 bins on
    [-1, 1]).

    Args:
        vocab_size: number of token ids the action tokens end at (exclusive): OpenVLA-7B uses the
            Llama tokenizer's 32000; MiniVLA's "extra" tokenizer uses ``len(tokenizer)`` after its
            added ``<|extra_i|>`` tokens.
        n_bins: bins per dimension (OpenVLA: 256).
        low, high: the normalised action range (OpenVLA: [-1, 1]).
        action_dim: dimensions per action step (7: x, y, z, roll, pitch, yaw, gripper).

    Raises:
        ValueError: ``n_bins < 2``, ``vocab_size < n_bins``, ``low >= high`` or ``action_dim < 1``.

    Example:
        >>> tok = ActionTokenizer(vocab_size=32000)
        >>> ids = tok.encode(np.array([0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 0.01]))
        >>> ids.tolist()  # 2.0 is clipped to 1.0
        [31872, 31744, 31999, 31808, 31936, 31744, 31871]
        >>> tok.decode(ids).astype(float).round(3).tolist()
        [0.0, 0.996, -0.996, 0.502, -0.502, 0.996, 0.008]
        >>> tok.decode_chunk(tok.encode_chunk(np.zeros((2, 7)))).shape  # a chunk of 2 steps = 14 tokens
        (2, 7)
    """

    def __init__(
        self,
        vocab_size: int,
        n_bins: int = 256,
        low: float = -1.0,
        high: float = 1.0,
        action_dim: int = 7,
    ) -> None:
        if n_bins < 2:
            raise ValueError(f"n_bins must be >= 2, got {n_bins}")
        if vocab_size < n_bins:
            raise ValueError(f"vocab_size ({vocab_size}) must be >= n_bins ({n_bins})")
        if not low < high:
            raise ValueError(f"need low < high, got [{low}, {high}]")
        if action_dim < 1:
            raise ValueError(f"action_dim must be >= 1, got {action_dim}")
        self.vocab_size = int(vocab_size)
        self.n_bins = int(n_bins)
        self.low = float(low)
        self.high = float(high)
        self.action_dim = int(action_dim)
        self.edges = np.linspace(self.low, self.high, self.n_bins)
        self.centers = (self.edges[:-1] + self.edges[1:]) / 2.0

    @property
    def token_begin(self) -> int:
        """First action token id (inclusive): ``vocab_size - n_bins``."""
        return self.vocab_size - self.n_bins

    @property
    def token_end(self) -> int:
        """End of the action token ids (exclusive): ``vocab_size``."""
        return self.vocab_size

    @property
    def bin_width(self) -> float:
        """Width of one bin in action units, ``(high - low) / (n_bins - 1)``."""
        return (self.high - self.low) / (self.n_bins - 1)

    def encode(self, actions: Any) -> np.ndarray:
        """Token ids of actions.

        Args:
            actions: float array-like of shape (..., action_dim), normalised actions; values
                outside ``[low, high]`` are clipped.

        Returns:
            int64 array of shape (..., action_dim), ids in ``[token_begin, token_end)``.

        Raises:
            ValueError: the last axis is not ``action_dim`` long, or a value is NaN.
        """
        a = np.asarray(actions.detach().cpu() if isinstance(actions, torch.Tensor) else actions, dtype=np.float64)
        if a.ndim == 0 or a.shape[-1] != self.action_dim:
            raise ValueError(f"actions must have shape (..., {self.action_dim}), got {a.shape}")
        if np.isnan(a).any():
            raise ValueError("actions contain NaN")
        a = np.clip(a, self.low, self.high)
        d = np.digitize(a, self.edges)  # 1..n_bins after clipping
        return (self.vocab_size - d).astype(np.int64)

    def decode(self, token_ids: Any) -> np.ndarray:
        """Actions (bin centres) of token ids.

        Args:
            token_ids: integer array-like (or tensor) of shape (..., action_dim).

        Returns:
            float32 array of the same shape, values in ``[low, high]``.

        Raises:
            ValueError: the last axis is not ``action_dim`` long, or an id lies outside
                ``[token_begin, token_end)`` (not an action token).
        """
        ids = np.asarray(token_ids.detach().cpu() if isinstance(token_ids, torch.Tensor) else token_ids)
        if ids.ndim == 0 or ids.shape[-1] != self.action_dim:
            raise ValueError(f"token_ids must have shape (..., {self.action_dim}), got {ids.shape}")
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"token_ids must be integers, got dtype {ids.dtype}")
        bad = (ids < self.token_begin) | (ids >= self.token_end)
        if bad.any():
            raise ValueError(
                f"token ids outside the action range [{self.token_begin}, {self.token_end}): "
                f"{sorted(set(ids[bad].tolist()))[:8]}"
            )
        d = self.vocab_size - ids.astype(np.int64)
        idx = np.clip(d - 1, 0, self.n_bins - 2)
        return self.centers[idx].astype(np.float32)

    def encode_chunk(self, actions: Any) -> np.ndarray:
        """Token ids of action chunks, flattened step after step.

        Args:
            actions: float array-like of shape (..., chunk, action_dim).

        Returns:
            int64 array of shape (..., chunk * action_dim).

        Raises:
            ValueError: fewer than 2 dimensions or a wrong last axis.
        """
        a = np.asarray(actions.detach().cpu() if isinstance(actions, torch.Tensor) else actions)
        if a.ndim < 2:
            raise ValueError(f"action chunks must have shape (..., chunk, {self.action_dim}), got {a.shape}")
        ids = self.encode(a)
        return ids.reshape(*ids.shape[:-2], ids.shape[-2] * self.action_dim)

    def decode_chunk(self, token_ids: Any) -> np.ndarray:
        """Action chunks of flattened token ids.

        Args:
            token_ids: integer array-like of shape (..., chunk * action_dim).

        Returns:
            float32 array of shape (..., chunk, action_dim).

        Raises:
            ValueError: the last axis is not a positive multiple of ``action_dim``, or an id is
                not an action token.
        """
        ids = np.asarray(token_ids.detach().cpu() if isinstance(token_ids, torch.Tensor) else token_ids)
        if ids.ndim == 0 or ids.shape[-1] == 0 or ids.shape[-1] % self.action_dim:
            raise ValueError(f"token_ids must have shape (..., chunk * {self.action_dim}), got {ids.shape}")
        chunk = ids.shape[-1] // self.action_dim
        return self.decode(ids.reshape(*ids.shape[:-1], chunk, self.action_dim))


def unnormalize_actions(actions: Any, q01: Any, q99: Any, mask: Any | None = None) -> np.ndarray:
    """Map normalised actions from [-1, 1] to the robot's range (OpenVLA's ``BOUNDS_Q99`` scheme).

    ``a_robot = (a + 1) / 2 * (q99 - q01) + q01`` on the dimensions where ``mask`` is true; the
    others (by OpenVLA's convention the gripper) pass through unchanged.

    Args:
        actions: float array-like (..., D) in [-1, 1].
        q01, q99: per-dimension 1st/99th percentiles of the training actions, shape (D,)
            (OpenVLA checkpoints: ``config.norm_stats[<dataset>]["action"]``).
        mask: bool (D,), which dimensions to un-normalise (default all).

    Returns:
        float32 array of the same shape.
    """
    a = np.asarray(actions, dtype=np.float64)
    lo, hi = np.asarray(q01, dtype=np.float64), np.asarray(q99, dtype=np.float64)
    m = np.ones(a.shape[-1], dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    out = np.where(m, 0.5 * (a + 1.0) * (hi - lo) + lo, a)
    return out.astype(np.float32)
