"""Compute-to-target speedup on hand-made curves (issue 11, item 1 and "Tests").

Every expected value below is derived in the test from the definition in ``docs/method.md``
("Compute-to-target speedup"): interpolation between evaluated snapshots, ``inf`` for a target
never reached, medians that keep unreached seeds, and a paired percentile bootstrap whose exact
distribution is enumerated for a 3-seed case.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from agents.experiments.speedup import (
    Curve,
    SpeedupEstimate,
    compute_to_target,
    percentile_inf,
    speedup,
    speedup_table,
    target_score,
)

NAN = float("nan")
INF = math.inf


# --------------------------------------------------------------------------- compute_to_target
def test_interpolates_linearly_between_the_snapshots_around_the_crossing():
    curve = Curve(compute=[0.0, 10.0, 20.0, 30.0], score=[0.2, 0.3, 0.5, 0.9])
    # crossing 0.7 between snapshot 2 (20 s, 0.5) and 3 (30 s, 0.9): 20 + (0.7-0.5)/(0.9-0.5) * 10
    assert compute_to_target(curve, 0.7) == pytest.approx(25.0, abs=1e-12)
    # exactly on a snapshot's score: that snapshot's compute
    assert compute_to_target(curve, 0.5) == pytest.approx(20.0, abs=1e-12)


def test_first_crossing_counts_and_a_later_dip_does_not():
    # above the target only between snapshots 1 and 2, below again at 3, above at 4
    curve = Curve(compute=[0.0, 10.0, 20.0, 35.0, 50.0], score=[0.1, 0.5, 0.95, 0.4, 0.99])
    expected = 10.0 + (0.9 - 0.5) / (0.95 - 0.5) * (20.0 - 10.0)
    assert compute_to_target(curve, 0.9) == pytest.approx(expected, abs=1e-12)
    assert 10.0 < compute_to_target(curve, 0.9) < 20.0


def test_unevaluated_snapshots_are_skipped():
    curve = Curve(compute=[0.0, 10.0, 20.0, 30.0], score=[0.2, NAN, NAN, 0.8])
    # interpolated between the evaluated snapshots 0 and 3 only: 0 + (0.5-0.2)/(0.8-0.2) * 30
    assert compute_to_target(curve, 0.5) == pytest.approx(15.0, abs=1e-12)
    # a NaN right after the initial score is not read as a crossing
    curve2 = Curve(compute=[0.0, 5.0, 40.0], score=[0.2, NAN, 0.6])
    assert compute_to_target(curve2, 0.4) == pytest.approx(20.0, abs=1e-12)


def test_initial_policy_already_at_target_needs_no_compute():
    curve = Curve(compute=[0.0, 10.0], score=[0.8, 0.9])
    assert compute_to_target(curve, 0.7) == 0.0
    assert compute_to_target(curve, 0.8) == 0.0


def test_target_never_reached_is_inf_and_formats_as_not_reached():
    curve = Curve(compute=[0.0, 10.0, 20.0], score=[0.2, 0.5, 0.6])
    assert compute_to_target(curve, 0.61) == INF
    est = speedup([10.0, 12.0, 14.0], [INF, INF, 8.0], n_boot=500)
    assert not est.reached()
    assert est.point == 0.0
    assert est.format() == "not reached within budget (1/3 seeds reached)"
    assert not any(ch.isdigit() for ch in est.format().split("(")[0])  # no number before the count


# --------------------------------------------------------------------------------- target_score
def test_target_from_the_mean_curve_over_seeds():
    a = Curve([0.0, 10.0, 20.0, 30.0], [0.2, 0.4, 0.6, 0.7])
    b = Curve([0.0, 12.0, 24.0], [0.4, 0.5, 0.8])
    s0 = (0.2 + 0.4) / 2
    # default S: the last index both seeds have (2): mean (0.6 + 0.8) / 2
    assert target_score([a, b]) == pytest.approx(s0 + 0.9 * ((0.6 + 0.8) / 2 - s0), abs=1e-12)
    assert target_score([a, b], steps_index=1, gain_fraction=0.5) == pytest.approx(
        s0 + 0.5 * ((0.4 + 0.5) / 2 - s0), abs=1e-12)
    # at_compute=15: a interpolates 0.4 + 0.5*0.2 = 0.5; b 0.5 + (3/12)*0.3 = 0.575
    assert target_score([a, b], at_compute=15.0) == pytest.approx(s0 + 0.9 * ((0.5 + 0.575) / 2 - s0), abs=1e-12)


def test_default_snapshot_is_the_last_one_every_seed_evaluated():
    a = Curve([0.0, 10.0, 20.0], [0.2, 0.5, 0.9])
    b = Curve([0.0, 10.0, 20.0], [0.2, 0.7, NAN])
    assert target_score([a, b]) == pytest.approx(0.2 + 0.9 * ((0.5 + 0.7) / 2 - 0.2), abs=1e-12)
    with pytest.raises(ValueError, match=r"seeds \[1\] have no evaluated score at snapshot 2"):
        target_score([a, b], steps_index=2)


def test_no_gain_means_no_target():
    flat = [Curve([0.0, 10.0], [0.5, 0.5]), Curve([0.0, 10.0], [0.6, 0.55])]
    with pytest.raises(ValueError, match="real GRPO did not improve"):
        target_score(flat)


def test_a_gain_of_rounding_size_or_below_min_gain_means_no_target():
    # lr 1e-12: real GRPO "improves" by 3e-13, which is rounding, not learning
    tiny = [Curve([0.0, 10.0], [0.5, 0.5 + 3e-13]), Curve([0.0, 10.0], [0.6, 0.6 + 3e-13])]
    with pytest.raises(ValueError, match=r"did not improve by more than min_gain=0; there is no target"):
        target_score(tiny)
    # the tolerance scales with |s0|: a gain of 1e-7 on a score of 1e3 is rounding too
    big = [Curve([0.0, 10.0], [1000.0, 1000.0 + 5e-7])]
    with pytest.raises(ValueError, match="there is no target"):
        target_score(big)
    assert target_score([Curve([0.0, 10.0], [0.5, 0.5 + 1e-6])], gain_fraction=1.0) == pytest.approx(0.5 + 1e-6)
    # an explicit min_gain, absolute in score units
    small = [Curve([0.0, 10.0], [0.5, 0.505])]
    with pytest.raises(ValueError, match=r"did not improve by more than min_gain=0.01"):
        target_score(small, min_gain=0.01)
    assert target_score(small, min_gain=0.001, gain_fraction=1.0) == pytest.approx(0.505)
    with pytest.raises(ValueError, match="min_gain must be a finite number >= 0"):
        target_score(small, min_gain=-0.1)


@pytest.mark.parametrize("kwargs, match", [
    ({"at_compute": 5.0, "steps_index": 1}, "not both"),
    ({"gain_fraction": 0.0}, r"gain_fraction must be a number in \(0, 1\]"),
    ({"gain_fraction": 1.5}, r"gain_fraction must be a number in \(0, 1\]"),
    ({"steps_index": 0}, r"steps_index must be an integer in \[1, 1\]"),
    ({"steps_index": 2}, r"steps_index must be an integer in \[1, 1\]"),
    ({"at_compute": 11.0}, "outside this curve's evaluated range"),
])
def test_target_score_rejects_bad_arguments(kwargs, match):
    curves = [Curve([0.0, 10.0], [0.2, 0.6])]
    with pytest.raises(ValueError, match=match):
        target_score(curves, **kwargs)


def test_target_score_needs_curves_with_an_initial_score():
    with pytest.raises(ValueError, match="is empty"):
        target_score([])
    with pytest.raises(ValueError, match="must be a Curve"):
        target_score([{"compute": [0.0], "score": [0.1]}])
    with pytest.raises(ValueError, match="no evaluated initial score"):
        target_score([Curve([0.0, 10.0], [NAN, 0.6])])


# ---------------------------------------------------------------------------------- Curve checks
@pytest.mark.parametrize("compute, score, match", [
    ([0.0, 1.0], [0.1], "one value per snapshot"),
    ([[0.0, 1.0]], [[0.1, 0.2]], "must be 1-D"),
    ([], [], "at least one snapshot"),
    ([1.0, 2.0], [0.1, 0.2], r"compute\[0\] must be 0"),
    ([0.0, 5.0, 4.0], [0.1, 0.2, 0.3], "snapshot 2 has 4.0 < 5.0"),
    ([0.0, INF], [0.1, 0.2], "finite CPU-seconds"),
    ([0.0, NAN], [0.1, 0.2], "finite CPU-seconds"),
    ([0.0, 1.0], [0.1, INF], "finite or NaN"),
    ([0.0, 1.0], [NAN, NAN], "no evaluated snapshot"),
    (["a", "b"], [0.1, 0.2], "sequences of numbers"),
])
def test_curve_validation(compute, score, match):
    with pytest.raises(ValueError, match=match):
        Curve(compute=compute, score=score)


def test_curve_arrays_are_float64_copies_and_read_only():
    src = [0, 1, 2]
    c = Curve(compute=src, score=np.array([0.1, 0.2, 0.3], dtype=np.float32))
    assert c.compute.dtype == np.float64 and c.score.dtype == np.float64
    with pytest.raises(ValueError):
        c.compute[1] = 5.0
    # equal compute steps are allowed (non-decreasing); a score at a tie reads the last snapshot
    tie = Curve([0.0, 10.0, 10.0, 20.0], [0.1, 0.2, 0.4, 0.6])
    assert tie.score_at(10.0) == pytest.approx(0.4)
    assert tie.score_at(15.0) == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------- speedup
def test_median_keeps_one_unreached_seed_of_five_as_beyond_the_budget():
    real = [10.0, 20.0, 30.0, 40.0, 50.0]
    method = [5.0, 10.0, INF, 20.0, 25.0]
    est = speedup(real, method, n_boot=2000)
    # sorted method: 5, 10, 20, 25, inf -> median 20 (dropping the inf seed would give 15)
    assert est.method_median == 20.0 and est.real_median == 30.0
    assert est.point == pytest.approx(1.5)
    assert (est.n_seeds, est.n_reached) == (5, 4)
    assert est.reached()
    # three of five unreached: the median is beyond the budget
    est3 = speedup(real, [5.0, INF, INF, 20.0, INF], n_boot=2000)
    assert est3.method_median == INF and est3.point == 0.0
    assert est3.format() == "not reached within budget (2/5 seeds reached)"


def test_identical_ratios_across_seeds_collapse_the_interval_to_the_point():
    # every seed's method needs exactly 1/4 of real GRPO's compute: every paired resample gives 4
    real = np.array([8.0, 40.0, 100.0, 12.0, 64.0])
    est = speedup(real, real / 4.0, n_boot=3000, seed=3)
    assert est.point == pytest.approx(4.0, rel=1e-12)
    assert est.low == pytest.approx(4.0, rel=1e-12) and est.high == pytest.approx(4.0, rel=1e-12)
    assert est.format() == "4.0× [4.0, 4.0]"
    # resampling the two methods independently would break the pairing and widen the interval:
    # e.g. real median of seeds {8, 12, 12} over method median of seeds {25, 25, 16}
    assert np.median([8.0, 12.0, 12.0]) / np.median([25.0, 25.0, 16.0]) < 1.0


def _exact_bootstrap(real, method):
    """Every one of the n**n equally likely paired resamples, its median ratio (all finite here)."""
    n = len(real)
    ratios = []
    for idx in itertools.product(range(n), repeat=n):
        idx = list(idx)
        ratios.append(np.median(np.asarray(real)[idx]) / np.median(np.asarray(method)[idx]))
    return np.sort(np.asarray(ratios))


@pytest.mark.parametrize("confidence", [0.5, 0.95])
def test_bootstrap_interval_matches_the_enumerated_distribution(confidence):
    # the seeds' orders differ between the methods, so the ratio of medians takes many values
    real, method = [12.0, 30.0, 45.0, 20.0], [30.0, 6.0, 10.0, 8.0]
    exact = _exact_bootstrap(real, method)          # 4**4 = 256 equally likely ratios
    values, counts = np.unique(exact, return_counts=True)
    cdf = np.cumsum(counts) / exact.size
    alpha = (1.0 - confidence) / 2.0
    expected = []
    for q in (alpha, 1.0 - alpha):
        # the Monte Carlo percentile lands on the exact quantile when q is far from every jump
        assert np.min(np.abs(cdf - q)) > 0.01, (q, cdf)
        expected.append(float(values[np.searchsorted(cdf, q)]))
    est = speedup(real, method, confidence=confidence, n_boot=50_000, seed=1)
    assert est.low == pytest.approx(expected[0], rel=1e-12)
    assert est.high == pytest.approx(expected[1], rel=1e-12)
    assert est.point == pytest.approx(np.median(real) / np.median(method))  # 25 / 9
    assert est.low < est.high  # the data do disagree across seeds


def test_replicates_where_the_method_is_not_reached_count_as_zero_not_dropped():
    # seeds 0 and 1 reach the target with neither method; seed 2 with both (ratio 2)
    real, method = [INF, INF, 10.0], [INF, INF, 5.0]
    n_boot = 4000
    est = speedup(real, method, n_boot=n_boot, seed=0)
    assert est.point == 0.0 and not est.reached()
    assert (est.n_boot, est.n_boot_dropped) == (n_boot, 0)
    # a replicate has finite medians iff at least 2 of its 3 draws are seed 2: p = 7/27; every
    # other replicate has the method's median inf: 0 (not reached), like the point
    assert est.low == 0.0 and est.high == 2.0
    assert est.low <= est.point <= est.high


@pytest.mark.parametrize("real, method", [
    ([INF, INF, 10.0], [INF, INF, 5.0]),                    # the point is 0: so is the lower bound
    ([INF, 20.0, 10.0], [INF, INF, 5.0]),                   # real reached in the median, method not
    ([INF, INF, 10.0], [3.0, 4.0, 5.0]),                    # only real GRPO's median inf: point inf
    ([10.0, 20.0, 30.0, INF, INF], [5.0, INF, 10.0, INF, 4.0]),
    ([12.0, 30.0, 45.0, 20.0], [30.0, 6.0, 10.0, 8.0]),     # all finite
    ([10.0, 20.0, 30.0, 40.0, 50.0], [5.0, 10.0, INF, 20.0, 25.0]),
])
def test_the_point_lies_within_its_interval(real, method):
    est = speedup(real, method, n_boot=4000, seed=2)
    assert not math.isnan(est.low) and not math.isnan(est.high)
    assert est.low <= est.point <= est.high, est


def test_a_single_seed_has_no_interval():
    est = speedup([30.0], [10.0], n_boot=500)
    assert est.point == 3.0 and est.n_seeds == 1
    assert math.isnan(est.low) and math.isnan(est.high) and est.n_boot == 0
    assert est.format() == "3.0× (1 seed, no CI)"
    assert "[" not in est.format()
    # two seeds do have one
    est2 = speedup([30.0, 60.0], [10.0, 10.0], n_boot=500)
    assert est2.format().startswith("4.5× [") and est2.low == 3.0 and est2.high == 6.0


def test_real_grpo_not_reached_but_method_reached():
    est = speedup([INF, INF, 30.0], [10.0, 10.0, 10.0], n_boot=500)
    assert est.point == INF and est.reached()
    assert est.format() == "real GRPO not reached within budget; method reached (3/3 seeds reached)"


def test_not_reached_names_what_stopped_the_runs():
    est = speedup([10.0, 20.0, 30.0], [INF, INF, 5.0], n_boot=200)
    assert est.format() == "not reached within budget (1/3 seeds reached)"
    assert est.format(limit="within 1200 steps (step cap)") == "not reached within 1200 steps (step cap) (1/3 seeds reached)"


@pytest.mark.parametrize("real, method, kwargs, match", [
    ([1.0, 2.0], [1.0], {}, "paired by seed"),
    ([], [], {}, "non-empty"),
    ([1.0, NAN], [1.0, 2.0], {}, r"real_ctt\[1\] = nan"),
    ([1.0, 2.0], [-1.0, 2.0], {}, r"method_ctt\[0\] = -1.0"),
    ([1.0], [1.0], {"confidence": 1.0}, r"confidence must be a number in \(0, 1\)"),
    ([1.0], [1.0], {"n_boot": 0}, "n_boot must be an integer >= 1"),
])
def test_speedup_rejects_bad_input(real, method, kwargs, match):
    with pytest.raises(ValueError, match=match):
        speedup(real, method, **kwargs)


def test_format_of_a_reached_estimate():
    est = SpeedupEstimate(point=3.14, low=2.2, high=4.5, n_seeds=10, n_reached=10, real_median=31.4,
                          method_median=10.0, confidence=0.95)
    assert est.format() == "3.1× [2.2, 4.5]"
    wide = SpeedupEstimate(point=2.0, low=0.0, high=INF, n_seeds=5, n_reached=3, real_median=20.0,
                           method_median=10.0, confidence=0.95)
    assert wide.format() == "2.0× [n.r., ∞]"   # a bound of 0 is "not reached", never a number
    biased = SpeedupEstimate(point=68.7, low=0.0, high=74.7, n_seeds=10, n_reached=7, real_median=2400.0,
                             method_median=34.9, confidence=0.95)
    assert biased.format() == "68.7× [n.r., 74.7]"
    small = SpeedupEstimate(point=0.05, low=0.012, high=0.5, n_seeds=3, n_reached=3, real_median=1.0,
                            method_median=20.0, confidence=0.95)
    assert small.format() == "0.05× [0.012, 0.5]"   # small positive bounds stay numbers


def test_percentile_next_to_inf_is_inf():
    x = [1.0, 2.0, 3.0, INF, INF]
    assert percentile_inf(x, 25) == pytest.approx(np.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 25))
    assert percentile_inf(x, 60) == INF  # np.percentile gives nan here
    assert percentile_inf(x, 50) == 3.0


def test_percentile_rejects_minus_inf_and_nan():
    with pytest.raises(ValueError, match="-inf"):
        percentile_inf([-INF, 1.0, 2.0], 10)
    with pytest.raises(ValueError, match="NaN"):
        percentile_inf([NAN, 1.0], 50)


def test_speedup_table_rows():
    real = [10.0, 20.0, 30.0, 40.0, 50.0]
    table = speedup_table(real, {"WMRL": [5.0, 10.0, 15.0, 20.0, 25.0], "world model only": [INF] * 5},
                          n_boot=500)
    lines = table.splitlines()
    assert lines[0] == "| method | compute-to-target (CPU-s, median [IQR]) | seeds reached | speedup [95% CI] |"
    assert lines[2] == "| real GRPO | 30.0 [20.0, 40.0] | 5/5 | 1× (reference) |"
    assert lines[3] == "| WMRL | 15.0 [10.0, 20.0] | 5/5 | 2.0× [2.0, 2.0] |"
    assert lines[4] == "| world model only | not reached | 0/5 | not reached within budget (0/5 seeds reached) |"
    with pytest.raises(ValueError, match="method 'bad'"):
        speedup_table(real, {"bad": [1.0]})


def test_ratio_edge_cases():
    from agents.experiments.speedup import _median_ratios, median_ratio

    # method inf: 0 (not reached) whatever real's median, also inf
    cases = [(30.0, 10.0, 3.0), (30.0, INF, 0.0), (INF, 10.0, INF), (10.0, 0.0, INF), (0.0, 0.0, 1.0),
             (INF, INF, 0.0)]
    for real, method, expected in cases:
        assert median_ratio(real, method) == expected
    vec = _median_ratios(np.array([c[0] for c in cases]), np.array([c[1] for c in cases]))
    assert vec.tolist() == [c[2] for c in cases]


# ------------------------------------------------------------------ interpolation bracket (issue 27)
def test_bracket_is_the_compute_between_the_snapshots_around_the_crossing_over_the_compute_to_target():
    from agents.experiments.speedup import bracket_share, interpolation_bracket

    # evaluated at 0, 10, (30 not evaluated), 40: the crossing of 0.6 lies between 10 and 40
    c = Curve([0.0, 10.0, 30.0, 40.0], [0.2, 0.4, float("nan"), 0.8])
    assert interpolation_bracket(c, 0.6) == (1, 3)
    assert compute_to_target(c, 0.6) == pytest.approx(25.0)
    assert bracket_share(c, 0.6) == pytest.approx(30.0 / 25.0)  # wider than the figure itself
    # the initial policy reaches it: no interpolation, share 0; never reached: no bracket, NaN
    assert interpolation_bracket(c, 0.1) == (0, 0) and bracket_share(c, 0.1) == 0.0
    assert interpolation_bracket(c, 0.9) is None and math.isnan(bracket_share(c, 0.9))
    # a later dip below the target does not move the bracket (the first crossing counts)
    d = Curve([0.0, 10.0, 20.0, 30.0], [0.2, 0.7, 0.3, 0.9])
    assert interpolation_bracket(d, 0.6) == (0, 1) and bracket_share(d, 0.6) == pytest.approx(10.0 / (0.4 / 0.5 * 10.0))
    with pytest.raises(ValueError, match="finite score"):
        bracket_share(c, float("nan"))


def test_speedup_over_best_chooses_the_best_reference_inside_every_replicate():
    """Issue 35, item 4: against several real-GRPO batch sizes, the best is chosen inside each bootstrap
    replicate. With two close references, fixing the best from the point estimates gives an interval that
    ignores the replicates where the other is cheaper: it is wider-open upwards than the honest one."""
    import numpy as np

    from agents.experiments.speedup import speedup, speedup_over_best

    full = [100.0, 90.0, 120.0, 80.0, 300.0, 95.0, 110.0, 85.0]
    small = [60.0, 200.0, 70.0, 180.0, 75.0, 190.0, 65.0, 170.0]  # median 122.5 vs full's 97.5: full is best
    method = [30.0, 40.0, 35.0, 45.0, 38.0, 42.0, 33.0, 36.0]
    est, best = speedup_over_best({"full": full, "small": small}, method, n_boot=4000)
    fixed = speedup(full, method, n_boot=4000)
    assert best == "full" and est.point == fixed.point == np.median(full) / np.median(method)
    # in every replicate min(median full, median small) <= median full: the bounds can only move down,
    # and here they do (replicates with small's good seeds make small the best)
    assert est.high <= fixed.high and est.low < fixed.low
    # a reference that is best on every seed gives exactly speedup() against it
    dominant, _ = speedup_over_best({"a": [10.0 * x for x in full], "b": full}, method, n_boot=4000)
    assert (dominant.low, dominant.high) == (fixed.low, fixed.high)
    with pytest.raises(ValueError, match="paired by seed"):
        speedup_over_best({"full": full[:-1]}, method)
    with pytest.raises(ValueError, match="at least one reference"):
        speedup_over_best({}, method)


def test_compute_speedups_reports_the_best_real_batch_chosen_per_replicate():
    """The bench's headline over the best real batch is speedup_over_best over every real batch size."""
    from agents.experiments.bench_report import compute_speedups
    from agents.experiments.speedup import speedup_over_best

    def entry(seed, ctt_scale):  # a straight curve from 20 to 80 over 4 evaluated steps
        c = [0.0, ctt_scale, 2 * ctt_scale, 3 * ctt_scale]
        return {"seed": seed, "curve": {"step": [0, 1, 2, 3], "compute_cpu_s": c, "score": [20.0, 40.0, 60.0, 80.0]},
                "records": [{"cpu_seconds": {"execution": 10.0}, "executions": 1, "cpu_unmeasured": 0}]}

    full = [100.0, 90.0, 120.0, 80.0, 300.0, 95.0]
    small = [60.0, 200.0, 70.0, 180.0, 75.0, 190.0]
    wmrl = [30.0, 40.0, 35.0, 45.0, 38.0, 42.0]
    results = {"config": {"max_bracket_share": 0.1}, "methods": {
        "real": {"seeds": [entry(k, v) for k, v in enumerate(full)]},
        "real_anchor_batch": {"seeds": [entry(k, v) for k, v in enumerate(small)]},
        "wmrl_learned": {"seeds": [entry(k, v) for k, v in enumerate(wmrl)]}}}
    sp = compute_speedups(results, steps=3, gain_fraction=0.9, n_boot=2000, sensitivity_gains=())
    m = sp["methods"]
    want, best = speedup_over_best({"real": m["real"]["total_ctt"], "real_anchor_batch": m["real_anchor_batch"]["total_ctt"]},
                                   m["wmrl_learned"]["total_ctt"], n_boot=2000)
    got = m["wmrl_learned"]["speedup_over_best_real"]
    assert sp["best_real"] == best == "real"
    assert (got["point"], got["low"], got["high"]) == (want.point, want.low, want.high)
