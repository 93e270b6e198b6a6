"""The benchmark harness (``agents.experiments.bench.run_bench``) on fake, instant components
(``bench_fakes``; the real run is in tests/agents/experiments/test_bench_e2e.py): routing per method,
compute budgets and step caps, snapshot selection, curves in CPU-seconds, the tables and the headline,
results.json and ``wmrl bench report``.
"""

from __future__ import annotations

import json
from pathlib import Path
from dataclasses import replace

import numpy as np
import pytest

from agents.experiments.bench import run_bench
from agents.experiments.bench_config import BenchConfig
from agents.experiments.bench_report import format_table
from agents.experiments.bench_config import BENCH_METHODS as METHODS
from wmrl_envs.world_models.base import WorldModelPrediction

from bench_fakes import (FakeEnv, FakeWM, FakeAgent, EVAL_SEEDS, fake_eval, UnmeasuredEnv, _bench, _learned_wm, fake_config,
                         run_kw)

__all__: list[str] = []

def test_run_bench_routing_budgets_and_table(tmp_path):
    cfg = BenchConfig(methods=("real", "wmrl", "wm_only", "anchors_raw"), seeds=2, steps=4, max_steps_factor=3,
                      groups_per_step=5, group_size=4, correction=replace(BenchConfig().correction, anchor_fraction=0.2),
                      refine_evals=2, out_dir=str(tmp_path))
    FakeEnv.steps = 0
    EVAL_SEEDS.clear()
    res = run_bench(cfg, make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1", "t2"],
                    heldout_tasks=["h"], sandbox=None, evaluate=fake_eval, log=lambda s: None, fitting_cpu_s=500.0)
    from wmrl_envs.envs.autoresearch.secret import secret_fingerprint
    assert res["task_secret"] == {"fingerprint": secret_fingerprint(), "reference": True}  # conftest's
    n_exec = 0
    reals = res["methods"]["real"]["seeds"]
    for k, seed in enumerate(reals):
        rec, c = seed["records"], seed["curve"]
        assert len(rec) >= 4  # real GRPO always trains its S steps (the target is read there)
        assert rec[-1]["executions"] == len(rec) * 5 * 4  # a real execution for every rollout
        n_exec += rec[-1]["executions"]
        # compute = declared execution CPU-seconds: 20 rollouts x 20 s per step
        assert [r["compute_cpu_s"] for r in rec] == pytest.approx([400.0 * i for i in range(1, len(rec) + 1)], abs=0.5)
        assert all(r["realised_anchor_fraction"] == 1.0 for r in rec)
        # the stop target: real GRPO's mean scores untrained and at step S over the seeds so far, x 1.2
        pairs = [(e["curve"]["score"][0], e["curve"]["score"][e["curve"]["step"].index(4)]) for e in reals[:k + 1]]
        s0, sS = np.mean([p[0] for p in pairs]), np.mean([p[1] for p in pairs])
        assert seed["stop_target"] == pytest.approx(s0 + 1.2 * (sS - s0))
        # one budget in compute: it stopped at the first evaluated snapshot at or above it, not at the cap (12)
        assert seed["stopped"] == "target" and len(rec) < 12 and c["score"][-1] >= seed["stop_target"]
        assert all(sc < seed["stop_target"] for st, sc in zip(c["step"], c["score"]) if 4 <= st < c["step"][-1])
        assert seed["snapshot"] == {"last": len(rec), "steps": 4}
    for name in ("wmrl", "anchors_raw", "wm_only"):
        for seed, real in zip(res["methods"][name]["seeds"], reals):
            rec, c = seed["records"], seed["curve"]
            if name != "wm_only":  # one anchor group of 5 per step (0.2 * 5 = 1): executions = anchor groups * G
                assert all(r["anchor_groups"] == r["step"] for r in rec)
                assert rec[-1]["executions"] == 4 * rec[-1]["anchor_groups"]
                assert rec[-1]["realised_anchor_fraction"] == pytest.approx(0.2)
                assert [r["compute_cpu_s"] for r in rec] == pytest.approx([80.0 * i for i in range(1, len(rec) + 1)], abs=0.5)
            else:
                assert rec[-1]["executions"] == 0 and rec[-1]["cpu_seconds"]["execution"] == 0.0
            n_exec += rec[-1]["executions"]
            # its budget is real GRPO's compute to the same seed's stop target; it stopped at that target
            assert seed["budgets"] == {"compute_real_to_stop_target": real["records"][-1]["compute_cpu_s"]}
            assert seed["stop_target"] == real["stop_target"]
            assert seed["stopped"] == "target" and c["score"][-1] >= seed["stop_target"] > max(c["score"][:-1])
            # evaluated at step 1 and its last step, and whenever its compute grew 1.5-fold since the last
            # evaluation: between two evaluated steps a < b, the step before b had not yet grown 1.5-fold
            comp = [0.0] + [r["compute_cpu_s"] for r in rec]
            assert {0, 1, len(rec)} <= set(c["step"])
            if name != "wm_only":  # (the fake world model's compute is ~0: it is evaluated at almost every step)
                assert all(comp[b - 1] < 1.5 * comp[a] * 0.99 for a, b in zip(c["step"][1:], c["step"][2:]))
    assert FakeEnv.steps == n_exec  # every execution charged is one real env step
    sp = res["speedup"]
    real_curves = [s["curve"] for s in res["methods"]["real"]["seeds"]]
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
    head, sens, costs, last_t = table.split("### ")[0:4]
    assert sens.startswith("Sensitivity to the target")
    # no equal-compute table: a method stopped at the target has no snapshot at another method's budget
    assert "Equal compute" not in table and last_t.startswith("Each method's last step")
    assert "realised anchor fraction" in costs
    assert (tmp_path / "score_vs_compute.png").exists() and (tmp_path / "rho_calibration.png").exists()
    assert format_table(res, "last").count("\n") == 2 + len(cfg.methods)
    # every evaluation of one bench seed draws the same random numbers, seeds differ
    assert len(set(EVAL_SEEDS)) == 2 and None not in EVAL_SEEDS


def test_unknown_method():
    with pytest.raises(ValueError, match="unknown methods"):
        run_bench(BenchConfig(methods=("nope",)), make_agent=FakeAgent, make_env=FakeEnv, world_model=None,
                  train_tasks=["t"], heldout_tasks=["h"], sandbox=None)


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
    assert rec[-1]["cpu_unmeasured"] == len(rec) * 5 * 4 and rec[-1]["cpu_seconds"]["execution"] == 0.0
    n = np.mean([e["records"][-1]["cpu_unmeasured"] for e in res["methods"]["real"]["seeds"]])  # mean per seed
    assert "Warning: compute understated" in table and f"GRPO, real execution {n:.0f}" in table


def test_tables_without_their_budget_are_left_out(tmp_path):
    _, table = _bench(tmp_path, methods=("real", "anchors_raw"))
    # methods stopped at the target have no equal-compute snapshots; the last step's table is there
    assert "Equal compute" not in table and "Each method's last step" in table
    with pytest.raises(ValueError, match="has no real-execution GRPO.*add real"):  # nothing to measure against
        _bench(tmp_path / "b", methods=("wmrl", "wm_only"))


def test_a_seed_stopped_by_the_step_cap_is_not_said_to_be_beyond_the_budget(tmp_path):
    class AntiWM:  # ranks actions backwards: the world-model groups pull the policy down
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=1.0 - float(a)) for a in actions]

    cfg = BenchConfig(methods=("real", "wm_only"), seeds=2, steps=4, max_steps_factor=2, groups_per_step=5,
                      group_size=4, refine_evals=0, out_dir=str(tmp_path))
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


def test_report_of_a_stopped_run_keeps_the_seeds_every_method_finished(tmp_path):
    from agents.cli import main

    cfg = BenchConfig(methods=("real", "wmrl"), seeds=2, steps=3, max_steps_factor=2, groups_per_step=5, group_size=4,
                      correction=replace(BenchConfig().correction, anchor_fraction=0.2),
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


def test_out_of_reach_real_grpo_trains_to_the_cap_and_the_others_to_its_compute(tmp_path):
    """The step cap is a safeguard: with a stop target out of reach real GRPO trains to it (12 = 3 x S),
    the others until they have spent real GRPO's compute on the same seed (past it they cannot be
    cheaper; their own cap is groups per step times real GRPO's); the target is still read from real
    GRPO's curve at step S."""
    res, table = _bench(tmp_path, stop_gain=50.0, methods=("real", "wmrl", "anchors_raw"))
    real = res["methods"]["real"]["seeds"]
    for e in real:
        assert len(e["records"]) == 12 and e["stopped"] == "step cap" and e["snapshot"]["steps"] == 4
        assert e["compute_at"]["steps"] == pytest.approx(1600.0, abs=0.5)  # 4 steps x 20 rollouts x 20 CPU-s
    for name in ("wmrl", "anchors_raw"):
        for e, r in zip(res["methods"][name]["seeds"], real):
            # 4800 CPU-s: 60 steps of one anchor group; their own cap is 5 (groups per step) x 12 = 60 steps
            budget = r["records"][-1]["compute_cpu_s"]
            assert e["budgets"]["compute_real_to_stop_target"] == budget and len(e["records"]) == 60
            assert e["records"][-1]["compute_cpu_s"] >= budget
    class AntiWM:  # ranks actions backwards: its 4 groups a step outweigh the one anchor group
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=1.0 - float(a)) for a in actions]

    cfg = fake_config(methods=("real", "anchors_raw"), seeds=1, steps=4, max_steps_factor=40, refine_evals=0,
                      out_dir=str(tmp_path / "b"))
    res2 = run_bench(cfg, **run_kw(world_model=AntiWM()))
    e, r = res2["methods"]["anchors_raw"]["seeds"][0], res2["methods"]["real"]["seeds"][0]
    assert r["stopped"] == "target"
    assert e["stopped"] == "compute budget" and e["records"][-1]["compute_cpu_s"] >= r["records"][-1]["compute_cpu_s"]
    assert e["records"][-2]["compute_cpu_s"] < r["records"][-1]["compute_cpu_s"]
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

    cfg = BenchConfig(methods=("real", "real_mid_batch", "real_anchor_batch", "wm_only", "wmrl", "wmrl_learned"), seeds=3,
                      steps=4, max_steps_factor=3, groups_per_step=5, group_size=4,
                      correction=replace(BenchConfig().correction, anchor_fraction=0.2),
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
    for name in ("real", "real_mid_batch", "real_anchor_batch", "wmrl_learned"):
        row = sp["methods"][name]
        assert not row["fitting_charged"] and row["total_ctt"] == row["ctt"]
    # real GRPO at the anchor groups' batch: round(0.2 x 5) = 1 group of 4 rollouts per step
    # and at the middle batch, round(sqrt(1 x 5)) = 2 groups
    for name, groups in (("real_anchor_batch", 1), ("real_mid_batch", 2)):
        for e in res["methods"][name]["seeds"]:
            assert [r["executions"] for r in e["records"]] == [groups * 4 * r["step"] for r in e["records"]]
    # a fresh learned world model per seed, taught by its own anchor groups (one a step), its refits on the
    # ledger and in the step records
    n_steps = [len(e["records"]) for e in res["methods"]["wmrl_learned"]["seeds"]]
    assert len(made) == 3 and [wm.n_observed_groups for wm in made] == n_steps
    assert all(wm.n_refits >= n - 1 for wm, n in zip(made, n_steps))
    for e, wm in zip(res["methods"]["wmrl_learned"]["seeds"], made):
        assert e["records"][-1]["world_model_refits"] == wm.n_refits
    for e in res["methods"]["wmrl_learned"]["seeds"]:
        assert e["records"][-1]["cpu_seconds"]["world_model"] > 0
    reals = ("real", "real_mid_batch", "real_anchor_batch")
    best = min(reals, key=lambda n: (np.median(sp["methods"][n]["total_ctt"]), reals.index(n)))
    assert sp["best_real"] == best
    for name in ("wm_only", "wmrl", "wmrl_learned"):
        row = sp["methods"][name]
        want = speedup(sp["methods"][best]["total_ctt"], row["total_ctt"], n_boot=10_000)
        assert row["speedup_over_best_real"]["point"] == want.point
        assert row["speedup_total"]["point"] == speedup(sp["methods"]["real"]["total_ctt"], row["total_ctt"]).point
    # the goal's other comparison: over world model only, both with their fitting counted, paired by seed
    for name in ("wmrl", "wmrl_learned"):
        want = speedup(sp["methods"]["wm_only"]["total_ctt"], sp["methods"][name]["total_ctt"], n_boot=10_000)
        got = sp["methods"][name]["speedup_over_wm_only"]
        assert (got["point"], got["low"], got["high"]) == (want.point, want.low, want.high)
        assert sp["sensitivity"]["0.9"]["methods"][name]["speedup_over_wm_only"]["point"] == want.point
    assert all(sp["methods"][n]["speedup_over_wm_only"] is None for n in ("real", "real_mid_batch", "wm_only"))
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
    assert "GRPO, real execution, middle batch" in table
    assert "10 executions × this run's own 20.00 CPU-s per execution = 200 CPU-s" in table
    # each world-model method's own cost per prediction: the learned model's refits are its own
    ratios = res["costs"]["_ratio"] if "costs" in res else __import__("agents.experiments.bench_report",
                                                                     fromlist=["x"]).cost_summary(res)["_ratio"]
    assert set(ratios) == {"wm_only", "wmrl", "wmrl_learned"}
    assert ratios["wmrl_learned"]["cpu_s_per_prediction"] != ratios["wmrl"]["cpu_s_per_prediction"]
    for name in ratios:
        assert f"World model of {METHODS[name].label} : execution cost per rollout" in table


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
                      group_size=4, refine_evals=0, out_dir=str(tmp_path / "run"))
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


def test_a_run_logged_to_a_file_shows_each_step_and_evaluation(tmp_path):
    """A rich bar draws nothing outside a terminal (pytest's capture is not one): a long run
    logged to a file must still show its progress, one line per training step and evaluation."""
    cfg = BenchConfig(methods=("real", "wmrl"), seeds=1, steps=2, max_steps_factor=2, groups_per_step=5,
                      group_size=4, refine_evals=0, out_dir=str(tmp_path))
    lines: list[str] = []
    run_bench(cfg, make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1"],
              heldout_tasks=["h"], sandbox=None, evaluate=fake_eval, log=lines.append)
    steps = [s for s in lines if s.startswith("[bench] ") and " step " in s and "CPU-s" in s]
    n = {m: len(r["records"]) for m, r in ((m, json.loads((tmp_path / "results.json").read_text())["methods"][m]["seeds"][0])
                                          for m in ("real", "wmrl"))}
    assert [s.split(": ")[0] for s in steps] == [f"[bench] {m} seed 0 step {k}" for m in ("real", "wmrl")
                                                  for k in range(1, n[m] + 1)]
    assert any(s.startswith("[bench] wmrl seed 0 held-out evaluation of step ") for s in lines)
    assert any(s.startswith("[bench] seed 0: stop target ") for s in lines)


def test_the_decomposition_splits_the_saving_into_batch_size_and_world_model():
    """Issue 35's report: real GRPO → the best real batch → wmrl_learned, and the plateaus."""
    from agents.experiments.bench_report import format_decomposition

    def est(point, low, high, reached=3):
        return {"point": point, "low": low, "high": high, "n_seeds": 3, "n_reached": reached, "real_median": 1.0,
                "method_median": 1.0 if reached >= 2 else float("inf"), "confidence": 0.95, "n_boot": 100}

    def seeds(*last):
        return {"seeds": [{"eval": {"last": {"overall": v}}} for v in last]}

    res = {"config": {"groups_per_step": 10},
           "methods": {"real": seeds(60, 70, 80), "real_mid_batch": seeds(61, 71, 81), "wm_only": seeds(50, 52, 54),
                       "wmrl_learned": seeds(55, 57, 59)},
           "speedup": {"sensitivity": {
               "0.5": {"target": 45.0, "best_real": "real_mid_batch", "methods": {
                   "real": {"n_reached": 3, "speedup_total": None, "speedup_over_best_real": None},
                   "real_mid_batch": {"n_reached": 3, "speedup_total": est(1.6, 1.2, 2.1), "speedup_over_best_real": None},
                   "wm_only": {"n_reached": 3, "speedup_total": est(0.8, 0.7, 1.0),
                               "speedup_over_best_real": est(0.5, 0.4, 0.6)},
                   "wmrl_learned": {"n_reached": 3, "speedup_total": est(2.0, 1.5, 3.0),
                                    "speedup_over_best_real": est(1.3, 1.0, 1.7),
                                    "speedup_over_wm_only": est(2.5, 1.8, 3.4)}}},
               "0.7": {"target": 52.0, "best_real": "real", "methods": {
                   "real": {"n_reached": 3, "speedup_total": None, "speedup_over_best_real": None},
                   "wm_only": {"n_reached": 1, "speedup_total": est(0.0, 0.0, 1.0, 1),
                               "speedup_over_best_real": est(0.0, 0.0, 1.0, 1)},
                   "wmrl_learned": {"n_reached": 3, "speedup_total": est(2.0, 1.5, 3.0),
                                    "speedup_over_best_real": est(2.0, 1.5, 3.0),
                                    "speedup_over_wm_only": {**est(9.0, 2.0, 9.0), "real_median": float("inf")}}}},
               "1": {"target": 62.0, "best_real": "real", "methods": {
                   "real": {"n_reached": 3, "speedup_total": None, "speedup_over_best_real": None},
                   "real_mid_batch": {"n_reached": 2, "speedup_total": est(0.9, 0.0, 1.5, 2), "speedup_over_best_real": None},
                   "wm_only": {"n_reached": 1, "speedup_total": est(0.0, 0.0, 1.0, 1),
                               "speedup_over_best_real": est(0.0, 0.0, 1.0, 1)},
                   "wmrl_learned": {"n_reached": 0, "speedup_total": est(0.0, 0.0, 0.0, 0),
                                    "speedup_over_best_real": est(0.0, 0.0, 0.0, 0)}}}}}}
    text = format_decomposition(res)
    assert "Real GRPO at 10 groups a step → the best real-GRPO batch" in text
    assert ("| 50% (45.0) | GRPO, real execution, middle batch | 1.6× [1.2, 2.1] | 1.3× [1.0, 1.7] | 2.0× [1.5, 3.0] | "
            "0.5× [0.4, 0.6] | 2.5× [1.8, 3.4] |") in text
    # world model only's own median not reached: said of it, not of real GRPO
    assert "| not reached within budget (1/3 seeds reached) | world model only not reached; this method reached (3/3 seeds) |" in text
    # the 100% block was saved without the comparison (a results.json from before it): a dash
    assert text.split("| 100% (62.0)")[1].split("\n")[0].endswith("| — |")
    assert "| 100% (62.0) | GRPO, real execution | 1 (real GRPO's own batch) | not reached" in text
    assert "| GRPO, world model only | 50% 3/3, 70% 1/3, 100% 1/3 | 52.0 |" in text
    assert "| WMRL, world model learned from its anchors | 50% 3/3, 70% 3/3, 100% 0/3 | 57.0 |" in text
    assert format_decomposition({**res, "methods": {k: v for k, v in res["methods"].items() if k != "wmrl_learned"}}) == ""
