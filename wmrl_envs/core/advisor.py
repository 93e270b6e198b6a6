"""Choosing the anchor fraction from measurements: the cost-optimal share of real executions.

Holds :class:`AnchorAdvisor`, which collects anchor groups
(world-model and real scores of the same rollouts, group by group) and answers with an
:class:`AnchorAdvice`: the within-group correlation with a bootstrap CI, the recommended anchor
fraction f*, the predicted speedup over real-execution GRPO and a plain verdict. It applies the
closed forms of :mod:`wmrl_envs.core.advisor_model` (:func:`pooled_within_group_correlation`,
:func:`optimal_anchor_fraction`, :func:`predicted_speedup`, and the per-rollout costs they take,
:class:`CostRates`, read from a :class:`~wmrl_envs.core.CostLedger`).

The prediction is GRPO-specific: a world-model group is worth ``r²`` of a real one (``r`` the
*within-group* correlation, since GRPO standardises advantages per group), so a WMRL step of
``B`` groups at anchor fraction ``f`` is worth ``q·B`` real groups with ``q = f + (1 − f) r²``;
the steps to a target follow McCandlish et al.'s gradient-noise-scale model,
``S_min (1 + B_noise / B)``, with ``B_noise / B`` measured on real-execution GRPO
(:class:`GradientNoiseScale`); the cost per step follows the ledger. f* maximises the predicted
speedup; it ignores the world model's bias, which is why a floor ``f_min`` of anchors always
remains. Cochran's double-sampling optimum (``ppi_py``'s power analysis) is the textbook form
this departs from. Derivation: ``docs/method.md``, "Choosing the anchor fraction".

``anchor_fraction="auto"`` (:class:`AdaptiveAnchorFraction`) lives in :mod:`wmrl_envs.core.adaptive`.
This module re-exports the public names of both modules, so ``wmrl_envs.core.advisor`` stays the one
import path for all of them.
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .advisor_choices import Choice, maybe_group_words, preferred_half_r, price_choices, recommend
from .advisor_model import (
    CostRates,
    GradientNoiseScale,
    Scores,
    check_noise_batch_ratio,
    crossfit_calibrated,
    flat_map_raw_r,
    is_finite_number,
    map_groups,
    optimal_anchor_fraction,
    pooled_within_group_correlation,
    predicted_speedup,
    steps_ratio,
)

__all__ = [
    "AnchorAdvice",
    "AnchorAdvisor",
    "Choice",
    "CostRates",
    "GradientNoiseScale",
    "action_key",
    "crossfit_calibrated",
    "optimal_anchor_fraction",
    "pooled_within_group_correlation",
    "predicted_speedup",
]


@dataclass(frozen=True)
class AnchorAdvice:
    """What :meth:`AnchorAdvisor.advise` answers (all figures from the anchor groups it holds).

    Attributes:
        n_groups: anchor groups with at least 2 rollouts scored both ways.
        n_pairs: anchor pairs (rollouts scored both ways).
        r: pooled within-group correlation of (calibrated) world-model and real scores.
        r_ci: its 95% bootstrap interval (percentile; groups resampled and, when the scores are
            calibrated by ``"crossfit"``, the cross-fitted map fitted again on each resample, so the
            interval includes the uncertainty of fitting the map; NaN with fewer than 2 groups).
        costs: the per-rollout costs used.
        f_star: :func:`optimal_anchor_fraction` for ``r``, γ and ``noise_batch_ratio`` (before
            ``f_min``/``f_max``).
        f_star_ci: its 95% interval (from ``r_ci``'s resamples).
        recommended_fraction: with ``use_wmrl``, the WMRL fraction recommended (the recommended
            choice's); otherwise the fraction WMRL would use, ``f_star`` clipped to [``f_min``,
            ``f_max``] (not a recommendation: :attr:`recommended_choice` is).
        predicted_speedup: :func:`predicted_speedup` at ``recommended_fraction`` for training alone
            (a model that ignores the world model's bias; without a noise scale, its noise-limited
            end; a one-time fitting cost is not in it: see :attr:`choices_with_fitting`).
        predicted_speedup_ci: its 95% interval (the same as the WMRL row of :attr:`choices` at that
            fraction: ``r``'s bootstrap replicates at a fixed fraction).
        variance_ratio: ``1 / predicted_speedup``: WMRL's compute to the target relative to
            real-execution GRPO's (< 1: WMRL is cheaper).
        use_wmrl: the verdict: ``True`` when the recommended choice (with a fitting cost counted,
            when one is given) is WMRL.
        verdict: the verdict in one sentence a user can act on.
    """

    n_groups: int
    n_pairs: int
    r: float
    r_ci: tuple[float, float]
    costs: CostRates
    f_star: float
    f_star_ci: tuple[float, float]
    recommended_fraction: float
    predicted_speedup: float
    predicted_speedup_ci: tuple[float, float]
    variance_ratio: float
    use_wmrl: bool
    verdict: str
    blind_spots: dict[str, Any] | None = None
    """:meth:`AnchorAdvisor.blind_spots`' answer (its ``"warning"`` is also in :meth:`format`)."""
    noise_batch_ratio: float | None = None
    """The ``B_noise / B`` used (``None``: not measured; the prediction is the noise-limited end)."""
    predicted_speedup_range: tuple[float, float] = (float("nan"), float("nan"))
    """The model's prediction at the recommended fraction from ``b = ∞`` (every step noise-limited)
    to ``b = 0`` (the cost ratio per step): where a measured noise scale would put it (NaN with too
    few groups)."""
    predicted_speedup_smaller_batch: float = float("nan")
    """For reference, what real-execution GRPO on ``recommended_fraction`` × the groups per step would
    give by itself, ``steps_ratio(f, b) / f`` (:func:`~wmrl_envs.core.advisor_model.steps_ratio`;
    without a noise scale its ``b = ∞`` end, ``1/sqrt(f)`` under Adam's law). The verdict does not
    use it: it compares WMRL with the real batches priced in :attr:`choices`, which start at
    ``max(1, round(f_min × B))`` whole groups, so at ``f × B`` below one group this batch, which
    cannot be run, is not among them."""
    choices: tuple[dict[str, Any], ...] = ()
    """Every choice priced by one model (:func:`~wmrl_envs.core.advisor_choices.price_choices`, as
    :meth:`Choice.to_dict` dicts): real GRPO from the anchor batch up to the user's, WMRL at each
    fraction, world model only; each with its predicted speedup over real GRPO at the user's batch,
    its 95% interval and its steps."""
    best_choice: str = ""
    """The recommended choice in words a user acts on, with its interval: the cheapest that keeps
    anchors (with a fitting cost counted when one is given), a real batch when the pilot has not
    shown signal (:attr:`wmrl_eligible`)."""
    r_preferred_half: float = float("nan")
    """r among the rollouts the world model rates in the top half of their group
    (:func:`~wmrl_envs.core.advisor_choices.preferred_half_r`): where training's r can drift to when
    the policy follows the world model (NaN when not estimable)."""
    drift_fraction: float = float("nan")
    """The clipped f* if r drifted to :attr:`r_preferred_half` (above the recommended fraction: the
    fraction that protects against that drift)."""
    predicted_speedup_drift: float = float("nan")
    """:attr:`predicted_speedup` at the recommended fraction with r at :attr:`r_preferred_half`: what
    training would give if its r drifted there, with the fitting counted when :attr:`fitting_share` is
    above 0, as the verdict (NaN when not estimable)."""
    step_law: str = "adam"
    """The optimiser's step law the predictions use (``"adam"``: Adam/AdamW at a fixed learning
    rate, steps ``∝ sqrt(1 + B_noise/B)``; ``"sgd"``: ``1 + B_noise/B``)."""
    recommended_choice: dict[str, Any] | None = None
    """The recommended choice (:meth:`Choice.to_dict`: ``kind`` ``"real"`` or ``"wmrl"``, its share,
    groups per step, speedup, interval; the fitting-counted figures when a fitting cost is given;
    ``None`` with too few groups)."""
    wmrl_eligible: bool = False
    """Whether the pilot shows the world model carries signal within groups, which a WMRL
    recommendation needs: the lower end of ``r``'s 95% interval above 0 (without an interval,
    ``r > 0``), and no flat calibration map."""
    fitting_share: float = 0.0
    """φ, the world model's one-time fitting over real GRPO's compute to the target
    (:func:`~wmrl_envs.core.advisor_choices.fitting_share`; 0: not counted)."""
    choices_with_fitting: tuple[dict[str, Any], ...] = ()
    """:attr:`choices` with the fitting counted (:func:`~wmrl_envs.core.advisor_choices.with_fitting`;
    empty when ``fitting_share`` is 0): what the verdict follows then."""
    drift_guard_fraction: float = float("nan")
    """The largest WMRL fraction priced whose predicted speedup at :attr:`r_preferred_half` still beats
    the best real batch (NaN: none, or not estimable)."""

    as_good_choices: tuple[dict[str, Any], ...] = ()
    """Every choice as good as the recommended one within the interval (:func:`~wmrl_envs.core.advisor_choices.recommend`'s
    list, all of them; :attr:`best_choice` names up to 3 and how many more)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable (NaN stays NaN)."""
        d = asdict(self)
        d["costs"]["gamma"] = self.costs.gamma
        return d

    def format(self) -> str:
        """A few lines for a terminal or a summary file."""
        c = self.costs

        def ci(t: tuple[float, float], fmt: str) -> str:
            return "no CI" if not all(math.isfinite(x) for x in t) else f"95% CI [{t[0]:{fmt}}, {t[1]:{fmt}}]"

        r_line = (f"within-group correlation r = {self.r:.3f} ({ci(self.r_ci, '.3f')})" if math.isfinite(self.r)
                  else "within-group correlation r: not estimated")
        lines = [
            f"anchor groups {self.n_groups} ({self.n_pairs} pairs); {r_line}",
            f"cost per rollout ({c.unit}): execution {c.execution_s:.4g}, world model {c.world_model_s:.4g}, "
            f"generation + update {c.other_s:.4g}; gamma = {c.gamma:.4g}",
        ]
        if not math.isfinite(self.f_star):  # too few groups: no recommendation, no prediction
            lines.append("no recommended anchor fraction and no predicted speedup: too few anchor groups (see the verdict)")
        else:
            fit = self.fitting_share > 0 and bool(self.choices_with_fitting)
            lines += [
                f"f* = {self.f_star:.3f} ({ci(self.f_star_ci, '.3f')}); "
                + (f"recommended anchor fraction {self.recommended_fraction:.3f}" if self.use_wmrl
                   else f"WMRL's fraction {self.recommended_fraction:.3f} (WMRL not recommended: see the verdict)"),
                f"predicted speedup of WMRL at {self.recommended_fraction:.3f} over real-execution GRPO"
                + (", training only (the world model's fitting not counted)" if fit else "")
                + f" {_speedup_text(self.predicted_speedup)} ({ci(self.predicted_speedup_ci, '.2f')}; "
                + (f"gradient noise scale / batch b = {self.noise_batch_ratio:.3g})" if self.noise_batch_ratio is not None
                   else f"noise scale not measured: {_speedup_text(self.predicted_speedup_range[0])} if every step is "
                        f"noise-limited, up to {_speedup_text(self.predicted_speedup_range[1])} if the batch is far "
                        "above the noise scale)"),
                "  a model, not a bound: it ignores the world model's bias (optimistic where bias survives the "
                "calibration; docs/advisor_check.md)",
            ]
            if self.choices:
                lines.append("every choice, predicted speedup over real execution at your batch [95% CI] (steps x)"
                             + (", training only (the fitting not counted):" if fit else ":"))
                lines += [_choice_line(c) for c in self.choices]
                if self.noise_batch_ratio is None:
                    lines.append("  (noise scale not measured: each figure assumes every step noise-limited, b = inf; "
                                 "'b = 0:' is the other end)")
            if fit:
                lines.append(f"counting the world model's fitting ({self.fitting_share:.0%} of real GRPO's compute to "
                             "the target), in total:")
                lines += [_choice_line(c) for c in self.choices_with_fitting if c["kind"] != "real"]
                lines.append("  (real batches pay no fitting: as above)")
            if self.choices:
                lines.append(f"best choice{' with the fitting counted' if fit else ''}: {self.best_choice}")
            drift = self._drift_line() if math.isfinite(self.r_preferred_half) else None
            if drift:
                lines.append(drift)
        return "\n".join(lines + [f"verdict: {self.verdict}"] + ([f"WARNING: {self.blind_spots['warning']}"] if self.blind_spots and self.blind_spots.get("warning") else []))

    def _drift_line(self) -> str | None:
        """The drift: r among the rollouts the world model prefers, in the direction it moved (``None``
        when the difference rounds away: under 0.01)."""
        if abs(self.r_preferred_half - self.r) < 0.01:
            return None
        head = (f"drift: among the rollouts the world model prefers (top half of each group) r = "
                f"{self.r_preferred_half:.2f} against {self.r:.2f} over all")
        if self.r_preferred_half >= self.r and self.r_preferred_half <= 0:  # higher, but no signal either
            return (head + "; the world model ranks the rollouts training would move the policy towards no better than "
                    "chance either")
        if self.r_preferred_half >= self.r:
            return (head + "; the rollouts training moves the policy towards are ranked at least as well, so the pilot "
                    "shows no sign that training's r drifts below its own (a per-action bias would show there)")
        fit = self.fitting_share > 0 and bool(self.choices_with_fitting)
        rec = self.recommended_fraction
        head += (f"; training moves the policy there, so its r can drift down that far (further for a per-action "
                 f"bias); at that r the predicted speedup at {rec:.3f} is {_speedup_text(self.predicted_speedup_drift)}"
                 + (" with the world model's fitting counted" if fit else ""))
        if not self.use_wmrl:
            return head
        reals = [c for c in self.choices if c["kind"] == "real"]
        best_real = max(reals, key=lambda c: (c["predicted_speedup"], -c["steps_factor"])) if reals else None
        guard = self.drift_guard_fraction
        if best_real is not None and self.predicted_speedup_drift <= best_real["predicted_speedup"]:
            real_words = best_real["words"].removeprefix("train on ")
            head += (f"; at that r {real_words} is predicted cheaper ({_speedup_text(best_real['predicted_speedup'])})")
            if math.isfinite(guard) and guard > rec + 1e-12:
                return (head + f": to guard against the drift, an anchor fraction up to {guard:g} still beats it at "
                        "that r, or train with --anchor-fraction auto, which follows the run's own r")
            return (head + ": if the run's own r (auto, the summary) falls there, switch to it, or train with "
                    "--anchor-fraction auto, which follows the run's own r")
        if self.drift_fraction > rec + 1e-12:
            return (head + f" and the model's fraction {self.drift_fraction:.3f}: if the run's own r (auto, the "
                    f"summary) falls there, raise the fraction to {self.drift_fraction:.3f}")
        stays = (f"the model's fraction at that r is {self.drift_fraction:.3f}, not above {rec:.3f}"
                 if self.drift_fraction < rec - 1e-12 else f"the model's fraction stays {rec:.3f}")
        if math.isfinite(guard) and guard > rec + 1e-12:
            return (head + f"; {stays} (it has no term for a bias): to guard against the drift, up to {guard:g} still "
                    "beats the best real batch at that r, or train with --anchor-fraction auto, which follows the run's "
                    "own r")
        return (head + f"; {stays} and it cannot name a larger one that still beats the best real batch at that r (it "
                "has no term for a bias): train with --anchor-fraction auto, which follows the run's own r")


def _constant_within_groups(world_model: Sequence[Scores], real: Sequence[Scores]) -> bool:
    """Whether the world-model scores never vary within a group (over the rollouts scored both ways)
    while the real scores vary in at least 2 groups (one could be chance)."""
    wm_spread, real_spread = False, 0
    for w, x in zip(world_model, real):
        both = [(a, b) for a, b in zip(w, x) if is_finite_number(a) and is_finite_number(b)]
        if len(both) >= 2:
            wm_spread |= max(a for a, _ in both) - min(a for a, _ in both) > 1e-12
            real_spread += max(b for _, b in both) - min(b for _, b in both) > 1e-12
    return real_spread >= 2 and not wm_spread


def _choice_line(c: Mapping[str, Any]) -> str:
    """One row of the choices' table: words, speedup, interval or b-range, steps."""
    lo, hi = c["ci"]
    txt = f" [{lo:.2f}, {hi:.2f}]" if is_finite_number(lo) and is_finite_number(hi) and lo != hi else ""
    b_lo, b_hi = c.get("b_range") or (float("nan"), float("nan"))
    if isinstance(b_hi, float) and not math.isnan(b_hi) and b_hi != b_lo:
        txt += f" (b = 0: {_speedup_text(b_hi)})"
    steps = c["steps_factor"]
    steps_txt = f"{steps:.2f}x steps" if is_finite_number(steps) else "no progress: no signal"
    return f"  {c['words']}: {_speedup_text(c['predicted_speedup'])}{txt} ({steps_txt})"


def _speedup_text(x: float) -> str:
    """A predicted speedup as text: ``"2.31x"``; an infinite one (free world-model groups at r = 1)
    as ``"unbounded"``."""
    return "unbounded" if math.isinf(x) else f"{x:.2f}x"


def action_key(action: Any, limit: int = 120) -> str:
    """A short, stable text key of an action (its ``str``; a long one is cut and suffixed with a
    hash of the whole, so distinct long actions keep distinct keys)."""
    import hashlib

    text = str(action)
    if len(text) <= limit:
        return text
    return text[: limit - 14] + " #" + hashlib.sha1(text.encode()).hexdigest()[:12]


def _isotonic_fit_predict(x: np.ndarray, y: np.ndarray, w: np.ndarray, x_new: np.ndarray) -> np.ndarray:
    """The increasing isotonic regression of ``y`` on ``x`` with weights ``w`` (ties in ``x`` pooled
    to their weighted mean), evaluated at ``x_new`` by linear interpolation and clipped to the
    fitted range: what ``sklearn.isotonic.IsotonicRegression(out_of_bounds="clip")`` predicts,
    without its per-call overhead (float64 arrays; ``x`` needs two distinct values)."""
    from scipy.optimize import isotonic_regression

    ux, inv = np.unique(x, return_inverse=True)
    sw = np.bincount(inv, weights=w, minlength=ux.size)
    ym = np.bincount(inv, weights=w * y, minlength=ux.size) / sw
    fit = isotonic_regression(ym, weights=sw, increasing=True).x
    return np.interp(x_new, ux, fit)


def _bootstrap_pooled_r(world_model: Sequence[Scores], real: Sequence[Scores], n_boot: int, rng: np.random.Generator,
                        *, refit: bool, folds: int = 2, raw: Sequence[Scores] | None = None) -> list[float]:
    """Bootstrap replicates of the pooled within-group correlation (:func:`pooled_within_group_correlation`).

    Each replicate resamples the groups with a rollout scored both ways, with replacement (as
    integer weights per group). With ``refit`` the world-model scores are raw and the cross-fitted
    isotonic map (:func:`crossfit_calibrated`'s, group ``i`` in fold ``i mod folds``, so a group and
    its copies share a fold) is fitted again on each resample before the correlation is taken, so
    the interval carries the uncertainty of fitting the map; without it the scores are used as
    given (raw, or mapped by a fixed map; ``raw``: the raw scores of the same rollouts). With unit
    weights the replicate is exactly the point estimate. As in :meth:`AnchorAdvisor.advise`, a
    replicate whose map flattened scores that vary (no within-group spread after calibration while
    the raw and the real scores have some) counts as r = 0.

    Returns:
        The replicates (float; those without within-group spread otherwise are left out).
    """
    gid, xs, ys, us = [], [], [], []
    raw_of = world_model if refit or raw is None else raw
    for i, (w, r, u) in enumerate(zip(world_model, real, raw_of)):
        for a, b, c in zip(w, r, u):
            if is_finite_number(a) and is_finite_number(b):
                gid.append(i)
                xs.append(float(a))
                ys.append(float(b))
                us.append(float(c) if is_finite_number(c) else float(a))
    if not gid:
        return []
    gid_a, x, y, x_raw = np.asarray(gid), np.asarray(xs), np.asarray(ys), np.asarray(us)
    n_all = len(world_model)
    count = np.bincount(gid_a, minlength=n_all)
    scored = np.flatnonzero(count >= 1)
    pair_ok = count[gid_a] >= 2  # pairs of groups that enter the correlation
    fold = gid_a % folds
    ym = np.bincount(gid_a, weights=y, minlength=n_all) / np.maximum(count, 1)
    yc = y - ym[gid_a]
    um = np.bincount(gid_a, weights=x_raw, minlength=n_all) / np.maximum(count, 1)
    uc = np.where(pair_ok, x_raw - um[gid_a], 0.0)
    check_flat = refit or raw is not None
    out: list[float] = []
    for _ in range(int(n_boot)):
        wg = np.bincount(rng.choice(scored, size=scored.size, replace=True), minlength=n_all).astype(np.float64)
        wp = wg[gid_a]
        if refit:
            cal = x.copy()
            for k in range(folds):
                train = (fold != k) & (wp > 0)
                if np.unique(x[train]).size < 2:
                    continue  # too few distinct scores to fit: this fold keeps its raw scores
                sel = fold == k
                cal[sel] = _isotonic_fit_predict(x[train], y[train], wp[train], x[sel])
        else:
            cal = x
        cm = np.bincount(gid_a, weights=cal, minlength=n_all) / np.maximum(count, 1)
        xc = np.where(pair_ok, cal - cm[gid_a], 0.0)
        sxy, sxx, syy = (float(np.sum(wp * u * v)) for u, v in ((xc, yc), (xc, xc), (yc, yc)))
        if sxx <= 1e-12 or syy <= 1e-12:
            if check_flat and syy > 1e-12 and float(np.sum(wp * uc * uc)) > 1e-12:
                out.append(0.0)  # the map flattened varying scores: evidence of r <= 0
            continue
        out.append(float(np.clip(sxy / math.sqrt(sxx * syy), -1.0, 1.0)))
    return out


class AnchorAdvisor:
    """Collects anchor groups and recommends an anchor fraction (``docs/method.md``, "Choosing the
    anchor fraction").

    Args:
        max_groups: anchor groups kept (FIFO; the oldest are dropped), >= 1.
        min_groups: groups (with 2+ rollouts scored both ways) below which the verdict is "not
            enough anchor groups yet", >= 2.
        f_min, f_max: bounds of the recommended fraction, 0 <= f_min <= f_max <= 1. The floor
            ``f_min`` (default 0.05) holds the anchors the variance model does not price: those
            that fit the calibration map and watch the world model for bias and breakage (the
            model alone would often answer 0, world model only).
        n_boot: bootstrap resamples of the groups for the intervals (>= 0; 0: no intervals). With
            ``calibrate="crossfit"`` each resample refits the map (two isotonic fits): 1000
            resamples take about 0.4 CPU-s for 100 groups × G = 8, 1.7 at 1000 and 9 at 5000
            (``max_groups``' default).
        seed: seed of the bootstrap.

    Raises:
        ValueError: a setting outside its range.

    Example:
        >>> adv = AnchorAdvisor(min_groups=2, n_boot=0)
        >>> adv.add_group([0.2, 0.4, 0.9], [0.0, 0.5, 1.0])
        >>> adv.add_group([0.7, 0.1, 0.3], [1.0, 0.0, 0.0])
        >>> a = adv.advise(CostRates(execution_s=2.0, world_model_s=0.02))
        >>> a.use_wmrl, round(a.recommended_fraction, 3)
        (True, 0.05)
    """

    def __init__(self, *, max_groups: int = 5000, min_groups: int = 8, f_min: float = 0.05, f_max: float = 1.0,
                 n_boot: int = 1000, seed: int = 0) -> None:
        for name, v, lo in (("max_groups", max_groups, 1), ("min_groups", min_groups, 2), ("n_boot", n_boot, 0)):
            if not (isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= lo):
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if not (is_finite_number(f_min) and is_finite_number(f_max) and 0.0 <= f_min <= f_max <= 1.0):
            raise ValueError(f"need 0 <= f_min <= f_max <= 1, got f_min={f_min!r}, f_max={f_max!r}")
        self.max_groups, self.min_groups, self.n_boot, self.seed = int(max_groups), int(min_groups), int(n_boot), int(seed)
        self.f_min, self.f_max = float(f_min), float(f_max)
        self._groups: deque[tuple[list[float | None], list[float | None]]] = deque(maxlen=self.max_groups)
        self._keys: deque[list[str | None]] = deque(maxlen=self.max_groups)  # action keys per rollout
        self.added = 0
        """Anchor groups ever added (held or dropped): the held group ``i`` (oldest first) is the
        ``added - len(self) + i``-th added."""

    def __len__(self) -> int:
        return len(self._groups)

    def add_group(self, world_model: Scores, real: Scores, actions: Sequence[Any] | None = None) -> None:
        """Record one anchor group: its G raw world-model scores and the real scores of the same
        rollouts (``None`` where a score is missing, e.g. ungraded), and optionally the actions
        (kept as short keys, :func:`action_key`, for :meth:`blind_spots`).

        Raises:
            ValueError: the lengths differ.
        """
        if len(world_model) != len(real) or (actions is not None and len(actions) != len(real)):
            raise ValueError(f"an anchor group needs one real score (and action) per world-model score: got "
                             f"{len(world_model)} scores, {len(real)} real ones"
                             + ("" if actions is None else f", {len(actions)} actions"))
        # a bool score (success / failure) is 1.0 / 0.0; None, NaN and infinities are missing
        clean = [[float(x) if isinstance(x, (bool, np.bool_)) or is_finite_number(x) else None for x in seq]
                 for seq in (world_model, real)]
        self._groups.append((clean[0], clean[1]))
        self._keys.append([None] * len(real) if actions is None else [action_key(a) for a in actions])
        self.added += 1

    def blind_spots(self, *, min_count: int = 2, min_share: float = 0.5, high_quantile: float = 0.75,
                    low_quantile: float = 0.25, max_examples: int = 5) -> dict[str, Any]:
        """Actions the world model rates high that fail for real, concentrated on a few actions.

        From the anchor rollouts alone (raw world-model score, real score, action key; never a
        test environment's hidden truth): a rollout is *over-predicted* when its world-model score
        is at or above the ``high_quantile`` of all world-model scores held and its real score at
        or below the ``low_quantile`` of all real scores. An action is a *suspect* when it was
        over-predicted at least ``min_count`` times and in at least ``min_share`` of its anchor
        rollouts. No monotone map fixes such actions, GRPO will exploit them, and only anchors
        see them (``docs/method.md``, "Blind spots").

        Returns:
            ``{"over_predicted": n, "rollouts": N, "suspects": [{"action", "count",
            "over_predicted", "mean_world_model", "mean_real"}, ...] (most over-predicted first,
            at most max_examples), "concentration": share of over-predicted rollouts that are
            suspects' (NaN when none), "warning": a sentence or None}``. Without action keys
            every rollout counts as its own action, so nothing concentrates.
        """
        rows = [(w, r, k) for (ws, rs), ks in zip(self._groups, self._keys) for w, r, k in zip(ws, rs, ks)
                if w is not None and r is not None]
        out: dict[str, Any] = {"over_predicted": 0, "rollouts": len(rows), "suspects": [],
                               "concentration": float("nan"), "warning": None}
        if len(rows) < 4:
            return out
        w_all = np.array([w for w, _, _ in rows])
        r_all = np.array([r for _, r, _ in rows])
        if np.ptp(w_all) <= 1e-12 or np.ptp(r_all) <= 1e-12:
            return out  # no spread on one side: "high" and "low" mean nothing
        # quantiles of skewed scores (e.g. mostly failures) can sit at the minimum or maximum:
        # "high" must be above the lowest world-model score, "low" below the highest real score
        hi, lo = float(np.quantile(w_all, high_quantile)), float(np.quantile(r_all, low_quantile))
        w_min, r_max = float(w_all.min()), float(r_all.max())
        by_key: dict[str, list[tuple[float, float, bool]]] = {}
        n_over = 0
        for i, (w, r, k) in enumerate(rows):
            over = w >= hi and w > w_min and r <= lo and r < r_max
            n_over += over
            by_key.setdefault(k if k is not None else f"#rollout {i}", []).append((w, r, over))
        out["over_predicted"] = n_over
        suspects = []
        for k, v in by_key.items():
            n_o = sum(o for _, _, o in v)
            if n_o >= min_count and n_o >= min_share * len(v):
                suspects.append({"action": k, "count": len(v), "over_predicted": n_o,
                                 "mean_world_model": float(np.mean([w for w, _, _ in v])),
                                 "mean_real": float(np.mean([r for _, r, _ in v]))})
        suspects.sort(key=lambda d: (-d["over_predicted"], d["action"]))
        out["concentration"] = sum(d["over_predicted"] for d in suspects) / n_over if n_over else float("nan")
        out["suspects"] = suspects[:max_examples]
        if suspects:
            ex = "; ".join(f"{d['action'][:60]!r} (world model {d['mean_world_model']:.2f}, real {d['mean_real']:.2f}, "
                           f"{d['over_predicted']}/{d['count']} anchors)" for d in suspects[:3])
            out["warning"] = (f"blind spot suspected: {len(suspects)} action(s) rated high by the world model fail for "
                              f"real, {out['concentration']:.0%} of the {n_over} over-predicted anchor rollouts; no "
                              f"calibration fixes this and GRPO will exploit it. Examples: {ex}")
        return out

    def groups(self) -> tuple[list[list[float | None]], list[list[float | None]]]:
        """``(world_model, real)``: the groups held, oldest first (raw world-model scores)."""
        return [list(w) for w, _ in self._groups], [list(r) for _, r in self._groups]

    def _calibrated(self, calibrate: Callable[[Scores], Sequence[float]] | str | None) -> list[list[float | None]]:
        wm, real = self.groups()
        if calibrate is None:
            return wm
        if calibrate == "crossfit":
            return crossfit_calibrated(wm, real)
        return map_groups(wm, calibrate)

    def within_group_r(self, calibrate: Callable[[Scores], Sequence[float]] | str | None = None) -> tuple[float, int]:
        """``(r, n_groups)``: the pooled within-group correlation of the groups held, as
        :meth:`advise` computes its ``r`` (same ``calibrate``), without the bootstrap (cheap
        enough for every step's log; NaN with no spread)."""
        return pooled_within_group_correlation(self._calibrated(calibrate), self.groups()[1])

    def advise(self, costs: CostRates, *, calibrate: Callable[[Scores], Sequence[float]] | str | None = None,
               noise_batch_ratio: float | None = None, groups_per_step: int | None = None,
               step_law: str = "adam", fitting_share: float = 0.0) -> AnchorAdvice:
        """The advice for the groups held and these costs.

        Args:
            costs: per-rollout costs (:meth:`CostRates.from_ledger` for a run's own).
            calibrate: ``"crossfit"`` (:func:`crossfit_calibrated`: an isotonic map fitted out of
                sample, what a debiasing run should use) or a fitted map applied to the raw
                world-model scores before the correlation is taken (a map fitted on these same
                pairs inflates r), since calibrated scores are
                what WMRL trains on; ``None``: the raw scores.
            noise_batch_ratio: real-execution GRPO's gradient noise scale over its batch,
                ``B_noise / B`` (:class:`GradientNoiseScale`); ``None``: not measured (the
                prediction is the noise-limited end of :attr:`AnchorAdvice.predicted_speedup_range`).
            groups_per_step: the user's groups per step ``B``, for the real batches priced in
                :attr:`AnchorAdvice.choices` (``None``: as shares of the user's batch).
            step_law: the optimiser's step law (``"adam"``, default: Adam/AdamW at a fixed learning
                rate; ``"sgd"``: SGD retuned per batch; ``docs/method.md``, "Choosing the anchor fraction").
            fitting_share: φ, a world model's one-time fitting cost over real GRPO's compute to the
                target (:func:`~wmrl_envs.core.advisor_choices.fitting_share`; 0: none): the
                recommendation, ``use_wmrl``, ``recommended_fraction`` and the verdict then follow
                the choices with it counted (:attr:`AnchorAdvice.choices_with_fitting`).

        Returns:
            An :class:`AnchorAdvice`; its verdict says "not enough anchor groups" (and
            ``use_wmrl`` is False) below ``min_groups`` usable groups or when the correlation is
            undefined for want of spread in the real scores (or in both). Raw world-model scores that
            never vary within a group while the real ones do in at least 2 of ``min_groups`` groups, count as
            ``r = 0``: "do not use WMRL: the world model's scores do not vary within groups" and the
            best real batch. An r interval all below 0 says the world model's scores run against the
            real ones. Otherwise it is
            :attr:`AnchorAdvice.best_choice`'s: "use WMRL at anchor fraction f" when WMRL at the
            recommended fraction is the cheapest choice that keeps anchors, "do not use WMRL: ... train
            on real execution with k groups per step" when a smaller real batch is cheaper, and "do
            not use WMRL: ... not worth its cost" when nothing beats real execution at the user's batch.
            A WMRL choice is recommended only when the pilot shows signal within groups (the lower
            end of r's 95% interval above 0; without an interval, r > 0): otherwise the verdict
            says the pilot has not shown it and names the best real batch.
            When a calibration map (``calibrate`` not ``None``) flattens world-model scores that vary
            within groups as the real ones do, the increasing map found no increasing relation:
            ``r`` is 0 (``r <= 0``), ``use_wmrl`` is False and the verdict says the world model
            carries no usable signal.

        Raises:
            TypeError: ``costs`` not a :class:`CostRates`. ValueError: a bad ``noise_batch_ratio``,
                ``groups_per_step``, ``step_law`` or ``fitting_share``.
        """
        if not isinstance(costs, CostRates):
            raise TypeError(f"costs must be a CostRates (e.g. CostRates.from_ledger(ledger)), got {type(costs).__name__}")
        if not (isinstance(fitting_share, numbers.Real) and not isinstance(fitting_share, bool) and fitting_share >= 0):
            raise ValueError(f"fitting_share must be a number >= 0 (the fitting's share of real GRPO's compute), "
                             f"got {fitting_share!r}")
        b = check_noise_batch_ratio(noise_batch_ratio)
        b = None if math.isinf(b) else b
        wm = self._calibrated(calibrate)
        _, real = self.groups()
        r, n = pooled_within_group_correlation(wm, real)
        # a map that flattened scores which vary (raw and real) is evidence of r <= 0, not missing data
        flat_raw_r = (flat_map_raw_r(self.groups()[0], wm, real) if n >= self.min_groups and calibrate is not None
                      else float("nan"))
        if math.isfinite(flat_raw_r):
            r = 0.0
        # raw world-model scores that never vary within a group while the real ones do: no signal, whatever the
        # number of groups (more groups cannot help), not missing data
        const_wm = n >= self.min_groups and not math.isfinite(r) and _constant_within_groups(self.groups()[0], real)
        if const_wm:
            r = 0.0
        n_pairs = sum(1 for w, x in zip(wm, real) for a, b in zip(w, x) if a is not None and b is not None)
        nan2 = (float("nan"), float("nan"))
        if n < self.min_groups or not math.isfinite(r):
            why = (f"{n} usable anchor groups, need {self.min_groups}" if n < self.min_groups
                   else "no within-group spread in the world-model or the real scores yet")
            return AnchorAdvice(n, n_pairs, r, nan2, costs, float("nan"), nan2, float("nan"), float("nan"), nan2,
                                float("nan"), False, f"not enough anchor groups yet ({why}): collect more (a longer pilot, or a longer training run)",
                                self.blind_spots(), b, step_law=step_law)
        f_star = optimal_anchor_fraction(r, costs.gamma, b, step_law)
        rec = min(self.f_max, max(self.f_min, f_star))
        r_ci = f_ci = nan2
        rs: list[float] = []
        if self.n_boot and n >= 2:
            # groups resampled; with "crossfit" the map is fitted again on each resample, so the
            # interval carries the uncertainty of fitting it (a fixed map given by the caller cannot be)
            refit = calibrate == "crossfit"
            rs = _bootstrap_pooled_r(self.groups()[0] if refit else wm, real, self.n_boot,
                                     np.random.default_rng(self.seed), refit=refit,
                                     raw=None if refit or calibrate is None else self.groups()[0])
            if rs:
                r_ci = tuple(float(v) for v in np.percentile(rs, [2.5, 97.5]))  # type: ignore[assignment]
                f_ci = tuple(float(v) for v in np.percentile(  # type: ignore[assignment]
                    [optimal_anchor_fraction(rb, costs.gamma, b, step_law) for rb in rs], [2.5, 97.5]))
        from .advisor_choices import DEFAULT_FRACTIONS, with_fitting

        price = dict(groups_per_step=groups_per_step, fractions=(*DEFAULT_FRACTIONS, rec), f_min=self.f_min,
                     f_max=self.f_max, step_law=step_law)
        choices = price_choices(r, costs, b, r_replicates=rs, **price)  # training only
        phi = float(fitting_share)
        totals = with_fitting(choices, phi) if phi > 0 else choices
        # WMRL is eligible only when the pilot shows signal within groups: r's interval above 0
        # (without an interval, r > 0); otherwise the recommendation is the best real batch
        signal = r_ci[0] > 0 if math.isfinite(r_ci[0]) else r > 0
        signal = signal and not math.isfinite(flat_raw_r)
        best, close, best_text = recommend(totals, wmrl_eligible=signal)
        best_real = max((c for c in totals if c.kind == "real"), key=lambda c: (c.predicted_speedup, -c.steps_factor))
        real_text = recommend(totals, wmrl_eligible=False)[2]
        use = best.kind == "wmrl"
        if use:
            rec = best.share  # the cheapest WMRL fraction priced (clip(f*) is among them)

        def at(cs: Sequence[Choice]) -> Choice:  # WMRL at rec; at rec = 0 (f_min = 0) the world model alone
            return next(c for c in cs if (c.kind == "wmrl" and c.share == rec)
                        or (rec <= 0 and c.kind == "world_model_only"))

        at_rec, at_rec_total = at(choices), at(totals)  # training only; the fitting counted when it is
        s, s_ci = at_rec.predicted_speedup, at_rec.ci  # one interval: the table's, at the recommended fraction
        s_range = (predicted_speedup(rec, r, costs, None, step_law), predicted_speedup(rec, r, costs, 0.0, step_law))
        b_txt = f"b = {b:.3g}" if b is not None else "b not measured: every step assumed noise-limited"
        fit_txt = ", the world model's fitting counted" if phi > 0 else ""
        wm_txt = ((f"WMRL at {rec:.3f}" if rec > 0 else "the world model alone (fraction 0)")
                  + f" predicts {_speedup_text(at_rec_total.predicted_speedup)}"
                  + (f" with its fitting counted ({_speedup_text(s)} for training alone)" if phi > 0 else ""))
        r_txt = (f"r = {r:.2f}, 95% CI [{r_ci[0]:.2f}, {r_ci[1]:.2f}] reaches 0" if math.isfinite(r_ci[0])
                 else f"r = {r:.2f} <= 0; no interval")
        against = math.isfinite(r_ci[1]) and r_ci[1] < 0  # the whole interval below 0
        if const_wm:
            spread = sum(1 for x in real if len({v for v in x if v is not None}) >= 2)
            verdict = (f"do not use WMRL: the world model's scores do not vary within groups (over {n} groups, "
                       f"{spread} of them with real scores that do), so it cannot rank a group's rollouts and more "
                       f"pilot groups cannot change that: {real_text}")
        elif against:
            verdict = (f"do not use WMRL: the world model's scores run against the real ones within groups (r = "
                       f"{r:.2f}, 95% CI [{r_ci[0]:.2f}, {r_ci[1]:.2f}], all below 0): {real_text}")
        elif math.isfinite(flat_raw_r):
            verdict = (f"do not use WMRL: the world model carries no usable signal within groups (its calibration map "
                       f"is flat: its scores do not rise with the real ones, raw within-group r = {flat_raw_r:.2f}; "
                       "r counts as 0); train on real execution" + (f" ({real_text})" if best_real.share < 1.0 else ""))
        elif not signal:
            verdict = (f"do not use WMRL: the pilot has not shown the world model carries signal within groups ({r_txt})"
                       f": {real_text}; or collect more "
                       f"pilot groups to test it ({wm_txt} if r = {r:.2f} held)")
        elif use:
            lo, hi = best.ci
            verdict = (f"use WMRL at anchor fraction {rec:.3f} (predicted speedup {_speedup_text(best.predicted_speedup)}"
                       + (f" [{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) and math.isfinite(hi) and lo != hi else "")
                       + f" over real execution at your batch{fit_txt}, in {best.steps_factor:.2f}x its steps; {b_txt})")
            if math.isfinite(lo) and lo <= best_real.predicted_speedup:
                verdict += (f"; uncertain: the interval reaches {lo:.2f}x and {maybe_group_words(best_real)} predicts "
                            f"{best_real.predicted_speedup:.2f}x, inside the interval: collect more anchor groups to "
                            "be sure")
        elif not any(c.kind == "wmrl" for c in totals):  # f_max = 0: only the world model alone, never recommended
            verdict = (f"do not use WMRL: --f-max {self.f_max:g} leaves no anchor fraction to recommend (only the world "
                       f"model alone, which is never recommended: nothing corrects or watches its bias): {real_text}")
        elif best.share < 1.0:
            close_wmrl = [c for c in close if c.kind == "wmrl"]
            verdict = (f"do not use WMRL: {best_text}; {wm_txt} (r = {r:.2f}, gamma = {costs.gamma:.3g}, {b_txt})"
                       + (f": uncertain, WMRL at {close_wmrl[0].share:g} is as good within the interval: collect more "
                          "anchor groups to be sure" if close_wmrl else
                          ": the world model adds nothing over a smaller real batch"
                          + (" once its fitting is counted" if phi > 0 else "")))
        else:
            verdict = (f"do not use WMRL: the predicted speedup at the best anchor fraction is "
                       f"{_speedup_text(at_rec_total.predicted_speedup)} <= 1{fit_txt} (r = {r:.2f}, gamma = "
                       f"{costs.gamma:.3g}); the world model is not worth its cost here, train on real execution")
            hi = at_rec_total.ci[1]
            if math.isfinite(hi) and hi > 1.0:
                verdict += f"; uncertain: the interval reaches {hi:.2f}x, collect more anchor groups to be sure"
        # what a smaller real batch gives by itself (real GRPO on rec·B groups per step), for reference
        s_small = 1.0 if rec <= 0 else steps_ratio(rec, b, step_law) / rec
        r_half = preferred_half_r(wm, real)
        drift_f = s_drift = guard = float("nan")
        if math.isfinite(r_half):
            rh = max(-1.0, min(1.0, r_half))
            drift_f = min(self.f_max, max(self.f_min, optimal_anchor_fraction(rh, costs.gamma, b, step_law)))
            s_drift = predicted_speedup(rec, rh, costs, b, step_law)
            if phi > 0:  # as the verdict: the fitting counted (with_fitting's total)
                s_drift = with_fitting([Choice("wmrl", rec, None, s_drift, nan2, 1.0, "")], phi)[0].predicted_speedup
            # the largest fraction priced that, at the drifted r, still beats the best real batch
            at_half = price_choices(rh, costs, b, **price)
            at_half = with_fitting(at_half, phi) if phi > 0 else at_half
            beat = [c.share for c in at_half if c.kind == "wmrl" and c.predicted_speedup > best_real.predicted_speedup]
            guard = max(beat) if beat else float("nan")
        return AnchorAdvice(n, n_pairs, r, r_ci, costs, f_star, f_ci, rec, s, s_ci, 1.0 / s if s > 0 else float("inf"),
                            use, verdict, self.blind_spots(), b, s_range, s_small,
                            tuple(c.to_dict() for c in choices), best_text, r_half, drift_f, s_drift, step_law,
                            best.to_dict(), signal, phi, tuple(c.to_dict() for c in totals) if phi > 0 else (), guard,
                            tuple(c.to_dict() for c in close))

    def state_dict(self) -> dict[str, Any]:
        """Settings, the groups held and the count of groups ever added (JSON-serialisable)."""
        return {"max_groups": self.max_groups, "min_groups": self.min_groups, "f_min": self.f_min, "f_max": self.f_max,
                "n_boot": self.n_boot, "seed": self.seed, "added": self.added,
                "groups": [[w, r, k] for (w, r), k in zip(self._groups, self._keys)]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (settings and groups).

        Raises:
            KeyError: a key is missing. ValueError: a setting out of range or a malformed group;
                nothing is changed then.
        """
        fresh = AnchorAdvisor(max_groups=state["max_groups"], min_groups=state["min_groups"], f_min=state["f_min"],
                              f_max=state["f_max"], n_boot=state["n_boot"], seed=state["seed"])
        for g in state["groups"]:
            if not (isinstance(g, Sequence) and len(g) in (2, 3)):
                raise ValueError(f"a saved anchor group must be [world_model, real, keys], got {g!r}")
            fresh.add_group(g[0], g[1])
            if len(g) == 3 and g[2] is not None:
                if len(g[2]) != len(g[1]):
                    raise ValueError(f"a saved anchor group has {len(g[2])} action keys for {len(g[1])} rollouts")
                fresh._keys[-1] = [None if k is None else str(k) for k in g[2]]
        added = state.get("added", len(fresh))  # absent before issue 25's change points: the groups held
        if not (isinstance(added, numbers.Integral) and not isinstance(added, bool) and added >= len(fresh)):
            raise ValueError(f"a saved count of anchor groups added must be an integer >= the {len(fresh)} held, "
                             f"got {added!r}")
        fresh.added = int(added)
        self.__dict__.update(fresh.__dict__)

    def replace_world_model_scores(self, scores: Mapping[int, Scores]) -> int:
        """Replace the world-model scores of some groups held, by position (0 = the oldest
        held), keeping their real scores and action keys.

        For a world model that learns from the anchors: after a refit, the loop gives each
        group the current model's out-of-fold scores, so r describes the model in use.

        Args:
            scores: ``{position: G scores}`` (``None``/NaN = missing).

        Returns:
            Groups replaced.

        Raises:
            ValueError: a position out of range or a group of another length (nothing changed then).
        """
        items = list(scores.items())
        for i, w in items:
            if not (isinstance(i, numbers.Integral) and 0 <= i < len(self._groups)):
                raise ValueError(f"no anchor group at position {i!r} (holding {len(self._groups)})")
            if len(w) != len(self._groups[i][1]):
                raise ValueError(f"group {i}: {len(w)} world-model scores for {len(self._groups[i][1])} rollouts")
        for i, w in items:
            clean = [float(x) if isinstance(x, (bool, np.bool_)) or is_finite_number(x) else None for x in w]
            self._groups[i] = (clean, self._groups[i][1])
        return len(items)
