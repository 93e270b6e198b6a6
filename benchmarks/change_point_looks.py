"""The change-point test of ``anchor_fraction="auto"`` look by look: how often does one test declare
a change when the world model's quality is constant, with the threshold before issue 37 (z > 4 over
every split) and with the library's (Bonferroni over the splits tested, α = 0.001 per test)?

Issue 37, item 4. A stream of anchor groups of G = 8 rollouts with a constant within-group
correlation r (the synthetic scores of ``benchmarks/adaptive_fraction.py``: real = task offset +
0.1 z, world model = 0.3 × offset + 0.1 (r z + sqrt(1 − r²) e); or ``binary``: pass/fail real
scores, r = 1[q + 0.5·Logistic > 0] with q = offset + z, and a judge that scores
round(sigmoid(r·q + sqrt(1 − r²)·e), 1)). After every step (``--per-step`` new groups) the test
runs as :class:`~wmrl_envs.core.AdaptiveAnchorFraction` runs it: on the last 256 groups,
cross-fitted isotonic calibration (a run that debiases), at least 4 usable groups on each side.
The test does not act on its result (no group is forgotten), so a look that alarms is counted
whatever happened before: the share of looks that alarm is the per-test false-alarm probability
that the Bonferroni threshold bounds by α, and, with one test per training step, the expected
false change points per step. ``benchmarks/adaptive_fraction.py --change-points`` runs the same
rules inside the loop (where a change point makes the rule forget the groups before it) and
measures the delay on a real break.

Run (the figures in ``docs/method.md``, "Adaptive anchor fraction")::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/change_point_looks.py --seeds 6 --jobs 2 \\
        --out results/change_point_looks.json
    .venv/bin/python benchmarks/change_point_looks.py --quick      # smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

__all__ = ["main", "looks"]

SCENARIOS = ("gauss,r=0.45,per_step=1", "gauss,r=0.8,per_step=1", "gauss,r=0.2,per_step=3", "binary,r=0.6,per_step=1")


def looks(job: tuple[str, int, int]) -> dict[str, Any]:
    """One seed of ``scenario`` for ``steps`` looks: the looks at which each threshold alarms."""
    from wmrl_envs.core.adaptive import _change_point
    from wmrl_envs.core.advisor_model import crossfit_calibrated

    scenario, seed, steps = job
    kind, *kv = scenario.split(",")
    opt = dict(x.split("=") for x in kv)
    r, per_step = float(opt["r"]), int(opt["per_step"])
    rng = np.random.default_rng(seed)
    wm: list[list[float]] = []
    real: list[list[float]] = []
    alarms = {"z4": 0, "bonferroni": 0}
    for _ in range(steps):
        for _ in range(per_step):
            z, e, off = rng.normal(size=8), rng.normal(size=8), rng.normal()
            if kind == "gauss":
                x, y = off + 0.1 * z, 0.3 * off + 0.1 * (r * z + math.sqrt(1 - r * r) * e)
            else:
                q = off + z
                x = (q + 0.5 * rng.logistic(size=8) > 0).astype(float)
                y = np.round(1.0 / (1.0 + np.exp(-(r * q + math.sqrt(1 - r * r) * e))), 1)
            real.append(x.tolist())
            wm.append(y.tolist())
        held_real = real[-256:]
        held_wm = crossfit_calibrated(wm[-256:], held_real)
        alarms["z4"] += _change_point(held_wm, held_real, 4, z_crit=4.0) is not None
        alarms["bonferroni"] += _change_point(held_wm, held_real, 4) is not None
    return {"scenario": scenario, "seed": seed, "looks": steps, **alarms}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Simulate, print, write ``--out``; returns the JSON written."""
    from scipy.stats import chi2

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=300, help="looks per seed (one per training step)")
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 seed, 30 looks")
    ap.add_argument("--out", default="runs/change_point_looks.json")
    a = ap.parse_args(argv)
    if a.quick:
        a.seeds, a.steps = 1, 30
    t0 = time.time()
    jobs = [(sc, s, a.steps) for sc in a.scenarios for s in range(a.seeds)]
    if a.jobs > 1:
        with ProcessPoolExecutor(a.jobs) as ex:
            runs = list(ex.map(looks, jobs))
    else:
        runs = [looks(j) for j in jobs]
    table: dict[str, Any] = {}
    print(f"false alarms per look at constant quality ({a.seeds} seeds x {a.steps} looks per scenario; exact Poisson "
          "95% upper bound)")
    for sc in [*a.scenarios, "all"]:
        rs = [x for x in runs if sc in ("all", x["scenario"])]
        n = sum(x["looks"] for x in rs)
        row: dict[str, Any] = {"looks": n}
        for rule in ("z4", "bonferroni"):
            k = sum(x[rule] for x in rs)
            row[rule] = {"alarms": k, "per_1000_looks": 1000.0 * k / n,
                         "upper95_per_1000_looks": 1000.0 * float(chi2.ppf(0.95, 2 * (k + 1))) / 2.0 / n,
                         "seeds_with_an_alarm": sum(1 for x in rs if x[rule])}
        table[sc] = row
        print(f"  {sc}: " + "; ".join(f"{rule} {row[rule]['alarms']} in {n} ({row[rule]['per_1000_looks']:.3g} per "
                                       f"1,000, upper {row[rule]['upper95_per_1000_looks']:.3g})"
                                       for rule in ("z4", "bonferroni")))
    result = {"settings": {k: v for k, v in vars(a).items() if k not in ("out", "jobs", "quick")},
              "seconds": round(time.time() - t0, 1), "summary": table}
    print(f"{result['seconds']} s")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
