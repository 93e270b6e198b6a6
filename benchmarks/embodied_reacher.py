"""The embodied experiment on CPU: the paper's VLA table (the paper's LIBERO experiment; ``docs/method.md``, "Reward mode") at Reacher-v5 scale.

Per experiment seed: scripted-controller demonstrations (IK + PD, with action noise) → a
behaviour-cloned Gaussian MLP policy (the SFT warm start) → a frozen learned success
predictor (the Robometer stand-in, fitted on offline rollouts) → GRPO from the same warm
start under three reward sources, all through ``AnchoredWorldModelWrapper`` (reward mode,
``score_trajectories``): sparse real success, the predictor only, and WMRL. Held-out success
before, during and after. See ``agents/experiments/embodied.py`` for the protocol.

    .venv/bin/python benchmarks/embodied_reacher.py --seeds 3 --out-dir runs/embodied

Writes ``results.json`` (everything, incl. per-step logs), ``table.md`` and
``success_curves.png`` to ``--out-dir``. Needs gymnasium's MuJoCo extras
(``pip install "gymnasium[mujoco]"``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    from agents.experiments.embodied import EmbodiedConfig

    d = EmbodiedConfig()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=len(d.seeds), help="experiment seeds 0..N-1")
    ap.add_argument("--out-dir", default="runs/embodied", help="output folder")
    ap.add_argument("--methods", nargs="+", default=list(d.methods), choices=["real", "wm_only", "wmrl"])
    ap.add_argument("--steps", type=int, default=d.steps, help="GRPO steps per run")
    ap.add_argument("--groups-per-step", type=int, default=d.groups_per_step)
    ap.add_argument("--group-size", type=int, default=d.group_size, help="G rollouts per initial state")
    ap.add_argument("--lr", type=float, default=d.lr)
    ap.add_argument("--anchor-fraction", type=float, default=d.correction.anchor_fraction,
                    help="WMRL's share of anchor groups (the other correction settings: EmbodiedConfig.correction)")
    ap.add_argument("--success-threshold", type=float, default=d.success_threshold, help="metres")
    ap.add_argument("--n-demos", type=int, default=d.n_demos, help="noisy demonstrations for the warm start")
    ap.add_argument("--demo-noise", type=float, default=d.demo_noise)
    ap.add_argument("--wm-episodes", type=int, nargs=2, default=[d.wm_scripted_episodes, d.wm_policy_episodes],
                    metavar=("SCRIPTED", "POLICY"), help="offline episodes for the predictor")
    ap.add_argument("--wm-score", default=d.wm_score, choices=["success", "progress_delta", "progress_last"])
    ap.add_argument("--n-eval-states", type=int, default=d.n_eval_states)
    ap.add_argument("--eval-every", type=int, default=d.eval_every)
    ap.add_argument("--eval", choices=["deterministic", "sampled"], default="deterministic" if d.eval_deterministic else "sampled",
                    help="primary held-out metric (both are recorded)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    return ap


def main(argv: list[str] | None = None) -> dict:
    args = _parser().parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from agents.experiments.embodied import EmbodiedConfig, plot_curves, results_table, run_experiment

    d = EmbodiedConfig()
    cfg = dataclasses.replace(
        d,
        seeds=tuple(range(args.seeds)),
        methods=tuple(args.methods),
        steps=args.steps,
        groups_per_step=args.groups_per_step,
        group_size=args.group_size,
        lr=args.lr,
        correction=dataclasses.replace(d.correction, anchor_fraction=args.anchor_fraction),
        success_threshold=args.success_threshold,
        n_demos=args.n_demos,
        demo_noise=args.demo_noise,
        wm_scripted_episodes=args.wm_episodes[0],
        wm_policy_episodes=args.wm_episodes[1],
        wm_score=args.wm_score,
        n_eval_states=args.n_eval_states,
        eval_every=args.eval_every,
        eval_deterministic=args.eval == "deterministic",
    )
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results = run_experiment(cfg, progress=not args.no_progress)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    table = results_table(results)
    table += f"\nRuntime: {time.perf_counter() - t0:.0f} s ({len(cfg.seeds)} seeds × {len(cfg.methods)} methods).\n"
    (out / "table.md").write_text(table)
    plot_curves(results, str(out / "success_curves.png"))
    print(table)
    print(f"wrote {out / 'results.json'}, {out / 'table.md'}, {out / 'success_curves.png'}")
    return results


if __name__ == "__main__":
    main()
