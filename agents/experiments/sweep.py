"""The known-truth sweep (``wmrl bench sweep``): where WMRL pays, over world-model quality × anchor fraction.

Issue 11, items 4 and 5. On :class:`~wmrl_envs.envs.known_truth.KnownTruthEnv` (a true expected
score per action, declared costs) it trains a small tabular softmax policy with GRPO under the
methods of ``wmrl bench`` (:data:`agents.experiments.methods.METHODS`: real-execution GRPO, world
model only, WMRL and its three ablations) and measures the compute-to-target speedup of each
against real GRPO (:mod:`agents.experiments.speedup`), over a grid of world-model quality levels
(:data:`~wmrl_envs.envs.known_truth.WORLD_MODEL_ERRORS`, each reported with the within-group
Pearson and Spearman correlation it produced, measured) × anchor fractions, plus a world model
that breaks mid-run.

Everything runs through the objects of the main job: one
:class:`~wmrl_envs.AnchoredWorldModelWrapper` per run (``plan_step``, ``score_group``), its
:class:`~wmrl_envs.core.CorrectionConfig` from :func:`agents.experiments.methods.method_correction`,
the advantages of :func:`agents.grpo.group_batch` and the one GRPO group step
:func:`agents.grpo.group_step` — the shape of :func:`agents.experiments.bench_run.run_method`.

Compute is the ledger's CPU-seconds over its four sources: execution and world model are
*declared* (``info["execution_cpu_s"]`` per execution, ``declared_cpu_s_per_prediction`` per
prediction), generation and update are measured. The held-out score of every snapshot is the
policy's *exact* expected true score over the evaluation tasks (all tasks:
:meth:`~wmrl_envs.envs.known_truth.KnownTruthEnv.expected_score`), so curves have no evaluation
noise; evaluation is not training compute.

Per seed, real GRPO trains ``steps`` steps; the target is ``gain_fraction`` of real GRPO's mean
gain (:func:`~agents.experiments.speedup.target_score`, at least ``min_gain``). Every other method
trains until its curve reaches the target or its compute reaches the budget,
``max_compute_factor`` × real GRPO's median compute. The compute budget is what binds: each
run's step cap is derived from its declared cost per step (:func:`declared_step_cost_s`) so that
it can spend the whole budget (:func:`step_cap_for`), within the absolute safety cap
``step_cap``, which binds first only where a run's budget would need more steps than that (world
model only, at about 1 % of real GRPO's cost per step). Each run records why it stopped
(``"target"``, ``"compute budget"`` or ``"step cap"``); a seed that stops short of the target has
compute-to-target ``inf``, and a cell that is not reached says which limit stopped it ("not
reached within budget" or "not reached within N steps (step cap)").

Outputs in ``out_dir``: ``results.json``, ``table.md``, ``speedup_heatmap.png`` (WMRL),
``speedup_heatmap_methods.png`` (world model only and the ablations), ``traces.png`` (ρ and
calibration error over steps, and the breaking world model). The method's math:
``docs/method.md``; usage: ``benchmarks/README.md``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np


from .sweep_config import ABLATIONS, BREAKING, REAL_AT_F, SweepConfig, equal_steps_cost_ratio, step_cap_for
from .sweep_report import format_sweep_table, plot_heatmaps, plot_traces
from .sweep_run import SweepRun, make_env, run_jobs, wm_error

__all__ = ["run_sweep", "main_sweep"]


def _cells(cfg: SweepConfig) -> list[tuple[str, str, float | None]]:
    """(method, level, fraction) of every non-real cell, in table order."""
    levels = list(cfg.levels) + ([BREAKING] if cfg.breaking else [])
    cells: list[tuple[str, str | None, float | None]] = []
    if cfg.real_at_f:
        cells += [(REAL_AT_F, None, f) for f in cfg.fractions]
    for level in levels:
        if "wm_only" in cfg.methods:
            cells.append(("wm_only", level, None))
        for f in cfg.fractions:
            if "wmrl" in cfg.methods:
                cells.append(("wmrl", level, f))
            if level != BREAKING and (cfg.ablation_fractions is None or f in cfg.ablation_fractions):
                cells += [(m, level, f) for m in ABLATIONS if m in cfg.methods]
    return cells


def run_sweep(cfg: SweepConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the sweep, compute the speedups, write the outputs (see the module docstring).

    Returns:
        The results dict (also ``out_dir/results.json``): ``config``, ``cost`` (ratio, bounds),
        ``target``, ``levels`` (correlations), ``cells`` (speedup, CI, compute-to-target per
        seed, realised fraction, executions), ``runs`` (every run's curve and traces),
        ``wall_clock_s``.

    Raises:
        ValueError: real GRPO did not improve (there is no target; from
            :func:`agents.experiments.speedup.target_score`).
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from wmrl_envs.envs.known_truth import measured_correlation

    from .speedup import Curve, compute_to_target, speedup, target_score

    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with progress:
        real = run_jobs([("real", None, None, s, cfg, {"max_steps": cfg.steps}) for s in range(cfg.seeds)],
                         cfg, progress, "real GRPO")
        real_curves = [Curve(r.compute, r.score) for r in real]
        target = target_score(real_curves, gain_fraction=cfg.gain_fraction, min_gain=cfg.min_gain)
        real_ctt = [compute_to_target(c, target) for c in real_curves]
        budget = cfg.max_compute_factor * float(np.median([r.compute[-1] for r in real]))
        log(f"[sweep] real GRPO: score {np.mean([r.score[0] for r in real]):.3f} -> {np.mean([r.score[-1] for r in real]):.3f} "
            f"in {cfg.steps} steps; target {target:.3f}; budget {budget:.0f} CPU-s (safety cap {cfg.step_cap} steps)")
        cells = _cells(cfg)
        jobs = [(m, lv, f, s, cfg, {"max_steps": step_cap_for(m, f, cfg, budget), "target": target,
                                    "compute_budget_s": budget})
                for (m, lv, f) in cells for s in range(cfg.seeds)]
        others = run_jobs(jobs, cfg, progress, "other methods")
    by_cell: dict[tuple, list[SweepRun]] = {}
    for r, (m, lv, f, *_rest) in zip(others, jobs):
        by_cell.setdefault((m, lv, f), []).append(r)
    # each level's correlation under the untrained (uniform) policy, and on the anchor groups of its runs
    env0 = make_env(cfg, 0)
    levels_out: dict[str, Any] = {}
    for lv in list(cfg.levels) + ([BREAKING] if cfg.breaking else []):
        entry: dict[str, Any] = {}
        if lv == BREAKING:
            for side, name in (("before", cfg.break_from), ("after", cfg.break_to)):
                c = measured_correlation(env0, wm_error(cfg, name), n_groups=cfg.correlation_groups,
                                         group_size=cfg.group_size, seed=0)
                entry[f"initial_{side}"] = {"pearson": c.pearson, "spearman": c.spearman}
        else:
            c = measured_correlation(env0, wm_error(cfg, lv), n_groups=cfg.correlation_groups,
                                     group_size=cfg.group_size, seed=0)
            entry["initial"] = {"pearson": c.pearson, "spearman": c.spearman}
        runs = [r for (m, l2, _f), rs in by_cell.items() if l2 == lv and m != "wm_only" for r in rs if r.correlation]
        used = sum(r.correlation["n_used"] for r in runs)
        if used:
            entry["anchors"] = {k: float(sum(r.correlation[k] * r.correlation["n_used"] for r in runs if r.correlation["n_used"]) / used)
                                for k in ("pearson", "spearman")}
            entry["anchors"]["n_groups"] = used
        levels_out[lv] = entry
    cells_out = []
    for (m, lv, f), runs in by_cell.items():
        runs = sorted(runs, key=lambda r: r.seed)
        ctt = [compute_to_target(Curve(r.compute, r.score), target) for r in runs]
        est = speedup(real_ctt, ctt, n_boot=cfg.n_boot, seed=0)
        cap = runs[0].max_steps
        capped = [r.seed for r, t in zip(runs, ctt) if math.isinf(t) and r.stop_reason == "step cap"]
        limit = f"within {cap} steps (step cap)" if capped else "within budget"
        gps = max(1, int(round(f * cfg.groups_per_step))) if m == REAL_AT_F else cfg.groups_per_step
        groups = sum(len(r.rho) for r in runs) * gps
        cells_out.append({
            "method": m, "level": lv, "fraction": f,
            "speedup": est.point, "low": est.low, "high": est.high, "n_reached": est.n_reached,
            "n_seeds": est.n_seeds, "reached": est.reached(), "formatted": est.format(limit=limit),
            "compute_to_target": ctt,
            "stop_reasons": [r.stop_reason for r in runs], "step_cap": cap,
            "final_compute": [r.compute[-1] for r in runs],
            "equal_steps_cost_ratio": None if m == REAL_AT_F else equal_steps_cost_ratio(
                f if m != "wm_only" else 0.0, cfg.execution_cost_s, cfg.wm_cost_s),
            "realised_fraction": (sum(r.anchor_groups for r in runs) / groups) if groups else 0.0,
            "executions": [r.executions for r in runs], "anchor_groups": [r.anchor_groups for r in runs],
            "steps": [len(r.rho) for r in runs],
        })
    results: dict[str, Any] = {
        "config": asdict(cfg),
        "cost": {"execution_cpu_s": cfg.execution_cost_s, "world_model_cpu_s": cfg.wm_cost_s,
                 "ratio_wm_to_execution": cfg.wm_cost_s / cfg.execution_cost_s,
                 "equal_steps_cost_ratio": {str(f): equal_steps_cost_ratio(f, cfg.execution_cost_s, cfg.wm_cost_s)
                                            for f in cfg.fractions},
                 "equal_steps_cost_ratio_wm_only": equal_steps_cost_ratio(0.0, cfg.execution_cost_s, cfg.wm_cost_s)},
        "target": target, "real_compute_to_target": real_ctt, "compute_budget_s": budget, "step_cap": cfg.step_cap,
        "levels": levels_out, "cells": cells_out,
        "runs": [asdict(r) for r in real + others],
        "wall_clock_s": time.perf_counter() - t_all,
    }
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=float))
    (out_dir / "table.md").write_text(format_sweep_table(results))
    plot_heatmaps(results, out_dir)
    plot_traces(results, out_dir)
    log(f"[sweep] {len(real) + len(others)} runs in {results['wall_clock_s']:.0f} s; outputs in {out_dir}")
    return results


def main_sweep(cfg: SweepConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """``wmrl bench sweep``: :func:`run_sweep` with torch on one thread."""
    import torch

    torch.set_num_threads(1)
    log(f"[sweep] levels={list(cfg.levels)} fractions={list(cfg.fractions)} methods={list(cfg.methods)} "
        f"seeds={cfg.seeds} workers={cfg.workers}")
    return run_sweep(cfg, log=log)
