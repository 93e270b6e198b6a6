"""The GRPO core: group-relative advantages and the clipped surrogate with a KL penalty.

Group Relative Policy Optimization (Shao et al., 2024, "DeepSeekMath"): for each group of G
rollouts of one prompt, the advantage of rollout i is ``A_i = (r_i − mean_g r) / (std_g r + ε)``
(or centring only), computed over the *graded* rollouts (ungraded ones are dropped, never
zeroed); groups with fewer than 2 graded rollouts are skipped. WMRL (Yang et al., arXiv
2608.12564; ``docs/method.md``) multiplies the advantages of anchor-group rows by the anchor
weight ρ after this normalisation. The loss is PPO's clipped surrogate on per-token ratios with
a KL penalty to a frozen reference policy (k3 estimator) and an optional entropy bonus.

This module is pure tensor/array code, shared by every policy plugin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

__all__ = ["group_advantages", "GRPOLossOutput", "grpo_loss", "GroupBatch", "build_advantages"]


def group_advantages(
    rewards: Sequence[float | None],
    *,
    scale: bool = True,
    eps: float = 1e-6,
) -> np.ndarray | None:
    """Group-relative advantages of one group.

    Args:
        rewards: G rewards; ``None``/NaN marks an ungraded rollout.
        scale: divide by the group's standard deviation (GRPO); ``False`` = centring only.
        eps: added to the standard deviation.

    Returns:
        float64 array of shape (G,), NaN at ungraded rows, or ``None`` when fewer than 2
        rollouts are graded (the group is skipped).

    Example:
        >>> group_advantages([1.0, 0.0, None, 1.0], scale=False).round(3).tolist()
        [0.333, -0.667, nan, 0.333]
    """
    r = np.array([np.nan if v is None else float(v) for v in rewards], dtype=np.float64)
    ok = np.isfinite(r)
    if ok.sum() < 2:
        return None
    adv = np.full_like(r, np.nan)
    std = r[ok].std()
    if std <= 1e-9:  # all graded rollouts scored alike: no signal (and no float noise / eps)
        adv[ok] = 0.0
        return adv
    centred = r[ok] - r[ok].mean()
    adv[ok] = centred / (std + eps) if scale else centred
    return adv


@dataclass
class GroupBatch:
    """Rows that enter a policy update after advantages and weights are applied.

    Attributes:
        row_index: indices (into the step's flat list of rollouts) of the rows kept, shape (N,).
        advantages: weighted advantages of those rows, float64 shape (N,).
        n_groups_used: groups that contributed rows.
        n_groups_skipped: groups skipped (fewer than 2 graded rollouts).
        n_ungraded: rows dropped because they were ungraded.
    """

    row_index: np.ndarray
    advantages: np.ndarray
    n_groups_used: int
    n_groups_skipped: int
    n_ungraded: int


def build_advantages(
    group_rewards: Sequence[Sequence[float | None]],
    group_weights: Sequence[float],
    *,
    scale: bool = True,
    drop_zero_advantage: bool = False,
) -> GroupBatch:
    """Advantages for a step's groups, laid out flat (group after group).

    Args:
        group_rewards: per group, its G rewards (``None`` = ungraded).
        group_weights: per group, the advantage weight (ρ for anchor groups, 1 otherwise).
        scale: standardise (GRPO) or centre only.
        drop_zero_advantage: drop rows whose advantage is exactly 0 (e.g. all-equal groups),
            which carry no policy-gradient signal (they still count as used groups).

    Returns:
        A :class:`GroupBatch`.

    Raises:
        ValueError: the two sequences differ in length.
    """
    if len(group_rewards) != len(group_weights):
        raise ValueError(f"{len(group_rewards)} groups of rewards but {len(group_weights)} weights")
    rows, advs = [], []
    used = skipped = ungraded = 0
    offset = 0
    for rewards, w in zip(group_rewards, group_weights):
        a = group_advantages(rewards, scale=scale)
        g = len(rewards)
        ungraded += sum(1 for v in rewards if v is None or not np.isfinite(v))
        if a is None:
            skipped += 1
        else:
            used += 1
            for i in range(g):
                if np.isfinite(a[i]) and not (drop_zero_advantage and a[i] == 0.0):
                    rows.append(offset + i)
                    advs.append(float(a[i]) * float(w))
        offset += g
    return GroupBatch(np.asarray(rows, dtype=np.int64), np.asarray(advs, dtype=np.float64), used, skipped, ungraded)


@dataclass
class GRPOLossOutput:
    """Loss and diagnostics of one GRPO update (all tensors are scalars)."""

    loss: torch.Tensor
    policy_loss: torch.Tensor
    kl: torch.Tensor
    entropy: torch.Tensor
    clip_fraction: torch.Tensor


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    kl_coef: float = 0.04,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
) -> GRPOLossOutput:
    """Clipped-surrogate GRPO loss with a KL penalty to a frozen reference.

    Per token t of sequence b: ``ratio = exp(logp − logp_old)``, surrogate
    ``min(ratio·A_b, clip(ratio, 1−ε, 1+ε)·A_b)``, KL (k3) ``exp(ref − logp) − (ref − logp) − 1``.
    Token terms are averaged per sequence over its mask, then over sequences.

    Args:
        logprobs: (B, T) float log-probabilities of the sampled tokens under the policy (grad).
        old_logprobs: (B, T) the same under the sampling policy (no grad).
        ref_logprobs: (B, T) the same under the frozen reference (no grad).
        advantages: (B,) weighted advantages.
        mask: (B, T) 1 for completion tokens, 0 for padding (float or bool).
        clip_eps: PPO clip range ε.
        kl_coef: β of the KL penalty.
        entropy: optional (B, T) per-token entropies (grad) for the bonus.
        entropy_coef: weight of the entropy bonus.

    Returns:
        A :class:`GRPOLossOutput`; minimise ``.loss``.

    Raises:
        ValueError: shape mismatch.
    """
    if logprobs.shape != old_logprobs.shape or logprobs.shape != ref_logprobs.shape or logprobs.shape != mask.shape:
        raise ValueError(
            f"shape mismatch: logprobs {tuple(logprobs.shape)}, old {tuple(old_logprobs.shape)}, "
            f"ref {tuple(ref_logprobs.shape)}, mask {tuple(mask.shape)}"
        )
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(f"advantages must have shape ({logprobs.shape[0]},), got {tuple(advantages.shape)}")
    m = mask.to(logprobs.dtype)
    lengths = m.sum(dim=1).clamp_min(1.0)
    adv = advantages.to(logprobs.dtype).unsqueeze(1)
    ratio = torch.exp(logprobs - old_logprobs)
    surr1 = ratio * adv
    surr2 = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    surrogate = torch.minimum(surr1, surr2)
    d = ref_logprobs - logprobs
    kl = torch.exp(d) - d - 1.0
    per_seq = lambda x: ((x * m).sum(dim=1) / lengths).mean()  # noqa: E731
    policy_loss = -per_seq(surrogate)
    kl_mean = per_seq(kl)
    ent = per_seq(entropy) if entropy is not None else torch.zeros((), dtype=logprobs.dtype)
    loss = policy_loss + kl_coef * kl_mean - entropy_coef * ent
    clipped = ((ratio - 1.0).abs() > clip_eps).to(logprobs.dtype)
    return GRPOLossOutput(loss, policy_loss.detach(), kl_mean.detach(), ent.detach(), per_seq(clipped).detach())
