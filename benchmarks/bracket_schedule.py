"""Interpolation brackets of ``wmrl bench``'s compute-to-target under other snapshot-evaluation
schedules, simulated over committed runs (issue 27: "the interpolation bracket is at most 10% of
the compute to target").

For every method and seed of each ``results.json`` given, the seed's per-step training compute
(its ``records``) is exact, but its held-out score is known only at the snapshots the run
evaluated. The simulation takes the piecewise-linear curve through those evaluated scores as the
truth between them (a proxy: real curves are noisier between snapshots, so the crossings found
here are smoother than real ones), then replays each schedule on it: which steps it evaluates,
where the target crossing's bracket lies, the bracket's share of the compute-to-target
(:func:`agents.experiments.speedup.bracket_share`), and how many evaluations it spends.

Schedules: ``as run`` (the committed curve itself, no proxy); ``coarse+bisect(n)`` (the schedule of
``--eval-points 3 --refine-evals n`` with the old bisection, :func:`refinement_step`);
``adaptive(n, 10%)`` (``--refine-evals n --max-bracket-share 0.1``,
:func:`bracket_refinement_step`); ``every k`` (every k-th step evaluated, plus the comparison
points); ``every step`` (the finest bracket per-step snapshots allow).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bracket_schedule.py \\
        results/bench_reference_run/results.json results/bench_ablations_run/results.json \\
        --out results/bracket_schedule.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from agents.experiments.bench_report import restore_nonfinite, strict_results
from agents.experiments.bench_run import bracket_refinement_step, coarse_eval_steps, refinement_step
from agents.experiments.speedup import Curve, bracket_share, interpolation_bracket


def _share(steps: list[int], compute: np.ndarray, score: np.ndarray, target: float) -> tuple[float, bool]:
    st = sorted(set(steps))
    c = Curve(compute[st], score[st])
    b = interpolation_bracket(c, target)
    one = b is not None and st[b[1]] - st[b[0]] <= 1
    return bracket_share(c, target), one


def _refined(base: list[int], n: int, next_step) -> list[int]:
    """The evaluated steps after up to ``n`` refinements of ``base``: ``next_step(steps)`` is the
    step a refinement evaluates next; it stops early at ``None`` or a step already evaluated."""
    ev = list(base)
    for _ in range(n):
        k = next_step(ev)
        if k is None or k in ev:
            break
        ev.append(k)
    return ev


def simulate(entry: dict, target: float, eval_points: int = 3) -> dict[str, dict]:
    """Bracket share, one-step flag and evaluations of every schedule for one seed's curve."""
    comp = np.array([0.0] + [r["compute_cpu_s"] for r in entry["records"]])
    last = len(comp) - 1
    cs, sc = entry["curve"]["step"], entry["curve"]["score"]
    proxy = np.interp(np.arange(last + 1), cs, sc)
    base = sorted(set(int(v) for v in entry["snapshot"].values()) | set(coarse_eval_steps(last, eval_points)))
    out: dict[str, dict] = {}
    sh, one = _share(list(cs), comp, np.interp(np.arange(last + 1), cs, sc), target)
    out["as run"] = {"share": sh, "one_step": one, "evals": len(cs)}
    for n in (2, 4):
        ev = _refined(base, n, lambda ev: refinement_step(ev, list(proxy[ev]), target))
        sh, one = _share(ev, comp, proxy, target)
        out[f"coarse+bisect({n})"] = {"share": sh, "one_step": one, "evals": len(set(ev))}
    for n in (2, 4, 6, 10):
        ev = _refined(base, n, lambda ev: bracket_refinement_step(ev, list(proxy[ev]), comp, target, 0.1))
        sh, one = _share(ev, comp, proxy, target)
        out[f"adaptive({n}, 10%)"] = {"share": sh, "one_step": one, "evals": len(set(ev))}
    for k in (1, 2, 3, 5):
        ev = sorted(set(range(0, last + 1, k)) | {last} | set(int(v) for v in entry["snapshot"].values()))
        sh, one = _share(ev, comp, proxy, target)
        out["every step" if k == 1 else f"every {k}"] = {"share": sh, "one_step": one, "evals": len(ev)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="write the per-seed figures here (JSON)")
    ap.add_argument("--limit", type=float, default=0.1)
    args = ap.parse_args()
    rows: list[dict] = []
    for path in args.results:
        res = restore_nonfinite(json.loads(path.read_text()))
        target = float(res["speedup"]["target"])
        for name, m in res["methods"].items():
            for e in m["seeds"]:
                if "reused_from" in e:
                    continue  # counted in its own run
                rows.append({"run": str(path), "method": name, "seed": e["seed"], "target": target,
                             "schedules": simulate(e, target, int(res["config"].get("eval_points", 3)))})
    names = list(rows[0]["schedules"])
    print(f"{len(rows)} curves (method x seed) from {len(args.results)} runs; bracket share of compute-to-target "
          f"over the curves that reach the target")
    print(f"| schedule | curves reached | median share | 90th pct | max | above {args.limit:.0%} | of those, one step wide "
          f"| evaluations per curve (mean) |")
    print("|---|---|---|---|---|---|---|---|")
    summary = {}
    for s in names:
        v = [r["schedules"][s] for r in rows]
        fin = [x for x in v if math.isfinite(x["share"])]
        sh = np.array([x["share"] for x in fin])
        over = [x for x in fin if x["share"] > args.limit]
        summary[s] = {"reached": len(fin), "curves": len(v), "median": float(np.median(sh)),
                      "p90": float(np.percentile(sh, 90)), "max": float(sh.max()), "above": len(over),
                      "above_one_step": sum(x["one_step"] for x in over),
                      "evals_mean": float(np.mean([x["evals"] for x in v]))}
        d = summary[s]
        print(f"| {s} | {d['reached']}/{d['curves']} | {d['median']:.1%} | {d['p90']:.1%} | {d['max']:.1%} | "
              f"{d['above']} | {d['above_one_step']} | {d['evals_mean']:.1f} |")
    if args.out:
        # strict JSON: a not-reached curve's share (NaN) is null, listed under "nonfinite"
        args.out.write_text(json.dumps(strict_results({"limit": args.limit, "summary": summary, "curves": rows}),
                                       indent=1, allow_nan=False))
        print(f"written {args.out}")


if __name__ == "__main__":
    main()
