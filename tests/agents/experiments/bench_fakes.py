"""Fake, instant components of the benchmark harness's tests (imported as ``bench_fakes``: pytest
puts each test folder on ``sys.path``): an env whose action is its score and whose every execution
declares 20 CPU-seconds, a world model, a one-parameter GRPO policy and agent, an evaluation, and
``_bench``, a small ``run_bench`` over them.
"""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np
import torch

from agents.experiments.bench import run_bench
from agents.experiments.bench_config import BenchConfig
from agents.grpo import GRPOUpdateConfig
from wmrl_envs.world_models.base import WorldModelPrediction

__all__ = [
    "FakeEnv",
    "FakeWM",
    "FakePolicy",
    "SumStep",
    "FakeAgent",
    "EVAL_SEEDS",
    "fake_eval",
    "UnmeasuredEnv",
    "_bench",
    "fake_config",
    "run_kw",
    "grading_best_of_k",
    "_learned_wm",
]

class FakeEnv(gym.Env):
    """Action = a number as text; real score = that number; each execution DECLARES 20 CPU-seconds
    (``info["execution_cpu_s"]``), so the compute budgets are exact and do not depend on load (the
    agent's own generation/update CPU, measured, is far below a second)."""

    observation_space = gym.spaces.Discrete(1)
    action_space = gym.spaces.Text(16)
    steps = 0
    CPU_S = 20.0

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        FakeEnv.steps += 1
        return 0, float(action), True, False, {"execution_cpu_s": self.CPU_S}


class FakeWM:
    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=float(a) ** 2) for a in actions]


class FakePolicy:
    """A :class:`agents.grpo.GRPOPolicy` with one parameter ``mu``: row i's one-token log-prob is
    ``mu * h_i`` (``h_i`` the sampled value), so the GRPO step's gradient is ``-mean_i(A_i h_i)``."""

    def __init__(self):
        self.mu = torch.nn.Parameter(torch.tensor(0.2, dtype=torch.float64))
        self.n_rows = 0

    def grpo_logprobs(self, samples, rows, *, reference=False, with_entropy=False):
        h = torch.as_tensor([samples[int(i)] for i in rows], dtype=torch.float64)
        self.n_rows = len(h)
        return (self.mu * h).reshape(-1, 1), torch.ones(len(h), 1, dtype=torch.float64), None

    def trainable_parameters(self):
        return [self.mu]


class SumStep:
    """The optimiser of :class:`FakeAgent`: ``mu += 0.05 * sum_i(A_i h_i)`` (the mean gradient times the rows)."""

    def __init__(self, policy):
        self.policy = policy

    def zero_grad(self, set_to_none=True):
        self.policy.mu.grad = None

    def step(self):
        with torch.no_grad():
            self.policy.mu -= 0.05 * self.policy.n_rows * self.policy.mu.grad


class FakeAgent:
    def __init__(self, seed):
        self.policy = FakePolicy()
        self.optimizer = SumStep(self.policy)
        self.update_config = GRPOUpdateConfig(max_grad_norm=None)
        self.rng = np.random.default_rng(seed)

    @property
    def mu(self):
        return float(self.policy.mu.detach())

    def sample(self, task_ids, group_size):
        acts = [[f"{np.clip(self.rng.normal(self.mu, 0.2), 0, 1):.3f}" for _ in range(group_size)] for _ in task_ids]
        flat = [float(a) for g in acts for a in g]
        return acts, flat

    def snapshot(self):
        return self.mu

    def restore(self, snap):
        with torch.no_grad():
            self.policy.mu.fill_(snap)


EVAL_SEEDS = []


def fake_eval(agent, snap, tasks, k, sandbox, parallel, eval_seed=None):
    EVAL_SEEDS.append(eval_seed)
    return {"overall": 100 * snap, "per_category": {"a": 100 * snap, "b": 50 * snap}, "per_task": {}}


class UnmeasuredEnv(FakeEnv):
    """An env whose executions have no CPU figure (``info["execution_cpu_s"] = None``)."""

    def step(self, action):
        FakeEnv.steps += 1
        return 0, float(action), True, False, {"execution_cpu_s": None}


def fake_config(**kw):
    """The ``BenchConfig`` of a fake run: real GRPO and WMRL, 2 seeds, 5 groups of 4 rollouts a step,
    anchor fraction 0.2, 3 evaluation points; ``kw`` overrides or adds any field."""
    settings = dict(methods=("real", "wmrl"), seeds=2, groups_per_step=5, group_size=4,
                    correction=replace(BenchConfig().correction, anchor_fraction=0.2))
    return BenchConfig(**{**settings, **kw})


def run_kw(**kw):
    """The keyword arguments of ``run_bench`` over the fakes: one train task ``t1``, one held-out task
    ``h``, no sandbox, :func:`fake_eval`, no log; ``kw`` overrides any of them."""
    fakes = dict(make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1"], heldout_tasks=["h"],
                 sandbox=None, evaluate=fake_eval, log=lambda s: None)
    return {**fakes, **kw}


def _bench(tmp_path, env=FakeEnv, evaluate=None, **kw):
    cfg = fake_config(**{"steps": 4, "max_steps_factor": 3, "refine_evals": 2, "out_dir": str(tmp_path), **kw})
    res = run_bench(cfg, **run_kw(make_env=env, train_tasks=["t1", "t2"], evaluate=evaluate or fake_eval))
    return res, (tmp_path / "table.md").read_text()


def grading_best_of_k(xs, k):
    from agents.train.evaluation import expected_best_of_k

    return expected_best_of_k(xs, k)


def _learned_wm(seed):
    from wmrl_envs.world_models.learned import CallableFeaturizer, LearnedWorldModel

    return LearnedWorldModel(CallableFeaturizer(lambda c, a: [float(a), float(a) ** 2]), min_groups=1, refit_every=1)
