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
