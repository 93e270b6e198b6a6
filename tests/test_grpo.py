"""GRPO core: advantages on hand-computed groups, the loss's values and gradient direction."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from agents.evaluation import avg_at_k
from agents.grpo import build_advantages, group_advantages, grpo_loss


@pytest.mark.parametrize(
    "rewards,scale,expected",
    [
        ([1.0, 0.0], False, [0.5, -0.5]),
        ([1.0, 0.0], True, [1.0, -1.0]),  # std 0.5
        ([0.1, 0.1, 0.1], True, [0.0, 0.0, 0.0]),
        ([0.2, None, 0.6], False, [-0.2, math.nan, 0.2]),
        ([0.5, None], True, None),  # fewer than 2 graded -> skipped
        ([None, None, None], True, None),
    ],
)
def test_group_advantages(rewards, scale, expected):
    a = group_advantages(rewards, scale=scale, eps=1e-12)
    if expected is None:
        assert a is None
    else:
        np.testing.assert_allclose(a, expected, atol=1e-9)


def test_build_advantages_applies_rho_to_anchor_rows_only_and_drops_ungraded():
    batch = build_advantages(
        [[1.0, 0.0], [0.3, None, 0.1], [0.5, None], [0.2, 0.2]],
        [2.0, 1.0, 3.0, 1.0],
        scale=False,
        drop_zero_advantage=True,
    )
    # group 0 (anchor, rho 2): +-0.5*2; group 1: +-0.1, row 4 dropped; group 2 skipped; group 3 zero
    np.testing.assert_array_equal(batch.row_index, [0, 1, 2, 4])
    np.testing.assert_allclose(batch.advantages, [1.0, -1.0, 0.1, -0.1])
    assert (batch.n_groups_used, batch.n_groups_skipped, batch.n_ungraded) == (3, 1, 2)
    with pytest.raises(ValueError):
        build_advantages([[1.0]], [1.0, 2.0])


def test_grpo_loss_values_and_gradient_direction():
    torch.manual_seed(0)
    logits = torch.zeros(2, 3, requires_grad=True)  # per-token log-prob parameters
    lp = torch.nn.functional.logsigmoid(logits)
    old = lp.detach()
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([1.0, -1.0])
    out = grpo_loss(lp, old, old, adv, mask, kl_coef=0.04)
    # ratio = 1, KL = 0: loss = -mean_b(A_b) = 0
    assert float(out.loss) == pytest.approx(0.0, abs=1e-7)
    assert float(out.kl) == pytest.approx(0.0, abs=1e-7)
    out.loss.backward()
    g = logits.grad
    assert (g[0, :2] < 0).all()  # positive advantage: increase its tokens' log-prob
    assert (g[1] > 0).all()  # negative advantage: decrease
    assert g[0, 2] == 0  # padding gets no gradient


def test_grpo_loss_clipping_and_kl():
    lp = torch.log(torch.tensor([[0.9]]))
    old = torch.log(torch.tensor([[0.5]]))  # ratio 1.8 > 1 + 0.2
    ref = torch.log(torch.tensor([[0.5]]))
    out = grpo_loss(lp, old, ref, torch.tensor([1.0]), torch.ones(1, 1), clip_eps=0.2, kl_coef=0.0)
    assert float(out.policy_loss) == pytest.approx(-1.2)
    assert float(out.clip_fraction) == pytest.approx(1.0)
    d = math.log(0.5) - math.log(0.9)
    out = grpo_loss(lp, lp, ref, torch.tensor([0.0]), torch.ones(1, 1), kl_coef=1.0)
    assert float(out.kl) == pytest.approx(math.exp(d) - d - 1)
    with pytest.raises(ValueError):
        grpo_loss(lp, lp, lp, torch.tensor([1.0, 2.0]), torch.ones(1, 1))


@pytest.mark.parametrize(
    "positions,cats,k,overall,per_cat",
    [
        # task a best 0.5; b none valid -> 0; category x = 25, y = 100 -> 62.5
        ({"a": [0.5, None], "b": [None], "c": [1.0]}, {"a": "x", "b": "x", "c": "y"}, None, 62.5, {"x": 25.0, "y": 100.0}),
        # k=1 keeps the first trajectory only
        ({"a": [0.2, 0.8], "b": [0.4, 0.4]}, {"a": "x", "b": "y"}, 1, 30.0, {"x": 20.0, "y": 40.0}),
        ({"a": [0.2, 0.8], "b": [0.4, 0.4]}, {"a": "x", "b": "x"}, 2, 60.0, {"x": 60.0}),
    ],
)
def test_avg_at_k(positions, cats, k, overall, per_cat):
    res = avg_at_k(positions, cats, k=k)
    assert res["overall"] == pytest.approx(overall)
    assert res["per_category"] == pytest.approx(per_cat)


def test_avg_at_k_errors():
    with pytest.raises(ValueError):
        avg_at_k({"a": []}, {"a": "x"})
    with pytest.raises(ValueError):
        avg_at_k({"a": [0.1]}, {})
