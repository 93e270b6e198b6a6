"""The held-out figures' spread over evaluation draws in ``wmrl train``'s summary (issue 28):
seeded bootstrap CIs of avg@k and the mean score before and after, and of their paired difference."""

from __future__ import annotations

import json

import pytest

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
    assert heldout_spread(BEFORE, BEFORE, seed=1)["before"]["overall_ci"] != b["overall_ci"]
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


def test_nothing_to_resample_gives_none():
    one_per_cat = _ev([0.5, 0.2, 0.1], [[0.3, 0.1]] * 3)  # one task per category: no spread to measure
    sp = heldout_spread(one_per_cat, None)
    assert sp["before"]["overall"] == pytest.approx(one_per_cat["overall"])
    assert sp["before"]["overall_ci"] is None and sp["before"]["mean_score_ci"] is None
    assert sp["after"] is None and sp["difference"] is None
    old = {k: v for k, v in BEFORE.items() if k != "trajectories"}  # a checkpoint from before the field
    assert heldout_spread(old, BEFORE)["before"] is None and heldout_spread(old, BEFORE)["difference"] is None
    json.dumps(sp, allow_nan=False)
    with pytest.raises(ValueError, match="n_boot"):
        heldout_spread(BEFORE, BEFORE, n_boot=0)




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
