"""The GRPO core shared by every policy and loop: advantages, the loss, and the one GRPO step.

GRPO (Shao et al., 2024, "DeepSeekMath") with WMRL's anchor weight ρ on anchor-group advantages;
the formulas (group-relative advantages over the graded rollouts, ρ after normalisation, PPO's
dual-clipped surrogate, the k3 KL to a frozen reference, the entropy bonus) are in ``docs/method.md``,
"GRPO". This module holds them as tensor/array code (:func:`group_advantages`,
:func:`build_advantages`, :func:`grpo_loss`) and the update every policy and loop calls:
:class:`GRPOPolicy` is the small protocol a policy implements (per-token log-probs of chosen
rows, under the policy or its frozen reference, and its trainable parameters),
:class:`GRPOUpdateConfig` the step's settings, :func:`grpo_update` / :func:`grpo_step` the
update (``num_iterations`` optimisation epochs of micro-batched backward passes, one optimiser
step each). Keeping one copy keeps the main job, the benchmark and the experiments comparable.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

import numpy as np
import torch

__all__ = [
    "group_advantages",
    "GRPOLossOutput",
    "grpo_loss",
    "GroupBatch",
    "build_advantages",
    "GRPOPolicy",
    "GRPOUpdateConfig",
    "grpo_step",
    "group_gradient_moments",
    "group_batch",
    "turn_rows",
    "group_step",
    "grpo_update",
]


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
        group_index: the group (position in the step's list of groups) of each kept row, int64
            shape (N,).
    """

    row_index: np.ndarray
    advantages: np.ndarray
    n_groups_used: int
    n_groups_skipped: int
    n_ungraded: int
    group_index: np.ndarray


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
        ValueError: the two sequences differ in length, or a weight is not a finite number
            (weights are ρ or 1; a NaN would make the loss NaN).
    """
    if len(group_rewards) != len(group_weights):
        raise ValueError(f"{len(group_rewards)} groups of rewards but {len(group_weights)} weights")
    for gi, w in enumerate(group_weights):
        if not _is_real(w) or not np.isfinite(float(w)):
            raise ValueError(f"group_weights[{gi}] must be a finite number (ρ or 1), got {w!r}")
    rows, advs, gids = [], [], []
    used = skipped = ungraded = 0
    offset = 0
    for gi, (rewards, w) in enumerate(zip(group_rewards, group_weights)):
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
                    gids.append(gi)
        offset += g
    return GroupBatch(
        np.asarray(rows, dtype=np.int64), np.asarray(advs, dtype=np.float64), used, skipped, ungraded,
        np.asarray(gids, dtype=np.int64),
    )


@dataclass
class GRPOLossOutput:
    """Loss and diagnostics of one GRPO update (all tensors are scalars).

    ``clip_fraction``: the mean (per sequence over its mask, then over sequences) share of tokens
    whose ratio lies outside ``[1 − ε, 1 + ε]``; ``dual_clip_fraction``: the same share of tokens
    whose term the dual clip set to ``c·A`` (``A < 0`` and ratio above ``c``).
    """

    loss: torch.Tensor
    policy_loss: torch.Tensor
    kl: torch.Tensor
    entropy: torch.Tensor
    clip_fraction: torch.Tensor
    dual_clip_fraction: torch.Tensor = field(default_factory=lambda: torch.zeros(()))


def _check_dual_clip(dual_clip: object) -> None:
    if dual_clip is None:
        return
    if not _is_real(dual_clip) or not (np.isfinite(float(dual_clip)) and float(dual_clip) > 1.0):  # type: ignore[arg-type]
        raise ValueError(f"dual_clip must be None or a finite number > 1, got {dual_clip!r}")


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
    dual_clip: float | None = 3.0,
) -> GRPOLossOutput:
    """Dual-clipped-surrogate GRPO loss with a KL penalty to a frozen reference.

    Per token t of sequence b: ``ratio = exp(logp − logp_old)``, PPO's surrogate
    ``min(ratio·A_b, clip(ratio, 1−ε, 1+ε)·A_b)``, and for ``A_b < 0`` dual clipping (Ye et al.,
    2020): ``max(that, c·A_b)``; KL (k3) ``exp(ref − logp) − (ref − logp) − 1``. Token terms are
    averaged per sequence over its mask, then over sequences.

    Why the dual clip: for ``A < 0`` PPO's minimum keeps the unclipped ``ratio·A`` when the ratio
    exceeds ``1 + ε``, so the gradient w.r.t. ``logp`` is ``−ratio·A``, growing without bound with
    the ratio — what a stale row (log-probs recorded many updates ago, ρ-weighted) can reach. With
    the dual clip the term is constant ``c·A`` above ``ratio = c``: every token's gradient w.r.t.
    ``logp`` is at most ``max(1 + ε, c)·|A_b|`` (divided by the sequence's length) in magnitude.
    At ratio 1 (on-policy) nothing changes: ``A < c·A`` for ``A < 0``, ``c > 1``.

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
        dual_clip: ``c`` of the dual clip on negative advantages (a finite number > 1; a ``c``
            below ``1 + ε`` also cuts ratios inside the clip range), ``None`` = PPO's surrogate
            alone. Default 3.0, Ye et al.'s value.

    Returns:
        A :class:`GRPOLossOutput`; minimise ``.loss``.

    Raises:
        ValueError: shape mismatch, or ``dual_clip`` not ``None`` nor a finite number > 1.
    """
    _check_dual_clip(dual_clip)
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
    if dual_clip is not None:
        floor = float(dual_clip) * adv
        dual = (adv < 0) & (surrogate < floor)
        surrogate = torch.where(adv < 0, torch.maximum(surrogate, floor), surrogate)
    else:
        dual = torch.zeros_like(ratio, dtype=torch.bool)
    d = ref_logprobs - logprobs
    kl = torch.exp(d) - d - 1.0
    per_seq = lambda x: ((x * m).sum(dim=1) / lengths).mean()  # noqa: E731
    policy_loss = -per_seq(surrogate)
    kl_mean = per_seq(kl)
    ent = per_seq(entropy) if entropy is not None else torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    loss = policy_loss + kl_coef * kl_mean - entropy_coef * ent
    clipped = ((ratio - 1.0).abs() > clip_eps).to(logprobs.dtype)
    return GRPOLossOutput(loss, policy_loss.detach(), kl_mean.detach(), ent.detach(), per_seq(clipped).detach(),
                          per_seq(dual.to(logprobs.dtype)).detach())


# ----------------------------------------------------------------------------------------------
# The one GRPO step
# ----------------------------------------------------------------------------------------------


@runtime_checkable
class GRPOPolicy(Protocol):
    """What :func:`grpo_step` needs from a policy: log-probs of chosen rows, and its parameters.

    ``samples`` is whatever the policy's sampler returned (opaque to the step); a *row* is one
    sampled sequence in it, indexed ``0 … N−1`` group after group (row ``g·G + j`` is sample j
    of group g when every group has G rows).
    """

    def grpo_logprobs(
        self, samples: Any, rows: np.ndarray, *, reference: bool = False, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Per-token log-probabilities of the sampled tokens of ``rows``.

        Args:
            samples: the policy's samples.
            rows: int64 array (B,) of row indices into ``samples``.
            reference: score under the frozen reference policy (e.g. adapters disabled),
                under ``torch.no_grad()``; otherwise with grad w.r.t. the trainable parameters.
            with_entropy: also return per-token entropies (needed only when
                ``entropy_coef > 0``; may cost a full-distribution pass).

        Returns:
            ``(logprobs, mask, entropy)``: float (B, T) log-probs (0 at padding), the (B, T)
            float mask of real tokens (1.0) vs padding (0.0), and (B, T) entropies or ``None``.
        """
        ...

    def trainable_parameters(self) -> Iterable[torch.nn.Parameter]:
        """The parameters the optimiser updates (gradient clipping runs over these)."""
        ...


@dataclass(frozen=True)
class GRPOUpdateConfig:
    """Settings of :func:`grpo_update` / :func:`grpo_step` (validated on construction).

    Attributes:
        clip_eps: PPO clip range ε (> 0) of the surrogate. With ``num_iterations=1`` and no
            log-probs recorded at sampling the ratio is exactly 1 and ε has no effect
            (on-policy GRPO); it acts from the second iteration, or against recorded log-probs.
        kl_coef: β (>= 0) of the k3 KL penalty to the frozen reference; the reference pass runs
            only when ``kl_coef > 0``.
        entropy_coef: weight (>= 0) of the per-token entropy bonus; entropies are computed only
            when it is > 0.
        num_iterations: optimisation epochs (>= 1) over the same rows, one optimiser step each.
        micro_batch_size: at most this many rows per forward/backward (>= 1; ``None`` = all
            rows of a segment at once). Gradients are accumulated with weights proportional to
            row counts, so the step equals the full-batch one up to float round-off.
        micro_batch_per_group: a micro-batch never holds rows of two groups (one backward per
            group, split further by ``micro_batch_size``): for policies that score one prompt
            per call (the LLM policy).
        max_grad_norm: clip the gradient norm of ``trainable_parameters()`` to this (> 0)
            before each optimiser step; ``None`` = no clipping.
        scale: standardise advantages per group (GRPO) or centre only (:func:`build_advantages`).
        drop_zero_advantage: drop rows whose advantage is exactly 0 (:func:`build_advantages`)
            when ``kl_coef`` and ``entropy_coef`` are both 0; otherwise such rows carry the KL
            (and entropy) terms and stay (:func:`group_batch`).
        dual_clip: ``c`` of the dual clip (:func:`grpo_loss`): for a negative advantage the
            token's term is at least ``c·A``, so a ratio above ``c`` (a stale row: log-probs
            recorded at sampling, several updates ago) adds no gradient and no token's gradient
            w.r.t. its log-prob exceeds ``max(1 + ε, c)·|A|``. A finite number > 1, or ``None``
            (PPO's surrogate alone, unbounded for ``A < 0``). Default 3.0 (Ye et al., 2020): at
            ratio 1 (on-policy) it changes nothing, and with ``clip_eps=0.2`` it leaves ratios up
            to 3 to PPO.

    Raises:
        ValueError: a setting out of range or of the wrong type (e.g. ``clip_eps="0.2"``,
            ``kl_coef=None``); the message names the field.

    Example:
        >>> GRPOUpdateConfig(kl_coef=0.04, num_iterations=4).num_iterations
        4
        >>> GRPOUpdateConfig(num_iterations=0)
        Traceback (most recent call last):
        ...
        ValueError: num_iterations must be an integer >= 1, got 0
    """

    clip_eps: float = 0.2
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    num_iterations: int = 1
    micro_batch_size: int | None = None
    micro_batch_per_group: bool = False
    max_grad_norm: float | None = 1.0
    scale: bool = True
    drop_zero_advantage: bool = True
    dual_clip: float | None = 3.0  # last: positional construction of the earlier fields is unchanged

    def __post_init__(self) -> None:
        for name in ("clip_eps", "kl_coef", "entropy_coef", "max_grad_norm"):
            v = getattr(self, name)
            if not (_is_real(v) or (v is None and name == "max_grad_norm")):
                none = "None or " if name == "max_grad_norm" else ""
                raise ValueError(f"{name} must be {none}a finite number, got {v!r} ({type(v).__name__})")
        _check_dual_clip(self.dual_clip)
        if not (np.isfinite(self.clip_eps) and self.clip_eps > 0):
            raise ValueError(f"clip_eps must be a finite number > 0, got {self.clip_eps}")
        if not (np.isfinite(self.kl_coef) and self.kl_coef >= 0):
            raise ValueError(f"kl_coef must be a finite number >= 0, got {self.kl_coef}")
        if not (np.isfinite(self.entropy_coef) and self.entropy_coef >= 0):
            raise ValueError(f"entropy_coef must be a finite number >= 0, got {self.entropy_coef}")
        if isinstance(self.num_iterations, bool) or not isinstance(self.num_iterations, (int, np.integer)) or self.num_iterations < 1:
            raise ValueError(f"num_iterations must be an integer >= 1, got {self.num_iterations!r}")
        if self.micro_batch_size is not None and (
            isinstance(self.micro_batch_size, bool) or not isinstance(self.micro_batch_size, (int, np.integer)) or self.micro_batch_size < 1
        ):
            raise ValueError(f"micro_batch_size must be None or an integer >= 1, got {self.micro_batch_size!r}")
        if self.max_grad_norm is not None and not (np.isfinite(self.max_grad_norm) and self.max_grad_norm > 0):
            raise ValueError(f"max_grad_norm must be None or a finite number > 0, got {self.max_grad_norm}")
        for name in ("micro_batch_per_group", "scale", "drop_zero_advantage"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")


def _is_real(v: object) -> bool:
    """A real number (numpy scalars too), not a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


_STAT_KEYS = ("loss", "policy_loss", "kl", "entropy", "clip_fraction", "dual_clip_fraction")


def _micro_batches(n: int, groups: np.ndarray | None, config: GRPOUpdateConfig) -> list[slice]:
    """Consecutive row slices: split at group changes (if asked), then at ``micro_batch_size``."""
    if config.micro_batch_per_group:
        cuts = [0, *(np.flatnonzero(np.diff(groups)) + 1).tolist(), n]  # type: ignore[arg-type]
    else:
        cuts = [0, n]
    out = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        mb = config.micro_batch_size or (b - a)
        out.extend(slice(s, min(s + mb, b)) for s in range(a, b, mb))
    return out


def _grad_norm(params: list[torch.nn.Parameter], max_grad_norm: float | None) -> float:
    if max_grad_norm is not None:
        return float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
    norms = [p.grad.norm() for p in params if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0


def grpo_step(
    policy: GRPOPolicy,
    optimizer: torch.optim.Optimizer,
    samples: Any,
    rows: Sequence[int] | np.ndarray,
    advantages: Sequence[float] | np.ndarray,
    *,
    config: GRPOUpdateConfig,
    old_logprobs: torch.Tensor | np.ndarray | None = None,
    groups: Sequence[int] | np.ndarray | None = None,
) -> dict[str, float]:
    """GRPO's clipped-surrogate update on rows whose advantages are already built.

    ``config.num_iterations`` epochs over the rows; each epoch: ``optimizer.zero_grad``, one
    forward/backward of :func:`grpo_loss` per micro-batch (its loss weighted by its share of
    the rows; a single micro-batch is not rescaled), optional gradient clipping, one
    ``optimizer.step()``. The ratio's denominator: ``old_logprobs`` when given (e.g. recorded
    at sampling), in every epoch; otherwise epoch 1 uses the current log-probs detached and
    later epochs reuse those epoch-1 values. So with ``num_iterations=1`` and no recorded
    log-probs the ratio is exactly 1 and ``clip_eps`` has no effect (on-policy GRPO, as TRL's
    with ``num_iterations=1``); clipping acts from the second epoch on, or with log-probs
    recorded at sampling. Reference log-probs are computed (once, in epoch 1) only when
    ``config.kl_coef > 0``. The method: ``docs/method.md``.

    Args:
        policy: a :class:`GRPOPolicy`.
        optimizer: optimiser over ``policy.trainable_parameters()``.
        samples: the policy's samples (passed to ``policy.grpo_logprobs``).
        rows: N row indices into ``samples``.
        advantages: N (weighted) advantages, one per row.
        config: the step's settings (``scale`` and ``drop_zero_advantage`` are not used here).
        old_logprobs: optional float (N, T_max) log-probs of the rows' tokens under the
            sampling policy, aligned with ``rows`` and padded at the end (a micro-batch uses its
            first T columns); NaN entries fall back to the on-policy value.
        groups: N group ids of the rows (e.g. :attr:`GroupBatch.group_index`); required when
            ``config.micro_batch_per_group``.

    Returns:
        Floats: ``loss``, ``policy_loss``, ``kl``, ``entropy``, ``clip_fraction``,
        ``dual_clip_fraction`` (row-weighted means over the micro-batches of the last epoch), ``grad_norm`` (the last epoch's
        gradient norm before clipping), ``n_rows``, ``n_iterations``. No rows: zeros, no step.

    Raises:
        ValueError: rows, advantages, groups or old log-probs disagree in length, ``groups``
            is missing while ``config.micro_batch_per_group``, ``old_logprobs`` is not 2-D, or
            an advantage is not finite.
    """
    rows_a = np.asarray(rows, dtype=np.int64).reshape(-1)
    adv_a = np.asarray(advantages, dtype=np.float64).reshape(-1)
    n = int(rows_a.size)
    if adv_a.size != n:
        raise ValueError(f"{n} rows but {adv_a.size} advantages")
    if not np.isfinite(adv_a).all():
        raise ValueError(f"advantages must be finite; rows {np.flatnonzero(~np.isfinite(adv_a)).tolist()[:10]} are not")
    groups_a = None
    if groups is not None:
        groups_a = np.asarray(groups, dtype=np.int64).reshape(-1)
        if groups_a.size != n:
            raise ValueError(f"{n} rows but {groups_a.size} group ids")
    elif config.micro_batch_per_group:
        raise ValueError("micro_batch_per_group needs the rows' group ids (groups=)")
    old_t = None
    if old_logprobs is not None:
        old_t = torch.as_tensor(old_logprobs)
        if old_t.ndim != 2 or old_t.shape[0] != n:
            raise ValueError(f"old_logprobs must have shape ({n}, T), got {tuple(old_t.shape)}")
    stats = {k: 0.0 for k in _STAT_KEYS}
    stats.update(grad_norm=0.0, n_rows=float(n), n_iterations=float(config.num_iterations))
    if n == 0:
        return stats
    chunks = _micro_batches(n, groups_a, config)
    params = list(policy.trainable_parameters())
    first_old: list[torch.Tensor | None] = [None] * len(chunks)
    refs: list[torch.Tensor | None] = [None] * len(chunks)
    for epoch in range(config.num_iterations):
        stats.update({k: 0.0 for k in _STAT_KEYS})
        optimizer.zero_grad(set_to_none=True)
        for k, sl in enumerate(chunks):
            r = rows_a[sl]
            if config.kl_coef > 0 and refs[k] is None:
                refs[k] = policy.grpo_logprobs(samples, r, reference=True)[0].detach()
            lp, mask, ent = policy.grpo_logprobs(samples, r, with_entropy=config.entropy_coef > 0)
            if epoch == 0:
                cur = lp.detach()
                if old_t is not None:
                    rec = old_t[sl, : lp.shape[1]].to(lp.device)
                    cur = torch.where(torch.isnan(rec), cur, rec) if bool(torch.isnan(rec).any()) else rec
                first_old[k] = cur
            old = first_old[k]
            ref = refs[k] if config.kl_coef > 0 else lp.detach()
            adv = torch.as_tensor(adv_a[sl], dtype=lp.dtype, device=lp.device)
            out = grpo_loss(lp, old, ref, adv, mask, clip_eps=config.clip_eps, kl_coef=config.kl_coef,
                            entropy=ent, entropy_coef=config.entropy_coef, dual_clip=config.dual_clip)
            if len(chunks) == 1:
                out.loss.backward()
                for key in _STAT_KEYS:
                    stats[key] = float(getattr(out, key).detach())
            else:
                (out.loss * len(r) / n).backward()
                for key in _STAT_KEYS:
                    stats[key] += float(getattr(out, key).detach()) * len(r) / n
        stats["grad_norm"] = _grad_norm(params, config.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return stats


def group_gradient_moments(
    policy: GRPOPolicy,
    samples: Any,
    rows: Sequence[int] | np.ndarray,
    advantages: Sequence[float] | np.ndarray,
    groups: Sequence[int] | np.ndarray,
    n_groups: int,
) -> tuple[float, float, int]:
    """The moments of a step's per-group policy gradients that the gradient noise scale needs.

    Group ``j``'s gradient is that of the on-policy surrogate restricted to its rows,
    ``g_j = ∇ Σ_{i∈j} A_i · mean_t log π(y_{i,t})`` (the per-sequence token mean of
    :func:`grpo_loss`, ratio 1, no KL), taken at the current parameters with one backward pass per
    group; the parameters' ``.grad`` are not touched. Groups without rows (no policy signal)
    count as ``g_j = 0``. Feed the result to
    :meth:`wmrl_envs.core.GradientNoiseScale.add_step` (``docs/method.md``, "Choosing the anchor
    fraction"). Costs about one extra update per step: an option, not part of :func:`grpo_step`.

    Args:
        policy: a :class:`GRPOPolicy`.
        samples: the policy's samples (passed to ``policy.grpo_logprobs``).
        rows: N row indices into ``samples`` (e.g. :attr:`GroupBatch.row_index`).
        advantages: N advantages of real-execution scores, one per row.
        groups: N group ids in ``[0, n_groups)`` (e.g. :attr:`GroupBatch.group_index`).
        n_groups: the step's groups, those without rows included (>= 2).

    Returns:
        ``(mean_j |g_j|², |mean_j g_j|², n_groups)``, floats in squared gradient units.

    Raises:
        ValueError: lengths disagree, rows or group ids not integers, a negative row, ``n_groups``
            not an integer >= 2, a group id outside ``[0, n_groups)``, or an advantage not finite.
    """
    def ints(x: Any, name: str) -> np.ndarray:
        a = np.asarray(x).reshape(-1)
        if a.size and not (np.issubdtype(a.dtype, np.integer) and a.dtype != np.bool_):
            raise ValueError(f"{name} must be integers, got dtype {a.dtype}")
        return a.astype(np.int64)

    rows_a, grp_a = ints(rows, "rows"), ints(groups, "groups")
    adv_a = np.asarray(advantages, dtype=np.float64).reshape(-1)
    if not rows_a.size == adv_a.size == grp_a.size:
        raise ValueError(f"{rows_a.size} rows, {adv_a.size} advantages and {grp_a.size} group ids must agree")
    if isinstance(n_groups, bool) or not isinstance(n_groups, numbers.Integral) or n_groups < 2:
        raise ValueError(f"n_groups must be an integer >= 2, got {n_groups!r}")
    if rows_a.size and rows_a.min() < 0:
        raise ValueError(f"rows must be >= 0 (indices into the samples), got {int(rows_a.min())}")
    if not np.isfinite(adv_a).all():
        raise ValueError("advantages must be finite")
    if grp_a.size and (grp_a.min() < 0 or grp_a.max() >= n_groups):
        raise ValueError(f"group ids must lie in [0, {n_groups}), got {int(grp_a.min())}..{int(grp_a.max())}")
    params = [p for p in policy.trainable_parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in params]
    sq_sum = 0.0
    for j in np.unique(grp_a):
        sel = grp_a == j
        lp, mask, _ = policy.grpo_logprobs(samples, rows_a[sel])
        m = mask.to(lp.dtype)
        per_seq = (lp * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)
        obj = (torch.as_tensor(adv_a[sel], dtype=lp.dtype, device=lp.device) * per_seq).sum()
        grads = torch.autograd.grad(obj, params, allow_unused=True)
        for t, g in zip(total, grads):
            if g is not None:
                t.add_(g.detach())
                sq_sum += float(g.detach().double().pow(2).sum())
    n = int(n_groups)
    mean_sq = float(sum(float(t.double().pow(2).sum()) for t in total)) / (n * n)
    return sq_sum / n, mean_sq, n


def group_batch(
    group_rewards: Sequence[Sequence[float | None]], group_weights: Sequence[float] | None, config: GRPOUpdateConfig
) -> GroupBatch:
    """:func:`build_advantages` with the step's settings (``config.scale``, ``config.drop_zero_advantage``);
    ``group_weights=None`` weighs every group 1.

    Rows with a zero advantage (a flat group, or a rollout at its group's mean) are dropped only
    when they carry no term of the loss: with ``config.kl_coef > 0`` or ``config.entropy_coef >
    0`` every graded row of every group used stays, so the KL to the reference (and the entropy
    bonus) reach all the step's sampled rows and the loss is their mean, as GRPO's objective
    (Shao et al., 2024: the mean over a group's G outputs of surrogate − β·KL) defines it; a step
    whose groups are all flat still applies the KL. With both at 0 (the default: no KL, as DAPO)
    dropping them changes only which rows the mean is over (``docs/method.md``, "GRPO").

    Raises:
        ValueError: as :func:`build_advantages`.
    """
    weights = [1.0] * len(group_rewards) if group_weights is None else list(group_weights)
    drop = config.drop_zero_advantage and config.kl_coef == 0 and config.entropy_coef == 0
    return build_advantages(group_rewards, weights, scale=config.scale, drop_zero_advantage=drop)


def turn_rows(batch: GroupBatch, turn_episode: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An episode's advantage spread over its turn rows (multi-turn episodes, chunked VLA episodes).

    ``batch`` holds one row per *episode* (flat index group × G + j, :func:`group_batch`); the
    samples hold one row per *turn*, and ``turn_episode[r]`` is the flat episode index of turn row
    ``r``. Every turn of a kept episode gets the episode's (ρ-weighted) advantage and group id; the
    turns of a dropped episode (ungraded, zero advantage, skipped group) are left out.

    Returns:
        ``(rows, advantages, groups)``: int64 (M,) turn rows, float64 (M,) advantages, int64 (M,)
        group ids, in turn-row order.
    """
    adv_of = dict(zip(batch.row_index.tolist(), batch.advantages.tolist()))
    group_of = dict(zip(batch.row_index.tolist(), batch.group_index.tolist()))
    episodes = np.asarray(turn_episode, dtype=np.int64).reshape(-1).tolist()
    rows = [r for r, e in enumerate(episodes) if e in adv_of]
    return (np.asarray(rows, dtype=np.int64), np.asarray([adv_of[episodes[r]] for r in rows], dtype=np.float64),
            np.asarray([group_of[episodes[r]] for r in rows], dtype=np.int64))


def group_step(
    policy: GRPOPolicy,
    optimizer: torch.optim.Optimizer,
    samples: Any,
    batch: GroupBatch,
    *,
    config: GRPOUpdateConfig,
    turn_episode: Sequence[int] | np.ndarray | None = None,
    old_logprobs: torch.Tensor | np.ndarray | None = None,
) -> dict[str, float]:
    """The one GRPO group step every loop takes: :func:`grpo_step` on the rows ``batch`` keeps.

    Without ``turn_episode`` a row of ``samples`` is a rollout (row g·G + j: rollout j of group g);
    with it a row is a turn of the episode ``turn_episode[row]`` (:func:`turn_rows`). A step whose
    batch keeps no row changes nothing (no optimiser step).

    Args:
        policy: a :class:`GRPOPolicy`.
        optimizer: optimiser over ``policy.trainable_parameters()``.
        samples: the policy's samples (rollout rows, or turn rows with ``turn_episode``).
        batch: the step's advantages (:func:`group_batch`).
        config: the settings.
        turn_episode: int (R,) the episode of each turn row, or None.
        old_logprobs: optional float (R, T_max) log-probs recorded at sampling for every row of
            ``samples`` (kept rows are selected here); see :func:`grpo_step`.

    Returns:
        :func:`grpo_step`'s floats plus ``n_groups_used``, ``n_groups_skipped``, ``n_ungraded``
        (episodes).

    Raises:
        ValueError: ``old_logprobs`` does not have one row per sample row, or :func:`grpo_step`'s errors.
    """
    if turn_episode is None:
        rows, advantages, groups = batch.row_index, batch.advantages, batch.group_index
    else:
        rows, advantages, groups = turn_rows(batch, turn_episode)
    old = None
    if old_logprobs is not None:
        old_all = torch.as_tensor(old_logprobs)
        n_rows = len(samples) if hasattr(samples, "__len__") else old_all.shape[0]
        if old_all.ndim != 2 or old_all.shape[0] != n_rows:
            raise ValueError(f"old_logprobs must have shape ({n_rows}, T), got {tuple(old_all.shape)}")
        old = old_all[torch.as_tensor(rows)]
    stats = grpo_step(policy, optimizer, samples, rows, advantages, config=config, old_logprobs=old, groups=groups)
    stats.update(n_groups_used=float(batch.n_groups_used), n_groups_skipped=float(batch.n_groups_skipped),
                 n_ungraded=float(batch.n_ungraded))
    return stats


def grpo_update(
    policy: GRPOPolicy,
    optimizer: torch.optim.Optimizer,
    samples: Any,
    group_rewards: Sequence[Sequence[float | None]],
    group_weights: Sequence[float] | None,
    *,
    config: GRPOUpdateConfig,
    old_logprobs: torch.Tensor | np.ndarray | None = None,
) -> dict[str, float]:
    """The GRPO update of one step: :func:`group_batch`, then :func:`group_step` on the kept rows.

    Advantages are group-relative (``config.scale``), ρ-weighted per group, computed over the
    graded rows only: ungraded rows never enter the loss, groups with fewer than 2 graded rows
    are skipped.

    Args:
        policy: a :class:`GRPOPolicy`.
        optimizer: optimiser over ``policy.trainable_parameters()``.
        samples: the policy's samples, rows laid out group after group (if ``samples`` has a
            ``len``, it is the number of rows).
        group_rewards: per group, its rewards (``None`` = ungraded).
        group_weights: per group, the advantage weight (ρ on anchor groups); ``None`` = all 1.
        config: the settings.
        old_logprobs: optional float (N_total, T_max) log-probs recorded at sampling for every
            row of ``samples`` (kept rows are selected here); see :func:`grpo_step`.

    Returns:
        :func:`grpo_step`'s floats plus ``n_groups_used``, ``n_groups_skipped``,
        ``n_ungraded``.

    Raises:
        ValueError: the rewards do not cover ``len(samples)`` rows, the weights are not one per
            group, or :func:`grpo_step`'s errors.
    """
    n_total = sum(len(g) for g in group_rewards)
    if hasattr(samples, "__len__") and len(samples) != n_total:
        raise ValueError(f"rewards cover {n_total} rows but the samples have {len(samples)}")
    batch = group_batch(group_rewards, group_weights, config)
    return group_step(policy, optimizer, samples, batch, config=config, old_logprobs=old_logprobs)
