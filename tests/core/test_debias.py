"""IsotonicDebiaser (wmrl_envs.core.debias): identity until min_pairs, then the isotonic map; FIFO buffer, ungraded pairs, frozen evaluation, state."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from wmrl_envs.core import IsotonicDebiaser

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


def test_auto_map_keeps_the_identity_where_a_fitted_map_would_calibrate_worse():
    """Issue 36, item 3: on few noisy pairs of a world model already on the real scale, the map chosen
    out of fold (identity / linear / isotonic) does not make the prequential error worse than the raw
    score where the isotonic map does; on a judge's own scale it picks a real map, not the identity."""
    import numpy as np

    from wmrl_envs.core import CorrectionConfig, IsotonicDebiaser

    def prequential(kind, raw, real, g=8):
        deb = IsotonicDebiaser(min_pairs=16, refit_every=8, map_kind=kind)
        sq_raw = sq_cal = 0.0
        for i in range(0, raw.size, g):
            cal = deb.transform(raw[i:i + g])
            sq_raw += float(np.sum((raw[i:i + g] - real[i:i + g]) ** 2))
            sq_cal += float(np.sum((cal - real[i:i + g]) ** 2))
            deb.add_pairs(raw[i:i + g], real[i:i + g])
        return sq_cal / sq_raw, deb

    from benchmarks.debias_map import stream

    worse = {"isotonic": 0, "auto": 0}
    for seed in range(100):  # the main job's 8 anchor groups of 8 (benchmarks/debias_map.py, "on_scale")
        raw, real = stream("on_scale", seed, 8, 8, 0.25)
        for kind in worse:
            worse[kind] += prequential(kind, raw, real)[0] > 1.0
    # measured: isotonic worse than the raw score in 93 of 100 seeds, auto in 12 (benchmarks/debias_map.py)
    assert worse["isotonic"] >= 80 and worse["auto"] <= 25
    # a judge on its own scale: auto fits a map (linear or isotonic), and it beats the identity out of fold
    rng = np.random.default_rng(0)
    real = rng.choice([0.0, 0.5, 1.0], size=128)
    _, deb = prequential("auto", 10 * real + 3 + rng.normal(0, 1, 128), real)
    assert deb.chosen in ("linear", "isotonic") and deb.oof_mse["identity"] > 10 * deb.oof_mse[deb.chosen]
    # the choice is saved and restored, and the config passes it on
    again = IsotonicDebiaser()
    again.load_state_dict(deb.state_dict())
    assert again.chosen == deb.chosen and np.allclose(again.transform([3.0, 8.0, 13.0]), deb.transform([3.0, 8.0, 13.0]))
    assert CorrectionConfig(debias_map="auto").build_debiaser().map_kind == "auto"
    with pytest.raises(ValueError, match="debias_map"):
        CorrectionConfig(debias_map="spline")
