"""--report-to: the per-step metrics mirrored to TensorBoard / W&B (agents/train/tracking.py)."""

from __future__ import annotations

import sys
import types

import pytest

from agents.train.tracking import Tracker, check_report_to, scalars

RECORD = {"step": 3, "reward_mean": 0.25, "rho": 2.0, "realised_anchor_fraction": 0.1, "real_score_mean": None,
          "routes": ["anchor", "world_model"], "stopped": False, "loss": float("nan"),
          "ledger": {"execution": {"cpu_seconds": 12.5, "count": 8}, "world_model": {"cpu_seconds": 0.5, "count": 40}}}


def test_scalars_keep_the_finite_numbers_flattened():
    assert scalars(RECORD, "train/") == {
        "train/step": 3.0, "train/reward_mean": 0.25, "train/rho": 2.0, "train/realised_anchor_fraction": 0.1,
        "train/ledger/execution/cpu_seconds": 12.5, "train/ledger/execution/count": 8.0,
        "train/ledger/world_model/cpu_seconds": 0.5, "train/ledger/world_model/count": 40.0}


def test_unknown_or_missing_trackers_are_refused_with_the_fix(monkeypatch):
    with pytest.raises(ValueError, match="report_to must be one of none, tensorboard, wandb"):
        check_report_to("mlflow")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ValueError, match="pip install wandb"):
        check_report_to("wandb")
    check_report_to("none")


def _events(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_gets_every_scalar_at_its_step(tmp_path):
    tr = Tracker("tensorboard", tmp_path, {"seed": 0})
    sent = tr.log(RECORD, 3)
    tr.log({**RECORD, "rho": 1.5}, 4)
    tr.close()
    tr.close()  # idempotent
    assert "train/step" not in sent and sent["train/rho"] == 2.0
    ev = _events(tmp_path / "tensorboard")
    assert ev["train/rho"] == [(3, 2.0), (4, 1.5)]
    assert ev["train/ledger/execution/cpu_seconds"] == [(3, 12.5), (4, 12.5)]
    assert "train/loss" not in ev and "train/real_score_mean" not in ev  # NaN and None are not plotted


def test_wandb_run_is_continued_on_resume(tmp_path, monkeypatch):
    """W&B's client is replaced by a recorder here (no account or network in tests): what is
    checked is what the tracker asks of it — the run id kept for --resume, and the logged values."""
    calls = []

    class Run:
        id = "abc123"

        def log(self, values, step):
            calls.append(("log", step, values))

        def finish(self):
            calls.append(("finish",))

    fake = types.SimpleNamespace(init=lambda **kw: (calls.append(("init", kw)), Run())[1])
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setattr("agents.train.tracking.check_report_to", lambda r: None)
    tr = Tracker("wandb", tmp_path, {"seed": 0})
    tr.log(RECORD, 3)
    tr.close()
    assert (tmp_path / "wandb_run_id").read_text() == "abc123"
    assert calls[0][1]["id"] is None and calls[0][1]["config"] == {"seed": 0}
    assert calls[1] == ("log", 3, {k: v for k, v in scalars(RECORD, "train/").items() if k != "train/step"})
    assert calls[2] == ("finish",)
    Tracker("wandb", tmp_path, resume=True).close()
    assert calls[3][1]["id"] == "abc123" and calls[3][1]["resume"] == "allow"
