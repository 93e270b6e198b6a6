"""One checked, bounded, timed ``world_model.predict`` call: the method's world-model step.

Every path that asks a world model for scores — the per-episode wrapper, the group APIs, the
vector twin, the Ray scorer — goes through :func:`predict_checked`, so all of them enforce the
same protocol, the same failure contract (:mod:`wmrl_envs.core.ungraded`) and account the
seconds the same way (wall-clock and CPU-seconds, measured or declared by the world model:
:func:`world_model_cpu_seconds`). :func:`world_model_idle` lets a trainer whose world model shares weights
with the policy wait for a timed-out call before it updates. See ``docs/method.md``
("Ungraded rollouts", "Cost accounting").
"""

from __future__ import annotations

import dataclasses
import logging
import math
import numbers
import threading
import time
import weakref
from typing import Any, Sequence

from wmrl_envs.world_models.base import WorldModel, WorldModelPrediction

from .ledger import WORLD_MODEL_SOURCE, CostLedger, Stopwatch
from .ungraded import WORLD_MODEL_ERROR, WORLD_MODEL_INVALID, WORLD_MODEL_TIMEOUT, WORLD_MODEL_UNGRADED

__all__ = ["predict_checked", "world_model_idle", "world_model_cpu_seconds", "DECLARED_CPU_ATTR"]

DECLARED_CPU_ATTR = "declared_cpu_s_per_prediction"
"""Optional world-model attribute: CPU-seconds charged per prediction instead of the measured
CPU (see :func:`world_model_cpu_seconds`)."""

logger = logging.getLogger(__name__)


#: seconds a world-model call with a time-out may go on after Ctrl-C before the interrupt unwinds
INTERRUPT_GRACE_S = 30.0
_CALL_LOCKS: dict[int, threading.Lock] = {}
_CALL_LOCKS_GUARD = threading.Lock()


def _call_lock(world_model: Any) -> threading.Lock:
    """One lock per world-model object: never two ``predict`` calls on it at once (a call that
    timed out may still be running in its thread)."""
    key = id(world_model)
    with _CALL_LOCKS_GUARD:
        lock = _CALL_LOCKS.get(key)
        if lock is None:
            lock = _CALL_LOCKS[key] = threading.Lock()
            try:
                weakref.finalize(world_model, _CALL_LOCKS.pop, key, None)
            except TypeError:  # not weak-referenceable: the lock stays (a few bytes)
                pass
    return lock


def world_model_idle(world_model: Any, timeout_s: float | None = None) -> bool:
    """Whether no ``predict`` call on ``world_model`` is running (waits up to ``timeout_s``
    seconds for one that timed out to return; ``None`` waits for ever).

    A trainer whose world model shares weights with the policy (the LLM judge is the policy's
    backbone with its adapters disabled) must not update the policy while a timed-out call is
    still running on those weights; ``wmrl train`` checks this before every update.

    Returns:
        ``True`` when idle (within the wait), ``False`` when a call is still running.
    """
    lock = _call_lock(world_model)
    if not lock.acquire(timeout=-1 if timeout_s is None else max(0.0, float(timeout_s))):
        return False
    lock.release()
    return True


def world_model_cpu_seconds(world_model: Any, n_predictions: int, measured_cpu_s: float) -> float:
    """CPU-seconds to charge for one batched ``predict`` call of ``n_predictions``.

    A world model with the attribute ``declared_cpu_s_per_prediction`` (a float >= 0; e.g. a
    synthetic world model whose real CPU is negligible and stands for a costly one) is charged
    ``n_predictions * declared_cpu_s_per_prediction``; any other is charged
    ``measured_cpu_s``, the CPU :func:`predict_checked` measured over the call
    (``Stopwatch(exclude_other_threads=True)``: this process's CPU less what the other Python
    threads alive at the call's start used meanwhile, so a world model computing in threads of
    its own — started in ``predict``, or native pools such as torch's — is counted, while the
    work of other threads sharing the process, e.g. other users of one loop, is not).

    Raises:
        ValueError: the attribute is set to something that is not a finite number >= 0.
    """
    declared = getattr(world_model, DECLARED_CPU_ATTR, None)
    if declared is None:
        return float(measured_cpu_s)
    if isinstance(declared, bool) or not isinstance(declared, numbers.Real) or not (
        math.isfinite(float(declared)) and float(declared) >= 0
    ):
        raise ValueError(
            f"{type(world_model).__name__}.{DECLARED_CPU_ATTR} must be a finite number >= 0 (CPU-seconds "
            f"charged per prediction), got {declared!r}; remove the attribute to have the measured CPU charged"
        )
    return float(declared) * int(n_predictions)


def _failed_batch(n: int, cause: str, message: str) -> list[WorldModelPrediction]:
    return [
        WorldModelPrediction(score=None, status="ungraded", extras={"error": message}, ungraded_cause=cause)
        for _ in range(n)
    ]


def _call_with_deadline(
    world_model: WorldModel, contexts: list[Any], actions: list[Any], timeout_s: float | None
) -> tuple[list[Any] | None, str | None, str]:
    """``world_model.predict`` bounded by ``timeout_s``: ``(preds, None, "")`` or ``(None, cause, message)``."""
    name = type(world_model).__name__
    lock = _call_lock(world_model)
    if timeout_s is None:
        with lock:
            try:
                return list(world_model.predict(contexts, actions)), None, ""
            except Exception as exc:  # noqa: BLE001 - every failure of the model is an ungraded batch
                return None, WORLD_MODEL_ERROR, f"{name}.predict raised {type(exc).__name__}: {exc}"
    deadline = time.monotonic() + float(timeout_s)
    if not lock.acquire(timeout=float(timeout_s)):
        return None, WORLD_MODEL_TIMEOUT, (
            f"{name}.predict: an earlier call that timed out is still running after {timeout_s:g} s more"
        )
    box: dict[str, Any] = {}
    done = threading.Event()  # not Thread.join: an interrupted join marks a running thread ended (Python 3.11)

    def run() -> None:
        try:
            box["preds"] = list(world_model.predict(contexts, actions))
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            box["exc"] = exc
        finally:
            lock.release()
            done.set()

    # a daemon thread: a call that never returns cannot keep the interpreter from exiting
    worker = threading.Thread(target=run, name=f"wmrl-predict-{name}", daemon=True)
    worker.start()
    try:
        done.wait(max(0.0, deadline - time.monotonic()))
    except KeyboardInterrupt:
        # let the call end (within its deadline, at most INTERRUPT_GRACE_S) before the interrupt
        # unwinds: an interpreter that exits while the thread computes in native code (torch)
        # aborts the process ("terminate called without an active exception") instead of
        # raising KeyboardInterrupt to the caller
        done.wait(max(0.0, min(deadline - time.monotonic(), INTERRUPT_GRACE_S)))
        raise
    if not done.is_set():
        return None, WORLD_MODEL_TIMEOUT, (
            f"{name}.predict did not return within world_model_timeout_s={timeout_s:g} s for a batch of "
            f"{len(actions)} (its thread keeps running in the background; later calls wait for it)"
        )
    if "exc" in box:
        exc = box["exc"]
        if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: not ours to swallow
            raise exc
        return None, WORLD_MODEL_ERROR, f"{name}.predict raised {type(exc).__name__}: {exc}"
    return box["preds"], None, ""


def predict_checked(
    world_model: WorldModel,
    contexts: Sequence[Any],
    actions: Sequence[Any],
    ledger: CostLedger,
    *,
    timeout_s: float | None = None,
) -> list[WorldModelPrediction]:
    """One batched ``world_model.predict`` call, checked, bounded and timed into ``ledger``.

    Shared by every wrapper (per-episode, group and vector APIs) and the Ray scorer, so that
    all of them enforce the same protocol, the same failure contract
    (:mod:`wmrl_envs.core.ungraded`) and account world-model seconds the same way:

    * ``predict`` raises -> every prediction of the batch is ungraded, cause
      ``"world_model_error"`` (logged with ``logging.warning``);
    * ``predict`` runs longer than ``timeout_s`` -> ungraded, cause ``"world_model_timeout"``.
      The call runs in a daemon thread that is abandoned at the deadline: Python cannot stop
      a thread, so a hung call keeps its thread (and whatever it holds, e.g. a GPU) until it
      returns, if ever; later calls on the same world model wait for it (within their own
      deadline) rather than run concurrently with it;
    * a score that is not a finite number (NaN, inf, a non-number) becomes ``None``, cause
      ``"world_model_invalid"`` — a NaN never enters an episode's per-turn scores;
    * ``score=None`` without a cause gets ``"world_model_ungraded"``.

    Args:
        world_model: the world model.
        contexts, actions: B contexts and B actions.
        ledger: gets ``("world_model", seconds, B)`` with the call's CPU-seconds
            (:func:`world_model_cpu_seconds`: declared by the world model, else measured), also
            for a call that raised or timed out: its time was spent (a timed-out call is charged
            the CPU used until its deadline, not what its abandoned thread uses later); not for
            a protocol error, which stops the run. The measured CPU is the call's own: the
            thread that runs ``predict`` (the caller's, or the call's thread with a time-out)
            and the threads it starts, not other Python threads of the process
            (:class:`~wmrl_envs.core.Stopwatch` with ``exclude_other_threads=True``).
        timeout_s: seconds one call may take (``None``: no limit, the call runs in the caller's
            thread).

    Returns:
        B :class:`WorldModelPrediction` (new objects where this function changed one).

    Raises:
        RuntimeError: ``predict`` returned not one prediction per action (a protocol bug).
        TypeError: a prediction is not a :class:`WorldModelPrediction`.
        ValueError: the world model's ``declared_cpu_s_per_prediction`` is not a number >= 0
            (checked before the call).
    """
    contexts, actions = list(contexts), list(actions)
    world_model_cpu_seconds(world_model, len(actions), 0.0)  # a bad declared cost fails before the call
    sw = Stopwatch(exclude_other_threads=True)  # the call's own CPU, not other threads'
    raw, cause, message = _call_with_deadline(world_model, contexts, actions, timeout_s)
    dt, cpu = sw.read()
    cpu = world_model_cpu_seconds(world_model, len(actions), cpu)
    name = type(world_model).__name__
    if raw is None:
        assert cause is not None
        ledger.add(WORLD_MODEL_SOURCE, dt, len(actions), cpu_seconds=cpu)  # its time was spent
        logger.warning("world model failed, %d prediction(s) ungraded (%s): %s", len(actions), cause, message)
        return _failed_batch(len(actions), cause, message)
    if len(raw) != len(actions):
        raise RuntimeError(
            f"world model {name} returned {len(raw)} predictions "
            f"for {len(actions)} actions; predict() must return one per action"
        )
    bad = next((p for p in raw if not isinstance(p, WorldModelPrediction)), None)
    if bad is not None:
        raise TypeError(
            f"world model {name} returned a {type(bad).__name__}; "
            "predict() must return WorldModelPrediction objects (e.g. WorldModelPrediction(score=0.7))"
        )
    ledger.add(WORLD_MODEL_SOURCE, dt, len(actions), cpu_seconds=cpu)
    out: list[WorldModelPrediction] = []
    n_invalid = 0
    for p in raw:
        if p.score is None:
            out.append(p if p.ungraded_cause else dataclasses.replace(p, ungraded_cause=WORLD_MODEL_UNGRADED))
            continue
        try:
            ok = math.isfinite(float(p.score))
        except (TypeError, ValueError):
            ok = False
        if ok:
            out.append(p)
        else:
            n_invalid += 1
            out.append(dataclasses.replace(
                p, score=None, ungraded_cause=WORLD_MODEL_INVALID,
                extras={**p.extras, "error": f"invalid score {p.score!r}", "invalid_score": repr(p.score)},
            ))
    if n_invalid:
        logger.warning("world model %s returned %d non-finite score(s); left ungraded (%s)", name, n_invalid,
                       WORLD_MODEL_INVALID)
    return out
