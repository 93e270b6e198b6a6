"""CorrectionConfig (wmrl_envs.core.config): each bad field rejected, the defaults are the classes' and build their objects, buffer sizes and numpy integers."""

from __future__ import annotations

import numpy as np
import pytest

from wmrl_envs.core import CorrectionConfig, InverseVarianceDenoiser, IsotonicDebiaser

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
