"""Unit tests of the correction objects (no Gymnasium): router, debiaser, denoiser, corrector."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from wmrl_envs.core import (
    AnchorRouter,
    InverseVarianceDenoiser,
    CostLedger,
    IsotonicDebiaser,
    WMRLCorrector,
    group_disagreement,
)


# ---------------------------------------------------------------- router
@pytest.mark.parametrize("fraction,n_groups", [(0.1, 8), (0.1, 10), (0.25, 16), (0.5, 4), (0.3, 7)])
def test_router_fraction_and_minimum(fraction, n_groups):
    router = AnchorRouter(anchor_fraction=fraction, seed=1)
    counts = []
    for _ in range(2000):
        routes = router.route_step(n_groups)
        assert len(routes) == n_groups
        k = routes.count("anchor")
        assert k >= 1  # at least one anchor group per step
        counts.append(k)
    expected = max(fraction, 1.0 / n_groups) if fraction * n_groups < 1 else fraction
    assert router.realised_fraction == pytest.approx(expected, abs=0.02)
    assert router.n_anchor_groups == sum(counts)


def test_router_zero_fraction_has_no_anchors_and_cap():
    assert AnchorRouter(0.0).route_step(8).count("anchor") == 0
    assert AnchorRouter(1.0).route_step(8).count("anchor") == 8
    assert AnchorRouter(1.0).route_step(8, free_slots=3).count("anchor") == 3
    assert AnchorRouter(0.1).route_step(8, free_slots=0).count("anchor") == 0


@pytest.mark.parametrize("kwargs", [{"anchor_fraction": -0.1}, {"anchor_fraction": 1.5}, {"min_anchor_groups": -1}])
def test_router_rejects_bad_args(kwargs):
    with pytest.raises(ValueError):
        AnchorRouter(**kwargs)


def test_router_state_roundtrip():
    a = AnchorRouter(0.3, seed=5)
    for _ in range(7):
        a.route_step(5)
    b = AnchorRouter(0.9, seed=0)
    with pytest.warns(UserWarning, match="anchor_fraction: configured 0.9, saved 0.3"):
        b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert [a.route_step(5) for _ in range(10)] == [b.route_step(5) for _ in range(10)]
    assert a.realised_fraction == b.realised_fraction


# ---------------------------------------------------------------- debiaser
def test_debiaser_identity_until_min_pairs_then_fits():
    deb = IsotonicDebiaser(min_pairs=10, refit_every=5)
    deb.add_pairs(np.linspace(0, 1, 9), np.linspace(0, 1, 9) ** 2)
    assert not deb.fitted
    np.testing.assert_allclose(deb.transform([0.3, 0.7]), [0.3, 0.7])
    deb.add_pairs([0.5], [0.25])
    assert deb.fitted and deb.n_fits == 1
    # isotonic fit of y = x^2 on a grid reproduces it at the grid points
    assert deb.transform([0.5])[0] == pytest.approx(0.25, abs=1e-9)
    # clipped outside the fitted range
    assert deb.transform([2.0])[0] == pytest.approx(1.0)
    assert deb.transform([-1.0])[0] == pytest.approx(0.0)
    # refit only after refit_every new pairs
    deb.add_pairs([0.1] * 4, [0.9] * 4)
    assert deb.n_fits == 1
    deb.add_pairs([0.1], [0.9])
    assert deb.n_fits == 2


def test_debiaser_fifo_none_and_frozen():
    deb = IsotonicDebiaser(buffer_size=5, min_pairs=2, refit_every=1)
    assert deb.add_pairs([0.1, None, 0.3, float("nan")], [0.0, 1.0, None, 0.5]) == 1
    deb.add_pairs(range(10), range(10))
    assert deb.n_pairs == 5 and deb.n_seen == 11
    np.testing.assert_array_equal(deb.pairs()[0], [5, 6, 7, 8, 9])
    deb.training = False
    assert deb.add_pairs([1.0], [1.0]) == 0
    assert deb.n_pairs == 5
    out = deb.transform([None, 7.0])
    assert math.isnan(out[0]) and out[1] == pytest.approx(7.0)
    with pytest.raises(ValueError):
        deb.add_pairs([1.0], [1.0, 2.0])


def test_debiaser_state_roundtrip_predicts_identically():
    rng = np.random.default_rng(0)
    x = rng.random(300)
    y = np.clip(np.sqrt(x) + rng.normal(0, 0.1, 300), 0, 1)
    deb = IsotonicDebiaser(min_pairs=50, refit_every=64)
    deb.add_pairs(x, y)
    deb.add_pairs(x[:10], y[:10])  # pairs since the last fit are part of the state
    other = IsotonicDebiaser()
    other.load_state_dict(json.loads(json.dumps(deb.state_dict())))
    grid = np.linspace(-0.2, 1.2, 301)
    np.testing.assert_array_equal(deb.transform(grid), other.transform(grid))
    # and they keep evolving identically
    deb.add_pairs(x[:60], y[:60]); other.add_pairs(x[:60], y[:60])
    np.testing.assert_array_equal(deb.transform(grid), other.transform(grid))
    assert deb.n_fits == other.n_fits


# ---------------------------------------------------------------- denoiser
@pytest.mark.parametrize(
    "cal,real,expected",
    [
        ([0.0, 1.0], [0.0, 1.0], 0.0),  # perfect (shifts cancel)
        ([0.5, 1.5], [0.0, 1.0], 0.0),
        ([0.0, 0.5], [0.0, 1.0], 0.25),  # d = 0.5·r: a scale does not cancel, (a − 1)²
        ([1.0, 0.0], [0.0, 1.0], 4.0),  # inverted: resid = ±1, var 0.25 -> 1/0.25
        ([0.3, 0.3], [0.0, 1.0], 1.0),  # constant prediction: resid = r - mean r
        ([0.0, 1.0], [0.5, 0.5], None),  # no real variance
        ([0.0, None, 1.0], [0.0, 1.0, None], None),  # fewer than 2 graded
    ],
)
def test_group_disagreement_values(cal, real, expected):
    s2 = group_disagreement(cal, real)
    if expected is None:
        assert s2 is None
    else:
        assert s2 == pytest.approx(expected)


@pytest.mark.parametrize("a", [0.5, 2.0, 1.5, -1.0, 0.0, 3.0])
@pytest.mark.parametrize("b", [0.0, -0.3, 7.0])
def test_group_disagreement_of_an_affine_map_is_a_minus_1_squared(a, b):
    """d = a·r + b with a perfect ranking: only the shift b cancels, s² = (a − 1)² for any Var(r)."""
    r = np.array([0.0, 0.1, 0.35, 0.4, 0.9, 1.0, 0.2, 0.65])
    for scale in (1.0, 0.01):  # s² is a share of Var(r): independent of the score scale
        assert group_disagreement(list(a * scale * r + b), list(scale * r)) == pytest.approx((a - 1.0) ** 2)
    # with an independent error e: s² = (a − 1)² + Var(e)/Var(r) + 2(a − 1)·Cov(r, e)/Var(r)
    e = np.array([0.05, -0.02, 0.0, 0.03, -0.04, 0.01, -0.03, 0.0])
    expected = (a - 1.0) ** 2 + np.var(e) / np.var(r) + 2 * (a - 1.0) * np.cov(r, e, bias=True)[0, 1] / np.var(r)
    assert group_disagreement(list(a * r + b + e), list(r)) == pytest.approx(expected)


def test_denoiser_warmup_calibration_and_clip():
    w = InverseVarianceDenoiser(warmup_groups=3, half_life=1.0, rho_target=2.0, rho_max=4.0)
    for _ in range(2):
        w.update([0.3, 0.3], [0.0, 1.0])  # s2 = 1
        assert w.rho == 1.0
    w.update([0.3, 0.3], [0.0, 1.0])
    assert w.c == pytest.approx(1.0)  # 1 + c * 1 = 2
    assert w.rho == pytest.approx(2.0)
    w.update([1.0, 0.0], [0.0, 1.0])  # s2 = 4, half-life 1 -> ema = 0.5*1 + 0.5*4 = 2.5
    assert w.ema == pytest.approx(2.5)
    assert w.rho == pytest.approx(3.5)
    for _ in range(10):
        w.update([1.0, 0.0], [0.0, 1.0])
    assert w.rho == pytest.approx(4.0)  # clipped at rho_max
    for _ in range(30):
        w.update([0.0, 1.0], [0.0, 1.0])
    # perfect world model: back to the lowest calibrated weight, 1 + c·ε (ε: disagreement floor)
    assert w.rho == pytest.approx(1.0 + w.c * InverseVarianceDenoiser.DEFAULT_DISAGREEMENT_FLOOR)


def test_denoiser_near_perfect_warmup_gives_rho_target_then_moves_by_a_computed_amount():
    """A warm-up with zero disagreement: c comes from the floor ε, so ρ = ρ_target exactly at
    calibration, and a small disagreement afterwards moves ρ by (ρ_target − 1)·(s̄² − ε)/ε at most,
    not to the clip (before the floor, c was 10⁶: ρ was 1 at calibration, then 4)."""
    eps = InverseVarianceDenoiser.DEFAULT_DISAGREEMENT_FLOOR
    assert eps == 0.01
    w = InverseVarianceDenoiser(warmup_groups=3, half_life=1.0, rho_target=2.0, rho_max=4.0)
    for _ in range(3):
        assert w.update([0.0, 1.0], [0.0, 1.0]) == 0.0  # perfect ranking: s² = 0
    assert w.ema == 0.0 and w.c == 1.0 / eps
    assert w.rho == 2.0  # exactly rho_target at calibration
    # s² = 0.01 (residual ±0.05 on Var(r) = 0.25); half-life 1: s̄² = 0.005 < ε -> ρ unchanged
    assert w.update([0.05, 0.95], [0.0, 1.0]) == pytest.approx(0.01)
    assert w.ema == pytest.approx(0.005)
    assert w.rho == 2.0
    # s² = 0.04: s̄² = 0.5·0.005 + 0.5·0.04 = 0.0225 -> ρ = 1 + 0.0225/ε = 3.25 (below the clip 4)
    assert w.update([0.1, 0.9], [0.0, 1.0]) == pytest.approx(0.04)
    assert w.rho == pytest.approx(1.0 + 0.0225 / eps)
    # reference half-life 64: one constant-prediction group (s² = 1) after a perfect warm-up
    v = InverseVarianceDenoiser(warmup_groups=2)
    for _ in range(2):
        v.update([0.0, 1.0], [0.0, 1.0])
    assert v.rho == 2.0
    v.update([0.3, 0.3], [0.0, 1.0])
    alpha = 1.0 - 0.5 ** (1.0 / 64)
    assert v.ema == pytest.approx(alpha) and v.rho == pytest.approx(1.0 + alpha / eps)  # 2.077
    # the floor survives a state round trip; states saved before it existed keep the 1e-6
    # floor their c was computed with
    u = InverseVarianceDenoiser()
    u.load_state_dict(json.loads(json.dumps(v.state_dict())))
    assert u.rho == v.rho and u.disagreement_floor == eps
    old = {k: val for k, val in v.state_dict().items() if k != "disagreement_floor"}
    u.load_state_dict(old)
    assert u.disagreement_floor == 1e-6
    with pytest.raises(ValueError, match="disagreement_floor"):
        InverseVarianceDenoiser(disagreement_floor=0.0)


def test_denoiser_floor_is_continuous_and_only_in_calibrated_mode():
    """ρ = 1 + (ρ_target − 1)·max(s̄², ε)/max(η̂²_cal, ε): the usual 1 + η̂²/η̂²_cal once both
    exceed ε; parameter-free ρ = 1 + s̄² has no division, so no floor."""
    eps = 0.05
    w = InverseVarianceDenoiser(warmup_groups=1, half_life=1.0, rho_target=3.0, rho_max=10.0, disagreement_floor=eps)
    w.update([0.3, 0.3], [0.0, 1.0])  # s² = 1 > ε
    assert w.c == pytest.approx(2.0) and w.rho == pytest.approx(3.0)
    for _ in range(40):
        w.update([0.0, 1.0], [0.0, 1.0])
    assert w.ema < eps and w.rho == pytest.approx(1.0 + 2.0 * eps)  # the lowest calibrated ρ
    p = InverseVarianceDenoiser(warmup_groups=1, mode="parameter_free", disagreement_floor=eps)
    p.update([0.0, 1.0], [0.0, 1.0])
    assert p.rho == 1.0


def test_denoiser_parameter_free_and_state():
    w = InverseVarianceDenoiser(warmup_groups=1, half_life=64, mode="parameter_free")
    w.update([0.3, 0.3], [0.0, 1.0])
    assert w.rho == pytest.approx(2.0)
    v = InverseVarianceDenoiser()
    v.load_state_dict(json.loads(json.dumps(w.state_dict())))
    assert v.rho == w.rho and v.mode == "parameter_free"
    w.training = False
    assert w.update([1.0, 0.0], [0.0, 1.0]) is None
    assert w.rho == pytest.approx(2.0)
    with pytest.raises(ValueError):
        InverseVarianceDenoiser(mode="nope")


# ---------------------------------------------------------------- corrector / ledger
def test_corrector_routes_rewards_and_weights():
    corr = WMRLCorrector(IsotonicDebiaser(min_pairs=4, refit_every=4), InverseVarianceDenoiser(warmup_groups=1))
    a = corr.correct_group("anchor", raw=[0.2, 0.4, None, 0.9], real=[0.0, 1.0, 1.0, None], group_id=3)
    assert a.rewards == [0.0, 1.0, 1.0, None]  # real scores on anchors; ungraded stays None
    assert a.advantage_weight == 1.0 and a.group_id == 3
    assert corr.debiaser.n_pairs == 2
    wm = corr.correct_group("world_model", raw=[0.2, None])
    assert wm.advantage_weight == 1.0 and wm.rewards == [0.2, None]  # identity before fit
    corr.correct_group("anchor", raw=[0.1, 0.3], real=[0.0, 1.0])
    assert corr.debiaser.fitted
    wm = corr.correct_group("world_model", raw=[0.15, 0.35])
    assert wm.rewards == pytest.approx([0.0, 1.0])
    assert corr.rho == 1.0  # both anchor groups came before the first fit (raw scale): ρ's warm-up not begun
    corr.correct_group("anchor", raw=[0.1, 0.2], real=[0.0, 1.0])  # calibrated to [0, 0]: s² = 1
    assert corr.rho == 2.0  # after a 1-group warm-up on calibrated scores
    with pytest.raises(ValueError):
        corr.correct_group("anchor", raw=[0.1])
    with pytest.raises(ValueError):
        corr.correct_group("bogus", raw=[0.1])


def test_a_flat_map_is_warned_about_once_and_counted(caplog):
    """Issue 25, finding 9: all-equal real rewards make the isotonic map flat, so every
    world-model group trains on one constant score (zero advantage): say so once, count it."""
    import logging

    corr = WMRLCorrector(IsotonicDebiaser(min_pairs=4, refit_every=4), InverseVarianceDenoiser(warmup_groups=1))
    corr.correct_group("world_model", raw=[0.2, 0.8])  # identity before the first fit: not flat
    corr.correct_group("anchor", raw=[0.1, 0.4, 0.6, 0.9], real=[0.0, 0.0, 0.0, 0.0])  # every anchor failed
    assert corr.debiaser.fitted and corr.debiaser.flat
    with caplog.at_level(logging.WARNING, logger="wmrl_envs.core.corrector"):
        outs = [corr.correct_group("world_model", raw=[0.2, 0.5, 0.9]) for _ in range(3)]
    assert all(o.rewards == [0.0, 0.0, 0.0] for o in outs)  # no advantage within the group
    warned = [r.getMessage() for r in caplog.records if "flat" in r.getMessage()]
    assert len(warned) == 1 and "every anchor real score so far is 0" in warned[0]
    assert "zero advantage" in warned[0] and "debias=False" in warned[0]
    assert corr.stats()["flat_map_groups"] == 3
    # evaluation groups do not train: not counted
    corr.correct_group("world_model", raw=[0.3], training=False)
    assert corr.stats()["flat_map_groups"] == 3
    back = WMRLCorrector()
    back.load_state_dict(json.loads(json.dumps(corr.state_dict())))
    assert back.stats()["flat_map_groups"] == 3
    old = corr.state_dict()
    del old["flat_map_groups"]  # saved by the previous version
    back.load_state_dict(old)
    assert back.stats()["flat_map_groups"] == 0
    # real scores that vary but do not rise with the world model's also flatten the map
    anti = WMRLCorrector(IsotonicDebiaser(min_pairs=4, refit_every=4), InverseVarianceDenoiser(warmup_groups=1))
    anti.correct_group("anchor", raw=[0.1, 0.4, 0.6, 0.9], real=[1.0, 1.0, 0.0, 0.0])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="wmrl_envs.core.corrector"):
        assert anti.correct_group("world_model", raw=[0.1, 0.9]).rewards == [0.5, 0.5]
    assert any("do not increase with the world model's" in r.getMessage() for r in caplog.records)
    # a map that varies is not flat
    ok = WMRLCorrector(IsotonicDebiaser(min_pairs=4, refit_every=4), InverseVarianceDenoiser(warmup_groups=1))
    ok.correct_group("anchor", raw=[0.1, 0.4, 0.6, 0.9], real=[0.0, 0.0, 1.0, 1.0])
    ok.correct_group("world_model", raw=[0.1, 0.9])
    assert not ok.debiaser.flat and ok.stats()["flat_map_groups"] == 0


def test_corrector_ablation_switches():
    corr = WMRLCorrector(IsotonicDebiaser(min_pairs=2, refit_every=1), InverseVarianceDenoiser(warmup_groups=1), debias=False, denoise=False)
    corr.correct_group("anchor", raw=[0.1, 0.9], real=[1.0, 0.0])
    assert corr.debiaser.fitted  # pairs still logged
    assert corr.correct_group("world_model", raw=[0.1]).rewards == [0.1]
    assert corr.rho == 1.0 and corr.denoiser.rho > 1.0


def test_ledger():
    led = CostLedger()
    led.add("execution", 1.5, 2)
    with led.timed("world_model", count=3):
        pass
    other = CostLedger()
    other.add("execution", 0.5)
    led.merge(other)
    assert led.count("execution") == 3 and led.seconds("execution") == pytest.approx(2.0)
    assert led.count("world_model") == 3
    c = CostLedger()
    c.load_state_dict(json.loads(json.dumps(led.state_dict())))
    assert c.to_dict() == led.to_dict()
    with pytest.raises(ValueError):
        led.add("x", -1.0)


def test_calibration_error_mae_and_brier_on_binary_outcomes():
    """Binary anchors (success 0/1): the isotonic map learns P(success | r̂); its prequential
    Brier score (MSE) beats the raw score's, while the MAE may not — hand-checkable numbers."""
    corr = WMRLCorrector(IsotonicDebiaser(min_pairs=4, refit_every=4), InverseVarianceDenoiser(warmup_groups=1))
    # raw score 0.9 always; real success half of the time -> calibrated map -> 0.5
    corr.correct_group("anchor", [0.9, 0.9, 0.9, 0.9], [1.0, 0.0, 1.0, 0.0])  # identity map: cal = raw
    corr.correct_group("anchor", [0.9, 0.9, 0.9, 0.9], [1.0, 0.0, 1.0, 0.0])  # map fitted on 4 pairs: 0.5
    err = corr.calibration_error()
    assert err["n"] == 8
    assert err["raw_mse"] == pytest.approx((0.01 + 0.81) / 2)  # every pair: (0.9-1)² or (0.9-0)²
    assert err["calibrated_mse"] == pytest.approx(((0.01 + 0.81) / 2 + 0.25) / 2)  # 4 identity pairs + 4 at 0.5
    assert err["raw_mae"] == pytest.approx(0.5) and err["calibrated_mae"] == pytest.approx(0.5)  # MAE sees no gain
    state = json.loads(json.dumps(corr.state_dict()))
    other = WMRLCorrector(IsotonicDebiaser(min_pairs=4, refit_every=4), InverseVarianceDenoiser(warmup_groups=1))
    other.load_state_dict(state)
    assert other.calibration_error() == err
    assert corr.stats()["calibration_mse_calibrated"] == pytest.approx(err["calibrated_mse"])


# ---------------------------------------------------------------- correction config and loop
from wmrl_envs.core import CorrectionConfig, CorrectionLoop  # noqa: E402
from wmrl_envs.world_models.base import WorldModelPrediction  # noqa: E402


class _EchoWM:
    """Scores an action with its own value (no env)."""

    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=float(a)) for a in actions]


@pytest.mark.parametrize("field,value", [
    ("anchor_fraction", 1.5), ("anchor_fraction", -0.1), ("min_anchor_groups", -1), ("buffer_size", 0),
    ("min_pairs", 0), ("refit_every", 0), ("warmup_groups", -1), ("half_life", 0.0), ("rho_max", 0.5),
    ("rho_target", 5.0), ("rho_mode", "other"), ("disagreement_floor", 0.0), ("debias", 1),
])
def test_correction_config_rejects_each_bad_field(field, value):
    with pytest.raises(ValueError, match=f"CorrectionConfig.{field} must be"):
        CorrectionConfig(**{field: value})


def test_correction_config_defaults_are_the_classes_and_build_objects():
    cfg = CorrectionConfig()
    deb, den = IsotonicDebiaser(), InverseVarianceDenoiser()
    assert (cfg.buffer_size, cfg.min_pairs, cfg.refit_every) == (deb.buffer_size, deb.min_pairs, deb.refit_every)
    assert (cfg.warmup_groups, cfg.half_life, cfg.rho_target, cfg.rho_max, cfg.rho_mode, cfg.disagreement_floor) == (
        den.warmup_groups, den.half_life, den.rho_target, den.rho_max, den.mode, den.disagreement_floor)
    cfg = CorrectionConfig(anchor_fraction=0.25, min_anchor_groups=0, debias=False, min_pairs=3, warmup_groups=2,
                           rho_mode="parameter_free")
    corr = cfg.build_corrector()
    assert corr.debias is False and corr.denoise is True
    assert corr.debiaser.min_pairs == 3 and corr.denoiser.warmup_groups == 2 and corr.denoiser.mode == "parameter_free"
    router = cfg.build_router(seed=5)
    assert (router.anchor_fraction, router.min_anchor_groups, router.seed) == (0.25, 0, 5)


def _varying_anchor_close(loop, ticket, offset=0.0):
    # real scores vary, the world model is off by a per-rollout amount: s² is defined
    return loop.close_group(ticket, [0.1 + offset, 0.9, 0.5, 0.2], [0.0, 1.0, 1.0, 0.0])


def _primed_loop():
    """A loop whose debiaser has fitted its one map, the identity on [0, 1] (ρ's warm-up counts
    only groups calibrated by a fitted map)."""
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0, min_pairs=4, refit_every=10_000, warmup_groups=1),
                          world_model=_EchoWM())
    loop.close_group(loop.open_group(), [0.0, 0.3, 0.6, 1.0], [0.0, 0.3, 0.6, 1.0])
    assert loop.corrector.debiaser.fitted and loop.corrector.denoiser.n_uncalibrated == 1 and loop.rho == 1.0
    return loop


def test_loop_rho_at_routing_even_when_a_later_group_closes_first():
    loop = _primed_loop()
    first, second = loop.open_group(), loop.open_group()
    assert (first.group_id, second.group_id) == (1, 2) and first.route == second.route == "anchor"
    assert first.rho == second.rho == 1.0
    late = _varying_anchor_close(loop, second)  # the later group's anchors arrive first
    assert late.group_id == 2 and late.advantage_weight == 1.0 and late.disagreement is not None
    assert loop.rho == 2.0  # warm-up of one group: calibrated at rho_target
    early = _varying_anchor_close(loop, first, offset=0.05)
    assert early.group_id == 1
    assert early.advantage_weight == 1.0  # the ρ of its routing, not the 2.0 known at its close
    assert loop.n_groups_started == loop.n_groups_closed == 3
    assert loop.corrector.debiaser.n_seen == 12 and loop.corrector.denoiser.n_scored_groups == 2
    third = loop.open_group()
    assert third.rho == loop.rho > 2.0  # the first group's disagreement moved the EMA on
    assert _varying_anchor_close(loop, third).advantage_weight == third.rho


def test_loop_close_with_rho_at_close_and_world_model_groups():
    loop = _primed_loop()
    a, b = loop.open_group(), loop.open_group()
    _varying_anchor_close(loop, b)
    assert _varying_anchor_close(loop, a, 0.05).advantage_weight == 1.0
    c = loop.open_group()
    d = loop.open_group()
    _varying_anchor_close(loop, c)
    rho_before_d = loop.rho  # ρ at d's close, before d's own update (not d.rho, the one at routing)
    assert rho_before_d != d.rho
    assert loop.close_group(d, [0.1, 0.9, 0.5, 0.2], [0.0, 1.0, 1.0, 0.0], rho_from="close").advantage_weight == rho_before_d
    wm = loop.open_group(route="world_model")
    out = loop.close_group(wm, [0.3, None, 0.7, 0.1], wm_causes=[None, "world_model_timeout", None, None])
    assert out.advantage_weight == 1.0 and out.rewards == [0.3, None, 0.7, 0.1]
    assert out.ungraded_causes == [None, "world_model_timeout", None, None]
    assert loop.ledger.count("ungraded:world_model_timeout") == 1


def test_loop_ungraded_causes_per_rollout_on_anchors():
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0), world_model=_EchoWM(), max_ungraded_share=None)
    t = loop.open_group()
    out = loop.close_group(t, [None, 0.5, 0.4], [1.0, None, 0.0], wm_causes=["world_model_error", None, None],
                           exec_causes=[None, "sandbox_unavailable", None])
    assert out.rewards == [1.0, None, 0.0]
    assert out.ungraded_causes == [None, "sandbox_unavailable", None]
    # the failed world-model score of row 0 leaves only the anchor pair out
    assert loop.ledger.ungraded_counts() == {"sandbox_unavailable": 1, "world_model_error": 1}
    assert loop.corrector.debiaser.n_seen == 1


def test_loop_set_anchor_fraction_takes_effect_at_the_next_drawn_step():
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.0), world_model=_EchoWM(), groups_per_step=4)
    assert loop.plan_step() == ["world_model"] * 4
    loop.set_anchor_fraction(1.0)
    assert [loop.open_group().route for _ in range(4)] == ["world_model"] * 4  # planned before the change
    assert [loop.open_group().route for _ in range(4)] == ["anchor"] * 4  # the next block is drawn at 1.0
    assert loop.plan_step(2) == ["anchor", "anchor"]
    assert loop.router.anchor_fraction == 1.0
    with pytest.raises(ValueError, match=r"anchor_fraction must be a number in \[0, 1\]"):
        loop.set_anchor_fraction(1.5)
    no_wm = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0))
    with pytest.raises(ValueError, match="without a world model"):
        no_wm.set_anchor_fraction(0.5)
    with pytest.raises(ValueError, match="no world model"):
        no_wm.open_group(route="world_model")


def test_loop_evaluation_freezes_and_uses_eval_route():
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5), world_model=_EchoWM(), eval_route="world_model")
    loop.training = False
    t = loop.open_group()
    assert t.route == "world_model" and not t.training and loop.router.n_groups_routed == 0
    assert loop.eval_ticket().group_id is None
    loop.close_group(loop.open_group(route="anchor"), [0.1, 0.9], [0.0, 1.0])
    assert loop.corrector.debiaser.n_seen == 0 and loop.ungraded.n_rollouts == 0


def test_loop_state_round_trip_and_version_check(tmp_path):
    cfg = CorrectionConfig(anchor_fraction=0.5, min_pairs=2, refit_every=2, warmup_groups=1)
    loop = CorrectionLoop(cfg, world_model=_EchoWM(), seed=3)
    for _ in range(5):
        t = loop.open_group()
        loop.close_group(t, [0.2, 0.8, 0.4], [0.0, 1.0, 1.0] if t.route == "anchor" else None)
    loop.count_episodes(15)
    path = tmp_path / "loop.json"
    loop.save(path)
    state = json.loads(path.read_text())
    assert state["version"] == CorrectionLoop.STATE_VERSION == 1
    other = CorrectionLoop(cfg, world_model=_EchoWM(), seed=99)
    other.load(path)
    assert other.state_dict() == loop.state_dict()
    assert [other.open_group().route for _ in range(6)] == [loop.open_group().route for _ in range(6)]
    for bad in ({**state, "version": 99}, {k: v for k, v in state.items() if k != "version"}):
        with pytest.raises(ValueError, match="correction state version"):
            other.load_state_dict(bad)


def test_loop_mutations_from_many_threads_add_up():
    from concurrent.futures import ThreadPoolExecutor

    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5, min_pairs=4, refit_every=4), world_model=_EchoWM())

    def work(k):
        t = loop.open_group()
        preds = loop.predict([None] * 3, [0.1 * (k % 10), 0.5, 0.9])
        loop.count_episodes(3)
        return loop.close_group(t, [p.score for p in preds], [0.0, 0.5, 1.0] if t.route == "anchor" else None)

    with ThreadPoolExecutor(max_workers=4) as pool:
        outs = list(pool.map(work, range(40)))
    assert sorted(o.group_id for o in outs) == list(range(40))
    n_anchor = sum(o.route == "anchor" for o in outs)
    assert loop.n_groups_started == loop.n_groups_closed == 40 and loop.n_episodes == 120
    assert loop.ledger.count("world_model") == 120 and loop.corrector.debiaser.n_seen == 3 * n_anchor
    assert loop.corrector.groups_corrected == {"anchor": n_anchor, "world_model": 40 - n_anchor}


# ---------------------------------------------------------------- loop: tickets, state, input checks
def _anchor_loop(**kw):
    return CorrectionLoop(CorrectionConfig(anchor_fraction=1.0, min_pairs=4, refit_every=4, warmup_groups=1),
                          world_model=_EchoWM(), **kw)


RAW, REAL = [0.1, 0.4, 0.6, 0.9], [0.0, 0.5, 0.5, 1.0]


def test_close_group_follows_the_tickets_training_flag_not_the_loops():
    loop = _anchor_loop()
    train_ticket = loop.open_group("anchor")
    loop.training = False
    corr = loop.close_group(train_ticket, RAW, REAL)  # result arriving after its step, in evaluation
    assert loop.corrector.debiaser.n_seen == 4 and loop.corrector.denoiser.n_uncalibrated == 1  # before the first fit
    assert corr.disagreement is not None and corr.advantage_weight == 1.0
    assert loop.training is False and loop.corrector.debiaser.training is False  # flag restored
    assert loop.corrector.denoiser.training is False
    loop.training = True
    loop.close_group(loop.eval_ticket(), RAW, REAL)  # evaluation ticket closed while training
    assert loop.corrector.debiaser.n_seen == 4 and loop.corrector.denoiser.n_uncalibrated == 1
    assert loop.corrector.calibration_error()["n"] == 4


def test_a_ticket_closes_once_and_not_after_a_load():
    from wmrl_envs.core.loop import GroupTicket

    loop = _anchor_loop()
    t = loop.open_group("anchor")
    loop.close_group(t, RAW, REAL)
    with pytest.raises(ValueError, match="group 0 is not open"):
        loop.close_group(t, RAW, REAL)
    with pytest.raises(ValueError, match="group 7 is not open"):
        loop.close_group(GroupTicket(7, "anchor", 1.0, True), RAW, REAL)
    assert loop.corrector.debiaser.n_seen == 4 and loop.n_groups_closed == 1
    with pytest.raises(TypeError, match="GroupTicket"):
        loop.close_group({"group_id": 1}, RAW, REAL)
    stale = loop.open_group("anchor")
    state = loop.state_dict()
    loop.load_state_dict(state)
    with pytest.raises(ValueError, match="group 1 is not open"):
        loop.close_group(stale, RAW, REAL)
    fresh = loop.open_group("anchor")
    assert fresh.group_id == 2
    loop.close_group(fresh, RAW, REAL)
    assert loop.corrector.debiaser.n_seen == 8 and loop.n_groups_closed == 2


def test_a_ticket_from_before_a_load_cannot_close_the_group_that_reuses_its_id():
    """Issue 25, finding 6: a load resets the group counter, so a new group gets the id of a
    ticket opened before the load; that old ticket must be refused, the new one must close."""
    loop = _anchor_loop()
    loop.close_group(loop.open_group("anchor"), RAW, REAL)
    state = loop.state_dict()  # saved at a group boundary: the next id is 1
    stale = loop.open_group("anchor")
    loop.load_state_dict(state)
    fresh = loop.open_group("anchor")
    assert stale.group_id == fresh.group_id == 1
    with pytest.raises(ValueError, match="group 1 is not open: its ticket was opened before a load_state_dict"):
        loop.close_group(stale, RAW, REAL)
    assert loop.n_groups_closed == 1 and loop.corrector.debiaser.n_seen == 4  # nothing updated
    loop.close_group(fresh, RAW, REAL)  # the ticket of the current epoch closes
    assert loop.n_groups_closed == 2 and loop.corrector.debiaser.n_seen == 8
    # a load of the loop's own state (a resume in place) also invalidates the open tickets
    again = loop.open_group("anchor")
    loop.load_state_dict(loop.state_dict())
    with pytest.raises(ValueError, match="before a load_state_dict"):
        loop.close_group(again, RAW, REAL)
    # a ticket of another loop with an id that is open here is refused too
    other, mine = _anchor_loop(), _anchor_loop()
    theirs, own = other.open_group("anchor"), mine.open_group("anchor")
    assert theirs.group_id == own.group_id == 0
    with pytest.raises(ValueError, match="group 0 is not open: its ticket comes from another loop"):
        mine.close_group(theirs, RAW, REAL)
    mine.close_group(own, RAW, REAL)
    other.close_group(theirs, RAW, REAL)
    assert mine.n_groups_closed == other.n_groups_closed == 1


def test_load_state_dict_validates_first_and_changes_nothing_on_error():
    loop = _anchor_loop()
    loop.close_group(loop.open_group("anchor"), RAW, REAL)
    good = json.loads(json.dumps(loop.state_dict()))
    other = _anchor_loop(seed=9)
    before = json.dumps(other.state_dict())
    bad = [
        ({k: v for k, v in good.items() if k != "ungraded"}, "lacks the keys \\['ungraded'\\]"),
        ({**good, "version": 1.0}, "version 1.0 is not supported"),
        ({**good, "version": True}, "version True is not supported"),
        ({k: v for k, v in good.items() if k != "version"}, "version None"),
        ([("version", 1)], "must be a dict"),
        ({**good, "ungraded": None}, "malformed"),
        ({**good, "n_episodes": "many"}, "malformed"),
    ]
    for state, msg in bad:
        with pytest.raises(ValueError, match=msg):
            other.load_state_dict(state)
        assert json.dumps(other.state_dict()) == before
    other.load_state_dict(good)
    assert other.state_dict() == good


def test_correction_config_buffer_and_numpy_integers():
    with pytest.raises(ValueError, match="CorrectionConfig.buffer_size must be an integer >= min_pairs=200"):
        CorrectionConfig(buffer_size=100)
    cfg = CorrectionConfig(buffer_size=np.int64(64), min_pairs=np.int32(8), warmup_groups=np.int64(2),
                           half_life=np.float64(8.0))
    assert cfg.build_corrector().debiaser.min_pairs == 8 and cfg.build_debiaser().buffer_size == 64
    with pytest.raises(ValueError, match="CorrectionConfig.min_pairs must be"):
        CorrectionConfig(min_pairs=True)
    with pytest.raises(ValueError, match="CorrectionConfig.min_anchor_groups must be"):
        CorrectionConfig(min_anchor_groups=1.0)


def test_loop_input_checks():
    loop = _anchor_loop()
    for n in (0, -1, 2.7, True):
        with pytest.raises(ValueError, match="groups_in_step must be an integer >= 1"):
            loop.plan_step(n)
    assert loop.plan_step(np.int64(2)) == ["anchor", "anchor"] and loop.plan_step() == ["anchor"]
    with pytest.raises(ValueError, match="groups_per_step must be an integer >= 1"):
        _anchor_loop(groups_per_step=2.7)
    t = loop.open_group("anchor")
    with pytest.raises(ValueError, match="wm_causes has 2 entries but raw has 4"):
        loop.close_group(t, RAW, REAL, wm_causes=[None, None])
    with pytest.raises(ValueError, match="exec_causes has 5 entries but raw has 4"):
        loop.close_group(t, RAW, REAL, exec_causes=[None] * 5)
    with pytest.raises(ValueError, match="rho_from must be 'routing' or 'close'"):
        loop.close_group(t, RAW, REAL, rho_from="bogus")
    assert loop.n_groups_closed == 0 and loop.corrector.debiaser.n_seen == 0
    loop.close_group(t, RAW, REAL)  # still open after the refused calls
    wm_loop = CorrectionLoop(CorrectionConfig(), world_model=_EchoWM())
    for f in (True, "0.5", None, 1.5):
        with pytest.raises(ValueError, match="anchor_fraction must be a number in \\[0, 1\\]"):
            wm_loop.set_anchor_fraction(f)
    wm_loop.set_anchor_fraction(np.float64(0.5))
    assert wm_loop.router.anchor_fraction == 0.5
    with pytest.raises(TypeError, match="config must be a CorrectionConfig"):
        CorrectionLoop({"anchor_fraction": 0.5}, world_model=_EchoWM())


def test_loop_config_reports_the_settings_in_use():
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5), world_model=_EchoWM())
    loop.set_anchor_fraction(0.25)
    assert loop.config == CorrectionConfig(anchor_fraction=0.25)
    own = CorrectionLoop(world_model=_EchoWM(),
                         corrector=CorrectionConfig(min_pairs=7, rho_mode="parameter_free").build_corrector(),
                         router=CorrectionConfig(anchor_fraction=0.2).build_router(1))
    assert own.config == CorrectionConfig(anchor_fraction=0.2, min_pairs=7, rho_mode="parameter_free")
    with pytest.warns(UserWarning, match="anchor_fraction: configured 0.25, saved 0.2"):
        loop.load_state_dict(own.state_dict())
    assert loop.config == CorrectionConfig(anchor_fraction=0.2, min_pairs=7, rho_mode="parameter_free")


# ---------------------------------------------------------------- loading a state with other settings
def _saved_wrapper_state(tmp_path, correction, groups_per_step=4):
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.envs.guess import GuessEnv, guess_score
    from wmrl_envs.world_models.synthetic import SyntheticWorldModel

    w = AnchoredWorldModelWrapper(GuessEnv(), SyntheticWorldModel(guess_score), correction=correction,
                                  group_size=2, groups_per_step=groups_per_step, seed=1)
    for k in range(6):
        w.score_group([np.array([0.1 * k], dtype=np.float32), np.array([0.9], dtype=np.float32)],
                      options={"target": 0.5})
    path = tmp_path / "wmrl_state.json"
    w.save(path)
    return w, path


def _fresh_wrapper(correction, groups_per_step=4):
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.envs.guess import GuessEnv, guess_score
    from wmrl_envs.world_models.synthetic import SyntheticWorldModel

    return AnchoredWorldModelWrapper(GuessEnv(), SyntheticWorldModel(guess_score), correction=correction,
                                     group_size=2, groups_per_step=groups_per_step, seed=7)


def test_loading_a_state_saved_with_other_settings_warns_once_and_uses_the_saved_ones(tmp_path):
    import warnings

    saved_cfg = CorrectionConfig(anchor_fraction=0.25, anchor_window=1, min_pairs=8, refit_every=4)
    src, path = _saved_wrapper_state(tmp_path, saved_cfg)
    w = _fresh_wrapper(CorrectionConfig(anchor_fraction=0.05, anchor_window=10, min_pairs=8, refit_every=4,
                                        rho_mode="parameter_free"), groups_per_step=20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w.load(path)
    assert len(caught) == 1 and caught[0].category is UserWarning
    msg = str(caught[0].message)
    assert "saved values are used" in msg
    for piece in ("anchor_fraction: configured 0.05, saved 0.25", "anchor_window: configured 10, saved 1",
                  "rho_mode: configured 'parameter_free', saved 'calibrated'",
                  "groups_per_step: configured 20, saved 4"):
        assert piece in msg
    for same in ("min_anchor_groups", "min_pairs", "refit_every", "half_life", "debias:"):
        assert same not in msg  # equal settings are not listed
    # the saved settings are the ones in use, and the run continues the saved one
    assert w.loop.config == saved_cfg and w.loop.groups_per_step == 4
    assert w.loop.corrector.denoiser.mode == "calibrated"
    assert [w.loop.next_route() for _ in range(12)] == [src.loop.next_route() for _ in range(12)]


def test_loading_a_state_saved_with_the_same_settings_is_silent(tmp_path):
    import warnings

    cfg = CorrectionConfig(anchor_fraction=0.25, anchor_window=3, min_pairs=8, refit_every=4)
    _, path = _saved_wrapper_state(tmp_path, cfg)
    w = _fresh_wrapper(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w.load(path)  # a resume with the run's own settings: no warning
    assert w.loop.config == cfg


def test_loop_debiaser_and_denoiser_settings_are_named_and_a_failed_load_does_not_warn():
    import warnings

    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5, buffer_size=300, half_life=16.0, denoise=False),
                          world_model=_EchoWM())
    state = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5), world_model=_EchoWM()).state_dict()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="malformed"):
            loop.load_state_dict({**state, "n_episodes": "many"})
        assert caught == []  # nothing was loaded, nothing replaced
    with pytest.warns(UserWarning) as record:
        loop.load_state_dict(state)
    assert len(record) == 1
    msg = str(record[0].message)
    assert msg.startswith("CorrectionLoop.load_state_dict")
    for piece in ("denoise: configured False, saved True", "buffer_size: configured 300, saved 5000",
                  "half_life: configured 16.0, saved 64.0"):
        assert piece in msg
    assert "anchor_fraction" not in msg and loop.config == CorrectionConfig(anchor_fraction=0.5)


def test_loop_score_group_predicts_routes_executes_anchors_only_and_closes():
    """CorrectionLoop.score_group: the one group call sequence (predict, route, execute, close)."""
    from wmrl_envs.core import AnchorExecution

    class WM:
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=float(a) / 10) for a in actions]

    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5), world_model=WM(), seed=0)
    called = []

    def execute(ticket):
        called.append(ticket.group_id)
        return AnchorExecution(real=[1.0, None, 0.0], causes=[None, "execution_error", None],
                               infos=[{}, {"error": "boom"}, {}], record=[(0.5, 0.25)] * 3)

    anchor = loop.score_group([7] * 3, [1, 2, 3], execute, route="anchor")
    assert called == [0] and anchor.route == "anchor" and anchor.group_id == 0
    assert anchor.rewards == [1.0, None, 0.0]
    assert anchor.correction.raw_scores == [0.1, 0.2, 0.3]
    assert anchor.infos[1]["wmrl"]["ungraded_cause"] == "execution_error"
    assert loop.ledger.count("execution") == 3 and loop.ledger.cpu_seconds("execution") == pytest.approx(0.75)
    wm = loop.score_group([7] * 3, [1, 2, 3], execute, route="world_model")
    assert called == [0] and wm.route == "world_model" and wm.observations == [7, 7, 7]
    assert loop.n_episodes == 6 and loop.n_groups_closed == 2
    with pytest.raises(ValueError, match="anchor group"):
        loop.score_group([7] * 3, [1, 2, 3], route="anchor")
    with pytest.raises(ValueError, match="contexts"):
        loop.score_group([7] * 2, [1, 2, 3], execute)


def test_loop_stats_reports_what_a_trainer_logs():
    class WM:
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=float(a)) for a in actions]

    from wmrl_envs.core import AnchorExecution

    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5), world_model=WM(), seed=3)
    for k in range(6):
        loop.score_group([0] * 2, [k, k + 1], lambda t: AnchorExecution(real=[0.0, 1.0], record=[(0.1, 0.1)] * 2))
    s = loop.stats()
    json.dumps(s)
    assert s["groups_closed"] == s["groups_started"] == 6 and s["groups_open"] == 0 and s["episodes"] == 12
    assert s["anchor_groups_routed"] == loop.router.n_anchor_groups >= 1
    assert s["executions"] == 2 * s["anchor_groups_routed"] and s["world_model_predictions"] == 12
    assert s["anchor_pairs"] == loop.corrector.debiaser.n_pairs == 2 * s["anchor_groups_routed"]
    assert s["rho"] == loop.rho and s["adaptive"] is None and s["ungraded_rollouts"] == 0
