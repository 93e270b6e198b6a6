"""WMRL in two ``wmrl bench`` runs (e.g. two anchor fractions) on the same seeds, against one target.

``wmrl bench`` reports each run against its own real-GRPO target; to compare two settings of the
same method (the advisor's recommended f = 0.05 against the reference f = 0.1,
``docs/advisor_check.md``) both are measured here against the target of the run given first
(its real GRPO's curve over all its seeds), on the seeds both runs finished: per seed the
compute-to-target (CPU-seconds, interpolated; ``inf`` = not reached) of each, their paired ratio,
and each run's speedup over real GRPO on those seeds with its 95% bootstrap CI
(:func:`agents.experiments.speedup.speedup`).

Run::

    .venv/bin/python benchmarks/compare_runs.py results/bench_reference_run/results.json runs/bench-f005/results.json
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
    args = ap.parse_args(argv)

    import numpy as np

    from agents.experiments.bench_report import curve_of, real_target
    from agents.experiments.speedup import compute_to_target, speedup

    a, b = (json.loads(open(p).read()) for p in (args.first, args.second))
    target, s0, s_S = real_target(a, steps=int(a["config"]["steps"]))
    n = min(len(a["methods"][args.method]["seeds"]), len(b["methods"][args.method]["seeds"]),
            len(a["methods"]["real"]["seeds"]))
    real = [compute_to_target(curve_of(e), target) for e in a["methods"]["real"]["seeds"][:n]]
    first = [compute_to_target(curve_of(e), target) for e in a["methods"][args.method]["seeds"][:n]]
    second = [compute_to_target(curve_of(e), target) for e in b["methods"][args.method]["seeds"][:n]]
    out = {
        "target": target, "seeds": n, "real_ctt": real, "first_ctt": first, "second_ctt": second,
        "paired_ratio_first_over_second": [x / y if math.isfinite(x) and math.isfinite(y) else None
                                           for x, y in zip(first, second)],
        "first_speedup": asdict(speedup(real, first)), "second_speedup": asdict(speedup(real, second)),
        "first_median": float(np.median(first)), "second_median": float(np.median(second)),
        "first_fraction": a["config"]["correction"]["anchor_fraction"],
        "second_fraction": b["config"]["correction"]["anchor_fraction"],
    }
    print(f"target {target:.1f} (real GRPO of {args.first}: {s0:.1f} -> {s_S:.1f}); seeds 0..{n - 1}")
    for i in range(n):
        print(f"seed {i}: real {real[i]:.0f}, f={out['first_fraction']} {first[i]:.0f}, "
              f"f={out['second_fraction']} {second[i]:.0f} CPU-s")
    for key in ("first", "second"):
        sp = out[f"{key}_speedup"]
        print(f"f={out[key + '_fraction']}: median {out[key + '_median']:.0f} CPU-s, speedup {sp['point']:.1f}x "
              f"[{sp['low']:.1f}, {sp['high']:.1f}] over real GRPO on these seeds")
    return out


if __name__ == "__main__":
    main()
