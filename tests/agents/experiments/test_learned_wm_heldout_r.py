"""``benchmarks/learned_wm_heldout_r.py``: the out-of-sample order and the within-group r on known inputs."""

from __future__ import annotations

import math

import pytest

from benchmarks.learned_wm_heldout_r import (PseudoGroup, score_frozen, score_online, seen_before, summarise_seeds,
                                             within_group_record)

# real scores: failures 0.1 (runtime_err), valid programs 0.5..1.0 as on AutoResearch
_REAL = {f"p{i}": s for i, s in enumerate([0.1, 0.5, 0.6, 0.9, 0.1, 0.7, 1.0, 0.55, 0.8, 0.65, 0.1, 0.95])}


def _groups(n_steps: int = 3, per_step: int = 2) -> list[list[PseudoGroup]]:
    names = list(_REAL)
    steps, k = [], 0
    for step in range(n_steps):
        groups = []
        for t in range(per_step):
            progs = [names[(k + j) % len(names)] for j in range(4)]
            k += 3
            groups.append(PseudoGroup(0, step, f"task{t}", progs, [_REAL[p] for p in progs],
                                      [_REAL[p] > 0.2 for p in progs]))
        steps.append(groups)
    return steps


class _Oracle:
    """Predicts the real score exactly; records the order of calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []
        self.fitted = False

    def predict(self, contexts, actions):
        self.calls.append(("predict", len(actions), contexts[0]))
        return [_REAL[a] for a in actions]

    def observe(self, contexts, actions, real_scores, group_id=None):
        self.calls.append(("observe", group_id, contexts[0]))
        self.fitted = True
        return False


class _Constant:
    def predict(self, contexts, actions):
        return [0.5] * len(actions)


def test_online_scoring_predicts_each_step_before_observing_it():
    steps = _groups()
    m = _Oracle()
    out = score_online(steps, m)
    kinds = [c[0] for c in m.calls]
    assert kinds == ["predict", "predict", "observe", "observe"] * 3
    assert [c[1] for c in m.calls if c[0] == "observe"] == list(range(6))  # unique group ids in time order
    assert [f for _, _, f in out] == [False, False, True, True, True, True]  # the first step is the cold start


def test_exact_world_model_gives_r_one_overall_and_among_valid():
    scored = [x for x in score_online(_groups(), _Oracle()) if x[2]]
    rec = within_group_record(scored, n_boot=200, seed=0)
    assert rec["r"] == pytest.approx(1.0)
    assert rec["n_groups"] == 4
    v = rec["among_valid"]
    assert v["r"] == pytest.approx(1.0)
    assert v["n_groups"] == 4 and v["n_rollouts"] == sum(sum(g.valid) for g, _, _ in scored)
    assert v["r_ci"][0] == pytest.approx(1.0)


def test_constant_world_model_ranks_nothing():
    groups = [g for step in _groups() for g in step]
    rec = within_group_record(score_frozen(groups, _Constant()), n_boot=200, seed=0)
    assert rec["r"] == 0.0 and not rec["world_model_varies"]
    assert rec["among_valid"]["r"] is None  # nothing ranked among the valid programs


def test_validity_only_world_model_has_no_signal_among_valid_programs():
    # tells failed (0.1) from valid, but scores every valid program alike: high r overall, none among valid
    class _Validity:
        def predict(self, contexts, actions):
            return [0.1 if _REAL[a] < 0.2 else 0.8 for a in actions]

    groups = [g for step in _groups() for g in step]
    rec = within_group_record(score_frozen(groups, _Validity()), n_boot=0)
    assert rec["r"] > 0.5
    assert rec["among_valid"]["r"] is None


def test_missing_real_scores_drop_out_and_summary_over_seeds():
    g = PseudoGroup(0, 1, "t", ["p1", "p2", "p3"], [0.5, None, 0.9], [True, False, True])
    rec = within_group_record([(g, [0.2, 0.9, 0.4], True), (g, [0.1, 0.0, 0.3], True)], n_boot=0)
    assert rec["n_rollouts"] == 4 and rec["r"] == pytest.approx(1.0)
    s = summarise_seeds([{"r": 0.2, "among_valid": {"r": None}}, {"r": 0.6, "among_valid": {"r": 0.1}},
                         {"r": float("nan"), "among_valid": {"r": -0.1}}])
    assert s["r"]["median"] == pytest.approx(0.4) and s["r"]["n_undefined"] == 1
    assert s["r_among_valid"]["min"] == pytest.approx(-0.1) and s["r_among_valid"]["n_seeds"] == 2
    assert math.isclose(s["r_among_valid"]["median"], 0.0, abs_tol=1e-12)


def test_learning_from_a_subsample_and_repeats():
    steps = _groups()
    m = _Oracle()
    score_online(steps, m, observe_first=2)
    seen = seen_before(steps, observe_first=2)
    assert len(seen) == 6 and not any(any(s) for s in seen[:2])  # nothing seen before the first step
    # a draw counts as seen only if an earlier step observed it (among its groups' first 2 draws)
    observed = {(g.task, p) for g in steps[0] for p in g.programs[:2]}
    assert seen[2] == [(steps[1][0].task, p) in observed for p in steps[1][0].programs]
    scored = [x for x in score_online(steps, _Oracle()) if x[2]]
    rec = within_group_record(scored, n_boot=0, drop=[[True] * 4] * len(scored))
    assert rec["n_groups"] == 0 and math.isnan(rec["r"])
    with pytest.raises(ValueError):
        within_group_record(scored, n_boot=0, drop=[[False] * 4])
