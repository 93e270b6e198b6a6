"""``wmrl bench advisor --quick``: the advisor against measured speedups on the known-truth env
(the CI preset: 2 levels and a breaking world model, fractions 0.1 / 0.4 / auto, 3 seeds)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agents.experiments.advisor_check import ADVISOR_CHECK_PRESETS, run_advisor_check
from wmrl_envs.core import CostRates, predicted_speedup

pytestmark = pytest.mark.filterwarnings("ignore:anchor_fraction='auto' is experimental")


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
    # the breaking world model (useless from step 4 here): the fraction does not fall to the floor as it
    # does for the perfect one; it stays near sqrt(γ b), the useless world model's optimum
    frac = res["breaking"]["auto"]["anchor_fraction"]
    assert res["adaptive"]["perfect"]["final_fraction"] == pytest.approx(0.02)
    assert min(frac[6:]) > 0.06
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
