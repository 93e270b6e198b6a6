"""Real-execution GRPO's gradient noise scale on AutoResearch, and the advisor's prediction it gives.

The anchor-fraction advisor predicts WMRL's compute-to-target speedup from the within-group
correlation r of world-model and real scores, the costs per rollout, and ``b = B_noise / B``,
real-execution GRPO's gradient noise scale over its batch of groups (``docs/method.md``,
"Choosing the anchor fraction"). This script measures ``b`` on ``wmrl bench``'s own training loop
(:func:`agents.experiments.bench_run.run_method`, the ``real`` method, the grammar agent, the
benchmark's groups per step and group size) for ``--steps`` steps and ``--seeds`` seeds: every
step's per-group policy gradients (:func:`agents.grpo.group_gradient_moments`) feed a
:class:`wmrl_envs.core.GradientNoiseScale` (per seed, and pooled over seeds). With ``--advice``
(the ``advice.json`` of a ``wmrl advise`` pilot: r and the costs per rollout) it prints the
predicted speedup at each ``--fractions`` with the measured ``b`` and at ``b = ∞``, to set beside
a measured headline (``docs/bench_reference.md``).

Run (the figures of ``docs/advisor_check.md``, "On the live benchmark", were made this way)::

    WMRL_TASK_SECRET=wmrl-reference .venv/bin/wmrl advise --groups 16 --out-dir runs/advise-live
    WMRL_TASK_SECRET=wmrl-reference .venv/bin/python benchmarks/noise_scale.py --advice runs/advise-live/advice.json
    .venv/bin/python benchmarks/noise_scale.py --quick      # smoke run: 2 steps of 2 groups

Writes ``--out`` (strict JSON; an unresolved noise scale, inf or NaN, is written as null).
``b`` depends on the batch: for a run of G groups per step use ``B_noise / G``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Measure and print; returns the JSON written to ``--out``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3, help="real-GRPO steps per seed (a pilot's length)")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--groups-per-step", type=int, default=None, help="default: wmrl bench's")
    ap.add_argument("--group-size", type=int, default=None, help="default: wmrl bench's")
    ap.add_argument("--sandbox", default="auto")
    ap.add_argument("--advice", default=None, help="advice.json of a wmrl advise pilot (r and costs per rollout)")
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.05, 0.1, 0.2])
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 steps of 2 groups of 2, one seed")
    ap.add_argument("--out", default="runs/noise_scale.json")
    args = ap.parse_args(argv)

    import torch

    from agents.experiments.bench_agents import GrammarBenchAgent
    from agents.experiments.bench_config import BenchConfig
    from agents.experiments.bench_run import run_method
    from agents.experiments.methods import METHODS
    from wmrl_envs.core import CostRates, GradientNoiseScale, predicted_speedup
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.secret import sandbox_hidden_paths
    from wmrl_envs.envs.autoresearch.tasks import list_tasks
    from wmrl_envs.sandbox import make_sandbox

    torch.set_num_threads(1)
    base = BenchConfig()
    groups = args.groups_per_step or (2 if args.quick else base.groups_per_step)
    size = args.group_size or (2 if args.quick else base.group_size)
    steps, seeds = (2, 1) if args.quick else (args.steps, args.seeds)
    if groups < 2 or size < 2 or steps < 1 or seeds < 1:
        raise SystemExit("need --groups-per-step >= 2, --group-size >= 2, --steps >= 1 and --seeds >= 1")
    if not all(0.0 <= f <= 1.0 for f in args.fractions):
        raise SystemExit(f"--fractions must be anchor fractions in [0, 1], got {args.fractions}")
    advice = costs = None
    if args.advice is not None:  # checked before anything is measured
        advice = json.loads(Path(args.advice).read_text())
        for key in ("r", "costs"):
            if key not in advice:
                raise SystemExit(f"{args.advice} has no {key!r}: pass the advice.json that wmrl advise writes")
        if not isinstance(advice["r"], (int, float)) or not math.isfinite(advice["r"]):
            raise SystemExit(f"{args.advice} has no measured correlation (r = {advice['r']!r}: too few pilot groups?); "
                             "run wmrl advise with more --groups")
        c = advice["costs"]
        try:
            costs = CostRates(c["execution_s"], c["world_model_s"], c.get("other_s", 0.0), c.get("unit", "CPU-s"))
        except (KeyError, TypeError, ValueError) as exc:
            raise SystemExit(f"{args.advice}: its costs are not usable ({exc})") from None
    cfg = BenchConfig(methods=("real",), seeds=seeds, steps=steps, groups_per_step=groups, group_size=size,
                      sandbox=args.sandbox)
    sandbox = make_sandbox(args.sandbox, hidden_paths=sandbox_hidden_paths())
    if args.sandbox == "auto" and not sandbox.isolates:
        raise SystemExit("no isolating sandbox works here; install bubblewrap or pass --sandbox subprocess")
    per_seed, pooled = [], GradientNoiseScale()
    try:
        AutoResearchEnv(tasks="all", sandbox=sandbox).prepare_leaderboards()
        for seed in range(seeds):
            gns = GradientNoiseScale()
            run_method(METHODS["real"], seed, cfg, lambda s: GrammarBenchAgent(s),
                       lambda: AutoResearchEnv(tasks="train", sandbox=sandbox), None, list_tasks("train"),
                       max_steps=steps, noise_scale=gns, progress=print)
            pooled.merge(gns)
            per_seed.append({"seed": seed, "b_noise_groups": gns.value, "b": gns.ratio(groups), "steps": gns.steps})
            print(f"[noise] seed {seed}: B_noise = {gns.value:.3g} groups, b = B_noise / B = {gns.ratio(groups):.3g}")
    finally:
        sandbox.close()
    b = pooled.ratio(groups)
    out: dict[str, Any] = {"groups_per_step": groups, "group_size": size, "steps": steps, "seeds": seeds,
                           "b_noise_groups": pooled.value, "b": b, "per_seed": per_seed}
    print(f"[noise] pooled over {seeds} seeds x {steps} steps: B_noise = {pooled.value:.3g} groups; "
          f"b = {b:.3g} at {groups} groups per step")
    print(f"[noise] b scales with the batch: for a run of G groups per step pass --noise-batch-ratio "
          f"{pooled.value:.3g} / G (wmrl advise) or CorrectionConfig(noise_batch_ratio=...) likewise")
    if advice is not None:
        r = float(advice["r"])
        bb = b if math.isfinite(b) else None
        out["predictions"] = [{"fraction": f, "with_b": predicted_speedup(f, r, costs, bb),
                               "b_inf": predicted_speedup(f, r, costs), "cost_ratio": predicted_speedup(f, r, costs, 0.0)}
                              for f in args.fractions]
        print(f"[noise] advice: r = {r:.3f}, gamma = {costs.gamma:.4g}")
        for p in out["predictions"]:
            print(f"  f = {p['fraction']}: predicted {p['with_b']:.2f}x with b = {b:.3g} "
                  f"(b = inf: {p['b_inf']:.2f}x; cost ratio per step: {p['cost_ratio']:.2f}x)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    def strict(x: Any) -> Any:  # strict JSON: inf / NaN (an unresolved noise scale) written as null
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: strict(v) for k, v in x.items()}
        if isinstance(x, list):
            return [strict(v) for v in x]
        return x

    Path(args.out).write_text(json.dumps(strict(out), indent=1, allow_nan=False))
    return out


if __name__ == "__main__":
    main()
