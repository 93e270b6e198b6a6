"""Costs of a remote job: what the ledger, γ and the advisor count under each cost basis (issue 38, item 1).

The env of the issue's report: each execution spends ~0.03 CPU-s on this machine and then waits
0.17 s (a queued or remote job, a GPU queue, a paid API); the score is 1 - |a - 0.3| and the world
model sees it with noise (sd 0.25) and spends 0.003 CPU-s per prediction. The same GRPO loop (``AnchoredWorldModelWrapper.score_group``,
G = 4, ``anchor_fraction="auto"`` starting at 0.5, ``auto_min_groups`` 4) runs once per cost basis
(``CorrectionConfig.cost_basis`` = ``"cpu"``, ``"wall"``) and seed; per run it records the
execution cost per call, the world model's, γ measured by the adaptive fraction at the end of its
warm-up, and the advisor's f* and verdict at the end.

Run (the figures in docs/method.md, "Cost accounting")::

    .venv/bin/python benchmarks/remote_job_costs.py --seeds 2 --out results/remote_job_costs.json   # ~1 wall-minute
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.core import CorrectionConfig
from wmrl_envs.core.advisor import CostRates
from wmrl_envs.world_models.base import WorldModelPrediction

CPU_S, WAIT_S, TARGET = 0.03, 0.17, 0.3
WM_CPU_S, WM_NOISE = 0.003, 0.25


def _burn(cpu_s: float) -> None:
    t0 = time.process_time()
    x = 0.0
    while time.process_time() - t0 < cpu_s:
        x += 1.0


class RemoteJobEnv(gym.Env):
    """One step: ~``cpu_s`` CPU-seconds here, then a ``wait_s`` wait; score 1 - |a - TARGET|."""

    observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = spaces.Box(0.0, 1.0, (1,), np.float32)

    def __init__(self, cpu_s: float = CPU_S, wait_s: float = WAIT_S) -> None:
        self.cpu_s, self.wait_s = float(cpu_s), float(wait_s)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        _burn(self.cpu_s)
        time.sleep(self.wait_s)
        return np.zeros(1, np.float32), 1.0 - abs(float(action[0]) - TARGET), True, False, {}


class NoisyWM:
    """The real score plus noise (sd ``WM_NOISE``); ``WM_CPU_S`` CPU-seconds per prediction (a small local model)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def predict(self, contexts, actions):
        _burn(WM_CPU_S * len(actions))
        return [WorldModelPrediction(score=1.0 - abs(float(a[0]) - TARGET) + WM_NOISE * self.rng.normal())
                for a in actions]


def run(basis: str, seed: int, groups: int, g: int = 4) -> dict[str, Any]:
    cfg = CorrectionConfig(anchor_fraction="auto", auto_start_fraction=0.5, f_max=0.5, auto_min_groups=4,
                           cost_basis=basis)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anchor_fraction="auto" is experimental
        env = AnchoredWorldModelWrapper(RemoteJobEnv(), NoisyWM(seed), correction=cfg, group_size=g, seed=seed)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    for k in range(groups):
        env.score_group([rng.uniform(0, 1, 1).astype(np.float32) for _ in range(g)], seed=k)
    rates = CostRates.from_ledger(env.loop.ledger)
    advice = env.loop.advise()
    st = env.loop.stats()
    return {"basis": basis, "seed": seed, "groups": groups, "executions": st["executions"],
            "unit": rates.unit, "execution_cost_per_call": rates.execution_s, "world_model_cost_per_call": rates.world_model_s,
            "gamma_now": rates.gamma, "gamma_adaptive": env.loop.adaptive.gamma, "r": st["r"],
            "f_star": advice.f_star, "recommended_fraction": advice.recommended_fraction,
            "predicted_speedup": advice.predicted_speedup, "verdict": advice.verdict,
            "world_model_cost_share": st["world_model_cost_share"], "wall_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--out", type=Path, default=Path("results/remote_job_costs.json"))
    args = ap.parse_args()
    rows = [run(basis, seed, args.groups) for seed in range(args.seeds) for basis in ("cpu", "wall")]
    for r in rows:
        print(f"{r['basis']:4s} seed {r['seed']}: execution {r['execution_cost_per_call']:.4f} {r['unit']}/call, "
              f"world model {r['world_model_cost_per_call']:.2e}, gamma (adaptive) {r['gamma_adaptive']:.4g}, "
              f"r {r['r']:.2f}, f* {r['f_star']:.3f}, speedup {r['predicted_speedup']:.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"settings": {"cpu_s": CPU_S, "wait_s": WAIT_S, "groups": args.groups,
                                                 "seeds": args.seeds, "group_size": 4,
                                                 "wm_cpu_s": WM_CPU_S, "wm_noise": WM_NOISE}, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
