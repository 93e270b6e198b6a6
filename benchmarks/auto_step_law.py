"""Which step law ``anchor_fraction="auto"`` should take its f* under: training outcomes, not the rule's dynamics.

``benchmarks/adaptive_fraction.py`` checks that ``auto`` tracks the model's answer without chatter;
it cannot say whether the answer is a good one. The advisor's model prices choices with Adam's step
law at the optimum anchor weight ρ = 1/r (``docs/method.md``, "Choosing the anchor fraction");
``auto`` kept SGD's. The two disagree exactly where it matters: under Adam's law at the optimum ρ a
world model without signal needs no more anchors (f*(0) <= γ), under SGD's it needs ``f_max`` (no
noise scale) or sqrt(γ b). With the run's own ρ (2) instead of the optimum, Adam's law puts f*(0)
near sqrt(2γ/3). Which keeps training cheapest when a world model is poor or breaks is a question
about training, so this trains.

On the known-truth map (the sweep's env, tabular policy, Adam at a fixed learning rate, declared
costs: γ = 0.01), per scenario and seed, WMRL with:

* ``fixed``: the anchor fraction 0.1 (the library's default);
* ``anchor_fraction="auto"`` under ``sgd`` (SGD's law), ``adam-rho`` (Adam's law with the run's anchor
  weight ρ_target = 2: ``auto_step_law="adam"``) and ``adam-opt`` (Adam's law at the optimum ρ = 1/r,
  the advisor's form, which ``auto`` does not offer), each without a noise scale (``b`` unknown:
  auto's default) and with ``b`` measured on real GRPO's first 3 steps (``+b``).

Scenarios: world models ``perfect``, ``heavy_noise``, ``bias``, ``useless`` throughout, and
``break:<level>``: one that breaks after ``--break-at`` steps from ``perfect`` to ``useless``
(signal lost), ``blind_spots`` or ``bias`` (misleading). Measured: compute to the target (90% of real GRPO's gain at 16
groups after S steps; CPU-seconds as declared), the median over seeds and its speedup over real
GRPO's, seeds that reached the target within 4 times real GRPO's compute, and the mean anchor
fraction over the run.

Run (figures in ``docs/method.md``, "Adaptive anchor fraction"; 40-180 CPU-s each alone, the
unreached runs of 2,000 steps dominate)::

    .venv/bin/python benchmarks/auto_step_law.py --seeds 8 --rules sgd adam-rho \\
        --scenarios useless perfect --out results/auto_step_law_a.json
    .venv/bin/python benchmarks/auto_step_law.py --seeds 8 --rules sgd adam-rho \\
        --scenarios break:useless break:blind_spots --out results/auto_step_law_b.json
    .venv/bin/python benchmarks/auto_step_law.py --seeds 8 --rules sgd adam-rho \\
        --scenarios bias heavy_noise break:bias --out results/auto_step_law_c.json
    .venv/bin/python benchmarks/auto_step_law.py --seeds 8 --rules adam-opt --scenarios useless \\
        --out results/auto_step_law_opt.json
    .venv/bin/python benchmarks/auto_step_law.py --quick                  # smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main"]

SCENARIOS = ("perfect", "heavy_noise", "bias", "useless", "break:useless", "break:blind_spots", "break:bias")


def _ctt(run: Any, target: float) -> float:
    from agents.experiments.speedup import Curve, compute_to_target

    return compute_to_target(Curve(run.compute, run.score), target)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=25, help="real GRPO's steps at 16 groups (its budget S)")
    ap.add_argument("--break-at", type=int, default=6, help="steps before a breaking world model breaks")
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    ap.add_argument("--rules", nargs="+", default=["sgd", "adam-rho", "adam-opt"],
                    choices=["sgd", "adam-rho", "adam-opt"],
                    help="auto's rules beside the fixed fraction 0.1: sgd (auto_step_law='sgd'), adam-rho "
                         "(auto_step_law='adam': Adam's law with the run's ρ_target) and adam-opt (Adam's law at the "
                         "optimum ρ = 1/r, the advisor's form)")
    ap.add_argument("--quick", action="store_true", help="2 seeds, two scenarios")
    ap.add_argument("--out", default="runs/auto_step_law.json")
    a = ap.parse_args(argv)
    if a.quick:
        a.seeds, a.scenarios = 2, ["perfect", "break:useless"]

    import torch

    torch.set_num_threads(1)
    from agents.experiments.speedup import Curve, target_score
    from agents.experiments.sweep_config import BREAKING, SweepConfig
    from agents.experiments.sweep_run import run_sweep_method
    from wmrl_envs.core.advisor_model import GradientNoiseScale

    t0 = time.process_time()
    cfg = SweepConfig(workers=1, steps=a.steps, break_at_step=a.break_at)
    seeds = list(range(a.seeds))
    real = [run_sweep_method("real", None, None, s, cfg, max_steps=a.steps) for s in seeds]
    target = target_score([Curve(r.compute, r.score) for r in real], gain_fraction=cfg.gain_fraction,
                          min_gain=cfg.min_gain)
    gns = GradientNoiseScale()
    for r in real:
        for m in r.noise_moments[:3]:
            gns.add_step(*m)
    b = gns.ratio(cfg.groups_per_step)
    real_t = [run_sweep_method("real", None, None, s, cfg, max_steps=400, target=target) for s in seeds]
    real_med = float(np.median([_ctt(r, target) for r in real_t]))
    budget = 4 * real_med
    print(f"target {target:.3f}; real GRPO's median compute to it {real_med:.1f} CPU-s; b = B_noise/B = {b:.2f}; "
          f"gamma = {cfg.wm_cost_s / cfg.execution_cost_s:.3g}", flush=True)
    rules: dict[str, tuple[float | str, Any]] = {"fixed 0.1": (0.1, None)}
    for law in a.rules:
        for with_b in (False, True):
            rules[f"{law}{' +b' if with_b else ''}"] = ("auto", (law, b if with_b else None))
    out: dict[str, Any] = {"target": target, "real_median_ctt": real_med, "noise_batch_ratio": b, "seeds": seeds,
                           "break_at_step": a.break_at, "budget": budget, "rows": []}
    for scen in a.scenarios:
        if scen.startswith("break:"):
            level, scfg = BREAKING, replace(cfg, break_to=scen.split(":", 1)[1])
        else:
            level, scfg = scen, cfg
        for name, (fraction, auto) in rules.items():
            rcfg, patched = scfg, None
            if auto is not None:
                law, bb = auto
                if law == "adam-opt":  # Adam's law at the optimum ρ = 1/r (the advisor's form), for comparison
                    from wmrl_envs.core.adaptive import AdaptiveAnchorFraction

                    patched = AdaptiveAnchorFraction._clip

                    def clip_at_optimum(self, r, _orig=patched):
                        rho, self.rho = self.rho, None
                        try:
                            return _orig(self, r)
                        finally:
                            self.rho = rho

                    AdaptiveAnchorFraction._clip = clip_at_optimum
                rcfg = replace(scfg, auto_noise_batch_ratio=bb,
                               correction=replace(scfg.correction, anchor_fraction="auto",
                                                  auto_step_law="sgd" if law == "sgd" else "adam"))
            try:
                runs = [run_sweep_method("wmrl", level, fraction, s, rcfg, max_steps=2000, target=target,
                                         compute_budget_s=budget) for s in seeds]
            finally:
                if patched is not None:
                    AdaptiveAnchorFraction._clip = patched
            ctts = [_ctt(r, target) for r in runs]
            med = float(np.median(ctts))
            row = {"scenario": scen, "rule": name, "ctt": ctts, "median_ctt": med,
                   "speedup": real_med / med if med > 0 else math.inf,
                   "reached": int(sum(math.isfinite(c) for c in ctts)),
                   "mean_fraction": float(np.mean([np.mean(r.anchor_fraction) for r in runs])),
                   "mean_fraction_after_break": (float(np.mean([np.mean(r.anchor_fraction[a.break_at:] or [math.nan])
                                                                for r in runs]))
                                                 if scen.startswith("break:") else None)}
            out["rows"].append(row)
            _write(a.out, out)  # after every row: a long run keeps what it has measured
            print(f"{scen:18s} {name:10s} speedup {row['speedup']:5.2f}x  reached {row['reached']}/{len(seeds)}  "
                  f"mean f {row['mean_fraction']:.3f}", flush=True)
    out["cpu_s"] = time.process_time() - t0
    print(f"{out['cpu_s']:.0f} CPU-s")
    _write(a.out, out)
    return out


def _write(path: str, out: dict[str, Any]) -> None:
    from wmrl_envs.utils import finite_or_none

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(finite_or_none(out), indent=1))


if __name__ == "__main__":
    main()
