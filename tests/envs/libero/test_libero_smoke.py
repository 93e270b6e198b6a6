"""The LIBERO-Long smoke run (examples/libero_grpo_smoke.py): real simulator, reward-mode
wrapper, tiny VLA policy and tiny Robometer, a few GRPO groups end to end."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("libero")
ROOT = Path(__file__).resolve().parents[3]


def load_example():
    spec = importlib.util.spec_from_file_location("libero_grpo_smoke", ROOT / "examples" / "libero_grpo_smoke.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["libero_grpo_smoke"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_libero_grpo_smoke_routes_withholds_and_pairs(tmp_path):
    G, groups, steps = 2, 2, 5
    s = load_example().main(["--groups", str(groups), "--group-size", str(G), "--max-steps", str(steps),
                             "--image-size", "64", "--anchor-fraction", "0.5", "--out", str(tmp_path / "s.json")])
    recs = s["records"]
    assert sorted(r["route"] for r in recs) == ["anchor", "world_model"]  # one of each per step of 2 groups
    for r in recs:
        assert 0 <= r["init_state_id"] <= 15  # training split
        assert r["policy_steps"] == G * steps  # random actions never succeed in 5 steps
        if r["route"] == "world_model":
            assert r["success_seen_by_agent"] == [None] * G  # real success withheld
        else:
            assert r["success_seen_by_agent"] == [False] * G and r["returns"] == [0.0] * G
    assert s["simulator_steps"] == groups * G * steps  # the simulator ran in every episode
    assert s["world_model_calls"] == groups * G  # one Robometer call per episode (at its end)
    assert s["anchor_pairs"] == G  # the anchor group's (score, success) pairs
    assert (tmp_path / "s.json").exists()
