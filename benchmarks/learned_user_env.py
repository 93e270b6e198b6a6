"""A user's own small environment and the learned world model (issue 35, item 7).

The environment a new user brings: tune 3 hyper-parameters of a scikit-learn classifier —
``SVC(C=10**a0, gamma=10**a1, class_weight={1: 2**a2})`` on scikit-learn's bundled breast-cancer
data (standardised) — whose score is the 3-fold cross-validated accuracy plus Gaussian noise
(``--noise``, default 0.08): a landscape with a plateau and cliffs, peaked inside the action
space (class weight), about 0.02-0.03 CPU-s per execution. The world model is
:class:`~wmrl_envs.world_models.learned.LearnedWorldModel` on a
:class:`~wmrl_envs.world_models.learned.CallableFeaturizer` returning the hyper-parameters as
used (the action clipped to its ranges: what a user would write), refitted from the anchor
groups, its CPU budget bound to the loop's ledger (``cpu_share`` 0.10).

A GRPO-like loop: a Gaussian policy over the 3 actions (mean from (-1, -3.5, 2.5), fixed
standard deviation ``--policy-std`` 1.0, a step of ``--lr`` 0.1 along the group-normalised
advantages) samples groups of G = 8; each is scored through
``AnchoredWorldModelWrapper.score_group`` (``anchor_fraction`` ``--fraction``, default 0.25), and
the policy moves on the group's training rewards (real on anchor groups, calibrated world-model
scores otherwise), ``--groups`` 300 groups per seed.

Per seed, over the training anchor groups (those with a real outcome):

* ``r``: the pooled within-group correlation of the world model's predictions *at routing*
  (made before the group's outcome was known) with the real noisy scores;
* ``ceiling``: the same correlation of the *noiseless* score (the accuracy itself, which no
  model can beat on average) with the noisy one: what the noise allows;
* ``cpu_share``: the ledger's world-model CPU-seconds (predictions, learning, rescoring) over
  its execution CPU-seconds;

for the learned model as shipped (``head="auto"``, ``cpu_share=0.10``) and, beside it, the
ridge head with a refit after every anchor group and no budget (the model before issue 35).
The CPU-seconds are measured (process CPU time), so the budget's decisions, and with them the
figures, vary a little from run to run and with the machine's load. Run from the repository
root (about 35 CPU-s per seed and variant, one core):

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/learned_user_env.py --seeds 5

writes ``results/learned_user_env.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings
from functools import lru_cache

import gymnasium as gym
import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.core import CorrectionConfig
from wmrl_envs.core.advisor import pooled_within_group_correlation
from wmrl_envs.world_models.learned import CallableFeaturizer, LearnedWorldModel, default_head

G = 8
LOW = np.array([-3.0, -5.0, -5.0])  # log10 C, log10 gamma, log2 class weight of the positive class
HIGH = np.array([3.0, 1.0, 5.0])
START = np.array([-1.0, -3.5, 2.5])


@lru_cache(maxsize=1)
def _data() -> tuple[np.ndarray, np.ndarray]:
    x, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(x), y


def hyper_parameters(action: np.ndarray) -> np.ndarray:
    """The action clipped to the hyper-parameters' ranges (float (3,))."""
    return np.clip(np.asarray(action, dtype=np.float64).reshape(3), LOW, HIGH)


def accuracy(action: np.ndarray) -> float:
    """3-fold cross-validated accuracy of the SVC the action configures (deterministic)."""
    c, g, w = hyper_parameters(action)
    x, y = _data()
    clf = SVC(C=10.0 ** c, gamma=10.0 ** g, class_weight={0: 1.0, 1: 2.0 ** w})
    return float(cross_val_score(clf, x, y, cv=StratifiedKFold(3, shuffle=True, random_state=0)).mean())


class ClassifierTuningEnv(gym.Env):
    """One step: the action (3 floats) configures the classifier; reward = its cross-validated
    accuracy + N(0, ``noise``²) (from the env's ``np_random``); ``info["noiseless_score"]`` is
    the accuracy itself. The observation is a constant (one task)."""

    observation_space = gym.spaces.Box(0.0, 0.0, shape=(1,))
    action_space = gym.spaces.Box(-10.0, 10.0, shape=(3,))

    def __init__(self, noise: float = 0.08) -> None:
        self.noise = float(noise)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        acc = accuracy(action)
        reward = acc + self.noise * float(self.np_random.normal())
        return np.zeros(1, np.float32), reward, True, False, {"noiseless_score": acc}


def featurizer() -> CallableFeaturizer:
    """The user's featurizer: the hyper-parameters as used."""
    return CallableFeaturizer(lambda context, action: hyper_parameters(action), dim=3)


def run(variant: str, seed: int, groups: int, noise: float, fraction: float, lr: float, policy_std: float) -> dict:
    if variant == "auto":
        wm = LearnedWorldModel(featurizer())  # head="auto", cpu_share=0.10, min_groups=2, refit_every=1
    else:  # the model before issue 35: a ridge head, a refit after every anchor group, no budget
        wm = LearnedWorldModel(featurizer(), head=default_head())
    env = AnchoredWorldModelWrapper(ClassifierTuningEnv(noise), wm, group_size=G,
                                    correction=CorrectionConfig(anchor_fraction=fraction), seed=seed)
    if variant == "auto":
        wm.bind_execution_cost(env.loop.ledger)
    rng = np.random.default_rng([seed, 35])
    mu = START.copy()
    pred, real, clean = [], [], []
    t0 = time.process_time()
    for k in range(groups):
        actions = mu + policy_std * rng.normal(size=(G, 3))
        out = env.score_group([a for a in actions], seed=seed * 100_000 + k)
        rewards = np.array([np.nan if r is None else r for r in out.rewards], dtype=np.float64)
        if out.route == "anchor" and out.predictions:
            pred.append([p.score for p in out.predictions])
            real.append(rewards.tolist())
            clean.append([i["noiseless_score"] for i in out.infos])
        ok = np.isfinite(rewards)
        if ok.sum() >= 2 and np.std(rewards[ok]) > 0:
            adv = (rewards[ok] - rewards[ok].mean()) / rewards[ok].std()
            mu = mu + lr * (adv[:, None] * (actions[ok] - mu)).mean(axis=0) / policy_std
    ledger = env.loop.ledger
    r, n = pooled_within_group_correlation(pred, real)
    ceiling, _ = pooled_within_group_correlation(clean, real)
    half = len(pred) // 2
    r2, _ = pooled_within_group_correlation(pred[half:], real[half:])
    c2, _ = pooled_within_group_correlation(clean[half:], real[half:])
    wm_cpu, ex_cpu = ledger.cpu_seconds("world_model"), ledger.cpu_seconds("execution")
    return {"variant": variant, "seed": seed, "anchor_groups": n, "r": r, "ceiling": ceiling,
            "r_over_ceiling": r / ceiling, "r_second_half": r2, "ceiling_second_half": c2,
            "world_model_cpu_s": wm_cpu, "execution_cpu_s": ex_cpu, "cpu_share": wm_cpu / ex_cpu,
            "world_model_predictions": ledger.count("world_model"), "executions": ledger.count("execution"),
            "summary": wm.summary(), "final_policy_mean": mu.tolist(),
            "final_accuracy": accuracy(mu), "run_cpu_s": time.process_time() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--groups", type=int, default=300)
    ap.add_argument("--noise", type=float, default=0.08, help="SD of the Gaussian noise added to the accuracy")
    ap.add_argument("--fraction", type=float, default=0.25, help="anchor_fraction")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--policy-std", type=float, default=1.0)
    ap.add_argument("--variants", default="auto,ridge")
    ap.add_argument("--out", default="results/learned_user_env.json")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    out: dict = {"settings": vars(args), "G": G, "python": platform.python_version(), "runs": []}
    for variant in args.variants.split(","):
        rows = []
        for seed in range(args.seeds):
            row = run(variant, seed, args.groups, args.noise, args.fraction, args.lr, args.policy_std)
            rows.append(row)
            s = row["summary"]
            print(f"{variant:5s} seed {seed}: r {row['r']:.3f} ceiling {row['ceiling']:.3f} "
                  f"({row['r_over_ceiling']:.0%}); second half r {row['r_second_half']:.3f} of "
                  f"{row['ceiling_second_half']:.3f}; world-model CPU {row['world_model_cpu_s']:.2f} s / execution "
                  f"{row['execution_cpu_s']:.2f} s = {row['cpu_share']:.1%}; head {s['head']} "
                  f"(refits {s['n_refits']}, selections {s['n_selections']}, deferred {s['refits_deferred']}); "
                  f"{row['anchor_groups']} anchor groups; final accuracy {row['final_accuracy']:.3f}", flush=True)
        out["runs"] += rows
        ratio = np.array([r["r_over_ceiling"] for r in rows])
        share = np.array([r["cpu_share"] for r in rows])
        print(f"== {variant}: r / ceiling median {np.median(ratio):.0%} [min {ratio.min():.0%}, max {ratio.max():.0%}]; "
              f"world-model CPU / execution median {np.median(share):.1%} [max {share.max():.1%}]")
        out[variant] = {"r_over_ceiling_median": float(np.median(ratio)), "r_over_ceiling_min": float(ratio.min()),
                        "cpu_share_median": float(np.median(share)), "cpu_share_max": float(share.max())}
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1, allow_nan=False)


if __name__ == "__main__":
    main()
