"""A world model that learns from its anchors, from a cold start, with ``anchor_fraction="auto"`` (issue 27, item 1).

On the known-truth env (:class:`~wmrl_envs.envs.known_truth.KnownTruthEnv`, 6 tasks x 24
actions, outcome noise 0.1) a :class:`~wmrl_envs.world_models.learned.LearnedWorldModel` with
the (task, action) one-hot as features and a ridge head starts with no data and learns from the
anchor groups only (refit after every anchor group, pairs and advisor groups rescored out of
fold). The policy is fixed (uniform), so what changes is the world model alone. Beside it, two
frozen world models of the same env bound the behaviour of ``auto``: a useless one (no
information, noise 0.25) and a perfect one (the expected score).

Per seed (10 groups of G = 8 per step, the router's floor of one anchor group per step, ``f_min``
0.05, ``f_max`` 0.5, γ = ``--cost-ratio``, default 0.01, given): the share of groups executed for real, the within-group r of the learned model's predictions *at routing* (out of sample)
over consecutive blocks of anchor groups, and the anchor fraction ``auto`` set at each step.
Printed: median and 5-95% range over seeds. Run:

    OMP_NUM_THREADS=1 python benchmarks/learned_cold_start.py --seeds 10 --steps 40

(about 6 s per seed on one core). ``--out FILE`` writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np
from sklearn.linear_model import Ridge

from wmrl_envs.core import CorrectionConfig, CorrectionLoop
from wmrl_envs.core.advisor import pooled_within_group_correlation
from wmrl_envs.envs.known_truth import KnownTruthEnv, KnownTruthWorldModel, WorldModelError
from wmrl_envs.world_models.learned import CallableFeaturizer, LearnedWorldModel

G = 8
GROUPS_PER_STEP = 10
BLOCK = 6  # anchor groups per block of r at routing


def one_hot(env: KnownTruthEnv) -> CallableFeaturizer:
    def f(task, action):
        v = np.zeros(env.n_tasks * env.n_actions, np.float32)
        v[int(task) * env.n_actions + int(action)] = 1.0
        return v

    return CallableFeaturizer(f)


def run(kind: str, seed: int, steps: int, cost_ratio: float = 0.01) -> dict:
    env = KnownTruthEnv(n_tasks=6, n_actions=24, outcome_noise_std=0.1, table_seed=seed)
    if kind == "learned":
        wm = LearnedWorldModel(one_hot(env), head=Ridge(alpha=1.0), refit_every=1, folds=5)
    elif kind == "useless":
        wm = KnownTruthWorldModel(env, WorldModelError(information=0.0, noise_std=0.25), seed=seed)
    else:
        wm = KnownTruthWorldModel(env, WorldModelError(), seed=seed)
    cfg = CorrectionConfig(anchor_fraction="auto", cost_ratio=cost_ratio, auto_start_fraction=0.25, f_min=0.05, f_max=0.5,
                           auto_min_groups=6, auto_window=12, min_pairs=64, refit_every=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loop = CorrectionLoop(cfg, world_model=wm, seed=seed, groups_per_step=GROUPS_PER_STEP)
    rng = np.random.default_rng([seed, 2027])
    raw_a, real_a = [], []
    anchors_per_step = []
    t0 = time.process_time()
    for _ in range(steps):
        anchors_per_step.append(loop.plan_step().count("anchor"))
        for _ in range(GROUPS_PER_STEP):
            task = int(rng.integers(env.n_tasks))
            actions = rng.integers(env.n_actions, size=G)
            real = env.sample_outcomes(np.full(G, task), actions, rng).tolist()
            preds = loop.predict([task] * G, actions.tolist())
            ticket = loop.open_group()
            raw = [p.score for p in preds]
            loop.close_group(ticket, raw, real if ticket.route == "anchor" else None, actions=actions.tolist(),
                             contexts=[task] * G)
            if ticket.route == "anchor":
                loop.record_execution(0.0, G, cpu_seconds=float(G))
                raw_a.append(raw)
                real_a.append(real)
    blocks = []
    for k in range(0, len(raw_a) - BLOCK + 1, BLOCK):
        r, _ = pooled_within_group_correlation(raw_a[k:k + BLOCK], real_a[k:k + BLOCK])
        blocks.append(0.0 if not np.isfinite(r) else r)  # a constant (cold) prediction carries no signal
    fractions = [f for _, f, _ in loop.adaptive.history]
    return {"r_blocks": blocks, "fractions": fractions, "anchor_groups": len(raw_a), "anchors_per_step": anchors_per_step,
            "learn_cpu_s": float(loop.ledger.cpu_seconds("world_model")), "cpu_s": time.process_time() - t0}


def q(a: list[float]) -> str:
    a = np.asarray(a, dtype=float)
    return f"{np.median(a):.2f} [{np.percentile(a, 5):.2f}, {np.percentile(a, 95):.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--cost-ratio", type=float, default=0.01, help="gamma given to auto")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out: dict = {"seeds": args.seeds, "steps": args.steps, "cost_ratio": args.cost_ratio, "groups_per_step": GROUPS_PER_STEP, "G": G, "kinds": {}}
    show_steps = [s for s in (2, 4, 6, 8, 10, 15, 20, 30, args.steps - 1) if s < args.steps]
    for kind in ("learned", "useless", "perfect"):
        runs = [run(kind, s, args.steps, args.cost_ratio) for s in range(args.seeds)]
        n_blocks = min(len(r["r_blocks"]) for r in runs)
        out["kinds"][kind] = runs
        print(f"== {kind} world model ({args.seeds} seeds; median [5%, 95%])")
        print(f"  anchor groups: {q([r['anchor_groups'] for r in runs])}; world-model CPU-s charged (predictions + "
              f"learning): {q([r['learn_cpu_s'] for r in runs])}")
        if kind == "learned":
            print(f"  r at routing over blocks of {BLOCK} anchor groups:")
            for b in range(n_blocks):
                print(f"    anchor groups {b * BLOCK:3d}-{b * BLOCK + BLOCK - 1:3d}: r = "
                      f"{q([r['r_blocks'][b] for r in runs])}")
        spans = [(0, 5), (5, 10), (10, 20), (20, args.steps)]
        print("  share of groups executed for real (anchors), steps " + "; ".join(
            f"{a}-{b - 1}: {q([np.sum(r['anchors_per_step'][a:b]) / (GROUPS_PER_STEP * (b - a)) for r in runs])}"
            for a, b in spans if b <= args.steps))
        print("  anchor fraction set by auto at step: " + "; ".join(
            f"{s}: {q([r['fractions'][s] for r in runs])}" for s in show_steps))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main()
