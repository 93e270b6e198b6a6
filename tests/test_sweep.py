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
from agents.experiments.sweep import (
    BREAKING,
    REAL_AT_F,
    SWEEP_PRESETS,
    SweepConfig,
    TabularSoftmaxPolicy,
    cost_bound,
    run_sweep,
)
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


def test_zero_error_world_model_reaches_close_to_the_cost_bound(quick):
    # The perfect world model predicts each action's exact expected score, so a world-model group's
    # advantages are at least as informative as a real group's; the method then learns per step as
    # real GRPO does and its speedup is the per-rollout cost ratio, up to the anchor fraction's
    # stochastic rounding and the compute of generation and update (< 1% here). 0.6 × the bound
    # leaves room for seed-to-seed differences in the step at which the target is crossed.
    cfg, res = quick
    for f in cfg.fractions:
        c = _cell(res, "wmrl", "perfect", f)
        bound = cost_bound(f, cfg.execution_cost_s, cfg.wm_cost_s)
        assert c["reached"] and c["n_reached"] == cfg.seeds
        assert 0.6 * bound <= c["speedup"] <= 1.5 * bound
        assert c["realised_fraction"] == pytest.approx(f, abs=0.05)
    wm_only = _cell(res, "wm_only", "perfect", None)
    assert wm_only["speedup"] >= 0.6 * cost_bound(0.0, cfg.execution_cost_s, cfg.wm_cost_s)


def test_useless_world_model_alone_does_not_reach_the_target(quick):
    _cfg, res = quick
    c = _cell(res, "wm_only", "useless", None)
    assert not c["reached"] and c["n_reached"] == 0
    assert all(math.isinf(x) for x in c["compute_to_target"])
    runs = [r for r in res["runs"] if (r["method"], r["level"]) == ("wm_only", "useless")]
    assert all(len(r["rho"]) == res["max_steps"] for r in runs)  # it trained to the cap: not for lack of steps
    assert max(r["score"][-1] for r in runs) < res["target"]


def test_levels_report_measured_correlations(quick):
    _cfg, res = quick
    perfect, useless = res["levels"]["perfect"], res["levels"]["useless"]
    assert perfect["initial"]["pearson"] > 0.9 and perfect["anchors"]["pearson"] > 0.85
    assert abs(useless["initial"]["pearson"]) < 0.15 and abs(useless["anchors"]["pearson"]) < 0.15
    brk = res["levels"][BREAKING]
    assert brk["initial_before"]["pearson"] > 0.9 and abs(brk["initial_after"]["pearson"]) < 0.15


def test_breaking_world_model_raises_rho_after_the_break(quick):
    cfg, res = quick
    runs = [r for r in res["runs"] if (r["method"], r["level"], r["fraction"]) == ("wmrl", BREAKING, 0.4)]
    before = np.nanmean([np.nanmean(r["anchor_pearson"][:cfg.break_at_step]) for r in runs])
    after = np.nanmean([np.nanmean(r["anchor_pearson"][cfg.break_at_step:]) for r in runs])
    assert before > 0.8 and abs(after) < 0.3
    assert np.mean([r["rho"][-1] for r in runs]) > np.mean([r["rho"][cfg.break_at_step - 1] for r in runs])


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
])
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"SweepConfig.{field}"):
        SweepConfig(**kwargs)


def test_cli_refuses_bad_settings_with_status_2(capsys):
    assert main(["bench", "sweep", "--quick", "--seeds", "0"]) == 2


def test_a_run_is_reproducible_from_its_seed():
    from agents.experiments.sweep import run_sweep_method

    cfg = SweepConfig(outcome_noise_std=0.2)
    a = run_sweep_method("wmrl", "mild_noise", 0.2, 3, cfg, max_steps=4)
    b = run_sweep_method("wmrl", "mild_noise", 0.2, 3, cfg, max_steps=4)
    c = run_sweep_method("wmrl", "mild_noise", 0.2, 4, cfg, max_steps=4)
    assert a.score == b.score and a.executions == b.executions and a.rho == b.rho
    assert a.score != c.score
