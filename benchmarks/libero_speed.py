"""How fast is the LIBERO-Long simulator on this machine? (``LiberoEnv``, the paper's VLA protocol (``docs/method.md``, "Reward mode"))

Measures, for each configuration, the construction time, the reset time (fixed initial state
+ the 10 wait steps + the first observation), policy steps per second, the estimated seconds
of one full 520-step episode, and the process memory (resident set after the run and peak),
printed side by side. Configurations:

    images      agentview + wrist cameras at --image-size px, MuJoCo 4x multisampling (LIBERO's look)
    images-noms the same with multisampling off (``multisample=False``)
    proprio     no cameras (``images=False``): physics + controller only

Each configuration runs in its own subprocess, one after another (one simulator process at a
time; clean memory figures). Needs the ``libero`` extra and headless GL (MUJOCO_GL=egl).

    .venv/bin/python benchmarks/libero_speed.py                     # ~1.5-3 min on 2 cores
    .venv/bin/python benchmarks/libero_speed.py --steps 100 --task-id 3 --image-size 224
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

CONFIGS = {
    "images": {"images": True, "multisample": True},
    "images-noms": {"images": True, "multisample": False},
    "proprio": {"images": False, "multisample": True},
}
ROOT = Path(__file__).resolve().parents[1]


def _memory_mb() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in MiB, from /proc/self/status."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = float(value.split()[0]) / 1024
    return fields.get("VmRSS", float("nan")), fields.get("VmHWM", float("nan"))


def worker(config: str, task_id: int, image_size: int, steps: int, resets: int, seed: int) -> dict:
    """Run one configuration in this process; return its figures."""
    import numpy as np

    from wmrl_envs.envs.libero import LiberoEnv

    t0 = time.perf_counter()
    env = LiberoEnv(task_id, image_size=image_size, **CONFIGS[config])
    construct_s = time.perf_counter() - t0
    reset_s = []
    for i in range(resets):
        t0 = time.perf_counter()
        env.reset(options={"init_state_id": i % env.n_init_states})
        reset_s.append(time.perf_counter() - t0)
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-0.5, 0.5, size=(steps, 7)).astype(np.float32)
    step_s = []
    for a in actions:
        t0 = time.perf_counter()
        _, _, term, trunc, _ = env.step(a)
        step_s.append(time.perf_counter() - t0)
        if term or trunc:
            env.reset(options={"init_state_id": 0})
    rss, peak = _memory_mb()
    env.close()
    step_mean = float(np.mean(step_s))
    return {
        "config": config,
        "construct_s": construct_s,
        "reset_s": float(np.mean(reset_s)),
        "reset_first_s": reset_s[0],
        "step_ms": 1000 * step_mean,
        "step_p90_ms": 1000 * float(np.percentile(step_s, 90)),
        "steps_per_s": 1.0 / step_mean,
        "episode_s": float(np.mean(reset_s)) + 520 * step_mean,
        "rss_mb": rss,
        "peak_rss_mb": peak,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task-id", type=int, default=0, help="libero_10 task (0-9)")
    ap.add_argument("--image-size", type=int, default=128, help="camera side in pixels")
    ap.add_argument("--steps", type=int, default=50, help="timed policy steps per configuration")
    ap.add_argument("--resets", type=int, default=4, help="timed resets per configuration")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also write the figures as JSON here")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        res = worker(args.worker, args.task_id, args.image_size, args.steps, args.resets, args.seed)
        print("RESULT " + json.dumps(res))
        return

    results = []
    for config in args.configs:
        cmd = [sys.executable, __file__, "--worker", config, "--task-id", str(args.task_id),
               "--image-size", str(args.image_size), "--steps", str(args.steps), "--resets", str(args.resets),
               "--seed", str(args.seed)]
        print(f"[libero_speed] running {config} ...", file=sys.stderr, flush=True)
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
        if out.returncode != 0 or not lines:
            sys.exit(f"{config} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
        results.append(json.loads(lines[-1][len("RESULT "):]))

    rows = [
        ("construct (s)", "construct_s", "{:.1f}"),
        ("reset (s)", "reset_s", "{:.2f}"),
        ("first reset (s)", "reset_first_s", "{:.2f}"),
        ("step (ms)", "step_ms", "{:.1f}"),
        ("step p90 (ms)", "step_p90_ms", "{:.1f}"),
        ("steps / s", "steps_per_s", "{:.1f}"),
        ("520-step episode (s)", "episode_s", "{:.1f}"),
        ("RSS (MiB)", "rss_mb", "{:.0f}"),
        ("peak RSS (MiB)", "peak_rss_mb", "{:.0f}"),
    ]
    print(f"\nLIBERO-Long task {args.task_id}, {args.image_size}px, {args.steps} steps, {args.resets} resets per config")
    header = f"{'':22s}" + "".join(f"{r['config']:>14s}" for r in results)
    print(header)
    for label, key, fmt in rows:
        print(f"{label:22s}" + "".join(f"{fmt.format(r[key]):>14s}" for r in results))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
