"""Cost accounting: how many rollouts each source scored and how many seconds it took.

The method exists to cut execution cost, so every run keeps a :class:`CostLedger` with a
count and wall-clock seconds per *source*: ``execution`` (real sandboxed runs),
``world_model`` (world-model inference), ``generation`` (policy sampling), ``update`` (policy
optimisation), plus any user-defined source. Ledgers from several workers can be merged.

Rollouts left ungraded because the machinery failed (see :mod:`wmrl_envs.core.ungraded`) are
counted under the sources ``"ungraded:<cause>"`` (:meth:`CostLedger.ungraded_counts`).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator

__all__ = ["CostLedger", "EXECUTION", "WORLD_MODEL_SOURCE", "GENERATION", "UPDATE"]

EXECUTION = "execution"
WORLD_MODEL_SOURCE = "world_model"
GENERATION = "generation"
UPDATE = "update"


class CostLedger:
    """Counts and seconds per cost source.

    Example:
        >>> ledger = CostLedger()
        >>> ledger.add("execution", seconds=2.5, count=4)
        >>> ledger.count("execution"), ledger.seconds("execution")
        (4, 2.5)
    """

    UNGRADED_PREFIX = "ungraded:"
    """Prefix of the sources that count ungraded scores by cause (``"ungraded:world_model_timeout"``)."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._seconds: dict[str, float] = {}

    def add(self, source: str, seconds: float = 0.0, count: int = 1) -> None:
        """Record ``count`` events of ``source`` that took ``seconds`` of wall-clock in all.

        Raises:
            ValueError: negative seconds or count.
        """
        if seconds < 0 or count < 0:
            raise ValueError(f"seconds and count must be >= 0, got {seconds}, {count}")
        self._counts[source] = self._counts.get(source, 0) + int(count)
        self._seconds[source] = self._seconds.get(source, 0.0) + float(seconds)

    @contextmanager
    def timed(self, source: str, count: int = 1) -> Iterator[None]:
        """Context manager that adds the block's wall-clock seconds to ``source``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(source, time.perf_counter() - t0, count)

    def count(self, source: str) -> int:
        """Events recorded for ``source`` (0 if none)."""
        return self._counts.get(source, 0)

    def seconds(self, source: str) -> float:
        """Wall-clock seconds recorded for ``source`` (0.0 if none)."""
        return self._seconds.get(source, 0.0)

    @property
    def sources(self) -> list[str]:
        """Sources seen so far, sorted."""
        return sorted(set(self._counts) | set(self._seconds))

    def ungraded_counts(self) -> dict[str, int]:
        """``{cause: count}`` of the scores recorded as ungraded (sources ``"ungraded:<cause>"``)."""
        p = self.UNGRADED_PREFIX
        return {s[len(p):]: self.count(s) for s in self.sources if s.startswith(p)}

    def merge(self, other: "CostLedger") -> None:
        """Add another ledger's counts and seconds into this one (e.g. from a remote worker)."""
        for s in other.sources:
            self.add(s, other.seconds(s), other.count(s))

    def to_dict(self) -> dict[str, dict[str, float]]:
        """``{source: {"count": int, "seconds": float}}``."""
        return {s: {"count": self.count(s), "seconds": self.seconds(s)} for s in self.sources}

    def state_dict(self) -> dict[str, Any]:
        """Same as :meth:`to_dict` (JSON-serialisable)."""
        return self.to_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the contents with :meth:`state_dict`'s output."""
        self._counts = {k: int(v["count"]) for k, v in state.items()}
        self._seconds = {k: float(v["seconds"]) for k, v in state.items()}
