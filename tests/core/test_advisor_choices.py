"""The advisor's step law and every choice it prices (issue 39): Adam's law against the steps
real GRPO measured at smaller batches, the real batches and the words of the recommendation, a
smaller real batch offered for a world model without signal, WMRL for a good one, world model only
priced but never recommended, the preferred-half r that sees a per-action bias, and the train
summary's rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wmrl_envs.core.advisor import AnchorAdvisor
from wmrl_envs.core.advisor_choices import preferred_half_r, price_choices, real_batches, recommend
from wmrl_envs.core.advisor_model import CostRates, pooled_within_group_correlation, steps_ratio



def synthetic_groups(r: float, n_groups: int, g: int = 4, seed: int = 0, offset_scale: float = 5.0):
    """Groups whose within-group world-model/real correlation is r (as in test_advisor.py)."""
    rng = np.random.default_rng(seed)
    wm, real = [], []
    for _ in range(n_groups):
        z, e = rng.normal(size=g), rng.normal(size=g)
        real.append(list(z + offset_scale * rng.normal()))
        wm.append(list(r * z + math.sqrt(1 - r * r) * e - offset_scale * rng.normal()))
    return wm, real

# benchmarks/advisor_root_cause.py (results/advisor_root_cause.json): real GRPO on the known-truth map,
# Adam at lr 0.2, 8 seeds; B_noise from the 16-group runs' first 3 steps; median steps to the target
# at B groups per step over those at 16
MEASURED_B_NOISE = 15.86
MEASURED_STEPS_RATIO = {8: 1.22, 4: 1.58, 2: 2.09, 1: 2.91}


@pytest.mark.parametrize("batch", sorted(MEASURED_STEPS_RATIO))
def test_adams_step_law_predicts_the_steps_real_grpo_measured_at_smaller_batches(batch):
    b16 = MEASURED_B_NOISE / 16
    predicted = 1.0 / steps_ratio(batch / 16, b16)   # steps at `batch` over steps at 16
    assert predicted == pytest.approx(MEASURED_STEPS_RATIO[batch], rel=0.03)
    if batch <= 4:  # SGD's retuned-lr law, the model before issue 39, is off by far more
        assert 1.0 / steps_ratio(batch / 16, b16, "sgd") > 1.5 * MEASURED_STEPS_RATIO[batch]


def test_steps_ratio_limits_and_errors():
    assert steps_ratio(0.25) == pytest.approx(0.5) and steps_ratio(0.25, None, "sgd") == pytest.approx(0.25)
    assert steps_ratio(0.25, 0.0) == 1.0 and steps_ratio(0.0, 1.0) == 0.0
    assert steps_ratio(2.0, 1.0) == pytest.approx(math.sqrt(2 / 1.5))  # a larger batch takes fewer steps
    with pytest.raises(ValueError, match="step_law"):
        steps_ratio(0.5, 1.0, "lion")
    with pytest.raises(ValueError, match="q must be"):
        steps_ratio(-0.1, 1.0)


def test_real_batches_run_from_the_anchor_batch_to_the_users():
    assert [g for _, g in real_batches(16, 0.05)] == [16, 8, 4, 2, 1]
    assert [g for _, g in real_batches(10, 0.05)] == [10, 5, 2, 1]
    assert [g for _, g in real_batches(64, 0.1)] == [64, 32, 16, 8, 6]   # the anchor batch: round(0.1 × 64)
    assert [s for s, g in real_batches(None, 0.05)] == [1.0, 0.5, 0.25, 0.125, 0.0625]
    with pytest.raises(ValueError, match="groups_per_step"):
        real_batches(0, 0.05)


def test_a_world_model_without_signal_is_told_to_use_a_smaller_real_batch():
    costs = CostRates(execution_s=1.0, world_model_s=0.01)
    choices = price_choices(0.0, costs, 1.0, groups_per_step=16)
    kinds = [c.kind for c in choices]
    assert kinds.count("real") == 5 and kinds.count("world_model_only") == 1 and kinds[-1] == "world_model_only"
    real1 = next(c for c in choices if c.kind == "real" and c.groups_per_step == 1)
    assert real1.predicted_speedup == pytest.approx(16 * math.sqrt(2 / (1 + 16)))   # (B/B') sqrt((1+b)/(1+bB/B'))
    assert real1.steps_factor == pytest.approx(math.sqrt(17 / 2))
    best, _, text = recommend(choices)
    assert best is real1 and text.startswith("train on real execution with 1 group per step: predicted 5.49x")
    wmrl = [c for c in choices if c.kind == "wmrl"]
    assert all(c.predicted_speedup < real1.predicted_speedup for c in wmrl)


def test_a_good_world_model_is_wmrl_and_world_model_only_is_never_recommended():
    costs = CostRates(execution_s=1.0, world_model_s=0.001)
    reps = list(np.clip(np.random.default_rng(0).normal(0.9, 0.02, size=200), -1, 1))
    choices = price_choices(0.9, costs, 1.0, groups_per_step=16, r_replicates=reps)
    wm_only = choices[-1]
    assert wm_only.kind == "world_model_only" and wm_only.predicted_speedup == max(c.predicted_speedup for c in choices)
    best, close, text = recommend(choices)
    assert best.kind == "wmrl" and best.share == 0.05 and text.startswith("use WMRL at anchor fraction 0.05")
    assert best.ci[0] < best.predicted_speedup < best.ci[1]
    assert all(c.kind != "world_model_only" for c in close)


def test_advise_prices_every_choice_and_its_verdict_follows_the_cheapest():
    costs = CostRates(execution_s=1.0, world_model_s=0.01)
    useless = AnchorAdvisor(n_boot=100, seed=0)
    for w, x in zip(*synthetic_groups(0.0, 400, seed=3)):
        useless.add_group(w, x)
    a = useless.advise(costs, noise_batch_ratio=1.0, groups_per_step=16)
    assert not a.use_wmrl and "train on real execution with 1 group per step" in a.verdict
    assert "the pilot has not shown the world model carries signal within groups" in a.verdict
    assert a.best_choice.startswith("train on real execution with 1 group per step")
    assert {c["kind"] for c in a.choices} == {"real", "wmrl", "world_model_only"}
    assert "every choice" in a.format() and "best choice:" in a.format()
    good = AnchorAdvisor(n_boot=100, seed=0)
    for w, x in zip(*synthetic_groups(0.9, 400, seed=4)):
        good.add_group(w, x)
    g = good.advise(costs, noise_batch_ratio=1.0, groups_per_step=16)
    assert g.use_wmrl and g.verdict.startswith("use WMRL at anchor fraction 0.050") and g.recommended_fraction == 0.05
    assert g.to_dict()["choices"][0]["groups_per_step"] == 16


def _biased_groups(bias: float, n_groups: int = 600, g: int = 8, seed: int = 0):
    """Real = quality + outcome noise; the world model sees the quality with noise, and over-rates a
    quarter of the actions by ``bias`` (a per-action bias that a monotone map cannot remove)."""
    rng = np.random.default_rng(seed)
    wm, real = [], []
    for _ in range(n_groups):
        mu = rng.normal(size=g)
        over = rng.random(g) < 0.25
        real.append(list(mu + 0.3 * rng.normal(size=g)))
        wm.append(list(mu + bias * over + 0.5 * rng.normal(size=g)))
    return wm, real


def test_preferred_half_r_sees_a_per_action_bias_that_the_overall_r_hides():
    wm, real = _biased_groups(2.0)
    r_all = pooled_within_group_correlation(wm, real)[0]
    r_half = preferred_half_r(wm, real)
    assert r_all > 0.5 and r_half < r_all - 0.25   # the top-rated half is where the over-rated actions sit
    wm0, real0 = _biased_groups(0.0)
    r0, h0 = pooled_within_group_correlation(wm0, real0)[0], preferred_half_r(wm0, real0)
    assert h0 > r0 - 0.2                           # without a bias the preferred half keeps most of r
    assert r_half < h0 - 0.2


def test_advise_states_the_drift_and_the_fraction_that_protects_against_it():
    costs = CostRates(execution_s=1.0, world_model_s=0.05)
    adv = AnchorAdvisor(n_boot=0)
    for w, x in zip(*_biased_groups(2.0, n_groups=300)):
        adv.add_group(w, x)
    a = adv.advise(costs, noise_batch_ratio=1.0)
    assert a.r_preferred_half < a.r - 0.25
    assert a.drift_fraction >= a.recommended_fraction
    assert "drift:" in a.format() and a.predicted_speedup_drift < a.predicted_speedup


def test_train_summary_rows_show_every_choice():
    from agents.train.summary import _advice_rows

    costs = CostRates(execution_s=1.0, world_model_s=0.01)
    adv = AnchorAdvisor(n_boot=50, seed=0)
    for w, x in zip(*synthetic_groups(0.9, 100, seed=5)):
        adv.add_group(w, x)
    d = adv.advise(costs, noise_batch_ratio=1.0, groups_per_step=4).to_dict()
    rows = dict(_advice_rows({"anchor_advice": d}))
    assert rows["advisor's best choice (every choice priced from this run's anchors)"] == d["best_choice"]
    assert "  train on real execution with 1 group per step" in rows
    assert rows["advisor's verdict"] == d["verdict"]


def loop_with_anchor_groups(groups_per_step: int, world_model_groups, real_groups):
    """A :class:`CorrectionLoop` at anchor fraction 0.5 whose world model scores an action as the
    number it is, fed these groups (real scores only on its anchor groups), with a ledger of 80
    executions (80 CPU-s) and 160 predictions (1.6 CPU-s): what ``wmrl train``'s summary advises from."""
    from wmrl_envs.core import CorrectionConfig, CorrectionLoop
    from wmrl_envs.world_models.base import WorldModelPrediction

    class WM:
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=float(a)) for a in actions]

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5, min_pairs=4, refit_every=4, warmup_groups=1),
                          world_model=WM(), groups_per_step=groups_per_step, seed=0)
    for w, x in zip(world_model_groups, real_groups):
        t = loop.open_group()
        loop.close_group(t, w, x if t.route == "anchor" else None)
    loop.ledger.add("execution", seconds=1.0, count=80, cpu_seconds=80.0)
    loop.ledger.add("world_model", seconds=0.1, count=160, cpu_seconds=1.6)
    return loop


def test_train_summary_advises_from_the_runs_own_anchors_at_its_groups_per_step():
    from agents.train.summary import anchor_advice

    loop = loop_with_anchor_groups(8, *synthetic_groups(0.8, 40, seed=4, offset_scale=0.0))
    d = anchor_advice(loop)
    assert d["n_groups"] == len(loop.advisor) >= 8
    assert [c["groups_per_step"] for c in d["choices"] if c["kind"] == "real"] == [8, 4, 2, 1]
    assert d["r"] == pytest.approx(loop.advise().r) and d["best_choice"]


def test_wmrl_advise_refuses_an_unknown_step_law_before_the_pilot():
    from agents.advise import AdviseConfig, main_advise

    with pytest.raises(ValueError, match="--step-law must be one of"):
        main_advise(AdviseConfig(step_law="lion", env="no_such_module:make"), log=lambda s: None)


def test_a_world_models_fitting_is_counted_against_real_grpos_compute_to_the_target():
    from wmrl_envs.core.advisor_choices import fitting_share, with_fitting

    costs = CostRates(2.5, 0.02, other_s=0.0)
    # 175 logged executions against 10 steps of 10 groups of 4: 175 / 400 of real GRPO's compute
    phi = fitting_share(175, 10, 10, 4, costs)
    assert phi == pytest.approx(175 / 400)
    choices = price_choices(0.5, costs, 8.0, groups_per_step=10, f_min=0.05, r_replicates=[0.4, 0.5, 0.6])
    counted = with_fitting(choices, phi)
    for before, after in zip(choices, counted):
        if before.kind == "real":
            assert after == before  # a real batch pays no fitting
        else:  # compute to the target = real's / s + the fitting
            assert 1 / after.predicted_speedup == pytest.approx(1 / before.predicted_speedup + phi)
            assert after.ci[0] < after.predicted_speedup < after.ci[1]
    wm_only = next(c for c in counted if c.kind == "world_model_only")
    assert wm_only.predicted_speedup < 1 / phi  # the fitting alone bounds what a world model can save
    # a world model free before training changes nothing; bad counts are named
    assert with_fitting(choices, 0.0) == list(choices)
    with pytest.raises(ValueError, match="real_steps"):
        fitting_share(175, 0, 10, 4, costs)
    with pytest.raises(ValueError, match=">= 0"):
        with_fitting(choices, -1.0)


def test_counting_the_fitting_can_turn_the_recommendation_to_a_smaller_real_batch():
    from wmrl_envs.core.advisor_choices import with_fitting

    costs = CostRates(2.5, 0.02, other_s=0.0)
    choices = price_choices(0.5, costs, 8.0, groups_per_step=10, f_min=0.05)
    assert recommend(choices)[0].kind == "wmrl"
    best, _, text = recommend(with_fitting(choices, 2.0))  # a fitting twice real GRPO's compute
    assert best.kind == "real" and best.groups_per_step < 10 and "real execution with" in text


def test_numpy_integers_are_counts_and_bad_arguments_are_refused_clearly():
    # review 3, item 8
    from wmrl_envs.core.advisor import CostRates
    from wmrl_envs.core.advisor_choices import fitting_share

    costs = CostRates(1.0, 0.01)
    assert [g for _, g in real_batches(np.int64(16), 0.05)] == [16, 8, 4, 2, 1]
    assert [c.groups_per_step for c in price_choices(0.5, costs, groups_per_step=np.int32(10)) if c.kind == "real"] == [
        10, 5, 2, 1]
    assert fitting_share(np.int64(100), np.int64(10), np.int64(10), np.int64(4), CostRates(1.0, 0.01, 0.0)) == 0.25
    with pytest.raises(ValueError, match="groups_per_step must be an integer"):
        real_batches(True, 0.05)
    with pytest.raises(TypeError, match="f_min must be a number"):
        price_choices(0.5, costs, f_min="0.05")
    with pytest.raises(TypeError, match="costs must be a CostRates"):
        price_choices(0.5, {"execution_s": 1.0})
    with pytest.raises(ValueError, match="fractions must be finite numbers.*nan"):
        price_choices(0.5, costs, fractions=(0.1, float("nan")))
    with pytest.raises(ValueError, match=r"r_replicates must be correlations in \[-1, 1\].*1.5"):
        price_choices(0.5, costs, r_replicates=[0.4, 1.5])
    # NaN replicates stay allowed (a resample without a correlation), and are left out
    assert len(price_choices(0.5, costs, r_replicates=[0.4, float("nan"), 0.6])) > 0
