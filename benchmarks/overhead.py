"""What do the WMRL wrappers cost per step, and how many executions per second does Ray add?

Prints, side by side in one run:

1. wrapper overhead on a cheap env (``GuessEnv``, a one-step episode with no execution cost):
   the bare env against the per-episode :class:`~wmrl_envs.AnchoredWorldModelWrapper`, and a
   bare ``SyncVectorEnv`` against the vector twin
   :class:`~wmrl_envs.wrappers.vector.AnchoredWorldModelVectorWrapper` (outcome mode with the
   per-sub-env route switch, and reward mode), in microseconds per env step (one episode =
   reset + step for the per-episode API; one sub-env step for the vector envs). The world
   model is a trivial echo (no inference cost), so the figures are the wrappers' bookkeeping:
   routing, corrections, ledger, infos. On world-model routes outcome mode skips the inner
   step, which on an expensive env is the saving; here the inner step costs nothing.
2. real executions per second on a local Ray cluster with 1 and 2 :class:`RayExecutionPool`
   workers, against the same executions run serially in this process; each execution is a
   ``GuessEnv`` step followed by real CPU work (``BusyGuessEnv``: ``--exec-work`` iterations of
   a pure-Python arithmetic loop, single-threaded, the same work in every variant; nothing
   sleeps), submitted in
   groups of ``--group-size``; actor start-up is excluded (pools are warmed up first).

    .venv/bin/python benchmarks/overhead.py                  # ~1 minute on 2 cores
    .venv/bin/python benchmarks/overhead.py --no-ray --episodes 5000
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial
from typing import Any, Callable

import numpy as np
from wmrl_envs.core import CorrectionConfig


class EchoWM:
    """World model with no cost: the action's first component as the score."""

    def predict(self, contexts, actions):
        from wmrl_envs.world_models import Trajectory, WorldModelPrediction

        out = []
        for a in actions:
            if isinstance(a, Trajectory):
                a = a.actions[-1]
            out.append(WorldModelPrediction(score=float(np.asarray(a).reshape(-1)[0])))
        return out


def _per_step_us(fn: Callable[[], int], min_seconds: float) -> float:
    """Run ``fn`` (returns env steps done) repeatedly for ``min_seconds``; µs per env step."""
    steps = 0
    t0 = time.perf_counter()
    while True:
        steps += fn()
        dt = time.perf_counter() - t0
        if dt >= min_seconds:
            return 1e6 * dt / steps


def bench_wrappers(episodes: int, num_envs: int, group_size: int, fraction: float, min_seconds: float, use_async: bool) -> list[tuple[str, float, float]]:
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.envs.guess import GuessEnv
    from wmrl_envs.wrappers import AnchoredWorldModelVectorWrapper, make_vector_env

    rng = np.random.default_rng(0)
    acts = rng.random((episodes, 1)).astype(np.float32)
    rows: list[tuple[str, float, float]] = []

    # ---- per-episode API
    bare = GuessEnv()

    def run_bare() -> int:
        for k in range(episodes):
            bare.reset(options={"target": 0.5})
            bare.step(acts[k])
        return episodes

    wrapped = AnchoredWorldModelWrapper(GuessEnv(), EchoWM(), correction=CorrectionConfig(anchor_fraction=fraction), group_size=group_size)

    def run_wrapped() -> int:
        for k in range(episodes):
            wrapped.reset(options={"target": 0.5} if k % group_size == 0 else None)  # a group's first episode
            wrapped.step(acts[k])
        return episodes

    base = _per_step_us(run_bare, min_seconds)
    rows.append(("per-episode: bare GuessEnv (reset+step)", base, 0.0))
    us = _per_step_us(run_wrapped, min_seconds)
    rows.append((f"per-episode: AnchoredWorldModelWrapper (f={fraction}, G={group_size})", us, us - base))

    # ---- vector envs
    steps = max(1, episodes // num_envs)
    vacts = rng.random((steps, num_envs, 1)).astype(np.float32)
    kinds = [("sync", SyncVectorEnv)] + ([("async", AsyncVectorEnv)] if use_async else [])

    def stepping(v: Any) -> Callable[[], int]:
        """A timed repetition: ``steps`` vector steps of ``v``; returns the env steps taken."""
        def run() -> int:
            for s in range(steps):
                v.step(vacts[s])
            return steps * num_envs
        return run

    for name, cls in kinds:
        venv = cls([GuessEnv] * num_envs, autoreset_mode=AutoresetMode.NEXT_STEP)
        venv.reset(seed=0)
        vbase = _per_step_us(stepping(venv), min_seconds)
        venv.close()
        rows.append((f"vector ({name}, {num_envs} envs): bare", vbase, 0.0))
        for mode in ("outcome", "reward"):
            venv = make_vector_env(GuessEnv, num_envs, vectorization=name, autoreset_mode=AutoresetMode.NEXT_STEP)
            env = AnchoredWorldModelVectorWrapper(
                venv, EchoWM(), correction=CorrectionConfig(anchor_fraction=fraction), group_size=group_size, mode=mode,
                task_fn=lambda k, n: (None, {"target": 0.5}),
            )
            env.reset(seed=0)
            us = _per_step_us(stepping(env), min_seconds)
            env.close()
            rows.append((f"vector ({name}, {num_envs} envs): vector twin, {mode} mode", us, us - vbase))
    return rows


def busy_work(rounds: int) -> float:
    """Real CPU work of one execution: ``rounds`` iterations of a pure-Python arithmetic loop
    (one thread; returns a checksum so that the work is used)."""
    acc = 0
    for i in range(int(rounds)):
        acc = (acc + i * i) % 1_000_003
    return float(acc)


def _busy_guess_env(rounds: int) -> Any:
    """A ``GuessEnv`` whose step also does :func:`busy_work` (a module-level factory: Ray ships it)."""
    from wmrl_envs.envs.guess import GuessEnv

    class BusyGuessEnv(GuessEnv):
        def step(self, action):
            busy_work(rounds)
            return super().step(action)

    return BusyGuessEnv()


def bench_ray(exec_work: int, executions: int, group_size: int, workers: list[int]) -> list[tuple[str, float, float]]:
    import ray

    from wmrl_envs.distributed import RayExecutionPool

    rows: list[tuple[str, float, float]] = []
    acts = [np.array([0.5], np.float32)] * group_size
    n_groups = max(1, executions // group_size)

    env = _busy_guess_env(exec_work)
    t0 = time.perf_counter()
    for _ in range(n_groups):
        for a in acts:
            env.reset(options={"target": 0.3})
            env.step(a)
    dt = time.perf_counter() - t0
    rows.append(("serial, in process", n_groups * group_size / dt, 1.0))
    serial_rate = n_groups * group_size / dt

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=max(workers), include_dashboard=False, log_to_driver=False)
    try:
        for nw in workers:
            pool = RayExecutionPool(partial(_busy_guess_env, exec_work), num_workers=nw)
            pool.execute_group(acts, options={"target": 0.3}).result()  # warm-up
            t0 = time.perf_counter()
            futs = [pool.execute_group(acts, options={"target": 0.3}) for _ in range(n_groups)]
            submit = time.perf_counter() - t0
            for f in futs:
                f.result()
            dt = time.perf_counter() - t0
            rate = n_groups * group_size / dt
            rows.append((f"Ray pool, {nw} worker(s) (submit took {1e3 * submit:.1f} ms)", rate, rate / serial_rate))
            pool.close()
    finally:
        if started:
            ray.shutdown()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=2000, help="env steps per timed repetition")
    ap.add_argument("--min-seconds", type=float, default=2.0, help="time each variant at least this long")
    ap.add_argument("--num-envs", type=int, default=8, help="sub-envs of the vector envs")
    ap.add_argument("--group-size", type=int, default=4, help="G")
    ap.add_argument("--anchor-fraction", type=float, default=0.1)
    ap.add_argument("--async", dest="use_async", action="store_true", help="also time AsyncVectorEnv")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray part")
    ap.add_argument("--exec-work", type=int, default=300_000,
                    help="iterations of real CPU work per execution (Ray part; ~20 CPU-ms on one core here)")
    ap.add_argument("--executions", type=int, default=64, help="executions per Ray measurement")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="Ray pool sizes")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    rows = bench_wrappers(args.episodes, args.num_envs, args.group_size, args.anchor_fraction, args.min_seconds, args.use_async)
    print("\nWrapper overhead on GuessEnv (no execution cost; echo world model)")
    print(f"{'variant':<62} {'µs/step':>10} {'overhead':>10}")
    for name, us, extra in rows:
        print(f"{name:<62} {us:>10.1f} {('+%.1f' % extra) if extra else '':>10}")
    if not args.no_ray:
        t0 = time.process_time()
        busy_work(args.exec_work)
        cpu_ms = 1e3 * (time.process_time() - t0)
        rrows = bench_ray(args.exec_work, args.executions, args.group_size, args.workers)
        print(f"\nReal executions per second ({args.exec_work} iterations of CPU work per execution, "
              f"{cpu_ms:.0f} CPU-ms measured once here; {args.executions} executions in groups of {args.group_size})")
        print(f"{'variant':<62} {'exec/s':>10} {'speed-up':>10}")
        for name, rate, sp in rrows:
            print(f"{name:<62} {rate:>10.2f} {sp:>9.2f}x")
        print(f"(ideal: {1e3 / max(cpu_ms, 1e-9):.1f} exec/s per worker; {os.cpu_count()} CPU cores on this machine)")


if __name__ == "__main__":
    main()
