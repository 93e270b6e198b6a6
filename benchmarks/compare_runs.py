"""WMRL in two ``wmrl bench`` runs (e.g. two anchor fractions) on the same seeds, against one target.

``wmrl bench`` reports each run against its own real-GRPO target; to compare two settings of the
same method (the advisor's recommended f = 0.05 against the reference f = 0.1,
``docs/advisor_check.md``) both are measured here against the target of the run given first
(its real GRPO's curve over all its seeds), on the seeds both runs finished: per seed the
compute-to-target (CPU-seconds, interpolated; ``inf`` = not reached) of each, their paired ratio,
and each run's speedup over real GRPO on those seeds with its 95% bootstrap CI
(:func:`agents.experiments.speedup.speedup`); then the first run's compute to the target over the
second's (ratio of medians, paired bootstrap CI) and the same in real executions to the target (the
ledger's execution count where the curve crosses the target, interpolated: a figure that CPU
contention on shared cores does not inflate). ``--same-steps`` reads the method's curves of both
runs only at their coarse evaluation steps (``coarse_eval_steps`` and the snapshots each entry
selected), for runs of which only one was refined.

Run::

    .venv/bin/python benchmarks/compare_runs.py results/bench_reference_run/results.json runs/bench-f005/results.json [--same-steps]
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict
from typing import Any, Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Compare and print; returns the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("first", help="results.json whose real GRPO sets the target")
    ap.add_argument("second", help="results.json of the other run")
    ap.add_argument("--method", default="wmrl")
    ap.add_argument("--same-steps", action="store_true",
                    help="read the method's curves of both runs only at their coarse evaluation steps (not refined)")
    args = ap.parse_args(argv)

    import numpy as np

    from agents.experiments.bench_run import coarse_eval_steps
    from agents.experiments.bench_report import curve_of, real_target
    from agents.experiments.speedup import Curve, compute_to_target, speedup

    from agents.experiments.bench_report import restore_nonfinite  # strict JSON: null + 'nonfinite' paths

    a, b = (restore_nonfinite(json.loads(open(p).read())) for p in (args.first, args.second))
    target, s0, s_S = real_target(a, steps=int(a["config"]["steps"]))
    n = min(len(a["methods"][args.method]["seeds"]), len(b["methods"][args.method]["seeds"]),
            len(a["methods"]["real"]["seeds"]))

    def curve(e: dict[str, Any], run: dict[str, Any]) -> Any:
        if not args.same_steps:
            return curve_of(e)
        keep = set(coarse_eval_steps(len(e["records"]), int(run["config"].get("eval_points", 2))))
        keep |= {int(v) for v in e["snapshot"].values()}
        idx = [i for i, st in enumerate(e["curve"]["step"]) if int(st) in keep]
        return Curve(np.asarray(e["curve"]["compute_cpu_s"], dtype=float)[idx],
                     np.asarray(e["curve"]["score"], dtype=float)[idx])

    def executions_at(e: dict[str, Any], ctt: float) -> float:  # the ledger's execution count at that compute
        if not math.isfinite(ctt):
            return math.inf
        comp = [0.0] + [float(r["compute_cpu_s"]) for r in e["records"]]
        return float(np.interp(ctt, comp, [0] + [int(r["executions"]) for r in e["records"]]))

    real = [compute_to_target(curve_of(e), target) for e in a["methods"]["real"]["seeds"][:n]]
    first = [compute_to_target(curve(e, a), target) for e in a["methods"][args.method]["seeds"][:n]]
    second = [compute_to_target(curve(e, b), target) for e in b["methods"][args.method]["seeds"][:n]]
    first_x = [executions_at(e, c) for e, c in zip(a["methods"][args.method]["seeds"][:n], first)]
    second_x = [executions_at(e, c) for e, c in zip(b["methods"][args.method]["seeds"][:n], second)]
    out = {
        "target": target, "seeds": n, "real_ctt": real, "first_ctt": first, "second_ctt": second,
        "paired_ratio_first_over_second": [x / y if math.isfinite(x) and math.isfinite(y) else None
                                           for x, y in zip(first, second)],
        "first_speedup": asdict(speedup(real, first)), "second_speedup": asdict(speedup(real, second)),
        "first_median": float(np.median(first)), "second_median": float(np.median(second)),
        "first_fraction": a["config"]["correction"]["anchor_fraction"],
        "second_fraction": b["config"]["correction"]["anchor_fraction"],
        "same_steps": bool(args.same_steps),
        "first_over_second": asdict(speedup(first, second)),  # ratio of medians, paired by seed
        "first_executions": first_x, "second_executions": second_x,
        "executions_first_over_second": asdict(speedup(first_x, second_x)),
    }
    print(f"target {target:.1f} (real GRPO of {args.first}: {s0:.1f} -> {s_S:.1f}); seeds 0..{n - 1}")
    for i in range(n):
        print(f"seed {i}: real {real[i]:.0f}, f={out['first_fraction']} {first[i]:.0f}, "
              f"f={out['second_fraction']} {second[i]:.0f} CPU-s")
    for key in ("first", "second"):
        sp = out[f"{key}_speedup"]
        print(f"f={out[key + '_fraction']}: median {out[key + '_median']:.0f} CPU-s, speedup {sp['point']:.1f}x "
              f"[{sp['low']:.1f}, {sp['high']:.1f}] over real GRPO on these seeds")
    f1, f2 = out["first_fraction"], out["second_fraction"]
    for what, key in (("compute", "first_over_second"), ("real executions", "executions_first_over_second")):
        r = out[key]
        print(f"f={f1} / f={f2}, {what} to the target (ratio of medians, paired by seed): {r['point']:.2f}x "
              f"[{r['low']:.2f}, {r['high']:.2f}]")
    print("executions to the target per seed (first / second): "
          + ", ".join(f"seed {i}: {x:.0f} / {y:.0f}" for i, (x, y) in enumerate(zip(first_x, second_x))))
    if args.same_steps:
        print("(curves read at their coarse evaluation steps only)")
    return out


if __name__ == "__main__":
    main()
