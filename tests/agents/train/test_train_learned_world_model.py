"""``wmrl train --world-model learned-policy`` on the tiny preset (issue 28), killed after its first
step and resumed: the learned world model is out of sample in the main job (every anchor group is
predicted before its outcome is observed), its features do not drift as the policy trains, its
state survives the checkpoint, its refits are charged to the world model's ledger, and the summary
gives its name, its within-group r with a CI, the cost split and the verdicts, as strict JSON."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from train_crash import no_nan, train_killed_after_step_0

pytestmark = pytest.mark.slow


def test_bad_world_model_settings_fail_clearly(tmp_path, capsys):
    from agents.cli import main
    from agents.train.config import TrainConfig, validate

    with pytest.raises(ValueError, match=r"world_model must be one of judge, learned-policy, learned-encoder"):
        validate(TrainConfig(world_model="learned"))
    with pytest.raises(ValueError, match=r"drop --judge-model, or pass --world-model judge"):
        validate(TrainConfig(world_model="learned-encoder", judge_model="smollm2-135m"))
    run = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--run-dir", str(run), "--world-model", "nope"]) == 2
    assert "nope" in capsys.readouterr().err and not run.exists()


def test_tiny_train_with_the_learned_policy_world_model(tmp_path, monkeypatch):
    import agents.train.build as build
    from agents.cli import main

    events: list[tuple[str, tuple]] = []
    models: list = []
    probe = ([{"task_id": "credit-default"}], ["import x\nmodel = Ridge(alpha=1.0)\n"])
    original_build = build.build_world_model

    def spying_build(cfg, policy, tokenizer):  # the real world model, its predict/observe recorded
        wm = original_build(cfg, policy, tokenizer)
        predict, observe = wm.predict, wm.observe

        def spy_predict(contexts, actions):
            events.append(("predict", tuple(actions)))
            return predict(contexts, actions)

        def spy_observe(contexts, actions, real_scores, group_id=None):
            events.append(("observe", tuple(actions)))
            return observe(contexts, actions, real_scores, group_id=group_id)

        wm.predict, wm.observe = spy_predict, spy_observe
        models.append((wm, wm.featurizer(*probe)))  # the untrained policy's features of a probe pair
        return wm

    monkeypatch.setattr(build, "build_world_model", spying_build)
    run = tmp_path / "run"
    # the WMRL arm alone: the real arm has no world model to spy on
    train_killed_after_step_0(monkeypatch, ["train", "--preset", "tiny", "--run-dir", str(run), "--quiet",
                                            "--world-model", "learned-policy", "--arms", "wmrl"])
    state0 = json.loads((run / "checkpoint" / "state.json").read_text())
    learned0 = state0["wrapper"]["world_model"]
    assert learned0 is not None and learned0["n_observed_groups"] >= 1  # step 0's anchor group(s)
    assert main(["train", "--resume", str(run), "--quiet"]) == 0

    summary = json.loads((run / "summary.json").read_text(), parse_constant=no_nan)  # strict JSON
    final = json.loads((run / "checkpoint" / "state.json").read_text())["wrapper"]
    learned = final["world_model"]
    n_anchor = summary["anchor_groups"]
    assert n_anchor >= 2

    # out of sample: every group the model learned from was predicted first, before any observe
    # of it; it learned from the training anchor groups only, one observe each
    observed = [i for i, (kind, _) in enumerate(events) if kind == "observe"]
    assert len(observed) == n_anchor
    for i in observed:
        actions = events[i][1]
        predicted = [j for j, (kind, a) in enumerate(events) if kind == "predict" and a == actions]
        assert predicted and predicted[0] < i, "a group was observed before it was predicted"
        assert not any(events[j] == ("observe", actions) for j in range(predicted[0])), "its outcome was seen first"

    # the checkpoint round trip: the resumed run loaded step 0's rows and kept learning on top of them
    assert learned["n_observed_groups"] == n_anchor == summary["world_model"]["observed_groups"]
    n0 = len(learned0["real"])
    assert learned["real"][:n0] == learned0["real"] and learned["group_ids"][:n0] == learned0["group_ids"]
    assert base64.b64decode(learned["features_b64"])[: n0 * 4 * learned0["dim"]] == base64.b64decode(learned0["features_b64"])
    assert len(models) == 2  # built once per session

    # the features do not drift as the policy trains (LoRA adapters off during featurization)
    wm, probe_before = models[-1]
    np.testing.assert_allclose(wm.featurizer(*probe), probe_before, rtol=0, atol=1e-6)

    # refits are charged to the world model's ledger (CPU-seconds, no prediction counted)
    w = summary["world_model"]
    assert w["name"] == "learned-policy" and w["kind"] == "LearnedWorldModel" and w["learns"] is True
    assert w["refits"] >= 1 and w["fitted"] is True and w["fit_cpu_s"] > 0
    assert summary["cpu_seconds"]["world_model"] >= w["fit_cpu_s"]
    assert summary["world_model_predictions"] == summary["rollouts"] == 8  # refits add no prediction

    # the summary: r with its CI on the anchor groups, the cost split, real GRPO's cost, the verdicts
    r = w["within_group_r"]
    assert set(r) == {"r", "r_ci", "n_groups", "calibration", "among_valid"} and len(r["r_ci"]) == 2
    assert {"r", "r_ci", "n_groups", "n_rollouts", "world_model_varies", "calibration"} <= set(r["among_valid"])
    assert r["calibration"] == "crossfit" and r["n_groups"] <= n_anchor
    cv = summary["cost_vs_real_grpo"]["cpu_s"]
    assert set(cv["spent_by_source"]) == {"execution", "world_model", "generation", "update"}
    assert cv["spent"] == pytest.approx(sum(cv["spent_by_source"].values()))
    assert cv["execution_share_of_real_grpo"] == pytest.approx(
        summary["rollouts"] * cv["seconds_per_execution"] / cv["real_grpo"])
    verdict = summary["cost_vs_real_grpo"]["verdict"]
    if cv["saving"] < 1.0:
        assert verdict.startswith("these rollouts cost more than executing each of them")
    else:  # a saving is labelled as the fraction's arithmetic, not as evidence for the method
        assert verdict.startswith(f"these rollouts cost {cv['spent']:.0f} CPU-s") and "arithmetic" in verdict
    assert isinstance(summary["anchor_advice"]["verdict"], str)
    md = (run / "summary.md").read_text()
    assert "learned-policy (LearnedWorldModel)" in md and "cost of the same rollouts (arithmetic of the anchor fraction, not a measured saving)" in md
