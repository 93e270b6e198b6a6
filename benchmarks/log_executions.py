"""Log real executions of grammar-policy programs: the training data of the embedding world model.

Samples programs from an untrained :class:`agents.grammar.policy.GrammarPolicy` (the
``init="prior"`` policy, plus a share from the ``init="uniform"`` one, which makes more
mistakes) on every training task — and optionally on the held-out tasks, flagged with their
``split`` — executes each for real in the sandbox (bubblewrap by default; ``--workers``
executions in parallel, each worker with its own environment) and appends one JSON line per
execution to ``--out``:

    {"task_id", "split", "policy", "family", "choices", "random_state", "fails", "model_line",
     "code", "status", "score", "position", "metric_value", "runtime_s", "step_s", "error",
     "cpu_s", "worker", "workers"}

``runtime_s`` is the sandbox's wall-clock time of the program (Python start-up included),
``cpu_s`` the CPU-seconds of its sandboxed process tree (``execution_cpu_s`` of the step's info),
``step_s`` the host time of the whole ``env.step`` (job folder, execution, grading); ``error`` is
the last line of stderr for failed runs. Jobs are shuffled (training tasks first) and no new
job starts after ``--budget-s`` seconds, so a budget cut leaves a balanced log. At the end a
summary (statuses, execution seconds per family) is printed.

The shipped log ``wmrl_envs/envs/autoresearch/data/autoresearch_executions.jsonl`` was made with
the defaults:

    .venv/bin/python benchmarks/log_executions.py

Summarise an existing log without executing anything:

    .venv/bin/python benchmarks/log_executions.py --summarise wmrl_envs/envs/autoresearch/data/autoresearch_executions.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import numpy as np

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "wmrl_envs" / "envs" / "autoresearch" / "data" / "autoresearch_executions.jsonl"


def summarise(records: list[dict]) -> str:
    """Text summary of a log: status shares, score by status, execution seconds per family."""
    lines = [f"records: {len(records)} ({', '.join(f'{k} {v}' for k, v in sorted(Counter(r['split'] for r in records).items()))})"]
    st = Counter(r["status"] for r in records)
    lines.append("status shares: " + ", ".join(f"{s} {n} ({n / len(records):.0%})" for s, n in st.most_common()))
    valid = [r["score"] for r in records if r["status"] == "valid"]
    if valid:
        lines.append(f"valid score: mean {np.mean(valid):.3f}, median {np.median(valid):.3f}, min {min(valid):.3f}, max {max(valid):.3f}")
    lines.append(f"{'family':18s} {'n':>4s} {'valid':>6s} {'err':>5s} {'mean s':>7s} {'median':>7s} {'p90':>6s} {'max':>6s}  (runtime_s of executed programs)")
    fam: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        fam[r["family"]].append(r)
    for name in sorted(fam, key=lambda f: -np.mean([r["runtime_s"] for r in fam[f]])):
        rs = fam[name]
        t = np.array([r["runtime_s"] for r in rs])
        lines.append(
            f"{name:18s} {len(rs):4d} {sum(r['status'] == 'valid' for r in rs):6d} {sum(r['status'] == 'runtime_err' for r in rs):5d} "
            f"{t.mean():7.2f} {np.median(t):7.2f} {np.percentile(t, 90):6.2f} {t.max():6.2f}"
        )
    for label, sel in (("all", records), ("valid", [r for r in records if r["status"] == "valid"]),
                       ("runtime_err", [r for r in records if r["status"] == "runtime_err"])):
        if sel:
            t = np.array([r["runtime_s"] for r in sel])
            lines.append(f"runtime_s {label:12s}: n {len(t)}, mean {t.mean():.2f}, median {np.median(t):.2f}, "
                         f"p90 {np.percentile(t, 90):.2f}, max {t.max():.2f}, total {t.sum():.0f} s")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-task", type=int, default=25, help="programs per training task")
    ap.add_argument("--uniform-share", type=float, default=0.2, help="share of programs from the uniform policy")
    ap.add_argument("--heldout-per-task", type=int, default=8, help="programs per held-out task (0: none)")
    ap.add_argument("--workers", type=int, default=2, help="executions in parallel")
    ap.add_argument("--sandbox", default="bubblewrap")
    ap.add_argument("--wall-time", type=float, default=120.0, help="per-execution wall-clock limit (s)")
    ap.add_argument("--budget-s", type=float, default=780.0, help="start no job after this many seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--append", action="store_true", help="append to --out instead of replacing it")
    ap.add_argument("--summarise", default=None, metavar="LOG", help="only print the summary of LOG")
    args = ap.parse_args()

    if args.summarise:
        recs = [json.loads(x) for x in Path(args.summarise).read_text().splitlines() if x.strip()]
        print(summarise(recs))
        return

    import torch

    torch.set_num_threads(1)
    from agents.grammar.policy import GrammarPolicy
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks
    from wmrl_envs.sandbox import SandboxLimits

    prior = GrammarPolicy(init="prior", seed=args.seed)
    uniform = GrammarPolicy(init="uniform", seed=args.seed + 1)
    jobs: list[tuple[str, object]] = []
    plan = [(t, args.per_task) for t in list_tasks("train")]
    if args.heldout_per_task > 0:
        plan += [(t, args.heldout_per_task) for t in list_tasks("heldout")]
    rng = random.Random(args.seed)
    train_jobs, heldout_jobs = [], []
    for t, n in plan:
        n_uni = int(round(n * args.uniform_share))
        progs = [("prior", p) for p in prior.sample([t], n - n_uni)[0]]
        if n_uni:
            progs += [("uniform", p) for p in uniform.sample([t], n_uni)[0]]
        (train_jobs if get_task(t).split == "train" else heldout_jobs).extend(progs)
    rng.shuffle(train_jobs)
    rng.shuffle(heldout_jobs)
    jobs = train_jobs + heldout_jobs

    limits = SandboxLimits(wall_time_s=args.wall_time, cpu_time_s=args.wall_time)
    local = threading.local()
    envs: list[AutoResearchEnv] = []
    env_lock = threading.Lock()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_lock = threading.Lock()
    fh = out.open("a" if args.append else "w")
    t_start = time.perf_counter()
    records: list[dict] = []

    def run(job: tuple[str, object]) -> dict | None:
        if time.perf_counter() - t_start > args.budget_s:
            return None
        policy_name, prog = job
        if not hasattr(local, "env"):
            local.env = AutoResearchEnv(tasks="all", sandbox=args.sandbox, limits=limits)
            with env_lock:
                local.worker = len(envs)
                envs.append(local.env)
        env = local.env
        env.reset(options={"task_id": prog.task_id})
        t0 = time.perf_counter()
        _, _, _, _, info = env.step(prog.code)
        step_s = time.perf_counter() - t0
        err = ""
        if info["status"] != "valid":
            tail = (info.get("stderr_tail") or "").strip().splitlines()
            err = (tail[-1] if tail else info.get("message", ""))[:240]
        rec = prog.to_record()
        rec.update({
            "split": get_task(prog.task_id).split, "policy": policy_name, "status": info["status"],
            "score": float(info["score"]), "position": info["position"], "metric_value": info["metric_value"],
            "runtime_s": round(float(info["runtime_s"]), 3), "step_s": round(step_s, 3), "error": err,
            "cpu_s": None if info.get("execution_cpu_s") is None else round(float(info["execution_cpu_s"]), 3),
            "worker": local.worker, "workers": args.workers,
        })
        with write_lock:
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            records.append(rec)
            print(f"[{time.perf_counter() - t_start:6.0f}s {len(records):3d}/{len(jobs)}] {prog.task_id:16s} "
                  f"{rec['status']:11s} {rec['score']:.3f} {rec['runtime_s']:6.2f}s {prog.model_line[8:110]}", flush=True)
        return rec

    try:
        with ThreadPoolExecutor(max_workers=args.workers) as pool:
            for f in as_completed([pool.submit(run, j) for j in jobs]):
                f.result()
    finally:
        fh.close()
        for e in envs:
            e.close()
    print(f"\nwall {time.perf_counter() - t_start:.0f} s, {len(records)} of {len(jobs)} jobs executed, log: {out}")
    print(summarise(records))


if __name__ == "__main__":
    main()
