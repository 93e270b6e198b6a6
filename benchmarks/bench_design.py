"""The design criteria of the AutoResearch benchmark, measured side by side on real-execution GRPO alone.

``wmrl bench`` (``agents/experiments/bench.py``) can only show a compute saving if the
benchmark leaves room to learn. This script measures, in one run and without any world model,
the four criteria the benchmark is designed to (issue 11, item 3; ``docs/autoresearch.md``):

1. **Untrained score**: the held-out avg@k leaderboard percentile (``docs/method.md``,
   "Evaluation") of the untrained grammar policy (``GrammarPolicy(init="prior")``), mean ±
   spread over ``--noise-seeds`` evaluation seeds (target: at most ~60 overall). avg@k is
   estimated from ``--eval-draws`` >= k trajectories per task (:func:`expected_best_of_k`, the
   unbiased estimator of the expected best of k), which cuts the noise of one draw of k.
2. **Evaluation noise**: the standard deviation of that score over the evaluation seeds — the
   noise of a *fixed* policy across evaluation draws (target: at most ~2 points overall).
3. **Cost of one execution**: CPU-seconds (the sandboxed process tree's user + system time,
   ``ExecutionResult.cpu_time_s`` as the grade reports it, else the
   ``resource.getrusage(RUSAGE_CHILDREN)`` delta) and wall seconds per execution, mean / median / p90 / max, over
   ``--cost-samples`` programs of the untrained policy on the training tasks run one at a time
   (what real GRPO executes), plus the CPU-seconds per execution over the whole GRPO run
   (``--exec-parallel`` at a time: its mean only, from ``wmrl bench``'s cost ledger) and the
   share of the training CPU-seconds that execution takes.
4. **Real-GRPO curve**: ``wmrl bench``'s own training loop (:func:`agents.experiments.bench_run.run_method`
   with the ``real`` method: every group executed) for ``--steps`` steps and ``--seeds`` seeds,
   ``--groups-per-step`` groups of ``--group-size`` rollouts, the held-out score every
   ``--eval-every`` steps, per seed and mean (target: still improving after 10 steps).

Evaluation is not charged as training compute; it draws common random numbers (every snapshot
of every seed is sampled from the same evaluation seed), and its results are cached by (task,
program source): a program carries its random state in its code, so identical draws give
identical code and the cache never changes a score. Training executions are never cached.

Run (the reference figures of ``docs/autoresearch.md`` were made with the defaults)::

    WMRL_TASK_SECRET=wmrl-reference .venv/bin/python benchmarks/bench_design.py
    .venv/bin/python benchmarks/bench_design.py --quick      # smoke run: a few executions of each part

Writes ``--out`` (JSON: every figure, the curve and the per-execution costs).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from agents.train.evaluation import avg_at_k_estimate, expected_best_of_k  # noqa: F401  (re-exported: this script measures them)

__all__ = ["CachedEvaluator", "cost_summary", "measure_execution_costs", "main"]

_RUSAGE_LOCK = threading.Lock()


def _children_cpu_s() -> float:
    """User + system CPU-seconds of this process's waited-for children so far (all threads)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return float(r.ru_utime + r.ru_stime)


def cost_summary(values: Sequence[float]) -> dict[str, float]:
    """``{"n", "mean", "median", "p90", "max"}`` of per-execution costs (seconds).

    Raises:
        ValueError: ``values`` is empty.
    """
    v = np.asarray(list(values), dtype=float)
    if v.size == 0:
        raise ValueError("no execution costs to summarise: run at least one execution")
    return {"n": int(v.size), "mean": float(v.mean()), "median": float(np.median(v)),
            "p90": float(np.quantile(v, 0.9)), "max": float(v.max())}


class CachedEvaluator:
    """Held-out avg@k of a policy snapshot with real execution, cached by (task, program source).

    The protocol of :func:`agents.experiments.bench_run.evaluate_snapshot` (restore the snapshot,
    reseed the sampling stream with ``eval_seed``, sample programs per held-out task, execute,
    score avg@k), with more draws than k and a cache: evaluation is not charged
    as training compute, and a program's source fixes its outcome up to the run-to-run noise of
    the execution (its random state is in the code), so a repeated (task, source) is not run
    again. ``SandboxUnavailableError`` (the machinery failed) leaves a trajectory ungraded, as
    in ``wmrl bench``; it is not cached.

    The per-task term is :func:`expected_best_of_k` of ``draws`` trajectories (``draws == k``:
    avg@k of one draw of k); categories and the overall score are
    aggregated as in :func:`agents.train.evaluation.avg_at_k` (tasks averaged within a category, then
    categories averaged).

    Args:
        sandbox: the sandbox the programs run in.
        heldout_tasks: the held-out task ids.
        k: trajectories per task of avg@k.
        draws: trajectories sampled per task (>= k; default k).
        parallel: executions at a time.

    Attributes:
        executed: executions run so far (int); ``hits``: cache hits so far (int).
    """

    def __init__(self, sandbox: Any, heldout_tasks: Sequence[str], k: int, parallel: int = 2,
                 draws: int | None = None) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        draws = k if draws is None else int(draws)
        if draws < k:
            raise ValueError(f"draws must be >= k={k} (trajectories per task), got {draws}")
        self.draws = draws
        if not heldout_tasks:
            raise ValueError("heldout_tasks is empty: pass at least one held-out task id")
        self.sandbox, self.tasks, self.k, self.parallel = sandbox, list(heldout_tasks), int(k), int(parallel)
        self.cache: dict[tuple[str, str], Any] = {}
        self.executed = 0
        self.hits = 0

    def _run(self, task: str, code: str) -> Any:
        from wmrl_envs.envs.autoresearch.env import evaluate as run_solution
        from wmrl_envs.sandbox.base import SandboxUnavailableError

        try:
            return run_solution(task, code, self.sandbox)[0]
        except SandboxUnavailableError as exc:
            return f"{type(exc).__name__}: {exc}"

    def __call__(self, agent: Any, snap: Any, eval_seed: int) -> dict[str, Any]:
        """avg@k of ``snap`` under evaluation seed ``eval_seed``: ``{"overall", "per_category",
        "per_task", "ungraded"}`` (percent, :func:`agents.train.evaluation.avg_at_k`)."""
        from wmrl_envs.envs.autoresearch.tasks import get_task

        agent.restore(snap)
        agent.reseed(eval_seed)
        actions, _ = agent.sample(self.tasks, self.draws)
        jobs = [(t, a) for t, acts in zip(self.tasks, actions) for a in acts]
        todo = list(dict.fromkeys(j for j in jobs if j not in self.cache))
        self.hits += len(jobs) - len(todo)
        with ThreadPoolExecutor(max_workers=max(1, self.parallel)) as pool:
            for job, g in zip(todo, pool.map(lambda j: self._run(*j), todo)):
                if not isinstance(g, str):
                    self.cache[job] = g
                self.executed += 1
        positions: dict[str, list[float | None]] = {t: [] for t in self.tasks}
        ungraded = 0
        for t, a in jobs:
            g = self.cache.get((t, a))
            if g is None:
                ungraded += 1
                continue
            positions[t].append(g.position if g.status == "valid" else None)
        cats = {t: get_task(t).category for t in self.tasks}
        overall, per_cat, per_task = avg_at_k_estimate(positions, cats, self.k)
        # the same draws scored for every k up to the number of draws (no further execution)
        by_k = {kk: avg_at_k_estimate(positions, cats, kk)[0] for kk in (1, 2, 4, 8) if kk <= self.draws}
        return {"overall": overall, "per_category": per_cat, "per_task": per_task, "ungraded": ungraded,
                "overall_by_k": by_k, "positions": positions}


def measure_execution_costs(sandbox: Any, programs: Sequence[tuple[str, str]],
                            progress: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Run ``(task, source)`` programs one at a time and measure each execution's cost.

    Returns:
        One dict per program: ``task_id``, ``model_line``, ``status``, ``cpu_s`` (CPU-seconds of
        the sandboxed process tree: the grade's ``cpu_time_s`` where the sandbox reports it, else
        the ``RUSAGE_CHILDREN`` delta around the execution, which misses a tree whose processes
        are re-parented away, as bubblewrap's are), ``cpu_source`` (``"grade"`` or ``"rusage"``) and
        ``wall_s`` (the sandbox's wall-clock seconds of the program, Python start-up included).
    """
    from wmrl_envs.envs.autoresearch.env import evaluate as run_solution

    out = []
    for task, code in programs:
        with _RUSAGE_LOCK:
            c0 = _children_cpu_s()
            g, _ = run_solution(task, code, sandbox)
            cpu = _children_cpu_s() - c0
        reported = getattr(g, "cpu_time_s", None)
        out.append({"task_id": task, "model_line": next((ln for ln in code.splitlines() if ln.startswith("model = ")), ""),
                    "status": g.status, "cpu_s": float(reported) if reported is not None else cpu,
                    "cpu_source": "grade" if reported is not None else "rusage", "wall_s": float(g.runtime_s)})
        if progress:
            progress()
    return out


def _fmt(d: dict[str, float]) -> str:
    return f"mean {d['mean']:.2f}  median {d['median']:.2f}  p90 {d['p90']:.2f}  max {d['max']:.2f}  (n={d['n']})"


def noise_by_draws(runs: Sequence[Mapping[str, Sequence[float | None]]], categories: Mapping[str, str],
                   max_draws: int) -> dict[str, dict[str, float]]:
    """Mean and std over evaluation seeds of the overall avg@k for fewer draws and other k.

    Each evaluation seed's first ``d`` draws per task are themselves an evaluation with ``d``
    draws, so one run with ``max_draws`` draws gives the noise of every smaller one (no further
    execution).

    Args:
        runs: per evaluation seed, per task, the positions in draw order.
        categories: per task, its category.
        max_draws: the draws per task of ``runs``.

    Returns:
        ``{"k=<k>,draws=<d>": {"mean", "std"}}`` for k in 1, 2, 4 and d in 2, 4, 8, 16, 24, 32
        with k <= d <= max_draws.
    """
    out = {}
    for k in (1, 2, 4):
        for d in (2, 4, 8, 16, 24, 32):
            if k <= d <= max_draws:
                v = [avg_at_k_estimate(r, categories, k, draws=d)[0] for r in runs]
                out[f"k={k},draws={d}"] = {"mean": statistics.fmean(v), "std": statistics.stdev(v)}
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """CLI entry point; returns the results dict (also written to ``--out``)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2, help="real-GRPO seeds (0..seeds-1)")
    ap.add_argument("--steps", type=int, default=12, help="real-GRPO steps per seed")
    ap.add_argument("--eval-every", type=int, default=2, help="evaluate the held-out score every this many steps")
    ap.add_argument("--groups-per-step", type=int, default=10)
    ap.add_argument("--group-size", type=int, default=4, help="G, rollouts per group")
    ap.add_argument("--eval-k", type=int, default=1, help="k of avg@k (best of k trajectories per held-out task)")
    ap.add_argument("--eval-draws", type=int, default=24,
                    help="trajectories sampled per held-out task (>= k): avg@k is estimated from them (expected_best_of_k)")
    ap.add_argument("--noise-seeds", type=int, default=5, help="evaluation seeds of the untrained policy (noise)")
    ap.add_argument("--cost-samples", type=int, default=40, help="programs run one at a time to measure cost")
    ap.add_argument("--exec-parallel", type=int, default=2, help="concurrent executions (training and evaluation)")
    ap.add_argument("--lr", type=float, default=0.1, help="the grammar agent's learning rate (wmrl bench's default)")
    ap.add_argument("--sandbox", default="auto")
    ap.add_argument("--out", default="runs/bench_design/design.json")
    ap.add_argument("--parts", default="untrained,cost,grpo",
                    help="comma-separated parts to run: untrained (score and noise), cost, grpo")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 seed, 2 steps, 2 groups, k=1 from 2 draws, 2 noise seeds, 4 cost samples")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.eval_every, args.groups_per_step = 1, 2, 2, 2
        args.eval_k, args.eval_draws, args.noise_seeds, args.cost_samples = 1, 2, 2, 4
    for name in ("seeds", "steps", "eval_every", "groups_per_step", "group_size", "eval_k", "eval_draws", "exec_parallel"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if not parts or parts - {"untrained", "cost", "grpo"}:
        raise SystemExit(f"--parts takes a comma-separated subset of untrained,cost,grpo; got {args.parts!r}")
    if args.noise_seeds < 2:
        raise SystemExit(f"--noise-seeds must be >= 2 (a spread needs two draws), got {args.noise_seeds}")

    import torch
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from agents.experiments.bench_agents import GrammarBenchAgent
    from agents.experiments.bench_config import BenchConfig
    from agents.experiments.bench_run import run_method
    from agents.experiments.methods import METHODS
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.secret import is_reference_secret, sandbox_hidden_paths, secret_fingerprint
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks
    from wmrl_envs.sandbox import make_sandbox

    torch.set_num_threads(1)
    console = Console()
    train, heldout = list_tasks("train"), list_tasks("heldout")
    sandbox = make_sandbox(args.sandbox, hidden_paths=sandbox_hidden_paths())
    results: dict[str, Any] = {
        "config": vars(args), "sandbox": sandbox.name,
        "task_secret": {"fingerprint": secret_fingerprint(), "reference": is_reference_secret()},
        "train_tasks": train, "heldout_tasks": heldout,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[info]}"), console=console)
    try:
        AutoResearchEnv(tasks="all", sandbox=sandbox).prepare_leaderboards()
        evaluator = CachedEvaluator(sandbox, heldout, args.eval_k, args.exec_parallel, draws=args.eval_draws)
        make_agent = lambda seed: GrammarBenchAgent(seed, lr=args.lr)  # noqa: E731
        progress.start()
        agent = make_agent(0)
        snap0 = agent.snapshot()
        cats: list[str] = []
        if "untrained" in parts:  # 1-2. untrained score and evaluation noise
            bar = progress.add_task("untrained policy, eval seeds", total=args.noise_seeds, info="")
            untrained = []
            for e in range(args.noise_seeds):
                r = evaluator(agent, snap0, eval_seed=2_000_000 + e)
                untrained.append(r)
                progress.update(bar, advance=1, info=f"overall {r['overall']:.1f}")
            overall = [r["overall"] for r in untrained]
            cats = sorted(untrained[0]["per_category"])
            results["untrained"] = {
                "overall_mean": statistics.fmean(overall), "overall_std": statistics.stdev(overall),
                "overall": overall,
                "per_category_mean": {c: statistics.fmean(r["per_category"][c] for r in untrained) for c in cats},
                "per_category_std": {c: statistics.stdev(r["per_category"][c] for r in untrained) for c in cats},
                "per_task_mean": {t: statistics.fmean(r["per_task"].get(t, 0.0) for r in untrained) for t in heldout},
                "overall_by_k": {str(kk): {"mean": statistics.fmean(r["overall_by_k"][kk] for r in untrained),
                                           "std": statistics.stdev(r["overall_by_k"][kk] for r in untrained)}
                                 for kk in untrained[0]["overall_by_k"]},
                "noise_by_draws": noise_by_draws([r["positions"] for r in untrained],
                                                 {t: get_task(t).category for t in heldout}, args.eval_draws),
                "positions": [r["positions"] for r in untrained],
            }

        if "cost" in parts:  # 3. cost of one execution, one at a time
            bar = progress.add_task("execution cost, one at a time", total=args.cost_samples, info="")
            agent.reseed(3_000_000)
            rng = np.random.default_rng(3)
            tasks = [str(t) for t in rng.choice(train, size=args.cost_samples)]
            programs = [(t, g[0]) for t, g in zip(tasks, agent.sample(tasks, 1)[0])]
            costs = measure_execution_costs(sandbox, programs, progress=lambda: progress.update(bar, advance=1))
            results["execution_cost"] = {
                "cpu_s": cost_summary([c["cpu_s"] for c in costs]),
                "wall_s": cost_summary([c["wall_s"] for c in costs]),
                "samples": costs,
            }

        if "grpo" in parts:  # 4. real-GRPO curve
            cfg = BenchConfig(methods=("real",), seeds=args.seeds, steps=args.steps, groups_per_step=args.groups_per_step,
                              group_size=args.group_size, exec_parallel=args.exec_parallel, sandbox=args.sandbox)
            eval_steps = sorted({0, *range(args.eval_every, args.steps + 1, args.eval_every), args.steps})
            eval_seed = 1_000_003  # common random numbers: the same draws for every snapshot of every seed
            curves = []
            for seed in range(args.seeds):
                bar = progress.add_task(f"real GRPO seed {seed}", total=args.steps, info="")
                w0 = time.perf_counter()
                run = run_method(METHODS["real"], seed, cfg, make_agent,
                                 lambda: AutoResearchEnv(tasks="train", sandbox=sandbox), None, train,
                                 max_steps=args.steps,
                                 progress=lambda msg, bar=bar: progress.update(bar, advance=1, info=msg.split(": ", 1)[-1]))
                wall = time.perf_counter() - w0
                n_exec = run.records[-1].executions
                ebar = progress.add_task(f"held-out eval seed {seed}", total=len(eval_steps), info="")
                scores = {}
                for s in eval_steps:
                    r = evaluator(make_agent(seed), run.snapshots[s], eval_seed=eval_seed)
                    scores[s] = r
                    progress.update(ebar, advance=1, info=f"step {s}: {r['overall']:.1f}")
                last = run.records[-1]
                curves.append({
                    "seed": seed, "executions": n_exec, "train_wall_s": wall,
                    # the ledger's CPU-seconds of the sandboxed executions (ExecutionResult.cpu_time_s)
                    "cpu_s_per_execution": last.cpu_seconds["execution"] / max(1, n_exec),
                    "cpu_s_per_step": last.compute_cpu_s / len(run.records),
                    "cpu_seconds_by_source": dict(last.cpu_seconds),
                    "compute_cpu_s": [r.compute_cpu_s for r in run.records],
                    "compute_wall_s": [r.compute_wall_s for r in run.records],
                    "reward_mean": [r.reward_mean for r in run.records],
                    "eval": {str(s): {"overall": v["overall"], "per_category": v["per_category"],
                                      "overall_by_k": v["overall_by_k"]} for s, v in scores.items()},
                })
            results["grpo"] = {"eval_steps": eval_steps, "eval_seed": eval_seed, "seeds": curves,
                               "mean": {str(s): statistics.fmean(c["eval"][str(s)]["overall"] for c in curves) for s in eval_steps}}
        results["evaluation_cache"] = {"executed": evaluator.executed, "hits": evaluator.hits}
        results["evaluation_records"] = [
            {"task_id": t, "model_line": next((ln for ln in code.splitlines() if ln.startswith("model = ")), ""),
             "status": g.status, "position": g.position, "runtime_s": g.runtime_s}
            for (t, code), g in evaluator.cache.items()
        ]
    finally:
        progress.stop()
        sandbox.close()
    results["wall_s"] = time.perf_counter() - t_all
    out.write_text(json.dumps(results, indent=1, default=float))

    # ---------------------------------------------------------------- report
    t = Table(title=f"Design criteria (held-out: {len(heldout)} tasks, avg@{args.eval_k} from {args.eval_draws} draws; "
                    f"sandbox {sandbox.name})")
    t.add_column("criterion"); t.add_column("measured"); t.add_column("target")
    if "untrained" in results:
        u = results["untrained"]
        t.add_row("untrained overall (mean ± std over eval seeds)", f"{u['overall_mean']:.1f} ± {u['overall_std']:.1f}", "<= ~60")
        for c in cats:
            t.add_row(f"  {c}", f"{u['per_category_mean'][c]:.1f} ± {u['per_category_std'][c]:.1f}", "")
        t.add_row(f"eval noise of a fixed policy (std, {args.noise_seeds} eval seeds)", f"{u['overall_std']:.2f}", "<= ~2")
        for key, v in u["noise_by_draws"].items():
            t.add_row(f"  same stream, {key}", f"{v['mean']:.1f} ± {v['std']:.2f}", "")
        for task, v in u["per_task_mean"].items():
            t.add_row(f"  untrained {task}", f"{v:.1f}", "")
    if "execution_cost" in results:
        ec = results["execution_cost"]
        t.add_row("CPU-s per execution (one at a time)", _fmt(ec["cpu_s"]), "<= ~1 mean")
        t.add_row("wall s per execution (one at a time)", _fmt(ec["wall_s"]), "")
    if "grpo" in results:
        g = results["grpo"]
        t.add_row(f"CPU-s per execution (GRPO, {args.exec_parallel} at a time)",
                  ", ".join(f"{c['cpu_s_per_execution']:.2f}" for c in g["seeds"]), "")
        t.add_row(f"CPU-s per GRPO step ({args.groups_per_step} x {args.group_size} rollouts), per seed",
                  ", ".join(f"{c['cpu_s_per_step']:.0f}" for c in g["seeds"]), "")
        t.add_row("execution share of training CPU-seconds, per seed",
                  ", ".join(f"{c['cpu_seconds_by_source']['execution'] / max(1e-9, sum(c['cpu_seconds_by_source'].values())):.3f}"
                            for c in g["seeds"]), "dominant")
    console.print(t)
    if "grpo" not in results:
        console.print(f"total wall {results['wall_s']:.0f} s; wrote {out}")
        return results
    c = Table(title="Real-execution GRPO: held-out overall avg@k by step (common eval draws)")
    c.add_column("step")
    for s in g["seeds"]:
        c.add_column(f"seed {s['seed']}")
    c.add_column("mean")
    for s in g["eval_steps"]:
        c.add_row(str(s), *[f"{x['eval'][str(s)]['overall']:.1f}" for x in g["seeds"]], f"{g['mean'][str(s)]:.1f}")
    console.print(c)
    console.print(f"evaluation cache: {results['evaluation_cache']['executed']} executed, "
                  f"{results['evaluation_cache']['hits']} hits; total wall {results['wall_s']:.0f} s; wrote {out}")
    return results


if __name__ == "__main__":
    main()
