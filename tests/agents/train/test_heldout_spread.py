"""The held-out figures' spread over evaluation draws in ``wmrl train``'s summary (issue 28):
Student-t intervals over tasks of avg@k and the mean score before and after, and of their paired
difference (issue 36 replaced a bootstrap within categories that was too narrow)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from agents.train.evaluation import avg_at_k, finite_mean, heldout_spread

CATS = ("image", "tabular", "regression")


def _ev(best: list[float], scores: list[list[float]], k: int = 2) -> dict:
    """An evaluate() result for tasks t0.. in categories cycling over CATS: task i's trajectories
    are a miss (None) and a valid one at position ``best[i]``; its scores are ``scores[i]``."""
    traj = {f"t{i}": {"category": CATS[i % 3], "positions": [None, b], "scores": s} for i, (b, s) in enumerate(zip(best, scores))}
    res = avg_at_k({t: v["positions"] for t, v in traj.items()}, {t: v["category"] for t, v in traj.items()}, k=k)
    res.update(k=k, mean_score=finite_mean([x for v in traj.values() for x in v["scores"]]), trajectories=traj)
    return res


SCORES = [[0.1, 0.2], [0.0, 0.4], [0.3, 0.5], [0.6, 0.2], [0.1, 0.1], [0.9, 0.5], [0.0, 0.3], [0.2, 0.2], [0.4, 0.8]]
BEFORE = _ev([0.0, 0.25, 0.5, 0.1, 0.9, 0.3, 0.0, 0.6, 0.2], SCORES)


def test_the_point_figures_are_the_evaluations_and_the_cis_bracket_them():
    sp = heldout_spread(BEFORE, BEFORE)
    b = sp["before"]
    assert b["overall"] == pytest.approx(BEFORE["overall"]) and b["mean_score"] == pytest.approx(BEFORE["mean_score"])
    assert b["n_tasks"] == 9
    lo, hi = b["overall_ci"]
    assert lo < b["overall"] < hi and 0.0 <= lo and hi <= 100.0
    lo, hi = b["mean_score_ci"]
    assert lo < b["mean_score"] < hi
    assert sp["after"] == b  # the same evaluation twice: the same seeded draws
    assert heldout_spread(BEFORE, None)["before"] == b  # a part does not depend on the other
    assert sp["difference"]["overall"] == 0.0 and sp["difference"]["overall_ci"] == [0.0, 0.0]
    assert heldout_spread(BEFORE, BEFORE) == sp  # seeded: reproducible
    # the t-interval by hand: 3 tasks in each of 3 categories weigh 1/9 each, so avg@k's interval is
    # the ordinary t-interval of the 9 tasks' best positions (percent)
    best = [100.0 * max(0.0 if p is None else p for p in BEFORE["trajectories"][f"t{i}"]["positions"]) for i in range(9)]
    half = stats.t.ppf(0.975, 8) * np.std(best, ddof=1) / 3.0
    assert b["overall_ci"] == pytest.approx([np.mean(best) - half, np.mean(best) + half])
    json.dumps(sp, allow_nan=False)  # strict JSON


def test_the_difference_pairs_the_same_tasks():
    """Every task gains exactly 0.1 in position and 0.05 in score: the paired difference has no
    spread at all, though each side's own CI is wide."""
    best = [0.0, 0.25, 0.5, 0.1, 0.8, 0.3, 0.0, 0.6, 0.2]
    scores = SCORES
    after = _ev([b + 0.1 for b in best], [[x + 0.05 for x in s] for s in scores])
    d = heldout_spread(_ev(best, scores), after)["difference"]
    assert d["overall"] == pytest.approx(10.0) and d["overall_ci"] == pytest.approx([10.0, 10.0])
    assert d["mean_score"] == pytest.approx(0.05) and d["mean_score_ci"] == pytest.approx([0.05, 0.05])
    sa = heldout_spread(_ev(best, scores), after)["after"]
    assert sa["overall_ci"][1] - sa["overall_ci"][0] > 10.0


def test_a_category_of_one_task_still_has_spread():
    """The bootstrap within categories this replaced had no spread from a category of one task
    (issue 36: too narrow over a handful of tasks); across categories the tasks still differ."""
    one_per_cat = _ev([0.5, 0.2, 0.1], [[0.3, 0.1]] * 3)
    sp = heldout_spread(one_per_cat, None)
    assert sp["before"]["overall"] == pytest.approx(one_per_cat["overall"])
    half = stats.t.ppf(0.975, 2) * np.std([50.0, 20.0, 10.0], ddof=1) / np.sqrt(3)
    assert sp["before"]["overall_ci"] == pytest.approx([max(0.0, 80.0 / 3 - half), 80.0 / 3 + half])
    assert sp["before"]["mean_score_ci"] == pytest.approx([0.2, 0.2])  # every task's scores alike


def test_two_tasks_intervals_stay_in_the_figures_range():
    """The tiny preset holds out 2 tasks: t on 1 degree of freedom is 12.7, and the mean score's
    interval reached past the reward scale (issue 36). Every interval stays in its figure's range."""
    before, after = _ev([0.1, 0.9], [[0.1, 0.2], [0.9, 1.0]]), _ev([0.9, 0.1], [[1.0, 0.9], [0.0, 0.1]])
    sp = heldout_spread(before, after)
    assert sp["before"]["mean_score_ci"] == [0.0, 1.0] and sp["before"]["overall_ci"] == [0.0, 100.0]
    assert sp["difference"]["mean_score_ci"] == [-1.0, 1.0] and sp["difference"]["overall_ci"] == [-100.0, 100.0]
    # inside the range an interval is the t-interval itself
    assert heldout_spread(BEFORE, None)["before"]["mean_score_ci"][0] > 0.0


def test_fewer_than_two_tasks_or_no_trajectories_give_none():
    one = _ev([0.5], [[0.3, 0.1]])
    sp = heldout_spread(one, None)
    assert sp["before"]["overall"] == pytest.approx(50.0)
    assert sp["before"]["overall_ci"] is None and sp["before"]["mean_score_ci"] is None
    assert sp["after"] is None and sp["difference"] is None
    old = {k: v for k, v in BEFORE.items() if k != "trajectories"}  # a checkpoint from before the field
    assert heldout_spread(old, BEFORE)["before"] is None and heldout_spread(old, BEFORE)["difference"] is None
    json.dumps(sp, allow_nan=False)
    with pytest.raises(ValueError, match="level"):
        heldout_spread(BEFORE, BEFORE, level=1.0)




def test_the_summary_shows_the_spread_beside_the_figures(make_summary):
    from agents.train.summary import summary_markdown

    after = _ev([0.5, 0.5, 0.75, 0.3, 0.9, 0.3, 0.25, 0.6, 0.4], [[x + 0.2 for x in s] for s in SCORES])
    s = make_summary(heldout_before=BEFORE, heldout_after=after, heldout_spread=heldout_spread(BEFORE, after))
    md = summary_markdown(s)
    d = s["heldout_spread"]["difference"]
    assert (f"| held-out avg@2 before (percentile) | {BEFORE['overall']:.1f} [95% CI "
            f"{s['heldout_spread']['before']['overall_ci'][0]:.1f}, ") in md
    assert (f"| held-out after - before, paired on 9 tasks: avg@2 / mean score | {d['overall']:+.1f} [95% CI "
            f"{d['overall_ci'][0]:.1f}, {d['overall_ci'][1]:.1f}] / {d['mean_score']:+.3f} [95% CI ") in md
    assert d["overall"] > 0 and d["overall_ci"][0] > 0  # this made-up run improved on most tasks


def test_the_printed_summary_keeps_bracketed_values(make_summary):
    """A value like ``0.211 [n/a, n/a]`` is text: rich read ``[n/a, n/a]`` as a markup tag and
    dropped it from the printed table (summary.md kept it)."""
    from rich.console import Console

    from agents.train.summary import print_summary

    s = make_summary(heldout_before=BEFORE, heldout_after=BEFORE, anchor_advice={"r": 0.211, "r_ci": [None, None], "recommended_fraction": None,
                                "predicted_speedup": None, "verdict": "not enough groups"})
    console = Console(record=True, width=200)
    print_summary(console, s)
    assert "0.211 [n/a, n/a]" in console.export_text()


def test_the_rho_row_says_where_the_warm_up_stands(make_summary):
    """Issue 35: rho at 1.00 read as 'the world model is as good as execution'; it can also mean the
    warm-up never ended. The row says how many anchor groups counted and how many were skipped."""
    from agents.train.summary import _rows

    rows = dict(_rows(make_summary(rho_warmup={"counted": 3, "needed": 16, "no_spread": 9}, **_heldout_pair())))
    assert rows["anchor weight rho"] == "1.00 (warm-up: 3 of 16 anchor groups counted; 9 not, their real scores all equal)"
    rows = dict(_rows(make_summary(rho_warmup={"counted": 2, "needed": 3, "no_spread": 0}, **_heldout_pair())))
    assert rows["anchor weight rho"] == "1.00 (warm-up: 2 of 3 anchor groups counted)"
    rows = dict(_rows(make_summary(rho_warmup={"counted": 0, "needed": 0, "no_spread": 5}, **_heldout_pair())))
    assert rows["anchor weight rho"] == "1.00 (warm-up: 0 of 1 anchor groups counted; 5 not, their real scores all equal)"
    rows = dict(_rows(make_summary(rho=2.0, rho_warmup={"counted": 5, "needed": 3, "no_spread": 4}, **_heldout_pair())))
    assert rows["anchor weight rho"] == "2.00"  # warmed up: rho speaks for itself
    assert dict(_rows(make_summary(rho_warmup=None, **_heldout_pair())))["anchor weight rho"] == "1.00"  # denoise off
    assert dict(_rows(make_summary(**_heldout_pair())))["anchor weight rho"] == "1.00"  # a summary from before the field


def _heldout_pair() -> dict:
    ev = {"overall": 10.0, "k": 2, "mean_score": 0.3, "ungraded": {}}
    return {"heldout_before": ev, "heldout_after": ev}
