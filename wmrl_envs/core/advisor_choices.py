"""Every choice a user has, priced by one model: real GRPO at smaller batches, WMRL at each anchor
fraction, world model only (``docs/method.md``, "Choosing the anchor fraction", "Every choice").

:func:`price_choices` predicts, for each choice, the compute to the same training progress as
real-execution GRPO at the user's batch (as a speedup over it) with the model of
:mod:`wmrl_envs.core.advisor_model`: the cost per step from the per-rollout costs, the steps from
the batch's worth in real groups ``q`` and the gradient noise scale (:func:`steps_ratio`). A real
batch of ``B'`` of the user's ``B`` groups is worth ``q = B'/B``; WMRL at fraction ``f`` is worth
``q = f + (1 − f) r²``; world model only ``q = r²``. :func:`recommend` picks the cheapest choice
that keeps anchors (world model only is priced, never recommended: its prediction ignores bias,
which only anchors can watch) and says it in words a user acts on. :func:`with_fitting` counts a
one-time cost of the world model (its fitting on logged executions) against real GRPO's compute to
the target, which per-rollout prices leave out.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from .advisor_model import CostRates, check_noise_batch_ratio, check_step_law, steps_ratio

__all__ = ["Choice", "DEFAULT_FRACTIONS", "UNKNOWN_BATCH_FLOOR", "fitting_share", "groups_text", "maybe_group_words",
           "preferred_half_r", "price_choices", "real_batches", "recommend", "with_fitting"]

DEFAULT_FRACTIONS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
"""WMRL's anchor fractions priced by default (those outside the advisor's [f_min, f_max] are left out)."""


@dataclass(frozen=True)
class Choice:
    """One way to train, priced against real-execution GRPO at the user's batch.

    Attributes:
        kind: ``"real"`` (real execution, no world model), ``"wmrl"`` or ``"world_model_only"``.
        share: real: the groups per step as a share of the user's (1 = the user's batch); wmrl:
            the anchor fraction; world model only: 0.
        groups_per_step: real: its groups per step (``None`` when the user's batch is not known);
            wmrl and world model only: the user's (or ``None``).
        predicted_speedup: real GRPO-at-the-user's-batch compute to the target over this choice's
            (> 1: cheaper), the point prediction from ``r``.
        ci: its 95% interval from the bootstrap replicates of ``r`` (NaN without them; a real
            batch does not depend on r: its interval is the point).
        steps_factor: this choice's steps to the target over real GRPO's at the user's batch (the
            wall-clock side: fewer groups per step need more, sequential, steps).
        words: what to do, in one phrase ("train on real execution with 2 groups per step").
        b_range: without a measured noise scale, the prediction from ``b = ∞`` (every step
            noise-limited: :attr:`predicted_speedup`) to ``b = 0`` (far above the noise scale; a real
            batch's full ``1 / share``); NaN when ``b`` was given.
    """

    kind: str
    share: float
    groups_per_step: int | None
    predicted_speedup: float
    ci: tuple[float, float]
    steps_factor: float
    words: str
    b_range: tuple[float, float] = (float("nan"), float("nan"))

    def to_dict(self) -> dict:
        """JSON-serialisable."""
        d = asdict(self)
        d["ci"] = list(self.ci)
        d["b_range"] = list(self.b_range)
        return d


def groups_text(n: int) -> str:
    """``"1 group"``, ``"2 groups"``."""
    return f"{n} group{'' if n == 1 else 's'}"


UNKNOWN_BATCH_FLOOR = 1 / 16
"""The smallest share of a batch of unknown groups per step that :func:`real_batches` prices."""


def maybe_group_words(c: Choice) -> str:
    """``c.words``, flagged ``"(if at least one group)"`` for a real batch priced as a share under 1 of a
    batch whose groups per step are unknown (it may be under one group, and then cannot be run)."""
    if c.kind == "real" and c.groups_per_step is None and c.share < 1.0:
        return c.words + " (if at least one group)"
    return c.words


def real_batches(groups_per_step: int | None, f_min: float) -> list[tuple[float, int | None]]:
    """The real batches priced: from the anchor batch (``max(1, round(f_min × B))`` groups) up to the
    user's ``B``, by halving from ``B``; without ``B`` the shares 1, 1/2, 1/4, ... down to
    ``max(f_min, 1/16)`` (:data:`UNKNOWN_BATCH_FLOOR`): a share of a batch whose size is unknown may be
    under one group, and the smaller the share the likelier, so the shares stop at 1/16 whatever
    ``f_min`` (``f_min = 0`` would otherwise price shares of ever smaller fractions of a group).

    Returns:
        ``[(share, groups or None), ...]``, largest first.

    Raises:
        ValueError: ``groups_per_step`` not an integer >= 1 (or ``None``), ``f_min`` outside (0, 1].
    """
    if not (isinstance(f_min, numbers.Real) and not isinstance(f_min, bool) and 0 <= f_min <= 1):
        raise ValueError(f"f_min must be in [0, 1] to bound the smallest real batch, got {f_min!r}")
    if groups_per_step is None:
        out, s = [], 1.0
        while s >= max(f_min, UNKNOWN_BATCH_FLOOR) * (1 - 1e-9):
            out.append((s, None))
            s /= 2
        return out
    if isinstance(groups_per_step, bool) or not isinstance(groups_per_step, numbers.Integral) or groups_per_step < 1:
        raise ValueError(f"groups_per_step must be an integer >= 1 (the groups per step of the run you plan), "
                         f"got {groups_per_step!r}")
    groups_per_step = int(groups_per_step)
    lo = max(1, int(round(f_min * groups_per_step)))
    sizes, b = {groups_per_step, lo}, groups_per_step
    while b > lo:
        sizes.add(b)
        b //= 2
    return [(s / groups_per_step, s) for s in sorted((s for s in sizes if s >= lo), reverse=True)]


def _wmrl_speedup(f: float, r: float, costs: CostRates, b: float | None, step_law: str) -> float:
    r2 = max(0.0, r) ** 2
    q = f + (1.0 - f) * r2
    per = costs.other_s + costs.world_model_s + f * costs.execution_s
    st = steps_ratio(q, b, step_law)
    if st <= 0:
        return 0.0
    return float("inf") if per <= 0 else (costs.other_s + costs.execution_s) / per * st


def price_choices(r: float, costs: CostRates, noise_batch_ratio: float | None = None, *,
                  groups_per_step: int | None = None, fractions: Sequence[float] = DEFAULT_FRACTIONS,
                  f_min: float = 0.05, f_max: float = 1.0, r_replicates: Sequence[float] = (),
                  step_law: str = "adam") -> list[Choice]:
    """Price every choice (see the module docstring) for a world model of within-group correlation ``r``.

    Args:
        r: pooled within-group correlation of calibrated world-model and real scores, in [-1, 1]
            (``r <= 0`` counts as 0).
        costs: per-rollout costs.
        noise_batch_ratio: ``b = B_noise / B`` at the user's batch ``B`` (:class:`GradientNoiseScale`);
            ``None``: ``∞`` (every step noise-limited: the end of the range that favours smaller
            batches most).
        groups_per_step: the user's ``B`` (``None``: real batches as shares of it).
        fractions: WMRL's anchor fractions (clipped to ``[f_min, f_max]``, duplicates dropped).
        f_min, f_max: the advisor's bounds (``f_min`` also bounds the smallest real batch).
        r_replicates: bootstrap replicates of ``r`` for the intervals (empty: NaN intervals).
        step_law: the optimiser's step law (:data:`~wmrl_envs.core.advisor_model.STEP_LAWS`).

    Returns:
        The choices: real batches (largest first), WMRL fractions (smallest first), world model only.

    Raises:
        TypeError: ``costs`` not a :class:`CostRates`, a bound not a number. ValueError: ``r`` not a
            finite correlation, a bad ``noise_batch_ratio``, ``step_law``, ``groups_per_step`` or
            bound, a non-finite fraction, a replicate outside [-1, 1].
    """
    if not (isinstance(r, numbers.Real) and not isinstance(r, bool) and math.isfinite(r) and -1.0 <= r <= 1.0):
        raise ValueError(f"r must be a correlation in [-1, 1], got {r!r}")
    if not isinstance(costs, CostRates):
        raise TypeError(f"costs must be a CostRates (e.g. CostRates.from_ledger(ledger)), got {type(costs).__name__}")
    for name, v in (("f_min", f_min), ("f_max", f_max)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{name} must be a number in [0, 1], got {v!r}")
    if not (0.0 <= f_min <= f_max <= 1.0):
        raise ValueError(f"need 0 <= f_min <= f_max <= 1, got f_min={f_min!r}, f_max={f_max!r}")
    bad = [x for x in fractions if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x)]
    if bad:
        raise ValueError(f"fractions must be finite numbers (anchor fractions), got {bad[0]!r}")
    bad = [x for x in r_replicates
           if isinstance(x, bool) or not isinstance(x, numbers.Real) or (math.isfinite(x) and not -1.0 <= x <= 1.0)]
    if bad:
        raise ValueError(f"r_replicates must be correlations in [-1, 1] (NaN: a replicate without one), got {bad[0]!r}")
    b = check_noise_batch_ratio(noise_batch_ratio)
    check_step_law(step_law)
    reps = np.array([x for x in r_replicates if math.isfinite(x)], dtype=float)
    nan2 = (float("nan"), float("nan"))

    def interval(fn) -> tuple[float, float]:
        if reps.size < 2:
            return nan2
        vals = np.array([fn(float(x)) for x in reps])
        return _percentile_ci(vals)

    out: list[Choice] = []
    unmeasured = math.isinf(b)

    def b_range(fn) -> tuple[float, float]:  # b = inf (the point) to b = 0, when b is not measured
        return (fn(math.inf), fn(0.0)) if unmeasured else nan2

    for share, g in real_batches(groups_per_step, max(f_min, 1e-6)):
        st = steps_ratio(share, b, step_law)
        s = st / share
        if share == 1.0:
            words = "train on real execution at your batch" + (f" ({groups_text(g)} per step)" if g else "")
        else:
            words = (f"train on real execution with {groups_text(g)} per step" if g is not None
                     else f"train on real execution with {share:.0%} of your groups per step")
        out.append(Choice("real", share, g, s, (s, s), 1.0 / st if st > 0 else math.inf, words,
                          b_range(lambda bb, share=share: steps_ratio(share, bb, step_law) / share)))
    seen = set()
    for f in sorted(min(f_max, max(f_min, float(x))) for x in fractions):
        if f in seen or f <= 0:
            continue
        seen.add(f)
        s = _wmrl_speedup(f, r, costs, b, step_law)
        q = f + (1 - f) * max(0.0, r) ** 2
        st = steps_ratio(q, b, step_law)
        out.append(Choice("wmrl", f, groups_per_step, s, interval(lambda x, f=f: _wmrl_speedup(f, x, costs, b, step_law)),
                          1.0 / st if st > 0 else math.inf, f"use WMRL at anchor fraction {f:g}",
                          b_range(lambda bb, f=f: _wmrl_speedup(f, r, costs, bb, step_law))))
    s0 = _wmrl_speedup(0.0, r, costs, b, step_law)
    st0 = steps_ratio(max(0.0, r) ** 2, b, step_law)
    out.append(Choice("world_model_only", 0.0, groups_per_step, s0,
                      interval(lambda x: _wmrl_speedup(0.0, x, costs, b, step_law)),
                      1.0 / st0 if st0 > 0 else math.inf,
                      "train on the world model alone (no anchors: nothing corrects or watches its bias)",
                      b_range(lambda bb: _wmrl_speedup(0.0, r, costs, bb, step_law))))
    return out


def _percentile_ci(vals: np.ndarray) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of ``vals``; an infinite value (a free world model at r = 1)
    gives an infinite end, not NaN and a RuntimeWarning (``inf - inf`` in the interpolation)."""
    if np.all(np.isfinite(vals)):
        return tuple(float(v) for v in np.percentile(vals, [2.5, 97.5]))  # type: ignore[return-value]
    srt = np.sort(vals)
    with np.errstate(invalid="ignore"):
        out = np.percentile(srt, [2.5, 97.5])
    return tuple(float(v) if not math.isnan(v) else float(srt[min(len(srt) - 1, math.ceil(q * (len(srt) - 1)))])
                 for v, q in zip(out, (0.025, 0.975)))  # type: ignore[return-value]


def fitting_share(fit_executions: int, real_steps: int, groups_per_step: int, group_size: int,
                  costs: CostRates) -> float:
    """A world model's one-time fitting cost over real GRPO's compute to the target at the user's batch.

    ``φ = N·c_exec / (S·B·G·(c_exec + c_other))`` for a world model fitted on ``N`` real executions
    (priced at the pilot's cost per execution) and real GRPO that reaches the target in ``S`` steps
    of ``B`` groups of ``G`` rollouts (``group_size``: the planned run's G, which ``wmrl advise``
    takes from ``--run-group-size``, default the pilot's). The execution's cost cancels up to ``c_other``, so ``φ`` is
    close to ``N / (S·B·G)`` whatever the pilot's programs cost (a pilot's untrained policy fails
    often, and failures execute cheaply).

    Raises:
        ValueError: ``fit_executions`` < 0 or a count < 1 (each named).
    """
    for name, v, lo in (("fit_executions", fit_executions, 0), ("real_steps", real_steps, 1),
                        ("groups_per_step", groups_per_step, 1), ("group_size", group_size, 1)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    fit_executions, real_steps, groups_per_step, group_size = (
        int(fit_executions), int(real_steps), int(groups_per_step), int(group_size))
    per_rollout = costs.execution_s + costs.other_s
    if per_rollout <= 0:
        return 0.0 if fit_executions == 0 else math.inf
    return fit_executions * costs.execution_s / (real_steps * groups_per_step * group_size * per_rollout)


def with_fitting(choices: Sequence[Choice], share: float) -> list[Choice]:
    """``choices`` with the world model's one-time cost counted: each WMRL and world-model-only
    speedup ``s`` (and its interval) becomes ``1 / (1/s + φ)``, ``φ`` = :func:`fitting_share` (the
    compute to the target is real GRPO's over ``s`` plus the fitting); real batches pay none.

    Raises:
        ValueError: ``share`` negative or not a number.
    """
    if not (isinstance(share, (int, float)) and not isinstance(share, bool) and share >= 0 and not math.isnan(share)):
        raise ValueError(f"the fitting's share of real GRPO's compute must be a number >= 0, got {share!r}")

    def total(s: float) -> float:
        if math.isnan(s):
            return s
        if s <= 0:
            return 0.0
        return 1.0 / (1.0 / s + share) if share < math.inf else 0.0

    out = []
    for c in choices:
        if c.kind == "real" or share == 0:
            out.append(c)
        else:
            out.append(Choice(c.kind, c.share, c.groups_per_step, total(c.predicted_speedup),
                              (total(c.ci[0]), total(c.ci[1])), c.steps_factor, c.words,
                              (total(c.b_range[0]), total(c.b_range[1]))))
    return out


def recommend(choices: Sequence[Choice], *, wmrl_eligible: bool = True) -> tuple[Choice, list[Choice], str]:
    """The cheapest choice that keeps anchors (real or WMRL), the choices as good within the data's
    uncertainty, and one sentence a user acts on.

    "As good within the interval": a choice whose interval reaches the best's point, or whose point
    lies inside the best's interval (so a real batch, whose interval is its point, counts when the
    best WMRL choice's interval reaches it). The sentence names up to 3 of them and says how many
    more there are; the list returned holds them all. A share of a batch whose groups per step are
    unknown is named with "(if at least one group)" (:func:`maybe_group_words`).

    The sentence for the user's own batch says nothing priced is cheaper (no real batch priced is
    cheaper, when a choice left out, WMRL without signal, is priced cheaper); for a real batch priced as
    a share of a batch whose groups per step are unknown (so possibly under one group), it does not
    recommend the share: it says to pass ``--groups-per-step`` to price real batches of whole groups.

    Args:
        choices: :func:`price_choices`' (or :func:`with_fitting`'s) choices.
        wmrl_eligible: ``False``: only real batches may be recommended (a pilot that has not shown
            the world model carries signal, :meth:`AnchorAdvisor.advise`); WMRL choices are then
            never listed as as good either.

    Raises:
        ValueError: no eligible choice among ``choices``.
    """
    kinds = ("real", "wmrl") if wmrl_eligible else ("real",)
    eligible = [c for c in choices if c.kind in kinds and math.isfinite(c.predicted_speedup)]
    if not eligible:
        raise ValueError("no real-execution or WMRL choice to recommend: price them with price_choices first")
    best = max(eligible, key=lambda c: (c.predicted_speedup, -c.steps_factor))
    lo, hi = best.ci
    has_ci = math.isfinite(lo) and math.isfinite(hi) and lo != hi
    close = [c for c in eligible if c is not best
             and ((math.isfinite(c.ci[1]) and c.ci[1] >= best.predicted_speedup)
                  or (has_ci and lo <= c.predicted_speedup <= hi))]
    ci_txt = f" [{lo:.2f}, {hi:.2f}]" if has_ci else ""
    if best.kind == "real" and best.share == 1.0:  # the user's own batch: nothing to compare it with
        cheaper_excluded = any(c.kind not in kinds and c.predicted_speedup > best.predicted_speedup for c in choices)
        text = f"{best.words}: " + ("no real batch priced is predicted cheaper" if cheaper_excluded
                                    else "nothing priced is predicted cheaper")
    elif best.kind == "real" and best.groups_per_step is None:  # a share of an unknown batch: maybe under one group
        text = (f"a smaller real batch is predicted cheaper ({best.words.removeprefix('train on ')}: "
                f"{best.predicted_speedup:.2f}x less compute than real execution at your batch, in "
                f"{best.steps_factor:.2f}x its steps, if that is at least one group): pass --groups-per-step to price "
                "real batches of whole groups")
    else:
        text = (f"{best.words}: predicted {best.predicted_speedup:.2f}x{ci_txt} less compute to the same progress than "
                f"real execution at your batch, in {best.steps_factor:.2f}x its steps")
    if close:
        text += "; as good within the interval: " + ", ".join(maybe_group_words(c) for c in close[:3])
        if len(close) > 3:
            text += f" and {len(close) - 3} more"
    return best, close, text


def preferred_half_r(world_model: Sequence[Sequence[float | None]], real: Sequence[Sequence[float | None]]) -> float:
    """The pooled within-group correlation among the rollouts the world model prefers: in each
    group, those whose (calibrated) world-model score is at or above the group's median (groups
    with fewer than 2 such rollouts left out).

    Training moves the policy towards what the world model rates high; where the world model's
    error is a bias per action, those are the actions it over-rates, and a pilot under the
    untrained policy sees them no more than others. This r is what the pilot says about the
    actions training will favour: how far training's r can drift below the pilot's
    (``docs/method.md``, "Training's r, not the pilot's").

    Args:
        world_model, real: per group, calibrated world-model and real scores (``None`` = missing).

    Returns:
        The correlation (NaN without within-group spread on the preferred half).
    """
    from .advisor_model import is_finite_number, pooled_within_group_correlation

    wm_out, real_out = [], []
    for w, y in zip(world_model, real):
        both = [(float(a), float(b)) for a, b in zip(w, y) if is_finite_number(a) and is_finite_number(b)]
        if len(both) < 3:
            continue
        med = float(np.median([a for a, _ in both]))
        keep = [(a, b) for a, b in both if a >= med]
        if len(keep) >= 2:
            wm_out.append([a for a, _ in keep])
            real_out.append([b for _, b in keep])
    return pooled_within_group_correlation(wm_out, real_out)[0] if wm_out else float("nan")
