"""``anchor_fraction="auto"`` over many seeds: does it chatter, and does it settle where the model says?

A simulation on the library's own objects (issue 25, findings 2 and 3): a
:class:`~wmrl_envs.core.CorrectionLoop` with ``anchor_fraction="auto"`` (its
:class:`~wmrl_envs.core.AdaptiveAnchorFraction`, :class:`~wmrl_envs.core.AnchorAdvisor`, router
and ledger; the run debiases, so r is cross-fitted) plans ``--steps`` steps of ``--groups``
groups of G rollouts; every anchor group closes with synthetic scores whose *within-group*
correlation is the scenario's true r (real = task offset + 0.1 z, world model = 0.3 × task
offset + 0.1 (r z + sqrt(1 − r²) e)). γ is given (``--gamma``); the noise scale is not
(b = ∞, where f* is either f_min or f_max: the hardest case for chatter) unless a scenario
gives one.

Scenarios: constant r (``--rs``; a negative r is an anti-correlated world model, whose
increasing map is flat) and a world model that breaks (``--breaks``: r as given until the middle
of the run, then 0); either may add ``,gamma=<γ>,b=<B_noise / B>`` (by default the breaks from
r = 0.8 and 0.45 with b = 1 and γ = 0.01, where f*(0) = sqrt(γ b) = 0.1 and f*(r) = 0 for
r >= 0.1: issue 25's regression). Per scenario and seed it measures the changes of direction of
the fraction in force per 100 steps, the change points, the time-averaged fraction against the
model's own answer for the true r (``clip(optimal_anchor_fraction(r, γ, b), f_min, f_max)``), and
for a break the steps from the break until the fraction reaches ``f_max / 2``, ``f_max`` and
half the model's answer for r = 0 (``steps_to_half_model``), and the lowest fraction from 10
steps after the break on over the model's answer. It prints the median and the 5-95% range over
seeds.

``--change-points`` (issue 37) runs the change-point tests side by side on the same seeds: the
library's (Bonferroni over the splits tested) and the fixed z > 4 before issue 37
(``--change-rules``), on constant r 0.45 and 0.8 (false change points per 1,000 steps, pooled over
seeds, with the exact Poisson 95% upper bound; the steps before a break count too) and on breaks
from 0.45 and from 0.8 with γ = 0.01, b = 1 (``change_point_delay``: steps from the break to the
first change point).

``--rule point`` runs the rule before issue 25 (the fraction follows ``clip(f*(L))`` with a
25% hysteresis and no change point; reimplemented here as a subclass) for comparison.

Run (the figures in ``docs/method.md``, "Adaptive anchor fraction")::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/adaptive_fraction.py --seeds 50 --jobs 2 \\
        --out results/adaptive_fraction.json                       # about 20 minutes on 2 cores
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/adaptive_fraction.py --seeds 50 --jobs 2 --rule point \\
        --rs 0.45 --no-break --out results/adaptive_fraction_point.json
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/adaptive_fraction.py --change-points --seeds 12 --steps 300 \\
        --jobs 2 --out results/adaptive_change_points.json        # 988 s on 2 shared cores
    .venv/bin/python benchmarks/adaptive_fraction.py --quick      # smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import numpy as np

__all__ = ["main", "run_one", "direction_changes"]


def direction_changes(fractions: Sequence[float]) -> int:
    """How often the fraction's moves change sign (up then down, or down then up)."""
    d = np.diff(np.asarray(fractions, dtype=float))
    d = d[d != 0]
    return int(np.sum(np.sign(d[1:]) != np.sign(d[:-1]))) if len(d) > 1 else 0


def _point_rule():
    """The rule before issue 25: the target is clip(f*(L)), followed whenever it differs from the
    fraction in force by more than the hysteresis factor."""
    import wmrl_envs.core.adaptive as adaptive_module
    from wmrl_envs.core.adaptive import AdaptiveAnchorFraction
    from wmrl_envs.core.advisor_model import r_confidence_bounds

    adaptive_module._CONFIRM_STEPS = 1  # every move at once, as before (this process only)
    adaptive_module._change_point = lambda *a, **k: None  # and no change points (they came after it)

    class PointRule(AdaptiveAnchorFraction):
        def target(self, advisor, calibrate=None):
            b = self.bounds(advisor, calibrate)
            if b is None:
                return None, float("nan")
            r = b[0]
            # the lower bound as before issue 25: the lower of L over the window and over its last
            # max(2, min_groups // 2) groups
            wm = advisor._calibrated(calibrate)[-self.window:]
            real = advisor.groups()[1][-self.window:]
            k = max(2, self.min_groups // 2)
            lo = min(x[0] for x in (r_confidence_bounds(wm, real), r_confidence_bounds(wm[-k:], real[-k:]))
                     if x is not None)
            t, f = self._clip(lo), self.fraction
            if f <= 0 or t <= 0 or max(t / f, f / t) > 1.0 + self.hysteresis:
                return t, r
            return f, r

    return PointRule


def run_one(scenario: str, seed: int, *, change_rule: str = "bonferroni", **kw: Any) -> dict[str, Any]:
    """One run of ``scenario`` (``"r=<value>"`` or ``"break=<value>"``, optionally followed by
    ``",gamma=<γ>,b=<B_noise / B>"``, which replace ``gamma`` and give the loop a noise scale);
    returns its figures. ``change_rule``: ``"bonferroni"`` (the library's change-point test) or
    ``"z4"`` (the test before issue 37: the largest z over the splits against a fixed 4, whatever
    the number of splits; patched in for this run only). ``kw``: :func:`_run` 's settings."""
    import functools

    import wmrl_envs.core.adaptive as adaptive_module

    if change_rule not in ("bonferroni", "z4"):
        raise ValueError(f"change_rule must be 'bonferroni' or 'z4', got {change_rule!r}")
    test = adaptive_module._change_point
    if change_rule == "z4":
        adaptive_module._change_point = functools.partial(test, z_crit=4.0)
    try:
        out = _run(scenario, seed, **kw)
    finally:
        adaptive_module._change_point = test
    out["change_rule"] = change_rule
    return out


def _run(scenario: str, seed: int, *, steps: int, groups: int, group_size: int, gamma: float,
         f_min: float, f_max: float, rule: str = "band", step_law: str = "sgd") -> dict[str, Any]:
    """The run behind :func:`run_one`."""
    from wmrl_envs.core import CorrectionConfig, CorrectionLoop
    from wmrl_envs.core.advisor import optimal_anchor_fraction
    from wmrl_envs.world_models.base import WorldModelPrediction

    class _WM:  # never called: the groups are closed with the simulation's own scores
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=0.0) for _ in actions]

    head, *extra = scenario.split(",")
    kind, value = head.split("=")
    r0 = float(value)
    over = dict(kv.split("=") for kv in extra)
    if set(over) - {"gamma", "b"}:
        raise ValueError(f"scenario {scenario!r}: only gamma= and b= may follow the r")
    gamma = float(over.get("gamma", gamma))
    b = float(over["b"]) if "b" in over else None
    brk = steps // 2 if kind == "break" else None

    def r_at(step: int) -> float:
        return 0.0 if brk is not None and step >= brk else r0

    cfg = CorrectionConfig(anchor_fraction="auto", cost_ratio=gamma, noise_batch_ratio=b, f_min=f_min, f_max=f_max,
                           min_pairs=10**6, buffer_size=10**6, warmup_groups=10**6, auto_step_law=step_law)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "auto is experimental"
        loop = CorrectionLoop(cfg, world_model=_WM(), groups_per_step=groups, seed=seed)
    if rule == "point":
        old = loop.adaptive
        loop.adaptive = _point_rule()(**{k: v for k, v in old.state_dict().items() if k in (
            "start", "f_min", "f_max", "cost_ratio", "noise_batch_ratio", "window", "min_groups", "hysteresis")})
    rng = np.random.default_rng(10_000 + seed)
    g = group_size
    fr = []
    for s in range(steps):
        routes = loop.plan_step()
        fr.append(loop.router.anchor_fraction)
        r = r_at(s)
        for _ in routes:
            t = loop.open_group()
            if t.route != "anchor":
                loop.close_group(t, [0.5] * g, None)
                continue
            z, e, off = rng.normal(size=g), rng.normal(size=g), rng.normal()
            real = off + 0.1 * z
            wm = 0.3 * off + 0.1 * (r * z + math.sqrt(1.0 - r * r) * e)
            loop.close_group(t, wm.tolist(), real.tolist())
    fr = np.asarray(fr)

    rule_of = loop.adaptive if rule != "point" else old

    def model(r: float) -> float:  # the rule's own answer for the true r (its step law and anchor weight)
        return min(f_max, max(f_min, optimal_anchor_fraction(r, gamma, b, rule_of.step_law, rho=rule_of.rho)))

    cps = [step for step, _k in getattr(loop.adaptive, "change_points", [])]
    out: dict[str, Any] = {"scenario": scenario, "seed": seed,
                           "direction_changes_per_100": 100.0 * direction_changes(fr) / (steps - 1),
                           "moves": int(np.sum(np.diff(fr) != 0)),
                           "change_points": len(cps),
                           # at constant quality every change point is a false alarm; with a break,
                           # those before it (over the steps before it)
                           "false_change_points": sum(1 for c in cps if brk is None or c < brk),
                           "steps_at_constant_quality": steps if brk is None else brk}
    if brk is None:
        out.update(mean_fraction=float(fr.mean()), model_fraction=model(r0),
                   mean_over_model=float(fr.mean()) / model(r0),
                   mean_over_model_from_step_20=float(fr[20:].mean()) / model(r0))
    else:
        before, after = fr[:brk], fr[brk:]
        out.update(mean_fraction_before=float(before.mean()), model_fraction_before=model(r0),
                   mean_over_model_before=float(before.mean()) / model(r0),
                   direction_changes_per_100_before=100.0 * direction_changes(before) / (brk - 1),
                   steps_to_half_f_max=next((i for i, f in enumerate(after) if f >= f_max / 2), None),
                   steps_to_f_max=next((i for i, f in enumerate(after) if f >= f_max), None),
                   # leaves the floor: reaches half the model's fraction for the broken world model
                   steps_to_half_model=next((i for i, f in enumerate(after) if f >= model(0.0) / 2), None),
                   min_fraction_over_model_from_10_steps_after=float(after[10:].min()) / model(0.0),
                   # steps from the break to the first change point after it (the test runs before
                   # a step's routes are drawn: 1 = declared when planning the step after the break's)
                   change_point_delay=next((c - brk for c in cps if c >= brk), None),
                   mean_fraction_after=float(after.mean()), model_fraction_after=model(0.0))
    return out


def _summary(values: list[float | None]) -> dict[str, Any]:
    v = [x for x in values if x is not None]
    missing = len(values) - len(v)
    if not v:
        return {"median": None, "p5": None, "p95": None, "missing": missing}
    return {"median": float(np.median(v)), "p5": float(np.percentile(v, 5)), "p95": float(np.percentile(v, 95)),
            "missing": missing}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Simulate, print the table, write ``--out``; returns the JSON written."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--steps", type=int, default=280)
    ap.add_argument("--groups", type=int, default=10, help="groups per step")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--gamma", type=float, default=0.05)
    ap.add_argument("--f-min", type=float, default=0.02)
    ap.add_argument("--f-max", type=float, default=0.5)
    ap.add_argument("--rs", nargs="+", default=["0", "0.2", "0.45", "0.8", "-0.6"],
                    help='constant r, each optionally with ",gamma=<γ>,b=<B_noise / B>" (e.g. "0.45,gamma=0.01,b=1")')
    ap.add_argument("--breaks", nargs="+", default=["0.45", "0.8,gamma=0.01,b=1", "0.45,gamma=0.01,b=1"],
                    help="r before the world model breaks (to 0), optionally with gamma= and b= as in --rs")
    ap.add_argument("--no-break", action="store_true")
    ap.add_argument("--rule", choices=["band", "point"], default="band",
                    help="band: the library's rule; point: the rule before issue 25")
    ap.add_argument("--change-rules", nargs="+", choices=["bonferroni", "z4"], default=["bonferroni"],
                    help="change-point tests to run side by side: bonferroni (the library's) and z4 (before issue 37)")
    ap.add_argument("--change-points", action="store_true",
                    help="issue 37's comparison: constant r 0.45 and 0.8 for the false change points, breaks from "
                         "0.45 and 0.8 (gamma=0.01, b=1) for the delay, both change rules (--seeds/--steps apply)")
    ap.add_argument("--step-law", choices=["sgd", "adam"], default="sgd",
                    help="CorrectionConfig.auto_step_law of the runs (adam: Adam's law with the run's anchor weight)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 seeds, 40 steps")
    ap.add_argument("--out", default="runs/adaptive_fraction.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.steps = 2, 40
    if args.change_points:
        args.rs, args.breaks, args.no_break = ["0.45", "0.8"], ["0.45", "0.8,gamma=0.01,b=1"], False
        args.change_rules = ["bonferroni", "z4"]
    scenarios = [f"r={r}" for r in args.rs] + ([] if args.no_break else [f"break={x}" for x in args.breaks])
    kw = dict(steps=args.steps, groups=args.groups, group_size=args.group_size, gamma=args.gamma,
              f_min=args.f_min, f_max=args.f_max, rule=args.rule, step_law=args.step_law)
    t0 = time.time()
    jobs = [(sc, s, dict(kw, change_rule=cr)) for cr in args.change_rules for sc in scenarios for s in range(args.seeds)]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as ex:
            runs = list(ex.map(_run_job, jobs))
    else:
        runs = [_run_job(j) for j in jobs]
    table: dict[str, Any] = {}
    one_rule = len(args.change_rules) == 1
    for cr in args.change_rules:
        for sc in scenarios:
            rs = [x for x in runs if x["scenario"] == sc and x["change_rule"] == cr]
            keys = [k for k in rs[0] if k not in ("scenario", "seed", "change_rule")]
            table[sc if one_rule else f"{sc} [{cr}]"] = {k: _summary([x[k] for x in rs]) for k in keys}
    change_points = {cr: _change_point_figures([x for x in runs if x["change_rule"] == cr]) for cr in args.change_rules}
    print(f"anchor_fraction='auto' ({args.rule} rule): {args.seeds} seeds x {args.steps} steps of {args.groups} "
          f"groups of {args.group_size}, gamma = {args.gamma} and b = inf unless the scenario says, "
          f"f in [{args.f_min}, {args.f_max}]; "
          "median [5%, 95%] over seeds")
    for cr, f in change_points.items():
        print(f"  change points ({cr}): {f['false']} false in {f['steps']} steps at constant quality, "
              f"{f['per_1000_steps']:.3g} per 1,000 steps (95% upper bound {f['upper95_per_1000_steps']:.3g}); "
              + "; ".join(f"delay after {sc}: {d['median']} [{d['p5']}, {d['p95']}] steps"
                          + (f" (none in {d['missing']} runs)" if d["missing"] else "")
                          for sc, d in f["delay"].items()))
    for sc, t in table.items():
        print(f"  {sc}:")
        for k, v in t.items():
            if v["median"] is None:
                print(f"    {k}: never ({v['missing']} of {args.seeds} seeds)")
            else:
                extra = f" (never in {v['missing']} seeds)" if v["missing"] else ""
                print(f"    {k}: {v['median']:.4g} [{v['p5']:.4g}, {v['p95']:.4g}]{extra}")
    result = {"settings": {k: v for k, v in vars(args).items() if k not in ("out", "jobs", "quick")},
              "seconds": round(time.time() - t0, 1), "summary": table, "change_points": change_points}
    print(f"{result['seconds']} s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    return result


def _change_point_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """False change points over every step at constant quality (pooled over runs; the 95% upper
    bound is the exact Poisson one) and the delay from a break to its change point per scenario."""
    from scipy.stats import chi2

    false = sum(x["false_change_points"] for x in runs)
    steps = sum(x["steps_at_constant_quality"] for x in runs)
    delay = {x["scenario"]: _summary([y["change_point_delay"] for y in runs if y["scenario"] == x["scenario"]])
             for x in runs if "change_point_delay" in x}
    return {"false": int(false), "steps": int(steps), "per_1000_steps": 1000.0 * false / steps,
            "upper95_per_1000_steps": 1000.0 * float(chi2.ppf(0.95, 2 * (false + 1))) / 2.0 / steps, "delay": delay}


def _run_job(job: tuple[str, int, dict[str, Any]]) -> dict[str, Any]:
    sc, s, kw = job
    return run_one(sc, s, **kw)


if __name__ == "__main__":
    main()
