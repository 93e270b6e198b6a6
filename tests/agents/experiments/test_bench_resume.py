"""Reusing and resuming benchmark runs (``agents.experiments.bench_resume``): ``--reuse-from``
copies real GRPO and WMRL as measured and refuses a run that cannot stand in, ``--resume`` continues
a stopped run to the uninterrupted run's result, and the guards around both. Fake, instant components
(``bench_fakes``)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from agents.experiments.bench import run_bench
from agents.experiments.bench_config import BenchConfig
from agents.experiments.bench_resume import reused_entries

from bench_fakes import FakeEnv, _bench, fake_config, run_kw

__all__: list[str] = []

def test_reuse_from_reads_real_and_wmrl_and_trains_only_the_others(tmp_path):
    """The ablation command reuses the headline run's real GRPO and WMRL: their entries are copied
    as measured, their budgets still bound the other methods, and no execution of theirs happens
    again."""
    import json

    base = fake_config(steps=3, max_steps_factor=2, refine_evals=1, out_dir=str(tmp_path / "head"))
    kw = run_kw()
    first = run_bench(base, **kw)
    FakeEnv.steps = 0
    abl = replace(base, methods=("real", "wmrl", "anchors_raw"), reuse_from=str(tmp_path / "head" / "results.json"),
                  out_dir=str(tmp_path / "abl"))
    second = run_bench(abl, **kw)
    for m in ("real", "wmrl"):
        for a, b in zip(first["methods"][m]["seeds"], second["methods"][m]["seeds"]):
            assert b["reused_from"] == abl.reuse_from
            for key in ("curve", "records", "eval", "snapshot"):  # as measured there (NaN-safe comparison)
                assert json.dumps(b[key], default=float) == json.dumps(a[key], default=float)
    # only anchors_raw executed: 2 seeds x its anchor groups x G; its budget is the reused real's
    runs = second["methods"]["anchors_raw"]["seeds"]
    assert FakeEnv.steps == sum(s["records"][-1]["executions"] for s in runs) > 0
    for s, r in zip(runs, first["methods"]["real"]["seeds"]):
        # real GRPO's compute to its stop target, and that target
        assert s["budgets"]["compute_real_to_stop_target"] == r["records"][-1]["compute_cpu_s"]
        assert s["stop_target"] == r["stop_target"] is not None
    assert second["speedup"]["target"] == first["speedup"]["target"]
    assert "read from" in (tmp_path / "abl" / "table.md").read_text()
    assert json.loads((tmp_path / "abl" / "results.json").read_text())["reused_from"]["methods"] == ["real", "wmrl"]


@pytest.mark.parametrize("change, message", [
    (dict(steps=4), "steps: here 4, there 3"),
    (dict(seeds=3), "pass --seeds 2 or fewer"),
    (dict(methods=("real", "anchors_raw"), reuse_methods=("anchors_raw",)), "none of the methods"),
])
def test_reuse_from_refuses_a_run_that_cannot_stand_in(tmp_path, change, message):
    base = BenchConfig(methods=("real",), seeds=2, steps=3, groups_per_step=2, group_size=2,
                       refine_evals=0, out_dir=str(tmp_path / "head"))
    run_bench(base, **run_kw())
    bad = replace(base, reuse_from=str(tmp_path / "head" / "results.json"), out_dir=str(tmp_path / "b"), **change)
    FakeEnv.steps = 0
    with pytest.raises(ValueError, match=message):
        run_bench(bad, **run_kw())
    assert FakeEnv.steps == 0  # refused before anything trained
    with pytest.raises(FileNotFoundError):
        reused_entries(replace(base, reuse_from=str(tmp_path / "nope.json")))


def test_resume_continues_a_stopped_run_and_matches_an_uninterrupted_one(tmp_path):
    """A run stopped after seed 0 (its results.json and snapshots/seed0.pt as written then) resumes
    with seed 1, refines both seeds' curves, and gives the uninterrupted run's curves and speedup."""
    import json
    import shutil

    cfg = fake_config(steps=3, max_steps_factor=2, refine_evals=2, out_dir=str(tmp_path / "full"))
    kw = run_kw()
    full = run_bench(cfg, **kw)
    # the state after seed 0: one seed per method, before the refinement
    one = run_bench(replace(cfg, seeds=1, refine_evals=0, out_dir=str(tmp_path / "stopped")), **kw)
    res = json.loads((tmp_path / "stopped" / "results.json").read_text())
    res["config"]["seeds"], res["config"]["refine_evals"] = 2, 2
    for k in ("speedup", "costs"):
        res.pop(k, None)
    (tmp_path / "stopped" / "results.json").write_text(json.dumps(res))
    assert one["methods"]["real"]["seeds"][0]["records"]
    logs = []
    resumed = run_bench(replace(cfg, resume=True, out_dir=str(tmp_path / "stopped")), **{**kw, "log": logs.append})
    assert any("resuming" in line and "seeds 0..0 kept" in line for line in logs)
    for m in ("real", "wmrl"):
        for a, b in zip(full["methods"][m]["seeds"], resumed["methods"][m]["seeds"]):
            assert b["curve"]["step"] == a["curve"]["step"]  # seed 0 refined after the resume too
            assert b["curve"]["score"] == pytest.approx(a["curve"]["score"])
    assert resumed["speedup"]["target"] == pytest.approx(full["speedup"]["target"])
    # without the snapshots, seed 0 is kept but not refined (and it says so)
    shutil.rmtree(tmp_path / "stopped" / "snapshots")
    (tmp_path / "stopped" / "results.json").write_text(json.dumps(res))
    logs.clear()
    run_bench(replace(cfg, resume=True, out_dir=str(tmp_path / "stopped")), **{**kw, "log": logs.append})
    assert any("without saved snapshots" in line for line in logs)
    with pytest.raises(ValueError, match="steps: here 4, there 3"):
        run_bench(replace(cfg, resume=True, steps=4, out_dir=str(tmp_path / "stopped")), **kw)


def test_settings_added_since_an_earlier_run_count_as_equal_at_their_default():
    from agents.experiments.bench_resume import settings_differ

    cfg = BenchConfig()
    earlier = json.loads(json.dumps(__import__("dataclasses").asdict(cfg), default=float))
    del earlier["correction"]["f_min"]  # a field the earlier run's code did not have
    assert settings_differ(cfg, earlier, ("correction", "steps")) == []
    changed = replace(cfg, correction=replace(cfg.correction, anchor_fraction="auto", f_min=0.1))
    assert "f_min" in settings_differ(changed, earlier, ("correction",))[0]


def test_reusing_real_grpo_alone_allows_another_anchor_fraction(tmp_path):
    base = BenchConfig(methods=("real", "wmrl"), seeds=1, steps=2, max_steps_factor=2, groups_per_step=5, group_size=2,
                       refine_evals=0, out_dir=str(tmp_path / "head"))
    kw = run_kw()
    run_bench(base, **kw)
    other_f = replace(base, correction=replace(base.correction, anchor_fraction=0.4),
                      reuse_from=str(tmp_path / "head" / "results.json"), out_dir=str(tmp_path / "b"))
    with pytest.raises(ValueError, match="correction"):  # WMRL would be reused: its correction must match
        run_bench(other_f, **kw)
    # --reuse-methods real: WMRL runs again at f = 0.4 against the same real GRPO
    res = run_bench(replace(other_f, reuse_methods=("real",)), **kw)
    assert res["reused_from"]["methods"] == ["real"]
    assert res["methods"]["wmrl"]["seeds"][0]["records"][-1]["realised_anchor_fraction"] == pytest.approx(0.4)


def test_guards_of_resume_and_reuse(tmp_path):
    """From a review: a finished run is not overwritten by a fresh one, an unfinished run cannot be
    reused, an unreadable results.json is named, and resume compares --reuse-methods too."""
    cfg = BenchConfig(methods=("real", "wmrl"), seeds=1, steps=2, max_steps_factor=2, groups_per_step=5, group_size=2,
                      refine_evals=0, out_dir=str(tmp_path / "run"))
    kw = run_kw()
    run_bench(cfg, **kw)
    with pytest.raises(FileExistsError, match="pass --resume"):
        run_bench(cfg, **kw)
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    res.pop("speedup")
    (tmp_path / "unfinished.json").write_text(json.dumps(res))
    with pytest.raises(ValueError, match="did not finish"):
        run_bench(replace(cfg, reuse_from=str(tmp_path / "unfinished.json"), out_dir=str(tmp_path / "x")), **kw)
    with pytest.raises(ValueError, match="reuse_methods"):
        run_bench(replace(cfg, resume=True, reuse_methods=("real",)), **kw)
    (tmp_path / "run" / "results.json").write_text('{"config": {"seeds": 1}, "meth')
    with pytest.raises(ValueError, match="not a readable wmrl bench results.json"):
        run_bench(replace(cfg, resume=True), **kw)


def test_reusing_a_real_grpo_from_before_the_stop_target_is_warned_about(tmp_path):
    """A results.json from before issue 35 (no stop target) can still be reused, but the log says that
    the other methods then train to its compute or the step cap, without a target stop."""
    res, _ = _bench(tmp_path / "new", methods=("real",), seeds=1)
    old = json.loads((tmp_path / "new" / "results.json").read_text())
    e = old["methods"]["real"]["seeds"][0]
    e["records"], e["stopped"] = e["records"][:4], "steps"
    del e["stop_target"]
    old.pop("nonfinite", None)
    (tmp_path / "old.json").write_text(json.dumps(old))
    logs = []
    cfg = fake_config(methods=("real", "wm_only"), seeds=1, steps=4, max_steps_factor=3, refine_evals=0,
                      out_dir=str(tmp_path / "b"), reuse_from=str(tmp_path / "old.json"))
    res = run_bench(cfg, **run_kw(train_tasks=["t1", "t2"], log=logs.append))
    assert any("without a stop target (before issue 35; it trained 4 steps)" in line for line in logs)
    assert res["methods"]["wm_only"]["seeds"][0]["stopped"] in ("step cap", "compute budget")


def test_the_heldout_evaluation_cache_is_kept_across_resume_parts(tmp_path, monkeypatch):
    """Issue 35, item 5: a --resume part reads the (task, program) grades an earlier part executed, so
    no held-out program is executed twice over the parts of one run."""
    import agents.experiments.bench as bench_mod
    from agents.experiments.bench_resume import EVAL_CACHE_FILE, load_eval_cache, save_eval_cache

    assert load_eval_cache(tmp_path) == {}
    save_eval_cache(tmp_path, {("t", "print(1)"): {"score": 0.5}})
    assert load_eval_cache(tmp_path) == {("t", "print(1)"): {"score": 0.5}}
    # run_bench hands the saved cache to the default evaluation on --resume, and saves it after each seed
    seen = []

    def fake_evaluate_snapshot(agent, snap, tasks, k, sandbox, parallel, eval_seed=None, cache=None, **kw):
        seen.append(dict(cache))
        cache[("h", f"prog{snap:.3f}")] = {"score": snap}
        return {"overall": 100 * snap, "per_category": {"a": 100 * snap}, "per_task": {}}

    monkeypatch.setattr(bench_mod, "evaluate_snapshot", fake_evaluate_snapshot)
    cfg = fake_config(methods=("real",), seeds=1, steps=2, max_steps_factor=2, refine_evals=0, out_dir=str(tmp_path / "r"))
    run_bench(cfg, **run_kw(evaluate=fake_evaluate_snapshot))
    first = load_eval_cache(tmp_path / "r")
    assert first and (tmp_path / "r" / EVAL_CACHE_FILE).is_file()
    seen.clear()
    run_bench(replace(cfg, seeds=2, resume=True), **run_kw(evaluate=fake_evaluate_snapshot))
    assert seen and set(first) <= set(seen[0])  # the second part's first evaluation already holds the first's


def _stopped_at(method: str, run_method):
    """``run_method`` that raises KeyboardInterrupt (a stop) when ``method`` starts."""
    def stopped(spec, seed, *a, **k):
        if spec.name == method:
            raise KeyboardInterrupt(f"stopped inside seed {seed}")
        return run_method(spec, seed, *a, **k)

    return stopped


def test_resume_continues_a_seed_at_its_next_method(tmp_path, monkeypatch):
    """A seed of the headline run takes hours: a run stopped inside a seed, after real GRPO
    finished, resumes at the seed's next method (real GRPO not trained again, its budget and stop
    target kept) and gives the uninterrupted run's curves and speedup; the partial file goes once
    the seed is in results.json."""
    import agents.experiments.bench as bench

    cfg = fake_config(steps=3, max_steps_factor=2, refine_evals=2, out_dir=str(tmp_path / "full"))
    kw = run_kw()
    full = run_bench(cfg, **kw)
    original = bench.run_method
    stop_at_wmrl = _stopped_at("wmrl", original)

    monkeypatch.setattr(bench, "run_method", stop_at_wmrl)
    stopped = replace(cfg, out_dir=str(tmp_path / "stopped"))
    with pytest.raises(KeyboardInterrupt):
        run_bench(stopped, **kw)
    monkeypatch.setattr(bench, "run_method", original)
    assert (tmp_path / "stopped" / "partial" / "seed0.pkl").is_file()
    FakeEnv.steps = 0
    logs = []
    resumed = run_bench(replace(stopped, resume=True), **{**kw, "log": logs.append})
    assert any("resuming seed 0 after its finished methods ['real']" in line for line in logs)
    real0 = full["methods"]["real"]["seeds"][0]
    # seed 0's real GRPO was not trained again: every execution now is of the other runs
    trained_now = sum(s["records"][-1]["executions"] for m in ("real", "wmrl") for s in resumed["methods"][m]["seeds"]) \
        - real0["records"][-1]["executions"]
    assert FakeEnv.steps == trained_now
    for m in ("real", "wmrl"):
        for a, b in zip(full["methods"][m]["seeds"], resumed["methods"][m]["seeds"]):
            assert b["curve"]["step"] == a["curve"]["step"]
            assert b["curve"]["score"] == pytest.approx(a["curve"]["score"])
            assert b["stop_target"] == pytest.approx(a["stop_target"])
    assert resumed["speedup"]["target"] == pytest.approx(full["speedup"]["target"])
    # real GRPO's evaluations before the stop are counted, as the unstopped run counts them
    assert resumed["evaluation"] == full["evaluation"]
    assert not (tmp_path / "stopped" / "partial" / "seed0.pkl").exists()
    # a partial file of another configuration is refused, by name
    monkeypatch.setattr(bench, "run_method", stop_at_wmrl)
    with pytest.raises(KeyboardInterrupt):
        run_bench(replace(cfg, out_dir=str(tmp_path / "other")), **kw)
    monkeypatch.setattr(bench, "run_method", original)
    with pytest.raises(ValueError, match="partial.*steps: here 4, there 3"):
        run_bench(replace(cfg, resume=True, steps=4, out_dir=str(tmp_path / "other")), **kw)


@pytest.mark.parametrize("prog,hint", [("bench", "--resume continues"), ("libero", "--resume is on by default"),
                                       ("bench sweep", "nothing to resume"), ("bench advisor", "nothing to resume")])
def test_kill_stops_a_long_run_as_ctrl_c_does_with_its_resume_hint(monkeypatch, capsys, prog, hint):
    """A background `wmrl bench` (`nohup ... &`) is stopped with `kill PID` (SIGTERM): it stops as
    Ctrl-C does (exit 130, the hint that says how to continue) instead of dying with no word, and
    the SIGTERM handler from before the run is back after it. Before, SIGTERM reached the handler
    installed here, which no command had replaced."""
    import importlib
    import os
    import signal
    import time

    from agents.cli import _PRESET_COMMANDS, main

    module, name = _PRESET_COMMANDS[f"wmrl {prog}"][0].split(":")

    def terminated(cfg):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the command's handler raises KeyboardInterrupt here
        raise AssertionError("SIGTERM did not interrupt the run")

    def unreplaced(signum, frame):
        raise AssertionError("the command installed no SIGTERM handler")

    monkeypatch.setattr(importlib.import_module(module), name, terminated)
    before = signal.signal(signal.SIGTERM, unreplaced)
    try:
        assert main(prog.split() + ["--quick"]) == 130
        assert signal.getsignal(signal.SIGTERM) is unreplaced
    finally:
        signal.signal(signal.SIGTERM, before)
    assert hint in capsys.readouterr().err


def test_a_part_stopped_inside_a_seed_still_counts_its_wall_clock(tmp_path, monkeypatch):
    """results.json is written when a seed ends, so a part stopped inside a seed added none of its
    time to `wall_clock_s` (the headline run recorded 37,469 s where its logs sum to about 19 h).
    The partial file keeps the run's wall-clock at each finished method, and the resumed part
    starts from it."""
    import agents.experiments.bench as bench

    ticks = iter(range(10**9))
    monkeypatch.setattr(bench.time, "perf_counter", lambda: float(next(ticks)))  # 1 s per call
    cfg = fake_config(steps=3, max_steps_factor=2, refine_evals=0, out_dir=str(tmp_path / "run"))
    kw = run_kw()
    original = bench.run_method
    stop_at_wmrl = _stopped_at("wmrl", original)

    monkeypatch.setattr(bench, "run_method", stop_at_wmrl)
    with pytest.raises(KeyboardInterrupt):
        run_bench(cfg, **kw)
    monkeypatch.setattr(bench, "run_method", original)
    from agents.experiments.bench_resume import partial_seed_wall_clock

    before_stop = partial_seed_wall_clock(tmp_path / "run", 0)
    assert before_stop is not None and before_stop > 0  # real GRPO's run and its evaluations
    start = bench.time.perf_counter()
    resumed = run_bench(replace(cfg, resume=True), **kw)
    this_part = bench.time.perf_counter() - start
    # this part alone can record at most `this_part`; with the stopped part's time it records more,
    # and never more than both parts together
    assert this_part < resumed["wall_clock_s"] <= before_stop + this_part
