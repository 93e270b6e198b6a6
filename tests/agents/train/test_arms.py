"""The real-execution arm of ``wmrl train`` (issue 36, item 4): its configuration, the stop rule at
equal compute, the task-weighted cost per execution and the comparison of the arms."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

import pytest

from agents.train.arms import (CpuBudget, arms_rows, budget_reached, compare_arms, paired_over_tasks, publish_progress,
                               read_progress, real_arm_config)
from agents.train.config import TrainConfig, load_config, validate
from agents.train.summary import cost_vs_real_grpo, task_weighted_execution_cost
from wmrl_envs.core import CorrectionConfig, CostLedger


def test_real_arm_config_is_real_grpo_at_the_anchor_batch():
    cfg = TrainConfig()  # 8 steps x 4 groups, anchor fraction 0.25
    real = real_arm_config(cfg, 1234.5)
    assert (real.world_model, real.correction.anchor_fraction, real.groups_per_step) == ("none", 1.0, 1)
    assert real.cpu_budget_s == 1234.5 and real.arms == ("wmrl",)
    assert real.steps == 4 * 8 * 4  # a cap of 4x the WMRL arm's groups, in steps of one group
    # everything that is not the arm's definition is the WMRL arm's
    assert (real.seed, real.group_size, real.lr, real.model, real.eval_k) == (cfg.seed, 8, cfg.lr, cfg.model, cfg.eval_k)
    validate(real)
    # an explicit batch, and "auto" takes its start fraction
    assert real_arm_config(TrainConfig(real_groups_per_step=2), 1.0).groups_per_step == 2
    auto = TrainConfig(groups_per_step=10, correction=CorrectionConfig(anchor_fraction="auto", auto_start_fraction=0.3))
    assert real_arm_config(auto, 1.0).groups_per_step == 3
    for bad in (0.0, -1.0, float("nan"), "1"):
        with pytest.raises(ValueError, match="cpu_budget_s"):
            real_arm_config(cfg, bad)
    assert real_arm_config(cfg, None).cpu_budget_s is None  # side by side: the budget is followed (CpuBudget)


def _real_arm_stop(budget, real_step_cpu):
    """The real arm's loop under ``budget``: steps of ``real_step_cpu[k]`` CPU-s while the rule
    lets it start one; returns (steps trained, CPU-s spent)."""
    spent, steps = 0.0, 0
    while steps < len(real_step_cpu) and not budget.stop_before(spent, steps):
        spent += real_step_cpu[steps]
        steps += 1
    return steps, spent


@pytest.mark.parametrize("wmrl_steps,real_steps", [
    ([60.0] * 8, [37.0] * 40),                   # the default run's shape: one WMRL step ~ 1.6 real steps
    ([5.0, 80.0, 3.0, 50.0], [11.0, 9.0, 30.0] * 10),
    ([10.0], [4.0] * 20),
    ([100.0, 100.0], [150.0, 150.0, 150.0]),     # the real arm's step is the longer one
])
def test_a_followed_budget_stops_the_real_arm_where_the_final_budget_would(tmp_path, wmrl_steps, real_steps):
    """Side by side, the real arm sees only the WMRL arm's CPU-seconds so far; it must stop at the
    same step as a run after the WMRL arm (the final total known), waiting where it cannot tell."""
    published = [0.0]
    for x in wmrl_steps:
        published.append(published[-1] + x)
    state = {"k": 0}

    def wmrl_arm_advances():  # called once per wait: the WMRL arm finishes its next step
        state["k"] += 1
        k = min(state["k"], len(wmrl_steps))
        publish_progress(tmp_path, eval_before={"overall": 1.0}, spent=published[k], steps_trained=k,
                         final=k == len(wmrl_steps))
        return True

    publish_progress(tmp_path, eval_before={"overall": 1.0}, spent=0.0, steps_trained=0, final=False)
    followed = CpuBudget(follow=tmp_path, poll_s=0.0, alive=wmrl_arm_advances)
    assert _real_arm_stop(followed, real_steps) == _real_arm_stop(CpuBudget(published[-1]), real_steps)
    assert followed.limit() == (pytest.approx(published[-1]), True)
    assert read_progress(tmp_path)["eval_before"] == {"overall": 1.0}


def test_a_followed_budget_waits_and_fails_clearly_when_the_wmrl_arm_is_gone(tmp_path):
    assert CpuBudget(follow=tmp_path).limit() == (0.0, False)  # nothing published yet: the first step runs
    assert CpuBudget(follow=tmp_path).stop_before(0.0, 0) is False
    publish_progress(tmp_path, eval_before={}, spent=50.0, steps_trained=1, final=False)
    calls = []
    gone = CpuBudget(follow=tmp_path, poll_s=0.0, alive=lambda: calls.append(1) or len(calls) < 3)
    assert gone.stop_before(10.0, 1) is False  # 10 + 5 < 50: the WMRL arm has spent enough already
    with pytest.raises(RuntimeError, match="wmrl train --resume"):
        gone.stop_before(49.0, 1)  # cannot tell before the WMRL arm's next step, and it never comes
    assert len(calls) == 3
    # the display's estimate: the WMRL arm's mean step times its planned steps, until final
    publish_progress(tmp_path, eval_before={}, spent=100.0, steps_trained=2, final=False, steps_planned=8)
    assert CpuBudget(follow=tmp_path).estimate() == pytest.approx(400.0)
    assert CpuBudget(follow=tmp_path).limit() == (pytest.approx(100.0), False)  # the stop rule sees the lower bound
    publish_progress(tmp_path, eval_before={}, spent=300.0, steps_trained=3, final=True, steps_planned=8)
    assert CpuBudget(follow=tmp_path).estimate() == pytest.approx(300.0) and CpuBudget(50.0).estimate() == 50.0
    publish_progress(tmp_path, eval_before={}, spent=0.0, steps_trained=0, final=True)
    assert CpuBudget(follow=tmp_path).stop_before(0.0, 0) is True  # the WMRL arm trained nothing
    with pytest.raises(ValueError, match="not both"):
        CpuBudget(10.0, follow=tmp_path)


@pytest.mark.parametrize("spent,done,budget,stops", [
    (0.0, 0, 10.0, False),     # the first step always runs
    (90.0, 3, 100.0, True),    # one more step (30) would end 20 over, 10 under now: stop
    (80.0, 4, 100.0, False),   # one more (20) ends exactly at it: go
    (100.0, 1, 100.0, True),
    (1e9, 5, None, False),     # no budget
])
def test_budget_stops_at_the_whole_step_nearest_the_budget(spent, done, budget, stops):
    assert budget_reached(spent, done, budget) is stops


def test_validate_rejects_inconsistent_arms():
    for cfg, match in [
        (TrainConfig(arms=("real",)), "arms must be"),
        (TrainConfig(arms=()), "arms must be"),
        (TrainConfig(arms=("wmrl", "wmrl")), "arms must be"),  # review of session 7: a repeated arm was taken
        (TrainConfig(world_model="none", arms=("wmrl",)), "anchor-fraction 1"),
        (TrainConfig(world_model="none", correction=CorrectionConfig(anchor_fraction=1.0)), "--arms wmrl"),
        (TrainConfig(real_groups_per_step=0), "real_groups_per_step"),
        (TrainConfig(cpu_budget_s=-5.0), "cpu_budget_s"),
        (TrainConfig(correction=CorrectionConfig(anchor_fraction=0.25, cost_basis="wall")), "--arms wmrl"),
    ]:
        with pytest.raises(ValueError, match=match):
            validate(cfg)
    validate(TrainConfig(world_model="none", arms=("wmrl",), correction=CorrectionConfig(anchor_fraction=1.0)))


def test_old_run_folder_without_arms_loads_as_wmrl_alone(tmp_path):
    from dataclasses import asdict

    data = asdict(TrainConfig())
    del data["arms"], data["real_groups_per_step"], data["cpu_budget_s"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert load_config(tmp_path).arms == ("wmrl",)
    data["arms"] = ["wmrl", "real"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert load_config(tmp_path).arms == ("wmrl", "real")


def test_paired_over_tasks():
    p = paired_over_tasks({"a": 0.6, "b": 0.5, "c": 0.9, "z": 1.0}, {"a": 0.5, "b": 0.5, "c": 0.6, "y": 0.0})
    assert p["n_tasks"] == 3 and p["difference"] == pytest.approx((0.1 + 0.0 + 0.3) / 3)
    assert p["share_tasks_a_higher"] == pytest.approx(2 / 3) and p["share_tasks_tied"] == pytest.approx(1 / 3)
    # a t-interval on 2 degrees of freedom: mean ± 4.303 x sd / sqrt(3)
    half = 4.302652729911275 * np.std([0.1, 0.0, 0.3], ddof=1) / np.sqrt(3)
    assert p["difference_ci"] == pytest.approx([p["difference"] - half, p["difference"] + half])
    assert paired_over_tasks({"a": 1.0}, {"a": 0.5})["difference_ci"] is None
    # 2 tasks (the tiny preset): t is 12.7, and the interval is clipped to the range of a difference
    # of rewards, [-1, 1]; bounds=None leaves it as t gives it
    two_a, two_b = {"a": 0.9, "b": 0.3}, {"a": 0.2, "b": 0.4}
    assert paired_over_tasks(two_a, two_b)["difference_ci"] == [-1.0, 1.0]
    lo, hi = paired_over_tasks(two_a, two_b, bounds=None)["difference_ci"]
    assert lo < -1.0 and hi > 1.0
    assert paired_over_tasks({"a": 1.0}, {"b": 0.5}) is None
    assert paired_over_tasks({"a": float("nan"), "b": 1.0}, {"a": 0.5, "b": 0.5})["n_tasks"] == 1


def test_the_interval_keeps_its_coverage_on_few_tasks():
    """The fresh review's finding: a percentile bootstrap over 2-8 tasks declared a winner in 13-50%
    of runs with no difference. The t-interval: about 5% at every task count."""
    rng = np.random.default_rng(0)
    for n in (3, 5, 8):
        wrong = 0
        for _ in range(1000):
            d = rng.normal(0, 0.1, n)
            lo, hi = paired_over_tasks({str(i): x for i, x in enumerate(d)}, {str(i): 0.0 for i in range(n)})["difference_ci"]
            wrong += lo > 0 or hi < 0
        assert wrong / 1000 <= 0.075, (n, wrong)


def test_task_weighted_cost_weights_by_training_frequency():
    # task x was executed (cost 1 each) once; task y (cost 5 each) is trained 3 times as often,
    # executed once; task z never executed: it takes the pooled mean (3)
    steps = [
        {"tasks": ["x", "y"], "routes": ["anchor", "world_model"], "execution_cpu_s": [[1.0, 1.0], None]},
        {"tasks": ["y", "y"], "routes": ["anchor", "world_model"], "execution_cpu_s": [[5.0, 5.0], None]},
        {"tasks": ["y", "z"], "routes": ["world_model", "world_model"], "execution_cpu_s": [None, None]},
    ]
    w = task_weighted_execution_cost(steps)
    assert w["seconds_per_execution_unweighted"] == pytest.approx(3.0)
    assert w["seconds_per_execution"] == pytest.approx((1 * 1.0 + 4 * 5.0 + 1 * 3.0) / 6)
    assert (w["tasks_measured"], w["tasks_trained"], w["groups_imputed"]) == (2, 3, 1)
    assert task_weighted_execution_cost([]) is None
    # the weighted cost replaces the ledger's plain mean in cost_vs_real_grpo's CPU figures
    led = CostLedger()
    led.add("execution", 4.0, count=2, cpu_seconds=4.0)
    led.add("generation", 1.0, cpu_seconds=1.0)
    cv = cost_vs_real_grpo(led, 10, w)
    assert cv["cpu_s"]["real_grpo"] == pytest.approx(10 * w["seconds_per_execution"] + 1.0)
    assert cv["wall_s"]["real_grpo"] == pytest.approx(10 * 2.0 + 1.0)  # wall-clock keeps the ledger's mean
    assert "arithmetic" in cv["verdict"]


def _arm_summary(cpu, per_task, scores, steps, gps):
    traj = {t: {"category": "c", "positions": [s], "scores": [s]} for t, s in scores.items()}
    return {"training_cpu_s": cpu, "steps_trained": steps, "groups_per_step": gps, "rollouts": steps * gps * 8,
            "real_executions": steps * 8,
            "copy_baseline": {"before": {"per_task": {t: 0.5 for t in per_task}}, "after": {"per_task": per_task}},
            "heldout_before": {"k": 1, "overall": 10.0, "trajectories": traj},
            "heldout_after": {"k": 1, "overall": 50.0, "trajectories": traj}}


def test_compare_arms_pairs_tasks_and_says_which_is_better():
    tasks = [f"t{i}" for i in range(8)]
    wmrl = _arm_summary(100.0, {t: 0.70 + 0.01 * i for i, t in enumerate(tasks)}, {t: 0.8 for t in tasks}, 8, 4)
    real = _arm_summary(98.0, {t: 0.55 + 0.01 * i for i, t in enumerate(tasks)}, {t: 0.7 for t in tasks}, 11, 1)
    arms = compare_arms(wmrl, real)
    rel = arms["heldout"]["relative_score"]
    assert rel["paired"]["difference"] == pytest.approx(0.15) and rel["paired"]["n_tasks"] == 8
    assert rel["paired"]["difference_ci"] == pytest.approx([0.15, 0.15])  # every task +0.15: no spread
    assert arms["heldout"]["mean_score"]["paired"]["difference"] == pytest.approx(0.1)
    assert arms["training_cpu_s"]["ratio"] == pytest.approx(0.98)
    assert arms["steps_trained"] == {"wmrl": 8, "real": 11}
    assert arms["verdict"].startswith("WMRL ahead of real-execution GRPO") and "on this seed" in arms["verdict"]
    swapped = compare_arms(real, wmrl)
    assert swapped["verdict"].startswith("real-execution GRPO ahead of WMRL")
    few = [t for t in tasks[:4]]  # below MIN_TASKS_FOR_VERDICT: no winner named
    w4 = _arm_summary(100.0, {t: 0.8 for t in few}, {t: 0.8 for t in few}, 8, 4)
    r4 = _arm_summary(100.0, {t: 0.6 for t in few}, {t: 0.6 for t in few}, 8, 1)
    assert "too few tasks for a verdict" in compare_arms(w4, r4)["verdict"]
    mixed = dict(real, copy_baseline={"after": {"per_task": {t: 0.70 + 0.01 * i + (0.05 if i % 2 else -0.05)
                                                             for i, t in enumerate(tasks)}}})
    assert compare_arms(wmrl, mixed)["verdict"].startswith("no difference resolved")
    # the summary's leading rows
    rows = dict(arms_rows(arms))
    assert list(rows)[0].startswith("ARMS AT EQUAL COMPUTE") and rows["  verdict at equal compute"] == arms["verdict"]
    assert "+0.150 [95% CI +0.150, +0.150] on 8 tasks (WMRL higher on 100%, tied on 0%)" in rows["  WMRL - real, relative score, paired over tasks"]
    assert rows["  each arm - copying the shown line (relative score 0.5): WMRL / real"] == "0.235 / 0.085"
    assert arms_rows({"skipped": "x"}) == [("ARMS AT EQUAL COMPUTE", "no real arm: x")]
    assert arms["heldout"]["avg_at_k"]["wmrl"] == 50.0 and arms_rows(None) == []
    # the avg@k difference is signed like its interval (review of session 7: "6.2 [95% CI -100.0, +100.0]")
    ak = next(v for k, v in rows.items() if k.startswith("  held-out avg@"))
    assert ak.split("; ")[1].startswith(("+", "-"))


def test_the_last_checkpoint_is_found_between_the_two_renames(tmp_path):
    """A run killed between save_checkpoint's renames has only checkpoint.old/: a resume must take
    it (not delete the arm's folder as a start that never reached a checkpoint)."""
    from agents.train.checkpoint import checkpoint_folder

    assert checkpoint_folder(tmp_path) is None
    (tmp_path / "checkpoint.tmp").mkdir()
    (tmp_path / "checkpoint.old").mkdir()
    (tmp_path / "checkpoint.old" / "state.json").write_text("{}")
    assert checkpoint_folder(tmp_path) == tmp_path / "checkpoint.old"
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "state.json").write_text("{}")
    assert checkpoint_folder(tmp_path) == tmp_path / "checkpoint"


def test_a_followed_budget_says_in_the_log_when_it_waits_and_when_it_goes_on(tmp_path):
    publish_progress(tmp_path, eval_before={}, spent=50.0, steps_trained=1, final=False)
    lines, polls = [], []

    def wmrl_arm_finishes():  # the WMRL arm's total arrives on the second poll
        polls.append(1)
        if len(polls) == 2:
            publish_progress(tmp_path, eval_before={}, spent=200.0, steps_trained=2, final=True)
        return True

    budget = CpuBudget(follow=tmp_path, poll_s=0.0, alive=wmrl_arm_finishes, log=lines.append)
    assert budget.stop_before(10.0, 1) is False and lines == []  # no wait: no line
    assert budget.stop_before(49.0, 1) is False  # waits until the total (200) says go on
    assert len(lines) == 2 and lines[0].startswith("waiting for the WMRL arm: this arm has spent 49 CPU-s in 1 step")
    assert lines[1].startswith("went on after")


def _step_in_a_process(setup: str) -> Any:
    """A Python process that runs ``setup``, then a 'step' (a sleep loop) that exits 5 with 'step
    interrupted' on KeyboardInterrupt; its SIGINT and SIGTERM set as the real arm's process sets
    them (``python_interrupts``: SIGINT may be ignored in a background job). Returns the Popen once
    the step has started."""
    import subprocess
    import sys

    script = ("import time\nfrom agents.train.loop import python_interrupts\npython_interrupts()\n" + setup
              + "try:\n    print('started', flush=True)\n    while True:\n        time.sleep(0.05)\n"
              "except KeyboardInterrupt:\n    print('step interrupted', flush=True)\n    raise SystemExit(5)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    return proc


def test_the_real_arms_process_stops_soon_after_the_wmrl_arms_process_is_gone(tmp_path):
    """kill -9 of ``wmrl train`` used to leave the real arm training to the end of its step."""
    import time

    flag = tmp_path / "parent-alive"
    flag.write_text("")
    proc = _step_in_a_process(
        "import pathlib, threading\n"
        "from agents.train.loop import _exit_with_parent\n"
        f"flag = pathlib.Path({str(flag)!r})\n"
        "threading.Thread(target=_exit_with_parent, args=(flag.exists, 0.05, 30.0), daemon=True).start()\n")
    t0 = time.monotonic()
    flag.unlink()  # the WMRL arm's process is gone
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 5 and "real arm stops here" in out and "step interrupted" in out
    assert time.monotonic() - t0 < 10


def test_terminate_interrupts_the_real_arms_step_so_it_cleans_up(tmp_path):
    """Review of session 7: the WMRL arm's stop() terminates the real arm's process, which ended at
    once (no finally blocks, nothing in its log). SIGTERM now interrupts its step as Ctrl-C does."""
    import signal
    import subprocess
    import sys

    proc = _step_in_a_process("")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 5 and "step interrupted" in out


def test_the_stop_rule_uses_the_next_steps_expected_cost_when_steps_grow_dearer():
    # 13 steps spent 541 CPU-s (mean 41.6), the last ones cost about 63: the mean so far takes a 14th step
    # that ends 36 over a budget of 568, the recent cost stops 27 under it, the nearer of the two
    assert budget_reached(541.0, 13, 568.0) is False
    assert budget_reached(541.0, 13, 568.0, next_step=63.0) is True
    assert budget_reached(541.0, 13, 600.0, next_step=63.0) is False
    assert CpuBudget(568.0).stop_before(541.0, 13, 63.0) is True


def test_a_wait_that_ends_in_a_stop_says_it_stops(tmp_path):
    """Review of session 7: the WMRL arm's final total left no room for another step, the arm
    stopped, and its log said 'went on after 1 s of waiting'."""
    publish_progress(tmp_path, eval_before={}, spent=50.0, steps_trained=1, final=False)
    lines, polls = [], []

    def wmrl_arm_ends_at_60():  # the WMRL arm's final total (60) arrives on the second poll
        polls.append(1)
        if len(polls) == 2:
            publish_progress(tmp_path, eval_before={}, spent=60.0, steps_trained=2, final=True)
        return True

    budget = CpuBudget(follow=tmp_path, poll_s=0.0, alive=wmrl_arm_ends_at_60, log=lines.append)
    assert budget.stop_before(49.0, 1, next_step=30.0) is True
    assert lines[-1].startswith("stops here after") and not any(line.startswith("went on") for line in lines)


def test_an_interrupted_wait_does_not_say_it_went_on(tmp_path):
    publish_progress(tmp_path, eval_before={}, spent=50.0, steps_trained=1, final=False)
    lines, polls = [], []

    def interrupted_on_the_second_poll():  # Ctrl-C while waiting
        polls.append(1)
        if len(polls) == 2:
            raise KeyboardInterrupt
        return True

    with pytest.raises(KeyboardInterrupt):
        CpuBudget(follow=tmp_path, poll_s=0.0, alive=interrupted_on_the_second_poll,
                  log=lines.append).stop_before(49.0, 1)
    assert lines[0].startswith("waiting for the WMRL arm") and not any(line.startswith("went on") for line in lines)


def test_the_real_arms_summary_shows_no_correction_and_no_saving_over_itself(make_summary):
    """Review of session 7: the real arm's summary said 'these rollouts cost 50 CPU-s against 50
    had each been executed (1.00x less: the anchor fraction's arithmetic...)' and listed ρ and
    anchor pairs, none of which a real-execution run has."""
    from agents.train.summary import _rows

    led = CostLedger()
    for _ in range(4):
        led.add("execution", 1.0, cpu_seconds=2.0)
    led.add("generation", 1.0, cpu_seconds=1.0)
    cv = cost_vs_real_grpo(led, 4, real_execution=True)
    assert cv["verdict"].startswith("this run is real-execution GRPO (every rollout executed): 9 CPU-s")
    s = make_summary(world_model={"name": "none"}, cost_vs_real_grpo=cv, realised_anchor_fraction=1.0,
                     configured_anchor_fraction=1.0, **_heldout())
    rows = dict(_rows(s))
    assert "anchor weight rho" not in rows and "anchor pairs (debiaser fitted)" not in rows
    assert not any("same rollouts had each been executed" in k for k in rows)
    assert rows["cost"] == cv["verdict"]
    # a WMRL run keeps its rows and its arithmetic
    rows = dict(_rows(make_summary(cost_vs_real_grpo=cost_vs_real_grpo(led, 16), **_heldout())))
    assert "anchor weight rho" in rows and "cost of the same rollouts (arithmetic of the anchor fraction, not a measured saving)" in rows


def test_the_summary_says_when_the_anchor_floor_sets_the_fraction(make_summary):
    """The tiny preset configures 0.1 at 2 groups per step: the floor of one anchor group per step
    realises 0.5, which the summary showed without a word (review of session 7)."""
    from agents.train.summary import _rows

    s = make_summary(realised_anchor_fraction=0.5, configured_anchor_fraction=0.1, anchor_floor_share=0.5, **_heldout())
    assert "the floor of --min-anchor-groups per --anchor-window steps is 0.50 of the groups" in dict(_rows(s))[
        "realised anchor fraction (configured)"]
    s = make_summary(anchor_floor_share=0.25, **_heldout())  # floor = configured fraction: nothing to say
    assert dict(_rows(s))["realised anchor fraction (configured)"] == "0.25 (0.25)"


def _heldout() -> dict:
    ev = {"overall": 10.0, "k": 2, "mean_score": 0.3, "ungraded": {}}
    return {"heldout_before": ev, "heldout_after": ev}


def test_the_schedule_says_when_a_resume_finished_a_real_arm_started_beside():
    """Review of session 7: killed while the real arm trained beside, then resumed (the real arm
    finished after the WMRL arm, in the main process), the table still said 'beside'."""
    from agents.train.loop import arms_schedule

    assert arms_schedule(followed=True, trained_here=False) == "beside the WMRL arm (one process each)"
    assert arms_schedule(followed=True, trained_here=True) == "beside the WMRL arm, then after it (a resume finished it here)"
    assert arms_schedule(followed=False, trained_here=True) == "after the WMRL arm"


def test_the_arms_table_sets_the_real_arms_measured_cost_per_execution_beside_the_estimate():
    """Review of session 7: the WMRL arm's 'cost of the same rollouts' (1.29 CPU-s per execution,
    two of its anchors free syntax errors) contradicted the arms' table on the same page (the real
    arm measured 2.08); the table now shows both."""
    tasks = [f"t{i}" for i in range(8)]
    wmrl = _arm_summary(44.0, {t: 0.6 for t in tasks}, {t: 0.6 for t in tasks}, 2, 4)
    wmrl["cost_vs_real_grpo"] = {"cpu_s": {"seconds_per_execution": 1.29}}
    real = _arm_summary(49.0, {t: 0.6 for t in tasks}, {t: 0.6 for t in tasks}, 2, 1)
    real.update(real_executions=8, cpu_seconds={"execution": 16.64})
    arms = compare_arms(wmrl, real)
    assert arms["cpu_s_per_execution"] == {"real": pytest.approx(2.08), "wmrl_estimate": 1.29}
    row = dict(arms_rows(arms))["  CPU-s per execution: measured on the real arm / the WMRL arm's estimate from its anchors"]
    assert row.startswith("2.08 / 1.29")
    json.dumps(compare_arms(_arm_summary(1.0, {"a": 0.5}, {"a": 0.5}, 1, 1), _arm_summary(1.0, {"a": 0.5}, {"a": 0.5}, 1, 1)))
