"""Gymnasium's dict-of-arrays ``info`` convention, for the vector wrapper: every key ``k`` holds
an array of shape ``(num_envs,)`` and a boolean mask ``_k`` saying which sub-envs carry it.
Building such infos (:class:`InfoBuilder`), reading one sub-env's value (:func:`info_get`) and
withholding keys of one sub-env (:func:`withhold`) — format plumbing, no method logic.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import numpy as np

from wmrl_envs.core.ledger import EXECUTION_CPU_KEY

__all__ = ["InfoBuilder", "bool_array", "info_get", "withhold", "copy_obs", "own_info"]


class InfoBuilder:
    """Builds a Gymnasium dict-of-arrays info with ``_key`` masks."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.values: dict[str, np.ndarray] = {}
        self.masks: dict[str, np.ndarray] = {}

    def ensure(self, key: str, dtype: Any) -> None:
        if key not in self.values:
            if dtype is object:
                self.values[key] = np.full(self.n, None, dtype=object)
            elif dtype is np.float64:
                self.values[key] = np.full(self.n, np.nan, dtype=np.float64)
            elif dtype is np.int64:
                self.values[key] = np.full(self.n, -1, dtype=np.int64)
            else:
                self.values[key] = np.zeros(self.n, dtype=dtype)
            self.masks[key] = np.zeros(self.n, dtype=bool)

    def set(self, key: str, i: int, value: Any, dtype: Any) -> None:
        self.ensure(key, dtype)
        self.values[key][i] = value
        self.masks[key][i] = True

    def fill(self, key: str, value: Any, dtype: Any) -> None:
        self.ensure(key, dtype)
        self.values[key][:] = value
        self.masks[key][:] = True

    def build(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, arr in self.values.items():
            mask = self.masks[key]
            if key in ("episode_start", "group_complete", "budget_wait"):
                mask = np.ones(self.n, dtype=bool)  # flags: defined for every sub-env
            out[key] = arr
            out["_" + key] = mask
        return out


def bool_array(n: int, idx: Sequence[int]) -> np.ndarray:
    a = np.zeros(n, dtype=bool)
    a[list(idx)] = True
    return a


def info_get(d: dict[str, Any] | None, key: str, i: int) -> Any:
    """Sub-env ``i``'s value of ``key`` in a dict-of-arrays info (a numpy scalar as a Python one);
    ``None`` when the key is absent or its ``_key`` mask leaves sub-env ``i`` out."""
    if not isinstance(d, dict) or key not in d:
        return None
    mask = d.get("_" + key)
    if mask is not None and not bool(mask[i]):
        return None
    v = d[key][i]
    return v.item() if isinstance(v, np.generic) else v


def withhold(d: dict[str, Any] | None, keys: Sequence[str], i: int) -> None:
    """Remove sub-env ``i``'s value of ``keys`` from a dict-of-arrays info (in place)."""
    if not isinstance(d, dict):
        return
    for key in keys:
        if key not in d:
            continue
        arr = d[key]
        mask = d.get("_" + key)
        if isinstance(arr, np.ndarray):
            arr[i] = None if arr.dtype == object else 0
        if isinstance(mask, np.ndarray):
            mask[i] = False
            if not mask.any():
                del d[key], d["_" + key]


def copy_obs(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.copy()
    return copy.deepcopy(x)


def own_info(d: Any, i: int) -> dict[str, Any] | None:
    """Sub-env ``i``'s ``execution_cpu_s`` from a dict-of-arrays info, as a one-key info dict
    (``None`` when sub-env ``i`` did not report it)."""
    v = info_get(d, EXECUTION_CPU_KEY, i)
    return None if v is None else {EXECUTION_CPU_KEY: v}
