"""Tests of ``benchmarks/bench_design.py``: the avg@k estimator from many draws, the cached
held-out evaluator (on fake programs, no sandbox), and the cost summary."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_design.py"
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
