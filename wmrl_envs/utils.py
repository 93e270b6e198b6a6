"""Small helpers shared across the package (no method logic lives here).

    * :func:`write_json_atomic` — write a JSON file so that a reader (or a run killed
      mid-write) never sees half of it: the wrapper's and the trainer's saved state, the
      adapters' checkpoints and the leaderboards all go through it.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any, Callable

__all__ = ["write_json_atomic"]


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
