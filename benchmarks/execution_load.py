"""Does the CPU-seconds of an AutoResearch execution move when other work shares the cores? And the
idle-machine cost model that ``wmrl bench --execution-cost-model`` charges (issue 35, item 3).

A fixed set of solutions (``--programs-per-task`` per task, sampled from the untrained grammar
policy with ``--seed``; each carries its own ``random_state``, so the same source does the same
work) is executed through the AutoResearch env exactly as ``wmrl bench`` trains: ``--parallel``
(2) at a time, each charged ``info["execution_cpu_s"]`` (the sandboxed process tree's CPU plus the
host's share). Every program runs twice, *alone* (nothing else running: start this on an idle
machine) and *beside* a second process that executes the same programs in a loop (what a second
``wmrl bench`` seed, or any other work, does to the first), in the order alone–beside–beside–alone
over two halves of the set so that a drift of the machine cancels. Printed and written to
``--out``: per-execution CPU-s in each condition, the paired ratio beside / alone with a
bootstrap 95% CI over programs, and wall-clock per execution.

With ``--model-out`` the alone executions fit :class:`agents.experiments.bench_costs.ExecutionCostModel`
(log CPU-s additive in task, program family, its size argument and outcome), with its error measured out of sample
(5-fold: the relative error of each fold's total CPU-s and the median relative error per execution).

    .venv/bin/python benchmarks/execution_load.py --out results/execution_load.json \
        --model-out results/execution_cost_model.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def programs(per_task: int, seed: int) -> list[tuple[str, str]]:
    """``(task id, source)`` pairs: ``per_task`` samples of the untrained grammar policy per task."""
    from agents.experiments.bench_agents import GrammarBenchAgent
    from wmrl_envs.envs.autoresearch.tasks import list_tasks

    tasks = list_tasks("all")
    actions, _ = GrammarBenchAgent(seed).sample(tasks, per_task)
    return [(t, a) for t, acts in zip(tasks, actions) for a in acts]


def execute(jobs: list[tuple[str, str]], parallel: int, sandbox) -> list[dict]:
    """Execute each job through its own AutoResearch env (``parallel`` at a time); per job its task,
    family, status, charged CPU-s and wall-clock seconds."""
    from agents.experiments.bench_costs import program_family, program_size
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv

    envs = [AutoResearchEnv(tasks="all", sandbox=sandbox) for _ in range(parallel)]

    def one(k: int) -> dict:
        t, src = jobs[k]
        env = envs[k % parallel]
        env.reset(options={"task_id": t})
        t0 = time.perf_counter()
        info = env.step(src)[-1]
        return {"task_id": t, "family": program_family(src), "size": program_size(src), "status": info.get("status"),
                "executed": bool(info.get("executed")), "cpu_s": info.get("execution_cpu_s"),
                "wall_s": time.perf_counter() - t0}

    out: list[dict] = [None] * len(jobs)  # type: ignore[list-item]
    # each env is used by one thread: job k runs on env k % parallel, the threads take their own ks
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        lanes = [list(range(i, len(jobs), parallel)) for i in range(parallel)]
        for lane_out in pool.map(lambda ks: [(k, one(k)) for k in ks], lanes):
            for k, r in lane_out:
                out[k] = r
    for e in envs:
        e.close()
    return out


def load_loop(per_task: int, seed: int, parallel: int, stop_file: str) -> None:
    """The second process: execute the same programs, shuffled, until ``stop_file`` exists."""
    from wmrl_envs.envs.autoresearch.secret import sandbox_hidden_paths
    from wmrl_envs.sandbox import make_sandbox

    jobs = programs(per_task, seed)
    rng = np.random.default_rng(seed + 1)
    sandbox = make_sandbox("auto", hidden_paths=sandbox_hidden_paths())
    while not os.path.exists(stop_file):
        order = rng.permutation(len(jobs))[: 2 * parallel]
        execute([jobs[i] for i in order], parallel, sandbox)
    sandbox.close()


def paired_ratio(alone: np.ndarray, beside: np.ndarray, n_boot: int = 4000, seed: int = 0) -> dict:
    """Ratio of mean CPU-s beside / alone over the same programs, with a paired bootstrap 95% CI."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(alone), size=(n_boot, len(alone)))
    boot = beside[idx].mean(1) / alone[idx].mean(1)
    return {"ratio": float(beside.mean() / alone.mean()), "ci95": [float(np.percentile(boot, 2.5)),
                                                                     float(np.percentile(boot, 97.5))]}


def model_out_of_sample(records: list[dict], folds: int = 5, seed: int = 0) -> dict:
    """5-fold error of the cost model: each fold predicted by the model fitted on the others."""
    from agents.experiments.bench_costs import ExecutionCostModel

    recs = [r for r in records if r["cpu_s"] and r["cpu_s"] > 0]
    rng = np.random.default_rng(seed)
    fold = rng.integers(0, folds, size=len(recs))
    total_err, per_exec = [], []
    for k in range(folds):
        train = [r for r, f in zip(recs, fold) if f != k]
        test = [r for r, f in zip(recs, fold) if f == k]
        if not test or len(train) < 3:
            continue
        import warnings

        m = ExecutionCostModel.fit(train)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pred = np.array([m.cost(r["task_id"], r["family"], r["status"], r["size"]) for r in test])
        real = np.array([r["cpu_s"] for r in test])
        total_err.append(float(pred.sum() / real.sum() - 1))
        per_exec.extend(np.abs(pred / real - 1).tolist())
    return {"fold_total_relative_error": total_err, "median_abs_relative_error_per_execution": float(np.median(per_exec))}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs-per-task", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parallel", type=int, default=2, help="executions at a time (wmrl bench's --exec-parallel)")
    ap.add_argument("--out", default="results/execution_load.json")
    ap.add_argument("--model-out", default=None, help="write the idle-machine cost model here (JSON)")
    ap.add_argument("--role", choices=("measure", "load"), default="measure", help=argparse.SUPPRESS)
    ap.add_argument("--stop-file", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.role == "load":
        load_loop(args.programs_per_task, args.seed, args.parallel, args.stop_file)
        return {}
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.secret import sandbox_hidden_paths, secret_fingerprint
    from wmrl_envs.sandbox import make_sandbox

    sandbox = make_sandbox("auto", hidden_paths=sandbox_hidden_paths())
    AutoResearchEnv(tasks="all", sandbox=sandbox).prepare_leaderboards()  # paid before any measurement
    jobs = programs(args.programs_per_task, args.seed)
    half = [jobs[0::2], jobs[1::2]]
    load_avg0 = os.getloadavg()
    results: dict[str, list[list[dict]]] = {"alone": [[], []], "beside": [[], []]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    stop = Path(args.out).with_suffix(".stop")
    proc: subprocess.Popen | None = None
    try:
        for cond, h in (("alone", 0), ("beside", 0), ("beside", 1), ("alone", 1)):
            if cond == "beside":
                stop.unlink(missing_ok=True)
                proc = subprocess.Popen([sys.executable, __file__, "--role", "load", "--stop-file", str(stop),
                                         "--programs-per-task", str(args.programs_per_task), "--seed", str(args.seed),
                                         "--parallel", str(args.parallel)], cwd=ROOT)
                time.sleep(20)  # its imports and first executions are under way
            t0 = time.perf_counter()
            results[cond][h] = execute(half[h], args.parallel, sandbox)
            print(f"[execution_load] {cond} half {h}: {len(half[h])} executions in {time.perf_counter() - t0:.0f} s",
                  flush=True)
            if proc is not None:
                stop.touch()
                proc.wait(timeout=600)
                proc = None
    finally:  # never leave the second process running
        if proc is not None and proc.poll() is None:
            proc.kill()
        stop.unlink(missing_ok=True)
    sandbox.close()
    alone = [r for h in (0, 1) for r in results["alone"][h]]
    beside = [r for h in (0, 1) for r in results["beside"][h]]
    # paired by program: the same source in both conditions; executions with a CPU figure in both
    pairs = [(a, b) for a, b in zip(alone, beside) if a["cpu_s"] and b["cpu_s"] and a["cpu_s"] > 0 and b["cpu_s"] > 0]
    a_cpu = np.array([a["cpu_s"] for a, _ in pairs])
    b_cpu = np.array([b["cpu_s"] for _, b in pairs])
    a_wall = np.array([a["wall_s"] for a, _ in pairs])
    b_wall = np.array([b["wall_s"] for _, b in pairs])
    out = {
        "programs": len(jobs), "paired_executions": len(pairs), "parallel": args.parallel, "seed": args.seed,
        "task_secret_fingerprint": secret_fingerprint(), "load_average_at_start": load_avg0,
        "cpu_s_per_execution": {"alone": float(a_cpu.mean()), "beside": float(b_cpu.mean())},
        "cpu_ratio_beside_over_alone": paired_ratio(a_cpu, b_cpu),
        "wall_s_per_execution": {"alone": float(a_wall.mean()), "beside": float(b_wall.mean())},
        "wall_ratio_beside_over_alone": paired_ratio(a_wall, b_wall),
        "executions": {"alone": alone, "beside": beside},
        "command": "python benchmarks/execution_load.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    r = out["cpu_ratio_beside_over_alone"]
    print(f"[execution_load] CPU-s per execution alone {a_cpu.mean():.2f}, beside a second process {b_cpu.mean():.2f}: "
          f"x{r['ratio']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] over {len(pairs)} programs; wall-clock "
          f"x{out['wall_ratio_beside_over_alone']['ratio']:.2f}", flush=True)
    if args.model_out:
        from agents.experiments.bench_costs import ExecutionCostModel

        oos = model_out_of_sample(alone)
        model = ExecutionCostModel.fit(alone, meta={"measured_by": out["command"], "executions": len(alone),
                                                    "parallel": args.parallel, "load_average_at_start": load_avg0,
                                                    "out_of_sample": oos})
        model.save(args.model_out)
        out["cost_model"] = {"path": args.model_out, "out_of_sample": oos}
        print(f"[execution_load] cost model -> {args.model_out}; out of sample (5-fold): total CPU-s of a fold off by "
              f"{', '.join(f'{e:+.1%}' for e in oos['fold_total_relative_error'])}; median error per execution "
              f"{oos['median_abs_relative_error_per_execution']:.0%}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
