"""Train Stable-Baselines3 PPO on a WMRL-anchored vector env, save and reload the corrections.

The expensive env is ``wmrl/Guess-v0`` with a declared execution cost
(``--execution-cost-s``: CPU-seconds each real execution reports in ``info["execution_cpu_s"]``;
nothing sleeps); the world model is :class:`~wmrl_envs.world_models.synthetic.SyntheticWorldModel`,
which predicts the real score with a known non-affine bias (``score³``) and noise, so the
isotonic debiaser has something to undo — and under PPO, which has no per-group
normalisation, the whole calibrated map ``f̂`` matters. A share of each sub-env's episode
groups is executed for real (anchors); :class:`agents.adapters.sb3.AnchorWeightCallback`
multiplies the GAE advantages of anchor steps by ρ (see :mod:`agents.adapters.sb3`,
"How ρ reaches PPO"). The correction state is saved beside the model like ``VecNormalize``
statistics and reloaded for a real-execution evaluation with ``training=False``.

Run (a few seconds)::

    .venv/bin/python examples/sb3_ppo.py --total-timesteps 4096

Writes ``<output-dir>/ppo.zip`` and ``<output-dir>/wmrl_state.json``, prints routing counts,
ρ, calibration error, costs and the evaluation return (mean real score of the deterministic
policy, in [0, 1]).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import tyro

from wmrl_envs.core import CorrectionConfig


@dataclass
class Args:
    """Settings of the example (every field is a flag: ``--total-timesteps 4096``)."""

    total_timesteps: int = 4096
    """PPO environment steps (one step = one Guess episode)."""
    n_envs: int = 4
    """Sub-envs of the DummyVecEnv."""
    n_steps: int = 64
    """PPO rollout length per sub-env."""
    group_size: int = 8
    """Consecutive episodes of one sub-env routed together (one group)."""
    noise_std: float = 0.05
    """Noise of the synthetic world model (score units)."""
    execution_cost_s: float | None = None
    """CPU-seconds each real execution declares (info["execution_cpu_s"]; the step is instant);
    None: none declared, the CPU measured around the step is charged."""
    correction: Annotated[CorrectionConfig, tyro.conf.OmitArgPrefixes] = CorrectionConfig(
        anchor_fraction=0.1, min_pairs=32, refit_every=16, warmup_groups=4
    )
    """Anchor schedule, debiaser and denoiser (flags --anchor-fraction, --min-pairs, ...; short runs
    need fewer pairs and a shorter warm-up than the reference 200 / 32)."""
    normalize_advantage: bool = False
    """PPO's per-minibatch advantage standardisation (False: anchor steps get exactly ρ × A)."""
    eval_episodes: int = 32
    """Evaluation episodes (real execution, corrections frozen)."""
    output_dir: str = "runs/sb3-ppo"
    """Where ppo.zip and wmrl_state.json are written."""
    seed: int = 0
    """Seed of PPO, the routers and the world model."""


def make_venv(args: Args) -> Any:
    """The anchored vector env of this example (same arguments every time, so states load)."""
    from agents.adapters.sb3 import make_anchored_vec_env
    from wmrl_envs.envs.guess import GuessEnv, guess_score
    from wmrl_envs.world_models.synthetic import SyntheticWorldModel

    world_model = SyntheticWorldModel(guess_score, bias=lambda s: s**3, noise_std=args.noise_std, seed=args.seed)
    return make_anchored_vec_env(
        lambda: GuessEnv(execution_cost_s=args.execution_cost_s), world_model, n_envs=args.n_envs, seed=args.seed,
        group_size=args.group_size, correction=args.correction,
    )


def build(args: Args) -> dict[str, Any]:
    """Build the vector env, PPO and the ρ callback.

    Returns:
        ``{"venv", "model", "callback"}``.
    """
    import torch
    from stable_baselines3 import PPO

    from agents.adapters.sb3 import AnchorWeightCallback

    torch.set_num_threads(1)
    venv = make_venv(args)
    model = PPO("MlpPolicy", venv, n_steps=args.n_steps, batch_size=args.n_steps * args.n_envs // 2, n_epochs=4,
                learning_rate=3e-3, normalize_advantage=args.normalize_advantage, seed=args.seed, device="cpu")
    return {"venv": venv, "model": model, "callback": AnchorWeightCallback()}


def main(args: Args) -> dict[str, Any]:
    """Train, save model + correction state, reload both, evaluate on real execution; return the summary."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy

    from agents.adapters.sb3 import AnchoredVecEnv

    parts = build(args)
    venv, model = parts["venv"], parts["model"]
    t0 = time.perf_counter()
    model.learn(args.total_timesteps, callback=parts["callback"])
    seconds = time.perf_counter() - t0
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save(out_dir / "ppo.zip")
    venv.save(out_dir / "wmrl_state.json")  # beside the model, like VecNormalize statistics

    eval_venv = AnchoredVecEnv.load(out_dir / "wmrl_state.json", make_venv(args))
    eval_venv.training = False  # frozen corrections, every episode executed for real
    loaded = PPO.load(out_dir / "ppo.zip", env=eval_venv, device="cpu")
    mean_return, std_return = evaluate_policy(loaded, eval_venv, n_eval_episodes=args.eval_episodes, deterministic=True)
    summary = {"train_seconds": seconds, **venv.stats(), "eval_mean_real_score": float(mean_return),
               "eval_std_real_score": float(std_return)}
    print(json.dumps(summary, indent=2, default=str))
    return summary


if __name__ == "__main__":
    main(tyro.cli(Args))
