"""The benchmark harness's logic on fake, instant components (the real run is in
tests/agents/experiments/test_bench_e2e.py): routing per method, compute budgets, snapshot selection, the table."""

from __future__ import annotations

import json
from pathlib import Path
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
import torch

from agents.experiments.bench import run_bench
from agents.experiments.bench_config import BenchConfig
from agents.experiments.bench_report import format_table
from agents.experiments.bench_resume import reused_entries
from agents.experiments.methods import METHODS, method_correction
from agents.grpo import GRPOUpdateConfig
from wmrl_envs.world_models.base import WorldModelPrediction


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
        return float(self.policy.mu)

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


def test_run_bench_routing_budgets_and_table(tmp_path):
    cfg = BenchConfig(methods=("real", "wmrl", "wm_only", "anchors_raw"), seeds=2, steps=4, max_steps_factor=3,
                      groups_per_step=5, group_size=4, correction=replace(BenchConfig().correction, anchor_fraction=0.2),
                      eval_points=3, refine_evals=2, out_dir=str(tmp_path))
    FakeEnv.steps = 0
    EVAL_SEEDS.clear()
    res = run_bench(cfg, make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1", "t2"],
                    heldout_tasks=["h"], sandbox=None, evaluate=fake_eval, log=lambda s: None, fitting_cpu_s=500.0)
    from wmrl_envs.envs.autoresearch.secret import secret_fingerprint
    assert res["task_secret"] == {"fingerprint": secret_fingerprint(), "reference": True}  # conftest's
    n_exec = 0
    for seed in res["methods"]["real"]["seeds"]:
        rec = seed["records"]
        assert len(rec) == 12  # real runs to the step cap, 3 x S, like every method
        assert rec[-1]["executions"] == 12 * 5 * 4  # a real execution for every rollout
        n_exec += rec[-1]["executions"]
        # compute = declared execution CPU-seconds: 20 rollouts x 20 s per step
        assert [r["compute_cpu_s"] for r in rec] == pytest.approx([400.0 * i for i in range(1, 13)], abs=0.5)
        assert [r["cpu_seconds"]["execution"] for r in rec] == [400.0 * i for i in range(1, 13)]
        assert all(r["realised_anchor_fraction"] == 1.0 for r in rec)
        # at WMRL's budget (80 CPU-s) not even one real step fits: the initial policy
        assert seed["snapshot"] == {"steps": 4, "compute_real": 4, "compute_wmrl": 0}
    for name in ("wmrl", "anchors_raw"):
        for seed in res["methods"][name]["seeds"]:
            rec = seed["records"]
            # one anchor group of 5 per step (0.2 * 5 = 1): executions = anchor groups * G
            assert all(r["anchor_groups"] == r["step"] for r in rec)
            assert rec[-1]["executions"] == 4 * rec[-1]["anchor_groups"]
            assert rec[-1]["realised_anchor_fraction"] == pytest.approx(0.2)
            n_exec += rec[-1]["executions"]
            # 4 executions = 80 CPU-s per step: 12 steps (the cap, 3 x S) cost 960 < 4800
            assert [r["compute_cpu_s"] for r in rec] == pytest.approx([80.0 * i for i in range(1, 13)], abs=0.5)
            assert seed["snapshot"] == {"steps": 4, "compute_wmrl": 4, "compute_real": 12}
    for seed in res["methods"]["wm_only"]["seeds"]:
        assert seed["records"][-1]["executions"] == 0 and len(seed["records"]) == 12  # capped at 3 x S
        assert seed["records"][-1]["cpu_seconds"]["execution"] == 0.0
        assert seed["snapshot"] == {"steps": 4, "compute_wmrl": 12, "compute_real": 12}
    assert FakeEnv.steps == n_exec  # every execution charged is one real env step
    # curves: coarse points (3 over each run's steps) + the comparison points + refinement near the target
    sp = res["speedup"]
    real_curves = [s["curve"] for s in res["methods"]["real"]["seeds"]]
    for c in real_curves:
        assert {0, 4, 6, 12} <= set(c["step"]) and c["compute_cpu_s"][0] == 0.0
    s0 = np.mean([c["score"][0] for c in real_curves])
    sS = np.mean([c["score"][c["step"].index(4)] for c in real_curves])
    assert sp["target"] == pytest.approx(s0 + 0.9 * (sS - s0))
    from agents.experiments.speedup import Curve, compute_to_target

    for name, m in res["methods"].items():
        for seed, ctt in zip(m["seeds"], sp["methods"][name]["ctt"]):
            c = seed["curve"]
            assert ctt == compute_to_target(Curve(np.array(c["compute_cpu_s"]), np.array(c["score"])), sp["target"])
    # the headline table shows every method, the fitting cost column and the target
    table = (tmp_path / "table.md").read_text()
    assert "Compute-to-target speedup" in table and "with world-model fitting (500 CPU-s)" in table
    for m in cfg.methods:
        assert METHODS[m].label in table
    head, sens, costs, steps_t, wmrl_t, real_t = table.split("### ")[0:6]
    assert sens.startswith("Sensitivity to the target")
    assert "| GRPO, real execution | 1.00 |" in steps_t and "| GRPO, real execution | 1.00 |" in real_t
    assert "realised anchor fraction" in costs
    assert (tmp_path / "score_vs_compute.png").exists() and (tmp_path / "rho_calibration.png").exists()
    assert format_table(res, "steps").count("\n") == 2 + len(cfg.methods)
    # every evaluation of one bench seed draws the same random numbers, seeds differ
    assert len(set(EVAL_SEEDS)) == 2 and None not in EVAL_SEEDS


def test_coarse_eval_steps_and_refinement_step():
    from agents.experiments.bench_run import coarse_eval_steps, refinement_step

    assert coarse_eval_steps(12, 5) == [0, 3, 6, 9, 12]
    assert coarse_eval_steps(2, 5) == [0, 1, 2]
    assert coarse_eval_steps(0, 3) == [0]
    with pytest.raises(ValueError):
        coarse_eval_steps(4, 1)
    # first crossing of 30 lies between steps 4 and 8: bisect there
    assert refinement_step([0, 4, 8, 12], [10.0, 20.0, 40.0, 25.0], 30.0) == 6
    # unordered input is sorted first
    assert refinement_step([8, 0, 4], [40.0, 10.0, 20.0], 30.0) == 6
    assert refinement_step([0, 1, 8], [10.0, 35.0, 40.0], 30.0) is None  # adjacent snapshots: nothing to refine
    assert refinement_step([0, 4], [10.0, 20.0], 30.0) is None  # never crosses
    assert refinement_step([0, 4], [35.0, 20.0], 30.0) is None  # already above at the start


def test_rho_mode_reaches_the_denoiser():
    from agents.experiments.bench_run import run_method

    seen = {}
    for mode in ("calibrated", "parameter_free"):
        # min_pairs 4: the first anchor group fits the map, so the next one counts for ρ's warm-up
        correction = replace(BenchConfig().correction, anchor_fraction=0.34, min_pairs=4, warmup_groups=1, rho_mode=mode)
        cfg = BenchConfig(steps=3, groups_per_step=3, group_size=4, correction=correction)
        run = run_method(METHODS["wmrl"], 0, cfg, FakeAgent, FakeEnv, FakeWM(), ["t1"], max_steps=3)
        seen[mode] = [r.rho for r in run.records]
    # parameter-free: ρ = 1 + s̄² (c = 1) stays near 1 for a good world model; calibrated starts at rho_target
    # (step 1's anchor group, before the first fit, is on the raw scale and does not count)
    assert seen["calibrated"][0] == 1.0 and seen["calibrated"][1] == pytest.approx(2.0)
    assert all(1.0 <= r < 1.6 for r in seen["parameter_free"])


def test_bench_config_nests_one_correction_config_with_unprefixed_flags():
    import tyro

    from wmrl_envs.core.config import CorrectionConfig

    default = BenchConfig().correction
    assert default == CorrectionConfig(min_pairs=16, refit_every=8, warmup_groups=64, half_life=16.0)
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
    from agents.experiments.bench_agents import GrammarBenchAgent

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


def test_run_method_records_why_it_stopped():
    """A cheap method stops at real GRPO's compute or at its step cap, and says which: the headline
    tells a seed that ran out of budget from one that ran out of steps."""
    from agents.experiments.bench_run import run_method

    cfg = BenchConfig(groups_per_step=5, group_size=4, correction=replace(BenchConfig().correction, anchor_fraction=0.2))
    kw = dict(make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1"])
    # one anchor group of 4 rollouts per step = 80 declared CPU-s: a 200 CPU-s budget binds at step 3
    run = run_method(METHODS["wmrl"], 0, cfg, kw["make_agent"], kw["make_env"], kw["world_model"], kw["train_tasks"],
                     max_steps=10, compute_budget_s=200.0)
    assert (len(run.records), run.stopped) == (3, "compute budget")
    run = run_method(METHODS["wmrl"], 0, cfg, kw["make_agent"], kw["make_env"], kw["world_model"], kw["train_tasks"],
                     max_steps=2, compute_budget_s=200.0)
    assert (len(run.records), run.stopped) == (2, "step cap")
    run = run_method(METHODS["real"], 0, cfg, kw["make_agent"], kw["make_env"], None, kw["train_tasks"], max_steps=2)
    assert run.stopped == "steps" and run.records[-1].cpu_seconds["execution"] == 2 * 20 * 20.0


def test_world_model_fitting_cost_is_the_logged_executions_cpu_seconds():
    from agents.experiments.bench_agents import world_model_fitting_cost
    from wmrl_envs.envs.autoresearch.embedding_world_model import load_execution_log

    records = load_execution_log(split="train")
    seconds, what, is_cpu = world_model_fitting_cost(BenchConfig(world_model="embedding"))
    assert is_cpu and seconds == pytest.approx(sum(r["cpu_s"] for r in records)) and seconds > 0
    assert f"{len(records)} logged executions" in what
    assert world_model_fitting_cost(BenchConfig(world_model="llm"))[0] == 0.0


class UnmeasuredEnv(FakeEnv):
    """An env whose executions have no CPU figure (``info["execution_cpu_s"] = None``)."""

    def step(self, action):
        FakeEnv.steps += 1
        return 0, float(action), True, False, {"execution_cpu_s": None}


def _bench(tmp_path, env=FakeEnv, evaluate=None, **kw):
    settings = dict(methods=("real", "wmrl"), seeds=2, steps=4, max_steps_factor=3, groups_per_step=5, group_size=4,
                    correction=replace(BenchConfig().correction, anchor_fraction=0.2), eval_points=3, refine_evals=2,
                    out_dir=str(tmp_path))
    cfg = BenchConfig(**{**settings, **kw})
    res = run_bench(cfg, make_agent=FakeAgent, make_env=env, world_model=FakeWM(), train_tasks=["t1", "t2"],
                    heldout_tasks=["h"], sandbox=None, evaluate=evaluate or fake_eval, log=lambda s: None)
    return res, (tmp_path / "table.md").read_text()


def test_curves_are_read_in_cpu_seconds_at_the_evaluated_steps(tmp_path):
    res, _ = _bench(tmp_path)
    for m in res["methods"].values():
        for e in m["seeds"]:
            c, rec = e["curve"], e["records"]
            assert c["compute_cpu_s"] == [0.0 if i == 0 else rec[i - 1]["compute_cpu_s"] for i in c["step"]]
            assert c["compute_wall_s"] == [0.0 if i == 0 else rec[i - 1]["compute_wall_s"] for i in c["step"]]
            assert c["compute_cpu_s"] != c["compute_wall_s"]  # declared 20 CPU-s per execution: not the wall-clock


def test_unmeasured_execution_cpu_is_reported_not_counted_as_zero(tmp_path):
    res, table = _bench(tmp_path, env=UnmeasuredEnv)
    rec = res["methods"]["real"]["seeds"][0]["records"]
    assert rec[-1]["cpu_unmeasured"] == 12 * 5 * 4 and rec[-1]["cpu_seconds"]["execution"] == 0.0
    assert "Warning: compute understated" in table and "GRPO, real execution 240" in table


def test_tables_without_their_budget_are_left_out(tmp_path):
    _, table = _bench(tmp_path, methods=("real", "anchors_raw"))
    assert "Equal compute: WMRL's" not in table and "Equal compute: real-execution GRPO's" in table
    with pytest.raises(ValueError, match="has no real-execution GRPO.*add real"):  # nothing to measure against
        _bench(tmp_path / "b", methods=("wmrl", "wm_only"))


def test_a_seed_stopped_by_the_step_cap_is_not_said_to_be_beyond_the_budget(tmp_path):
    class AntiWM:  # ranks actions backwards: the world-model groups pull the policy down
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=1.0 - float(a)) for a in actions]

    cfg = BenchConfig(methods=("real", "wm_only"), seeds=2, steps=4, max_steps_factor=2, groups_per_step=5,
                      group_size=4, eval_points=3, refine_evals=0, out_dir=str(tmp_path))
    res = run_bench(cfg, make_agent=FakeAgent, make_env=FakeEnv, world_model=AntiWM(), train_tasks=["t1"],
                    heldout_tasks=["h"], sandbox=None, evaluate=fake_eval, log=lambda s: None)
    assert [e["stopped"] for e in res["methods"]["wm_only"]["seeds"]] == ["step cap", "step cap"]
    head = (tmp_path / "table.md").read_text().split("### ")[0]
    row = next(line for line in head.splitlines() if line.startswith("| GRPO, world model only"))
    assert "step cap" in row and "within budget" not in row


def test_heldout_ungraded_counts_every_evaluation(tmp_path):
    calls = []

    def eval_with_one_ungraded(*a, **kw):
        calls.append(1)
        return {**fake_eval(*a, **kw), "ungraded": {"sandbox_unavailable": 1}}

    res, table = _bench(tmp_path, methods=("real",), evaluate=eval_with_one_ungraded)
    assert sum(e["heldout_ungraded"] for e in res["methods"]["real"]["seeds"]) == len(calls) > 2
    assert f"held-out {len(calls)}" in table


@pytest.mark.parametrize("field,value", [("eval_points", 1), ("eval_draws", 0), ("target_gain", 1.5),
                                         ("refine_evals", -1), ("methods", ("real", "real")), ("group_size", 1)])
def test_bad_settings_are_refused_before_anything_trains(tmp_path, field, value):
    FakeEnv.steps = 0
    with pytest.raises(ValueError, match=field.replace("_", "-") if field != "methods" else "twice"):
        _bench(tmp_path, **{field: value})
    assert FakeEnv.steps == 0


def test_evaluate_snapshot_cache_draws_and_what_is_never_cached(monkeypatch):
    """Held-out evaluation executes each (task, program) once per run, never caches an ungraded
    outcome or a time-out, estimates avg@k from all its draws, and without a cache executes all."""
    from types import SimpleNamespace

    import agents.experiments.bench_run as bench
    import wmrl_envs.envs.autoresearch.grading as grading
    from wmrl_envs.envs.autoresearch.tasks import list_tasks
    from wmrl_envs.sandbox.base import SandboxUnavailableError

    task = list_tasks("heldout")[0]
    executed = []

    def fake_run(t, code, sandbox):
        executed.append(code)
        if code == "broken":
            raise SandboxUnavailableError("no sandbox")
        pos = float(code.split()[1])
        return SimpleNamespace(status="valid", position=pos, score=pos, timed_out=code.startswith("slow")), None

    monkeypatch.setattr(grading, "evaluate", fake_run)

    class Agent:
        def __init__(self, codes):
            self.codes = codes

        def restore(self, snap):
            pass

        def reseed(self, seed):
            pass

        def sample(self, tasks, n):
            return [self.codes[:n] for _ in tasks], None

    codes = ["p 0.2", "p 0.8", "p 0.2", "slow 0.5"]
    cache: dict = {}
    r1 = bench.evaluate_snapshot(Agent(codes), None, [task], 2, None, parallel=1, cache=cache, draws=4)
    assert r1["per_task"][task] == pytest.approx(100 * grading_best_of_k([0.2, 0.8, 0.2, 0.5], 2))
    assert len(executed) == 3 and (r1["executed"], r1["cached"]) == (3, 1)  # the repeated draw once
    r2 = bench.evaluate_snapshot(Agent(codes), None, [task], 2, None, parallel=1, cache=cache, draws=4)
    assert executed[3:] == ["slow 0.5"] and r2["overall"] == r1["overall"]  # only the time-out again
    executed.clear()
    bench.evaluate_snapshot(Agent(codes), None, [task], 2, None, parallel=1, cache=None, draws=4)
    assert len(executed) == 4  # no cache: every trajectory
    executed.clear()
    broken = ["broken", "p 0.4"]
    cache = {}
    bench.evaluate_snapshot(Agent(broken), None, [task], 1, None, parallel=1, cache=cache, draws=2, max_ungraded_share=None)
    bench.evaluate_snapshot(Agent(broken), None, [task], 1, None, parallel=1, cache=cache, draws=2, max_ungraded_share=None)
    assert executed.count("broken") == 2 and executed.count("p 0.4") == 1  # the ungraded one is retried
    with pytest.raises(ValueError, match="draws must be >= k"):
        bench.evaluate_snapshot(Agent(codes), None, [task], 2, None, draws=1)


def grading_best_of_k(xs, k):
    from agents.train.evaluation import expected_best_of_k

    return expected_best_of_k(xs, k)


def test_reuse_from_reads_real_and_wmrl_and_trains_only_the_others(tmp_path):
    """The ablation command reuses the headline run's real GRPO and WMRL: their entries are copied
    as measured, their budgets still bound the other methods, and no execution of theirs happens
    again."""
    import json

    base = BenchConfig(methods=("real", "wmrl"), seeds=2, steps=3, max_steps_factor=2, groups_per_step=5,
                       group_size=4, correction=replace(BenchConfig().correction, anchor_fraction=0.2),
                       eval_points=3, refine_evals=1, out_dir=str(tmp_path / "head"))
    kw = dict(make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1"], heldout_tasks=["h"],
              sandbox=None, evaluate=fake_eval, log=lambda s: None)
    first = run_bench(base, **kw)
    FakeEnv.steps = 0
    abl = replace(base, methods=("real", "wmrl", "anchors_raw"), reuse_from=str(tmp_path / "head" / "results.json"),
                  out_dir=str(tmp_path / "abl"))
    second = run_bench(abl, **kw)
    for m in ("real", "wmrl"):
        for a, b in zip(first["methods"][m]["seeds"], second["methods"][m]["seeds"]):
            assert b["reused_from"] == abl.reuse_from
            for key in ("curve", "records", "eval", "snapshot"):  # as measured there (NaN-safe comparison)
                assert json.dumps(b[key], default=float) == json.dumps(a[key], default=float)
    # only anchors_raw executed: 2 seeds x its anchor groups x G; its budget is the reused real's
    runs = second["methods"]["anchors_raw"]["seeds"]
    assert FakeEnv.steps == sum(s["records"][-1]["executions"] for s in runs) > 0
    for s, r in zip(runs, first["methods"]["real"]["seeds"]):
        assert s["budgets"]["compute_real"] == r["records"][base.steps - 1]["compute_cpu_s"]  # real GRPO at S
    assert second["speedup"]["target"] == first["speedup"]["target"]
    assert "read from" in (tmp_path / "abl" / "table.md").read_text()
    assert json.loads((tmp_path / "abl" / "results.json").read_text())["reused_from"]["methods"] == ["real", "wmrl"]


@pytest.mark.parametrize("change, message", [
    (dict(steps=4), "steps: here 4, there 3"),
    (dict(seeds=3), "pass --seeds 2 or fewer"),
    (dict(methods=("real", "anchors_raw"), reuse_methods=("anchors_raw",)), "none of the methods"),
])
def test_reuse_from_refuses_a_run_that_cannot_stand_in(tmp_path, change, message):
    base = BenchConfig(methods=("real",), seeds=2, steps=3, groups_per_step=2, group_size=2, eval_points=2,
                       refine_evals=0, out_dir=str(tmp_path / "head"))
    run_bench(base, make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1"],
              heldout_tasks=["h"], sandbox=None, evaluate=fake_eval, log=lambda s: None)
    bad = replace(base, reuse_from=str(tmp_path / "head" / "results.json"), out_dir=str(tmp_path / "b"), **change)
    FakeEnv.steps = 0
    with pytest.raises(ValueError, match=message):
        run_bench(bad, make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1"],
                  heldout_tasks=["h"], sandbox=None, evaluate=fake_eval, log=lambda s: None)
    assert FakeEnv.steps == 0  # refused before anything trained
    with pytest.raises(FileNotFoundError):
        reused_entries(replace(base, reuse_from=str(tmp_path / "nope.json")))


def test_resume_continues_a_stopped_run_and_matches_an_uninterrupted_one(tmp_path):
    """A run stopped after seed 0 (its results.json and snapshots/seed0.pt as written then) resumes
    with seed 1, refines both seeds' curves, and gives the uninterrupted run's curves and speedup."""
    import json
    import shutil

    cfg = BenchConfig(methods=("real", "wmrl"), seeds=2, steps=3, max_steps_factor=2, groups_per_step=5, group_size=4,
                      correction=replace(BenchConfig().correction, anchor_fraction=0.2), eval_points=3,
                      refine_evals=2, out_dir=str(tmp_path / "full"))
    kw = dict(make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1"], heldout_tasks=["h"],
              sandbox=None, evaluate=fake_eval, log=lambda s: None)
    full = run_bench(cfg, **kw)
    # the state after seed 0: one seed per method, before the refinement
    one = run_bench(replace(cfg, seeds=1, refine_evals=0, out_dir=str(tmp_path / "stopped")), **kw)
    res = json.loads((tmp_path / "stopped" / "results.json").read_text())
    res["config"]["seeds"], res["config"]["refine_evals"] = 2, 2
    for k in ("speedup", "costs"):
        res.pop(k, None)
    (tmp_path / "stopped" / "results.json").write_text(json.dumps(res))
    assert one["methods"]["real"]["seeds"][0]["records"]
    logs = []
    resumed = run_bench(replace(cfg, resume=True, out_dir=str(tmp_path / "stopped")), **{**kw, "log": logs.append})
    assert any("resuming" in line and "seeds 0..0 kept" in line for line in logs)
    for m in ("real", "wmrl"):
        for a, b in zip(full["methods"][m]["seeds"], resumed["methods"][m]["seeds"]):
            assert b["curve"]["step"] == a["curve"]["step"]  # seed 0 refined after the resume too
            assert b["curve"]["score"] == pytest.approx(a["curve"]["score"])
    assert resumed["speedup"]["target"] == pytest.approx(full["speedup"]["target"])
    # without the snapshots, seed 0 is kept but not refined (and it says so)
    shutil.rmtree(tmp_path / "stopped" / "snapshots")
    (tmp_path / "stopped" / "results.json").write_text(json.dumps(res))
    logs.clear()
    run_bench(replace(cfg, resume=True, out_dir=str(tmp_path / "stopped")), **{**kw, "log": logs.append})
    assert any("without saved snapshots" in line for line in logs)
    with pytest.raises(ValueError, match="steps: here 4, there 3"):
        run_bench(replace(cfg, resume=True, steps=4, out_dir=str(tmp_path / "stopped")), **kw)


def test_settings_added_since_an_earlier_run_count_as_equal_at_their_default():
    from agents.experiments.bench_resume import settings_differ

    cfg = BenchConfig()
    earlier = json.loads(json.dumps(__import__("dataclasses").asdict(cfg), default=float))
    del earlier["correction"]["f_min"]  # a field the earlier run's code did not have
    assert settings_differ(cfg, earlier, ("correction", "steps")) == []
    changed = replace(cfg, correction=replace(cfg.correction, anchor_fraction="auto", f_min=0.1))
    assert "f_min" in settings_differ(changed, earlier, ("correction",))[0]


def test_reusing_real_grpo_alone_allows_another_anchor_fraction(tmp_path):
    base = BenchConfig(methods=("real", "wmrl"), seeds=1, steps=2, max_steps_factor=2, groups_per_step=5, group_size=2,
                       eval_points=2, refine_evals=0, out_dir=str(tmp_path / "head"))
    kw = dict(make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1"], heldout_tasks=["h"],
              sandbox=None, evaluate=fake_eval, log=lambda s: None)
    run_bench(base, **kw)
    other_f = replace(base, correction=replace(base.correction, anchor_fraction=0.4),
                      reuse_from=str(tmp_path / "head" / "results.json"), out_dir=str(tmp_path / "b"))
    with pytest.raises(ValueError, match="correction"):  # WMRL would be reused: its correction must match
        run_bench(other_f, **kw)
    # --reuse-methods real: WMRL runs again at f = 0.4 against the same real GRPO
    res = run_bench(replace(other_f, reuse_methods=("real",)), **kw)
    assert res["reused_from"]["methods"] == ["real"]
    assert res["methods"]["wmrl"]["seeds"][0]["records"][-1]["realised_anchor_fraction"] == pytest.approx(0.4)


def test_report_of_a_stopped_run_keeps_the_seeds_every_method_finished(tmp_path):
    from agents.cli import main

    cfg = BenchConfig(methods=("real", "wmrl"), seeds=2, steps=3, max_steps_factor=2, groups_per_step=5, group_size=4,
                      correction=replace(BenchConfig().correction, anchor_fraction=0.2), eval_points=3,
                      refine_evals=0, out_dir=str(tmp_path / "run"))
    full = run_bench(cfg, make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1"],
                     heldout_tasks=["h"], sandbox=None, evaluate=fake_eval, log=lambda s: None)
    stopped = json.loads((tmp_path / "run" / "results.json").read_text())
    stopped["config"]["seeds"] = 3  # planned 3, stopped in seed 2: wmrl has not finished it
    stopped["methods"]["real"]["seeds"].append(stopped["methods"]["real"]["seeds"][0])
    (tmp_path / "stopped.json").write_text(json.dumps(stopped))
    assert main(["bench", "report", str(tmp_path / "stopped.json"), "--out-dir", str(tmp_path / "rep")]) == 0
    table = (tmp_path / "rep" / "table.md").read_text()
    assert table.startswith("**Partial report: 2 of the 3 planned seeds finished.**")
    rep = json.loads(json.dumps(full["speedup"], default=float))
    assert f"{rep['target']:.1f}" in table
    assert main(["bench", "report", str(tmp_path / "nope.json")]) == 2


def test_guards_of_resume_and_reuse(tmp_path):
    """From a review: a finished run is not overwritten by a fresh one, an unfinished run cannot be
    reused, an unreadable results.json is named, and resume compares --reuse-methods too."""
    cfg = BenchConfig(methods=("real", "wmrl"), seeds=1, steps=2, max_steps_factor=2, groups_per_step=5, group_size=2,
                      eval_points=2, refine_evals=0, out_dir=str(tmp_path / "run"))
    kw = dict(make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1"], heldout_tasks=["h"],
              sandbox=None, evaluate=fake_eval, log=lambda s: None)
    run_bench(cfg, **kw)
    with pytest.raises(FileExistsError, match="pass --resume"):
        run_bench(cfg, **kw)
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    res.pop("speedup")
    (tmp_path / "unfinished.json").write_text(json.dumps(res))
    with pytest.raises(ValueError, match="did not finish"):
        run_bench(replace(cfg, reuse_from=str(tmp_path / "unfinished.json"), out_dir=str(tmp_path / "x")), **kw)
    with pytest.raises(ValueError, match="reuse_methods"):
        run_bench(replace(cfg, resume=True, reuse_methods=("real",)), **kw)
    (tmp_path / "run" / "results.json").write_text('{"config": {"seeds": 1}, "meth')
    with pytest.raises(ValueError, match="not a readable wmrl bench results.json"):
        run_bench(replace(cfg, resume=True), **kw)


def test_bench_refuses_early_what_would_waste_hours(tmp_path):
    from agents.experiments.bench_config import check_bench_config

    with pytest.raises(FileNotFoundError, match="--reuse-from .*no such file"):
        check_bench_config(BenchConfig(reuse_from=str(tmp_path / "missing.json")))
    with pytest.raises(ValueError, match="--resume --out-dir .*no such folder"):
        check_bench_config(BenchConfig(resume=True, out_dir=str(tmp_path / "typo")))
    check_bench_config(BenchConfig(resume=True, out_dir=str(tmp_path)))  # an existing folder is fine


def test_bench_report_refuses_what_is_not_a_bench_results_file(tmp_path, capsys):
    from agents.cli import main

    (tmp_path / "sweep.json").write_text(json.dumps({"config": {}, "cells": []}))
    (tmp_path / "garbage.json").write_text("not json")
    assert main(["bench", "report", str(tmp_path / "sweep.json")]) == 2
    assert "is not a wmrl bench results.json" in capsys.readouterr().err
    assert main(["bench", "report", str(tmp_path / "garbage.json")]) == 2
    assert "garbage.json is not JSON" in capsys.readouterr().err


def test_the_run_ends_with_its_headline():
    from agents.experiments.bench import headline_lines

    ref = json.loads((Path(__file__).resolve().parents[3] / "results" / "bench_reference_run" / "results.json").read_text())
    assert headline_lines(ref) == [
        "target 59.0 (real GRPO's 90% gain from 27.9 to 62.5)",
        "wmrl: 6.7x [4.0, ∞] less compute than real GRPO to the target; 2.0x [1.6, ∞] with the world model's "
        "fitting cost"]
    assert headline_lines({"speedup": {}, "speedup_error": "real GRPO did not improve"}) == [
        "no compute-to-target headline: real GRPO did not improve"]


def test_compare_runs_measures_two_runs_against_the_first_runs_target(capsys):
    import importlib.util

    root = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("compare_runs", root / "benchmarks" / "compare_runs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ref = str(root / "results" / "bench_reference_run" / "results.json")
    out = mod.main([ref, ref])
    assert out["seeds"] == 5 and round(out["target"], 1) == 59.0
    assert out["first_ctt"] == out["second_ctt"] and round(out["first_median"]) == 130
    assert out["paired_ratio_first_over_second"] == [1.0] * 5 and round(out["first_speedup"]["point"], 1) == 6.7


def test_llm_settings_without_an_llm_are_refused():
    from agents.experiments.bench_config import check_bench_config

    with pytest.raises(ValueError, match="--device apply to the LLM agent"):
        check_bench_config(BenchConfig(device="tpu"))
    with pytest.raises(ValueError, match="device must be one of"):
        check_bench_config(BenchConfig(agent="llm", device="tpu"))
    check_bench_config(BenchConfig(agent="llm", device="cpu", dtype="float32"))


def _learned_wm(seed):
    from wmrl_envs.world_models.learned import CallableFeaturizer, LearnedWorldModel

    return LearnedWorldModel(CallableFeaturizer(lambda c, a: [float(a), float(a) ** 2]), min_groups=1, refit_every=1)


def test_every_method_has_the_same_step_cap_and_the_target_stays_at_real_grpos_step_s(tmp_path):
    """Real GRPO trains to max_steps_factor x S like the others (no real seed is censored at S); the
    target is still read from its curve at step S and the equal-steps point is step S."""
    res, _ = _bench(tmp_path)
    real = res["methods"]["real"]["seeds"]
    for e in real:
        assert len(e["records"]) == 12 and e["snapshot"]["steps"] == 4 and e["snapshot"]["compute_real"] == 4
        assert e["compute_at"]["compute_real"] == pytest.approx(1600.0, abs=0.5)  # 4 steps x 20 rollouts x 20 CPU-s
    s0 = np.mean([e["curve"]["score"][0] for e in real])
    s_s = np.mean([e["curve"]["score"][e["curve"]["step"].index(4)] for e in real])
    assert res["speedup"]["s_S"] == pytest.approx(s_s) and res["speedup"]["target"] == pytest.approx(s0 + 0.9 * (s_s - s0))


def test_fitting_is_charged_at_the_runs_own_cpu_per_execution_and_new_methods_run(tmp_path):
    """The pre-fitted world model's fitting executions cost this run's measured CPU-s per execution
    (FakeEnv declares 20), not the logged figure; real GRPO at the anchor groups' batch samples
    f x groups per step groups; the learned world model learns from its anchors on the ledger; the
    headline gives total compute and the speedup over the best real-GRPO batch; the sensitivity
    table reads 50/70/90/100% targets."""
    from agents.experiments.speedup import compute_to_target, speedup

    cfg = BenchConfig(methods=("real", "real_anchor_batch", "wm_only", "wmrl", "wmrl_learned"), seeds=3, steps=4,
                      max_steps_factor=3, groups_per_step=5, group_size=4,
                      correction=replace(BenchConfig().correction, anchor_fraction=0.2), eval_points=4,
                      refine_evals=1, out_dir=str(tmp_path))
    made = []

    def make_learned(seed):
        made.append(_learned_wm(seed))
        return made[-1]

    res = run_bench(cfg, make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1", "t2"],
                    heldout_tasks=["h"], sandbox=None, evaluate=fake_eval, log=lambda s: None, fitting_cpu_s=999.0,
                    fitting_executions=10, make_learned_world_model=make_learned)
    sp = res["speedup"]
    assert sp["cpu_s_per_execution"] == pytest.approx(20.0) and sp["fitting_cpu_s"] == pytest.approx(200.0)
    assert sp["fitting_cpu_s_logged"] == 999.0 and res["world_model_fitting_executions"] == 10
    for name in ("wm_only", "wmrl"):
        row = sp["methods"][name]
        assert row["fitting_charged"] and row["total_ctt"] == pytest.approx([c + 200.0 for c in row["ctt"]])
    for name in ("real", "real_anchor_batch", "wmrl_learned"):
        row = sp["methods"][name]
        assert not row["fitting_charged"] and row["total_ctt"] == row["ctt"]
    # real GRPO at the anchor groups' batch: round(0.2 x 5) = 1 group of 4 rollouts per step
    for e in res["methods"]["real_anchor_batch"]["seeds"]:
        assert [r["executions"] for r in e["records"]] == [4 * r["step"] for r in e["records"]]
        assert len(e["records"]) == 12
    # a fresh learned world model per seed, taught by its own anchor groups, its refits on the ledger
    assert len(made) == 3 and all(wm.n_observed_groups == 12 and wm.n_refits >= 11 for wm in made)
    for e in res["methods"]["wmrl_learned"]["seeds"]:
        assert e["records"][-1]["cpu_seconds"]["world_model"] > 0
    best = min(("real", "real_anchor_batch"), key=lambda n: np.median(sp["methods"][n]["total_ctt"]))
    assert sp["best_real"] == best
    for name in ("wm_only", "wmrl", "wmrl_learned"):
        row = sp["methods"][name]
        want = speedup(sp["methods"][best]["total_ctt"], row["total_ctt"], n_boot=10_000)
        assert row["speedup_over_best_real"]["point"] == want.point
        assert row["speedup_total"]["point"] == speedup(sp["methods"]["real"]["total_ctt"], row["total_ctt"]).point
    # sensitivity: the target at 50/70/90/100% of real GRPO's gain after S steps
    sens = sp["sensitivity"]
    assert list(sens) == ["0.5", "0.7", "0.9", "1"]
    assert sens["1"]["target"] == pytest.approx(sp["s_S"]) and sens["0.9"]["target"] == pytest.approx(sp["target"])
    assert sens["0.5"]["target"] == pytest.approx(sp["s0"] + 0.5 * (sp["s_S"] - sp["s0"]))
    curves = [e["curve"] for e in res["methods"]["wmrl"]["seeds"]]
    from agents.experiments.speedup import Curve

    want = np.median([compute_to_target(Curve(np.array(c["compute_cpu_s"]), np.array(c["score"])), sens["0.5"]["target"])
                      + 200.0 for c in curves])
    assert sens["0.5"]["methods"]["wmrl"]["median_total_ctt"] == pytest.approx(want)
    from agents.experiments.bench import headline_lines

    lines = {ln.split(":")[0]: ln for ln in headline_lines(res)}
    assert "fitting cost" not in lines["wmrl_learned"] and "fitting cost" in lines["wmrl"]
    assert f"vs the best real-GRPO batch ({best})" in lines["wmrl_learned"]
    table = (tmp_path / "table.md").read_text()
    assert "Sensitivity to the target" in table and "| 50% (" in table
    assert "GRPO, real execution, anchor groups' batch" in table and "WMRL, world model learned from its anchors" in table
    assert "10 executions × this run's own 20.00 CPU-s per execution = 200 CPU-s" in table


def test_learned_method_needs_its_world_model_factory(tmp_path):
    with pytest.raises(ValueError, match="make_learned_world_model"):
        _bench(tmp_path, methods=("real", "wmrl_learned"))


def test_results_json_is_strict_and_not_reached_is_null_listed_under_nonfinite(tmp_path):
    """A seed that never reaches the target has ctt inf: results.json writes it as null, lists its
    path under "nonfinite", passes json.dumps(allow_nan=False); the readers restore inf, and read
    files written before (bare Infinity) too."""
    from agents.experiments.bench_report import report_finished_seeds, restore_nonfinite

    class AntiWM:
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=1.0 - float(a)) for a in actions]

    cfg = BenchConfig(methods=("real", "wm_only"), seeds=2, steps=4, max_steps_factor=2, groups_per_step=5,
                      group_size=4, eval_points=3, refine_evals=0, out_dir=str(tmp_path / "run"))
    res = run_bench(cfg, make_agent=FakeAgent, make_env=FakeEnv, world_model=AntiWM(), train_tasks=["t1"],
                    heldout_tasks=["h"], sandbox=None, evaluate=fake_eval, log=lambda s: None)
    assert res["speedup"]["methods"]["wm_only"]["ctt"] == [float("inf")] * 2
    text = (tmp_path / "run" / "results.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    data = json.loads(text)
    json.dumps(data, allow_nan=False)
    assert data["speedup"]["methods"]["wm_only"]["ctt"] == [None, None]
    assert data["nonfinite"]["/speedup/methods/wm_only/ctt/0"] == "inf" and "not reached" in data["nonfinite_note"]
    back = restore_nonfinite(json.loads(text))
    assert back["speedup"]["methods"]["wm_only"]["ctt"] == [float("inf")] * 2 and "nonfinite" not in back
    rep = report_finished_seeds(data, tmp_path / "rep")
    assert rep["speedup"]["methods"]["wm_only"]["ctt"] == [float("inf")] * 2
    # an older file (bare Infinity, no "nonfinite") still reads
    old = json.loads(json.dumps(back))
    assert report_finished_seeds(old, tmp_path / "rep2")["speedup"]["methods"]["wm_only"]["ctt"] == [float("inf")] * 2


def test_reusing_a_real_grpo_that_stopped_at_s_steps_is_warned_about(tmp_path):
    """A results.json from before real GRPO trained the step cap (its real seeds stopped at S) can
    still be reused, but the log says that the others' budget is then its shorter run."""
    res, _ = _bench(tmp_path / "new", methods=("real",), seeds=1)
    old = json.loads((tmp_path / "new" / "results.json").read_text())
    e = old["methods"]["real"]["seeds"][0]
    e["records"], e["stopped"] = e["records"][:4], "steps"
    old.pop("nonfinite", None)
    (tmp_path / "old.json").write_text(json.dumps(old))
    logs = []
    cfg = BenchConfig(methods=("real", "wm_only"), seeds=1, steps=4, max_steps_factor=3, groups_per_step=5,
                      group_size=4, correction=replace(BenchConfig().correction, anchor_fraction=0.2), eval_points=3,
                      refine_evals=0, out_dir=str(tmp_path / "b"), reuse_from=str(tmp_path / "old.json"))
    run_bench(cfg, make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1", "t2"],
              heldout_tasks=["h"], sandbox=None, evaluate=fake_eval, log=logs.append)
    assert any("trained 4 steps, not the step cap 12" in line for line in logs)
