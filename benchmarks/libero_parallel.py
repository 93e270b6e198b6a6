"""A group's LIBERO-Long episodes in G parallel processes against one process stepping them in turn.

Side by side in one run, ``--repeats`` times (alternating): G episodes of ``--steps`` policy steps
from one initial state (random actions), either serially in one ``LiberoEnv`` or together in
``make_libero_vector_env(G)`` (Gymnasium ``AsyncVectorEnv``, one simulator per process). Prints,
per mode, env steps per second of wall-clock, CPU-seconds (this process and its children) per
env step, the peak resident memory of the simulator processes, and the speed-up with its range
over repeats. Construction is timed separately (not in the rates). Needs the ``libero`` extra.

    .venv/bin/python benchmarks/libero_parallel.py                  # G=2, 40 steps, 3 repeats (~3 min, 2 cores)
    .venv/bin/python benchmarks/libero_parallel.py --group-size 8   # on a machine with >= 8 cores and 16 GB
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def cpu_seconds(proc) -> float:
    """CPU-seconds of ``proc`` (psutil) and its live children."""
    total = sum(proc.cpu_times()[:2])
    for c in proc.children(recursive=True):
        try:
            total += sum(c.cpu_times()[:2])
        except Exception:  # noqa: BLE001 - a child that ended meanwhile
            pass
    return total


def peak_rss_mb(pids) -> float:
    """Peak resident set (VmHWM) of the given processes, MiB, summed."""
    out = 0.0
    for pid in pids:
        try:
            for line in open(f"/proc/{pid}/status"):
                if line.startswith("VmHWM:"):
                    out += int(line.split()[1]) / 1024
        except OSError:
            pass
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--group-size", type=int, default=2, help="G, episodes (and processes)")
    p.add_argument("--steps", type=int, default=40, help="policy steps per episode")
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--task-id", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default="runs/libero_parallel.json")
    a = p.parse_args()

    import numpy as np
    import psutil

    from wmrl_envs.envs.libero import LiberoEnv
    from wmrl_envs.envs.libero.vector import make_libero_vector_env, rollout_group

    me = psutil.Process()
    g, kw = a.group_size, {"image_size": a.image_size, "max_steps": a.steps}
    t0 = time.perf_counter()
    serial = LiberoEnv(a.task_id, **kw)
    build_serial = time.perf_counter() - t0
    t0 = time.perf_counter()
    vec = make_libero_vector_env(g, a.task_id, **kw)
    vec.reset(options={"init_state_id": 0})
    build_vec = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    rates: dict[str, list[tuple[float, float]]] = {"serial (1 process)": [], f"parallel ({g} processes)": []}
    for rep in range(a.repeats):
        for mode in rates:
            c0, t0 = cpu_seconds(me), time.perf_counter()
            if mode.startswith("serial"):
                steps = 0
                for _ in range(g):
                    serial.reset(options={"init_state_id": rep})
                    for _ in range(a.steps):
                        _, _, term, trunc, _ = serial.step(rng.uniform(-1, 1, 7))
                        steps += 1
                        if term or trunc:
                            break
            else:
                res = rollout_group(vec, lambda o, m: rng.uniform(-1, 1, size=(g, 7)), rep)
                steps = sum(r["steps"] for r in res)
            wall, cpu = time.perf_counter() - t0, cpu_seconds(me) - c0
            rates[mode].append((steps / wall, cpu / steps))
        print(f"repeat {rep + 1}/{a.repeats}: " + ", ".join(f"{k} {v[-1][0]:.1f} steps/s" for k, v in rates.items()), flush=True)
    rss_vec = peak_rss_mb([c.pid for c in me.children(recursive=True)])
    rss_serial = peak_rss_mb([me.pid])
    vec.close()
    serial.close()
    names = list(rates)
    speedups = [par[0] / ser[0] for ser, par in zip(rates[names[0]], rates[names[1]])]
    res = {"group_size": g, "steps": a.steps, "image_size": a.image_size, "repeats": a.repeats,
           "cpu_count": psutil.cpu_count(), "build_s": {"serial": build_serial, "parallel": build_vec},
           "steps_per_s": {k: [x for x, _ in v] for k, v in rates.items()},
           "cpu_s_per_step": {k: [y for _, y in v] for k, v in rates.items()},
           "speedup": speedups, "peak_rss_mb": {"serial process": rss_serial, "parallel processes (sum)": rss_vec}}
    print(f"\n{g} episodes x {a.steps} steps, {a.image_size} px, {psutil.cpu_count()} CPUs, {a.repeats} repeats (median [min, max]):")
    for k, v in rates.items():
        s, c = [x for x, _ in v], [y for _, y in v]
        print(f"  {k:22s} {statistics.median(s):6.1f} steps/s [{min(s):.1f}, {max(s):.1f}]   "
              f"{1e3 * statistics.median(c):6.1f} CPU-ms per step")
    print(f"  speed-up {statistics.median(speedups):.2f}x [{min(speedups):.2f}, {max(speedups):.2f}]; "
          f"construction {build_serial:.1f} s (1 env) vs {build_vec:.1f} s ({g} processes, with the first reset); "
          f"peak RSS {rss_serial:.0f} MB (serial process) vs {rss_vec:.0f} MB ({g} processes)")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
