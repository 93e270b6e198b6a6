"""Execution costs that do not move with the machine's load (``agents.experiments.bench_costs``,
issue 35, item 3): the program family, the idle-machine cost model, the env wrapper that charges it
and ``wmrl bench`` charging from it with the measured CPU-seconds beside it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.experiments.bench_costs import LIVE_CPU_KEY, ExecutionCostModel, ModelledCostEnv, program_family

from bench_fakes import FakeEnv, run_kw, fake_config

__all__: list[str] = []


def test_program_family_is_the_last_model_class_called():
    assert program_family("model = RandomForestClassifier(n_estimators=50, random_state=3)") == "RandomForestClassifier"
    assert program_family("m = make_pipeline(StandardScaler(), PCA(5), KNeighborsRegressor())") == "KNeighborsRegressor"
    assert program_family("x = 1") == "other"
    from agents.experiments.bench_costs import program_size

    assert program_size("HistGradientBoostingRegressor(max_iter=200, learning_rate=0.1)") == "max_iter=200"
    assert program_size("KNeighborsRegressor(n_neighbors=5)") == "default"


def _records(rng, n=300):
    """Executions whose CPU-s are exp(task + family + outcome effects) times noise."""
    task = {"a": 0.0, "b": 0.7}
    fam = {"Ridge": -0.5, "RandomForestClassifier": 0.9}
    out = {"valid": 0.3, "runtime_err": -0.6}
    recs = []
    for _ in range(n):
        t, f, s = rng.choice(list(task)), rng.choice(list(fam)), rng.choice(list(out))
        recs.append({"task_id": t, "family": f, "status": s,
                     "cpu_s": float(np.exp(0.8 + task[t] + fam[f] + out[s] + rng.normal(0, 0.05)) - 0.05)})
    return recs


def test_cost_model_recovers_additive_effects_and_round_trips(tmp_path):
    m = ExecutionCostModel.fit(_records(np.random.default_rng(0)), alpha=0.01)
    assert m.cost("b", "RandomForestClassifier", "valid") == pytest.approx(np.exp(0.8 + 0.7 + 0.9 + 0.3) - 0.05, rel=0.05)
    assert m.cost("a", "Ridge", "runtime_err") == pytest.approx(np.exp(0.8 - 0.5 - 0.6) - 0.05, rel=0.05)
    m.save(tmp_path / "m.json")
    back = ExecutionCostModel.load(tmp_path / "m.json")
    assert back.cost("b", "Ridge", "valid") == m.cost("b", "Ridge", "valid")
    with pytest.warns(UserWarning, match="task 'zz' was not measured"):
        assert back.cost("zz", "Ridge", "valid") > 0
    (tmp_path / "bad.json").write_text(json.dumps({"kind": "other"}))
    with pytest.raises(ValueError, match="not a wmrl execution cost model"):
        ExecutionCostModel.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="at least 3"):
        ExecutionCostModel.fit([{"task_id": "a", "family": "x", "status": "valid", "cpu_s": 0.0}])


class _ExecEnv(FakeEnv):
    """FakeEnv whose steps say they executed a task, with a measured 7 CPU-s that a cost model replaces."""

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        return obs, r, term, trunc, {**info, "execution_cpu_s": 7.0, "executed": True, "task_id": "a", "status": "valid"}


def test_modelled_cost_env_charges_the_model_and_keeps_the_live_figure():
    m = ExecutionCostModel(np.log(2.05), {"a": 0.0}, {"other": 0.0}, {"valid": 0.0})  # 2.0 CPU-s per execution
    env = ModelledCostEnv(_ExecEnv(), m)
    env.reset()
    info = env.step("0.5")[-1]
    assert info["execution_cpu_s"] == pytest.approx(2.0) and info[LIVE_CPU_KEY] == 7.0
    assert (env.n_modelled, env.live_cpu_s, env.modelled_cpu_s) == (1, 7.0, pytest.approx(2.0))


def test_bench_charges_executions_from_the_model_with_the_measured_cpu_beside_it(tmp_path):
    from agents.experiments.bench import run_bench

    m = ExecutionCostModel(np.log(2.05), {"a": 0.0}, {"other": 0.0}, {"valid": 0.0})
    cfg = fake_config(methods=("real",), seeds=1, steps=2, max_steps_factor=1, refine_evals=0, out_dir=str(tmp_path))
    res = run_bench(cfg, **run_kw(make_env=lambda: ModelledCostEnv(_ExecEnv(), m)))
    rec = res["methods"]["real"]["seeds"][0]["records"][-1]
    # 2 steps x 5 groups x 4 rollouts: charged 2 CPU-s each, measured 7
    assert rec["cpu_seconds"]["execution"] == pytest.approx(40 * 2.0) and rec["execution_cpu_s_live"] == pytest.approx(40 * 7.0)
    assert "charged / measured" in (tmp_path / "table.md").read_text()
