"""The learned world model's head chosen out of fold and its CPU budget (issue 35, item 7).

A score peaked inside the action space is not linear in the action: the ridge head learned
little of it (within-group r 0.15 where the noise allowed 0.42 on a user's classifier-tuning
env) and its refits cost 30-60% of the execution CPU. ``head="auto"`` chooses among ridge,
k-NN, a Gaussian process and gradient boosting out of fold; refits are scheduled so that the
world model's CPU stays within ``cpu_share`` of the execution CPU.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from wmrl_envs.core import CorrectionConfig, CorrectionLoop
from wmrl_envs.core.advisor import pooled_within_group_correlation
from wmrl_envs.world_models.heads import candidate_heads, within_group_r
from wmrl_envs.world_models.learned import CallableFeaturizer, LearnedWorldModel, default_head

G = 8
CPU_PER_EXECUTION = 0.05  # declared CPU-s of one execution (a synthetic env's)


def _peaked(actions: np.ndarray) -> np.ndarray:
    """A score peaked inside the action space (at (0.5, -0.5))."""
    return np.exp(-((actions - np.array([0.5, -0.5])) ** 2).sum(axis=1))


def _prequential(wm: LearnedWorldModel, groups: int, seed: int = 0) -> tuple[float, float, dict]:
    """``groups`` groups of G around a slowly moving centre: each predicted before it is
    observed; returns (r at prediction, the noise ceiling, counts)."""
    rng = np.random.default_rng(seed)
    executions = [0]
    wm.bind_execution_cost(lambda: executions[0] * CPU_PER_EXECUTION) if wm.head == "auto" else None
    pred, real, clean = [], [], []
    for k in range(groups):
        centre = np.array([-1.0, 1.0]) + k / groups * np.array([1.5, -1.5])
        a = centre + rng.normal(size=(G, 2))
        truth = _peaked(a)
        noisy = truth + 0.1 * rng.normal(size=G)
        pred.append(wm.predict_scores([None] * G, list(a)).tolist())
        real.append(noisy.tolist())
        clean.append(truth.tolist())
        executions[0] += G
        wm.observe([None] * G, list(a), noisy.tolist(), group_id=k)
    r, _ = pooled_within_group_correlation(pred[2:], real[2:])
    ceiling, _ = pooled_within_group_correlation(clean[2:], real[2:])
    return r, ceiling, {"executions": executions[0]}


def _features() -> CallableFeaturizer:
    return CallableFeaturizer(lambda c, a: np.asarray(a, dtype=np.float32), dim=2)


def test_the_head_chosen_out_of_fold_beats_ridge_on_a_peaked_landscape_within_the_cpu_share():
    auto = LearnedWorldModel(_features())  # head="auto", cpu_share=0.10
    r_auto, ceiling, n = _prequential(auto, 40)
    ridge = LearnedWorldModel(_features(), head=default_head())
    r_ridge, _, _ = _prequential(ridge, 40)
    share = auto.cpu_share_used()
    print(f"r auto {r_auto:.2f} (head {auto.head_name}, {auto.head_r}), ridge {r_ridge:.2f}, ceiling {ceiling:.2f}; "
          f"world-model CPU {auto.cpu_s:.2f} s = {share:.1%} of {n['executions'] * CPU_PER_EXECUTION:.0f} s; "
          f"refits {auto.n_refits}, selections {auto.n_selections}, deferred {auto.refits_deferred}")
    assert auto.head_name in ("knn", "gp", "hgb") and auto.head_r[auto.head_name] > auto.head_r["ridge"]
    assert r_auto > r_ridge + 0.2 and r_auto >= 0.7 * ceiling
    # the world model's CPU (predictions, refits, rescoring) within its share of the execution CPU
    executed = n["executions"] * CPU_PER_EXECUTION
    assert share == pytest.approx(auto.cpu_s / executed)
    # within the share up to one refit's misestimate (the refits it holds back pay it back later)
    largest_refit = max(cpu for cpu, _ in auto.refit_cost.values())
    assert share <= 0.10 + largest_refit / executed and largest_refit / executed < 0.08
    assert auto.summary()["cpu_share_used"] == share and auto.summary()["head"] == auto.head_name


def test_a_tight_budget_holds_refits_back_but_not_the_first_fit():
    wm = LearnedWorldModel(_features(), cpu_share=1e-4)
    _prequential(wm, 12)
    assert wm.fitted and wm.n_refits == 1  # the first fit is made whatever the budget: no cold constant
    assert wm.refits_deferred == 10  # groups 3-12: due, not affordable
    free = LearnedWorldModel(_features())  # no execution cost bound: every due refit
    for k in range(4):
        free.observe([None] * 2, [np.array([k, 0.0]), np.array([0.0, k])], [0.1 * k, 0.2], group_id=k)
    assert free.n_refits == 3 and free.cpu_share_used() is None
    with pytest.raises(TypeError, match="execution_cost must be a CostLedger"):
        LearnedWorldModel(_features(), execution_cost=3)
    with pytest.raises(ValueError, match="cpu_share must be a number in"):
        LearnedWorldModel(_features(), cpu_share=0)


def test_the_budget_reads_the_loops_ledger_and_the_state_round_trips():
    wm = LearnedWorldModel(_features(), folds=3)
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0, min_pairs=16, refit_every=16), world_model=wm)
    assert wm.execution_cost is loop.ledger  # the loop binds its ledger: the refit budget is on by itself
    own = LearnedWorldModel(_features(), folds=3, execution_cost=lambda: 1.0)
    CorrectionLoop(CorrectionConfig(anchor_fraction=1.0), world_model=own)
    assert own.execution_cost() == 1.0  # a budget the user bound is kept
    rng = np.random.default_rng(3)
    for k in range(10):
        a = rng.normal(size=(G, 2))
        preds = loop.predict([None] * G, list(a))
        t = loop.open_group()
        loop.close_group(t, [p.score for p in preds], _peaked(a).tolist(), actions=list(a), contexts=[None] * G)
        loop.record_execution(0.0, G, cpu_seconds=G * CPU_PER_EXECUTION)
    spent, executed = wm.cpu_spent()
    assert executed == pytest.approx(10 * G * CPU_PER_EXECUTION)
    assert spent == loop.ledger.cpu_seconds("world_model") > 0
    assert wm.cpu_share_used() == pytest.approx(spent / executed)
    assert wm.n_selections >= 1 and wm.head_name in candidate_heads(2)
    # pairs rescored out of fold: no pair equals its own outcome for a memorising head either way
    raw, real = loop.corrector.debiaser.pairs()
    assert len(raw) == 10 * G and not np.allclose(raw, real)
    state = json.loads(json.dumps(loop.state_dict()))
    again = LearnedWorldModel(_features(), folds=3)
    assert again.execution_cost is None  # not saved in a state: the loop it is given to binds its own ledger
    loop2 = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0, min_pairs=16, refit_every=16), world_model=again)
    loop2.load_state_dict(state)
    probe = [np.array([0.3, -0.2]), np.array([1.5, 0.5])]
    assert again.head_name == wm.head_name and again.n_selections == wm.n_selections
    np.testing.assert_array_equal(again.predict_scores([None] * 2, probe), wm.predict_scores([None] * 2, probe))
    assert again.execution_cost is loop2.ledger


def test_within_group_r_is_the_pooled_within_group_correlation():
    rng = np.random.default_rng(0)
    s, r = rng.normal(size=(5, 4)), rng.normal(size=(5, 4))
    expected, _ = pooled_within_group_correlation(s.tolist(), r.tolist())
    assert within_group_r(s.ravel(), r.ravel(), np.repeat(np.arange(5), 4)) == pytest.approx(expected)
    assert within_group_r(np.ones(8), r.ravel()[:8], np.repeat([0, 1], 4)) == 0.0  # a constant: no signal
    assert set(candidate_heads(3)) == {"ridge", "knn", "gp", "hgb"} and set(candidate_heads(500)) == {"ridge", "knn"}


def test_the_first_fit_comes_after_min_groups_whatever_refit_every():
    """Issue 35, item 6: with refit_every=4 the model stayed at its cold constant for 4 anchor
    groups (a preset with 3 never left it); the first fit now comes after min_groups (2)."""
    wm = LearnedWorldModel(_features(), refit_every=4)
    rng = np.random.default_rng(0)
    fitted_at = []
    for k in range(7):
        a = rng.normal(size=(G, 2))
        if wm.observe([None] * G, list(a), _peaked(a).tolist(), group_id=k):
            fitted_at.append(k + 1)
    assert fitted_at == [2, 6]  # after 2 groups, then every 4


@pytest.mark.parametrize("basis, deferred", [("cpu", True), ("wall", False)])
def test_the_budget_follows_the_runs_cost_basis(basis, deferred):
    """A remote job: each execution waits 1 s wall-clock for 0.002 CPU-s here (recorded, not slept). Counted in CPU-seconds (the
    default) the refits overrun 10% of the execution CPU and wait; when the run counts wall-clock (issue 38:
    the wait is the cost) the world model's share is measured in wall-clock too and they are made."""
    wm = LearnedWorldModel(_features(), folds=3)
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0, cost_basis=basis), world_model=wm)
    rng = np.random.default_rng(3)
    for k in range(10):
        a = rng.normal(size=(G, 2))
        preds = loop.predict([None] * G, list(a))
        t = loop.open_group()
        loop.record_execution(1.0 * G, G, cpu_seconds=0.002 * G, ticket=t)
        loop.close_group(t, [p.score for p in preds], _peaked(a).tolist(), actions=list(a), contexts=[None] * G)
    spent, executed = wm.cpu_spent()
    ledger = loop.ledger
    if basis == "wall":
        assert (spent, executed) == (ledger.seconds("world_model"), pytest.approx(10 * G * 1.0))
    else:
        assert (spent, executed) == (ledger.cpu_seconds("world_model"), pytest.approx(10 * G * 0.002))
    assert (wm.refits_deferred > 0) == deferred
    assert wm.n_refits == (1 if deferred else 9)  # the first fit at group 2, then one per group when affordable
