"""Snapshot density of ``wmrl bench`` (issue 27: "the interpolation bracket is at most 10% of the
compute to target"): the bracket of each seed's compute-to-target in results.json and table.md,
the refinement that narrows it (:func:`bracket_refinement_step`), and ``--resume`` on a finished
run refining it further. Fake, instant components (``bench_fakes``), no sandbox."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from agents.experiments.bench import run_bench
from agents.experiments.bench_config import BenchConfig, check_bench_config
from agents.experiments.bench_report import (compute_speedups, format_bracket_table, restore_nonfinite,
                                             strict_results)
from agents.experiments.bench_run import bracket_refinement_step, refinement_step

from bench_fakes import fake_config, run_kw


# ------------------------------------------------------------------------------ report, synthetic
def _entry(seed, steps, compute, scores):
    """A results.json seed entry with only what the headline reads (a curve and a last record)."""
    rec = {"cpu_seconds": {"execution": compute[-1]}, "executions": 10, "cpu_unmeasured": 0, "compute_cpu_s": compute[-1]}
    return {"seed": seed, "curve": {"step": steps, "compute_cpu_s": compute, "score": scores}, "records": [rec]}


def _results():
    # real GRPO: 100 CPU-s a step; target = 20 + 0.9 * (65 - 20) = 60.5 on the mean curve at step S = 10
    real = [_entry(0, [0, 5, 10], [0.0, 500.0, 1000.0], [20.0, 40.0, 60.0]),      # crossing 5..10: far too wide
            _entry(1, [0, 7, 8, 10], [0.0, 700.0, 800.0, 1000.0], [20.0, 58.0, 62.0, 70.0])]  # one step, 700..800
    wmrl = [_entry(0, [0, 10, 11, 30], [0.0, 100.0, 110.0, 300.0], [20.0, 60.0, 61.0, 80.0]),  # 10..11 of 105: 9.5%
            _entry(1, [0, 10, 30], [0.0, 100.0, 300.0], [20.0, 30.0, 40.0])]                    # never reached
    return {"config": {"steps": 10, "target_gain": 0.9, "seeds": 2, "groups_per_step": 10, "group_size": 4},
            "methods": {"real": {"seeds": real}, "wmrl": {"seeds": wmrl}}}


def test_each_seed_s_interpolation_bracket_is_in_results_json_and_flagged_above_ten_percent():
    res = _results()
    sp = compute_speedups(res, gain_fraction=0.9, steps=10, n_boot=50, n_boot_sensitivity=10)
    assert sp["target"] == pytest.approx(60.5) and sp["max_bracket_share"] == 0.1
    real, wmrl = sp["methods"]["real"], sp["methods"]["wmrl"]
    # real seed 0 never reaches 60.5 at step 10 (60.0): not reached; seed 1 crosses between steps 7 and 8
    assert math.isnan(real["bracket_share"][0]) and real["bracket_steps"][0] is None
    assert real["ctt"][1] == pytest.approx(700.0 + 2.5 / 4.0 * 100.0)
    assert real["bracket_share"][1] == pytest.approx(100.0 / real["ctt"][1]) and real["bracket_steps"][1] == [7, 8]
    assert wmrl["bracket_share"][0] == pytest.approx(10.0 / 105.0) and wmrl["bracket_steps"][0] == [10, 11]
    assert math.isnan(wmrl["bracket_share"][1])
    # strict JSON: the not-reached seeds' shares are null and listed as "nan" (no value), like the other fields
    res["speedup"] = sp
    strict = strict_results(res)
    text = json.dumps(strict, allow_nan=False)
    assert strict["speedup"]["methods"]["real"]["bracket_share"][0] is None
    assert strict["nonfinite"]["/speedup/methods/real/bracket_share/0"] == "nan"
    assert strict["nonfinite"]["/speedup/methods/real/ctt/0"] == "inf"  # not reached, as before
    back = restore_nonfinite(json.loads(text))
    assert math.isnan(back["speedup"]["methods"]["wmrl"]["bracket_share"][1])
    # the report flags real seed 1 (13.1% > 10%) as one step wide; WMRL's 9.5% is not flagged
    table = format_bracket_table(back)
    assert "| GRPO, real execution | 1/2 | 13% | 13% | **seed 1: 13.1%** (steps 7–8, one step" in table
    assert "| WMRL (debias + denoise) | 1/2 | 10% | 10% | none |" in table
    assert "span more than one step" not in table  # nothing left that more evaluations could narrow


def test_a_wide_bracket_is_flagged_as_one_more_evaluations_can_narrow():
    res = _results()
    res["methods"]["real"]["seeds"][1] = _entry(1, [0, 5, 10], [0.0, 500.0, 1000.0], [20.0, 50.0, 70.0])
    res["speedup"] = compute_speedups(res, gain_fraction=0.9, steps=10, n_boot=50, n_boot_sensitivity=10)
    share = res["speedup"]["methods"]["real"]["bracket_share"][1]
    assert share == pytest.approx(500.0 / (500.0 + 10.5 / 20.0 * 500.0))
    table = format_bracket_table(res)
    assert f"**seed 1: {share:.1%}** (steps 5–10)" in table and "1 bracket(s) above 10% span more than one step" in table


def test_results_written_before_the_bracket_fields_get_them_from_their_curves():
    res = _results()
    res["speedup"] = compute_speedups(res, gain_fraction=0.9, steps=10, n_boot=50, n_boot_sensitivity=10)
    for row in res["speedup"]["methods"].values():
        del row["bracket_share"], row["bracket_steps"]
    del res["speedup"]["max_bracket_share"]
    assert "**seed 1: 13.1%** (steps 7–8" in format_bracket_table(res)


def test_the_sensitivity_row_at_the_headline_target_repeats_the_headline_interval():
    """One quantity, one interval: table.md printed wmrl_learned at 90% as 3.5x [1.7, 6.5] in the
    headline and [2.0, 6.5] in the sensitivity table (10,000 against 2,000 replicates)."""
    real_cost = [900.0, 1300.0, 1000.0, 1700.0, 1100.0, 1500.0, 950.0, 1250.0]
    wmrl_cost = [300.0, 150.0, 420.0, 260.0, 510.0, 180.0, 350.0, 230.0]

    def seed(i, c):  # 20 -> 70 at step 10 -> 80: the 90% target (65) is crossed at 0.9 c
        return _entry(i, [0, 10, 20], [0.0, c, 2 * c], [20.0, 70.0, 80.0])

    res = {"config": {"steps": 10, "target_gain": 0.9, "seeds": 8, "groups_per_step": 10, "group_size": 4},
           "methods": {"real": {"seeds": [seed(i, c) for i, c in enumerate(real_cost)]},
                       "wmrl": {"seeds": [seed(i, c) for i, c in enumerate(wmrl_cost)]}}}
    sp = compute_speedups(res, gain_fraction=0.9, steps=10, n_boot=1000)
    head = sp["methods"]["wmrl"]["speedup_total"]
    assert sp["methods"]["wmrl"]["ctt"] == pytest.approx([0.9 * c for c in wmrl_cost])
    assert math.isfinite(head["low"]) and head["low"] < head["point"] < head["high"]
    assert sp["sensitivity"]["0.9"]["methods"]["wmrl"]["speedup_total"] == head
    assert sp["sensitivity"]["0.5"]["methods"]["wmrl"]["speedup_total"]["n_boot"] == 1000
    # the control: another replicate count moves the ends of the same quantity
    other = compute_speedups(res, gain_fraction=0.9, steps=10, n_boot=1000, n_boot_sensitivity=2000)
    row = other["sensitivity"]["0.9"]["methods"]["wmrl"]["speedup_total"]
    assert row["point"] == head["point"] and (row["low"], row["high"]) != (head["low"], head["high"])


# --------------------------------------------------------------------------- refinement, synthetic
def _refine(step_fn, steps, score, compute, target, n):
    ev = list(steps)
    for _ in range(n):
        k = step_fn(ev, [score[i] for i in ev])
        if k is None or k in ev:
            break
        ev.append(k)
    return sorted(ev)


@pytest.mark.parametrize("cross", [1.3, 4.6, 9.5, 14.2, 22.8, 28.1])
def test_refinement_narrows_the_bracket_to_ten_percent_or_one_step(cross):
    """A smooth curve over 30 steps of 10 CPU-s crossing the target at step ``cross``: from the
    coarse points (0, 15, 30) at most 6 evaluations leave a bracket within 10% or one step wide;
    the fixed 2 bisections of before did not."""
    from agents.experiments.speedup import Curve, bracket_share

    compute = [10.0 * k for k in range(31)]
    score = [20.0 + 40.0 * (1.0 - math.exp(-k / (cross / math.log(2.0)))) for k in range(31)]  # 40 at `cross`
    target = 40.0

    def share(ev):
        c = Curve([compute[k] for k in ev], [score[k] for k in ev])
        return bracket_share(c, target)

    new = _refine(lambda ev, sc: bracket_refinement_step(ev, sc, compute, target, 0.1), [0, 15, 30], score, compute,
                  target, 6)
    i = max(k for k in new if score[k] < target)
    j = min(k for k in new if score[k] >= target)
    assert share(new) <= 0.1 or j - i == 1, (new, share(new))
    assert len(new) - 3 <= 4  # a smooth curve needs few evaluations
    old = _refine(lambda ev, sc: refinement_step(ev, sc, target), [0, 15, 30], score, compute, target, 2)
    if cross > 4:  # the old schedule left these wider than 10% of the compute-to-target
        assert share(old) > 0.1


def test_refinement_step_rejects_a_bad_share_and_short_compute():
    with pytest.raises(ValueError, match="max_share must be"):
        bracket_refinement_step([0, 4], [0.0, 1.0], [0.0] * 5, 0.5, 0.0)
    with pytest.raises(ValueError, match="compute after every step"):
        bracket_refinement_step([0, 4], [0.0, 1.0], [0.0] * 3, 0.5, 0.1)
    with pytest.raises(ValueError, match="--max-bracket-share must be"):
        check_bench_config(BenchConfig(max_bracket_share=0.0))


# ------------------------------------------------------------------------------- run_bench, fakes
def fake_eval(agent, snap, tasks, k, sandbox, parallel, eval_seed=None):
    return {"overall": 100 * snap, "per_category": {"a": 100 * snap}, "per_task": {}}


def _wide(res):
    """(method, seed, share) of every reached bracket above 10% that spans more than one step."""
    out = []
    for name, row in res["speedup"]["methods"].items():
        for seed, (v, st) in enumerate(zip(row["bracket_share"], row["bracket_steps"])):
            if v is not None and math.isfinite(v) and v > 0.1 and st[1] - st[0] > 1:
                out.append((name, seed, v))
    return out


def test_a_finished_run_resumed_with_refinement_narrows_its_brackets(tmp_path):
    """A run refined with --refine-evals 0 leaves brackets above 10% spanning several steps;
    --resume on the finished run with the default refinement evaluates the saved snapshots inside
    them until each is within 10% or one step wide, and the report says so."""
    cfg = fake_config(steps=5, max_steps_factor=3, refine_evals=0, out_dir=str(tmp_path / "run"))
    kw = run_kw(evaluate=fake_eval)
    coarse = run_bench(cfg, **kw)
    assert _wide(coarse), "the coarse schedule should leave a wide bracket for this test to mean anything"
    evals_before = coarse["evaluation"]["evaluations"]
    lines: list[str] = []
    resumed = run_bench(replace(cfg, refine_evals=BenchConfig().refine_evals, resume=True), **{**kw, "log": lines.append})
    assert _wide(resumed) == []
    assert resumed["evaluation"]["evaluations"] > evals_before
    # a log file (no terminal: no bar) shows the refinement as it goes, one line per evaluation
    refine = [s for s in lines if s.startswith("[bench] refine ")]
    assert len(refine) == resumed["evaluation"]["evaluations"] - evals_before
    assert refine[-1].endswith(f"({len(refine)} so far)")
    for name in ("real", "wmrl"):
        for a, b in zip(coarse["methods"][name]["seeds"], resumed["methods"][name]["seeds"]):
            assert set(a["curve"]["step"]) <= set(b["curve"]["step"])  # the earlier snapshots are kept
            assert [r["compute_cpu_s"] for r in b["records"]] == [r["compute_cpu_s"] for r in a["records"]]  # not retrained
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert "bracket_share" in saved["speedup"]["methods"]["wmrl"]
    assert "span more than one step" not in (tmp_path / "run" / "table.md").read_text()
    assert "Interpolation brackets" in (tmp_path / "run" / "table.md").read_text()


def test_a_refinement_stopped_part_way_resumes_where_it_stopped(tmp_path):
    """The refinement runs once every seed is done (the headline run's last part). Stopped during
    it, the curves it finished are already in results.json; --resume evaluates only the rest and
    ends with the curves and counts of an unstopped run (before: nothing of it was saved, and
    the resumed part evaluated every refinement snapshot again)."""
    cfg = fake_config(steps=5, max_steps_factor=3, out_dir=str(tmp_path / "whole"))
    whole = run_bench(cfg, **run_kw(evaluate=fake_eval))
    coarse = run_bench(replace(cfg, refine_evals=0, out_dir=str(tmp_path / "coarse")), **run_kw(evaluate=fake_eval))
    n_train = coarse["evaluation"]["evaluations"]
    n_refine = whole["evaluation"]["evaluations"] - n_train
    assert n_refine >= 3, "the coarse curves should need several refinement evaluations"
    calls = []

    def stopped_at_the_last(*a, **k):  # Ctrl-C during the refinement's last evaluation
        calls.append(1)
        if len(calls) == n_train + n_refine:
            raise KeyboardInterrupt
        return fake_eval(*a, **k)

    stopped = replace(cfg, out_dir=str(tmp_path / "stopped"))
    with pytest.raises(KeyboardInterrupt):
        run_bench(stopped, **run_kw(evaluate=stopped_at_the_last))
    saved = restore_nonfinite(json.loads((tmp_path / "stopped" / "results.json").read_text()))
    assert saved["evaluation"]["evaluations"] > n_train  # the finished curves' refinement is kept
    resumed_calls = []

    def counted(*a, **k):
        resumed_calls.append(1)
        return fake_eval(*a, **k)

    resumed = run_bench(replace(stopped, resume=True), **run_kw(evaluate=counted))
    assert 1 <= len(resumed_calls) == n_train + n_refine - saved["evaluation"]["evaluations"] < n_refine
    assert resumed["evaluation"]["evaluations"] == whole["evaluation"]["evaluations"]
    for name in ("real", "wmrl"):
        for a, b in zip(whole["methods"][name]["seeds"], resumed["methods"][name]["seeds"]):
            assert (b["curve"]["step"], b["curve"]["score"]) == (a["curve"]["step"], a["curve"]["score"])
            assert b.get("refine_evals_done") == a.get("refine_evals_done")
    # (the compute of each step is measured live, so it differs between the two runs by milliseconds)
    # a finished refinement is not run again: the same command evaluates nothing more
    again = []
    run_bench(replace(stopped, resume=True), **run_kw(evaluate=lambda *a, **k: again.append(1) or fake_eval(*a, **k)))
    assert again == []


def test_a_run_is_split_into_parts_of_seeds_with_resume(tmp_path):
    """The parts benchmarks/README.md names: --seeds 1 finishes (refined, reported), then --resume
    --seeds 2 keeps seed 0 as it is (not retrained) and runs seed 1 only."""
    cfg = fake_config(seeds=1, steps=3, max_steps_factor=2, out_dir=str(tmp_path / "run"))
    logs = []
    kw = run_kw(evaluate=fake_eval, log=logs.append)
    first = run_bench(cfg, **kw)
    assert len(first["methods"]["real"]["seeds"]) == 1 and first["speedup"]["target"] > 0
    both = run_bench(replace(cfg, seeds=2, resume=True), **kw)
    assert any("seeds 0..0 kept" in line for line in logs)
    assert [e["seed"] for e in both["methods"]["wmrl"]["seeds"]] == [0, 1]
    assert both["methods"]["real"]["seeds"][0]["records"][-1]["compute_cpu_s"] == \
        first["methods"]["real"]["seeds"][0]["records"][-1]["compute_cpu_s"]
    assert len(both["speedup"]["methods"]["real"]["bracket_share"]) == 2
