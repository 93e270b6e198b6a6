"""metrics.jsonl counts the distinct lines each group sampled (issue 36, item 2): a policy that
collapses onto one line shows 1 per group."""

from __future__ import annotations


def test_distinct_lines_counts_each_groups_different_first_lines():
    from agents.train.loop import distinct_lines

    texts = [[" HistGradientBoostingClassifier()\n```", "HistGradientBoostingClassifier()  ", "GaussianNB()"],
             ["Ridge()", "Ridge()", "Ridge()"], ["a", "b", "c"]]
    assert distinct_lines(texts, 3) == {"distinct_lines": [2, 1, 3], "distinct_lines_mean": 2.0}
    # multi-turn rows (one per turn, not one list per group): nothing is counted
    assert distinct_lines([["a"], ["b"], ["c"], ["d"]], 2) == {"distinct_lines": None, "distinct_lines_mean": None}


def test_the_entropy_floor_doubles_the_coefficient_below_it_and_halves_it_back_above():
    import dataclasses

    import pytest

    from agents.train.config import TrainConfig, next_entropy_coef, validate

    off = TrainConfig()
    assert off.entropy_floor is None and next_entropy_coef(0.002, 0.0, off) == 0.002  # off by default
    cfg = TrainConfig(entropy_floor=0.3, entropy_coef=0.002, entropy_coef_max=0.01)
    coefs, c = [], cfg.entropy_coef
    for ent in (0.9, 0.2, 0.1, None, float("nan"), 0.05, 0.5, 0.5, 0.5, 0.5):
        c = next_entropy_coef(c, ent, cfg)
        coefs.append(c)
    assert coefs == pytest.approx([0.002, 0.004, 0.008, 0.01, 0.01, 0.01, 0.005, 0.0025, 0.002, 0.002])
    zero = TrainConfig(entropy_floor=0.3, entropy_coef=0.0, entropy_coef_max=0.01)
    assert next_entropy_coef(0.0, 0.1, zero) == 0.001  # a zero coefficient starts at 1e-3
    for bad, match in (({"entropy_floor": 0.0}, "entropy_floor must be > 0"),
                       ({"entropy_coef_max": 0.001}, "entropy_coef_max must be >= entropy_coef")):
        with pytest.raises(ValueError, match=match):
            validate(dataclasses.replace(TrainConfig(), **bad))
