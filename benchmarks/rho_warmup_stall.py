"""How often ρ's stall rule flags a warm-up that is only slow, and how soon it flags one that has
stopped (issue 35, session 8): :attr:`wmrl_envs.core.denoise.InverseVarianceDenoiser.warmup_stalled`
over many seeds.

Each anchor group (G = 4, on the calibrated scale) has real scores that vary with probability q
(a Gaussian group, scored by a noisy world model) and otherwise four equal real scores (a policy
that repeats one action). A run feeds groups to a real :class:`InverseVarianceDenoiser` until its
warm-up ends or the rule flags it (or 50 × the warm-up's length). Per (warm-up length, q): the share
of runs flagged before their warm-up ended, with a 95% Wilson interval, and the median number of
groups to the flag or to the warm-up's end. Groups are drawn independently: a policy that
collapses makes runs of groups without spread, so on a real run the flagged shares are lower
bounds; groups before the debiaser's first fit are left out (the denoiser sees calibrated scores).

Run (about 70 CPU-s)::

    .venv/bin/python benchmarks/rho_warmup_stall.py --seeds 2000 --out results/rho_warmup_stall.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any, Sequence

import numpy as np

__all__ = ["simulate", "main"]


def _wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return float("nan"), float("nan")
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def simulate(warmup: int, q: float, seeds: int, group_size: int = 4) -> dict[str, Any]:
    """Runs of one cell: ``{"flagged_share", "flagged_ci", "median_groups", "ended_share"}``.

    Args:
        warmup: the denoiser's ``warmup_groups`` (>= 1).
        q: probability that a group's real scores vary (in [0, 1]).
        seeds: runs (>= 1), each with its own generator.
        group_size: G (>= 2).

    Returns:
        The share of runs the rule flagged before the warm-up ended (and its 95% Wilson
        interval), the share whose warm-up ended, and the median groups a run lasted.
    """
    from wmrl_envs.core.denoise import InverseVarianceDenoiser

    flagged = ended = 0
    lengths = []
    for seed in range(seeds):
        rng = np.random.default_rng([seed, warmup, int(round(q * 1000))])
        den = InverseVarianceDenoiser(warmup_groups=warmup)
        n = 0
        while n < 50 * warmup:
            n += 1
            if rng.random() < q:
                real = rng.normal(0.5, 0.2, group_size)
                cal = real + rng.normal(0.0, 0.1, group_size)
            else:
                real = np.full(group_size, 0.7)
                cal = real + rng.normal(0.0, 0.1, group_size)
            den.update(list(cal), list(real))
            if den.warmed_up:
                ended += 1
                break
            if den.warmup_stalled:
                flagged += 1
                break
        lengths.append(n)
    lo, hi = _wilson(flagged, seeds)
    return {"warmup_groups": warmup, "q": q, "stall_groups": InverseVarianceDenoiser(warmup_groups=warmup).stall_groups,
            "flagged_share": flagged / seeds, "flagged_ci": [lo, hi], "ended_share": ended / seeds,
            "median_groups": statistics.median(lengths), "seeds": seeds}


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=2000)
    ap.add_argument("--warmups", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--q", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3, 0.5])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.seeds < 1 or any(w < 1 for w in args.warmups) or any(not 0.0 <= q <= 1.0 for q in args.q):
        ap.error("--seeds and --warmups must be >= 1 and every --q in [0, 1]")
    rows = []
    print("| warm-up | stall after | q | flagged before the warm-up ended [95% CI] | warm-up ended | median groups |")
    print("|---|---|---|---|---|---|")
    for w in args.warmups:
        for q in args.q:
            r = simulate(w, q, args.seeds)
            rows.append(r)
            print(f"| {w} | {r['stall_groups']} | {q:g} | {100 * r['flagged_share']:.1f}% "
                  f"[{100 * r['flagged_ci'][0]:.1f}, {100 * r['flagged_ci'][1]:.1f}] | {100 * r['ended_share']:.1f}% | "
                  f"{r['median_groups']:g} |", flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": "benchmarks/rho_warmup_stall.py", "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
