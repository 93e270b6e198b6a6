"""WMRLCorrector (wmrl_envs.core.corrector) and the CostLedger: routed rewards and weights, the flat-map warning, ablation switches, calibration error."""

from __future__ import annotations

import json

import pytest

from wmrl_envs.core import CostLedger, InverseVarianceDenoiser, IsotonicDebiaser, WMRLCorrector

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


def test_a_stalled_rho_warm_up_is_counted_and_warned_about_once(caplog):
    """Issue 35: in the headline run rho never left 1 — once the policy wrote one program per
    group, its anchor groups' real scores were all equal and never counted, so the 64-group
    warm-up never ended (results/headline_run/diagnosis.md). The stats count it and the corrector
    says so once, when the last max(16, warm-up / 2) anchor groups all lacked real spread."""
    import logging

    corr = WMRLCorrector(IsotonicDebiaser(min_pairs=4, refit_every=4), InverseVarianceDenoiser(warmup_groups=40))
    corr.correct_group("anchor", raw=[0.1, 0.4, 0.6, 0.9], real=[0.0, 0.2, 0.5, 1.0])  # before the first fit
    for _ in range(3):  # counted: the real scores vary
        corr.correct_group("anchor", raw=[0.1, 0.5, 0.9, 0.3], real=[0.1, 0.6, 0.8, 0.2])
    corr.correct_group("anchor", raw=[0.5, None, None, None], real=[0.7, None, None, None])  # too few scored
    st = corr.stats()
    assert (st["denoiser_groups_uncalibrated"], st["denoiser_groups_counted"], st["denoiser_groups_no_spread"],
            st["denoiser_warmup_groups"], st["denoiser_warmup_stalled"]) == (1, 3, 0, 40, False)
    assert corr.denoiser.stall_groups == 20
    with caplog.at_level(logging.WARNING, logger="wmrl_envs.core.corrector"):
        for _ in range(19):  # one action per group: real scores all equal, never counted
            corr.correct_group("anchor", raw=[0.5, 0.5, 0.5, 0.5], real=[0.7, 0.7, 0.7, 0.7])
        assert not corr.denoiser.warmup_stalled and not caplog.records  # 19 in a row: not yet
        corr.correct_group("anchor", raw=[0.5, None, 0.5, 0.5], real=[0.7, 0.7, None, 0.7])  # 2 scored, equal: the 20th
        assert corr.denoiser.warmup_stalled and corr.rho == 1.0 and corr.stats()["denoiser_warmup_stalled"]
        for _ in range(5):
            corr.correct_group("anchor", raw=[0.5] * 4, real=[0.7] * 4)
    warned = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
    assert len(warned) == 1
    assert "the last 20 anchor groups' real scores were all equal" in warned[0]
    assert "(3 of the 40 anchor groups the warm-up needs have counted)" in warned[0]
    assert corr.stats()["denoiser_groups_no_spread"] == 25
    # the once-only flag and the run survive a resume: no second warning
    back = WMRLCorrector(IsotonicDebiaser(min_pairs=4, refit_every=4), InverseVarianceDenoiser(warmup_groups=40))
    back.load_state_dict(json.loads(json.dumps(corr.state_dict())))
    assert back.denoiser.no_spread_run == 25 and back.stats()["denoiser_groups_no_spread"] == 25
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="wmrl_envs.core.corrector"):
        back.correct_group("anchor", raw=[0.5] * 4, real=[0.7] * 4)
    assert not [r for r in caplog.records if "stalled" in r.getMessage()]
    # a group with real spread ends the run of groups without it
    back.correct_group("anchor", raw=[0.1, 0.5, 0.9, 0.3], real=[0.1, 0.6, 0.8, 0.2])
    assert back.denoiser.no_spread_run == 0 and not back.denoiser.warmup_stalled


def test_no_warm_up_stall_without_a_world_model_or_with_spread(caplog):
    """Review of session 8: real-execution GRPO through the loop (world_model=None: no raw scores)
    skipped every anchor group and was told its real scores were all equal. Without scores on both
    sides a group is neither counted nor 'without spread'; a warm-up that half the groups advance
    is not stalled."""
    import logging

    import numpy as np

    from wmrl_envs.core import CorrectionConfig, CorrectionLoop

    rng = np.random.default_rng(0)
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0), world_model=None)
    for _ in range(60):
        ticket = loop.open_group()
        loop.close_group(ticket, [None] * 4, list(rng.random(4)))
    st = loop.stats()
    assert st["denoiser_groups_no_spread"] == 0 and not st["denoiser_warmup_stalled"]
    moving = WMRLCorrector(IsotonicDebiaser(min_pairs=4, refit_every=4), InverseVarianceDenoiser(warmup_groups=64))
    moving.correct_group("anchor", raw=[0.1, 0.4, 0.6, 0.9], real=[0.0, 0.2, 0.5, 1.0])
    for _ in range(40):
        moving.correct_group("anchor", raw=[0.1, 0.5, 0.9, 0.3], real=[0.1, 0.6, 0.8, 0.2])
        moving.correct_group("anchor", raw=[0.5] * 4, real=[0.7] * 4)
    assert not moving.denoiser.warmup_stalled and moving.stats()["denoiser_groups_no_spread"] == 40
    # with denoise=False nothing is said: rho is not used
    off = WMRLCorrector(IsotonicDebiaser(min_pairs=4, refit_every=4), InverseVarianceDenoiser(warmup_groups=16), denoise=False)
    with caplog.at_level(logging.WARNING, logger="wmrl_envs.core.corrector"):
        for _ in range(20):
            off.correct_group("anchor", raw=[0.5] * 4, real=[0.7] * 4)
    seen = [r.getMessage() for r in caplog.records]
    assert off.denoiser.warmup_stalled and not [m for m in seen if "stalled" in m]
    assert off.stats()["denoiser_warmup_stalled"] is False  # rho is off: nothing stalls (review of session 8)
