"""The world model that learns from its anchors (issue 27, item 1): ``LearnedWorldModel``.

Out of sample (a memorising model never sees a group's outcome before predicting it), the
out-of-fold rescoring of the debiaser's pairs and the advisor's groups after a refit, the state
round-trip mid-run, the refit cost in the ledger, a cold start on the known-truth env in which
``anchor_fraction="auto"`` routes more to real execution first and less later, and the model
through the per-episode and the vector wrappers.
"""

from __future__ import annotations

import json
import time
import warnings

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import Ridge
from sklearn.neighbors import KNeighborsRegressor

from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.core import CorrectionConfig, CorrectionLoop
from wmrl_envs.core.advisor import pooled_within_group_correlation
from wmrl_envs.core.debias import IsotonicDebiaser
from wmrl_envs.core.ledger import WORLD_MODEL_SOURCE
from wmrl_envs.envs.known_truth import KnownTruthEnv
from wmrl_envs.world_models import WorldModel
from wmrl_envs.world_models.learned import (
    CallableFeaturizer,
    LearnedWorldModel,
    PolicyHiddenStateFeaturizer,
    SentenceEncoderFeaturizer,
)
from wmrl_envs.wrappers import AnchoredWorldModelVectorWrapper, make_vector_env


def _one_hot(width: int):
    def f(context, action):
        v = np.zeros(width, np.float32)
        v[int(action) % width] = 1.0
        return v

    return CallableFeaturizer(f)


def _known_truth_featurizer(env: KnownTruthEnv):
    """The (task, action) one-hot: a learnable featurizer of the known-truth env."""
    n_a = env.n_actions

    def f(task, action):
        v = np.zeros(env.n_tasks * n_a, np.float32)
        v[int(task) * n_a + int(action)] = 1.0
        return v

    return CallableFeaturizer(f)


def _run_group(loop: CorrectionLoop, contexts, actions, real):
    preds = loop.predict(contexts, actions)
    ticket = loop.open_group()
    raw = [p.score for p in preds]
    corr = loop.close_group(ticket, raw, real if ticket.route == "anchor" else None,
                            actions=actions, contexts=contexts)
    return raw, corr


# ---------------------------------------------------------------------- protocol and cold start
def test_protocol_cold_start_and_clipping():
    wm = LearnedWorldModel(CallableFeaturizer(lambda c, a: [a, 1.0]), min_groups=1)
    assert isinstance(wm, WorldModel)
    assert [p.score for p in wm.predict([0, 0], [1.0, 5.0])] == [0.0, 0.0]  # nothing seen: 0
    assert wm.observe([0, 0, 0], [0.0, 1.0, 2.0], [0.1, None, 0.3], group_id=7) is True
    assert wm.n_rollouts == 2 and wm.fitted  # the ungraded rollout is not stored
    s = wm.predict_scores([0, 0], [-10.0, 10.0])
    assert s.tolist() == [0.1, 0.3]  # clipped to the real range seen
    cold = LearnedWorldModel(CallableFeaturizer(lambda c, a: [a]), min_groups=3)
    cold.observe([0], [1.0], [0.4])
    assert not cold.fitted and cold.predict_scores([0], [2.0]).tolist() == [0.4]  # the mean real so far
    with pytest.raises(ValueError, match="rows of different lengths"):
        LearnedWorldModel(CallableFeaturizer(lambda c, a: [a] * int(a))).predict([0, 0], [2, 1])
    wide = LearnedWorldModel(CallableFeaturizer(lambda c, a: [a] * int(a)), min_groups=1)
    wide.observe([0], [1], [0.5])
    with pytest.raises(ValueError, match="returned 2 features, the rows stored have 1"):
        wide.predict([0], [2])
    with pytest.raises(ValueError, match="refit_every"):
        LearnedWorldModel(CallableFeaturizer(lambda c, a: [a]), refit_every=0)


# ---------------------------------------------------------------------- out of sample
def test_a_memorising_model_never_sees_a_groups_outcome_before_predicting_it():
    """Features that identify each rollout and a 1-nearest-neighbour head: a model that had
    seen a rollout's outcome predicts it exactly. Through the loop no group's prediction (at
    routing), and no rescored pair or advisor score, equals its own outcome."""
    rng = np.random.default_rng(0)
    wm = LearnedWorldModel(_one_hot(128), head=KNeighborsRegressor(n_neighbors=1), min_groups=1, folds=3)
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0, min_pairs=8, refit_every=8), world_model=wm)
    rid = 0
    seen_raw, seen_real = [], []
    for k in range(12):
        actions = list(range(rid, rid + 6))
        rid += 6
        real = rng.uniform(0.0, 1.0, size=6).tolist()
        raw, _ = _run_group(loop, [k] * 6, actions, real)
        seen_raw += raw
        seen_real += real
        # it would memorise: once observed, the same rollouts are predicted exactly
        assert wm.predict_scores([k] * 6, actions).tolist() == real
    assert wm.n_refits == 12
    assert not np.isclose(seen_raw, seen_real).any()  # predictions at routing: out of sample
    raw_pairs, real_pairs = loop.corrector.debiaser.pairs()
    assert len(raw_pairs) == 72 and np.array_equal(real_pairs, seen_real)
    assert not np.isclose(raw_pairs, real_pairs).any()  # rescored pairs: out of fold
    wm_groups, real_groups = loop.advisor.groups()
    assert not np.isclose(np.ravel(wm_groups), np.ravel(real_groups)).any()


# ---------------------------------------------------------------------- pair rescoring
def test_pairs_and_advisor_groups_are_rescored_out_of_fold_after_a_refit():
    rng = np.random.default_rng(1)
    w = rng.normal(size=6)
    wm = LearnedWorldModel(CallableFeaturizer(lambda c, a: np.asarray(a)), head=Ridge(alpha=1e-3), folds=4)
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0, min_pairs=16, refit_every=16), world_model=wm)
    first_raw = None
    for k in range(10):
        actions = [rng.normal(size=6) for _ in range(8)]
        real = [float(a @ w + 0.05 * rng.normal()) for a in actions]
        raw, _ = _run_group(loop, [k] * 8, actions, real)
        first_raw = raw if first_raw is None else first_raw
    assert first_raw == [0.0] * 8  # the first group was predicted cold (a constant)
    cf = wm.crossfit_scores()
    assert cf.scores.shape == (80,) and sorted(set(cf.group_ids.tolist())) == list(range(10))
    # each fold's scores come from a head fitted on the other folds only
    from sklearn.model_selection import GroupKFold

    x, y = np.stack(wm._x), np.asarray(wm._y)
    for train, test in GroupKFold(n_splits=4).split(x, groups=cf.group_ids):
        head = Ridge(alpha=1e-3).fit(x[train], y[train])
        np.testing.assert_allclose(cf.scores[test], np.clip(head.predict(x[test]), y[train].min(), y[train].max()))
    raw_pairs, real_pairs = loop.corrector.debiaser.pairs()
    np.testing.assert_allclose(raw_pairs, cf.scores)
    np.testing.assert_allclose(real_pairs, cf.real)
    wm_groups, real_groups = loop.advisor.groups()
    by_group = cf.by_group()
    assert wm_groups == [by_group[g] for g in range(10)]  # the advisor's r describes the current model
    # the first group, predicted cold, now carries the current model's out-of-fold scores
    r_first = np.corrcoef(wm_groups[0], real_groups[0])[0, 1]
    assert r_first > 0.9
    assert loop.corrector.debiaser.fitted  # 80 pairs >= min_pairs: the map was refitted on them


def test_debiaser_replace_pairs_and_advisor_replace_scores():
    deb = IsotonicDebiaser(buffer_size=4, min_pairs=3, refit_every=100)
    deb.add_pairs([0.1, 0.2], [0.0, 1.0])
    assert not deb.fitted
    assert deb.replace_pairs([0.5, None, 0.1, 0.2, 0.3, 0.4], [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]) == 4
    assert deb.fitted and deb.pairs()[0].tolist() == [0.1, 0.2, 0.3, 0.4]  # the last buffer_size kept
    assert deb.transform([0.15, 0.35]).tolist() == [0.0, 1.0]
    assert deb.n_seen == 2  # no new pair was seen
    assert deb.replace_pairs([0.1], [0.0]) == 1 and not deb.fitted  # below min_pairs: identity
    from wmrl_envs.core.advisor import AnchorAdvisor

    adv = AnchorAdvisor(n_boot=0)
    adv.add_group([0.1, 0.2], [0.0, 1.0], ["a", "b"])
    adv.add_group([0.3, 0.4], [1.0, 0.0])
    assert adv.replace_world_model_scores({1: [0.9, float("nan")]}) == 1
    assert adv.groups() == ([[0.1, 0.2], [0.9, None]], [[0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="3 world-model scores for 2"):
        adv.replace_world_model_scores({0: [0.1, 0.2, 0.3]})
    with pytest.raises(ValueError, match="position 2"):
        adv.replace_world_model_scores({2: [0.1, 0.2]})


# ---------------------------------------------------------------------- state and cost
def _run(loop: CorrectionLoop, rng: np.random.Generator, k0: int, n: int, w: np.ndarray):
    out = []
    for k in range(k0, k0 + n):
        actions = [rng.normal(size=4) for _ in range(6)]
        real = [float(a @ w + 0.1 * rng.normal()) for a in actions]
        raw, _ = _run_group(loop, [k] * 6, actions, real)
        out.append(raw)
    return out


def test_state_round_trip_mid_run_gives_identical_next_predictions():
    w = np.array([1.0, -0.5, 0.2, 0.0])

    def make():
        wm = LearnedWorldModel(CallableFeaturizer(lambda c, a: np.asarray(a)), refit_every=2, folds=3)
        return CorrectionLoop(CorrectionConfig(anchor_fraction=0.5, min_pairs=12, refit_every=12),
                              world_model=wm, seed=3)

    loop = make()
    _run(loop, np.random.default_rng(5), 0, 9, w)  # 9 groups: mid refit interval (refit_every=2)
    assert loop.world_model.n_observed_groups >= 3
    state = json.loads(json.dumps(loop.state_dict()))  # strict JSON
    assert state["world_model"]["n_observed_groups"] == loop.world_model.n_observed_groups
    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.world_model.n_rollouts == loop.world_model.n_rollouts
    a = _run(loop, np.random.default_rng(9), 9, 8, w)
    b = _run(resumed, np.random.default_rng(9), 9, 8, w)
    assert a == b  # the same routes, the same learned model, the same predictions
    assert loop.world_model.n_refits == resumed.world_model.n_refits
    np.testing.assert_array_equal(loop.corrector.debiaser.pairs()[0], resumed.corrector.debiaser.pairs()[0])
    assert loop.advisor.groups() == resumed.advisor.groups()
    # a state saved before a world model could learn loads (no learned part, no advisor ids)
    old = {k: v for k, v in state.items() if k not in ("world_model", "advisor_group_ids")}
    make().load_state_dict(old)
    # a malformed learned part changes nothing
    bad = json.loads(json.dumps(state))
    bad["world_model"]["real"] = bad["world_model"]["real"][:-1]
    n, probe = resumed.world_model.n_rollouts, resumed.world_model.predict_scores([0], [np.ones(4)])
    with pytest.raises(ValueError, match="malformed"):
        resumed.load_state_dict(bad)
    assert resumed.world_model.n_rollouts == n
    assert resumed.world_model.predict_scores([0], [np.ones(4)]).tolist() == probe.tolist()


class _BusyRidge(RegressorMixin, BaseEstimator):
    """A ridge head whose fit burns ``busy_s`` CPU-seconds (to see the refit's cost in the ledger)."""

    def __init__(self, busy_s: float = 0.03):
        self.busy_s = busy_s

    def fit(self, x, y):
        t0 = time.process_time()
        while time.process_time() - t0 < self.busy_s:
            pass
        self.ridge_ = Ridge(alpha=1.0).fit(x, y)
        return self

    def predict(self, x):
        return self.ridge_.predict(x)


def test_refit_cost_is_charged_to_the_world_model_source():
    wm = LearnedWorldModel(CallableFeaturizer(lambda c, a: np.asarray(a)), head=_BusyRidge(0.03), folds=3,
                           refit_every=2)
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0, min_pairs=5000), world_model=wm)
    rng = np.random.default_rng(0)
    charged = []
    for k in range(6):
        actions = [rng.normal(size=3) for _ in range(4)]
        preds = loop.predict([k] * 4, actions)
        ticket = loop.open_group()
        n0, c0, s0 = (loop.ledger.count(WORLD_MODEL_SOURCE), loop.ledger.cpu_seconds(WORLD_MODEL_SOURCE),
                      loop.ledger.seconds(WORLD_MODEL_SOURCE))
        loop.close_group(ticket, [p.score for p in preds], rng.uniform(size=4).tolist(), actions=actions,
                         contexts=[k] * 4)
        assert loop.ledger.count(WORLD_MODEL_SOURCE) == n0  # learning makes no prediction
        charged.append((loop.ledger.cpu_seconds(WORLD_MODEL_SOURCE) - c0, loop.ledger.seconds(WORLD_MODEL_SOURCE) - s0))
    # groups 2, 4, 6 refit: 1 fit + min(3, groups held) out-of-fold fits of 0.03 CPU-s each;
    # groups 1, 3, 5 only store their rows
    for i, (cpu, wall) in enumerate(charged):
        if i % 2:
            fits = 1 + min(3, i + 1)
            assert cpu >= fits * 0.03 * 0.95 and wall >= fits * 0.03 * 0.95
        else:
            assert cpu < 0.03
    assert wm.n_refits == 3 and wm.fit_cpu_s == pytest.approx(sum(c for i, (c, _) in enumerate(charged) if i % 2))


def test_a_group_closed_without_actions_is_not_learned_from_and_warned_once():
    wm = LearnedWorldModel(CallableFeaturizer(lambda c, a: [a]), min_groups=1)
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0), world_model=wm)
    for _ in range(2):
        preds = loop.predict([0, 0], [1.0, 2.0])
        t = loop.open_group()
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            loop.close_group(t, [p.score for p in preds], [0.0, 1.0])
        assert len(rec) == (1 if t.group_id == 0 else 0)
    assert wm.n_observed_groups == 0


# ---------------------------------------------------------------------- cold start on the known truth
def test_cold_start_on_known_truth_auto_routes_more_to_real_first_and_less_later():
    """No pre-fitting: the learned model starts uninformative (r ~ 0) and learns the (task,
    action) table from the anchor groups; the advisor's r rises and ``auto`` first raises the
    fraction (a useless model calls for real execution), then lowers it as r rises."""
    env = KnownTruthEnv(n_tasks=6, n_actions=24, outcome_noise_std=0.1, table_seed=0)
    wm = LearnedWorldModel(_known_truth_featurizer(env), head=Ridge(alpha=1.0), refit_every=1, folds=5)
    cfg = CorrectionConfig(anchor_fraction="auto", cost_ratio=0.01, auto_start_fraction=0.25, f_min=0.05, f_max=0.5,
                           auto_min_groups=6, auto_window=12, min_pairs=64, refit_every=64,
                           auto_step_law="sgd")  # SGD's law: r ~ 0 calls for f_max, which makes the rise visible
    with pytest.warns(UserWarning, match="experimental"):
        loop = CorrectionLoop(cfg, world_model=wm, seed=0, groups_per_step=4)
    rng = np.random.default_rng(0)
    g = 8
    at_routing_raw, at_routing_real = [], []
    for _ in range(70):  # training steps (no policy update: a fixed uniform policy)
        loop.plan_step()
        for _ in range(loop.groups_per_step):
            task = int(rng.integers(env.n_tasks))
            actions = rng.integers(env.n_actions, size=g)
            real = env.sample_outcomes(np.full(g, task), actions, rng).tolist()
            raw, corr = _run_group(loop, [task] * g, actions.tolist(), real)
            if corr.route == "anchor":
                loop.record_execution(0.0, g, cpu_seconds=float(g))
                at_routing_raw.append(raw)
                at_routing_real.append(real)
    hist = loop.adaptive.history
    fractions = np.array([f for _, f, _ in hist])
    rs = np.array([r for _, _, r in hist])
    n_anchor = len(at_routing_raw)
    r_early, _ = pooled_within_group_correlation(at_routing_raw[:6], at_routing_real[:6])
    r_late, _ = pooled_within_group_correlation(at_routing_raw[-12:], at_routing_real[-12:])
    print(f"anchor groups {n_anchor}; r at routing, first 6 anchor groups {r_early:.2f}, last 12 {r_late:.2f}; "
          f"fraction by step {np.round(fractions, 3).tolist()}; advisor r {np.round(rs, 2).tolist()}")
    assert np.ptp(at_routing_raw[0]) == 0.0  # the first anchor group was predicted cold: no signal
    assert r_early < 0.4 and r_late > 0.8  # learned from the anchors, out of sample
    first_adapted = int(np.flatnonzero(np.isfinite(rs))[0])
    # at first (r low) auto routes more to real execution: the fraction rises to f_max ...
    assert fractions[first_adapted:first_adapted + 5].max() == pytest.approx(0.5)
    # ... and later, once the learned model's r has risen, it routes less
    assert fractions[-5:].max() <= 0.1 and np.nanmean(rs[-5:]) > 0.7


# ---------------------------------------------------------------------- through the wrappers
def _kt_learned(env):
    return LearnedWorldModel(_known_truth_featurizer(env), head=Ridge(alpha=1.0), folds=3)


def test_learned_model_through_the_per_episode_wrapper():
    base = KnownTruthEnv(n_tasks=2, n_actions=6, outcome_noise_std=0.0)
    wm = _kt_learned(base)
    w = AnchoredWorldModelWrapper(base, wm, group_size=4,
                                  correction=CorrectionConfig(anchor_fraction=1.0, min_pairs=16, refit_every=16))
    rng = np.random.default_rng(0)
    for k in range(12):
        task = k % 2
        for a in rng.integers(6, size=4):
            w.reset(options={"task": task})
            w.step(int(a))
    assert wm.n_observed_groups == 12 and wm.n_rollouts == 48
    truth = base.expected_table
    pred = wm.predict_scores([t for t in range(2) for _ in range(6)], [a for _ in range(2) for a in range(6)])
    assert np.corrcoef(pred, truth.ravel())[0, 1] > 0.9
    # score_group teaches it too
    before = wm.n_observed_groups
    w.score_group([0, 1, 2, 3], options={"task": 0}, route="anchor")
    assert wm.n_observed_groups == before + 1


def test_learned_model_through_the_vector_wrapper():
    g = 4
    base = KnownTruthEnv(n_tasks=2, n_actions=6, outcome_noise_std=0.0)
    wm = _kt_learned(base)
    venv = make_vector_env(lambda: KnownTruthEnv(n_tasks=2, n_actions=6, outcome_noise_std=0.0), 2 * g,
                           autoreset_mode=AutoresetMode.SAME_STEP)
    env = AnchoredWorldModelVectorWrapper(venv, wm, group_size=g,
                                          correction=CorrectionConfig(anchor_fraction=1.0, min_pairs=16,
                                                                      refit_every=16),
                                          task_fn=lambda lane, rnd: (None, {"task": (lane + rnd) % 2}))
    env.reset(seed=0)
    rng = np.random.default_rng(1)
    for _ in range(6):
        env.step(rng.integers(6, size=2 * g))
    assert wm.n_observed_groups == 12 and wm.n_rollouts == 48
    truth = base.expected_table
    pred = wm.predict_scores([t for t in range(2) for _ in range(6)], [a for _ in range(2) for a in range(6)])
    assert np.corrcoef(pred, truth.ravel())[0, 1] > 0.9
    assert len(env.loop.corrector.debiaser.pairs()[0]) == 48


# ---------------------------------------------------------------------- featurizers
class _FakeEncoder:
    dim = 3

    def encode(self, texts):
        return np.array([[len(t), t.count("a"), 1.0] for t in texts], np.float32)


def test_sentence_encoder_featurizer_layout():
    f = SentenceEncoderFeaturizer(_FakeEncoder(), context_weight=0.5)
    x = f(["ab", "c"], ["aaa", "b"])
    assert x.dtype == np.float32 and x.shape == (2, 9)
    assert x[0].tolist() == [3, 3, 1, 1, 0.5, 0.5, 6, 3, 1]  # [e(a), 0.5 e(c), e(a) * e(c)]
    assert SentenceEncoderFeaturizer(_FakeEncoder(), interaction=False)([], []).shape == (0, 6)
    with pytest.raises(TypeError, match="encode"):
        SentenceEncoderFeaturizer(object())


def test_a_saved_state_of_another_feature_width_is_refused_at_load():
    """The saved rows' width is checked against the featurizer's ``dim`` (issue 25): before, a
    state of another width loaded silently and the first prediction failed far from the cause."""
    saved = LearnedWorldModel(SentenceEncoderFeaturizer(_FakeEncoder()), min_groups=1)  # 9 features
    saved.observe(["ab", "c"], ["aaa", "b"], [0.5, 0.1], group_id=0)
    state = json.loads(json.dumps(saved.state_dict()))
    other = LearnedWorldModel(SentenceEncoderFeaturizer(_FakeEncoder(), interaction=False), min_groups=1)
    with pytest.raises(ValueError, match=r"saved rows have 9 features, but this model's featurizer "
                                         r"\(SentenceEncoderFeaturizer\) gives 6: build the model with the same "
                                         r"featurizer as the run that saved the state, or start fresh"):
        other.load_state_dict(state)
    assert other.n_rollouts == 0 and not other.fitted and other.featurizer.dim == 6  # nothing changed
    same = LearnedWorldModel(SentenceEncoderFeaturizer(_FakeEncoder()), min_groups=1)
    same.load_state_dict(state)
    assert same.predict_scores(["ab"], ["aaa"]).tolist() == saved.predict_scores(["ab"], ["aaa"]).tolist()
    # a user function that declares its width is checked the same way; through the loop too
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0),
                          world_model=LearnedWorldModel(CallableFeaturizer(lambda c, a: [a, a], dim=2), min_groups=1))
    _run_group(loop, [0, 0], [1.0, 2.0], [0.1, 0.2])
    wide = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0),
                          world_model=LearnedWorldModel(CallableFeaturizer(lambda c, a: [a] * 3, dim=3), min_groups=1))
    with pytest.raises(ValueError, match="saved rows have 2 features.*gives 3"):
        wide.load_state_dict(json.loads(json.dumps(loop.state_dict())))
    # without a declared width the first prediction says the same fix
    undeclared = LearnedWorldModel(CallableFeaturizer(lambda c, a: [a] * 3), min_groups=1)
    undeclared.load_state_dict(loop.world_model.state_dict())
    with pytest.raises(ValueError, match="returned 3 features, the rows stored have 2.*same featurizer as the run "
                                         "that saved the state, or start fresh"):
        undeclared.predict([0], [1.0])


@pytest.mark.parametrize("fn, batched, shape", [
    (lambda c, a: np.full((2, 3), a), False, r"\(2, 3\) for one \(context, action\) pair"),
    (lambda c, a: [[a, a]], False, r"\(1, 2\) for one"),
    (lambda cs, acts: np.ones((len(acts), 2, 3)), True, r"shape \(2, 2, 3\) for 2 pairs; make it return a \(2, D\)"),
    (lambda cs, acts: np.ones(len(acts)), True, r"shape \(2,\) for 2 pairs"),
    (lambda cs, acts: np.ones((1, 4)), True, r"shape \(1, 4\) for 2 pairs"),
])
def test_a_pairs_features_of_another_shape_than_one_row_are_an_error_not_flattened(fn, batched, shape):
    # issue 38: a (2, 3) array per pair used to become 6 features without a word
    with pytest.raises(ValueError, match=shape):
        CallableFeaturizer(fn, batched=batched)([0, 0], [1.0, 2.0])
    with pytest.raises(ValueError, match=shape):  # the same through the world model
        LearnedWorldModel(CallableFeaturizer(fn, batched=batched)).predict([0, 0], [1.0, 2.0])
    # any other featurizer given to the world model: its (B, D) result is checked there
    with pytest.raises(ValueError, match=r"must return a \(B, D\) array for B = 2 pairs, got shape \(2, 2, 3\)"):
        LearnedWorldModel(lambda cs, acts: np.ones((len(acts), 2, 3))).predict([0, 0], [1.0, 2.0])
    # what stays allowed: a 1-D row, and a scalar as one feature
    assert CallableFeaturizer(lambda c, a: np.ravel(np.full((2, 3), a)))([0], [2.0]).shape == (1, 6)
    assert CallableFeaturizer(lambda c, a: a)([0, 0], [1.0, 2.0]).tolist() == [[1.0], [2.0]]


def test_featurizer_errors_say_what_was_wrong_and_how_to_fix_it():
    with pytest.raises(TypeError, match=r"fn must be callable, got int: pass a function fn\(context, action\)"):
        CallableFeaturizer(3)
    with pytest.raises(ValueError, match=r"different lengths \[1, 2\]; make it return the same D numbers"):
        CallableFeaturizer(lambda c, a: [a] * int(a))([0, 0], [1, 2])
    with pytest.raises(ValueError, match="returned 1 features per pair, but dim=2 was declared: make it return dim"):
        CallableFeaturizer(lambda c, a: [a], dim=2)([0], [1.0])
    with pytest.raises(ValueError, match="returned 2 features per pair, but dim=3"):
        CallableFeaturizer(lambda cs, acts: [[a, a] for a in acts], batched=True, dim=3)([0], [1.0])
    with pytest.raises(ValueError, match="dim must be an integer >= 1"):
        CallableFeaturizer(lambda c, a: [a], dim=0)
    with pytest.raises(TypeError, match=r"got object: pass e.g. wmrl_envs.envs.autoresearch.SentenceEncoder.shared\(\)"):
        SentenceEncoderFeaturizer(object())
    with pytest.raises(ValueError, match=r"context_weight must be a number >= 0 \(0 ignores the context, 1 weighs it "
                                         r"as the action\), got -1"):
        SentenceEncoderFeaturizer(_FakeEncoder(), context_weight=-1)

    class _Liar(_FakeEncoder):
        dim = 4

    with pytest.raises(ValueError, match=r"encoder returned shape \(4, 3\) for 4 texts, expected \(4, 4\) from its "
                                         r"dim: give it a dim equal to its embedding width"):
        SentenceEncoderFeaturizer(_Liar())(["a", "b"], ["c", "d"])
    with pytest.raises(TypeError, match="config.hidden_size, got object: pass e.g. AutoModelForCausalLM"):
        PolicyHiddenStateFeaturizer(object(), lambda *a, **k: None)

    class _Model:
        class config:  # noqa: N801 - mirrors a transformers config
            hidden_size = 4

    with pytest.raises(TypeError, match="tokenizer must be callable.*pass the model's AutoTokenizer"):
        PolicyHiddenStateFeaturizer(_Model(), object())
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        PolicyHiddenStateFeaturizer(_Model(), lambda *a, **k: None, batch_size=0)
    assert PolicyHiddenStateFeaturizer(_Model(), lambda *a, **k: None).dim == 4
    wm = LearnedWorldModel(CallableFeaturizer(lambda c, a: [float("nan")]))
    with pytest.raises(ValueError, match="non-finite features \\(NaN or inf\\) in 1 of 1 rows: make it return finite"):
        wm.predict([0], [1.0])


def test_policy_hidden_state_featurizer_on_a_tiny_random_causal_lm():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg)

    class _Tok:  # a byte-level tokenizer (no download)
        pad_token, eos_token, pad_token_id, eos_token_id = None, "\0", None, 0

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": list(text.encode())}

    f = PolicyHiddenStateFeaturizer(model, _Tok(), max_length=32, batch_size=2)
    model.train()
    x = f(["Q: 1+1?", "Q: 2+2?", "Q: 1+1?"], [" 2", " 4", " 2"])
    assert model.training  # its mode is given back
    assert x.shape == (3, 16) and x.dtype == np.float32 and np.isfinite(x).all()
    np.testing.assert_allclose(x[0], x[2], rtol=1e-5)  # deterministic (one forward pass, eval mode)
    assert not np.allclose(x[0], x[1])
    # the padded row in a batch equals the row alone (mean over real tokens only)
    np.testing.assert_allclose(f(["Q: 2+2?"], [" 4"])[0], x[1], rtol=1e-4, atol=1e-5)
    wm = LearnedWorldModel(f, min_groups=1)
    wm.observe(["Q: 1+1?", "Q: 1+1?"], [" 2", " 3"], [1.0, 0.0], group_id=0)
    assert wm.fitted and len(wm.predict(["Q: 1+1?"], [" 2"])) == 1

    # the prompt's pass is kept: the features are one forward pass over prompt + completion ids,
    # mean-pooled, and a prompt seen before costs no pass
    def whole(text):
        with torch.no_grad():
            h = model(input_ids=torch.tensor([list(text.encode())[-32:]]), output_hidden_states=True).hidden_states[-1]
        return h[0].mean(0).numpy()

    passes = f.prompt_passes
    y = f(["Q: 1+1?", "Q: 1+1?", "Q: 9+9?"], [" 2", " eleven", ""])
    assert f.prompt_passes == passes + 1  # only "Q: 9+9?" is new
    for row, text in zip(y, ["Q: 1+1? 2", "Q: 1+1? eleven", "Q: 9+9?"]):
        np.testing.assert_allclose(row, whole(text), rtol=1e-4, atol=1e-5)
    long = "Q: " + "x" * 40  # over max_length=32 tokens: its last 32, run whole
    np.testing.assert_allclose(f([long], [" 1"])[0], whole(long + " 1"), rtol=1e-4, atol=1e-5)
    g = PolicyHiddenStateFeaturizer(model, _Tok(), prompt_cache=1)
    g(["a", "b"], ["1", "2"])
    assert list(g._prompts) == ["b"] and g.prompt_passes == 2  # one prompt kept, least recently used dropped
    with pytest.raises(ValueError, match="3 contexts but 1 actions: pass one context per action"):
        g(["a", "b", "c"], ["1"])
    with pytest.raises(ValueError, match="got a bare string: wrap one rollout as featurizer"):
        g("abc", "xyz")
    with pytest.raises(ValueError, match="prompt_cache must be an integer >= 0, got -1"):
        PolicyHiddenStateFeaturizer(model, _Tok(), prompt_cache=-1)


def test_autoresearch_featurizer_reads_the_task_description_and_the_estimator_line():
    from wmrl_envs.envs.autoresearch import autoresearch_featurizer, autoresearch_learned_world_model
    from wmrl_envs.envs.autoresearch.embedding_world_model import action_text, describe_task

    class _Recording(_FakeEncoder):
        texts: list = []

        def encode(self, texts):
            self.texts += list(texts)
            return super().encode(texts)

    enc = _Recording()
    code = "import x\nmodel = RandomForestClassifier(n_estimators=50)\nmodel.fit(X, y)\n"
    x = autoresearch_featurizer(enc, context_weight=0.3)([{"task_id": "credit-default"}], [code])
    assert x.shape == (1, 9)
    assert enc.texts == [action_text(code), describe_task("credit-default")]
    assert enc.texts[0] == "model = RandomForestClassifier(n_estimators=50)"
    wm = autoresearch_learned_world_model(enc, folds=3)
    assert isinstance(wm, LearnedWorldModel) and (wm.refit_every, wm.max_rollouts, wm.folds) == (4, 2000, 3)


def test_learned_model_through_the_async_scorer():
    """The Ray scorer's groups teach the model too (a stand-in pool that executes at once; no Ray)."""
    from wmrl_envs.distributed import AsyncAnchoredScorer, GroupExecution

    base = KnownTruthEnv(n_tasks=2, n_actions=6, outcome_noise_std=0.0)

    class _Done:
        def __init__(self, res):
            self.res = res

        def done(self):
            return True

        def result(self, timeout=None):
            return self.res

    class _Pool:
        ledger = None

        def execute_group(self, actions, seed=None, options=None):
            r = [base.true_score(options["task"], a) for a in actions]
            n = len(actions)
            return _Done(GroupExecution(r, [None] * n, [{} for _ in range(n)], [0.0] * n, [0] * n, [None] * n,
                                        causes=[None] * n, cpu_seconds=[1.0] * n))

    wm = _kt_learned(base)
    w = AnchoredWorldModelWrapper(base, wm, group_size=4,
                                  correction=CorrectionConfig(anchor_fraction=1.0, min_pairs=16, refit_every=16))
    scorer = AsyncAnchoredScorer(w, _Pool(), ordered=False)
    rng = np.random.default_rng(2)
    for k in range(8):
        scorer.submit(rng.integers(6, size=4).tolist(), options={"task": k % 2})
    assert len(scorer.collect()) == 8
    assert wm.n_observed_groups == 8 and wm.n_rollouts == 32
    assert len(w.loop.corrector.debiaser.pairs()[0]) == 32


def test_a_learned_state_loaded_by_a_loop_whose_world_model_does_not_learn_is_warned_about():
    """Found by a fresh-user review: the learned part of a saved run was dropped without a word."""
    from wmrl_envs.core import CorrectionLoop

    class Frozen:
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=0.0) for _ in actions]

    loop = CorrectionLoop(world_model=Frozen())
    state = loop.state_dict()
    state["world_model"] = {"anything": 1}
    with pytest.warns(UserWarning, match="has no load_state_dict: the saved state is ignored"):
        CorrectionLoop(world_model=Frozen()).load_state_dict(state)


def test_a_refit_after_a_training_group_closed_in_evaluation_passes_the_intent_and_never_flips_the_flag():
    """Issue 37, item 6: the rescoring after a refit replaced the debiaser's pairs by setting its
    ``training`` flag to True and back (a reader on another thread saw True during evaluation).
    The intent now travels as ``replace_pairs(..., training=True)``; the flag is never written."""

    class WatchedDebiaser(IsotonicDebiaser):
        writes: list[bool] = []

        def __setattr__(self, name, value):
            if name == "training" and "training" in self.__dict__:
                WatchedDebiaser.writes.append(value)
            super().__setattr__(name, value)

    rng = np.random.default_rng(3)
    w = rng.normal(size=6)
    wm = LearnedWorldModel(CallableFeaturizer(lambda c, a: np.asarray(a)), head=Ridge(alpha=1e-3), folds=4)
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0, min_pairs=16, refit_every=16), world_model=wm)
    loop.corrector.debiaser.__class__ = WatchedDebiaser
    for k in range(4):  # a few training groups first
        actions = [rng.normal(size=6) for _ in range(8)]
        _run_group(loop, [k] * 8, actions, [float(a @ w) for a in actions])
    actions = [rng.normal(size=6) for _ in range(8)]
    loop.predict([9] * 8, actions)
    ticket = loop.open_group()  # a training ticket ...
    loop.training = False  # ... closed in evaluation mode: the model refits and rescores
    WatchedDebiaser.writes.clear()
    fits = wm.n_refits
    loop.close_group(ticket, [0.0] * 8, [float(a @ w) for a in actions], actions=actions, contexts=[9] * 8)
    assert wm.n_refits == fits + 1  # a refit happened and the pairs were rescored
    raw_pairs, _ = loop.corrector.debiaser.pairs()
    np.testing.assert_allclose(raw_pairs, wm.crossfit_scores().scores)  # the buffer was replaced all the same
    assert WatchedDebiaser.writes == []  # the flag was never written (was [True, False])
    assert loop.corrector.debiaser.training is False


# ---------------------------------------------------------------------------------- pre-check

def test_a_precheck_decides_its_pairs_without_the_head_and_in_the_out_of_fold_scores():
    """Actions < 0 "certainly fail" (score 0.0): the head never scores them, their predictions say
    so, the stored rows' out-of-fold scores are the pre-check's, and all of it survives a reload."""
    asked: list[float] = []

    def featurize(c, a):
        asked.append(a)
        return [a]

    def precheck(c, a):
        return 0.0 if a < 0 else None

    wm = LearnedWorldModel(CallableFeaturizer(featurize), min_groups=1, precheck=precheck)
    wm.observe([0] * 4, [1.0, -1.0, 2.0, -3.0], [0.5, 0.0, 0.9, 0.0], group_id=0)
    wm.observe([0] * 4, [1.5, -2.0, 2.5, 3.0], [0.6, 0.0, 1.0, 1.0], group_id=1)
    asked.clear()
    preds = wm.predict([0] * 3, [1.2, -7.0, 2.2])
    assert asked == [1.2, 2.2]  # -7 went to the pre-check only
    assert preds[1].score == 0.0 and preds[1].model_called is False and preds[1].extras["precheck"] is True
    assert preds[0].model_called is True and "precheck" not in preds[0].extras and preds[0].score > 0.2
    assert wm.n_precheck == 1
    cf = wm.crossfit_scores()
    decided = np.isin(cf.members, [1, 3]) & (cf.group_ids == 0) | (cf.members == 1) & (cf.group_ids == 1)
    assert np.all(cf.scores[decided] == 0.0) and np.all(cf.scores[~decided] > 0.0)
    state = json.loads(json.dumps(wm.state_dict()))
    assert state["precheck_scores"] == [None, 0.0, None, 0.0, None, 0.0, None, None] and state["n_precheck"] == 1
    again = LearnedWorldModel(CallableFeaturizer(featurize), min_groups=1, precheck=precheck)
    again.load_state_dict(state)
    assert again.n_precheck == 1 and np.array_equal(np.isnan(again._pre), np.isnan(wm._pre))
    assert np.all(again.crossfit_scores().scores[decided] == 0.0)
    # a state saved before pre-checks existed loads with nothing decided
    del state["precheck_scores"]
    old = LearnedWorldModel(CallableFeaturizer(featurize), min_groups=1)
    old.load_state_dict(state)
    assert np.all(np.isnan(old._pre)) and len(old._pre) == 8


def test_a_precheck_that_returns_nan_or_is_not_callable_is_refused():
    with pytest.raises(TypeError, match="precheck must be None or a callable"):
        LearnedWorldModel(CallableFeaturizer(lambda c, a: [a]), precheck=0.0)
    wm = LearnedWorldModel(CallableFeaturizer(lambda c, a: [a]), precheck=lambda c, a: float("nan"))
    with pytest.raises(ValueError, match="the pre-check returned nan"):
        wm.predict([0], [1.0])
