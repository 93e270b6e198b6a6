"""Small helpers shared across the package (no method logic lives here).

    * :func:`lazy_exports` — a package's PEP 562 ``__getattr__``/``__dir__`` for names whose
      modules are heavy to import (torch, transformers).
    * :func:`write_json_atomic` — write a JSON file so that a reader (or a run killed
      mid-write) never sees half of it: the wrapper's and the trainer's saved state, the
      adapters' checkpoints and the leaderboards all go through it.
    * :func:`finite_or_none` — a JSON-ready copy with NaN and infinities as ``null`` (strict JSON:
      ``summary.json``, ``advice.json``).
    * :func:`check_arg` — the one form of a setting's error: what it must be, what it got.
    * :func:`user_stacklevel` — the ``stacklevel`` that makes a warning point at the user's line
      (the first caller outside ``wmrl_envs``), however deep in the package it is raised.
"""

from __future__ import annotations

import json
import math
import os
import sys
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

__all__ = ["write_json_atomic", "finite_or_none", "check_arg", "user_stacklevel"]


def check_arg(ok: bool, name: str, requirement: str, value: Any) -> None:
    """Raise ``ValueError(f"{name} must be {requirement}, got {value!r}")`` unless ``ok``.

    Example:
        >>> check_arg(3 >= 1, "batch_size", ">= 1", 3)
        >>> check_arg(0 >= 1, "batch_size", ">= 1", 0)
        Traceback (most recent call last):
        ...
        ValueError: batch_size must be >= 1, got 0
    """
    if not ok:
        raise ValueError(f"{name} must be {requirement}, got {value!r}")


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` for :func:`warnings.warn`, called from the function that warns, that
    names the first frame outside the ``wmrl_envs`` package: the user's line that built the
    wrapper (or loop), not the package's own call to the loop's constructor. Returns 2 (the
    direct caller) or more; where every frame is inside the package, the outermost one.

    Example:
        ``warnings.warn("...", UserWarning, stacklevel=user_stacklevel())``
    """
    frame = sys._getframe(1)  # the function that warns: stacklevel 1
    level = 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return max(level, 2)


def finite_or_none(x: Any) -> Any:
    """``x`` with every non-finite float (NaN, ±inf) replaced by ``None``, through dicts, lists and
    tuples (tuples become lists), so that ``json.dumps(..., allow_nan=False)`` accepts it: strict
    JSON, which other languages' parsers read. Other values are returned as they are."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite_or_none(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite_or_none(v) for v in x]
    return x


def write_json_atomic(
    path: str | Path, data: Any, *, indent: int | None = None, default: Callable[[Any], Any] | None = None
) -> Path:
    """Write ``data`` as JSON to ``path`` atomically (a uniquely named temporary file in the
    same folder, flushed, then ``os.replace``).

    Args:
        path: destination file; its folder must exist.
        data: a JSON-serialisable object.
        indent: ``json.dumps`` indentation (``None``: compact).
        default: ``json.dumps``'s hook for objects it cannot serialise (e.g. numpy scalars).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        TypeError: ``data`` is not JSON-serialisable (nothing is written).
        FileNotFoundError: the destination folder does not exist.
    """
    path = Path(path)
    text = json.dumps(data, indent=indent, default=default)  # fails before anything is written
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text + ("\n" if indent is not None else ""))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def lazy_exports(
    package: str, names: Mapping[str, str], public: Sequence[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's PEP 562 ``__getattr__`` and ``__dir__`` that import heavy names on first use.

    Keeps ``import wmrl_envs.world_models`` (and the other packages that use it) light: torch,
    transformers or LIBERO are imported only when one of their names is first looked up.

    Args:
        package: the package's ``__name__``.
        names: ``{name: module}``; ``module`` is absolute (``"wmrl_envs.world_models.smollm2"``)
            or relative to ``package`` (``".env"``).
        public: the package's ``__all__`` (listed by ``__dir__``).

    Returns:
        ``(__getattr__, __dir__)``; assign both at module level. A name looked up once is
        cached in the package's namespace.

    Raises:
        AttributeError: (from ``__getattr__``) a name that is not in ``names``.
    """
    import importlib
    import sys

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(public) | set(names))

    return __getattr__, __dir__
