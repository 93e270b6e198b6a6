"""End to end: `wmrl train --preset tiny --world-model judge` with real sandboxed execution and the real SmolLM2
judge, killed after its first step and resumed from the checkpoint with its anchor pairs; then its
real-execution arm (trained after it, --no-concurrent-arms), killed after its first step and resumed,
and the comparison of the arms. And the default schedule: both arms side by side, the WMRL arm
killed after its first step (the real arm's process with it) and the run resumed."""

from __future__ import annotations

import json

import pytest

from train_crash import no_nan, train_killed_after_step_0

pytestmark = pytest.mark.slow


def test_tiny_train_crash_then_resume(tmp_path, monkeypatch):
    from agents.cli import main

    run = tmp_path / "run"
    train_killed_after_step_0(monkeypatch, ["train", "--preset", "tiny", "--run-dir", str(run), "--quiet",
                                            "--world-model", "judge", "--no-concurrent-arms"])
    state0 = json.loads((run / "checkpoint" / "state.json").read_text())
    assert state0["step"] == 0
    pairs0 = state0["wrapper"]["corrector"]["debiaser"]["raw"], state0["wrapper"]["corrector"]["debiaser"]["real"]
    n_exec0 = state0["wrapper"]["ledger"]["execution"]["count"]
    assert n_exec0 >= 2  # at least one anchor group of G=2 was executed for real
    assert len(pairs0[0]) >= 1

    # a bad resume target fails clearly
    assert main(["train", "--resume", str(run), "--steps", "9"]) == 2
    assert main(["train", "--resume", str(tmp_path / "nope"), "--quiet"]) == 2  # not a run folder

    # resumed, the WMRL arm finishes; the real arm (issue 36) is killed in turn after its first step
    train_killed_after_step_0(monkeypatch, ["train", "--resume", str(run), "--quiet"])
    assert (run / "summary.json").exists() and (run / "real" / "checkpoint").exists()
    assert not (run / "real" / "summary.json").exists()
    assert main(["train", "--resume", str(run), "--quiet"]) == 0
    summary = json.loads((run / "summary.json").read_text(), parse_constant=no_nan)  # strict JSON
    # the real arm: real-execution GRPO at one group per step, from the shared initial evaluation,
    # until the WMRL arm's training CPU-seconds were spent
    real = json.loads((run / "real" / "summary.json").read_text(), parse_constant=no_nan)
    assert (real["arm"], real["groups_per_step"], real["world_model_predictions"]) == ("real", 1, 0)
    assert real["real_executions"] == real["rollouts"] == 2 * real["steps_trained"] >= 2
    assert real["heldout_before"] == summary["heldout_before"]
    real_lines = [json.loads(l) for l in (run / "real" / "metrics.jsonl").read_text().splitlines()]
    trained = [r["step"] for r in real_lines if "tasks" in r]
    assert trained == list(range(real["steps_trained"]))  # the killed arm resumed without a gap or a repeat
    if real["steps_trained"] < 16:  # the cap (4x the WMRL arm's 8 groups at 2 groups per step)
        assert real_lines[-1]["stopped"] == "cpu_budget_spent"
        assert real_lines[-1]["cpu_budget_s"] == pytest.approx(summary["training_cpu_s"])
    arms = summary["arms"]
    assert arms["training_cpu_s"]["wmrl"] == pytest.approx(summary["training_cpu_s"])
    assert arms["training_cpu_s"]["real"] == pytest.approx(real["training_cpu_s"])
    mean_step = real["training_cpu_s"] / real["steps_trained"]
    assert abs(real["training_cpu_s"] - summary["training_cpu_s"]) <= mean_step  # equal compute, to a step
    assert arms["heldout"]["relative_score"]["paired"]["n_tasks"] >= 1
    assert arms["verdict"] and (run / "arms.png").stat().st_size > 1000
    assert arms["schedule"] == "after the WMRL arm"  # --no-concurrent-arms
    assert (run / "summary.md").read_text().splitlines()[2].startswith("| ARMS AT EQUAL COMPUTE")
    final = json.loads((run / "checkpoint" / "state.json").read_text())
    deb = final["wrapper"]["corrector"]["debiaser"]
    # the anchor pairs from before the kill are intact, in order, at the head of the buffer
    assert deb["raw"][: len(pairs0[0])] == pairs0[0]
    assert deb["real"][: len(pairs0[1])] == pairs0[1]
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [0, 1]
    assert summary["steps_trained"] == 2 and summary["arm"] == "wmrl"
    assert summary["training_cpu_s"] == pytest.approx(sum(summary["cpu_seconds"].values()))
    for r in lines:  # tiny: 2 groups of G = 2 per step
        assert len(r["distinct_lines"]) == 2 and all(1 <= n <= 2 for n in r["distinct_lines"])
        assert r["entropy_coef"] == 0.002  # no --entropy-floor: the configured coefficient throughout
    assert final["entropy_coef"] == 0.002
    # accounting: tiny = 2 steps x 2 groups x G=2; >= 1 anchor group per step
    assert summary["rollouts"] == 8
    from wmrl_envs.envs.autoresearch.secret import secret_fingerprint
    assert summary["task_secret"] == {"fingerprint": secret_fingerprint(), "reference": True}  # conftest's
    assert summary["groups"] == 4 and summary["anchor_groups"] >= 2
    assert summary["real_executions"] == 2 * summary["anchor_groups"]
    assert summary["world_model_predictions"] == 8
    # the judge itself ran (a pre-check alone also takes seconds and counts as a prediction):
    # every prediction is a model call or a pre-check, at least one is a model call that
    # generated tokens, and the ledger's world-model seconds contain the judge's own
    calls = summary["world_model_calls"]
    assert calls["n_model_calls"] + calls["n_precheck"] == summary["world_model_predictions"]
    assert calls["n_model_calls"] >= 1 and calls["n_generate_calls"] >= 1 and calls["tokens_generated"] > 0
    assert summary["seconds"]["world_model"] >= calls["seconds"] > 0
    assert summary["seconds"]["execution"] > 0
    assert summary["seconds"]["generation"] > 0 and summary["seconds"]["update"] > 0
    assert 0.0 <= summary["heldout_after"]["overall"] <= 100.0
    # issue 36: the tiny preset trains on the relative reward; the summary carries the copy baseline
    assert (summary["reward"], summary["baseline"]) == ("relative", "board-low")
    for when in ("before", "after"):
        cb = summary["copy_baseline"][when]
        if cb is not None:  # None only when no held-out trajectory was graded
            assert cb["copy_score"] == 0.5 and 1 <= cb["n_tasks"] <= 2 and 0.0 <= cb["share_tasks_beaten"] <= 1.0
            assert 0.0 <= cb["policy_score"] <= 1.0
    assert summary["copy_baseline"]["after"] is not None
    assert "copy the shown line" in (run / "summary.md").read_text()
    assert (run / "calibration.png").stat().st_size > 1000
    assert "realised anchor fraction" in (run / "summary.md").read_text()
    assert summary["sandbox_backend"] == "bubblewrap"  # real isolation, not the fallback
    # what the same 8 rollouts would have cost under real-execution GRPO, beside what they cost
    cv = summary["cost_vs_real_grpo"]["wall_s"]
    sec = summary["seconds"]
    assert cv["spent"] == pytest.approx(sum(sec.values()))
    assert cv["real_grpo"] == pytest.approx(8 * sec["execution"] / summary["real_executions"]
                                            + sec["generation"] + sec["update"])
    assert cv["saving"] == pytest.approx(cv["real_grpo"] / cv["spent"])
    # the advisor speaks on the run's own anchor groups (too few in a tiny run to advise)
    assert "not enough anchor groups" in summary["anchor_advice"]["verdict"]
    assert "advisor's verdict" in (run / "summary.md").read_text()
    # `wmrl advise --run-dir` reads the same anchor groups back from the checkpoint
    assert main(["advise", "--run-dir", str(run), "--min-groups", "2", "--out-dir", str(tmp_path / "adv")]) == 0
    adv = json.loads((tmp_path / "adv" / "advice.json").read_text())
    assert adv["n_groups"] <= summary["anchor_groups"] and "run folder" in adv["source"]
    assert adv["costs"]["execution_s"] > 0 and (tmp_path / "adv" / "advice.png").exists()
    # starting a new run in a used folder, or resuming a finished one, is refused
    assert main(["train", "--preset", "tiny", "--run-dir", str(run), "--quiet"]) == 2
    assert main(["train", "--resume", str(run), "--quiet"]) == 2


def test_tiny_train_arms_side_by_side_killed_and_resumed(tmp_path, monkeypatch):
    import multiprocessing

    from agents.cli import main
    from agents.train.arms import TRAINING_SOURCES, budget_reached, read_progress

    run = tmp_path / "run"
    train_killed_after_step_0(monkeypatch, ["train", "--preset", "tiny", "--run-dir", str(run), "--quiet"])
    assert not multiprocessing.active_children()  # the real arm's process ended with the WMRL arm
    assert read_progress(run)["final"] is False
    assert main(["train", "--resume", str(run), "--quiet"]) == 0
    summary = json.loads((run / "summary.json").read_text(), parse_constant=no_nan)
    real = json.loads((run / "real" / "summary.json").read_text(), parse_constant=no_nan)
    arms = summary["arms"]
    assert arms["schedule"] == "beside the WMRL arm (one process each)"
    assert real["heldout_before"] == summary["heldout_before"]  # the WMRL arm's initial evaluation, shared
    progress = read_progress(run)
    assert progress["final"] and progress["training_cpu_s"] == pytest.approx(summary["training_cpu_s"])
    assert progress["steps_trained"] == summary["steps_trained"] == 2
    real_lines = [json.loads(l, parse_constant=no_nan) for l in (run / "real" / "metrics.jsonl").read_text().splitlines()]  # strict JSON
    trained = [r for r in real_lines if "tasks" in r]
    assert [r["step"] for r in trained] == list(range(real["steps_trained"])) and real["steps_trained"] >= 1
    if real["steps_trained"] < 16:  # it stopped where a run after the WMRL arm would have
        stop = real_lines[-1]
        assert stop["stopped"] == "cpu_budget_spent" and stop["cpu_budget_s"] == pytest.approx(summary["training_cpu_s"])
        # the rule the loop applied: the next step estimated from the last steps (at most 3) trained in
        # this process, each step's cost read from the training ledger its metrics line carries
        spent = [sum(r["ledger"].get(k, {}).get("cpu_seconds", 0.0) for k in TRAINING_SOURCES) for r in trained]
        costs = [b - a for a, b in zip([0.0] + spent[:-1], spent)]
        est = stop["next_step_cpu_s"]
        assert est is not None and est > 0
        assert any(est == pytest.approx(sum(costs[-m:]) / m) for m in (1, 2, 3) if m <= len(costs))
        assert stop["training_cpu_s"] == pytest.approx(spent[-1]) == pytest.approx(real["training_cpu_s"])
        assert budget_reached(stop["training_cpu_s"], real["steps_trained"], summary["training_cpu_s"], est)
        # equal compute, as far as the rule guarantees: short of the budget by at most half the estimate,
        # over it by less than the last step
        budget = summary["training_cpu_s"]
        assert budget - real["training_cpu_s"] <= est / 2 + 1e-6
        assert real["training_cpu_s"] - budget < costs[-1]
    assert arms["training_cpu_s"]["real"] == pytest.approx(real["training_cpu_s"])
    assert "CPU budget reached" in (run / "real-arm.log").read_text() or real["steps_trained"] == 16


@pytest.mark.parametrize(
    "args",
    [
        ["--steps", "0"],
        ["--anchor-fraction", "2"],
        ["--group-size", "1"],
        ["--sandbox", "nope"],
        ["--min-pairs", "0"],
        ["--rho-target", "9"],
        ["--exec-memory-mb", "0"],
        ["--exec-wall-time-s", "0"],
        ["--temperature", "-1"],
        ["--max-new-tokens", "0"],
    ],
)
def test_bad_settings_fail_fast_without_a_run_folder(tmp_path, args, capsys):
    from agents.cli import main

    run = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--run-dir", str(run), *args]) == 2
    assert "error:" in capsys.readouterr().err
    assert not run.exists()


def test_a_run_dir_under_a_file_fails_before_anything_is_built(tmp_path, capsys):
    from agents.cli import main

    (tmp_path / "results.json").write_text("{}")
    assert main(["train", "--preset", "tiny", "--run-dir", str(tmp_path / "results.json" / "run")]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and "results.json" in err and "choose another --run-dir" in err
    assert (tmp_path / "results.json").read_text() == "{}"


def test_a_refused_start_announces_no_real_arm(tmp_path, capsys):
    """A setting refused, or a --run-dir that holds a run, used to print 'real-execution GRPO arm:
    training beside this one ... (log: ...)' first, for a process that never ran."""
    from agents.cli import main

    assert main(["train", "--preset", "tiny", "--run-dir", str(tmp_path / "a"), "--steps", "0"]) == 2
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text("{}")
    assert main(["train", "--preset", "tiny", "--run-dir", str(tmp_path / "b")]) == 2
    assert main(["train", "--resume", str(tmp_path / "missing")]) == 2
    out = capsys.readouterr()
    assert "real-execution GRPO arm" not in out.out + out.err
    assert "already holds a run" in out.err and "no such run folder" in out.err
    assert not (tmp_path / "a").exists()
