"""What the advisor's verdict says and how (issue 39's review): it follows the fitting-counted choice, no WMRL without
evidence of signal, the flat-map verdict's words, "as good within the interval" for real batches,
real batches' b-range, the drift's wording, one interval per speedup, "1 group", an unbounded
speedup without a warning, and the train summary's anchor-window hint."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest

from wmrl_envs.core.advisor import AnchorAdvisor, CostRates
from wmrl_envs.core.advisor_choices import Choice, fitting_share, price_choices, recommend


def groups(r: float, n: int, g: int = 4, seed: int = 0):
    """Groups whose within-group world-model/real correlation is r."""
    rng = np.random.default_rng(seed)
    wm, real = [], []
    for _ in range(n):
        z, e = rng.normal(size=g), rng.normal(size=g)
        real.append(list(z))
        wm.append(list(r * z + math.sqrt(1 - r * r) * e))
    return wm, real


def advisor(r: float, n: int, seed: int = 0, **kw) -> AnchorAdvisor:
    adv = AnchorAdvisor(**{"n_boot": 200, "seed": 0, **kw})
    for w, x in zip(*groups(r, n, seed=seed)):
        adv.add_group(w, x)
    return adv


def test_with_the_fitting_counted_the_verdict_and_use_wmrl_follow_the_fitting_counted_choice():
    adv = advisor(0.6, 40)
    costs = CostRates(2.5, 0.02)
    plain = adv.advise(costs, groups_per_step=10)
    assert plain.use_wmrl and plain.recommended_choice["kind"] == "wmrl"
    phi = fitting_share(175, 10, 10, 4, costs)  # 175 executions against 10 steps of 10 groups of 4
    a = adv.advise(costs, groups_per_step=10, fitting_share=phi)
    assert a.fitting_share == pytest.approx(175 / 400)
    # the fitting-counted best is real GRPO on 1 group per step (3.16x) against WMRL's ~1.9x in total
    assert not a.use_wmrl and a.recommended_choice["kind"] == "real" and a.recommended_choice["groups_per_step"] == 1
    assert a.verdict.startswith("do not use WMRL: train on real execution with 1 group per step")
    assert "once its fitting is counted" in a.verdict
    total = {c["words"]: c["predicted_speedup"] for c in a.choices_with_fitting}
    assert total["use WMRL at anchor fraction 0.05"] == pytest.approx(
        1 / (1 / plain.predicted_speedup + phi))
    # the training-only figures stay, labelled as such; the prediction itself is unchanged
    assert a.predicted_speedup == pytest.approx(plain.predicted_speedup)
    text = a.format()
    assert "training only (the world model's fitting not counted)" in text
    assert "best choice with the fitting counted: train on real execution with 1 group per step" in text
    assert "recommended anchor fraction" not in text  # WMRL's fraction, "not recommended"


def test_no_wmrl_without_evidence_of_signal():
    # r = 0.20, 95% CI [-0.10, 0.41]: the interval reaches 0 and 10 groups per step < 1 / f_min
    a = advisor(0.35, 16, seed=0).advise(CostRates(1.0, 0.01), groups_per_step=10)
    assert a.r_ci[0] < 0 < a.r
    assert not a.wmrl_eligible and not a.use_wmrl and a.recommended_choice["kind"] == "real"
    assert a.verdict.startswith("do not use WMRL: the pilot has not shown the world model carries signal within "
                                "groups (r = 0.20, 95% CI [-0.10, 0.41] reaches 0): train on real execution with "
                                "1 group per step")
    assert "or collect more pilot groups to test it" in a.verdict
    # the pricing is unchanged: WMRL at 0.05 still priced above the best real batch, only not eligible
    wm05 = next(c for c in a.choices if c["kind"] == "wmrl" and c["share"] == 0.05)
    best_real = max(c["predicted_speedup"] for c in a.choices if c["kind"] == "real")
    assert wm05["predicted_speedup"] > best_real
    assert wm05["predicted_speedup"] == pytest.approx(
        price_choices(a.r, a.costs, None, groups_per_step=10)[4].predicted_speedup)
    # no interval (n_boot = 0): r > 0 is the rule
    neg = advisor(-0.17, 300, seed=1, n_boot=0).advise(CostRates(1.0, 0.05), groups_per_step=10)
    assert neg.r < 0 and not neg.use_wmrl and "<= 0; no interval" in neg.verdict
    pos = advisor(0.5, 30, seed=1, n_boot=0).advise(CostRates(1.0, 0.05), groups_per_step=10)
    assert pos.r > 0 and pos.wmrl_eligible and pos.use_wmrl


def test_the_flat_map_verdict_names_the_best_real_batch_not_a_wmrl_choice():
    # an anti-correlated world model: the cross-fitted map is flat, r counts as 0; at 10 groups per step
    # WMRL at 0.05 is priced above 1 group per step (3.73x against 3.16x), which the verdict used to append
    rng = np.random.default_rng(3)
    adv = AnchorAdvisor(n_boot=50)
    for _ in range(40):
        z = rng.normal(size=4)
        adv.add_group(list(-0.6 * z + 0.8 * rng.normal(size=4)), list(z))
    a = adv.advise(CostRates(1.0, 0.01), calibrate="crossfit", groups_per_step=10)
    assert a.r == 0.0 and "no usable signal" in a.verdict
    assert "(train on real execution with 1 group per step: predicted 3.16x" in a.verdict
    assert "use WMRL at anchor fraction" not in a.verdict


def test_a_real_batch_inside_the_best_choices_interval_is_as_good_and_the_verdict_says_uncertain():
    best = Choice("wmrl", 0.05, 10, 4.9, (2.9, 6.6), 2.0, "use WMRL at anchor fraction 0.05")
    real1 = Choice("real", 0.1, 1, 3.16, (3.16, 3.16), 3.16, "train on real execution with 1 group per step")
    real10 = Choice("real", 1.0, 10, 1.0, (1.0, 1.0), 1.0, "train on real execution at your batch (10 groups per step)")
    b, close, text = recommend([real10, real1, best])
    assert b is best and close == [real1]
    assert text.endswith("as good within the interval: train on real execution with 1 group per step")
    # the advisor's verdict: r = 0.45 [0.20, 0.63], WMRL at 0.05 4.92x [2.96, 6.58] against 3.16x
    a = advisor(0.35, 16, seed=4).advise(CostRates(1.0, 0.05), groups_per_step=10)
    assert a.use_wmrl and a.predicted_speedup_ci[0] < 3.16
    assert ("uncertain: the interval reaches 2.96x and train on real execution with 1 group per step predicts 3.16x, "
            "inside the interval") in a.verdict
    assert "as good within the interval: train on real execution with 1 group per step" in a.best_choice


def test_real_batches_without_a_noise_scale_show_their_b_range():
    costs = CostRates(1.0, 0.01)
    unmeasured = price_choices(0.5, costs, None, groups_per_step=10)
    one = next(c for c in unmeasured if c.kind == "real" and c.groups_per_step == 1)
    assert one.b_range == (pytest.approx(math.sqrt(10)), pytest.approx(10.0))  # b = inf: 1/sqrt(share); b = 0: 1/share
    assert one.predicted_speedup == pytest.approx(one.b_range[0])
    measured = price_choices(0.5, costs, 1.0, groups_per_step=10)
    assert all(math.isnan(c.b_range[0]) for c in measured)
    a = advisor(0.6, 40).advise(costs, groups_per_step=10)
    text = a.format()
    assert "  train on real execution with 1 group per step: 3.16x (b = 0: 10.00x) (3.16x steps)" in text
    assert "every step noise-limited, b = inf" in text
    assert "(b = 0:" not in advisor(0.6, 40).advise(costs, noise_batch_ratio=1.0, groups_per_step=10).format()


def test_the_drift_line_says_which_way_r_moved_and_what_to_do():
    base = advisor(0.6, 40).advise(CostRates(2.5, 0.02), groups_per_step=10)
    assert base.use_wmrl and base.recommended_fraction == 0.05
    up = dataclasses.replace(base, r_preferred_half=base.r + 0.1)
    line = next(ln for ln in up.format().splitlines() if ln.startswith("drift:"))
    assert "can drift" not in line and "no sign that training's r drifts below" in line
    higher = dataclasses.replace(base, r_preferred_half=0.2, drift_fraction=0.3)
    line = next(ln for ln in higher.format().splitlines() if ln.startswith("drift:"))
    assert "can drift down that far" in line and line.endswith("raise the fraction to 0.300")
    floor_guard = dataclasses.replace(base, r_preferred_half=0.2, drift_fraction=0.05, drift_guard_fraction=0.2)
    line = next(ln for ln in floor_guard.format().splitlines() if ln.startswith("drift:"))
    assert "up to 0.2 still beats the best real batch at that r" in line and "--anchor-fraction auto" in line
    floor_none = dataclasses.replace(base, r_preferred_half=0.0, drift_fraction=0.05, drift_guard_fraction=float("nan"))
    line = next(ln for ln in floor_none.format().splitlines() if ln.startswith("drift:"))
    assert "cannot name a larger one" in line and line.endswith("--anchor-fraction auto, which follows the run's own r")
    # the guard fraction is the largest priced fraction whose speedup at the drifted r beats the best real batch
    at_half = price_choices(base.r_preferred_half, base.costs, None, groups_per_step=10,
                            fractions=(0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.05))
    best_real = max(c.predicted_speedup for c in at_half if c.kind == "real")
    beat = [c.share for c in at_half if c.kind == "wmrl" and c.predicted_speedup > best_real]
    assert base.drift_guard_fraction == (max(beat) if beat else None) and base.drift_guard_fraction > 0.05


def test_one_interval_for_the_recommended_speedup_and_one_group_in_words():
    a = advisor(0.6, 40).advise(CostRates(2.5, 0.02), groups_per_step=10)
    row = next(c for c in a.choices if c["kind"] == "wmrl" and c["share"] == a.recommended_fraction)
    assert a.predicted_speedup_ci == tuple(row["ci"])
    lo, hi = row["ci"]
    assert f"(95% CI [{lo:.2f}, {hi:.2f}]" in a.format() and f"{row['predicted_speedup']:.2f}x [{lo:.2f}, {hi:.2f}]" in a.format()
    assert price_choices(0.5, CostRates(1.0, 0.01), None, groups_per_step=1)[0].words == (
        "train on real execution at your batch (1 group per step)")
    from agents.advise import anchor_window_hint

    assert anchor_window_hint(0.05, 1).startswith("f = 0.05 at 1 group per step is 1 anchor group every 20 steps")


def test_free_predictions_at_r_one_print_unbounded_without_a_warning():
    adv = AnchorAdvisor(n_boot=50)
    rng = np.random.default_rng(0)
    for _ in range(10):
        x = list(rng.normal(size=4))
        adv.add_group(x, x)  # r = 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = adv.advise(CostRates(1.0, 0.0), groups_per_step=4)
        text = a.format()
    alone = next(ln for ln in text.splitlines() if "world model alone" in ln)
    assert "unbounded" in alone and "inf" not in alone
    wm_only = next(c for c in a.choices if c["kind"] == "world_model_only")
    assert wm_only["ci"] == [math.inf, math.inf]


def test_train_summary_adds_the_anchor_window_that_realises_its_recommendation():
    from agents.train.summary import _advice_rows, anchor_advice
    from test_advisor_choices import loop_with_anchor_groups  # pytest puts this folder on sys.path

    loop = loop_with_anchor_groups(4, *groups(0.8, 40, seed=4))
    d = anchor_advice(loop)
    assert d["use_wmrl"] and d["recommended_fraction"] == 0.05
    assert d["anchor_window_hint"].endswith("train with --anchor-fraction 0.05 --anchor-window 5 (with a window of 1 "
                                            "step the floor of one anchor group per step realises 0.25)")
    rows = dict(_advice_rows({"anchor_advice": d}))
    assert rows["how to train at the recommended fraction"] == d["anchor_window_hint"]


# ---- the second review (issue 39b)
def test_f_min_0_gives_advice_when_real_execution_wins_and_the_world_model_alone_is_wmrls_fraction():
    costs = CostRates(2.5, 0.02)
    phi = fitting_share(175, 10, 10, 4, costs)
    a = advisor(0.9, 40, f_min=0.0).advise(costs, groups_per_step=10, fitting_share=phi)  # no StopIteration
    assert a.f_star == 0.0 and a.recommended_fraction == 0.0 and not a.use_wmrl
    assert a.recommended_choice["kind"] == "real" and a.recommended_choice["groups_per_step"] == 1
    alone = next(c for c in a.choices if c["kind"] == "world_model_only")
    assert a.predicted_speedup == pytest.approx(alone["predicted_speedup"])
    assert "the world model alone (fraction 0) predicts" in a.verdict and "WMRL at 0.000" not in a.verdict
    # WMRL recommended at 0.02 while the model's own fraction at the drifted r is 0: not "stays 0.000"
    b = advisor(0.9, 40, f_min=0.0).advise(costs, groups_per_step=10)
    assert b.use_wmrl and b.recommended_fraction == 0.02 and b.drift_fraction == 0.0
    drift = next(ln for ln in b.format().splitlines() if ln.startswith("drift:"))
    assert "stays 0.000" not in drift and "the model's fraction at that r is 0.000, not above 0.020" in drift


def test_a_constant_world_model_over_enough_groups_is_a_do_not_use_verdict_not_collect_more():
    adv = AnchorAdvisor(n_boot=100)
    wm, real = groups(0.5, 12)
    for x in real:
        adv.add_group([0.5] * 4, x)
    a = adv.advise(CostRates(2.0, 0.02), calibrate="crossfit", groups_per_step=8)
    assert a.n_groups == 12 and a.r == 0.0 and not a.use_wmrl and not a.wmrl_eligible
    assert "not enough anchor groups" not in a.verdict and "collect more" not in a.verdict
    assert a.verdict.startswith("do not use WMRL: the world model's scores do not vary within groups (over 12 groups")
    # plus the best real batch (b not measured: 1 group per step, sqrt(8) = 2.83x)
    assert a.recommended_choice["groups_per_step"] == 1 and "train on real execution with 1 group per step" in a.verdict
    # below min_groups it is still "not enough"
    few = AnchorAdvisor(n_boot=0)
    for x in real[:5]:
        few.add_group([0.5] * 4, x)
    assert "not enough anchor groups yet (5 usable anchor groups, need 8)" in few.advise(CostRates(2.0, 0.02)).verdict


def test_the_drift_line_says_the_best_real_batch_is_cheaper_at_the_drifted_r():
    a = advisor(0.6, 40).advise(CostRates(2.5, 0.02), groups_per_step=10)
    assert a.use_wmrl and a.recommended_fraction == 0.05
    best_real = max(c["predicted_speedup"] for c in a.choices if c["kind"] == "real")  # 1 group per step: 3.16x
    assert best_real == pytest.approx(math.sqrt(10))
    # the reviewer's sc0adv: at the drifted r WMRL at 0.05 predicts 1.98x, under the best real batch
    drifted = dataclasses.replace(a, r_preferred_half=a.r - 0.3, predicted_speedup_drift=1.98,
                                  drift_fraction=0.05, drift_guard_fraction=float("nan"))
    line = next(ln for ln in drifted.format().splitlines() if ln.startswith("drift:"))
    assert "at that r real execution with 1 group per step is predicted cheaper (3.16x)" in line
    assert "cannot name a larger one" not in line and "still beats" not in line


def test_with_a_fitting_cost_the_drift_speedup_is_the_fitting_counted_one_and_says_so():
    costs = CostRates(2.5, 0.02)
    adv = advisor(0.95, 40)
    plain = adv.advise(costs, groups_per_step=10)
    phi = 0.05
    a = adv.advise(costs, groups_per_step=10, fitting_share=phi)
    assert a.use_wmrl and math.isfinite(a.r_preferred_half) and a.r_preferred_half < a.r - 0.01
    assert plain.predicted_speedup_drift > 2
    assert a.predicted_speedup_drift == pytest.approx(1 / (1 / plain.predicted_speedup_drift + phi))
    line = next(ln for ln in a.format().splitlines() if ln.startswith("drift:"))
    assert f"is {a.predicted_speedup_drift:.2f}x with the world model's fitting counted" in line


def test_recommend_lists_every_choice_as_good_and_names_three_and_how_many_more():
    cs = [Choice("real", 1.0, 10, 1.0, (1.0, 1.0), 1.0, "train on real execution at your batch (10 groups per step)")]
    cs += [Choice("wmrl", f, 10, 5.0 - f, (3.0, 7.0), 1.1, f"use WMRL at anchor fraction {f:g}")
           for f in (0.02, 0.05, 0.1, 0.2, 0.3)]
    best, close, text = recommend(cs)
    assert best.share == 0.02 and [c.share for c in close] == [0.05, 0.1, 0.2, 0.3]
    assert text.endswith("as good within the interval: use WMRL at anchor fraction 0.05, use WMRL at anchor fraction "
                         "0.1, use WMRL at anchor fraction 0.2 and 1 more")
    adv = advisor(0.6, 40)
    a = adv.advise(CostRates(2.5, 0.02), groups_per_step=10)
    _, close, _ = recommend([Choice(**{**c, "ci": tuple(c["ci"]), "b_range": tuple(c["b_range"])}) for c in a.choices])
    assert [c["words"] for c in a.as_good_choices] == [c.words for c in close]
    assert "as_good_choices" in a.to_dict()


def test_the_users_batch_as_best_says_nothing_priced_is_cheaper():
    cs = price_choices(0.0, CostRates(1.0, 0.5), 1.0, groups_per_step=1)
    _, _, text = recommend(cs, wmrl_eligible=False)
    assert text == "train on real execution at your batch (1 group per step): nothing priced is predicted cheaper"


def test_without_groups_per_step_a_share_is_never_recommended_only_hinted():
    a = advisor(0.0, 40, seed=2).advise(CostRates(2.5, 0.02))
    assert a.recommended_choice["kind"] == "real" and a.recommended_choice["groups_per_step"] is None
    assert a.recommended_choice["share"] < 1
    assert "of your groups per step per step" not in a.verdict
    assert a.best_choice.startswith("a smaller real batch is predicted cheaper (real execution with 6% of your groups")
    assert "pass --groups-per-step to price real batches of whole groups" in a.verdict
    assert "train on real execution with 6%" not in a.verdict


def test_an_r_interval_all_below_0_says_the_scores_run_against_the_real_ones():
    a = advisor(-0.6, 40).advise(CostRates(2.5, 0.02), groups_per_step=10)  # raw scores: no map to flatten them
    assert a.r_ci[1] < 0 and not a.use_wmrl
    assert a.verdict.startswith("do not use WMRL: the world model's scores run against the real ones within groups "
                                f"(r = {a.r:.2f}, 95% CI [{a.r_ci[0]:.2f}, {a.r_ci[1]:.2f}], all below 0): "
                                "train on real execution with 1 group per step")
    assert "reaches 0" not in a.verdict and "predicts" not in a.verdict.split("):", 1)[1].replace(
        "predicted", "")


def test_a_drift_that_rounds_away_has_no_line_and_b_0_shows_no_zero_width_interval():
    a = advisor(0.6, 40).advise(CostRates(2.5, 0.02), groups_per_step=10, noise_batch_ratio=0.0)
    assert a.use_wmrl and a.predicted_speedup_ci[0] == a.predicted_speedup_ci[1]  # b = 0: r does not matter
    s = a.predicted_speedup
    assert f"(predicted speedup {s:.2f}x over" in a.verdict and f"[{s:.2f}, {s:.2f}]" not in a.verdict
    tiny = dataclasses.replace(a, r_preferred_half=a.r - 0.004)
    assert not any(ln.startswith("drift:") for ln in tiny.format().splitlines())
    assert any(ln.startswith("drift:") for ln in dataclasses.replace(a, r_preferred_half=a.r - 0.05).format().splitlines())


def test_train_summary_labels_wmrls_fraction_when_the_verdict_rejects_wmrl():
    from agents.train.summary import _advice_rows

    a = advisor(0.0, 40, seed=2).advise(CostRates(2.5, 0.02), groups_per_step=10)
    assert not a.use_wmrl and a.recommended_fraction == 0.05
    rows = dict(_advice_rows({"anchor_advice": a.to_dict()}))
    assert "recommended anchor fraction / predicted speedup (a model, not a bound)" not in rows
    assert rows["WMRL's fraction / its predicted speedup (a model, not a bound)"] == (
        f"WMRL's fraction 0.050 (WMRL not recommended: see the verdict) / {a.predicted_speedup:.2f}x")
    ok = advisor(0.6, 40).advise(CostRates(2.5, 0.02), groups_per_step=10)
    assert dict(_advice_rows({"anchor_advice": ok.to_dict()}))[
        "recommended anchor fraction / predicted speedup (a model, not a bound)"] == f"0.050 / {ok.predicted_speedup:.2f}x"


def test_f_min_0_without_groups_per_step_prices_shares_down_to_a_sixteenth_only():
    # review 3, item 1: f_min = 0 priced shares down to 2^-19 of an unknown batch (724x) and rejected WMRL
    from wmrl_envs.core.advisor_choices import real_batches

    assert [s for s, _ in real_batches(None, 0.0)] == [1.0, 0.5, 0.25, 0.125, 0.0625]
    assert [s for s, _ in real_batches(None, 0.2)] == [1.0, 0.5, 0.25]
    costs = CostRates(0.02007, 0.0002101, 3.734e-06)  # gamma ~ 0.01, as the review's toy pilot
    reals = [c for c in price_choices(0.39, costs, None, f_min=0.0) if c.kind == "real"]
    assert min(c.share for c in reals) == 0.0625
    assert max(c.predicted_speedup for c in reals) == pytest.approx(4.0)
    a = advisor(0.6, 40, f_min=0.0).advise(costs)
    assert min(c["share"] for c in a.choices if c["kind"] == "real") == 0.0625
    assert a.use_wmrl and a.verdict.startswith("use WMRL at anchor fraction")


def test_the_users_batch_as_best_with_a_cheaper_wmrl_left_out_says_no_real_batch_is_cheaper():
    # review 3, item 3: WMRL priced cheaper but not eligible (no signal): "nothing priced" was wrong
    cs = price_choices(0.5, CostRates(1.0, 0.01), 1.0, groups_per_step=1)
    assert max(c.predicted_speedup for c in cs if c.kind == "wmrl") > 1.0
    best, _, text = recommend(cs, wmrl_eligible=False)
    assert best.share == 1.0
    assert text == "train on real execution at your batch (1 group per step): no real batch priced is predicted cheaper"


def test_a_smaller_real_batch_with_wmrl_as_good_says_uncertain_and_f_max_0_says_no_fraction_is_left():
    # review 3, item 4: "adds nothing over a smaller real batch" contradicted an as-good list holding WMRL
    a = advisor(0.4, 20, seed=0).advise(CostRates(1.0, 0.1), groups_per_step=10)
    assert a.recommended_choice["kind"] == "real" and a.recommended_choice["groups_per_step"] == 1
    assert [c["share"] for c in a.as_good_choices if c["kind"] == "wmrl"] == [0.05]
    assert "adds nothing" not in a.verdict
    assert a.verdict.endswith("uncertain, WMRL at 0.05 is as good within the interval: collect more anchor groups "
                              "to be sure")
    # --f-max 0: no WMRL fraction is priced, only the world model alone, which is never recommended
    z = advisor(0.6, 40, f_min=0.0, f_max=0.0).advise(CostRates(2.5, 0.02), groups_per_step=10)
    assert not z.use_wmrl and not any(c["kind"] == "wmrl" for c in z.choices)
    assert z.verdict.startswith("do not use WMRL: --f-max 0 leaves no anchor fraction to recommend (only the world "
                                "model alone, which is never recommended")
    assert z.verdict.endswith(": train on real execution with 1 group per step: predicted 3.16x less compute to the "
                              "same progress than real execution at your batch, in 3.16x its steps")
    assert "adds nothing" not in z.verdict


def test_shares_of_an_unknown_batch_are_flagged_if_at_least_one_group_in_the_uncertain_clause_and_as_good_list():
    # review 3, item 5: "6% of your groups per step predicts 4.00x" may be under one group
    a = advisor(0.4, 20, seed=0).advise(CostRates(1.0, 0.02))
    assert a.use_wmrl and a.recommended_fraction == 0.05
    assert a.verdict.endswith("uncertain: the interval reaches 3.72x and train on real execution with 6% of your "
                              "groups per step (if at least one group) predicts 4.00x, inside the interval: collect "
                              "more anchor groups to be sure")
    assert a.best_choice.endswith("as good within the interval: train on real execution with 6% of your groups per "
                                  "step (if at least one group)")
    # with the batch known the groups are whole: no flag
    k = advisor(0.4, 20, seed=0).advise(CostRates(1.0, 0.02), groups_per_step=16)
    assert "if at least one group" not in k.verdict + k.best_choice


def test_a_constant_world_model_needs_two_groups_whose_real_scores_vary_for_its_do_not_use_verdict():
    # review 3, item 7: the doc and the code agree on at least 2 groups whose real scores vary
    def adv(varying: int) -> AnchorAdvisor:
        a = AnchorAdvisor(n_boot=0)
        for i in range(8):
            a.add_group([0.5] * 4, [0.0, 1.0, 0.0, 1.0] if i < varying else [1.0] * 4)
        return a

    one = adv(1).advise(CostRates(2.0, 0.02), calibrate="crossfit", groups_per_step=8)
    assert one.verdict.startswith("not enough anchor groups yet (no within-group spread")
    two = adv(2).advise(CostRates(2.0, 0.02), calibrate="crossfit", groups_per_step=8)
    assert two.verdict.startswith("do not use WMRL: the world model's scores do not vary within groups (over 8 groups, "
                                  "2 of them with real scores that do)")


def test_the_drift_line_of_a_negative_r_does_not_say_the_preferred_half_is_ranked_at_least_as_well():
    # review 3, item 9: -0.24 against -0.31 is higher, but no signal either
    a = advisor(0.6, 40).advise(CostRates(2.5, 0.02), groups_per_step=10)
    neg = dataclasses.replace(a, r=-0.31, r_preferred_half=-0.24, use_wmrl=False)
    line = neg._drift_line()
    assert "at least as well" not in line
    assert line.endswith("r = -0.24 against -0.31 over all; the world model ranks the rollouts training would move the "
                         "policy towards no better than chance either")
    pos = dataclasses.replace(a, r=0.31, r_preferred_half=0.40)
    assert "ranked at least as well" in pos._drift_line()
