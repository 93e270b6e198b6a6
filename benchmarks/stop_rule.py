"""The stop rule on real executions over many seeds: false stops of a flaky sandbox, cost of a dead one.

A simulation on the library's own :class:`~wmrl_envs.core.UngradedMonitor` (issue 25,
finding 8). Each training step plans ``--groups`` groups of G rollouts, ``--anchors`` of them
anchor groups (at random places in the step); every real execution fails (a named
infrastructure cause) with probability p, world-model scores never fail. The monitor is told
the step (``plan(groups, anchor_groups)``, as :meth:`CorrectionLoop.plan_step` does) and
records the groups in order; a step that raises :class:`TooManyUngradedError` counts as a stop
and the next step starts.

Beside it, the rule before issue 25 is computed from the same draws: the real-execution share
of the executions recorded *so far* in the step (``failed so far >= max_share x executions so
far``), while the rollout share already extrapolated to the planned step.

Per p and seed it measures the stops per 100 steps; for a dead sandbox (p = 1) the real
executions spent in a step before it stops. It prints the median and the 5-95% range over seeds.

Run (the figures quoted in the report of issue 25)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/stop_rule.py --seeds 200 --steps 100
    .venv/bin/python benchmarks/stop_rule.py --quick      # smoke run
"""

from __future__ import annotations

import argparse
import json
import logging
import time

import numpy as np

from wmrl_envs.core import TooManyUngradedError, UngradedMonitor
from wmrl_envs.core.ungraded import SANDBOX_UNAVAILABLE


def run_seed(seed: int, p: float, steps: int, groups: int, anchors: int, g: int, max_share: float) -> dict:
    """One seed: ``steps`` steps; returns the stops of both rules and the executions spent until a stop."""
    rng = np.random.default_rng(seed)
    mon = UngradedMonitor(max_share, groups_per_step=groups)
    stops_new = stops_old = 0
    spent_new: list[int] = []
    spent_old: list[int] = []
    for _ in range(steps):
        mon.plan(groups, anchors)
        is_anchor = np.zeros(groups, bool)
        is_anchor[rng.choice(groups, size=anchors, replace=False)] = True
        fails = rng.random((groups, g)) < p
        ex = ex_failed = 0
        old_stopped = False
        for k in range(groups):
            causes = [SANDBOX_UNAVAILABLE if (is_anchor[k] and f) else None for f in fails[k]]
            if is_anchor[k]:
                ex += g
                ex_failed += int(fails[k].sum())
                if not old_stopped and ex_failed and ex_failed >= max_share * ex - 1e-9:
                    old_stopped = True
                    stops_old += 1
                    spent_old.append(ex)
            try:
                mon.record_group(causes, anchor=bool(is_anchor[k]))
            except TooManyUngradedError:
                stops_new += 1
                spent_new.append(ex)
                break
    return {"stops_new": stops_new, "stops_old": stops_old,
            "spent_new": float(np.mean(spent_new)) if spent_new else None,
            "spent_old": float(np.mean(spent_old)) if spent_old else None}


def _summary(xs: list[float]) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "n/a"
    a = np.asarray(xs, float)
    return f"{np.median(a):.3g} [{np.percentile(a, 5):.3g}, {np.percentile(a, 95):.3g}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--groups", type=int, default=12)
    ap.add_argument("--anchors", type=int, default=3)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-share", type=float, default=0.5)
    ap.add_argument("--ps", type=float, nargs="+", default=[0.1, 0.2, 0.3, 0.4, 0.5, 1.0])
    ap.add_argument("--out", default=None, help="write the per-p summary as JSON")
    ap.add_argument("--quick", action="store_true", help="smoke run: 5 seeds, 10 steps")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.steps = 5, 10
    logging.disable(logging.WARNING)  # the monitor warns about every failed group
    t0 = time.perf_counter()
    n_exec = args.anchors * args.group_size
    print(f"{args.seeds} seeds x {args.steps} steps; a step: {args.groups} groups of {args.group_size}, "
          f"{args.anchors} anchor groups ({n_exec} real executions), max_ungraded_share {args.max_share}")
    print(f"{'p(fail)':>8} | {'stops / 100 steps, fixed rule':>30} | {'rule before issue 25':>26} | "
          f"{'executions spent until a stop (fixed / before)':>46}")
    out = {}
    for p in args.ps:
        rows = [run_seed(s, p, args.steps, args.groups, args.anchors, args.group_size, args.max_share)
                for s in range(args.seeds)]
        per100 = 100.0 / args.steps
        new = [r["stops_new"] * per100 for r in rows]
        old = [r["stops_old"] * per100 for r in rows]
        sn, so = [r["spent_new"] for r in rows], [r["spent_old"] for r in rows]
        out[str(p)] = {"stops_per_100_new": _summary(new), "stops_per_100_old": _summary(old),
                       "spent_new": _summary(sn), "spent_old": _summary(so)}
        print(f"{p:>8g} | {_summary(new):>30} | {_summary(old):>26} | {_summary(sn) + ' / ' + _summary(so):>46}")
    print(f"(median [5%, 95%] over seeds; {time.perf_counter() - t0:.1f} s)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "results": out}, f, indent=1)


if __name__ == "__main__":
    main()
