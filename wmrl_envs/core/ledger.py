"""Cost accounting: how many rollouts each source scored, in wall-clock and in CPU seconds.

The method exists to cut execution cost, so every run keeps a :class:`CostLedger` with, per
*source*, a count, wall-clock seconds and CPU-seconds: ``execution`` (real sandboxed runs),
``world_model`` (world-model inference), ``generation`` (policy sampling), ``update`` (policy
optimisation), plus any user-defined source. Ledgers from several workers can be merged.

Wall-clock depends on the machine's load; CPU-seconds (user + system time of the processes
that did the work) do much less, so the benchmark's headline compares methods in CPU-seconds
and keeps wall-clock beside it. Where CPU-seconds come from (see ``docs/method.md``, "Cost
accounting"):

* :class:`Stopwatch` / :meth:`CostLedger.timed` measure a block: wall-clock
  (``time.perf_counter``) and :func:`process_cpu_seconds` (this process's CPU, all threads,
  plus the CPU of the child processes it waited for), as a difference; with
  ``Stopwatch(exclude_other_threads=True)`` (world-model calls) less the CPU that the other
  Python threads alive at the start used meanwhile (:func:`thread_cpu_seconds`);
* an environment may report the CPU-seconds of one execution itself in its step info under
  :data:`EXECUTION_CPU_KEY` (``"execution_cpu_s"``): measured (AutoResearch: the sandboxed
  process tree's own usage) or *declared* (a synthetic env charges a fixed number per call);
  :func:`execution_cpu_seconds` picks it over the measured fallback;
* a world model may declare its cost per prediction (``declared_cpu_s_per_prediction``, see
  :class:`~wmrl_envs.world_models.base.WorldModel`).

**What a cost is** (the *cost basis*, :data:`COST_BASES`, chosen once per ledger:
``CostLedger(cost_basis=...)``, which a :class:`~wmrl_envs.core.CorrectionLoop` builds from
``CorrectionConfig.cost_basis``): ``"cpu"`` (default: CPU-seconds, as above: right for local
execution), ``"wall"`` (wall-clock seconds: the wait for a remote job, a GPU queue or a paid API
counts) or ``"per_call"`` (a declared price per event and source, e.g. money or GPU-seconds:
``prices={"execution": 0.02, "world_model": 0.0001}``; an env whose price varies per call reports
each execution's own in its step info under :data:`EXECUTION_COST_KEY`, ``"execution_cost"``,
:func:`reported_execution_cost`, and that is charged instead of the declared price). Every reader of costs —
:meth:`CostLedger.cost`, :meth:`CostRates.from_ledger <wmrl_envs.core.advisor.CostRates.from_ledger>`
(so γ, the adaptive fraction and the advisor) and :meth:`CorrectionLoop.stats
<wmrl_envs.core.CorrectionLoop.stats>` — reads them in the ledger's basis. The ledger records
counts, wall-clock and CPU-seconds whatever the basis (a saved ledger holds measurements, not a
basis), so the basis only decides how they are read.

Rollouts left ungraded because the machinery failed (see :mod:`wmrl_envs.core.ungraded`) are
counted under the sources ``"ungraded:<cause>"`` (:meth:`CostLedger.ungraded_counts`).
"""

from __future__ import annotations

import math
import numbers
import resource
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

__all__ = [
    "CostLedger",
    "Stopwatch",
    "process_cpu_seconds",
    "thread_cpu_seconds",
    "execution_cpu_seconds",
    "reported_execution_cost",
    "EXECUTION",
    "WORLD_MODEL_SOURCE",
    "GENERATION",
    "UPDATE",
    "EXECUTION_CPU_KEY",
    "EXECUTION_COST_KEY",
    "COST_BASES",
]

EXECUTION = "execution"
WORLD_MODEL_SOURCE = "world_model"
GENERATION = "generation"
UPDATE = "update"

COST_BASES = ("cpu", "wall", "per_call")
"""What a ledger counts as the cost of an event (:class:`CostLedger`'s ``cost_basis``): CPU-seconds,
wall-clock seconds, or a declared price per event."""

_COST_UNITS = {"cpu": "CPU-s", "wall": "wall-clock s"}

EXECUTION_CPU_KEY = "execution_cpu_s"
"""Step-info key in which an env reports the CPU-seconds of one execution (float >= 0):
measured (AutoResearch: the sandboxed process tree's user + system time) or declared (a
synthetic env's fixed cost per call), or ``None``: executed, but its CPU could not be measured
(the ledger then counts the execution as unmeasured). The wrappers charge it to
``execution``; when an env leaves the key out they charge the CPU they measured around the
step (:func:`execution_cpu_seconds`)."""

EXECUTION_COST_KEY = "execution_cost"
"""Step-info key in which an env reports the price of one execution (float >= 0, in the ledger's
``unit``; ``None`` or absent: not reported), for a paid API or a job whose price varies per call.
Read under ``cost_basis="per_call"`` only: such an execution is charged what it reports, the
others ``prices["execution"]`` (:func:`reported_execution_cost`, :meth:`CostLedger.add`'s
``cost``)."""


def process_cpu_seconds() -> float:
    """CPU-seconds used so far by this process and by the children it has waited for.

    ``time.process_time()`` (user + system time of every thread of this process) plus
    ``resource.getrusage(RUSAGE_CHILDREN)`` ``ru_utime + ru_stime`` (every terminated child
    process, and their own waited-for descendants, once this process has reaped it).

    Only differences are meaningful (:class:`Stopwatch`). Such a difference is exact for a
    block when nothing else of this process runs meanwhile, as in the main job and the
    benchmark, which run generation, world-model calls, executions and the update one after
    another. When blocks overlap (threads, e.g. the lanes of a threaded anchor group or a
    world-model call left running after its time-out), each block's difference also holds
    the CPU the others used meanwhile, so adding them up over-counts; and a child reaped by
    another thread during a block is charged to that block.

    Returns:
        Seconds (float).
    """
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ru.ru_utime + ru.ru_stime


def thread_cpu_seconds(native_id: int) -> float | None:
    """CPU-seconds used so far by one thread of this process (user + system).

    Linux's per-thread CPU clock of the thread (``clock_gettime`` on the clock id the kernel
    derives from a thread id, as glibc's ``pthread_getcpuclockid`` does; the clock of
    ``time.thread_time``), so any live thread of this process can be read from any other,
    unlike ``time.thread_time`` (the calling thread only). The kernel refuses the id of a
    thread that has ended or belongs to another process.

    Args:
        native_id: the OS thread id (``threading.Thread.native_id``, ``threading.get_native_id()``).

    Returns:
        Seconds (float), or ``None`` when it cannot be read: the thread has ended, or the
        system has no such clock (not Linux).
    """
    try:
        return time.clock_gettime(((~int(native_id)) << 3) | 6)  # per-thread (4) | scheduler clock (2)
    except (OSError, OverflowError, ValueError):
        return None


def _other_threads_cpu() -> dict[int, float]:
    """``{native_id: CPU-seconds so far}`` of the other live Python threads (readable ones)."""
    me = threading.get_native_id()
    out: dict[int, float] = {}
    for t in threading.enumerate():
        tid = t.native_id
        if tid is None or tid == me:
            continue
        cpu = thread_cpu_seconds(tid)
        if cpu is not None:
            out[tid] = cpu
    return out


class Stopwatch:
    """Wall-clock and CPU-seconds since construction (or since :meth:`restart`).

    Wall-clock is ``time.perf_counter``; CPU is :func:`process_cpu_seconds` (this process and
    its waited-for children; see there for what overlapping blocks mean).

    Args:
        exclude_other_threads: ``True``: the CPU is the block's own — the process's CPU less
            what each *other Python thread alive at the start* used meanwhile
            (:func:`thread_cpu_seconds`), so threads that share the process (other users of a
            shared loop, a timed-out call still running) are not charged to the block, while
            the measuring thread, threads started during the block (e.g. by a world model) and
            threads that are not Python threads (the native pools of torch, BLAS) still are.
            A thread that ends during the block cannot be read at its end: what it used
            meanwhile stays charged. Without ``/proc`` (not Linux) this is the process's CPU.
            ``False`` (default): the process's CPU.

    Example:
        >>> sw = Stopwatch()
        >>> wall_s, cpu_s = sw.read()
        >>> wall_s >= 0 and cpu_s >= 0
        True
    """

    __slots__ = ("_t0", "_c0", "_exclude", "_others")

    def __init__(self, exclude_other_threads: bool = False) -> None:
        self._exclude = bool(exclude_other_threads)
        self.restart()

    def restart(self) -> None:
        """Start measuring from now."""
        self._t0 = time.perf_counter()
        self._c0 = process_cpu_seconds()
        # read after the process and (in read) before it: the other threads' spans lie inside
        # the process's, so what is left is never less than the block's own CPU
        self._others = _other_threads_cpu() if self._exclude else {}

    def read(self) -> tuple[float, float]:
        """``(wall_seconds, cpu_seconds)`` since the start (floats >= 0)."""
        others = 0.0
        for tid, c0 in self._others.items():
            c1 = thread_cpu_seconds(tid)
            if c1 is not None:  # an ended thread cannot be read: its CPU stays charged
                others += max(0.0, c1 - c0)
        wall, cpu = time.perf_counter() - self._t0, process_cpu_seconds() - self._c0
        return max(0.0, wall), max(0.0, cpu - others)


def _check_seconds(value: Any, what: str, unit: str = " seconds") -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        of = f" of{unit}" if unit else ""
        raise ValueError(f"{what} must be a number{of}, got {value!r} ({type(value).__name__})")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{what} must be a finite number >= 0{unit}, got {value!r}")
    return v


def execution_cpu_seconds(info: Mapping[str, Any] | None, measured_cpu_s: float) -> float | None:
    """CPU-seconds to charge for one execution, from its step ``info``.

    * ``info["execution_cpu_s"]`` is a number: that (measured or declared by the env);
    * it is ``None``: ``None`` (the env executed but could not measure it; record it as
      unmeasured: ``CostLedger.add(..., cpu_seconds=None)``);
    * the key is absent (or ``info`` is not a mapping): ``measured_cpu_s``, what the caller
      measured around the step (e.g. with :class:`Stopwatch`).

    Args:
        info: the step's info dict.
        measured_cpu_s: the fallback (float >= 0).

    Returns:
        Seconds (float >= 0), or ``None`` (not measured).

    Raises:
        ValueError: the env reported something that is neither ``None`` nor a finite number
            >= 0 (an env bug: report CPU-seconds as a float, or leave the key out).
    """
    if not isinstance(info, Mapping) or EXECUTION_CPU_KEY not in info:
        return _check_seconds(measured_cpu_s, "the measured execution CPU")
    value = info[EXECUTION_CPU_KEY]
    if value is None:
        return None
    try:
        return _check_seconds(value, f"info[{EXECUTION_CPU_KEY!r}]")
    except ValueError as exc:
        raise ValueError(f"{exc}: the env must report the execution's CPU-seconds as a float >= 0 (None: "
                         "not measured), or leave the key out to have the step's measured CPU charged") from None


def reported_execution_cost(info: Mapping[str, Any] | None) -> float | None:
    """The price one execution reported in its step ``info`` under :data:`EXECUTION_COST_KEY`.

    Args:
        info: the step's info dict (anything else: nothing reported).

    Returns:
        The price (float >= 0, in the run's ``cost_unit``), or ``None``: the key is absent or
        ``None`` (the ledger then charges the declared ``prices["execution"]``).

    Raises:
        ValueError: the env reported something that is neither ``None`` nor a finite number
            >= 0 (an env bug: report the price as a float, or leave the key out).

    Example:
        >>> reported_execution_cost({"execution_cost": 0.013}), reported_execution_cost({})
        (0.013, None)
    """
    if not isinstance(info, Mapping) or info.get(EXECUTION_COST_KEY) is None:
        return None
    value = info[EXECUTION_COST_KEY]
    if not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value) and value >= 0:
        return float(value)
    raise ValueError(f"info[{EXECUTION_COST_KEY!r}] must be a finite number >= 0 (this execution's price, in the "
                     f"run's cost_unit), got {value!r} ({type(value).__name__}): report the price as a float, None "
                     "when it is unknown, or leave the key out to have the declared cost_prices['execution'] charged")


class CostLedger:
    """Counts, wall-clock seconds and CPU-seconds per cost source.

    CPU-seconds are optional per event: :meth:`add` with ``cpu_seconds=None`` records the
    events as *not measured* (counted by :meth:`cpu_unmeasured`, nothing added to
    :meth:`cpu_seconds`), so that a report can say which part of a source's count its
    CPU-seconds cover. Ledgers saved before CPU-seconds existed load with all their events
    unmeasured. A price reported per event (:meth:`add`'s ``cost``, e.g. an execution's
    ``info["execution_cost"]``) is kept beside them (:meth:`reported`) and is what ``"per_call"``
    charges for those events.

    Example:
        >>> ledger = CostLedger()
        >>> ledger.add("execution", seconds=2.5, count=4, cpu_seconds=2.0)
        >>> ledger.count("execution"), ledger.seconds("execution"), ledger.cpu_seconds("execution")
        (4, 2.5, 2.0)
        >>> ledger.add("execution", seconds=1.0)  # CPU not measured
        >>> ledger.cpu_unmeasured("execution")
        1
        >>> paid = CostLedger(cost_basis="per_call", prices={"execution": 0.5, "world_model": 0.01}, unit="USD")
        >>> paid.add("execution", seconds=3.0, count=2)  # charged the declared price
        >>> paid.add("execution", seconds=1.0, cost=0.2)  # the env reported this one's price
        >>> paid.cost("execution")
        1.2

    Args:
        cost_basis: what :meth:`cost` reads (:data:`COST_BASES`): ``"cpu"`` (default),
            ``"wall"`` or ``"per_call"``.
        prices: ``"per_call"`` only: ``{source: price of one event}`` (numbers >= 0;
            ``"execution"`` > 0 is required: what an execution that reports no price of its own
            costs). A source without a price costs nothing while it has no event; reading the
            cost of one that has events without a reported price raises.
        unit: the name of the prices' unit (``"per_call"``; default ``"units"``), e.g. ``"USD"``,
            ``"GPU-s"``.

    Raises:
        ValueError: an unknown ``cost_basis``; ``prices``/``unit`` given with another basis;
            ``"per_call"`` without a price > 0 for ``"execution"``, or a price not a finite
            number >= 0.
    """

    UNGRADED_PREFIX = "ungraded:"
    """Prefix of the sources that count ungraded scores by cause (``"ungraded:world_model_timeout"``)."""

    def __init__(self, cost_basis: str = "cpu", *, prices: Mapping[str, float] | None = None,
                 unit: str | None = None) -> None:
        if cost_basis not in COST_BASES:
            raise ValueError(f"cost_basis must be one of {COST_BASES} (CPU-seconds, wall-clock seconds, a declared "
                             f"price per call), got {cost_basis!r}")
        if cost_basis != "per_call" and (prices is not None or unit is not None):
            raise ValueError(f"prices and unit are for cost_basis='per_call' (got cost_basis={cost_basis!r}); "
                             "set cost_basis='per_call' or leave them out")
        checked: dict[str, float] = {}
        if cost_basis == "per_call":
            if not isinstance(prices, Mapping) or not prices:
                raise ValueError("cost_basis='per_call' needs prices={source: price of one event}, e.g. "
                                 "{'execution': 0.02, 'world_model': 0.0001}")
            for src, p in prices.items():
                checked[str(src)] = _check_seconds(p, f"the price of one {src!r} event", "")
            if checked.get(EXECUTION, 0.0) <= 0:
                raise ValueError(f"cost_basis='per_call' needs a price > 0 for {EXECUTION!r} (what the method saves), "
                                 f"got prices={dict(prices)!r}")
        self.cost_basis: str = cost_basis
        self.prices: dict[str, float] | None = checked if cost_basis == "per_call" else None
        self._unit = (unit or "units") if cost_basis == "per_call" else _COST_UNITS[cost_basis]
        self._counts: dict[str, int] = {}
        self._seconds: dict[str, float] = {}
        self._cpu: dict[str, float] = {}
        self._cpu_unmeasured: dict[str, int] = {}
        self._reported: dict[str, tuple[int, float]] = {}  # source -> (events with a reported price, their sum)

    def add(self, source: str, seconds: float = 0.0, count: int = 1, *, cpu_seconds: float | None = None,
            cost: float | None = None) -> None:
        """Record ``count`` events of ``source`` that took ``seconds`` of wall-clock and
        ``cpu_seconds`` CPU-seconds in all.

        Args:
            source: the cost source (``"execution"``, ``"world_model"``, ...).
            seconds: wall-clock seconds of the ``count`` events together (>= 0).
            count: number of events (int >= 0).
            cpu_seconds: their CPU-seconds together (>= 0), or ``None``: not measured (the
                ``count`` events are counted by :meth:`cpu_unmeasured`).
            cost: the price the ``count`` events reported together (>= 0, in the ledger's
                ``unit``; e.g. an execution's ``info["execution_cost"]``,
                :func:`reported_execution_cost`), or ``None``: not reported. Kept whatever the
                basis (:meth:`reported`); ``"per_call"`` charges it for these events instead of
                ``prices[source]``.

        Raises:
            ValueError: negative or non-finite seconds, CPU-seconds or cost, negative or
                non-integer count.
        """
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0:
            raise ValueError(f"count must be an integer >= 0, got {count!r}")
        secs = _check_seconds(seconds, "seconds")
        cpu = None if cpu_seconds is None else _check_seconds(cpu_seconds, "cpu_seconds")
        price = None if cost is None else _check_seconds(cost, f"the reported cost of {source!r}", "")
        self._add(str(source), int(count), secs, cpu or 0.0, int(count) if cpu is None else 0,
                  (int(count), price) if price is not None else (0, 0.0))

    def _add(self, source: str, count: int, seconds: float, cpu: float, unmeasured: int,
             reported: tuple[int, float] = (0, 0.0)) -> None:
        self._counts[source] = self._counts.get(source, 0) + count
        self._seconds[source] = self._seconds.get(source, 0.0) + seconds
        self._cpu[source] = self._cpu.get(source, 0.0) + cpu
        self._cpu_unmeasured[source] = self._cpu_unmeasured.get(source, 0) + unmeasured
        if reported[0]:
            n, total = self._reported.get(source, (0, 0.0))
            self._reported[source] = (n + reported[0], total + reported[1])

    @contextmanager
    def timed(self, source: str, count: int = 1) -> Iterator[None]:
        """Context manager that adds the block's wall-clock seconds and CPU-seconds to ``source``.

        CPU is this process's (all threads) plus that of the child processes it waited for
        during the block (:func:`process_cpu_seconds`): exact when nothing else of this process
        runs meanwhile (generation, world-model calls, executions and updates one after
        another, as in the main job and the benchmark); overlapping blocks each include the
        others' CPU. The block is recorded also when it raises (its time was spent).
        """
        sw = Stopwatch()
        try:
            yield
        finally:
            wall, cpu = sw.read()
            self.add(source, wall, count, cpu_seconds=cpu)

    def count(self, source: str) -> int:
        """Events recorded for ``source`` (0 if none)."""
        return self._counts.get(source, 0)

    def seconds(self, source: str) -> float:
        """Wall-clock seconds recorded for ``source`` (0.0 if none)."""
        return self._seconds.get(source, 0.0)

    def cpu_seconds(self, source: str) -> float:
        """CPU-seconds recorded for ``source`` (0.0 if none), over its measured events only
        (see :meth:`cpu_unmeasured`)."""
        return self._cpu.get(source, 0.0)

    def cpu_unmeasured(self, source: str) -> int:
        """Events of ``source`` recorded without CPU-seconds (``cpu_seconds=None``, or loaded
        from a ledger saved before CPU-seconds were kept); 0 when all were measured."""
        return self._cpu_unmeasured.get(source, 0)

    def reported(self, source: str) -> tuple[int, float]:
        """``(events, price)``: how many of ``source``'s events reported their own price (:meth:`add`'s
        ``cost``) and what they reported together (``(0, 0.0)`` if none)."""
        return self._reported.get(source, (0, 0.0))

    @property
    def cost_unit(self) -> str:
        """The unit of :meth:`cost`: ``"CPU-s"``, ``"wall-clock s"`` or the declared ``unit``."""
        return self._unit

    def cost(self, source: str) -> float:
        """The cost of ``source``'s events in the ledger's basis (:attr:`cost_unit`): CPU-seconds
        of its measured events (``"cpu"``; see :meth:`cost_count`), wall-clock seconds
        (``"wall"``), or (``"per_call"``) the prices its events reported (:meth:`reported`) plus
        the declared price × the count of the others. 0.0 for a source with no event.

        Raises:
            ValueError: ``"per_call"`` and ``source`` has events that reported no price and no
                declared price (declare one in ``prices``).
        """
        if self.cost_basis == "cpu":
            return self.cpu_seconds(source)
        if self.cost_basis == "wall":
            return self.seconds(source)
        n_reported, reported = self.reported(source)
        n = self.count(source) - n_reported
        if n == 0:
            return reported
        assert self.prices is not None
        if source not in self.prices:
            which = " that reported no price of their own" if n_reported else ""
            raise ValueError(f"the ledger counts costs per call (cost_basis='per_call') but {source!r} has {n} events"
                             f"{which} and no declared price; add it to prices (declared: {sorted(self.prices)})")
        return reported + self.prices[source] * n

    def cost_summary(self) -> dict[str, Any]:
        """The run's costs in the ledger's basis, for a progress line or a summary:
        ``{"cost_unit": str, "execution_cost": float, "world_model_cost": float,
        "world_model_cost_share": float}``, the share being the world model's part of execution +
        world model + generation + update (``None`` while that is 0; the three figures are
        ``None`` under ``"per_call"`` when a source with events has no price)."""
        try:
            parts = {s: self.cost(s) for s in (EXECUTION, WORLD_MODEL_SOURCE, GENERATION, UPDATE)}
        except ValueError:
            return {"cost_unit": self.cost_unit, "execution_cost": None, "world_model_cost": None,
                    "world_model_cost_share": None}
        total = sum(parts.values())
        return {"cost_unit": self.cost_unit, "execution_cost": parts[EXECUTION],
                "world_model_cost": parts[WORLD_MODEL_SOURCE],
                "world_model_cost_share": parts[WORLD_MODEL_SOURCE] / total if total > 0 else None}

    def cost_count(self, source: str) -> int:
        """The events :meth:`cost` covers: the measured ones under ``"cpu"`` (count less
        :meth:`cpu_unmeasured`), all of them otherwise."""
        return self.count(source) - (self.cpu_unmeasured(source) if self.cost_basis == "cpu" else 0)

    @property
    def sources(self) -> list[str]:
        """Sources seen so far, sorted."""
        return sorted(set(self._counts) | set(self._seconds))

    def ungraded_counts(self) -> dict[str, int]:
        """``{cause: count}`` of the scores recorded as ungraded (sources ``"ungraded:<cause>"``)."""
        p = self.UNGRADED_PREFIX
        return {s[len(p):]: self.count(s) for s in self.sources if s.startswith(p)}

    def merge(self, other: "CostLedger") -> None:
        """Add another ledger's counts, seconds, CPU-seconds and unmeasured counts into this
        one (e.g. from a remote worker)."""
        for s in other.sources:
            self._add(s, other.count(s), other.seconds(s), other.cpu_seconds(s), other.cpu_unmeasured(s),
                      other.reported(s))

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """``{source: {"count": int, "seconds": float, "cpu_seconds": float, "cpu_unmeasured": int,
        "cost": float, "cost_unit": str}}`` (``cost`` in the ledger's basis, :meth:`cost`; NaN for
        an unpriced source under ``"per_call"``), plus ``"reported_count"`` and ``"reported_cost"``
        (:meth:`reported`) for a source some of whose events reported their price; a summary's view."""
        out: dict[str, dict[str, Any]] = {}
        for s in self.sources:
            try:
                cost = self.cost(s)
            except ValueError:
                cost = float("nan")
            out[s] = {"count": self.count(s), "seconds": self.seconds(s), "cpu_seconds": self.cpu_seconds(s),
                      "cpu_unmeasured": self.cpu_unmeasured(s), "cost": cost, "cost_unit": self.cost_unit}
            if s in self._reported:
                out[s]["reported_count"], out[s]["reported_cost"] = self._reported[s]
        return out

    def state_dict(self) -> dict[str, Any]:
        """The measurements, ``{source: {"count", "seconds", "cpu_seconds", "cpu_unmeasured"}}``,
        plus ``"reported_count"`` and ``"reported_cost"`` for a source some of whose events
        reported their price (JSON-serialisable; the cost basis is a setting, not saved: a loaded
        ledger reads its measurements in its own basis)."""
        out: dict[str, Any] = {}
        for s in self.sources:
            out[s] = {"count": self.count(s), "seconds": self.seconds(s), "cpu_seconds": self.cpu_seconds(s),
                      "cpu_unmeasured": self.cpu_unmeasured(s)}
            if s in self._reported:
                out[s]["reported_count"], out[s]["reported_cost"] = self._reported[s]
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the contents with :meth:`state_dict`'s output.

        A state saved before CPU-seconds were kept (entries with only ``"count"`` and
        ``"seconds"``) loads with 0 CPU-seconds and every event counted as unmeasured, so a
        resumed run's report says which part of its count has no CPU measurement.

        Raises:
            ValueError: ``state`` is not a mapping of ``{source: {"count", "seconds", ...}}``,
                or a number in it is invalid (nothing is changed then).
        """
        if not isinstance(state, Mapping):
            raise ValueError(f"ledger state must be a dict from state_dict(), got {type(state).__name__}")
        fresh = CostLedger()
        for source, entry in state.items():
            if not isinstance(entry, Mapping) or "count" not in entry or "seconds" not in entry:
                raise ValueError(f"ledger state entry {source!r} must be a dict with 'count' and 'seconds', got {entry!r}")
            count = entry["count"]
            if "cpu_seconds" in entry:
                cpu, unmeasured = entry["cpu_seconds"], entry.get("cpu_unmeasured", 0)
            else:  # saved before CPU-seconds were kept
                cpu, unmeasured = 0.0, count
            if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0:
                raise ValueError(f"ledger state entry {source!r}: count must be an integer >= 0, got {count!r}")
            if isinstance(unmeasured, bool) or not isinstance(unmeasured, numbers.Integral) or not 0 <= unmeasured <= count:
                raise ValueError(f"ledger state entry {source!r}: cpu_unmeasured must be an integer in [0, count], "
                                 f"got {unmeasured!r}")
            n_rep = entry.get("reported_count", 0)
            if isinstance(n_rep, bool) or not isinstance(n_rep, numbers.Integral) or not 0 <= n_rep <= count:
                raise ValueError(f"ledger state entry {source!r}: reported_count must be an integer in [0, count], "
                                 f"got {n_rep!r}")
            fresh._add(str(source), int(count), _check_seconds(entry["seconds"], f"ledger state {source!r} seconds"),
                       _check_seconds(cpu, f"ledger state {source!r} cpu_seconds"), int(unmeasured),
                       (int(n_rep), _check_seconds(entry.get("reported_cost", 0.0), f"ledger state {source!r} "
                                                   "reported_cost", "")))
        self._counts, self._seconds = fresh._counts, fresh._seconds
        self._cpu, self._cpu_unmeasured, self._reported = fresh._cpu, fresh._cpu_unmeasured, fresh._reported
