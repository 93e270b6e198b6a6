"""Why the advisor under-predicted weak world models (issue 39, item 2): the step law and ρ, tested apart.

On the known-truth map (the sweep's env, policy, Adam at a fixed learning rate and costs), two
experiments that each isolate one assumption of the advisor's speedup model
(``docs/method.md``, "Choosing the anchor fraction"):

* ``batch``: real-execution GRPO at 16, 8, 4, 2 and 1 groups per step, no world model at all. The
  steps each batch needs to reach the target (90% of real GRPO's gain at 16 groups after
  ``--steps`` steps) against the two step laws: McCandlish et al.'s ``1 + B_noise/B`` (SGD with its
  learning rate retuned for every batch) and ``sqrt(1 + B_noise/B)`` (Adam, RMS-normalised steps,
  at a fixed learning rate: the runs' optimiser). ``B_noise`` is measured on the 16-group runs'
  first 3 steps (what a pilot sees), as ``wmrl bench advisor`` does.
* ``rho``: WMRL with a useless world model (no signal: every saving is the anchors') and with a
  weak one (0.25 of the truth) at f = 0.1 and 0.25, with ρ held at 1 (no denoising), 2 and 4
  (``rho_target = rho_max``): the model assumed ρ at its inverse-variance optimum; the runs
  calibrate it to ``rho_target`` = 2. Measured speedup against the model with the optimal ρ and
  with the runs' own mean ρ (both with each step law).

``--drift`` instead re-draws the pilots of the two out-of-sample checks
(``docs/advisor_check_run/out_of_sample*/results_oos.json``, same seeds and settings) and puts each
pilot's r, the r among the rollouts the world model prefers (top half of each group:
:func:`wmrl_envs.core.advisor_choices.preferred_half_r`) and the fraction that protects against a drop
to it beside the runs' own r at each fraction (issue 39, item 3).

Seeds 0..``--seeds``-1, one process. Run (figures in ``docs/method.md``, "Choosing the anchor
fraction", "Why the model under-predicted weak world models")::

    nice -n 15 .venv/bin/python benchmarks/advisor_root_cause.py --out results/advisor_root_cause.json
    nice -n 15 .venv/bin/python benchmarks/advisor_root_cause.py --drift --out results/advisor_drift.json
    .venv/bin/python benchmarks/advisor_root_cause.py --quick     # smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np


def _median_ctt(runs, target):
    from agents.experiments.speedup import Curve, compute_to_target

    c = [compute_to_target(Curve(r.compute, r.score), target) for r in runs]
    return float(np.median(c)), c


def _steps_to_target(run, target):
    """Steps to the target, interpolated between the two snapshots around the first crossing."""
    s = run.score
    for i in range(1, len(s)):
        if s[i] >= target:
            return (i - 1) + (target - s[i - 1]) / (s[i] - s[i - 1]) if s[i] > s[i - 1] else float(i)
    return math.inf


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--steps", type=int, default=25, help="real GRPO's steps at 16 groups (its budget S)")
    p.add_argument("--batches", type=int, nargs="+", default=[16, 8, 4, 2, 1])
    p.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.25])
    p.add_argument("--rhos", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    p.add_argument("--levels", nargs="+", default=["useless", "weak"])
    p.add_argument("--quick", action="store_true", help="2 seeds, batches 16 and 2, one fraction, ρ 1 and 4")
    p.add_argument("--drift", action="store_true", help="the pilots' drift (see the module docstring) instead")
    p.add_argument("--out", default="results/advisor_root_cause.json")
    a = p.parse_args(argv)
    if a.drift:
        return drift(a.out)
    if a.quick:
        a.seeds, a.batches, a.fractions, a.rhos, a.levels = 2, [16, 2], [0.25], [1.0, 4.0], ["useless"]

    import torch

    torch.set_num_threads(1)
    from agents.experiments.advisor_oos import _Registered, _OOS_PREFIX
    from agents.experiments.speedup import Curve, target_score
    from agents.experiments.sweep_config import SweepConfig
    from agents.experiments.sweep_run import run_sweep_method
    from wmrl_envs.core.advisor_model import CostRates, GradientNoiseScale
    from wmrl_envs.envs.known_truth import WorldModelError

    t0 = time.process_time()
    cfg = SweepConfig(workers=1)
    seeds = list(range(a.seeds))
    real16 = [run_sweep_method("real", None, None, s, cfg, max_steps=a.steps) for s in seeds]
    target = target_score([Curve(r.compute, r.score) for r in real16], gain_fraction=cfg.gain_fraction, min_gain=cfg.min_gain)
    gns = GradientNoiseScale()
    for r in real16:
        for m in r.noise_moments[:3]:
            gns.add_step(*m)
    b_noise = gns.ratio(1)  # B_noise in groups
    out: dict = {"target": target, "b_noise_groups": b_noise, "seeds": seeds, "batch": [], "rho": []}
    ctt16, _ = _median_ctt([run_sweep_method("real", None, None, s, cfg, max_steps=400, target=target) for s in seeds], target)
    steps16 = None
    for B in a.batches:
        sc = replace(cfg, groups_per_step=B)
        runs = [run_sweep_method("real", None, None, s, sc, max_steps=int(40 * a.steps * 16 / B), target=target) for s in seeds]
        st = float(np.median([_steps_to_target(r, target) for r in runs]))
        if B == 16:
            steps16 = st
        b16, bB = b_noise / 16, b_noise / B
        med, _ = _median_ctt(runs, target)
        out["batch"].append({"groups_per_step": B, "median_steps": st, "median_compute": med,
                             "speedup_over_16": ctt16 / med if med > 0 else math.inf,
                             "steps_ratio_sgd_law": (1 + bB) / (1 + b16), "steps_ratio_adam_law": math.sqrt((1 + bB) / (1 + b16))})
    for row in out["batch"]:
        row["steps_ratio"] = row["median_steps"] / steps16
    costs = CostRates(cfg.execution_cost_s, cfg.wm_cost_s)
    b = b_noise / 16
    errors = {"weak": WorldModelError(information=0.25, noise_std=0.2)}
    with _Registered(errors):
        for level in a.levels:
            lv = _OOS_PREFIX + level if level in errors else level
            for f in a.fractions:
                for rho in a.rhos:
                    corr = replace(cfg.correction, rho_target=max(1.0, rho), rho_max=max(1.0, rho))
                    method = "debias_only" if rho == 1.0 else "wmrl"
                    sc = replace(cfg, correction=corr)
                    runs = [run_sweep_method(method, lv, f, s, sc, max_steps=2000, target=target,
                                             compute_budget_s=4 * ctt16) for s in seeds]
                    med, ctts = _median_ctt(runs, target)
                    r_own = float(np.nanmean([x.pooled_pearson for x in runs]))
                    rho_mean = float(np.mean([np.mean(x.rho[4:]) if len(x.rho) > 4 else 1.0 for x in runs]))
                    row = {"level": level, "fraction": f, "rho_setting": rho, "rho_mean": rho_mean, "r_runs": r_own,
                           "measured": ctt16 / med if med > 0 else math.inf,
                           "reached": int(sum(math.isfinite(c) for c in ctts)), "seeds": len(ctts)}
                    k = max(0.0, r_own)
                    cost_ratio = (costs.execution_s + costs.other_s) / (costs.world_model_s + costs.other_s + f * costs.execution_s)
                    for tag, rr in (("optimal_rho", None), ("runs_rho", rho_mean)):
                        if rr is None:
                            q = f + (1 - f) * k * k
                        else:
                            q = (f * rr + (1 - f) * k) ** 2 / (f * rr * rr + (1 - f))
                        row[f"q_{tag}"] = q
                        row[f"sgd_{tag}"] = cost_ratio * (1 + b) / (1 + b / q)
                        row[f"adam_{tag}"] = cost_ratio * math.sqrt((1 + b) / (1 + b / q))
                    out["rho"].append(row)
                    print(f"{level} f={f} rho={rho} (mean {rho_mean:.2f}) r={r_own:.2f}: measured {row['measured']:.2f}x; "
                          f"sgd/opt {row['sgd_optimal_rho']:.2f} adam/opt {row['adam_optimal_rho']:.2f} "
                          f"sgd/runs {row['sgd_runs_rho']:.2f} adam/runs {row['adam_runs_rho']:.2f}", flush=True)
    out["cpu_s"] = time.process_time() - t0
    for row in out["batch"]:
        print(f"B={row['groups_per_step']}: steps {row['median_steps']:.1f} (ratio {row['steps_ratio']:.2f}; SGD law "
              f"{row['steps_ratio_sgd_law']:.2f}, Adam law {row['steps_ratio_adam_law']:.2f}); speedup over 16 groups "
              f"{row['speedup_over_16']:.2f}x")
    print(f"B_noise = {b_noise:.2f} groups; target {target:.3f}; {out['cpu_s']:.0f} CPU-s")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1, default=float))
    return out


def drift(out_path: str) -> dict:
    """Each out-of-sample pilot's r, preferred-half r and drift fraction beside the runs' own r."""
    from collections import defaultdict

    from agents.experiments.advisor_check_config import ADVISOR_CHECK_PRESETS
    from agents.experiments.advisor_oos import _OOS_PREFIX, _Registered, _pilot_groups, parse_oos_error, parse_oos_setting
    from wmrl_envs.core.advisor import AnchorAdvisor
    from wmrl_envs.core.advisor_model import CostRates

    t0 = time.process_time()
    rows = []
    for preset, folder in (("out_of_sample", "out_of_sample"), ("out_of_sample_39", "out_of_sample_39")):
        cfg = ADVISOR_CHECK_PRESETS[preset]
        res = json.loads(Path(f"docs/advisor_check_run/{folder}/results_oos.json").read_text())
        oc = cfg.oos
        errors = dict(parse_oos_error(x) for x in oc.errors)
        settings = {"base": cfg.sweep, **{x: replace(cfg.sweep, **parse_oos_setting(x)) for x in oc.settings}}
        runs_r: dict = defaultdict(dict)
        for c in res["cells"]:
            if c.get("kind", "wmrl") == "wmrl":
                runs_r[(c["error"], c["setting"])][c["fraction"]] = c["r_runs"]
        b_of = {v["noise_batch_ratio"] for v in res["real"].values()}
        with _Registered(errors):
            for p in res["pilots"]:
                sc = settings[p["setting"]]
                adv = AnchorAdvisor(n_boot=0)
                for seed in oc.pilot_seeds:
                    for w, x in zip(*_pilot_groups(sc, _OOS_PREFIX + p["error"], seed, oc.pilot_groups)):
                        adv.add_group(w, x)
                key = f"G={sc.group_size},groups={sc.groups_per_step}"
                b = res["real"][key]["noise_batch_ratio"]
                advice = adv.advise(CostRates(sc.execution_cost_s, sc.wm_cost_s), calibrate="crossfit", noise_batch_ratio=b)
                r_runs = runs_r[(p["error"], p["setting"])]
                rows.append({"check": preset, "error": p["error"], "setting": p["setting"], "r_pilot": advice.r,
                             "r_preferred_half": advice.r_preferred_half, "recommended_fraction": advice.recommended_fraction,
                             "drift_fraction": advice.drift_fraction, "r_runs": r_runs,
                             "r_runs_min": min(r_runs.values()) if r_runs else float("nan")})
                print(f"{preset} {p['error']} {p['setting']}: pilot r {advice.r:.2f}, preferred half {advice.r_preferred_half:.2f} "
                      f"(drift fraction {advice.drift_fraction:.3f}); runs {', '.join(f'{v:.2f}' for v in r_runs.values())}",
                      flush=True)
        del b_of
    ok = [r for r in rows if math.isfinite(r["r_preferred_half"]) and math.isfinite(r["r_runs_min"])]
    out = {"rows": rows, "cpu_s": time.process_time() - t0,
           "summary": {"pilots": len(ok),
                       "median_abs_gap_pilot_to_runs_min": float(np.median([abs(r["r_pilot"] - r["r_runs_min"]) for r in ok])),
                       "median_abs_gap_preferred_half_to_runs_min": float(np.median([abs(r["r_preferred_half"] - r["r_runs_min"]) for r in ok])),
                       "preferred_half_below_pilot": sum(r["r_preferred_half"] < r["r_pilot"] for r in ok),
                       "runs_min_below_pilot": sum(r["r_runs_min"] < r["r_pilot"] for r in ok)}}
    print(json.dumps(out["summary"]))
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(json.dumps(out, indent=1, default=float))
    return out


if __name__ == "__main__":
    main()
