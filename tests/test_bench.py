"""The benchmark harness's logic on fake, instant components (the real run is in
tests/test_bench_e2e.py): routing per method, compute budgets, snapshot selection, the table."""

from __future__ import annotations

import threading
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest

from agents.experiments.bench import METHODS, BenchConfig, format_table, method_correction, run_bench
from wmrl_envs.world_models.base import WorldModelPrediction


class FakeClock:
    """Stands in for ``agents.experiments.bench``'s ``time`` module: its seconds pass only when a FakeEnv
    executes (2 ms per step), so the compute budgets do not depend on the machine's load."""

    TICK = 0.002

    def __init__(self):
        self.ticks = 0
        self._lock = threading.Lock()  # the bench may run executions on two threads

    def advance(self):
        with self._lock:
            self.ticks += 1

    def perf_counter(self):
        return self.ticks * self.TICK


CLOCK = FakeClock()


@pytest.fixture
def fake_clock(monkeypatch):
    import agents.experiments.bench

    CLOCK.ticks = 0
    monkeypatch.setattr(agents.experiments.bench, "time", CLOCK)
    return CLOCK


class FakeEnv(gym.Env):
    """Action = a number as text; real score = that number; each step costs 2 ms of FakeClock time."""

    observation_space = gym.spaces.Discrete(1)
    action_space = gym.spaces.Text(16)
    steps = 0

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        CLOCK.advance()
        FakeEnv.steps += 1
        return 0, float(action), True, False, {}


class FakeWM:
    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=float(a) ** 2) for a in actions]


class FakeAgent:
    def __init__(self, seed):
        self.mu = 0.2
        self.rng = np.random.default_rng(seed)

    def sample(self, task_ids, group_size):
        acts = [[f"{np.clip(self.rng.normal(self.mu, 0.2), 0, 1):.3f}" for _ in range(group_size)] for _ in task_ids]
        flat = [float(a) for g in acts for a in g]
        return acts, flat

    def update(self, handle, rows, adv):
        self.mu += 0.05 * float(np.sum([handle[i] * a for i, a in zip(rows, adv)]))
        return {}

    def snapshot(self):
        return self.mu

    def restore(self, snap):
        self.mu = snap


EVAL_SEEDS = []


def fake_eval(agent, snap, tasks, k, sandbox, parallel, eval_seed=None):
    EVAL_SEEDS.append(eval_seed)
    return {"overall": 100 * snap, "per_category": {"a": 100 * snap, "b": 50 * snap}, "per_task": {}}


def test_run_bench_routing_budgets_and_table(tmp_path, fake_clock):
    cfg = BenchConfig(methods=("real", "wmrl", "wm_only", "anchors_raw"), seeds=2, steps=4, max_steps_factor=3,
                      groups_per_step=5, group_size=4, correction=replace(BenchConfig().correction, anchor_fraction=0.2),
                      out_dir=str(tmp_path))
    FakeEnv.steps = 0
    EVAL_SEEDS.clear()
    res = run_bench(cfg, make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1", "t2"],
                    heldout_tasks=["h"], sandbox=None, evaluate=fake_eval, log=lambda s: None)
    from wmrl_envs.envs.autoresearch.secret import secret_fingerprint
    assert res["task_secret"] == {"fingerprint": secret_fingerprint(), "reference": True}  # conftest's
    for seed in res["methods"]["real"]["seeds"]:
        rec = seed["records"]
        assert len(rec) == 4  # real runs exactly S steps
        assert rec[-1]["executions"] == 4 * 5 * 4  # a real execution for every rollout
        # compute = executed steps x 2 ms: 20 rollouts per step -> 0.04 s per step, budget 0.16 s
        assert [r["compute_s"] for r in rec] == pytest.approx([0.04, 0.08, 0.12, 0.16])
        # at WMRL's budget (0.032 s) not even one real step fits: the initial policy
        assert seed["snapshot"] == {"steps": 4, "compute_real": 4, "compute_wmrl": 0}
    assert FakeEnv.steps == fake_clock.ticks  # every tick of compute is one real execution
    for name in ("wmrl", "anchors_raw"):
        for seed in res["methods"][name]["seeds"]:
            rec = seed["records"]
            # one anchor group of 5 per step (0.2 * 5 = 1): executions = anchor groups * G
            assert all(r["anchor_groups"] == r["step"] for r in rec)
            assert rec[-1]["executions"] == 4 * rec[-1]["anchor_groups"]
            # 4 executions = 0.008 s per step: 12 steps (the cap, 3 x S) cost 0.096 s < 0.16 s
            assert [r["compute_s"] for r in rec] == pytest.approx([0.008 * i for i in range(1, 13)])
            assert seed["snapshot"] == {"steps": 4, "compute_wmrl": 4, "compute_real": 12}
    for seed in res["methods"]["wm_only"]["seeds"]:
        assert seed["records"][-1]["executions"] == 0 and len(seed["records"]) == 12  # capped at 3 x S
        assert all(r["compute_s"] == 0.0 for r in seed["records"])  # no execution: no FakeClock time
        assert seed["snapshot"] == {"steps": 4, "compute_wmrl": 12, "compute_real": 12}
    table = (tmp_path / "table.md").read_text()
    for m in cfg.methods:
        assert METHODS[m].label in table
    # method 1 is the unit of compute at the equal-steps and its own equal-compute point
    # (at WMRL's budget it is evaluated at an earlier, cheaper snapshot)
    steps_t, wmrl_t, real_t = table.split("### ")[1:]
    assert "| GRPO, real execution | 1.00 |" in steps_t and "| GRPO, real execution | 1.00 |" in real_t
    assert (tmp_path / "score_vs_compute.png").exists() and (tmp_path / "rho_calibration.png").exists()
    assert format_table(res, "steps").count("\n") == 2 + len(cfg.methods)
    # every evaluation of one bench seed draws the same random numbers, seeds differ
    assert len(set(EVAL_SEEDS)) == 2 and None not in EVAL_SEEDS


def test_rho_mode_reaches_the_denoiser():
    from agents.experiments.bench import run_method

    seen = {}
    for mode in ("calibrated", "parameter_free"):
        correction = replace(BenchConfig().correction, anchor_fraction=0.34, warmup_groups=1, rho_mode=mode)
        cfg = BenchConfig(steps=3, groups_per_step=3, group_size=4, correction=correction)
        run = run_method(METHODS["wmrl"], 0, cfg, FakeAgent, FakeEnv, FakeWM(), ["t1"], max_steps=3)
        seen[mode] = [r.rho for r in run.records]
    # parameter-free: ρ = 1 + s̄² (c = 1) stays near 1 for a good world model; calibrated starts at rho_target
    assert seen["calibrated"][0] == pytest.approx(2.0)
    assert all(1.0 <= r < 1.6 for r in seen["parameter_free"])


def test_bench_config_nests_one_correction_config_with_unprefixed_flags():
    import tyro

    from wmrl_envs.core.config import CorrectionConfig

    default = BenchConfig().correction
    assert default == CorrectionConfig(min_pairs=16, refit_every=8, warmup_groups=3, half_life=16.0)
    cfg = tyro.cli(BenchConfig, args=["--anchor-fraction", "0.25", "--min-pairs", "4", "--disagreement-floor", "0.02",
                                      "--num-iterations", "2"])
    assert (cfg.correction.anchor_fraction, cfg.correction.min_pairs, cfg.correction.disagreement_floor) == (0.25, 4, 0.02)
    assert cfg.correction.half_life == 16.0 and cfg.num_iterations == 2
    # each method puts its own route share, debias and denoise on top of the configured settings
    wmrl, real, wm_only = (method_correction(METHODS[m], cfg.correction) for m in ("wmrl", "real", "wm_only"))
    assert (wmrl.anchor_fraction, wmrl.min_anchor_groups, wmrl.debias, wmrl.denoise) == (0.25, 1, True, True)
    assert (real.anchor_fraction, real.debias, real.denoise) == (1.0, False, False)
    assert (wm_only.anchor_fraction, wm_only.min_anchor_groups) == (0.0, 0)
    assert wmrl.min_pairs == real.min_pairs == 4 and wmrl.disagreement_floor == 0.02
    built = wmrl.build_corrector()
    assert built.debiaser.min_pairs == 4 and built.denoiser.half_life == 16.0


def test_grammar_agent_reseed_gives_common_random_numbers():
    from agents.experiments.bench import GrammarBenchAgent

    a = GrammarBenchAgent(seed=0)
    snap = a.snapshot()
    a.sample(["digits-shifted"], 8)  # advance the stream
    a.restore(snap)
    a.reseed(123)
    first, _ = a.sample(["digits-shifted"], 8)
    b = GrammarBenchAgent(seed=5)
    b.restore(snap)
    b.reseed(123)
    assert b.sample(["digits-shifted"], 8)[0] == first
    b.reseed(124)
    assert b.sample(["digits-shifted"], 8)[0] != first


def test_unknown_method():
    with pytest.raises(ValueError, match="unknown methods"):
        run_bench(BenchConfig(methods=("nope",)), make_agent=FakeAgent, make_env=FakeEnv, world_model=None,
                  train_tasks=["t"], heldout_tasks=["h"], sandbox=None)
