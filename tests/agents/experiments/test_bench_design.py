"""Tests of ``benchmarks/bench_design.py``: the avg@k estimator from many draws, the cached
held-out evaluator (on fake programs, no sandbox), and the cost summary."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_design.py"
_spec = importlib.util.spec_from_file_location("bench_design", _PATH)
bd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bd)


def test_expected_best_of_k_is_the_mean_best_over_all_subsets():
    rng = np.random.default_rng(0)
    x = list(rng.random(7))
    x[2] = None  # no valid submission: counts as 0
    filled = [0.0 if v is None else v for v in x]
    for k in range(1, 8):
        brute = np.mean([max(c) for c in itertools.combinations(filled, k)])
        assert bd.expected_best_of_k(x, k) == pytest.approx(brute, abs=1e-12), k
    assert bd.expected_best_of_k(x, 1) == pytest.approx(np.mean(filled))
    assert bd.expected_best_of_k(x, 7) == pytest.approx(max(filled))
    assert bd.expected_best_of_k([0.0, 0.5, 1.0], 2) == pytest.approx(2.5 / 3)


@pytest.mark.parametrize("k", [0, 4])
def test_expected_best_of_k_rejects_k_outside_1_to_n(k):
    with pytest.raises(ValueError, match="k must be in"):
        bd.expected_best_of_k([0.1, 0.2, 0.3], k)


class _FakeAgent:
    """Samples ``draws`` programs per task from a fixed list, restarting at each reseed."""

    def __init__(self, codes: dict[str, list[str]]):
        self.codes, self.restored, self.seeds = codes, [], []

    def restore(self, snap):
        self.restored.append(snap)

    def reseed(self, seed):
        self.seeds.append(seed)

    def sample(self, tasks, n):
        return [self.codes[t][:n] for t in tasks], None


def test_cached_evaluator_scores_by_category_and_never_reruns_a_program(monkeypatch):
    # positions by (task, code): "x" fails (runtime error), others valid
    pos = {"a": 0.25, "b": 0.75, "c": 1.0, "d": 0.5}
    tasks = ["customer-churn", "sensor-fault", "energy-load"]  # two tabular-classification, one tabular-regression
    codes = {"customer-churn": ["a", "b", "x", "b"], "sensor-fault": ["c", "c", "d", "x"], "energy-load": ["d", "a", "x", "x"]}
    runs: list[tuple[str, str]] = []

    def fake_run(self, task, code):
        runs.append((task, code))
        if code == "x":
            return SimpleNamespace(status="runtime_err", position=None)
        return SimpleNamespace(status="valid", position=pos[code])

    monkeypatch.setattr(bd.CachedEvaluator, "_run", fake_run)
    ev = bd.CachedEvaluator(object(), tasks, k=2, parallel=1, draws=4)
    agent = _FakeAgent(codes)
    res = ev(agent, "snap", eval_seed=7)
    assert agent.restored == ["snap"] and agent.seeds == [7]
    churn = bd.expected_best_of_k([0.25, 0.75, None, 0.75], 2)
    fault = bd.expected_best_of_k([1.0, 1.0, 0.5, None], 2)
    load = bd.expected_best_of_k([0.5, 0.25, None, None], 2)
    assert res["per_task"] == pytest.approx({"customer-churn": 100 * churn, "sensor-fault": 100 * fault,
                                             "energy-load": 100 * load})
    assert res["per_category"] == pytest.approx({"tabular-classification": 50 * (churn + fault),
                                                 "tabular-regression": 100 * load})
    assert res["overall"] == pytest.approx((50 * (churn + fault) + 100 * load) / 2)
    # duplicates within a draw run once; a second evaluation of the same draws runs nothing
    assert len(runs) == 9 and ev.executed == 9 and ev.hits == 3
    again = ev(agent, "snap", eval_seed=7)
    assert again["overall"] == res["overall"] and len(runs) == 9 and ev.hits == 15


def test_cached_evaluator_rejects_fewer_draws_than_k():
    with pytest.raises(ValueError, match="draws must be >= k"):
        bd.CachedEvaluator(object(), ["customer-churn"], k=4, draws=2)


def test_cost_summary():
    s = bd.cost_summary([1.0, 2.0, 3.0, 4.0, 10.0])
    assert s == {"n": 5, "mean": 4.0, "median": 3.0, "p90": pytest.approx(7.6), "max": 10.0}
    with pytest.raises(ValueError, match="no execution costs"):
        bd.cost_summary([])


def test_avg_at_k_estimate_aggregates_like_avg_at_k_and_truncates_draws():
    from agents.train.evaluation import avg_at_k

    positions = {"a": [0.25, None, 1.0, 0.5], "b": [0.5, 0.5, 0.0, 1.0], "c": [None, 0.75, 0.25, 0.0]}
    cats = {"a": "x", "b": "x", "c": "y"}
    # with k = the number of draws it is avg@k itself
    overall, per_cat, per_task = bd.avg_at_k_estimate(positions, cats, 4)
    ref = avg_at_k(positions, cats, k=4)
    assert overall == pytest.approx(ref["overall"]) and per_cat == pytest.approx(ref["per_category"])
    assert per_task == pytest.approx(ref["per_task"])
    # the first two draws, best of 1 = their mean
    overall2, _, per_task2 = bd.avg_at_k_estimate(positions, cats, 1, draws=2)
    assert per_task2 == pytest.approx({"a": 12.5, "b": 50.0, "c": 37.5})
    assert overall2 == pytest.approx(((12.5 + 50.0) / 2 + 37.5) / 2)


def test_noise_by_draws_is_the_spread_over_seeds_of_each_truncated_evaluation():
    cats = {"a": "x"}
    runs = [{"a": [0.0, 1.0, 0.5, 0.5]}, {"a": [1.0, 1.0, 0.0, 0.0]}]
    out = bd.noise_by_draws(runs, cats, 4)
    assert set(out) == {"k=1,draws=2", "k=1,draws=4", "k=2,draws=2", "k=2,draws=4", "k=4,draws=4"}
    # k=1, draws=2: 50 and 100 -> mean 75, sample std 35.36
    assert out["k=1,draws=2"]["mean"] == pytest.approx(75.0)
    assert out["k=1,draws=2"]["std"] == pytest.approx(np.std([50.0, 100.0], ddof=1))
    # k=1, draws=4: both 50 -> no spread
    assert out["k=1,draws=4"] == {"mean": pytest.approx(50.0), "std": pytest.approx(0.0)}
