"""Real-execution GRPO's gradient noise scale (wmrl_envs.core.GradientNoiseScale) and the per-group
gradient moments it is fed from (agents.grpo.group_gradient_moments): unbiased on gradients of
known covariance, exact against the softmax policy's closed-form gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agents.grpo import build_advantages, group_gradient_moments
from wmrl_envs.core import GradientNoiseScale


@pytest.mark.parametrize("n_groups, sigma", [(4, 0.5), (16, 0.2), (16, 1.0)])
def test_noise_scale_is_unbiased_on_gradients_of_known_covariance(n_groups, sigma):
    """g_j = G + e_j, e_j ~ N(0, σ² I_d): B_noise = tr(Σ) / |G|² = d σ² / |G|²."""
    rng = np.random.default_rng(0)
    d = 50
    true_g = np.zeros(d)
    true_g[:2] = [0.6, 0.8]  # |G|² = 1
    gns = GradientNoiseScale()
    for _ in range(4000):
        gns.add_group_gradients(true_g + sigma * rng.normal(size=(n_groups, d)))
    assert gns.value == pytest.approx(d * sigma ** 2, rel=0.05)
    assert gns.ratio(n_groups) == pytest.approx(d * sigma ** 2 / n_groups, rel=0.05)
    assert gns.steps == 4000


def test_noise_scale_edges():
    gns = GradientNoiseScale()
    assert math.isnan(gns.value)
    gns.add_step(mean_group_sq_norm=2.0, sq_norm_of_mean=0.5, n_groups=4)  # trace 2, signal 0: pure noise
    assert gns.trace_sum == pytest.approx(2.0) and gns.signal_sum == pytest.approx(0.0) and gns.value == math.inf
    with pytest.raises(ValueError, match="groups per step >= 2"):
        gns.add_step(1.0, 1.0, 1)
    with pytest.raises(ValueError, match="groups per step >= 2"):
        gns.add_step(1.0, 1.0, 2.9)
    with pytest.raises(ValueError, match="swapped"):
        gns.add_step(1.0, 5.0, 3)  # |mean g|² > mean |g|²: impossible
    with pytest.raises(ValueError, match="squared norm"):
        gns.add_step(-1.0, 0.0, 4)
    with pytest.raises(ValueError, match="groups_per_step"):
        gns.ratio(0)
    with pytest.raises(ValueError, match="groups_per_step"):
        gns.ratio(True)


def test_a_single_group_with_signal_is_unresolved_not_a_huge_number():
    """One nonzero group of three: the signal estimate is exactly 0 in theory, ~1e-15 in floats."""
    g = np.zeros((3, 50))
    g[0] = np.random.default_rng(0).normal(size=50)
    gns = GradientNoiseScale()
    gns.add_group_gradients(g)
    assert gns.value == math.inf
    other = GradientNoiseScale()
    other.add_group_gradients(np.ones((4, 3)))  # all groups agree: no noise
    other.merge(gns)
    assert other.steps == 2 and other.trace_sum == pytest.approx(gns.trace_sum)


def test_group_gradient_moments_match_the_softmax_closed_form():
    """For a tabular softmax policy, ∇_{logits[t]} Σ_i A_i log π(a_i | t) = Σ_i A_i (onehot(a_i) − π_t)."""
    import torch

    from agents.experiments.sweep_run import TabularSoftmaxPolicy

    torch.manual_seed(0)
    pol = TabularSoftmaxPolicy(3, 5, seed=1)
    with torch.no_grad():
        pol.logits.copy_(torch.randn(3, 5, dtype=torch.float64))
    tasks = np.array([0, 2, 1, 2])
    actions, handle = pol.sample(tasks, 4)
    rewards = [[float(x % 3) for x in row] for row in actions]  # one group of G = 4 per task
    rewards[2] = [1.0, 1.0, 1.0, 1.0]  # a group without signal: g = 0 but it counts in n
    batch = build_advantages(rewards, [1.0] * 4, drop_zero_advantage=True)
    mean_sq, sq_mean, n = group_gradient_moments(pol, handle, batch.row_index, batch.advantages, batch.group_index, 4)
    probs = pol.probs()
    grads = np.zeros((4, 3 * 5))
    flat_t, flat_a = handle
    for row, adv, gid in zip(batch.row_index, batch.advantages, batch.group_index):
        t, a = flat_t[row], flat_a[row]
        g = -probs[t].copy()
        g[a] += 1.0
        grads[gid, t * 5:(t + 1) * 5] += adv * g
    assert n == 4 and not grads[2].any()
    assert mean_sq == pytest.approx(float((grads ** 2).sum(axis=1).mean()), rel=1e-10)
    assert sq_mean == pytest.approx(float((grads.mean(axis=0) ** 2).sum()), rel=1e-10)
    assert pol.logits.grad is None  # the parameters' .grad is not touched
    with pytest.raises(ValueError, match="group ids must lie"):
        group_gradient_moments(pol, handle, batch.row_index, batch.advantages, batch.group_index, 2)


@pytest.mark.slow
def test_noise_scale_script_quick_run_on_autoresearch(tmp_path):
    """``benchmarks/noise_scale.py --quick``: real GRPO on AutoResearch in the sandbox, the noise scale
    from its per-group gradients, and the advisor's prediction from an advice file."""
    import importlib.util
    import json
    from pathlib import Path

    from wmrl_envs.core import CostRates, predicted_speedup

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "noise_scale.py"
    spec = importlib.util.spec_from_file_location("noise_scale", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    advice = {"r": 0.5, "costs": {"execution_s": 2.0, "world_model_s": 0.02, "other_s": 0.0, "unit": "CPU-s"}}
    (tmp_path / "advice.json").write_text(json.dumps(advice))
    out = mod.main(["--quick", "--advice", str(tmp_path / "advice.json"), "--fractions", "0.1",
                    "--out", str(tmp_path / "ns.json")])
    assert out["steps"] == 2 and out["groups_per_step"] == 2 and len(out["per_seed"]) == 1
    assert out["per_seed"][0]["steps"] == 2
    b = out["b"]
    assert b >= 0 or math.isnan(b)
    (p,) = out["predictions"]
    costs = CostRates(2.0, 0.02)
    assert p["b_inf"] == pytest.approx(predicted_speedup(0.1, 0.5, costs))
    assert p["cost_ratio"] == pytest.approx(2.0 / 0.22)
    written = json.loads((tmp_path / "ns.json").read_text())["b"]  # strict JSON: an unresolved b is null
    assert written == (pytest.approx(b) if math.isfinite(b) else None)
