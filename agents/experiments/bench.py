"""The method benchmark (``wmrl bench``): the paper's comparison at CPU scale, side by side.

Trains the same agent on the AutoResearch training tasks under up to eight methods, with the same
seeds, and evaluates every trained policy on the held-out tasks (avg@k leaderboard
percentile per category and overall; ``docs/method.md``, "Evaluation"):

1. ``real`` — GRPO with real execution for every group (no world model);
2. ``wm_only`` — GRPO on raw world-model scores only (no anchors, no corrections);
3. ``wmrl`` — anchors + online debiasing + inverse-variance denoising;
4. ``debias_only``; 5. ``denoise_only``; 6. ``anchors_raw`` — anchors, raw world model,
   no correction;
7. ``real_anchor_batch`` — real execution for every group, with only the anchor groups' batch
   (f × groups per step groups per step): the part of a speedup that is the batch size alone;
8. ``wmrl_learned`` — WMRL whose world model starts empty and learns online from its anchor
   groups (:class:`~wmrl_envs.world_models.learned.LearnedWorldModel` on the AutoResearch
   featurizer; nothing pre-fitted; its refits are on the ledger's ``world_model`` source).

One budget in compute, not in steps (issue 35, item 1): per seed real GRPO trains first, at least S
steps; its held-out scores untrained and at step S, averaged with the real seeds run before, set the
seed's stop target s0 + ``stop_gain`` × (s_S − s0) (:func:`provisional_stop_target`; ``stop_gain``
1.2 keeps it above the report's highest target, 100% of the gain on the mean over all seeds). Every
method then trains until an evaluated snapshot reaches that target — snapshots are evaluated at
step 1 and whenever the compute has grown ``check_factor``-fold since the last evaluation — or, for
every method but real GRPO, until it has spent real GRPO's compute to the target on the same seed
(past it a method cannot be cheaper); ``max_steps_factor`` × S steps is only a safeguard.

Compute is charged per cost source in CPU-seconds (:data:`COST_SOURCES`: the sandboxed process
trees of the executions, world-model inference, generation and policy update; held-out
evaluation excluded), with wall-clock kept beside it; CPU-seconds depend much less on the
machine's load than wall-clock (they still rise when other jobs share the cores' caches), so
the headline uses them. Every training rollout pays for its own execution
(no result cache).

The headline is the compute-to-target speedup (``docs/method.md``, "Compute-to-target
speedup"): the CPU-seconds real-execution GRPO needs to reach ``target_gain`` of its own gain
after S steps, divided by the CPU-seconds each other method needs to reach the same held-out
score, read from per-step snapshots (interpolated between evaluated ones), median over seeds
with a paired bootstrap 95% CI. The total (``total_ctt``) adds, for the methods on the pre-fitted
world model, its fitting: the logged executions it was fitted on, charged at this run's own
measured CPU-seconds per execution (``speedup.cpu_s_per_execution``); WMRL's speedup is also given
over the best of the real-GRPO batch sizes (``speedup_over_best_real``), and a sensitivity table
reads the target at 50/70/90/100% of real GRPO's gain.

The policy is snapshotted after every step together with its cumulative compute; after all
seeds, each curve gets up to ``refine_evals`` more evaluations inside the interval where it crosses
the target, until the interpolation bracket is within ``max_bracket_share`` of the
compute-to-target or one step wide. Held-out results are cached by (task, program) across the
whole run and across its ``--resume`` parts (``eval_cache.pkl``); no equal-compute point is
evaluated (no figure of this headline uses one). The table also gives each method's last step.

Outputs (in ``out_dir``): ``results.json`` (everything; strict JSON: a non-finite number, e.g. the
compute-to-target ``inf`` of a seed that did not reach the target, is written as ``null`` and
listed by path under ``"nonfinite"``; :func:`agents.experiments.bench_report.restore_nonfinite`
reads it back), ``table.md`` (headline, cost split,
the paper's layout: method, compute ratio, held-out score per category and overall, mean ±
spread over seeds), ``score_vs_compute.png``, ``rho_calibration.png``, and ``snapshots/seed<k>.pt``
(every step's policy per method, for ``--resume``). ``--resume`` continues a stopped run from the
seeds it finished; ``--reuse-from`` reads methods from an earlier finished run.
"""


from __future__ import annotations

import functools
import json
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Sequence


from agents.protocol import BenchAgent
from wmrl_envs.utils import write_json_atomic

from .bench_agents import (GrammarBenchAgent, LLMBenchAgent, build_learned_world_model, build_world_model,
                           world_model_fitting_cost, world_model_fitting_executions)
from .bench_config import BENCH_METHODS, LEARNED_WM_METHODS, BenchConfig, check_bench_config, method_groups_per_step
from .bench_report import compute_speedups, cost_summary, real_target, strict_results, write_report
from .bench_resume import (drop_partial_seed, load_eval_cache, load_partial_seed, partial_seed_wall_clock, restore_seed,
                           resumed_state, reused_entries, save_eval_cache, save_partial_seed, save_snapshots)
from .bench_run import MethodRun, bracket_refinement_step, evaluate_snapshot, run_method

__all__ = ["run_bench", "headline_lines", "main_bench", "provisional_stop_target"]


def provisional_stop_target(results: dict[str, Any], cfg: BenchConfig, s0: float, s_S: float) -> float | None:
    """The stop target of the seed being run: ``s0 + stop_gain x (s_S - s0)`` on real GRPO's mean
    held-out scores untrained and at step S over the real seeds already in ``results`` and this
    seed's (``s0``, ``s_S``); ``None`` when real GRPO has not improved on that mean (there is no
    target to reach: every method then trains to its compute budget or the step cap).

    Example:
        >>> provisional_stop_target({"methods": {"real": {"seeds": []}}}, BenchConfig(stop_gain=1.2), 20.0, 50.0)
        56.0
    """
    pairs = [(s0, s_S)]
    for e in results["methods"].get("real", {}).get("seeds", []):
        c = e["curve"]
        if 0 in c["step"] and cfg.steps in c["step"]:
            pairs.append((c["score"][c["step"].index(0)], c["score"][c["step"].index(cfg.steps)]))
    m0 = sum(p[0] for p in pairs) / len(pairs)
    mS = sum(p[1] for p in pairs) / len(pairs)
    return m0 + cfg.stop_gain * (mS - m0) if mS > m0 else None


def _set_curve(entry: dict[str, Any], run: MethodRun, evaluated: dict[int, dict[str, Any]]) -> None:
    idx = sorted(evaluated)
    entry["curve"] = {
        "step": idx,
        "compute_cpu_s": [run.compute_at(i) for i in idx],
        "compute_wall_s": [run.wall_at(i) for i in idx],
        "score": [float(evaluated[i]["overall"]) for i in idx],
    }


def _entry_compute_at(entry: dict[str, Any], step: int) -> float:
    """An earlier run's training compute (CPU-seconds) after ``step`` steps (0.0 at step 0)."""
    return 0.0 if step == 0 else float(entry["records"][step - 1]["compute_cpu_s"])


def run_bench(
    cfg: BenchConfig,
    *,
    make_agent: Callable[[int], BenchAgent],
    make_env: Callable[[], Any],
    world_model: Any | None,
    train_tasks: Sequence[str],
    heldout_tasks: Sequence[str],
    sandbox: Any,
    evaluate: Callable[..., dict[str, Any]] = evaluate_snapshot,
    log: Callable[[str], None] = print,
    fitting_cpu_s: float = 0.0,
    fitting_unit: str = "CPU-s",
    fitting_executions: int = 0,
    make_learned_world_model: Callable[[int], Any] | None = None,
) -> dict[str, Any]:
    """Run every method for every seed, evaluate their curves, compute the speedup, write the outputs.

    Per seed, ``real`` runs first: at least S steps, then until an evaluated snapshot reaches the
    seed's stop target (:func:`provisional_stop_target`) or the step cap; its compute then is the
    budget of the others, which train until they reach the same target or that budget (module
    docstring). ``real_anchor_batch`` samples f × groups per step groups per step
    (:func:`~agents.experiments.bench_config.method_groups_per_step`); ``wmrl_learned`` gets a fresh
    world model per seed from ``make_learned_world_model(seed)``.
    Each run's curve is evaluated at its checkpoints (step 1, every ``check_factor``-fold growth of
    its compute, real GRPO's step S, its last step); once every seed has run, the target is fixed from real GRPO's mean curve
    and each curve gets up to ``refine_evals`` more evaluations inside the interval where it
    first crosses the target (:func:`~agents.experiments.bench_run.bracket_refinement_step`),
    until that bracket is at most ``max_bracket_share`` of its compute-to-target or one step
    wide, so its compute-to-target is read from close snapshots. Each refined curve is saved at
    once (with ``refine_target`` and ``refine_evals_done`` in its entry), so a refinement stopped
    part-way continues with ``--resume`` where it stopped: ``refine_evals`` is the total per curve
    and target over the parts, and a resumed refinement evaluates the snapshots an unstopped one
    would. ``--resume`` on a finished run refines again every seed whose snapshots were saved up
    to that total: a larger ``refine_evals`` evaluates more; a smaller ``max_bracket_share`` only
    where a curve has evaluations left; a target moved by more seeds starts each curve's count
    again. Until a refinement finishes, ``results.json`` holds no headline (``wmrl bench report``
    computes one from whatever curves it holds). With the default ``evaluate``, held-out results are cached by (task,
    program) across the whole run and its ``--resume`` parts (``eval_cache``); training executions never are.

    Args:
        fitting_cpu_s: CPU-seconds of the real executions the world model was fitted on (0 for
            a world model fitted on none), reported in its own column of the headline.
        fitting_unit: the unit of ``fitting_cpu_s`` as printed (``"CPU-s"``; another string when
            only a wall-clock figure exists, so the table never calls it CPU-seconds).
        fitting_executions: how many real executions the pre-fitted world model was fitted on;
            when > 0 the headline charges them at this run's own measured CPU-seconds per
            execution (its ledger: execution CPU-s / executions, over every seed and method),
            not at ``fitting_cpu_s`` (the logged figure, kept in ``results.json`` beside it).
        make_learned_world_model: ``seed -> world model`` for ``wmrl_learned`` (required when it runs).

    Returns:
        The results dict (also written to ``out_dir/results.json``).

    Raises:
        ValueError: bad settings (:func:`check_bench_config`), or a ``--reuse-from`` / ``--resume``
            source that cannot stand in (:func:`reused_entries`, :func:`resumed_state`).
        FileExistsError: ``out_dir`` already holds a run and ``resume`` is off.
    """
    check_bench_config(cfg)
    if any(m in LEARNED_WM_METHODS for m in cfg.methods) and make_learned_world_model is None:
        raise ValueError(f"--methods {' '.join(cfg.methods)} has a learned world model method but run_bench got no "
                         "make_learned_world_model (pass seed -> LearnedWorldModel)")
    if not cfg.resume and (Path(cfg.out_dir) / "results.json").exists():
        raise FileExistsError(f"{cfg.out_dir} already holds a wmrl bench run (results.json): pass --resume to continue "
                              "it, or another --out-dir")
    reused = reused_entries(cfg)
    order = [m for m in ("real", "wmrl") if m in cfg.methods] + [m for m in cfg.methods if m not in ("real", "wmrl")]
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    max_steps = max(cfg.steps, int(round(cfg.max_steps_factor * cfg.steps)))
    eval_cache: dict[tuple[str, str], Any] | None = None
    if evaluate is evaluate_snapshot:  # the stop rule and the cache of held-out evaluation follow the config
        eval_cache = load_eval_cache(out_dir) if cfg.eval_cache and cfg.resume else {} if cfg.eval_cache else None
        evaluate = functools.partial(evaluate_snapshot, max_ungraded_share=cfg.max_ungraded_share,
                                     cache=eval_cache, draws=cfg.eval_draws)
    eval_counts = {"executed": 0, "cached": 0, "evaluations": 0}
    entry_ungraded: dict[tuple[str, int], int] = {}  # held-out ungraded trajectories per (method, seed)
    from wmrl_envs.envs.autoresearch.secret import is_reference_secret, secret_fingerprint

    results: dict[str, Any] = {
        "config": asdict(cfg),
        # which task secret the AutoResearch data came from (its one-way fingerprint, never the secret)
        "task_secret": {"fingerprint": secret_fingerprint(), "reference": is_reference_secret()},
        "methods": {m: {"seeds": []} for m in order},
        "world_model_fitting_cpu_s": fitting_cpu_s,
        "world_model_fitting_unit": fitting_unit,
        "world_model_fitting_executions": int(fitting_executions),
    }
    if reused:
        results["reused_from"] = {"path": str(cfg.reuse_from), "methods": sorted(reused)}
        log(f"[bench] {sorted(reused)} read from {cfg.reuse_from} (not trained or evaluated again)")
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[info]}"), transient=False)
    # a bar draws nothing in a log file or CI: there, each step and each evaluation is a plain line
    plain = not progress.console.is_terminal
    t_all = time.perf_counter()
    kept: list[tuple[Any, dict[str, MethodRun], dict[str, dict[int, dict[str, Any]]]] | None] = []
    first_seed, prior = resumed_state(cfg, order)
    prior_wall = 0.0
    if prior is not None:
        prior_wall = float(prior.get("wall_clock_s", 0.0))
        eval_counts.update({k: int(v) for k, v in prior.get("evaluation", {}).items() if k in eval_counts})
        for name in order:
            results["methods"][name]["seeds"] = prior["methods"][name]["seeds"][:first_seed]
            for e in results["methods"][name]["seeds"]:
                entry_ungraded[(name, e["seed"])] = int(e.get("heldout_ungraded", 0))
        for seed in range(first_seed):
            restored = restore_seed(out_dir, seed, {n: results["methods"][n]["seeds"][seed] for n in order})
            kept.append(None if restored is None else (make_agent(seed), *restored))
        missing = [k for k, r in enumerate(kept) if r is None]
        log(f"[bench] resuming {out_dir}: seeds 0..{first_seed - 1} kept"
            + (f" (seeds {missing} without saved snapshots: their curves are not refined)" if missing else ""))

    def count_evaluation(res: dict[str, Any], method: str, seed: int) -> None:
        eval_counts["evaluations"] += 1
        eval_counts["executed"] += int(res.get("executed", len(heldout_tasks) * cfg.eval_draws))
        entry_ungraded[(method, seed)] = entry_ungraded.get((method, seed), 0) + sum(
            int(v) for v in res.get("ungraded", {}).values())
        eval_counts["cached"] += int(res.get("cached", 0))

    def evaluate_at(agent: Any, run: MethodRun, idx: int, seed: int) -> dict[str, Any]:
        res = evaluate(agent, run.snapshots[idx], heldout_tasks, cfg.eval_k, sandbox, cfg.eval_parallel,
                       eval_seed=1_000_003 + seed)
        count_evaluation(res, run.method, seed)
        return res

    def save() -> None:
        results["wall_clock_s"] = prior_wall + time.perf_counter() - t_all
        results["evaluation"] = dict(eval_counts)
        for name, m in results["methods"].items():
            for e in m["seeds"]:
                if "reused_from" not in e:  # a reused entry keeps the earlier run's count
                    e["heldout_ungraded"] = entry_ungraded.get((name, e["seed"]), 0)
        # strict JSON (non-finite numbers as null, listed under "nonfinite"); a kill never truncates it
        write_json_atomic(out_dir / "results.json", strict_results(json.loads(json.dumps(results, default=float))),
                          indent=1)
        if eval_cache is not None:  # the next --resume part reads it: no held-out program is executed twice
            save_eval_cache(out_dir, eval_cache)

    progress.start()
    try:
        for seed in range(first_seed, cfg.seeds):
            runs: dict[str, MethodRun] = {}
            evaluated: dict[str, dict[int, dict[str, Any]]] = {}
            agent = make_agent(seed)  # evaluates every snapshot of this seed (restored into it)
            budget_real: float | None = None
            stop_target: float | None = None
            partial = load_partial_seed(cfg, seed)  # methods this seed finished before a stop (--resume)
            if partial is not None:
                runs, evaluated, budget_real, stop_target = partial
                # the time of the methods a stopped part finished in this seed (results.json had not got it)
                prior_wall = max(prior_wall, partial_seed_wall_clock(out_dir, seed) or 0.0)
                for name, points in evaluated.items():  # their evaluations count as an unstopped run's do
                    for res in points.values():
                        count_evaluation(res, name, seed)
                log(f"[bench] resuming seed {seed} after its finished methods {sorted(runs)}")
            for name in order:
                if name in runs:  # finished in an earlier part of the run
                    continue
                if name in reused:  # measured in the earlier run: its budget and target stand for this seed
                    if name == "real":
                        budget_real = float(reused[name][seed]["records"][-1]["compute_cpu_s"])
                        stop_target = reused[name][seed].get("stop_target")
                        if "stop_target" not in reused[name][seed]:
                            log(f"[bench] WARNING seed {seed}: the reused real GRPO is from a run without a stop target "
                                f"(before issue 35; it trained {len(reused[name][seed]['records'])} steps): the other "
                                "methods train until its compute or the step cap, and are not stopped at a target")
                    continue
                spec = BENCH_METHODS[name]
                t0 = time.perf_counter()
                # the safeguard: real GRPO's cap; every other method is bounded by real GRPO's compute
                # first, and may need many more (cheaper) steps to spend it
                steps_cap = max_steps if name == "real" else max_steps * int(cfg.groups_per_step)
                bar = progress.add_task(f"seed {seed} {name:12s}", total=steps_cap, info="")
                evals: dict[int, dict[str, Any]] = {}
                evaluated[name] = evals

                def tick(msg: str, bar: Any = bar) -> None:
                    progress.update(bar, advance=1, info=msg.split(": ", 1)[-1])
                    if plain:
                        log(f"[bench] {msg}")

                def check(run: MethodRun, name: str = name, evals: dict[int, dict[str, Any]] = evals) -> bool:
                    """Evaluate at the checkpoints (step 1, compute grown by check_factor, real GRPO's
                    step S) and stop once an evaluated snapshot reaches the stop target."""
                    nonlocal stop_target
                    idx = len(run.records)
                    last_c = run.compute_at(max(evals)) if evals else 0.0
                    # (1% slack: a step that reaches the factor up to measurement noise is due, so that the
                    # schedule of a run with exactly repeating step costs does not hang on the last digit)
                    due = idx == 1 or run.compute_at(idx) >= 0.99 * cfg.check_factor * last_c
                    if name == "real" and idx == cfg.steps:
                        for i in (0, idx):
                            if i not in evals:
                                evals[i] = evaluate_at(agent, run, i, seed)
                        stop_target = provisional_stop_target(results, cfg, evals[0]["overall"], evals[idx]["overall"])
                        log(f"[bench] seed {seed}: stop target {stop_target if stop_target is None else round(stop_target, 2)}"
                            f" (real GRPO's scores untrained and at step {cfg.steps} over the seeds so far, x {cfg.stop_gain})")
                    elif due:
                        evals[idx] = evaluate_at(agent, run, idx, seed)
                        if plain:
                            log(f"[bench] {name} seed {seed} held-out evaluation of step {idx}: {evals[idx]['overall']:.1f}")
                    else:
                        return False
                    return stop_target is not None and idx in evals and evals[idx]["overall"] >= stop_target

                wm = make_learned_world_model(seed) if name in LEARNED_WM_METHODS else world_model  # type: ignore[misc]
                runs[name] = run_method(spec, seed, cfg, make_agent, make_env, wm, train_tasks,
                                        max_steps=steps_cap, compute_budget_s=None if name == "real" else budget_real,
                                        progress=tick, groups_per_step=method_groups_per_step(name, cfg),
                                        checkpoint=check)
                run = runs[name]
                progress.update(bar, total=len(run.records))
                for i in (0, len(run.records)):  # the curve's two ends are always evaluated
                    if i not in evals:
                        evals[i] = evaluate_at(agent, run, i, seed)
                last = run.records[-1]
                log(f"[bench] seed {seed} {name}: {len(run.records)} steps, stopped by {run.stopped}, compute "
                    f"{last.compute_cpu_s:.1f} CPU-s ({last.compute_wall_s:.1f} s wall-clock; whole method with its "
                    f"evaluations {time.perf_counter() - t0:.1f} s); held-out {evals[len(run.records)]['overall']:.1f}")
                if last.cpu_unmeasured:
                    log(f"[bench] WARNING seed {seed} {name}: {last.cpu_unmeasured} executions without a CPU figure "
                        "(the sandbox could not measure it): their compute is missing from every figure")
                if name == "real":
                    budget_real = last.compute_cpu_s
                save_partial_seed(out_dir, seed, results["config"], runs, evaluated, budget_real, stop_target,
                                  wall_clock_s=prior_wall + time.perf_counter() - t_all)
                if eval_cache is not None:  # the evaluations behind it, for the next part
                    save_eval_cache(out_dir, eval_cache)
            for name in order:
                if name in reused:
                    results["methods"][name]["seeds"].append(dict(reused[name][seed], reused_from=str(cfg.reuse_from)))
                    continue
                run, evals = runs[name], evaluated[name]
                n = len(run.records)
                points = {"last": n, **({"steps": cfg.steps} if cfg.steps in evals else {})}
                entry = {
                    "seed": seed,
                    "snapshot": points,
                    "compute_at": {p: run.compute_at(i) for p, i in points.items()},
                    "wall_at": {p: run.wall_at(i) for p, i in points.items()},
                    "eval": {p: evals[i] for p, i in points.items()},
                    "records": [asdict(r) for r in run.records],
                    "budgets": {"compute_real_to_stop_target": budget_real},
                    "stop_target": stop_target,
                    "stopped": run.stopped,
                    "ungraded": run.ungraded,
                }
                _set_curve(entry, run, evals)
                results["methods"][name]["seeds"].append(entry)
            kept.append((agent, runs, evaluated))
            save_snapshots(out_dir, seed, runs)
            save()
            drop_partial_seed(out_dir, seed)
        # the target is known once every seed of real GRPO has run: refine each curve near it
        if "real" in results["methods"] and cfg.refine_evals > 0:
            try:
                target = real_target(results, steps=cfg.steps, gain_fraction=cfg.target_gain)[0]
            except ValueError as exc:
                target = None
                log(f"[bench] no compute-to-target: {exc}")
            if target is not None:
                # one tick per curve: how many evaluations a curve needs is known only once its bracket is narrow
                curves = [(seed, name) for seed, restored in enumerate(kept) if restored is not None
                          for name in order if name not in reused]
                bar = progress.add_task("refine near the target (curves)", total=len(curves), info="")
                refined = 0
                for seed, restored in enumerate(kept):
                    if restored is None:  # a resumed seed without saved snapshots
                        continue
                    agent, runs, evaluated = restored
                    for name in order:
                        if name in reused:  # its curve was refined in the earlier run
                            continue
                        entry = results["methods"][name]["seeds"][seed]
                        compute = [runs[name].compute_at(k) for k in range(len(runs[name].records) + 1)]
                        # refine_evals counts per curve and target across --resume parts, so a
                        # refinement stopped part-way and resumed evaluates what an unstopped one would
                        same = entry.get("refine_target") is not None and math.isclose(entry["refine_target"], target, rel_tol=1e-12)
                        done = int(entry.get("refine_evals_done", 0)) if same else 0
                        new = 0
                        for _ in range(max(0, cfg.refine_evals - done)):  # until the bracket is within max_bracket_share
                            idx = bracket_refinement_step(entry["curve"]["step"], entry["curve"]["score"], compute,
                                                          target, cfg.max_bracket_share)
                            if idx is None or idx in evaluated[name]:
                                break
                            evaluated[name][idx] = evaluate_at(agent, runs[name], idx, seed)
                            _set_curve(entry, runs[name], evaluated[name])
                            new += 1
                            refined += 1
                            progress.update(bar, info=f"{refined} evaluations")
                            if plain:  # a log file gets a line per refinement evaluation, as per training step
                                log(f"[bench] refine {name} seed {seed} near {target:.2f}: held-out evaluation of step "
                                    f"{idx}: {evaluated[name][idx]['overall']:.1f} ({refined} so far)")
                        progress.update(bar, advance=1)
                        if new:  # each refined curve is saved: a stopped refinement loses at most one curve
                            entry["refine_target"], entry["refine_evals_done"] = target, done + new
                            save()
        if "real" in results["methods"]:
            try:
                results["speedup"] = compute_speedups(results, gain_fraction=cfg.target_gain, steps=cfg.steps,
                                                      fitting_cpu_s=fitting_cpu_s if fitting_unit == "CPU-s" else 0.0,
                                                      fitting_executions=fitting_executions)
            except ValueError as exc:  # real GRPO did not improve: there is no target to reach
                results["speedup"] = {}
                results["speedup_error"] = str(exc)
        results["costs"] = cost_summary(results)
        save()
    finally:
        progress.stop()
    write_report(results, out_dir)
    for line in headline_lines(results):
        log(f"[bench] {line}")
    log(f"[bench] outputs in {out_dir}: table.md, results.json, score_vs_compute.png, rho_calibration.png")
    return results


def headline_lines(results: dict[str, Any]) -> list[str]:
    """One line per method of the compute-to-target headline (``results["speedup"]``): the speedup
    over real-execution GRPO with its 95% CI, without and with the world model's fitting cost, or
    why there is none.

    Returns:
        The lines (the reason alone when the run has no target).
    """
    sp = results.get("speedup") or {}
    if not sp:
        return [f"no compute-to-target headline: {results.get('speedup_error', 'the run has no real-execution GRPO')}"]

    def fmt(x: Any) -> str:
        if not x or not x["method_median"] < float("inf"):
            return "not reached"
        if x["n_seeds"] < 2:
            return f"{x['point']:.1f}x (1 seed, no CI)"
        return f"{x['point']:.1f}x [{x['low']:.1f}, {x['high']:.1f}]".replace("inf", "∞")

    out = [f"target {sp['target']:.1f} (real GRPO's {sp['gain_fraction']:.0%} gain from {sp['s0']:.1f} to {sp['s_S']:.1f})"]
    for name, m in sp.get("methods", {}).items():
        if name != "real":
            line = f"{name}: {fmt(m.get('speedup'))} less compute than real GRPO to the target"
            if m.get("fitting_charged", True):  # files before the total: every method was given the column
                line += f"; {fmt(m.get('speedup_with_fitting'))} with the world model's fitting cost"
            if m.get("speedup_total") is not None and m.get("speedup_over_best_real") is not None:
                line += (f"; total CPU {fmt(m['speedup_total'])} vs real GRPO, {fmt(m['speedup_over_best_real'])} vs the "
                         f"best real-GRPO batch ({sp.get('best_real')})")
            out.append(line)
    return out


def main_bench(cfg: BenchConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """``wmrl bench``: build the real components and run :func:`run_bench`."""
    import torch

    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.secret import sandbox_hidden_paths
    from wmrl_envs.envs.autoresearch.tasks import list_tasks
    from wmrl_envs.sandbox import make_sandbox

    from agents.llm.backbone import resolve_device
    from agents.grpo import GRPOUpdateConfig

    check_bench_config(cfg)
    if cfg.agent != "llm" or resolve_device(cfg.device).type == "cpu":
        torch.set_num_threads(1)
    # the update settings check themselves now, before any model is loaded or seed started
    GRPOUpdateConfig(clip_eps=cfg.clip_eps, kl_coef=cfg.kl_coef, num_iterations=cfg.num_iterations)
    if cfg.lr is not None and not cfg.lr > 0:
        raise ValueError(f"lr must be > 0 (or omitted for the agent's default), got {cfg.lr}")
    if cfg.agent not in ("grammar", "llm"):
        raise ValueError(f"agent must be 'grammar' or 'llm', got {cfg.agent!r}")
    if cfg.agent == "llm":
        # the LLM agent learns at a small rate; the grammar agent's default (0.1) would wreck LoRA
        lr = cfg.lr if cfg.lr is not None else 2e-4

        def make_agent(seed: int) -> BenchAgent:
            return LLMBenchAgent(seed, lr=lr, kl_coef=cfg.kl_coef, clip_eps=cfg.clip_eps,
                                 num_iterations=cfg.num_iterations, model=cfg.model, device=cfg.device, dtype=cfg.dtype)
    else:
        def make_agent(seed: int) -> BenchAgent:
            return GrammarBenchAgent(seed, lr=cfg.lr if cfg.lr is not None else 0.1, kl_coef=cfg.kl_coef,
                                     clip_eps=cfg.clip_eps, num_iterations=cfg.num_iterations)
    sandbox = make_sandbox(cfg.sandbox, hidden_paths=sandbox_hidden_paths())  # task secret, bundled data
    if cfg.sandbox == "auto" and not sandbox.isolates:
        raise ValueError("no isolating sandbox works here; install bubblewrap or pass --sandbox subprocess")
    cost_model = None
    if cfg.execution_cost_model is not None:
        from .bench_costs import ExecutionCostModel, ModelledCostEnv

        cost_model = ExecutionCostModel.load(cfg.execution_cost_model)

    def make_env() -> Any:
        env = AutoResearchEnv(tasks="train", sandbox=sandbox)
        return env if cost_model is None else ModelledCostEnv(env, cost_model)

    wm = build_world_model(cfg)
    fitting_cpu_s, fitting_what, fitting_is_cpu = world_model_fitting_cost(cfg)
    log(f"[bench] sandbox={sandbox.name} world model={cfg.world_model} agent={cfg.agent} methods={list(cfg.methods)} "
        f"seeds={cfg.seeds}; world-model fitting cost {fitting_cpu_s:.0f} s ({fitting_what})")
    try:
        # This installation's leaderboards (built once per task secret): paid before any method
        # runs, so that no method's compute includes a one-off build.
        AutoResearchEnv(tasks="all", sandbox=sandbox).prepare_leaderboards()
        return run_bench(
            cfg,
            make_agent=make_agent,
            make_env=make_env,
            world_model=wm,
            train_tasks=list_tasks("train"),
            heldout_tasks=list_tasks("heldout"),
            sandbox=sandbox,
            log=log,
            fitting_cpu_s=fitting_cpu_s,
            fitting_unit="CPU-s" if fitting_is_cpu else "wall-clock s (no CPU figure logged: not added to the speedup)",
            fitting_executions=world_model_fitting_executions(cfg),
            make_learned_world_model=functools.partial(build_learned_world_model,
                                                       refit_every=cfg.learned_refit_every),
        )
    finally:
        sandbox.close()
