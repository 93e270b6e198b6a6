"""``wmrl bench advisor --quick``: the advisor against measured speedups on the known-truth env
(the CI preset: 2 levels and a breaking world model, fractions 0.1 / 0.4 / auto, 3 seeds)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agents.experiments.advisor_check import run_advisor_check
from agents.experiments.advisor_check_config import ADVISOR_CHECK_PRESETS
from wmrl_envs.core import CostRates, predicted_speedup

pytestmark = pytest.mark.filterwarnings("ignore:anchor_fraction='auto' is experimental")


def test_quick_advisor_check_auto_reacts_to_a_break_with_a_finite_noise_scale(tmp_path):
    # issue 25's regression (b ~ 1, gamma = 0.01: f*(r) = 0 for r >= 0.1, and r's 95% upper bound over 8
    # anchor groups of 8 of a useless world model is about 0.22, so the dead band alone kept auto at the floor,
    # 0.02 from step 9 to 55); the change point (docs/method.md, "Adaptive anchor fraction") raises it again
    from dataclasses import replace

    cfg = replace(ADVISOR_CHECK_PRESETS["quick"], out_dir=str(tmp_path))
    res = run_advisor_check(cfg, log=lambda s: None)
    # the breaking world model (useless from step 4 here): the fraction does not stay at the floor as it
    # does for the perfect one; it returns near sqrt(γ b), the useless world model's optimum
    frac = res["breaking"]["auto"]["anchor_fraction"]
    assert min(frac[12:]) > 0.06


def test_quick_advisor_check(tmp_path):
    from dataclasses import replace

    cfg = replace(ADVISOR_CHECK_PRESETS["quick"], out_dir=str(tmp_path))
    res = run_advisor_check(cfg, log=lambda s: None)
    cells = {(c["level"], c["fraction"]): c for c in res["cells"]}
    assert set(cells) == {(lv, f) for lv in ("perfect", "blind_spots", "useless", "breaking") for f in (0.1, 0.4, "auto")}
    costs = CostRates(cfg.sweep.execution_cost_s, cfg.sweep.wm_cost_s)
    b = res["prediction"]["noise_batch_ratio"]  # real GRPO's gradient noise scale over its batch: about 1 here
    assert 0.3 < b < 3 and 0.3 < res["prediction"]["noise_batch_ratio_whole_runs"] < 3
    for (lv, f), c in cells.items():
        assert c["n_seeds"] == 3 and len(c["compute_to_target"]) == 3
        if f != "auto":  # the prediction is the closed form at the cell's fraction, measured r and measured b
            assert c["predicted_speedup"] == pytest.approx(predicted_speedup(f, c["r"], costs, b))
            assert c["predicted_noise_limited"] == pytest.approx(predicted_speedup(f, c["r"], costs))
            assert c["realised_fraction"] == pytest.approx(f, abs=0.03)
    assert cells[("perfect", "auto")]["r"] > 0.9 and abs(cells[("useless", "auto")]["r"]) < 0.2
    # auto goes below 0.1 for the perfect world model and above it for the useless one
    assert res["adaptive"]["perfect"]["final_fraction"] < 0.1
    # and to about sqrt(γ b) = 0.1 for the useless one (its groups are noise; fewer real groups cost few steps)
    assert 0.05 < res["adaptive"]["useless"]["final_fraction"] < 0.2
    assert res["adaptive"]["perfect"]["final_fraction"] == pytest.approx(0.02)
    p = res["prediction"]
    assert p["n_cells"] >= 4 and p["spearman"] > 0.8 and p["worst_miss"]["factor"] >= 1
    assert p["noise_limited"]["n_cells"] == p["n_cells"]
    assert (tmp_path / "table.md").read_text().count("\n") > 10 and (tmp_path / "advisor_break.png").exists()
    assert all(math.isfinite(a["vs_best"]["ratio"]) for a in res["adaptive"].values())
    # blind spots: world model only piles probability onto them; the anchored corrections do not
    bs = res["blind_spots"]
    assert bs["wm_only"]["final"] > bs["wm_only"]["initial"] + 0.1
    assert bs["wmrl f=0.1"]["final"] < bs["wm_only"]["final"] / 2 and bs["debias_only f=0.1"]["final"] < 0.1
    assert "Blind spots" in (tmp_path / "table.md").read_text()


def test_out_of_sample_check_predicts_from_a_pilot_and_keeps_the_fraction_only_baseline(tmp_path):
    # issue 25, finding 10: cells, seeds and world models the in-sample check never used; r and b from
    # a pilot of each cell (not from the cell's own runs); the fraction-only predictor 1/(f + γ) beside it
    from dataclasses import replace

    from agents.experiments.advisor_oos import parse_oos_error, parse_oos_setting
    from wmrl_envs.envs.known_truth import WORLD_MODEL_ERRORS

    cfg = replace(ADVISOR_CHECK_PRESETS["out_of_sample_quick"], out_dir=str(tmp_path))
    res = run_advisor_check_oos(cfg)
    assert res["seeds"] == [100, 101, 102] and not set(res["pilot_seeds"]) & (set(range(10)) | set(res["seeds"]))
    cells = {(c["error"], c["setting"], c["fraction"]): c for c in res["cells"]}
    assert set(cells) == {("noise_bias", s, f) for s in ("base", "wm_cost_s=0.05") for f in (0.1, 0.4)}
    (real,) = res["real"].values()  # one group size: real GRPO runs once, cost ratios share it
    b = real["noise_batch_ratio"]
    assert b is not None and 0 < b < 20
    pilots = {(p["error"], p["setting"]): p for p in res["pilots"]}
    for (e, s, f), c in cells.items():
        gamma = 0.05 if s == "wm_cost_s=0.05" else 0.01
        assert c["gamma"] == pytest.approx(gamma) and c["n_seeds"] == 3
        assert c["fraction_only"] == pytest.approx(1 / (f + gamma))
        r = pilots[(e, s)]["r"]
        assert c["r_pilot"] == r and 0.5 < r < 0.95  # the pilot's r, not the runs' own
        assert c["predicted_pilot"] == pytest.approx(predicted_speedup(f, r, CostRates(1.0, gamma), b))
        assert c["predicted_own_r"] == pytest.approx(predicted_speedup(f, c["r_runs"], CostRates(1.0, gamma), b))
        assert c["speedup"] > 1
    # r does not depend on the cost ratio: the same pilot groups at both
    assert pilots[("noise_bias", "base")]["r"] == pilots[("noise_bias", "wm_cost_s=0.05")]["r"]
    s = res["summary"]
    assert s["advisor_pilot"]["n_cells"] == s["fraction_only"]["n_cells"] == 4
    assert s["fraction_only"]["median_ratio"] > 0 and s["advisor_pilot"]["worst_miss"]["factor"] >= 1
    assert s["n_recommendations"] == 2 and 0 <= s["recommendation_hits"] <= 2
    assert all(r["recommended_grid"] in (0.1, 0.4) for r in res["recommendations"])
    assert not any(k.startswith("oos:") for k in WORLD_MODEL_ERRORS)  # registered only while running
    assert "fraction only" in (tmp_path / "table_oos.md").read_text()
    # the cells must be new: an in-sample level's name or an unknown field is refused
    with pytest.raises(ValueError, match="new name"):
        parse_oos_error("bias:bias_std=0.3")
    with pytest.raises(ValueError, match="WorldModelError"):
        parse_oos_error("mine:sharpness=2")
    with pytest.raises(ValueError, match="group_size"):
        parse_oos_setting("n_tasks=8")
    assert parse_oos_setting("group_size=16,wm_cost_s=0.0025") == {"group_size": 16, "wm_cost_s": 0.0025}


def run_advisor_check_oos(cfg):
    from agents.experiments.advisor_check import main_advisor_check

    assert cfg.out_of_sample  # main_advisor_check dispatches on it
    return main_advisor_check(cfg, log=lambda s: None)


def test_the_live_recommendation_run_is_compared_on_five_seeds_like_with_like():
    # issue 25, finding 11: the f = 0.05 run has all 5 seeds and is compared with f = 0.1 on the same
    # seeds, in CPU-seconds and in executions to the target, also with both curves read at the same steps
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("compare_runs", root / "benchmarks" / "compare_runs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ref = str(root / "results" / "bench_reference_run" / "results.json")
    f005 = str(root / "docs" / "advisor_check_run" / "f005" / "results.json")
    out = mod.main([ref, f005])
    assert out["seeds"] == 5 and out["second_fraction"] == 0.05 and round(out["target"], 1) == 59.0
    assert [round(x) for x in out["second_ctt"]] == [153, 102, 98, 93, 137]
    assert round(out["second_speedup"]["point"], 1) == 8.6 and round(out["first_speedup"]["point"], 1) == 6.7
    assert round(out["first_over_second"]["point"], 2) == 1.27 and out["first_over_second"]["low"] < 1
    assert [round(x) for x in out["second_executions"]] == [33, 28, 22, 23, 40]
    assert out["executions_first_over_second"]["low"] > 1.3  # fewer executions on every seed
    same = mod.main([ref, f005, "--same-steps"])  # seeds 0-2 of f = 0.05 were not refined: read all at those steps
    assert [round(x) for x in same["second_ctt"]] == [153, 102, 98, 93, 143]
    assert round(same["first_median"]) == 128 and round(same["first_over_second"]["point"], 2) == 1.25


def test_out_of_sample_check_prices_real_grpo_at_smaller_batches_beside_wmrl(tmp_path):
    # issue 39, items 1 and 4: real GRPO at a smaller batch is a cell of its own, predicted by the same
    # model (q = B'/B, Adam's step law), and a choice the recommendation weighs against WMRL's fractions
    from dataclasses import replace

    from wmrl_envs.core.advisor_model import steps_ratio

    base = ADVISOR_CHECK_PRESETS["out_of_sample_quick"]
    cfg = replace(base, out_dir=str(tmp_path), oos=replace(base.oos, real_batches=(2, 64)))
    res = run_advisor_check_oos(cfg)
    (real,) = res["real"].values()
    b = real["noise_batch_ratio"]
    reals = [c for c in res["cells"] if c["kind"] == "real"]
    assert [c["groups_per_step"] for c in reals] == [2]  # 64 is not below the 8 groups per step: left out
    (c,) = reals
    assert c["predicted_pilot"] == pytest.approx(steps_ratio(2 / 8, b) / (2 / 8))
    assert c["predicted_pilot_sgd"] == pytest.approx(steps_ratio(2 / 8, b, "sgd") / (2 / 8))
    assert c["fraction_only"] == pytest.approx(4.0) and c["speedup"] > 1
    s = res["summary"]
    assert s["advisor_pilot"]["n_cells"] == 5 and s["advisor_pilot_wmrl_only"]["n_cells"] == 4
    for r in res["recommendations"]:
        assert r["advisor_choice"] in ("WMRL f = 0.1", "WMRL f = 0.4", "real, 2 groups per step", "real, 8 groups per step")
        assert isinstance(r["advisor_within_best_ci"], bool)
    assert "earlier model (SGD's step law)" in (tmp_path / "table_oos.md").read_text()
    with pytest.raises(ValueError, match="real_batches"):
        run_advisor_check_oos(replace(cfg, oos=replace(base.oos, real_batches=(0,))))
