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
    with pytest.raises(ValueError, match="at least 2 groups"):
        gns.add_step(1.0, 1.0, 1)
    with pytest.raises(ValueError, match="squared norm"):
        gns.add_step(-1.0, 0.0, 4)
    with pytest.raises(ValueError, match="groups_per_step"):
        gns.ratio(0)


def test_group_gradient_moments_match_the_softmax_closed_form():
    """For a tabular softmax policy, ∇_{logits[t]} Σ_i A_i log π(a_i | t) = Σ_i A_i (onehot(a_i) − π_t)."""
    import torch

    from agents.experiments.sweep import TabularSoftmaxPolicy

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
