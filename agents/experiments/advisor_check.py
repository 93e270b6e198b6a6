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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .sweep_config import BREAKING, SweepConfig

__all__ = ["AdvisorCheckConfig", "ADVISOR_CHECK_PRESETS", "OutOfSampleConfig", "main_advisor_check", "parse_oos_error",
           "parse_oos_setting", "run_advisor_check", "run_out_of_sample"]


@dataclass
class OutOfSampleConfig:
    """The cells of ``wmrl bench advisor --out-of-sample`` (each field is a flag ``--oos.FIELD``).

    World models are written ``name:field=value,...`` with the fields of
    :class:`wmrl_envs.envs.known_truth.WorldModelError` (its declared cost is replaced by the
    setting's ``wm_cost_s``); a name must not be one of the in-sample levels
    (:data:`~wmrl_envs.envs.known_truth.WORLD_MODEL_ERRORS`). Settings are written
    ``field=value,...`` with fields of :class:`agents.experiments.sweep_config.SweepConfig` among
    ``wm_cost_s``, ``group_size``, ``groups_per_step``, ``outcome_noise_std``; each replaces the
    base settings (``AdvisorCheckConfig.sweep``)."""

    errors: tuple[str, ...] = ("sq_bias:squash=8,bias_std=0.2", "squash_noise:squash=12,noise_std=0.25",
                               "noise_bias:noise_std=0.2,bias_std=0.15", "bias_noise_heavy:bias_std=0.3,noise_std=0.3",
                               "blind_noise:blind_spot_share=0.5,noise_std=0.15", "weak:information=0.25,noise_std=0.2",
                               "very_weak:information=0.1,noise_std=0.25")
    """World models run at the base settings: mixtures of the in-sample error kinds and partial
    information, none of them an in-sample level (a pilot's r at G = 8 from 0.84 down to about 0.1)."""
    settings: tuple[str, ...] = ("wm_cost_s=0.05", "wm_cost_s=0.0025", "group_size=4", "group_size=16")
    """Other settings (cost ratios 1 : 20 and 1 : 400, G = 4 and 16 at the base's 1 : 100)."""
    setting_errors: tuple[str, ...] = ("sq_bias", "bias_noise_heavy", "very_weak")
    """Names of ``errors`` run at each of ``settings`` (a high, a middle and a low r)."""
    fractions: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4)
    """Fixed anchor fractions of every cell."""
    first_seed: int = 100
    """Measured runs use seeds first_seed .. first_seed + sweep.seeds - 1 (the in-sample check used 0 .. 9)."""
    pilot_seeds: tuple[int, ...] = (1000, 1001)
    """Seeds of the pilots (their own env tables and world-model draws; never a measured seed)."""
    pilot_groups: int = 16
    """Pilot groups per pilot seed under the untrained policy, every one executed and predicted
    (what ``wmrl advise`` does): the advisor's r, its interval and its recommended fraction."""
    pilot_steps: int = 3
    """Real-GRPO steps per pilot seed on which the gradient noise scale b is measured (per group size)."""


@dataclass
class AdvisorCheckConfig:
    """Configuration of ``wmrl bench advisor`` (each field is a CLI flag)."""

    levels: tuple[str, ...] = ("perfect", "heavy_noise", "bias", "blind_spots", "useless")
    """World-model quality levels (names of wmrl_envs.envs.known_truth.WORLD_MODEL_ERRORS)."""
    fractions: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4)
    """The fixed anchor fractions auto is compared with."""
    breaking: bool = True
    """Also the world model that breaks mid-run (sweep settings break_from, break_to, break_at_step)."""
    sweep: SweepConfig = field(default_factory=lambda: SweepConfig(workers=2))
    """The environment, costs, policy, correction and budget settings (those of wmrl bench sweep,
    flags --sweep.seeds, --sweep.wm-cost-s, ...; its levels and fractions are replaced by the two above)."""
    pilot_steps: int = 3
    """Real-GRPO steps (per seed, pooled over seeds) the gradient noise scale is measured on: what a
    pilot before training would see. The predictions and the runs with auto use it."""
    out_dir: str = "runs/advisor-check"
    """Output folder."""
    out_of_sample: bool = False
    """Run the out-of-sample check instead (run_out_of_sample, settings --oos.*): world models, cost
    ratios, group sizes and seeds the in-sample cells never used, r and b from a pilot of each cell."""
    oos: OutOfSampleConfig = field(default_factory=lambda: OutOfSampleConfig())
    """Settings of the out-of-sample check (with --out-of-sample)."""


ADVISOR_CHECK_PRESETS: dict[str, AdvisorCheckConfig] = {
    "default": AdvisorCheckConfig(),
    "quick": AdvisorCheckConfig(levels=("perfect", "blind_spots", "useless"), fractions=(0.1, 0.4),
                                sweep=SweepConfig(seeds=3, steps=12, step_cap=300, break_at_step=4, n_boot=300,
                                                  correlation_groups=64, workers=1),
                                out_dir="runs/advisor-check-quick"),
    # the out-of-sample check as run for docs/advisor_check.md: 8 seeds per cell, one worker
    "out_of_sample": AdvisorCheckConfig(out_of_sample=True, sweep=SweepConfig(seeds=8, workers=1, n_boot=2000),
                                        out_dir="runs/advisor-check-oos"),
    # its CI size (seconds): one new world model at the base and at one other cost ratio, 2 seeds
    "out_of_sample_quick": AdvisorCheckConfig(
        out_of_sample=True, out_dir="runs/advisor-check-oos-quick",
        sweep=SweepConfig(seeds=3, steps=10, groups_per_step=8, group_size=4, step_cap=60, n_boot=200, workers=1,
                          breaking=False),
        oos=OutOfSampleConfig(errors=("noise_bias:noise_std=0.2,bias_std=0.15",), settings=("wm_cost_s=0.05",),
                              setting_errors=("noise_bias",), fractions=(0.1, 0.4), pilot_seeds=(1000,),
                              pilot_groups=12, pilot_steps=2)),
}
"""``wmrl bench advisor`` starts from ``"default"``; ``--quick`` from ``"quick"`` (the CI preset);
``--out-of-sample`` with the ``"default"`` preset's sweep runs the out-of-sample check at 10 seeds;
``"out_of_sample"`` is the size run for ``docs/advisor_check.md`` (``--out-of-sample --sweep.seeds 8
--sweep.workers 1``)."""


def _spearman(x: list[float], y: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic) if len(x) >= 3 else float("nan")


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
        out = {"n_cells": len(pairs), "spearman": _spearman([p for p, _, _ in pairs], [m for _, m, _ in pairs]),
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


def _num(x: Any, nd: int = 2) -> str:
    """A table cell: ``x`` with ``nd`` decimals, or a dash when it is missing or not finite."""
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{nd}f}"


def format_advisor_table(results: dict[str, Any]) -> str:
    """``table.md``: measured against predicted speedup per cell, the prediction's rank correlation
    and worst miss, adaptive against fixed fractions."""

    lines = [f"Target {results['target']:.3f}; budget {results['budget_s']:.0f} CPU-s; γ = {results['gamma']:.4g}.", "",
             "| level | anchor fraction | measured speedup [95% CI] | predicted (measured b) | predicted (b = ∞) | "
             "r (pooled, cross-fitted) | realised fraction |",
             "|---|---|---|---|---|---|---|"]
    for c in results["cells"]:
        lines.append(f"| {c['level']} | {c['fraction']} | {c['formatted']} | {_num(c['predicted_speedup'])} | "
                     f"{_num(c.get('predicted_noise_limited'))} | {_num(c['r'])} | {_num(c['realised_fraction'], 3)} |")
    p = results["prediction"]

    def agreement(q: dict[str, Any], what: str) -> str:
        return (f"{what} over {q['n_cells']} fixed-fraction cells: Spearman {_num(q['spearman'])}, median measured / "
                f"predicted {_num(q.get('median_ratio'))}"
                + ("" if not q["worst_miss"] else
                   f"; worst miss {q['worst_miss']['cell']['level']} at f = {q['worst_miss']['cell']['fraction']}: "
                   f"predicted {q['worst_miss']['predicted']:.2f}×, measured {q['worst_miss']['measured']:.2f}× "
                   f"(factor {q['worst_miss']['factor']:.2f})") + ".")

    b_txt = "not measured" if p.get("noise_batch_ratio") is None else f"{p['noise_batch_ratio']:.3g}"
    lines += ["", f"Gradient noise scale of real GRPO over its batch, B_noise / B = {b_txt} (first "
              f"{p.get('pilot_steps', '?')} steps of every seed; {_num(p.get('noise_batch_ratio_whole_runs'))} over whole runs).",
              "", agreement(p, "Predicted (measured b) against measured"),
              "", agreement(p["noise_limited"], "Predicted (b = ∞, no noise scale) against measured")
              if "noise_limited" in p else "", "",
              "| level | best fixed f | auto vs best fixed (ratio of medians, 95% CI) | auto vs f = 0.1 | auto's final fraction |",
              "|---|---|---|---|---|"]
    for lv, a in results["adaptive"].items():
        lines.append(f"| {lv} | {a['best_fixed_fraction']} | {a['vs_best']['formatted']} | "
                     f"{a.get('vs_0.1', {}).get('formatted', '—')} | {_num(a['final_fraction'], 3)} |")
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


# ---------------------------------------------------------------------- out of sample
_OOS_SETTING_FIELDS = {"wm_cost_s": float, "group_size": int, "groups_per_step": int, "outcome_noise_std": float}
_OOS_PREFIX = "oos:"  # the out-of-sample world models' level names while they run (never an in-sample name)


def parse_oos_error(spec: str) -> tuple[str, Any]:
    """``"name:field=value,..."`` → ``(name, WorldModelError)`` (see :class:`OutOfSampleConfig`).

    Raises:
        ValueError: no name, an in-sample level's name, a field that
            :class:`~wmrl_envs.envs.known_truth.WorldModelError` does not have, or a value out of
            its range.
    """
    from dataclasses import fields as dc_fields

    from wmrl_envs.envs.known_truth import WORLD_MODEL_ERRORS, WorldModelError

    name, _, body = spec.partition(":")
    name = name.strip()
    if not name or name in WORLD_MODEL_ERRORS or name.startswith(_OOS_PREFIX):
        raise ValueError(f"out-of-sample world model {spec!r}: give it a new name (not empty, not one of the "
                         f"in-sample levels {sorted(WORLD_MODEL_ERRORS)}), as name:field=value,...")
    known = {f.name for f in dc_fields(WorldModelError)} - {"declared_cpu_s_per_prediction"}
    kw: dict[str, float] = {}
    for item in filter(None, (x.strip() for x in body.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key.strip() not in known:
            raise ValueError(f"out-of-sample world model {spec!r}: {item!r} is not field=value with a field of "
                             f"WorldModelError ({sorted(known)})")
        kw[key.strip()] = float(value)
    return name, WorldModelError(**kw)


def parse_oos_setting(spec: str) -> dict[str, float | int]:
    """``"field=value,..."`` → the SweepConfig fields it replaces (see :class:`OutOfSampleConfig`).

    Raises:
        ValueError: a field outside ``wm_cost_s``, ``group_size``, ``groups_per_step``,
            ``outcome_noise_std``, or a value that is not a number (of the field's type).
    """
    out: dict[str, float | int] = {}
    for item in filter(None, (x.strip() for x in spec.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in _OOS_SETTING_FIELDS:
            raise ValueError(f"out-of-sample setting {spec!r}: {item!r} is not field=value with a field among "
                             f"{sorted(_OOS_SETTING_FIELDS)}")
        out[key] = _OOS_SETTING_FIELDS[key](value)
    if not out:
        raise ValueError(f"out-of-sample setting {spec!r}: empty (the base settings are always run)")
    return out


class _Registered:
    """Adds the out-of-sample world models to WORLD_MODEL_ERRORS (as ``oos:<name>``) while it is
    entered, so that the sweep's runs build them by level name; removes them on exit."""

    def __init__(self, errors: dict[str, Any]) -> None:
        self.errors = errors
        self.added: list[str] = []

    def __enter__(self) -> None:
        from wmrl_envs.envs.known_truth import WORLD_MODEL_ERRORS

        for name, err in self.errors.items():
            if _OOS_PREFIX + name not in WORLD_MODEL_ERRORS:  # nested: the outer one removes it
                WORLD_MODEL_ERRORS[_OOS_PREFIX + name] = err
                self.added.append(_OOS_PREFIX + name)

    def __exit__(self, *exc: Any) -> None:
        from wmrl_envs.envs.known_truth import WORLD_MODEL_ERRORS

        for key in self.added:
            WORLD_MODEL_ERRORS.pop(key, None)
        self.added = []


def _oos_job(args: tuple) -> Any:
    """One sweep run with the out-of-sample world models registered (in a worker process too)."""
    errors, (method, level, fraction, seed, sc, kw) = args
    from .sweep_run import run_sweep_method

    with _Registered(errors):
        return run_sweep_method(method, level, fraction, seed, sc, **kw)


def _run_oos_jobs(jobs: list[tuple], errors: dict[str, Any], workers: int, progress: Any, label: str) -> list[Any]:
    """:func:`agents.experiments.sweep_run.run_jobs` for jobs whose levels are out-of-sample world models."""
    bar = progress.add_task(label, total=len(jobs))
    out: list[Any] = [None] * len(jobs)
    if workers == 1:
        for i, j in enumerate(jobs):
            out[i] = _oos_job((errors, j))
            progress.update(bar, advance=1)
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futs = {pool.submit(_oos_job, (errors, j)): i for i, j in enumerate(jobs)}
        for fut in as_completed(futs):
            out[futs[fut]] = fut.result()
            progress.update(bar, advance=1)
    return out


def _pilot_groups(sc: SweepConfig, level: str, seed: int, groups: int) -> tuple[list, list]:
    """A ``wmrl advise``-style pilot on the known-truth env: ``groups`` groups of the untrained
    (uniform) policy, every rollout executed and predicted (an anchor fraction of 1, no
    debiasing), through the wrapper. The env is reset once with ``seed`` and the groups continue
    its stream (``seed=None``), as in the sweep's runs, so every rollout has its own outcome noise.

    Returns:
        ``(world_model, real)``: per group, the raw world-model and the real scores.
    """
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.core import CorrectionConfig

    from .sweep_run import TabularSoftmaxPolicy, make_env, make_world_model

    env = make_env(sc, seed)
    env.reset(seed=seed)
    wm = make_world_model(sc, level, env, seed)
    wrapper = AnchoredWorldModelWrapper(env, wm, group_size=sc.group_size, groups_per_step=1, seed=seed,
                                        correction=CorrectionConfig(anchor_fraction=1.0, debias=False))
    policy = TabularSoftmaxPolicy(sc.n_tasks, sc.n_actions, seed=seed)
    rng = np.random.default_rng([seed, 11])
    for _ in range(groups):
        wrapper.plan_step(1)
        task = int(rng.integers(sc.n_tasks))
        actions, _ = policy.sample(np.array([task]), sc.group_size)
        wrapper.score_group(list(actions[0]), options={"task": task})
    return wrapper.loop.advisor.groups()


def _nearest_fraction(f: float, grid: tuple[float, ...]) -> float:
    """The grid fraction nearest to ``f`` on a log scale."""
    return min(grid, key=lambda g: abs(math.log(g / max(f, 1e-9))))


def _agreement_of(pairs: list[tuple[float, float, dict[str, Any]]]) -> dict[str, Any]:
    """Spearman, median and worst measured / predicted over ``(predicted, measured, cell)``
    triples with both finite and positive."""
    pairs = [p for p in pairs if math.isfinite(p[0]) and p[0] > 0 and 0 < p[1] < math.inf]
    if not pairs:
        return {"n_cells": 0, "spearman": float("nan"), "median_ratio": float("nan"), "worst_miss": None}
    ratios = [m / p for p, m, _ in pairs]
    miss = max(pairs, key=lambda p: abs(math.log(p[0] / p[1])))
    return {"n_cells": len(pairs), "spearman": _spearman([p for p, _, _ in pairs], [m for _, m, _ in pairs]),
            "median_ratio": float(np.median(ratios)), "ratio_range": [float(min(ratios)), float(max(ratios))],
            "worst_miss": {"predicted": miss[0], "measured": miss[1], "factor": max(miss[0] / miss[1], miss[1] / miss[0]),
                           "cell": {k: miss[2][k] for k in ("error", "setting", "fraction")}}}


def run_out_of_sample(cfg: AdvisorCheckConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The advisor checked out of sample: cells and seeds the in-sample check
    (:func:`run_advisor_check`) never used, predictions from a pilot of each cell.

    For every setting (the base ``cfg.sweep`` and each of ``cfg.oos.settings``) and every world
    model of that setting (``cfg.oos.errors`` at the base, ``setting_errors`` elsewhere), at each
    fixed fraction of ``cfg.oos.fractions``: WMRL's measured compute-to-target speedup over real
    GRPO (seeds ``first_seed ..``; real GRPO is run per group size, and sets the target and the
    budget as in the in-sample check); the advisor's prediction with r from a pilot of the cell
    (:func:`_pilot_groups` on ``pilot_seeds``, cross-fitted r, :meth:`AnchorAdvisor.advise`) and b
    from real GRPO's first ``pilot_steps`` steps on the pilot seeds; the fraction-only baseline
    ``1 / (f + γ)`` (the equal-steps cost ratio); and, for reference, the prediction with r from the
    cell's own runs (the in-sample way). Over all cells: Spearman, median and worst measured /
    predicted for each predictor. Per (world model, setting): whether the advisor's recommended
    fraction (nearest grid fraction, log scale) has a measured speedup within the 95% CI of the best
    measured fraction's (and the same for the baseline, which always picks the smallest fraction).

    Returns:
        The results dict (also ``out_dir/results_oos.json``; ``table_oos.md`` beside it).

    Raises:
        ValueError: a bad world model or setting (:func:`parse_oos_error`, :func:`parse_oos_setting`),
            ``setting_errors`` not among ``errors``, or real GRPO did not improve (no target).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from wmrl_envs.core import AnchorAdvisor, CostRates, GradientNoiseScale, predicted_speedup

    from .speedup import Curve, compute_to_target, speedup, target_score
    from .sweep_config import equal_steps_cost_ratio, step_cap_for

    oc = cfg.oos
    errors = dict(parse_oos_error(s) for s in oc.errors)
    if len(errors) != len(oc.errors):
        raise ValueError(f"oos.errors: each name once, got {list(oc.errors)}")
    missing = [e for e in oc.setting_errors if e not in errors]
    if missing:
        raise ValueError(f"oos.setting_errors {missing} are not among oos.errors' names {sorted(errors)}")
    if not oc.fractions or not all(0 < f <= 1 for f in oc.fractions):
        raise ValueError(f"oos.fractions must be anchor fractions in (0, 1], got {oc.fractions!r}")
    for name in ("pilot_groups", "pilot_steps", "first_seed"):
        v = getattr(oc, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "first_seed" else 1):
            raise ValueError(f"oos.{name} must be an integer >= {0 if name == 'first_seed' else 1}, got {v!r}")
    if not oc.pilot_seeds or any(s in range(oc.first_seed, oc.first_seed + cfg.sweep.seeds) for s in oc.pilot_seeds):
        raise ValueError(f"oos.pilot_seeds must be given and differ from the measured seeds, got {oc.pilot_seeds!r}")
    base = cfg.sweep
    settings = [("base", base)] + [(s, replace(base, **parse_oos_setting(s))) for s in oc.settings]
    cell_groups = [(e, name, sc) for name, sc in settings for e in (list(errors) if name == "base" else oc.setting_errors)]
    seeds = list(range(oc.first_seed, oc.first_seed + base.seeds))
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    def real_key(sc: SweepConfig) -> tuple:  # what real GRPO depends on (not the world model's cost)
        return (sc.group_size, sc.groups_per_step, sc.outcome_noise_std)

    reals: dict[tuple, dict[str, Any]] = {}
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with progress, _Registered(errors):
        for _name, sc in settings:
            key = real_key(sc)
            if key in reals:
                continue
            real = _run_oos_jobs([("real", None, None, s, sc, {"max_steps": sc.steps}) for s in seeds], errors,
                                 base.workers, progress, f"real GRPO, G = {sc.group_size}")
            pilot = _run_oos_jobs([("real", None, None, s, sc, {"max_steps": oc.pilot_steps}) for s in oc.pilot_seeds],
                                  errors, base.workers, progress, f"pilot real GRPO (noise scale), G = {sc.group_size}")
            curves = [Curve(r.compute, r.score) for r in real]
            target = target_score(curves, gain_fraction=sc.gain_fraction, min_gain=sc.min_gain)
            gns = GradientNoiseScale()
            for r in pilot:
                for m in r.noise_moments:
                    gns.add_step(*m)
            b = gns.ratio(sc.groups_per_step) if gns.steps else float("nan")
            reals[key] = {"target": target, "real_compute_to_target": [compute_to_target(c, target) for c in curves],
                          "budget_s": sc.max_compute_factor * float(np.median([r.compute[-1] for r in real])),
                          "noise_batch_ratio": b if math.isfinite(b) else None}
            log(f"[advisor-oos] G = {sc.group_size}: target {target:.3f}, budget {reals[key]['budget_s']:.0f} CPU-s, "
                f"pilot b = {b:.3g}")
        pilots: dict[tuple[str, str], dict[str, Any]] = {}
        bar = progress.add_task("pilots (r, recommended fraction)", total=len(cell_groups))
        for e, name, sc in cell_groups:
            adv = AnchorAdvisor(n_boot=base.n_boot if base.n_boot < 1000 else 1000, seed=0)
            for s in oc.pilot_seeds:
                for w, x in zip(*_pilot_groups(sc, _OOS_PREFIX + e, s, oc.pilot_groups)):
                    adv.add_group(w, x)
            costs = CostRates(sc.execution_cost_s, sc.wm_cost_s)
            a = adv.advise(costs, calibrate="crossfit", noise_batch_ratio=reals[real_key(sc)]["noise_batch_ratio"])
            pilots[(e, name)] = {"r": a.r, "r_ci": list(a.r_ci), "n_groups": a.n_groups,
                                 "recommended_fraction": a.recommended_fraction, "f_star": a.f_star,
                                 "predicted_at_recommended": a.predicted_speedup, "verdict": a.verdict}
            progress.update(bar, advance=1)
        jobs = []
        for e, name, sc in cell_groups:
            rk = reals[real_key(sc)]
            for f in oc.fractions:
                for s in seeds:
                    jobs.append(("wmrl", _OOS_PREFIX + e, f, s, sc, {"max_steps": step_cap_for("wmrl", f, sc, rk["budget_s"]),
                                                                   "target": rk["target"], "compute_budget_s": rk["budget_s"]}))
        runs = _run_oos_jobs(jobs, errors, base.workers, progress, "WMRL at fixed fractions (out of sample)")
    by_cell: dict[tuple, list[Any]] = {}
    for r, (_m, lv, f, _s, sc, _kw) in zip(runs, jobs):
        by_cell.setdefault((lv[len(_OOS_PREFIX):], f, sc.group_size, sc.wm_cost_s), []).append(r)
    cells: list[dict[str, Any]] = []
    recommendations: list[dict[str, Any]] = []
    for e, name, sc in cell_groups:
        rk, pil = reals[real_key(sc)], pilots[(e, name)]
        gamma = sc.wm_cost_s / sc.execution_cost_s
        costs = CostRates(sc.execution_cost_s, sc.wm_cost_s)
        b = rk["noise_batch_ratio"]
        group_cells = []
        for f in oc.fractions:
            rs = sorted(by_cell[(e, f, sc.group_size, sc.wm_cost_s)], key=lambda r: r.seed)
            ctt = [compute_to_target(Curve(r.compute, r.score), rk["target"]) for r in rs]
            est = speedup(rk["real_compute_to_target"], ctt, n_boot=base.n_boot, seed=0)
            r_runs = [r.pooled_pearson for r in rs if math.isfinite(r.pooled_pearson)]
            r_own = float(np.mean(r_runs)) if r_runs else float("nan")
            r_p = pil["r"]
            steps = sum(len(r.anchor_fraction) for r in rs)
            c = {"error": e, "setting": name, "group_size": sc.group_size, "gamma": gamma, "fraction": f,
                 "speedup": est.point, "low": est.low, "high": est.high, "formatted": est.format(),
                 "n_reached": est.n_reached, "n_seeds": est.n_seeds, "compute_to_target": ctt,
                 "r_pilot": r_p, "r_runs": r_own,
                 "predicted_pilot": predicted_speedup(f, max(-1.0, min(1.0, r_p)), costs, b) if math.isfinite(r_p) else float("nan"),
                 "predicted_own_r": predicted_speedup(f, max(-1.0, min(1.0, r_own)), costs, b) if math.isfinite(r_own) else float("nan"),
                 "fraction_only": equal_steps_cost_ratio(f, sc.execution_cost_s, sc.wm_cost_s),
                 "realised_fraction": sum(r.anchor_groups for r in rs) / (steps * sc.groups_per_step) if steps else 0.0,
                 "stop_reasons": [r.stop_reason for r in rs]}
            cells.append(c)
            group_cells.append(c)
        best = min(group_cells, key=lambda c: (float(np.median(c["compute_to_target"])), c["fraction"]))
        rec = pil["recommended_fraction"]
        rec_grid = _nearest_fraction(rec, oc.fractions) if math.isfinite(rec) else float("nan")
        rec_cell = next((c for c in group_cells if c["fraction"] == rec_grid), None)
        base_cell = min(group_cells, key=lambda c: c["fraction"])  # 1/(f + γ) is largest at the smallest f

        def within(c: dict[str, Any] | None) -> bool:
            return c is not None and (c is best or (math.isfinite(best["low"]) and c["speedup"] >= best["low"]))

        recommendations.append({"error": e, "setting": name, "recommended": rec, "recommended_grid": rec_grid,
                                "best_fraction": best["fraction"], "best": best["formatted"],
                                "recommended_measured": None if rec_cell is None else rec_cell["formatted"],
                                "advisor_within_best_ci": within(rec_cell),
                                "baseline_fraction": base_cell["fraction"], "baseline_within_best_ci": within(base_cell),
                                "r_pilot": pil["r"], "r_pilot_ci": pil["r_ci"]})
    n_rec = len(recommendations)
    # at one fraction the fraction-only baseline is one number per cost ratio: can a predictor rank world models there?
    per_fraction = {str(f): {key: _agreement_of([(c[key], c["speedup"], c) for c in cells if c["fraction"] == f])["spearman"]
                             for key in ("predicted_pilot", "fraction_only", "predicted_own_r")}
                    for f in oc.fractions}
    summary = {"spearman_per_fraction": per_fraction, "advisor_pilot": _agreement_of([(c["predicted_pilot"], c["speedup"], c) for c in cells]),
               "fraction_only": _agreement_of([(c["fraction_only"], c["speedup"], c) for c in cells]),
               "advisor_own_r": _agreement_of([(c["predicted_own_r"], c["speedup"], c) for c in cells]),
               "recommendation_hits": sum(r["advisor_within_best_ci"] for r in recommendations),
               "baseline_hits": sum(r["baseline_within_best_ci"] for r in recommendations), "n_recommendations": n_rec}
    results = {"config": asdict(cfg), "seeds": seeds, "pilot_seeds": list(oc.pilot_seeds),
               "real": {f"G={k[0]},groups={k[1]}": v for k, v in reals.items()},
               "pilots": [{"error": e, "setting": n, **v} for (e, n), v in pilots.items()],
               "cells": cells, "recommendations": recommendations, "summary": summary,
               "wall_clock_s": time.perf_counter() - t0}
    (out_dir / "results_oos.json").write_text(json.dumps(results, indent=1, default=float))
    (out_dir / "table_oos.md").write_text(format_oos_table(results))
    log(f"[advisor-oos] {len(runs) + sum(1 for _ in reals) * (len(seeds) + len(oc.pilot_seeds))} runs in "
        f"{results['wall_clock_s']:.0f} s; outputs in {out_dir}")
    return results


def format_oos_table(results: dict[str, Any]) -> str:
    """``table_oos.md``: per cell measured against the predictions; the agreement of each predictor;
    the recommendations against the best measured fraction."""

    lines = [f"Measured seeds {results['seeds'][0]}..{results['seeds'][-1]}; pilot seeds {results['pilot_seeds']}.", "",
             "| world model | setting | f | measured speedup [95% CI] | predicted (pilot r, pilot b) | fraction only 1/(f+γ) | "
             "predicted (runs' own r) | r pilot | r runs |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in results["cells"]:
        lines.append(f"| {c['error']} | {c['setting']} | {c['fraction']} | {c['formatted']} | {_num(c['predicted_pilot'])} | "
                     f"{_num(c['fraction_only'])} | {_num(c['predicted_own_r'])} | {_num(c['r_pilot'])} | {_num(c['r_runs'])} |")
    s = results["summary"]
    lines += ["", "| predictor | cells | Spearman | median measured / predicted | range of measured / predicted | worst miss |",
              "|---|---|---|---|---|---|"]
    for key, what in (("advisor_pilot", "advisor, r and b from a pilot"), ("fraction_only", "fraction only, 1/(f + γ)"),
                      ("advisor_own_r", "advisor, r from the cell's own runs (in-sample way)")):
        q = s[key]
        w = q["worst_miss"]
        worst = "—" if not w else (f"{w['cell']['error']} / {w['cell']['setting']} / f = {w['cell']['fraction']}: "
                                   f"predicted {w['predicted']:.2f}×, measured {w['measured']:.2f}× (factor {w['factor']:.2f})")
        rng = q.get("ratio_range")
        lines.append(f"| {what} | {q['n_cells']} | {_num(q['spearman'])} | {_num(q['median_ratio'])} | "
                     f"{'—' if not rng else f'{rng[0]:.2f} – {rng[1]:.2f}'} | {worst} |")
    pf = s.get("spearman_per_fraction") or {}
    if pf:
        lines += ["", "Spearman at one fraction (over world models and settings): "
                  + "; ".join(f"f = {f}: advisor (pilot) {_num(v['predicted_pilot'])}, fraction only {_num(v['fraction_only'])}, "
                              f"advisor (own r) {_num(v['predicted_own_r'])}" for f, v in pf.items()) + "."]
    lines += ["", f"Recommended fraction within the best measured fraction's 95% CI: advisor {s['recommendation_hits']} of "
              f"{s['n_recommendations']}, fraction-only baseline (smallest f) {s['baseline_hits']} of {s['n_recommendations']}.",
              "", "| world model | setting | pilot r [95% CI] | recommended f (grid) | its measured speedup | best f | best measured |",
              "|---|---|---|---|---|---|---|"]
    for r in results["recommendations"]:
        ci = r["r_pilot_ci"]
        lines.append(f"| {r['error']} | {r['setting']} | {_num(r['r_pilot'])} [{_num(ci[0])}, {_num(ci[1])}] | "
                     f"{_num(r['recommended'], 3)} ({r['recommended_grid']}) | {r['recommended_measured'] or '—'} | "
                     f"{r['best_fraction']} | {r['best']} |")
    return "\n".join(lines) + "\n"
