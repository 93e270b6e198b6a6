"""Real executions on a pool of Ray actors, asynchronously.

Anchor groups are the only rollouts WMRL executes for real, and each execution (a sandboxed
ML script for AutoResearch) takes seconds to minutes. :class:`RayExecutionPool` runs them on
``num_workers`` Ray actors — on this machine or on every node of a Ray cluster (see
``docs/scale_out.md``) — and returns at once: :meth:`RayExecutionPool.execute_group` hands
back a :class:`GroupExecutionFuture` while the trainer goes on generating and scoring other
groups; the results are collected later. Each actor builds its env once with ``env_fn()``,
runs ``reset(seed, options)`` + ``step(action)`` per rollout and returns the step's seconds
and CPU-seconds (the env's ``info["execution_cpu_s"]``, else measured in the actor); the pool
adds them to a :class:`~wmrl_envs.core.CostLedger` (pass the wrapper's ledger to
account for everything in one place), and :meth:`RayExecutionPool.worker_ledger` merges the
ledgers the actors keep themselves.

:class:`~wmrl_envs.distributed.scorer.AsyncAnchoredScorer` (in :mod:`.scorer`) plugs the pool into the shared WMRL path of an
:class:`~wmrl_envs.wrappers.anchored.AnchoredWorldModelWrapper` (outcome mode): it routes
each group with the wrapper's router and schedule, scores it with ONE batched world-model
call when it is submitted, sends anchor groups to the pool, and closes each group on the
wrapper's :class:`~wmrl_envs.core.CorrectionLoop` when its real scores arrive — by default in
submission order, which makes the results identical to the serial
:meth:`~wmrl_envs.wrappers.anchored.AnchoredWorldModelWrapper.score_group`.

Failures of the machinery leave rollouts ungraded, never scored 0 (``docs/method.md``,
"Ungraded rollouts"): an env ``step`` that raises (cause ``"sandbox_unavailable"`` for a
``SandboxUnavailableError``, else ``"execution_error"``), a worker that dies (``"worker_lost"``)
and an execution past the pool's ``execution_timeout_s`` (``"execution_timeout"``: the task is
cancelled and its actor replaced) are reported per rollout in ``GroupExecution.causes``, logged
with ``logging.warning``, and counted (and subject to the stop rule) by the wrapper's
:class:`~wmrl_envs.core.UngradedMonitor` when the scorer completes the group.

Ray is an optional dependency: importing this module works without it, building a pool
raises ``ImportError`` with the install command.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import gymnasium as gym

from wmrl_envs.core import EXECUTION, CostLedger
from wmrl_envs.core.group import real_score
from wmrl_envs.core.ledger import Stopwatch, execution_cpu_seconds, reported_execution_cost
from wmrl_envs.wrappers.rollout_streams import seed_rollout
from wmrl_envs.core.ungraded import (
    EXECUTION_ERROR,
    EXECUTION_TIMEOUT,
    SANDBOX_UNAVAILABLE,
    WORKER_LOST,
)

logger = logging.getLogger(__name__)

__all__ = ["RayExecutionPool", "GroupExecution", "GroupExecutionFuture", "ExecutionWorker"]
# AsyncAnchoredScorer and PendingGroup live in .scorer (wmrl_envs.distributed exports both)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as e:  # pragma: no cover - exercised only without ray
        raise ImportError(
            "RayExecutionPool needs Ray: install it with `pip install ray` (or `pip install \"ray[default]\"` "
            "for the dashboard and cluster tooling)"
        ) from e
    return ray


class ExecutionWorker:
    """The body of one Ray actor: one env instance, executions one at a time.

    Args:
        env_fn: builds the env (called once, inside the actor's process).
        worker_id: index of the worker in its pool.
    """

    def __init__(self, env_fn: Callable[[], gym.Env], worker_id: int) -> None:
        import wmrl_envs  # noqa: F401  (registers the wmrl/* env ids inside the worker process)

        self.env = env_fn()
        self.worker_id = int(worker_id)
        self.ledger = CostLedger()

    def execute(self, action: Any, seed: int | None, options: dict[str, Any] | None, rollout: int = 0) -> dict[str, Any]:
        """``reset(seed, options)`` then ``step(action)``; never raises.

        A seeded reset gives the env the group's task and rollout ``rollout``'s own random stream
        (:func:`~wmrl_envs.wrappers.rollout_streams.seed_rollout`), as ``score_group`` does.

        Returns:
            ``{"observation", "reward" (the real score, :func:`~wmrl_envs.core.group.real_score`:
            ``info["step_score"]`` where the env reports one, else the reward; None = ungraded), "info" (dict), "seconds" (float,
            wall-clock of the step), "cpu_seconds" (float, or None: not measured), "worker"
            (int), "pid" (int), "error" (str or None), "cause" (why it is ungraded, see
            :mod:`wmrl_envs.core.ungraded`, or None)}``. ``cpu_seconds`` is the env's
            ``info["execution_cpu_s"]`` when it reports one, else the CPU this actor's process
            (and the children it waited for) used during the step: exact, as an actor runs
            one execution at a time.
        """
        from wmrl_envs.sandbox.base import SandboxUnavailableError

        sw = Stopwatch()
        try:
            self.env.reset(seed=seed, options=options)
            seed_rollout(self.env, seed, rollout)
            sw.restart()
            obs, reward, _term, _trunc, info = self.env.step(action)
            dt, cpu = sw.read()
            info = dict(info)
            cpu = execution_cpu_seconds(info, cpu)
            price = reported_execution_cost(info)  # an invalid price fails the rollout here, with its reason
            # the real score: info["step_score"] where the env reports one, else the reward
            out_reward, cause, error = real_score(reward, info)
        except Exception as e:  # a crashed execution is an ungraded rollout, not a dead worker
            dt, cpu = sw.read()
            price = None
            obs, out_reward, info, error = None, None, {}, f"{type(e).__name__}: {e}"
            cause = SANDBOX_UNAVAILABLE if isinstance(e, SandboxUnavailableError) else EXECUTION_ERROR
        self.ledger.add(EXECUTION, dt, 1, cpu_seconds=cpu, cost=price)
        return {
            "observation": obs,
            "reward": out_reward,
            "info": info,
            "seconds": dt,
            "cpu_seconds": cpu,
            "worker": self.worker_id,
            "pid": os.getpid(),
            "error": error,
            "cause": cause,
        }

    def ledger_state(self) -> dict[str, Any]:
        """This worker's :class:`CostLedger` state (``{source: {"count", "seconds", "cpu_seconds", "cpu_unmeasured"}}``)."""
        return self.ledger.state_dict()

    def ping(self) -> int:
        """Returns the worker id (used to wait until the actor is up)."""
        return self.worker_id


@dataclass
class GroupExecution:
    """The real executions of one group (lists of length G, in the order of the actions).

    Attributes:
        rewards: real scores (float) or ``None`` (ungraded: the env said ``graded=False``,
            the step raised, the worker died, or the execution timed out).
        observations: observations after the step (``None`` where it failed).
        infos: the env's info dicts (``{}`` where it failed).
        seconds: wall-clock seconds of each step, measured in the worker.
        cpu_seconds: CPU-seconds of each step (the env's ``info["execution_cpu_s"]``, else
            measured in the worker), ``None`` where not measured (the execution failed to
            report: timed out, worker lost). A price an env reports per execution
            (``info["execution_cost"]``, for ``cost_basis="per_call"``) stays in ``infos`` and is
            charged from there; an invalid one leaves the rollout ungraded (``execution_error``).
        workers: index of the worker that ran each rollout (-1 if unknown).
        errors: error text per rollout, ``None`` when it ran.
        wall_seconds: seconds from submission to the moment the results were collected.
        causes: per rollout, why it is ungraded (``"sandbox_unavailable"``,
            ``"execution_error"``, ``"worker_lost"``, ``"execution_timeout"``, the env's
            ``info["ungraded_cause"]``...) or ``None`` when graded.
    """

    rewards: list[float | None]
    observations: list[Any]
    infos: list[dict[str, Any]]
    seconds: list[float]
    workers: list[int]
    errors: list[str | None]
    wall_seconds: float = 0.0
    causes: list[str | None] = field(default_factory=list)
    cpu_seconds: list[float | None] = field(default_factory=list)

    def reported_costs(self) -> list[float | None]:
        """The price each rollout's env reported (``infos[i]["execution_cost"]``, checked in the worker), ``None``
        where it reported none (G entries)."""
        if len(self.infos) != len(self.seconds):
            return [None] * len(self.seconds)
        return [reported_execution_cost(i) if isinstance(i, Mapping) else None for i in self.infos]


class GroupExecutionFuture:
    """Handle of a group submitted with :meth:`RayExecutionPool.execute_group`.

    ``done()`` never blocks; ``result()`` blocks (up to ``timeout`` seconds) and records the
    executions in the pool's ledger exactly once.

    With the pool's ``execution_timeout_s``, rollout ``i`` has a deadline of
    ``submitted_at + execution_timeout_s * (executions queued before it on its worker + 1)``;
    past it, ``done()`` is ``True`` and ``result()`` cancels the task, replaces its actor (a
    running actor task cannot be interrupted; other executions queued on that actor are then
    lost too, cause ``"worker_lost"``) and reports the rollout ungraded.
    """

    def __init__(
        self, pool: "RayExecutionPool", refs: list[Any], workers: list[int], deadlines: list[float | None] | None = None,
        actors: list[Any] | None = None,
    ) -> None:
        self._pool = pool
        self.refs = refs
        self.assigned_workers = workers
        self._actors = list(actors) if actors is not None else [None] * len(refs)
        self.submitted_at = time.perf_counter()
        self.deadlines = list(deadlines) if deadlines is not None else [None] * len(refs)
        self._result: GroupExecution | None = None

    def _overdue(self, ready: set[Any]) -> list[int]:
        now = time.perf_counter()
        return [k for k, (r, d) in enumerate(zip(self.refs, self.deadlines)) if r not in ready and d is not None and now >= d]

    def done(self) -> bool:
        """``True`` when every rollout of the group has finished (non-blocking)."""
        if self._result is not None:
            return True
        ready, _ = self._pool.ray.wait(self.refs, num_returns=len(self.refs), timeout=0, fetch_local=False)
        return len(ready) == len(self.refs) or len(ready) + len(self._overdue(set(ready))) == len(self.refs)

    def result(self, timeout: float | None = None) -> GroupExecution:
        """The group's :class:`GroupExecution` (blocks until done).

        Raises:
            TimeoutError: not done within ``timeout`` seconds (the executions go on; the pool's
                ``execution_timeout_s`` is what ends an execution).
        """
        if self._result is not None:
            return self._result
        ray = self._pool.ray
        t_end = None if timeout is None else time.perf_counter() + timeout
        while True:
            ready, _ = ray.wait(self.refs, num_returns=len(self.refs), timeout=0, fetch_local=False)
            ready_set = set(ready)
            overdue = self._overdue(ready_set)
            if len(ready) + len(overdue) == len(self.refs):
                break
            pending_deadlines = [d for r, d in zip(self.refs, self.deadlines) if r not in ready_set and d is not None]
            stops = [x for x in (t_end, min(pending_deadlines) if pending_deadlines else None) if x is not None]
            wait_s = None if not stops else max(0.0, min(stops) - time.perf_counter())
            if t_end is not None and time.perf_counter() >= t_end:
                raise TimeoutError(
                    f"group execution not done after {timeout} s ({len(ready)}/{len(self.refs)} rollouts)"
                )
            pending = [r for r in self.refs if r not in ready_set]
            ray.wait(pending, num_returns=len(pending), timeout=wait_s, fetch_local=False)
        timed_out = set(overdue)
        for k in sorted(timed_out):
            self._pool.abandon_execution(self.refs[k], self.assigned_workers[k], self._actors[k])
        outs: list[dict[str, Any]] = []
        for k, (ref, w) in enumerate(zip(self.refs, self.assigned_workers)):
            if k in timed_out:
                limit = self._pool.execution_timeout_s
                outs.append(_failed(w, EXECUTION_TIMEOUT, f"no result within execution_timeout_s={limit:g} s; cancelled"))
                continue
            try:
                outs.append(ray.get(ref))
            except Exception as e:  # the actor died (RayActorError) or the task failed
                lost = isinstance(e, (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError))
                if isinstance(e, ray.exceptions.TaskCancelledError):
                    outs.append(_failed(w, EXECUTION_TIMEOUT, f"{type(e).__name__}: {e}"))
                else:
                    outs.append(_failed(w, WORKER_LOST if lost else EXECUTION_ERROR, f"{type(e).__name__}: {e}"))
                if lost:
                    self._pool.replace_worker(w, self._actors[k])
        causes = [o.get("cause") for o in outs]
        failed = [(c, o["error"]) for c, o in zip(causes, outs) if c is not None]
        if failed:
            logger.warning(
                "Ray executions: %d of %d rollouts of a group ungraded (%s)", len(failed), len(outs),
                "; ".join(f"{c}: {e}" for c, e in failed[:3]),
            )
        res = GroupExecution(
            rewards=[o["reward"] for o in outs],
            observations=[o["observation"] for o in outs],
            infos=[o["info"] for o in outs],
            seconds=[float(o["seconds"]) for o in outs],
            workers=[int(o["worker"]) for o in outs],
            errors=[o["error"] for o in outs],
            wall_seconds=time.perf_counter() - self.submitted_at,
            causes=causes,
            cpu_seconds=[o.get("cpu_seconds") for o in outs],
        )
        self._pool.settle(self, res)
        self._result = res
        return res


def _cpu_list(res: GroupExecution) -> list[float | None]:
    """``res.cpu_seconds``, or ``None`` per rollout for a :class:`GroupExecution` built without it."""
    return list(res.cpu_seconds) if len(res.cpu_seconds) == len(res.seconds) else [None] * len(res.seconds)


def _failed(worker: int, cause: str, error: str) -> dict[str, Any]:
    """The result record of a rollout whose execution produced nothing."""
    return {"observation": None, "reward": None, "info": {}, "seconds": 0.0, "cpu_seconds": None, "worker": worker,
            "pid": -1, "error": error, "cause": cause}


class RayExecutionPool:
    """A pool of Ray actors that execute rollouts of an expensive env, asynchronously.

    Args:
        env_fn: builds one env (e.g. ``functools.partial(AutoResearchEnv, tasks="train")``);
            it is pickled to the workers, so on a multi-node cluster its module must be
            importable there (a lambda or a closure defined in ``__main__`` is shipped by value).
        num_workers: number of actors (each holds one env and runs one execution at a time).
        ledger: the :class:`~wmrl_envs.core.CostLedger` that gets each execution's seconds
            (source ``"execution"``, count 1 per rollout) when a group's results are collected
            (default: a new one; pass the wrapper's ledger to keep one account).
        num_cpus_per_worker: CPUs Ray reserves per actor (float; e.g. 1 for a one-core sandbox).
        actor_options: more ``ActorClass.options(...)`` keyword arguments (``resources``,
            ``runtime_env``, ``scheduling_strategy``, ``max_restarts`` ...).
        ray_init_kwargs: keyword arguments for ``ray.init`` when Ray is not initialised yet
            (e.g. ``{"address": "auto"}`` on a cluster; default: a local instance).
        wait_ready: block until every actor has built its env (fail fast on a bad ``env_fn``).
        execution_timeout_s: seconds one execution may take on its actor (``None``: no limit);
            see :class:`GroupExecutionFuture` for how the deadline is counted and what happens
            past it. Set it above the env's own limit (e.g. the sandbox's ``wall_time_s`` plus
            its clean-up), so that it only catches a hung or lost worker.

    Attributes:
        ledger: the pool's ledger; ``num_workers``; ``n_submitted``/``n_completed`` (rollouts).

    Raises:
        ImportError: Ray is not installed.
        ValueError: ``num_workers < 1`` or ``execution_timeout_s <= 0``.

    Example:
        >>> from functools import partial
        >>> from wmrl_envs.envs.guess import GuessEnv
        >>> pool = RayExecutionPool(partial(GuessEnv), num_workers=2)   # doctest: +SKIP
        >>> fut = pool.execute_group([[0.2], [0.4]], options={"target": 0.3})  # doctest: +SKIP
        >>> fut.result().rewards                                          # doctest: +SKIP
        [0.9, 0.9]
    """

    def __init__(
        self,
        env_fn: Callable[[], gym.Env],
        num_workers: int = 2,
        *,
        ledger: CostLedger | None = None,
        num_cpus_per_worker: float = 1.0,
        actor_options: dict[str, Any] | None = None,
        ray_init_kwargs: dict[str, Any] | None = None,
        wait_ready: bool = True,
        execution_timeout_s: float | None = None,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if execution_timeout_s is not None and not execution_timeout_s > 0:
            raise ValueError(f"execution_timeout_s must be > 0 seconds or None (no limit), got {execution_timeout_s!r}")
        self.execution_timeout_s = None if execution_timeout_s is None else float(execution_timeout_s)
        ray = _import_ray()
        self._ray = ray
        if not ray.is_initialized():
            ray.init(**(ray_init_kwargs or {}))
        self.num_workers = int(num_workers)
        self.ledger = ledger if ledger is not None else CostLedger()
        opts = {"num_cpus": num_cpus_per_worker, **(actor_options or {})}
        actor_cls = ray.remote(ExecutionWorker).options(**opts)
        self._actor_cls = actor_cls
        self._env_fn = env_fn
        self.n_replaced_workers = 0
        self._workers = [actor_cls.remote(env_fn, w) for w in range(self.num_workers)]
        self._inflight: dict[Any, int] = {}  # ObjectRef -> worker index, until it finishes
        self._load = [0] * self.num_workers
        self.n_submitted = 0
        self.n_completed = 0
        self._closed = False
        if wait_ready:
            ray.get([w.ping.remote() for w in self._workers])

    # ------------------------------------------------------------------ submission
    @property
    def ray(self) -> Any:
        """The ``ray`` module the pool runs on (imported when the pool was built)."""
        return self._ray

    def _refresh_load(self) -> None:
        if not self._inflight:
            return
        refs = list(self._inflight)
        ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        for r in ready:
            w = self._inflight.pop(r)
            self._load[w] = max(0, self._load[w] - 1)

    def execute_group(
        self, actions: Sequence[Any], *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> GroupExecutionFuture:
        """Submit a group's G rollouts (``reset(seed, options)`` + ``step(action)`` each); returns at once.

        Rollouts go to the least-loaded workers (executions queued per actor, not yet finished).
        With a seed, rollout ``i`` steps with its own random stream
        (:func:`~wmrl_envs.wrappers.rollout_streams.rollout_rng` ``(seed, i)``), as in ``score_group``.

        Args:
            actions: the G actions (one per rollout).
            seed, options: reset arguments shared by the group.

        Returns:
            A :class:`GroupExecutionFuture`.

        Raises:
            ValueError: empty ``actions``.
            RuntimeError: the pool is closed.
        """
        if self._closed:
            raise RuntimeError("the pool is closed")
        if len(actions) == 0:
            raise ValueError("execute_group() needs at least one action")
        self._refresh_load()
        refs, workers, deadlines, actors = [], [], [], []
        now = time.perf_counter()
        for i, a in enumerate(actions):
            w = min(range(self.num_workers), key=lambda j: (self._load[j], j))
            actors.append(self._workers[w])
            ref = self._workers[w].execute.remote(a, seed, options, i)  # rollout i: its own random stream
            if self.execution_timeout_s is not None:  # it waits for the executions queued before it
                deadlines.append(now + self.execution_timeout_s * (self._load[w] + 1))
            else:
                deadlines.append(None)
            self._inflight[ref] = w
            self._load[w] += 1
            refs.append(ref)
            workers.append(w)
        self.n_submitted += len(actions)
        return GroupExecutionFuture(self, refs, workers, deadlines, actors)

    def abandon_execution(self, ref: Any, w: int, actor: Any = None) -> None:
        """An execution past its deadline (Ray ``ObjectRef`` ``ref`` on worker slot ``w``): cancel
        it and replace its actor (a running actor task cannot be interrupted)."""
        try:
            self._ray.cancel(ref)
        except Exception:  # noqa: BLE001 - already finished or the actor is gone
            pass
        self.replace_worker(w, actor)

    def replace_worker(self, w: int, actor: Any = None) -> None:
        """Kill actor ``w`` (if alive) and start a fresh one in its slot; its queued work is lost.

        ``actor``: the handle the failed execution ran on; when slot ``w`` already holds another
        one (replaced for an earlier failure), nothing is done.
        """
        old = self._workers[w]
        if actor is not None and actor is not old:
            return
        try:
            self._ray.kill(old, no_restart=True)
        except Exception:  # noqa: BLE001 - already dead
            pass
        self._workers[w] = self._actor_cls.remote(self._env_fn, w)
        self._load[w] = 0
        for ref in [r for r, j in self._inflight.items() if j == w]:
            del self._inflight[ref]
        self.n_replaced_workers += 1
        logger.warning("Ray execution worker %d replaced (hung past its time-out or lost)", w)

    def settle(self, fut: GroupExecutionFuture, res: GroupExecution) -> None:
        """A future's executions are over: free their worker slots, add their seconds and
        CPU-seconds to the ledger (an execution that reported none counts as unmeasured)."""
        for ref in fut.refs:
            w = self._inflight.pop(ref, None)
            if w is not None:
                self._load[w] = max(0, self._load[w] - 1)
        for dt, cpu, price in zip(res.seconds, _cpu_list(res), res.reported_costs()):
            self.ledger.add(EXECUTION, dt, 1, cpu_seconds=cpu, cost=price)
        self.n_completed += len(res.seconds)

    def wait(
        self, futures: Iterable[GroupExecutionFuture], num_returns: int = 1, timeout: float | None = None
    ) -> tuple[list[GroupExecutionFuture], list[GroupExecutionFuture]]:
        """Block until ``num_returns`` of ``futures`` are done (or ``timeout`` seconds pass).

        Returns:
            ``(done, pending)`` lists of futures (``done`` may be shorter on timeout).
        """
        futures = list(futures)
        deadline = None if timeout is None else time.perf_counter() + timeout
        while True:
            done = [f for f in futures if f.done()]
            pending = [f for f in futures if not f.done()]
            if len(done) >= min(num_returns, len(futures)) or not pending:
                return done, pending
            left = None if deadline is None else deadline - time.perf_counter()
            if left is not None and left <= 0:
                return done, pending
            refs = [r for f in pending for r in f.refs]
            self._ray.wait(refs, num_returns=1, timeout=left if left is None else max(left, 0.0), fetch_local=False)

    # ------------------------------------------------------------------ accounting / lifecycle
    def worker_ledger(self) -> CostLedger:
        """The actors' own ledgers merged into one (every execution they ran, collected or not)."""
        total = CostLedger()
        for state in self._ray.get([w.ledger_state.remote() for w in self._workers]):
            part = CostLedger()
            part.load_state_dict(state)
            total.merge(part)
        return total

    def close(self) -> None:
        """Kill the actors (Ray itself keeps running; pending executions are lost)."""
        if self._closed:
            return
        for w in self._workers:
            try:
                self._ray.kill(w)
            except Exception:
                pass
        self._closed = True

    def __enter__(self) -> "RayExecutionPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


