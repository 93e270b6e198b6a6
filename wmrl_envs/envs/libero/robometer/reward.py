"""Robometer's reference episode reward (``docs/method.md``, "Reward mode"): no model, numpy only.

:func:`uniform_frame_indices` picks the frames the model sees, :func:`robometer_reward` turns
their progress into the episode reward; the world model (:mod:`.world_model`) calls both.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["uniform_frame_indices", "robometer_reward", "check_count"]


def check_count(name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int after checking it is an int (not a bool) >= ``minimum``.

    Raises:
        ValueError: naming ``name``, when ``value`` is not an int or is below ``minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def uniform_frame_indices(T_plus_1: int, n: int = 8) -> np.ndarray:
    """Indices of ``n`` frames spaced uniformly over an episode, first and last frame included.

    Index ``i`` is ``rint(i * T / (n - 1))`` (halves to even) for ``i = 0 … n-1``, where
    ``T = T_plus_1 - 1`` is the last frame's index; so with ``n >= 2`` the first index is 0
    and the last is ``T``. ``n = 1`` gives ``[T]``. With at least ``n`` frames these are the
    indices of Robometer's own ``linspace_subsample_frames`` (robometer/robometer
    ``robometer/data/datasets/helpers.py``; checked against its output in
    ``tests/envs/libero/test_robometer_golden.py``). With fewer than ``n`` frames the authors use every
    frame once (so does :class:`RobometerWorldModel`); here the indices repeat frames instead,
    so the result always has ``n`` entries — :func:`robometer_reward` uses that to spread fewer
    progress values over its ``n`` positions. Reference: ``docs/method.md``, "Reward mode"
    (8 uniformly sampled frames).

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
    frames = check_count("T_plus_1 (number of frames)", T_plus_1)
    n = check_count("n (number of indices)", n)
    last = frames - 1
    if n == 1:
        return np.array([last], dtype=np.int64)
    positions = np.linspace(0.0, last, n)
    return np.clip(np.rint(positions), 0, last).astype(np.int64)


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
    n_frames = check_count("n_frames", n_frames)
    k = check_count("k", k)
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
