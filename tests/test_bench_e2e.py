"""A tiny real benchmark run: grammar agent, MiniLM world model, bubblewrap execution."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_tiny_bench_real_components(tmp_path):
    from agents.cli import main

    out = tmp_path / "bench"
    rc = main(["bench", "--methods", "real", "wmrl", "--seeds", "1", "--steps", "2", "--max-steps-factor", "2",
               "--groups-per-step", "4", "--group-size", "3", "--eval-k", "1", "--out-dir", str(out)])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    real = res["methods"]["real"]["seeds"][0]["records"]
    wmrl = res["methods"]["wmrl"]["seeds"][0]["records"]
    # method 1 executes every rollout; WMRL one anchor group of the 4 per step (0.1 * 4 < 1)
    assert real[-1]["executions"] == 2 * 4 * 3
    assert all(r["anchor_groups"] == r["step"] for r in wmrl)
    assert wmrl[-1]["executions"] == 3 * wmrl[-1]["anchor_groups"]
    assert wmrl[-1]["seconds"]["world_model"] > 0 and real[-1]["seconds"]["world_model"] == 0
    table = (out / "table.md").read_text()
    assert "| GRPO, real execution | 1.00 |" in table and "| WMRL (debias + denoise) |" in table
    assert table.count("\n| ") >= 6  # 3 tables x (header + 2 rows)
    for seed in res["methods"].values():
        ev = seed["seeds"][0]["eval"]["steps"]
        assert 0.0 <= ev["overall"] <= 100.0 and set(ev["per_category"]) == {
            "image-classification", "tabular-classification", "tabular-regression"}
