"""The advisor against the live headline run (issue 39, item 4's second check): each method's
predicted speedup, from a ``wmrl advise`` pilot as a user would make it before training, beside the
speedup the headline run (``wmrl bench``, issue 35) measured for it.

The pilot prices every choice over real-execution GRPO at the benchmark's batch
(:func:`wmrl_envs.core.advisor_choices.price_choices`): real GRPO at each method's groups per step
(``real_mid_batch``, ``real_anchor_batch``), WMRL at the run's anchor fraction (``wmrl``) and the
world model alone (``wm_only``), from the pilot's r, costs and the measured noise scale b. Both
pre-fitted methods also pay the world model's fitting on logged executions, which a pilot's
per-rollout prices leave out; with ``--fit-executions`` and ``--real-steps`` it is counted as the
advisor counts it (:func:`~wmrl_envs.core.advisor_choices.with_fitting`) and compared with the
run's total speedup (fitting included). ``wmrl_learned`` has no prediction: its r is the learned
world model's during training, which no pilot before training sees.

Measured: :func:`agents.experiments.bench_report.compute_speedups` on the seeds every method has
finished (ratio of medians over seeds, paired bootstrap CI), training CPU-seconds and totals.

Run (after a pilot: ``WMRL_TASK_SECRET=wmrl-reference .venv/bin/wmrl advise --groups 16
--groups-per-step 10 --noise-batch-ratio 7.97 --out-dir runs/advise-headline``)::

    .venv/bin/python benchmarks/advisor_live_check.py --advice runs/advise-headline/advice.json \\
        --results results/headline_run/results.json --out results/advisor_live_check.json
"""

from __future__ import annotations

import argparse
import copy
import json
import math
from pathlib import Path
from typing import Any

__all__ = ["main", "predictions", "measured"]


def predictions(advice: dict[str, Any], groups_per_step: dict[str, int], batch: int, fraction: float,
                fit_share: float) -> dict[str, dict[str, Any]]:
    """The advisor's speedup over real GRPO at ``batch`` groups per step, per headline method:
    ``{"training": (point, low, high), "total": (...)}`` (``total``: fitting counted for the
    pre-fitted methods; the interval from r's 95% interval, ``(point, point)`` for real batches)."""
    from wmrl_envs.core.advisor_choices import _wmrl_speedup
    from wmrl_envs.core.advisor_model import CostRates, steps_ratio

    c = advice["costs"]
    costs = CostRates(c["execution_s"], c["world_model_s"], other_s=c["other_s"])
    b, law = advice["noise_batch_ratio"], advice.get("step_law", "adam")
    r, (r_lo, r_hi) = advice["r"], advice["r_ci"]

    def total(s: float) -> float:
        return 0.0 if s <= 0 else 1.0 / (1.0 / s + fit_share)

    out: dict[str, dict[str, Any]] = {}
    for name in ("real_mid_batch", "real_anchor_batch"):
        share = groups_per_step[name] / batch
        s = steps_ratio(share, b, law) / share
        out[name] = {"training": (s, s, s), "total": (s, s, s), "groups_per_step": groups_per_step[name]}
    for name, f in (("wmrl", fraction), ("wm_only", 0.0)):
        tr = tuple(_wmrl_speedup(f, x, costs, b, law) for x in (r, r_lo, r_hi))
        out[name] = {"training": tr, "total": tuple(total(s) for s in tr), "anchor_fraction": f}
    return out


def measured(results: dict[str, Any]) -> dict[str, Any]:
    """The run's speedups on the seeds every method finished: ``{"n_seeds", "methods": {name:
    {"training": SpeedupEstimate dict, "total": ... (fitting included where charged)}}}``."""
    from agents.experiments.bench_report import compute_speedups
    from agents.experiments.bench_report import restore_nonfinite

    res = restore_nonfinite(copy.deepcopy(results))
    n = min(len(m["seeds"]) for m in res["methods"].values())
    for m in res["methods"].values():
        m["seeds"] = m["seeds"][:n]
    sp = compute_speedups(res, gain_fraction=res["config"]["target_gain"], steps=res["config"]["steps"],
                          fitting_cpu_s=res.get("world_model_fitting_cpu_s", 0.0),
                          fitting_executions=res.get("world_model_fitting_executions", 0))
    return {"n_seeds": n, "target": sp["target"], "fitting_cpu_s": sp["fitting_cpu_s"],
            "methods": {k: {"training": v["speedup"], "total": v.get("speedup_total") or v["speedup"]}
                        for k, v in sp["methods"].items()}}


def _ratio(m: float, p: float) -> float:
    return m / p if p > 0 and math.isfinite(p) else math.nan


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--advice", required=True, help="a wmrl advise pilot's advice.json")
    ap.add_argument("--results", required=True, help="the headline run's results.json")
    ap.add_argument("--fit-executions", type=int, default=None,
                    help="executions the pre-fitted world model was fitted on (default: the run's own count)")
    ap.add_argument("--real-steps", type=int, default=None,
                    help="real GRPO's steps to the target a user would plan (default: the run's S)")
    ap.add_argument("--out", default="runs/advisor_live_check.json")
    a = ap.parse_args(argv)

    from agents.experiments.bench_config import BenchConfig, method_groups_per_step
    from wmrl_envs.core.advisor_choices import fitting_share
    from wmrl_envs.core.advisor_model import CostRates

    advice = json.loads(Path(a.advice).read_text())
    results = json.loads(Path(a.results).read_text())
    rc = results["config"]
    bcfg = BenchConfig()
    batch, group_size = int(rc.get("groups_per_step", bcfg.groups_per_step)), int(rc.get("group_size", bcfg.group_size))
    fraction = float((rc.get("correction") or {}).get("anchor_fraction", bcfg.correction.anchor_fraction))
    gps = {m: method_groups_per_step(m, bcfg) for m in ("real_mid_batch", "real_anchor_batch")}
    fit_n = a.fit_executions if a.fit_executions is not None else int(results.get("world_model_fitting_executions") or 0)
    steps = a.real_steps or int(rc["steps"])
    c = advice["costs"]
    phi = fitting_share(fit_n, steps, batch, group_size, CostRates(c["execution_s"], c["world_model_s"], other_s=c["other_s"]))
    pred = predictions(advice, gps, batch, fraction, phi)
    meas = measured(results)
    rows = []
    for name in ("real_mid_batch", "real_anchor_batch", "wm_only", "wmrl", "wmrl_learned"):
        m = meas["methods"].get(name)
        if m is None:
            continue
        p = pred.get(name)
        row: dict[str, Any] = {"method": name, "measured_training": m["training"], "measured_total": m["total"]}
        if p is not None:
            row.update(predicted_training=p["training"], predicted_total=p["total"],
                       ratio_training=_ratio(m["training"]["point"], p["training"][0]),
                       ratio_total=_ratio(m["total"]["point"], p["total"][0]))
            row["within_1_5_total"] = bool(math.isfinite(row["ratio_total"]) and 1 / 1.5 <= row["ratio_total"] <= 1.5)
        rows.append(row)
    out = {"advice": a.advice, "results": a.results, "n_seeds": meas["n_seeds"], "r": advice["r"], "r_ci": advice["r_ci"],
           "gamma": c["gamma"], "noise_batch_ratio": advice["noise_batch_ratio"], "fit_executions": fit_n,
           "real_steps": steps, "fit_share": phi, "rows": rows}
    print(f"pilot r = {advice['r']:.2f} [{advice['r_ci'][0]:.2f}, {advice['r_ci'][1]:.2f}], gamma = {c['gamma']:.4f}, "
          f"b = {advice['noise_batch_ratio']}; fitting {fit_n} executions = {phi:.0%} of real GRPO's {steps} steps; "
          f"measured on {meas['n_seeds']} seed(s)")
    print("| method | predicted (training) | measured (training) | predicted total | measured total | measured / predicted (total) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        mt, mtot = row["measured_training"], row["measured_total"]
        if "predicted_total" in row:
            pt, ptot = row["predicted_training"], row["predicted_total"]
            print(f"| {row['method']} | {pt[0]:.2f}x [{pt[1]:.2f}, {pt[2]:.2f}] | {mt['point']:.2f}x | "
                  f"{ptot[0]:.2f}x [{ptot[1]:.2f}, {ptot[2]:.2f}] | {mtot['point']:.2f}x | {row['ratio_total']:.2f} |")
        else:
            print(f"| {row['method']} | — (no pilot sees a learned world model) | {mt['point']:.2f}x | — | {mtot['point']:.2f}x | — |")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    from wmrl_envs.utils import finite_or_none

    Path(a.out).write_text(json.dumps(finite_or_none(out), indent=1))
    return out


if __name__ == "__main__":
    main()
