"""``benchmarks/learned_wm_heldout_r.py``: the out-of-sample order and the within-group r on known inputs."""

from __future__ import annotations

import math

import pytest

from benchmarks.learned_wm_heldout_r import (PseudoGroup, program_key, score_frozen, score_online, seen_before,
                                             summarise_seeds, within_group_record)
from wmrl_envs.core.advisor_model import pooled_within_group_correlation

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
        self.observed_n: list[int] = []  # len(actions) of each observe call
        self.fitted = False

    def predict(self, contexts, actions):
        self.calls.append(("predict", len(actions), contexts[0]))
        return [_REAL.get(a, 0.5) for a in actions]

    def observe(self, contexts, actions, real_scores, group_id=None):
        self.calls.append(("observe", group_id, contexts[0]))
        assert len(contexts) == len(actions) == len(real_scores)
        self.observed_n.append(len(actions))
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


def _src(model: str, seed: int) -> str:
    """A program as the grammar agent writes it: the estimator line with its random state."""
    return f"import x\nmodel = make_pipeline(PCA(n_components=4, random_state={seed}), {model}(random_state={seed}))\n"


def _repeat_steps() -> list[list[PseudoGroup]]:
    """Step 0 observes task ``a``'s programs A..D; step 1 draws them again for ``a`` (A with another
    random state), and for ``b``, which never saw them."""
    first = [_src(m, 1) for m in "ABCD"]
    again = [_src("A", 99)] + first[1:]
    return [[PseudoGroup(0, 0, "a", first, [0.5, 0.6, 0.7, 0.8], [True] * 4)],
            [PseudoGroup(0, 1, "a", again, [0.5, 0.6, 0.7, 0.8], [True] * 4),
             PseudoGroup(0, 1, "b", list(first), [0.5, 0.6, 0.7, 0.8], [True] * 4)]]


def test_learning_from_a_subsample_and_repeats():
    steps = _repeat_steps()
    for obs, n_seen in ((2, [True, True, False, False]), (None, [True] * 4)):
        m = _Oracle()
        score_online(steps, m, observe_first=obs)
        assert m.observed_n == [obs or 4] * 3  # every group observed through its first observe_first draws
        seen = seen_before(steps, observe_first=obs)
        # nothing seen before the first step; the later group of the same task repeats the observed
        # draws (A up to its random state), the other task's group repeats nothing
        assert seen == [[False] * 4, n_seen, [False] * 4]
    # a draw observed without a real score was not learned from: not a repeat
    steps[0][0].scores[1] = None
    assert seen_before(steps, observe_first=2)[1] == [True, False, False, False]
    scored = [x for x in score_online(_groups(), _Oracle()) if x[2]]
    rec = within_group_record(scored, n_boot=0, drop=[[True] * 4] * len(scored))
    assert rec["n_groups"] == 0 and math.isnan(rec["r"])
    with pytest.raises(ValueError):
        within_group_record(scored, n_boot=0, drop=[[False] * 4])


def test_repeats_are_keyed_on_the_source_up_to_the_random_state():
    assert program_key(_src("A", 1)) == program_key(_src("A", 12345)) != program_key(_src("B", 1))
    assert program_key("Tree(max_depth=3, random_state=7)") == "Tree(max_depth=3, random_state=<seed>)"
    assert program_key("Tree(max_depth=3)") == "Tree(max_depth=3)"  # other integers stay
    steps = _repeat_steps()
    assert seen_before(steps, normalise=False)[1] == [False, True, True, True]  # exact source only
    assert seen_before(steps)[1] == [True] * 4


def _cluster_groups(labels: list[tuple[int, str]]) -> list[tuple[PseudoGroup, list[float], bool]]:
    """20 groups per label: task ``t0``'s world model ranks its group right, ``t1``'s backwards."""
    out = []
    for seed, task in labels:
        pred = [0.6, 0.7, 0.8, 0.9] if task.endswith("0") else [0.9, 0.8, 0.7, 0.6]
        for step in range(20):
            out.append((PseudoGroup(seed, step, task, ["p1", "p2", "p3", "p4"], [0.5, 0.6, 0.8, 1.0], [True] * 4),
                        pred, True))
    return out


def test_bootstrap_resamples_tasks_not_groups():
    # two tasks of 20 identical groups each: the point r is the pooled one whatever the clusters, but
    # resampling the 2 tasks gives an interval from about -1 to 1, resampling 40 independent groups
    # would give a narrow one
    two = _cluster_groups([(0, "t0"), (0, "t1")])
    rec = within_group_record(two, n_boot=500, seed=0)
    r, _ = pooled_within_group_correlation([p for _, p, _ in two], [g.scores for g, _, _ in two])
    assert rec["r"] == pytest.approx(r) == pytest.approx(0.0, abs=1e-9)
    assert rec["n_groups"] == 40 and rec["n_clusters"] == 2
    assert rec["r_ci"][0] < -0.9 and rec["r_ci"][1] > 0.9
    v = rec["among_valid"]
    assert v["r"] == pytest.approx(0.0, abs=1e-9) and v["n_clusters"] == 2
    assert v["r_ci"][0] < -0.9 and v["r_ci"][1] > 0.9
    # the same groups under 40 distinct (seed, task) labels: 40 clusters, a narrow interval
    many = [(PseudoGroup(i, g.step, g.task, g.programs, g.scores, g.valid), p, f) for i, (g, p, f) in enumerate(two)]
    rec = within_group_record(many, n_boot=500, seed=0)
    assert rec["n_clusters"] == 40 and rec["r"] == pytest.approx(0.0, abs=1e-9)
    assert -0.6 < rec["r_ci"][0] < 0 < rec["r_ci"][1] < 0.6
    assert rec["among_valid"]["r_ci"] == pytest.approx(rec["r_ci"])


def test_among_valid_uses_valid_programs_only():
    # a failed draw the world model gets backwards drags r overall, not r among valid
    g = PseudoGroup(0, 1, "t", ["p0", "p1", "p2", "p3"], [0.1, 0.5, 0.7, 0.9], [False, True, True, True])
    h = PseudoGroup(0, 2, "u", ["p0", "p1", "p2", "p3"], [0.1, 0.6, 0.8, 1.0], [False, True, True, True])
    rec = within_group_record([(g, [1.0, 0.1, 0.2, 0.3], True), (h, [1.0, 0.2, 0.3, 0.4], True)], n_boot=200)
    v = rec["among_valid"]
    assert v["r"] == pytest.approx(1.0) and v["n_groups"] == 2 and v["n_rollouts"] == 6
    assert rec["r"] < 0
    # fewer than 2 groups with >= 2 valid programs: NaN
    one = within_group_record([(g, [1.0, 0.1, 0.2, 0.3], True)], n_boot=0)["among_valid"]
    assert one["n_groups"] == 1 and math.isnan(one["r"])
