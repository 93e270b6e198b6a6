"""The known-truth sweep (wmrl bench sweep), on its quick CI preset: cells, execution counts, speedups."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from agents.cli import main
from agents.experiments.sweep import run_sweep
from agents.experiments.sweep_config import (
    BREAKING,
    REAL_AT_F,
    SWEEP_PRESETS,
    SweepConfig,
    declared_step_cost_s,
    equal_steps_cost_ratio,
    step_cap_for,
)
from agents.experiments.sweep_report import mean_over_all_seeds
from agents.experiments.sweep_run import TabularSoftmaxPolicy, run_sweep_method
from agents.grpo import GRPOPolicy

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    cfg = replace(SWEEP_PRESETS["quick"], out_dir=str(tmp_path_factory.mktemp("sweep")))
    return cfg, run_sweep(cfg, log=lambda _msg: None)


def _cell(results, method, level, fraction):
    got = [c for c in results["cells"] if (c["method"], c["level"], c["fraction"]) == (method, level, fraction)]
    assert len(got) == 1, (method, level, fraction)
    return got[0]


def test_every_cell_exists_with_a_finite_interval(quick):
    cfg, res = quick
    levels = [*cfg.levels, BREAKING]
    expected = {("wm_only", lv, None) for lv in levels} | {("wmrl", lv, f) for lv in levels for f in cfg.fractions}
    expected |= {(m, lv, 0.1) for lv in cfg.levels for m in ("debias_only", "denoise_only", "anchors_raw")}
    expected |= {(REAL_AT_F, None, f) for f in cfg.fractions}
    assert {(c["method"], c["level"], c["fraction"]) for c in res["cells"]} == expected
    for c in res["cells"]:
        assert c["n_seeds"] == cfg.seeds and len(c["compute_to_target"]) == cfg.seeds
        if c["reached"]:
            assert math.isfinite(c["low"]) and math.isfinite(c["high"]) and c["low"] <= c["speedup"] <= c["high"]
    out = Path(cfg.out_dir)
    table = (out / "table.md").read_text()
    assert "| perfect | wmrl | 0.1 |" in table and "| useless | wm_only | — | not reached" in table
    for name in ("speedup_heatmap.png", "speedup_heatmap_methods.png", "traces.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "results.json").read_text())["target"] == pytest.approx(res["target"])


def test_exact_number_of_executions_per_method(quick):
    cfg, res = quick
    real = [r for r in res["runs"] if r["method"] == "real"]
    assert len(real) == cfg.seeds
    for r in real:  # every rollout executed: steps × groups × G
        assert len(r["rho"]) == cfg.steps
        assert r["executions"] == cfg.steps * cfg.groups_per_step * cfg.group_size
        assert r["cpu_by_source"]["execution"] == pytest.approx(r["executions"] * cfg.execution_cost_s)
    anchored = [r for r in res["runs"] if r["method"] in ("wmrl", "debias_only", "denoise_only", "anchors_raw")]
    assert anchored
    for r in anchored:  # exactly the anchor groups' rollouts; every rollout predicted
        assert r["executions"] == r["anchor_groups"] * cfg.group_size
        assert r["predictions"] == len(r["rho"]) * cfg.groups_per_step * cfg.group_size
        assert r["cpu_by_source"]["world_model"] == pytest.approx(r["predictions"] * cfg.wm_cost_s)
    for r in (r for r in res["runs"] if r["method"] == "wm_only"):
        assert r["executions"] == 0 and r["anchor_groups"] == 0
    small = [r for r in res["runs"] if r["method"] == REAL_AT_F]
    assert len(small) == cfg.seeds * len(cfg.fractions)
    for r in small:  # real GRPO on round(f × groups) groups per step: every one of its rollouts executed
        assert r["executions"] == len(r["rho"]) * max(1, round(r["fraction"] * cfg.groups_per_step)) * cfg.group_size


def test_zero_error_world_model_reaches_close_to_the_equal_steps_cost_ratio(quick):
    # The perfect world model predicts each action's exact expected score, so a world-model group's
    # advantages are at least as informative as a real group's; the method then learns per step as
    # real GRPO does and its speedup is the per-rollout cost ratio, up to the anchor fraction's
    # stochastic rounding and the compute of generation and update (< 1% here). 0.6 × the ratio
    # leaves room for seed-to-seed differences in the step at which the target is crossed; it is
    # not a bound (a perfect world model has no outcome noise and may need fewer steps).
    cfg, res = quick
    for f in cfg.fractions:
        c = _cell(res, "wmrl", "perfect", f)
        bound = equal_steps_cost_ratio(f, cfg.execution_cost_s, cfg.wm_cost_s)
        assert c["reached"] and c["n_reached"] == cfg.seeds
        assert 0.6 * bound <= c["speedup"] <= 1.5 * bound
        assert c["realised_fraction"] == pytest.approx(f, abs=0.05)
    wm_only = _cell(res, "wm_only", "perfect", None)
    assert wm_only["speedup"] >= 0.6 * equal_steps_cost_ratio(0.0, cfg.execution_cost_s, cfg.wm_cost_s)


def test_useless_world_model_alone_does_not_reach_the_target(quick):
    cfg, res = quick
    c = _cell(res, "wm_only", "useless", None)
    assert not c["reached"] and c["n_reached"] == 0
    assert all(math.isinf(x) for x in c["compute_to_target"])
    runs = [r for r in res["runs"] if (r["method"], r["level"]) == ("wm_only", "useless")]
    # its budget would need ~3000 steps at 1.28 CPU-s each: the safety cap stops it first, and the
    # table says so, not "within budget"
    assert all(len(r["rho"]) == cfg.step_cap == r["max_steps"] for r in runs)
    assert c["stop_reasons"] == ["step cap"] * cfg.seeds
    assert c["formatted"] == f"not reached within {cfg.step_cap} steps (step cap) (0/{cfg.seeds} seeds reached)"
    assert all(x < res["compute_budget_s"] for x in c["final_compute"])
    assert max(r["score"][-1] for r in runs) < res["target"]


def test_levels_report_measured_correlations(quick):
    _cfg, res = quick
    perfect, useless = res["levels"]["perfect"], res["levels"]["useless"]
    assert perfect["initial"]["pearson"] > 0.9 and perfect["anchors"]["pearson"] > 0.85
    assert abs(useless["initial"]["pearson"]) < 0.15 and abs(useless["anchors"]["pearson"]) < 0.15
    brk = res["levels"][BREAKING]
    assert brk["initial_before"]["pearson"] > 0.9 and abs(brk["initial_after"]["pearson"]) < 0.15


def test_breaking_world_model_loses_its_anchor_correlation_where_the_perfect_one_keeps_it(quick):
    # the same seeds and f, the same steps: only the break differs. (No assertion on ρ: it rises for
    # the perfect world model too, see docs/sweep_reference.md.)
    cfg, res = quick

    def pearson(level, steps):
        runs = sorted((r for r in res["runs"] if (r["method"], r["level"], r["fraction"]) == ("wmrl", level, 0.4)),
                      key=lambda r: r["seed"])
        assert [r["seed"] for r in runs] == list(range(cfg.seeds))
        return np.array([np.nanmean(r["anchor_pearson"][steps]) for r in runs])

    n = min(len(r["rho"]) for r in res["runs"] if r["method"] == "wmrl" and r["fraction"] == 0.4
            and r["level"] in ("perfect", BREAKING))
    assert n > cfg.break_at_step + 1
    before, after = slice(0, cfg.break_at_step), slice(cfg.break_at_step, n)
    assert np.all(pearson(BREAKING, before) > 0.8) and np.all(pearson("perfect", before) > 0.8)
    brk, perfect = pearson(BREAKING, after), pearson("perfect", after)
    assert np.all(perfect > 0.8) and np.all(np.abs(brk) < 0.3)  # per seed, after the break


def test_tabular_policy_is_a_grpo_policy():
    p = TabularSoftmaxPolicy(3, 5, seed=0)
    assert isinstance(p, GRPOPolicy)
    acts, handle = p.sample(np.array([0, 2]), 4)
    assert acts.shape == (2, 4) and handle[0].tolist() == [0] * 4 + [2] * 4
    logp, _mask, ent = p.grpo_logprobs(handle, np.array([0, 5]), with_entropy=True)
    assert logp.shape == (2, 1) and torch.allclose(logp, torch.full((2, 1), -math.log(5), dtype=torch.float64))
    assert ent is not None and torch.allclose(ent, torch.full((2, 1), math.log(5), dtype=torch.float64))


@pytest.mark.parametrize("kwargs, field", [
    ({"levels": ("nope",)}, "levels"), ({"fractions": (0.0,)}, "fractions"), ({"seeds": 0}, "seeds"),
    ({"ablation_fractions": (0.3,)}, "ablation_fractions"), ({"group_size": 1}, "group_size"),
    ({"fractions": (0.1, 0.1)}, "fractions has duplicates"), ({"levels": ("useless", "useless")}, "levels has duplicates"),
    ({"methods": ("real", "wmrl", "wmrl")}, "methods has duplicates"),
    ({"ablation_fractions": (0.1, 0.1)}, "ablation_fractions has duplicates"),
    ({"break_at_step": 25}, r"break_at_step=25 is not within real GRPO's 25 steps"),
    ({"steps": 5, "break_at_step": 6}, "break_at_step=6"),
    ({"step_cap": 10}, "step_cap"), ({"min_gain": -0.1}, "min_gain"),
])
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"SweepConfig.{field}"):
        SweepConfig(**kwargs)


def test_cli_refuses_bad_settings_with_status_2(capsys, tmp_path):
    assert main(["bench", "sweep", "--quick", "--seeds", "0"]) == 2
    # refused up front, before any run, with nothing written
    out = tmp_path / "dup"
    assert main(["bench", "sweep", "--quick", "--fractions", "0.1", "0.1", "--out-dir", str(out)]) == 2
    assert main(["bench", "sweep", "--quick", "--break-at-step", "99", "--out-dir", str(out)]) == 2
    assert not out.exists()
    # with the breaking world model off, a late break is irrelevant
    SweepConfig(breaking=False, break_at_step=99)


def test_each_run_can_spend_the_compute_budget():
    cfg = SweepConfig()
    g = cfg.groups_per_step * cfg.group_size
    assert declared_step_cost_s("real", None, cfg) == g * cfg.execution_cost_s
    assert declared_step_cost_s("wm_only", None, cfg) == pytest.approx(g * cfg.wm_cost_s)
    assert declared_step_cost_s("wmrl", 0.05, cfg) == pytest.approx(0.05 * g + g * 0.01)
    assert declared_step_cost_s(REAL_AT_F, 0.05, cfg) == 1 * cfg.group_size * cfg.execution_cost_s
    # the cap gives 25% more steps than the budget needs at the declared cost, within the safety cap
    assert step_cap_for("wmrl", 0.05, cfg, 6400.0) == math.ceil(1.25 * 6400.0 / 7.68) == 1042
    assert step_cap_for(REAL_AT_F, 0.05, cfg, 6400.0) == 1000
    assert step_cap_for("wm_only", None, cfg, 6400.0) == cfg.step_cap
    # an anchored run with a useless world model stops at the compute budget, not at a step count
    budget = 600.0
    run = run_sweep_method("wmrl", "useless", 0.4, 0, cfg, max_steps=step_cap_for("wmrl", 0.4, cfg, budget),
                           target=2.0, compute_budget_s=budget)
    assert run.stop_reason == "compute budget" and run.compute[-1] >= budget and len(run.rho) < run.max_steps
    capped = run_sweep_method("wm_only", "useless", None, 0, cfg, max_steps=5, target=2.0, compute_budget_s=budget)
    assert capped.stop_reason == "step cap" and len(capped.rho) == 5
    reached = run_sweep_method("wmrl", "perfect", 0.4, 0, cfg, max_steps=50, target=0.0, compute_budget_s=budget)
    assert reached.stop_reason == "target" and len(reached.rho) == 1


def test_not_reached_cells_say_which_limit_stopped_them(tmp_path):
    # a budget of 5% of real GRPO's compute: WMRL at f=0.4 spends it in one step; world model only,
    # at 1.28 CPU-s a step, would need 40 steps and the safety cap of 20 stops it first
    cfg = SweepConfig(levels=("useless",), fractions=(0.4,), methods=("real", "wm_only", "wmrl"), seeds=2, steps=8,
                      breaking=False, real_at_f=False, max_compute_factor=0.05, step_cap=20, n_boot=100,
                      correlation_groups=32, workers=1, out_dir=str(tmp_path))
    res = run_sweep(cfg, log=lambda _msg: None)
    wmrl, wm_only = _cell(res, "wmrl", "useless", 0.4), _cell(res, "wm_only", "useless", None)
    assert wmrl["stop_reasons"] == ["compute budget"] * 2
    assert wmrl["formatted"] == "not reached within budget (0/2 seeds reached)"
    assert wm_only["stop_reasons"] == ["step cap"] * 2
    assert wm_only["formatted"] == "not reached within 20 steps (step cap) (0/2 seeds reached)"
    table = (tmp_path / "table.md").read_text()
    assert "| useless | wmrl | 0.4 | not reached within budget (0/2 seeds reached) | 0/2 | 0 / 2 / 0 |" in table
    assert "| useless | wm_only | — | not reached within 20 steps (step cap) (0/2 seeds reached) | 0/2 | 0 / 0 / 2 |" in table


def test_a_sweep_without_real_improvement_stops_before_the_other_methods(tmp_path):
    cfg = SweepConfig(levels=("perfect",), fractions=(0.4,), methods=("real", "wmrl"), seeds=1, steps=2, lr=1e-12,
                      breaking=False, real_at_f=False, workers=1, out_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"did not improve by more than min_gain=0.01; there is no target"):
        run_sweep(cfg, log=lambda _msg: None)
    assert not (tmp_path / "results.json").exists()


def test_traces_average_only_the_steps_every_seed_ran():
    runs = [{"rho": [1.0, 2.0, 3.0]}, {"rho": [3.0, 4.0, 5.0, 100.0, 100.0]}, {"rho": [None, 2.0, 4.0, 6.0]}]
    assert mean_over_all_seeds(runs, "rho").tolist() == [2.0, 8.0 / 3.0, 4.0]
    assert mean_over_all_seeds([], "rho").size == 0


def test_a_run_is_reproducible_from_its_seed():
    from agents.experiments.sweep_run import run_sweep_method

    cfg = SweepConfig(outcome_noise_std=0.2)
    a = run_sweep_method("wmrl", "mild_noise", 0.2, 3, cfg, max_steps=4)
    b = run_sweep_method("wmrl", "mild_noise", 0.2, 3, cfg, max_steps=4)
    c = run_sweep_method("wmrl", "mild_noise", 0.2, 4, cfg, max_steps=4)
    assert a.score == b.score and a.executions == b.executions and a.rho == b.rho
    assert a.score != c.score


def test_a_stopped_sweep_ends_its_worker_processes_at_once():
    """`wmrl bench sweep` and `wmrl bench advisor` run their jobs in 2 worker processes by default.
    A stop (Ctrl-C, `kill PID`) must end them at once: the concurrent.futures pool they used first
    ran every job already queued (here 4 rounds of 4 s: 16 s; measured 9.2 s against 6.3 s for 3
    rounds of 3 s, the workers' spawn taking about 3 s on a loaded 2-core machine)."""
    import multiprocessing
    import time

    from agents.experiments.sweep_run import map_in_processes

    assert map_in_processes(abs, [-3, 1, -2], 2) == [3, 1, 2]  # in the items' order

    def stop():
        raise KeyboardInterrupt("stopped after the first job")

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        map_in_processes(time.sleep, [4.0] * 8, 2, on_result=stop)
    assert time.monotonic() - t0 < 12.0  # one round (4 s) and the workers' start, not all four rounds
    assert multiprocessing.active_children() == []
