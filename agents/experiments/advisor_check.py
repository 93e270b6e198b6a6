"""``wmrl bench advisor``: the anchor-fraction advisor checked against measured speedups.

On the known-truth environment (``wmrl/KnownTruth-v0``, declared costs, exact evaluation) and
through the sweep's own runs (:func:`agents.experiments.sweep_run.run_sweep_method`, i.e. the same
wrapper and correction objects as the main job), it measures for each world-model quality level:

* WMRL's compute-to-target speedup over real-execution GRPO at fixed anchor fractions and with
  ``anchor_fraction="auto"`` (γ = the declared cost ratio), median over seeds with paired
  bootstrap CIs (:func:`agents.experiments.speedup.speedup`);
* the advisor's predicted speedup for each fixed-fraction cell (:func:`wmrl_envs.core.predicted_speedup`
  at the cell's fraction, with r = the pooled within-group correlation of the cell's anchor
  groups, calibrated out of sample) and, over all cells, the rank correlation of predicted and
  measured speedups and the worst miss;
* adaptive against fixed: auto's speedup over the best fixed fraction of its level and over
  f = 0.1 (the ratio of median compute-to-target, paired bootstrap CI; a CI containing 1 is
  "within noise");
* a world model that breaks mid-run: the fraction in force and ρ per step (mean over seeds) for
  auto and fixed f = 0.1, and each one's score at the end of real GRPO's compute (``advisor_break.png``);
* blind spots: the policy's probability on the world model's blind-spot actions at the start and
  at the end of training to the compute budget, for world model only, the ablations and WMRL
  (fixed and adaptive fraction).

Outputs: ``results.json``, ``table.md``, ``advisor_break.png``. The method: ``docs/method.md``,
"Choosing the anchor fraction".
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .advisor_check_config import AdvisorCheckConfig
from .advisor_oos import format_oos_table, md_table, run_out_of_sample, spearman, table_num
from .sweep_config import BREAKING

__all__ = ["run_advisor_check", "format_advisor_table", "main_advisor_check"]


def run_advisor_check(cfg: AdvisorCheckConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the check and write its outputs (see the module docstring).

    Returns:
        The results dict (also ``out_dir/results.json``): ``target``, ``budget_s``, ``cells``
        (level, fraction or "auto", measured speedup and CI, predicted speedup, r, realised
        fraction), ``prediction`` (rank correlation, worst miss), ``adaptive`` (auto against the
        best fixed fraction and f = 0.1, per level), ``breaking`` (per-step traces).

    Raises:
        ValueError: real GRPO did not improve (no target), or a fraction outside (0, 1].
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from wmrl_envs.core import CostRates, GradientNoiseScale, predicted_speedup

    from .speedup import Curve, compute_to_target, speedup, target_score
    from .sweep_config import step_cap_for
    from .sweep_run import run_jobs

    if not cfg.fractions or not all(0 < f <= 1 for f in cfg.fractions):
        raise ValueError(f"fractions must be anchor fractions in (0, 1], got {cfg.fractions!r}")
    if isinstance(cfg.pilot_steps, bool) or not isinstance(cfg.pilot_steps, int) or cfg.pilot_steps < 1:
        raise ValueError(f"pilot_steps must be an integer >= 1 (real-GRPO steps the noise scale is measured on), "
                         f"got {cfg.pilot_steps!r}")
    sc = replace(cfg.sweep, levels=tuple(cfg.levels), fractions=tuple(cfg.fractions), breaking=cfg.breaking)
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    gamma = sc.wm_cost_s / sc.execution_cost_s
    f_min = sc.correction.f_min
    levels = list(cfg.levels) + ([BREAKING] if cfg.breaking else [])
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with progress:
        real = run_jobs([("real", None, None, s, sc, {"max_steps": sc.steps}) for s in range(sc.seeds)], sc,
                         progress, "real GRPO")
        curves = [Curve(r.compute, r.score) for r in real]
        target = target_score(curves, gain_fraction=sc.gain_fraction, min_gain=sc.min_gain)
        real_ctt = [compute_to_target(c, target) for c in curves]
        budget = sc.max_compute_factor * float(np.median([r.compute[-1] for r in real]))
        noise_pilot, noise_run = GradientNoiseScale(), GradientNoiseScale()
        for r in real:
            for k, m in enumerate(r.noise_moments):
                noise_run.add_step(*m)
                if k < cfg.pilot_steps:
                    noise_pilot.add_step(*m)
        b_pilot = noise_pilot.ratio(sc.groups_per_step) if noise_pilot.steps else None
        b_pilot = None if b_pilot is None or not math.isfinite(b_pilot) else b_pilot
        b_run = noise_run.ratio(sc.groups_per_step) if noise_run.steps else float("nan")
        log(f"[advisor] target {target:.3f}; budget {budget:.0f} CPU-s; gamma {gamma:.4g}; gradient noise scale "
            f"B_noise / B = {b_pilot if b_pilot is not None else float('nan'):.3g} over the first {cfg.pilot_steps} "
            f"steps ({b_run:.3g} over whole runs)")
        sc_auto = replace(sc, auto_noise_batch_ratio=b_pilot)
        cells = [(lv, f) for lv in levels for f in (*cfg.fractions, "auto")]
        jobs = [("wmrl", lv, f, s, sc_auto if f == "auto" else sc, {"max_steps": step_cap_for("wmrl", f_min if f == "auto" else f, sc, budget),
                                        "target": target, "compute_budget_s": budget})
                for lv, f in cells for s in range(sc.seeds)]
        runs = run_jobs(jobs, sc, progress, "WMRL, fixed and adaptive fractions")
        # exploitation of blind spots: world model only and anchors without correction beside WMRL
        f_ref = 0.1 if 0.1 in cfg.fractions else cfg.fractions[0]
        blind_jobs = [] if "blind_spots" not in cfg.levels else [
            (m, "blind_spots", f, s, sc_auto if f == "auto" else sc, {"max_steps": step_cap_for(m, f_min if f == "auto" else f, sc, budget),
                                          "compute_budget_s": budget})
            for m, f in (("wm_only", None), ("anchors_raw", f_ref), ("debias_only", f_ref), ("denoise_only", f_ref),
                         ("wmrl", f_ref), ("wmrl", "auto"))
            for s in range(sc.seeds)]
        blind_runs = run_jobs(blind_jobs, sc, progress, "blind spots: other methods") if blind_jobs else []
    by_cell: dict[tuple, list[Any]] = {}
    for r, (_m, lv, f, *_rest) in zip(runs, jobs):
        by_cell.setdefault((lv, f), []).append(r)
    cells_out, ctt_by_cell = [], {}
    for (lv, f), rs in by_cell.items():
        rs = sorted(rs, key=lambda r: r.seed)
        ctt = [compute_to_target(Curve(r.compute, r.score), target) for r in rs]
        ctt_by_cell[(lv, f)] = ctt
        est = speedup(real_ctt, ctt, n_boot=sc.n_boot, seed=0)
        rvals = [r.pooled_pearson for r in rs if math.isfinite(r.pooled_pearson)]
        r_mean = float(np.mean(rvals)) if rvals else float("nan")
        steps = sum(len(r.anchor_fraction) for r in rs)
        realised = sum(r.anchor_groups for r in rs) / (steps * sc.groups_per_step) if steps else 0.0
        ok = f != "auto" and math.isfinite(r_mean)
        rc, costs = max(-1.0, min(1.0, r_mean)) if ok else 0.0, CostRates(sc.execution_cost_s, sc.wm_cost_s)
        pred = predicted_speedup(float(f), rc, costs, b_pilot) if ok else float("nan")
        pred_limited = predicted_speedup(float(f), rc, costs) if ok else float("nan")
        cells_out.append({"level": lv, "fraction": f, "speedup": est.point, "low": est.low, "high": est.high,
                          "formatted": est.format(), "n_reached": est.n_reached, "n_seeds": est.n_seeds,
                          "compute_to_target": ctt, "r": r_mean, "predicted_speedup": pred,
                          "predicted_noise_limited": pred_limited,
                          "realised_fraction": realised, "stop_reasons": [r.stop_reason for r in rs]})
    # predicted vs measured over the fixed-fraction cells whose speedup is a number
    def agreement(key: str) -> dict[str, Any]:
        pairs = [(c[key], c["speedup"], c) for c in cells_out
                 if c["fraction"] != "auto" and math.isfinite(c[key]) and c[key] > 0 and 0 < c["speedup"] < math.inf]
        miss = max(pairs, key=lambda p: abs(math.log(p[0] / p[1]))) if pairs else None
        out = {"n_cells": len(pairs), "spearman": spearman([p for p, _, _ in pairs], [m for _, m, _ in pairs]),
               "median_ratio": float(np.median([m / p for p, m, _ in pairs])) if pairs else float("nan"),
               "worst_miss": None if miss is None else {"predicted": miss[0], "measured": miss[1],
                                                        "factor": max(miss[0] / miss[1], miss[1] / miss[0]),
                                                        "cell": {"level": miss[2]["level"], "fraction": miss[2]["fraction"]}}}
        return out

    prediction = {**agreement("predicted_speedup"), "noise_batch_ratio": b_pilot, "noise_batch_ratio_whole_runs": b_run,
                  "pilot_steps": cfg.pilot_steps, "noise_limited": agreement("predicted_noise_limited")}
    adaptive = {}
    for lv in levels:
        fixed = [(f, float(np.median(ctt_by_cell[(lv, f)]))) for f in cfg.fractions]
        best_f = min(fixed, key=lambda t: t[1])[0]
        auto = ctt_by_cell[(lv, "auto")]
        vs_best = speedup(ctt_by_cell[(lv, best_f)], auto, n_boot=sc.n_boot, seed=1)
        entry = {"best_fixed_fraction": best_f, "vs_best": {"ratio": vs_best.point, "low": vs_best.low,
                                                           "high": vs_best.high, "formatted": vs_best.format()}}
        if 0.1 in cfg.fractions:
            v = speedup(ctt_by_cell[(lv, 0.1)], auto, n_boot=sc.n_boot, seed=2)
            entry["vs_0.1"] = {"ratio": v.point, "low": v.low, "high": v.high, "formatted": v.format()}
        entry["final_fraction"] = float(np.mean([r.anchor_fraction[-1] for r in by_cell[(lv, "auto")] if r.anchor_fraction]))
        adaptive[lv] = entry
    breaking = {}
    if cfg.breaking:
        for f in ("auto", 0.1):
            if (BREAKING, f) not in by_cell:
                continue
            rs = by_cell[(BREAKING, f)]
            n = max(len(r.rho) for r in rs)
            breaking[str(f)] = {
                "anchor_fraction": [float(np.mean([r.anchor_fraction[i] for r in rs if i < len(r.anchor_fraction)]))
                                    for i in range(n)],
                "rho": [float(np.mean([r.rho[i] for r in rs if i < len(r.rho)])) for i in range(n)],
                "score": [float(np.mean([r.score[i] for r in rs if i < len(r.score)])) for i in range(n + 1)],
                "score_at_real_compute": [float(Curve(r.compute, r.score).score_at(min(r.compute[-1], float(np.median(
                    [x.compute[-1] for x in real]))))) for r in rs],
            }
        breaking["real_final_score"] = [r.score[-1] for r in real]
    blind_out: dict[str, Any] = {}
    if blind_jobs:
        # every method trains to the compute budget here (no stop at the target), so that the final
        # mass on blind-spot actions shows what a run left to train would exploit
        groups: dict[str, list[Any]] = {}
        for r, (m, _lv, f, *_rest) in zip(blind_runs, blind_jobs):
            groups.setdefault(m if f is None else f"{m} f={f}", []).append(r)
        for name, rs in groups.items():
            blind_out[name] = {"initial": float(np.mean([r.blind_spot_mass[0] for r in rs])),
                               "final": float(np.mean([r.blind_spot_mass[-1] for r in rs])),
                               "final_score": float(np.mean([r.score[-1] for r in rs])),
                               "steps": float(np.mean([len(r.rho) for r in rs]))}
    results = {"config": asdict(cfg), "gamma": gamma, "blind_spots": blind_out, "target": target, "budget_s": budget,
               "real_compute_to_target": real_ctt, "cells": cells_out, "prediction": prediction,
               "adaptive": adaptive, "breaking": breaking, "wall_clock_s": time.perf_counter() - t0}
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=float))
    (out_dir / "table.md").write_text(format_advisor_table(results))
    if breaking:
        _plot_break(results, out_dir / "advisor_break.png", sc.break_at_step)
    log(f"[advisor] {len(real) + len(runs) + len(blind_runs)} runs in {results['wall_clock_s']:.0f} s; outputs in {out_dir}")
    return results


def format_advisor_table(results: dict[str, Any]) -> str:
    """``table.md``: measured against predicted speedup per cell, the prediction's rank correlation
    and worst miss, adaptive against fixed fractions."""

    lines = [f"Target {results['target']:.3f}; budget {results['budget_s']:.0f} CPU-s; γ = {results['gamma']:.4g}.", "",
             *md_table(["level", "anchor fraction", "measured speedup [95% CI]", "predicted (measured b)",
                        "predicted (b = ∞)", "r (pooled, cross-fitted)", "realised fraction"],
                       ((c["level"], c["fraction"], c["formatted"], table_num(c["predicted_speedup"]),
                         table_num(c.get("predicted_noise_limited")), table_num(c["r"]),
                         table_num(c["realised_fraction"], 3)) for c in results["cells"]))]
    p = results["prediction"]

    def agreement(q: dict[str, Any], what: str) -> str:
        return (f"{what} over {q['n_cells']} fixed-fraction cells: Spearman {table_num(q['spearman'])}, median measured / "
                f"predicted {table_num(q.get('median_ratio'))}"
                + ("" if not q["worst_miss"] else
                   f"; worst miss {q['worst_miss']['cell']['level']} at f = {q['worst_miss']['cell']['fraction']}: "
                   f"predicted {q['worst_miss']['predicted']:.2f}×, measured {q['worst_miss']['measured']:.2f}× "
                   f"(factor {q['worst_miss']['factor']:.2f})") + ".")

    b_txt = "not measured" if p.get("noise_batch_ratio") is None else f"{p['noise_batch_ratio']:.3g}"
    lines += ["", f"Gradient noise scale of real GRPO over its batch, B_noise / B = {b_txt} (first "
              f"{p.get('pilot_steps', '?')} steps of every seed; {table_num(p.get('noise_batch_ratio_whole_runs'))} over whole runs).",
              "", agreement(p, "Predicted (measured b) against measured"),
              "", agreement(p["noise_limited"], "Predicted (b = ∞, no noise scale) against measured")
              if "noise_limited" in p else "", "",
              "| level | best fixed f | auto vs best fixed (ratio of medians, 95% CI) | auto vs f = 0.1 | auto's final fraction |",
              "|---|---|---|---|---|"]
    for lv, a in results["adaptive"].items():
        lines.append(f"| {lv} | {a['best_fixed_fraction']} | {a['vs_best']['formatted']} | "
                     f"{a.get('vs_0.1', {}).get('formatted', '—')} | {table_num(a['final_fraction'], 3)} |")
    bs = results.get("blind_spots") or {}
    if bs:
        lines += ["", "Blind spots: the policy's probability on the blind-spot actions (mean over tasks and seeds)",
                  "", "| method | at the start | at the end | final expected score | steps |", "|---|---|---|---|---|"]
        for name, v in bs.items():
            lines.append(f"| {name} | {v['initial']:.3f} | {v['final']:.3f} | {v['final_score']:.3f} | {v['steps']:.0f} |")
    b = results.get("breaking") or {}
    if b:
        lines += ["", "Breaking world model, score at real GRPO's median compute (mean over seeds): "
                  + ", ".join(f"{k}: {np.mean(v['score_at_real_compute']):.3f}" for k, v in b.items() if k != "real_final_score")
                  + f"; real GRPO after S steps: {np.mean(b['real_final_score']):.3f}."]
    return "\n".join(lines) + "\n"


def _plot_break(results: dict[str, Any], path: Path, break_at_step: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b = results["breaking"]
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for key, style in (("auto", "-"), ("0.1", "--")):
        if key not in b:
            continue
        ax[0].plot(range(1, len(b[key]["anchor_fraction"]) + 1), b[key]["anchor_fraction"], style,
                   label=f"anchor fraction ({key})")
        ax[1].plot(range(1, len(b[key]["rho"]) + 1), b[key]["rho"], style, label=f"rho ({key})")
    for a in ax:
        a.axvline(break_at_step + 0.5, color="grey", ls=":", label="world model breaks")
        a.set_xlabel("training step")
        a.legend(fontsize=8)
    ax[0].set_ylabel("anchor fraction in force (mean over seeds)")
    ax[1].set_ylabel("anchor weight rho (mean over seeds)")
    fig.suptitle("A world model that breaks mid-run: adaptive against fixed f = 0.1")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main_advisor_check(cfg: AdvisorCheckConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """``wmrl bench advisor``: run the check (or, with ``--out-of-sample``, the out-of-sample
    check) and print its table."""
    if cfg.out_of_sample:
        res = run_out_of_sample(cfg, log=log)
        log(format_oos_table(res))
        return res
    res = run_advisor_check(cfg, log=log)
    log(format_advisor_table(res))
    return res
