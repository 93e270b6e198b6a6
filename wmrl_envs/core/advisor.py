"""Choosing the anchor fraction from measurements: the cost-optimal share of real executions.

Holds the closed forms (:func:`pooled_within_group_correlation`, :func:`optimal_anchor_fraction`,
:func:`predicted_speedup`), the per-rollout costs they take (:class:`CostRates`, read from a
:class:`~wmrl_envs.core.CostLedger`), and :class:`AnchorAdvisor`, which collects anchor groups
(world-model and real scores of the same rollouts, group by group) and answers with an
:class:`AnchorAdvice`: the within-group correlation with a bootstrap CI, the recommended anchor
fraction f*, the predicted speedup over real-execution GRPO and a plain verdict.

The prediction is GRPO-specific: a world-model group is worth ``r²`` of a real one (``r`` the
*within-group* correlation, since GRPO standardises advantages per group), so a WMRL step of
``B`` groups at anchor fraction ``f`` is worth ``q·B`` real groups with ``q = f + (1 − f) r²``;
the steps to a target follow McCandlish et al.'s gradient-noise-scale model,
``S_min (1 + B_noise / B)``, with ``B_noise / B`` measured on real-execution GRPO
(:class:`GradientNoiseScale`); the cost per step follows the ledger. f* maximises the predicted
speedup; it ignores the world model's bias, which is why a floor ``f_min`` of anchors always
remains. Cochran's double-sampling optimum (``ppi_py``'s power analysis) is the textbook form
this departs from. Derivation: ``docs/method.md``, "Choosing the anchor fraction".
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .ledger import EXECUTION, GENERATION, UPDATE, WORLD_MODEL_SOURCE, CostLedger

__all__ = [
    "AdaptiveAnchorFraction",
    "AnchorAdvice",
    "AnchorAdvisor",
    "CostRates",
    "ExecutionBudgetSpent",
    "GradientNoiseScale",
    "action_key",
    "crossfit_calibrated",
    "optimal_anchor_fraction",
    "pooled_within_group_correlation",
    "predicted_speedup",
]

Scores = Sequence[float | None]


def _finite(x: object) -> bool:
    if type(x) is float:  # the common case, without the abstract-class check (hot in the cross-fit)
        return math.isfinite(x)
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(float(x))


def _check_r(r: float) -> float:
    if not _finite(r) or not -1.0 <= float(r) <= 1.0:
        raise ValueError(f"r must be a correlation in [-1, 1], got {r!r}")
    return float(r)


@dataclass(frozen=True)
class CostRates:
    """Cost of one rollout per source, in seconds (CPU-seconds when read from a ledger).

    Attributes:
        execution_s: one real execution (> 0).
        world_model_s: one world-model prediction (>= 0).
        other_s: what every rollout costs under any method: generation and the policy update,
            per rollout (>= 0).
        unit: ``"CPU-s"`` or ``"wall-clock s"`` (what the figures are).

    Raises:
        ValueError: a cost is negative or not finite, or ``execution_s`` is 0 (with free
            executions there is nothing to save).
    """

    execution_s: float
    world_model_s: float
    other_s: float = 0.0
    unit: str = "CPU-s"

    def __post_init__(self) -> None:
        for name in ("execution_s", "world_model_s", "other_s"):
            v = getattr(self, name)
            if not _finite(v) or v < 0:
                raise ValueError(f"CostRates.{name} must be a finite number of seconds >= 0, got {v!r}")
        if self.execution_s <= 0:
            raise ValueError("CostRates.execution_s must be > 0: with free executions there is nothing to save "
                             f"(got {self.execution_s!r}); measure an execution first")

    @property
    def gamma(self) -> float:
        """γ = (world model + other) / execution, per rollout: the fixed cost of a rollout under
        WMRL in units of one execution."""
        return (self.world_model_s + self.other_s) / self.execution_s

    @classmethod
    def from_ledger(cls, ledger: CostLedger, *, cpu: bool = True) -> CostRates:
        """Per-rollout costs measured in a run: each source's seconds divided by its count.

        ``execution`` and ``world_model`` are counted per rollout by the wrappers; generation and
        update are spread over the rollouts generated (``generation``'s count, or the world
        model's when no generation was recorded). Executions whose CPU could not be measured are
        left out of the execution average (their count too).

        Args:
            ledger: the run's cost ledger.
            cpu: CPU-seconds (default; they do not depend on the machine's load) or wall-clock.

        Raises:
            ValueError: the ledger has no execution with a measured cost, or no world-model call
                (nothing to compare).
        """
        sec = ledger.cpu_seconds if cpu else ledger.seconds
        n_exec = ledger.count(EXECUTION) - (ledger.cpu_unmeasured(EXECUTION) if cpu else 0)
        if n_exec <= 0 or sec(EXECUTION) <= 0:
            raise ValueError("the ledger has no real execution with a measured cost: run anchor groups first")
        n_wm = ledger.count(WORLD_MODEL_SOURCE)
        if n_wm <= 0:
            raise ValueError("the ledger has no world-model prediction: run world-model groups first")
        n_roll = ledger.count(GENERATION) or n_wm
        return cls(
            execution_s=sec(EXECUTION) / n_exec,
            world_model_s=sec(WORLD_MODEL_SOURCE) / n_wm,
            other_s=(sec(GENERATION) + sec(UPDATE)) / n_roll,
            unit="CPU-s" if cpu else "wall-clock s",
        )


def pooled_within_group_correlation(world_model: Sequence[Scores], real: Sequence[Scores]) -> tuple[float, int]:
    """Pearson correlation of world-model and real scores *within* groups, pooled over groups.

    Each group's scores are centred on its own means (over the rollouts with both scores), then
    one correlation is taken over all centred pairs: ``Σ d̃·r̃ / sqrt(Σ d̃² · Σ r̃²)``. This is the
    correlation GRPO sees, since its advantages only use within-group differences; a world
    model that merely ranks tasks (groups) well gets no credit. Groups are weighted by their
    spread (a group whose real scores are all equal adds world-model noise and no signal).

    Args:
        world_model: per group, the world-model scores (calibrated, if the run calibrates) of its
            rollouts; ``None`` or NaN = no score.
        real: per group, the real scores of the same rollouts (same lengths).

    Returns:
        ``(r, n_groups)``: the correlation (NaN when either side has no within-group spread) and
        the number of groups with at least 2 rollouts scored by both.

    Raises:
        ValueError: the two lists differ in length, or a group's lists do.

    Example:
        >>> pooled_within_group_correlation([[0.1, 0.3], [0.8, 0.6]], [[0.0, 1.0], [1.0, 0.0]])
        (1.0, 2)
    """
    if len(world_model) != len(real):
        raise ValueError(f"{len(world_model)} world-model groups but {len(real)} real ones")
    sxy = sxx = syy = 0.0
    n = 0
    for g, (w, r) in enumerate(zip(world_model, real)):
        if len(w) != len(r):
            raise ValueError(f"group {g}: {len(w)} world-model scores but {len(r)} real ones")
        both = [(float(a), float(b)) for a, b in zip(w, r) if _finite(a) and _finite(b)]
        if len(both) < 2:
            continue
        x = np.array(both)
        x -= x.mean(axis=0)
        sxy += float(x[:, 0] @ x[:, 1])
        sxx += float(x[:, 0] @ x[:, 0])
        syy += float(x[:, 1] @ x[:, 1])
        n += 1
    if sxx <= 1e-12 or syy <= 1e-12:
        return float("nan"), n
    return float(np.clip(sxy / math.sqrt(sxx * syy), -1.0, 1.0)), n


def crossfit_calibrated(world_model: Sequence[Scores], real: Sequence[Scores], folds: int = 2) -> list[list[float | None]]:
    """World-model scores calibrated *out of sample*: the groups are split into ``folds`` folds
    (group i in fold i mod folds) and each fold's scores are mapped by an isotonic regression of
    real on world-model score fitted on the other folds' pairs (scikit-learn, clipped outside the
    fitted range). A map fitted on the same pairs it is judged on would bend towards their noise
    and inflate the correlation (a world model independent of the truth would look useful).
    A fold whose other folds hold fewer than two distinct world-model scores keeps its raw scores.

    Args:
        world_model, real: per group, the scores of its rollouts (``None`` = missing).
        folds: number of folds (>= 2).

    Returns:
        Per group, the calibrated scores (``None`` where the world-model score is missing).
    """
    from sklearn.isotonic import IsotonicRegression

    out: list[list[float | None]] = [list(w) for w in world_model]
    # one pass over the scores: per group, which world-model scores are finite, and its pairs
    ok = [[_finite(a) for a in w] for w in world_model]
    pairs = [[(float(a), float(b)) for a, b, f in zip(w, r, o) if f and _finite(b)]
             for w, r, o in zip(world_model, real, ok)]
    for k in range(folds):
        xy = [p for i, ps in enumerate(pairs) if i % folds != k for p in ps]
        xs = [x for x, _ in xy]
        if len(set(xs)) < 2:
            continue
        iso = IsotonicRegression(out_of_bounds="clip").fit(xs, [y for _, y in xy])
        idx = range(k, len(world_model), folds)
        vals = [float(a) for i in idx for a, f in zip(world_model[i], ok[i]) if f]
        mapped = iter(iso.predict(vals).tolist()) if vals else iter(())  # one call per fold
        for i in idx:
            out[i] = [float(next(mapped)) if f else None for f in ok[i]]
    return out


def optimal_anchor_fraction(r: float, gamma: float, noise_batch_ratio: float | None = None) -> float:
    """The anchor fraction that maximises :func:`predicted_speedup` (the GRPO-specific optimum).

    Maximises ``(1 + b) / ((f + γ)(1 + b / q(f)))`` with ``q(f) = f + (1 − f) r²`` over
    ``f`` in [0, 1] (the argmax over a grid: 0 and 2001 log-spaced fractions from 1e-4 to 1; where
    the objective is flat, as for ``r = 0`` with ``γ = 0``, the grid's first maximum). Without a noise scale (``b → ∞``) the objective is ``q(f) / (f + γ)``, monotone in
    ``f``: 0 when ``r² > γ (1 − r²)`` (the world model's groups are worth their cost: as few
    anchors as the floor allows), 1 otherwise. With a finite ``b`` the optimum can lie inside;
    for a useless world model (``r = 0``) it is ``sqrt(γ b)`` (capped at 1). Textbook double
    sampling (Cochran; ``ppi_py``'s power analysis) gives ``sqrt(γ (1 − r²) / r²)`` instead,
    because there the world model's predictions enter only through a difference estimator that
    the anchors make unbiased; WMRL trains on the calibrated world-model scores directly, so its
    world-model groups add signal ``r²`` each rather than buying variance reduction with anchors
    (``docs/method.md``, "Choosing the anchor fraction"). The model ignores the world model's bias,
    which is what anchors are also for: clip the answer to a floor (``f_min``).

    Args:
        r: within-group correlation of (calibrated) world-model and real scores, in [-1, 1]
            (``r <= 0`` counts as 0: isotonic calibration cannot flip a sign).
        gamma: (world model + generation + update) cost per rollout over one execution's, >= 0.
        noise_batch_ratio: ``b = B_noise / B`` >= 0 (:class:`GradientNoiseScale`); ``None``: ``∞``.

    Returns:
        f* in [0, 1] (0: no anchors needed for the variance; the floor decides).

    Raises:
        ValueError: ``r`` outside [-1, 1], ``gamma`` negative, ``noise_batch_ratio`` negative or NaN.

    Example:
        >>> optimal_anchor_fraction(0.8, 0.01), optimal_anchor_fraction(0.0, 0.01)
        (0.0, 1.0)
        >>> round(optimal_anchor_fraction(0.0, 0.01, noise_batch_ratio=1.0), 2)   # sqrt(γ b)
        0.1
    """
    r = _check_r(r)
    if not _finite(gamma) or gamma < 0:
        raise ValueError(f"gamma must be a cost ratio >= 0, got {gamma!r}")
    b = _check_b(noise_batch_ratio)
    r2 = max(0.0, r) ** 2
    f = _F_GRID
    q = f + (1.0 - f) * r2
    with np.errstate(divide="ignore", invalid="ignore"):
        if math.isinf(b):
            obj = q / (f + gamma)
        else:
            obj = (1.0 + b) / ((f + gamma) * (1.0 + np.where(q > 0, b / np.where(q > 0, q, 1.0), np.inf)))
    obj = np.where(np.isfinite(obj), obj, np.where(np.isnan(obj), -np.inf, obj))
    return float(f[int(np.argmax(obj))])


_F_GRID = np.concatenate([[0.0], np.logspace(-4.0, 0.0, 2001)])


def _check_b(b: float | None) -> float:
    if b is None:
        return math.inf
    if isinstance(b, bool) or not isinstance(b, numbers.Real) or math.isnan(float(b)) or float(b) < 0:
        raise ValueError(f"noise_batch_ratio must be B_noise / B >= 0 (or None), got {b!r}")
    return float(b)


def predicted_speedup(f: float, r: float, costs: CostRates, noise_batch_ratio: float | None = None) -> float:
    """Predicted compute-to-target speedup of WMRL at anchor fraction f over real-execution GRPO.

    ``S(f) = (c_other + c_exec) / (c_other + c_wm + f·c_exec) · (1 + b) / (1 + b / q)`` with
    ``q = f + (1 − f) r²``: the cost ratio per step times the ratio of steps to the target in
    McCandlish et al.'s model (2018, "An empirical model of large-batch training": steps
    ``≈ S_min (1 + B_noise / B)``). WMRL's batch is worth ``q·B`` real groups: an anchor group
    counts fully, a world-model group as ``r²`` of one (the share of its advantages' variance
    that follows the real scores, with the anchor up-weight ρ at its inverse-variance optimum).
    ``b = B_noise / B`` is real-execution GRPO's gradient noise scale over its batch
    (:class:`GradientNoiseScale`): with ``b → 0`` (a batch far above the noise scale) the extra
    noise costs no steps and ``S`` is the cost ratio; with ``b → ∞`` (``None``, every step
    noise-limited) ``S = q`` × the cost ratio. Unmeasured, the two ends bracket the model's
    prediction. It is a model, not a bound: it ignores the world model's bias (the corrections
    exist for it), which makes it optimistic where bias remains after calibration (blind spots,
    per-action bias). Its check against measured speedups: ``docs/advisor_check.md``; the
    derivation: ``docs/method.md``, "Choosing the anchor fraction".

    Args:
        f: anchor fraction in [0, 1] (0: world model only).
        r: within-group correlation, in [-1, 1] (``r <= 0`` counts as 0).
        costs: per-rollout costs.
        noise_batch_ratio: ``B_noise / B`` >= 0, both in groups; ``None``: ``∞``.

    Returns:
        The predicted speedup (>= 0; ``(c_other + c_exec) / (c_other + c_wm + c_exec)`` < 1 at
        f = 1; ``inf`` when WMRL's step is free and its batch carries signal).

    Raises:
        ValueError: ``f`` outside [0, 1], ``r`` outside [-1, 1] or ``noise_batch_ratio`` negative or NaN.

    Example:
        >>> c = CostRates(1.0, 0.01)
        >>> round(predicted_speedup(0.1, 0.8, c), 2), round(predicted_speedup(0.1, 0.8, c, noise_batch_ratio=1.0), 2)
        (6.15, 7.33)
    """
    if not _finite(f) or not 0.0 <= f <= 1.0:
        raise ValueError(f"f must be an anchor fraction in [0, 1], got {f!r}")
    if not isinstance(costs, CostRates):
        raise TypeError(f"costs must be a CostRates (e.g. CostRates.from_ledger(ledger)), got {type(costs).__name__}")
    r2 = max(0.0, _check_r(r)) ** 2
    b = _check_b(noise_batch_ratio)
    real = costs.other_s + costs.execution_s
    per_rollout = costs.other_s + costs.world_model_s + f * costs.execution_s
    q = f + (1.0 - f) * r2
    if q <= 0.0:  # world model only and no signal in its scores
        return 0.0
    steps = q if math.isinf(b) else (1.0 + b) / (1.0 + b / q)  # real GRPO's steps over WMRL's
    if per_rollout <= 0:
        return float("inf")
    return float(real / per_rollout * steps)


@dataclass
class GradientNoiseScale:
    """Running estimate of real-execution GRPO's gradient noise scale ``B_noise = tr(Σ) / |G|²``, in groups.

    McCandlish et al. (2018, "An empirical model of large-batch training", appendix A): with the
    ``n`` per-group policy gradients ``g_j`` of one step (i.i.d. around the true gradient ``G``
    with covariance ``Σ``), ``n/(n − 1) · (mean_j |g_j|² − |ḡ|²)`` estimates ``tr(Σ)`` and
    ``|ḡ|² − tr(Σ)/n`` estimates ``|G|²`` without bias. Both are summed over steps and their
    ratio taken (the paper's remedy for the ratio's noise). ``B_noise / B`` with ``B`` the groups
    per step is the ``noise_batch_ratio`` of :func:`predicted_speedup` and
    :func:`optimal_anchor_fraction`: how far a step's batch is from the one at which gradient
    noise stops limiting progress. Scale-free: any constant factor on the gradients cancels.

    Attributes:
        trace_sum: summed estimates of ``tr(Σ)`` (squared gradient units).
        signal_sum: summed estimates of ``|G|²``.
        steps: steps added.
    """

    trace_sum: float = 0.0
    signal_sum: float = 0.0
    steps: int = 0

    def add_step(self, mean_group_sq_norm: float, sq_norm_of_mean: float, n_groups: int) -> None:
        """Add one step from its moments.

        Args:
            mean_group_sq_norm: ``mean_j |g_j|²`` over the step's groups (a group without policy
                signal, e.g. all rollouts scored alike, counts with ``g_j = 0``).
            sq_norm_of_mean: ``|mean_j g_j|²`` (never above ``mean_group_sq_norm``).
            n_groups: ``n`` >= 2, the groups of the step (an integer).

        Raises:
            ValueError: fewer than 2 groups or a non-integer count, a moment negative or not
                finite, or ``sq_norm_of_mean`` above ``mean_group_sq_norm`` (impossible for the
                moments of one set of gradients: the two arguments are swapped).
        """
        if isinstance(n_groups, bool) or not isinstance(n_groups, numbers.Integral) or n_groups < 2:
            raise ValueError(f"the noise scale needs an integer number of groups per step >= 2, got {n_groups!r}")
        n = int(n_groups)
        for name, v in (("mean_group_sq_norm", mean_group_sq_norm), ("sq_norm_of_mean", sq_norm_of_mean)):
            if not _finite(v) or float(v) < 0:
                raise ValueError(f"{name} must be a finite squared norm >= 0, got {v!r}")
        m, s2 = float(mean_group_sq_norm), float(sq_norm_of_mean)
        if s2 > m * (1 + 1e-9) + 1e-300:
            raise ValueError(f"sq_norm_of_mean ({s2:.6g}) exceeds mean_group_sq_norm ({m:.6g}), which the moments of one "
                             "set of gradients cannot do: are the two arguments swapped?")
        trace = n / (n - 1) * (m - s2)
        self.trace_sum += trace
        self.signal_sum += s2 - trace / n
        self.steps += 1

    def add_group_gradients(self, gradients: np.ndarray) -> None:
        """Add one step from its per-group gradients, float (n_groups, n_parameters).

        Raises:
            ValueError: not 2-D, fewer than 2 groups, or a value not finite.
        """
        g = np.asarray(gradients, dtype=np.float64)
        if g.ndim != 2:
            raise ValueError(f"gradients must be (n_groups, n_parameters), got shape {g.shape}")
        if not np.isfinite(g).all():
            raise ValueError("gradients must be finite")
        self.add_step(float((g * g).sum(axis=1).mean()), float(np.square(g.mean(axis=0)).sum()), int(g.shape[0]))

    def merge(self, other: GradientNoiseScale) -> None:
        """Pool another estimate into this one (sums of both estimators and of steps, e.g. over seeds)."""
        self.trace_sum += other.trace_sum
        self.signal_sum += other.signal_sum
        self.steps += other.steps

    @property
    def value(self) -> float:
        """``B_noise`` in groups: NaN before any step, ``inf`` while the signal estimate is not
        above float rounding (``<= 1e-9 × tr(Σ)``: the gradient is not yet distinguishable from
        its noise, e.g. when a single group per step carries signal)."""
        if self.steps == 0:
            return float("nan")
        if not (math.isfinite(self.trace_sum) and math.isfinite(self.signal_sum)):
            return float("nan")
        if self.signal_sum <= 1e-9 * max(self.trace_sum, 0.0):
            return float("inf")
        return max(0.0, self.trace_sum) / self.signal_sum

    def ratio(self, groups_per_step: int) -> float:
        """``b = B_noise / B`` for a run of ``groups_per_step`` groups per step, the argument of
        :func:`predicted_speedup` (``B_noise`` does not depend on the batch; ``b`` does: give the
        groups per step of the run the prediction is for, not necessarily those it was measured at).

        Returns:
            ``b`` (NaN before any step, ``inf`` while the signal is not resolved).

        Raises:
            ValueError: ``groups_per_step`` not an integer >= 1.
        """
        if isinstance(groups_per_step, bool) or not isinstance(groups_per_step, numbers.Integral) or groups_per_step < 1:
            raise ValueError(f"groups_per_step must be an integer >= 1, got {groups_per_step!r}")
        return self.value / int(groups_per_step)


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
        recommended_fraction: ``f_star`` clipped to [``f_min``, ``f_max``].
        predicted_speedup: :func:`predicted_speedup` at the recommended fraction (a model that
            ignores the world model's bias; without a noise scale, its noise-limited end).
        predicted_speedup_ci: its 95% interval.
        variance_ratio: ``1 / predicted_speedup``: WMRL's compute to the target relative to
            real-execution GRPO's (< 1: WMRL is cheaper).
        use_wmrl: the verdict: ``True`` when the predicted speedup exceeds 1 with enough groups.
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
    """What real-execution GRPO on ``recommended_fraction`` × the groups per step gives by itself,
    ``(1 + b) / (f + b)`` (1 without a noise scale): the verdict says "use WMRL" only when WMRL beats
    both this and 1, so that a world model whose only merit is a smaller real batch is not credited."""

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
            lines += [
                f"f* = {self.f_star:.3f} ({ci(self.f_star_ci, '.3f')}); recommended anchor fraction "
                f"{self.recommended_fraction:.3f}",
                f"predicted speedup over real-execution GRPO {self.predicted_speedup:.2f}x "
                f"({ci(self.predicted_speedup_ci, '.2f')}; "
                + (f"gradient noise scale / batch b = {self.noise_batch_ratio:.3g})" if self.noise_batch_ratio is not None
                   else f"noise scale not measured: {self.predicted_speedup_range[0]:.2f}x if every step is "
                        f"noise-limited, up to {self.predicted_speedup_range[1]:.2f}x if the batch is far above the "
                        "noise scale)"),
                "  a model, not a bound: it ignores the world model's bias (optimistic where bias survives the "
                "calibration) and values a world-model group at r^2 of a real one (pessimistic in every benchmark "
                "cell measured so far; docs/advisor_check.md)",
            ]
        return "\n".join(lines + [f"verdict: {self.verdict}"] + ([f"WARNING: {self.blind_spots['warning']}"] if self.blind_spots and self.blind_spots.get("warning") else []))


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
            if _finite(a) and _finite(b):
                gid.append(i)
                xs.append(float(a))
                ys.append(float(b))
                us.append(float(c) if _finite(c) else float(a))
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
        if not (_finite(f_min) and _finite(f_max) and 0.0 <= f_min <= f_max <= 1.0):
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
        clean = [[float(x) if isinstance(x, (bool, np.bool_)) or _finite(x) else None for x in seq]
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
        return _map_groups(wm, calibrate)

    def advise(self, costs: CostRates, *, calibrate: Callable[[Scores], Sequence[float]] | str | None = None,
               noise_batch_ratio: float | None = None) -> AnchorAdvice:
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

        Returns:
            An :class:`AnchorAdvice`; its verdict says "not enough anchor groups" (and
            ``use_wmrl`` is False) below ``min_groups`` usable groups or when the correlation is
            undefined for want of spread in the raw world-model or the real scores. When a
            calibration map (``calibrate`` not ``None``) flattens world-model scores that vary
            within groups as the real ones do, the increasing map found no increasing relation:
            ``r`` is 0 (``r <= 0``), ``use_wmrl`` is False and the verdict says the world model
            carries no usable signal.
        """
        if not isinstance(costs, CostRates):
            raise TypeError(f"costs must be a CostRates (e.g. CostRates.from_ledger(ledger)), got {type(costs).__name__}")
        b = _check_b(noise_batch_ratio)
        b = None if math.isinf(b) else b
        wm = self._calibrated(calibrate)
        _, real = self.groups()
        r, n = pooled_within_group_correlation(wm, real)
        # a map that flattened scores which vary (raw and real) is evidence of r <= 0, not missing data
        flat_raw_r = (_flat_map_raw_r(self.groups()[0], wm, real) if n >= self.min_groups and calibrate is not None
                      else float("nan"))
        if math.isfinite(flat_raw_r):
            r = 0.0
        n_pairs = sum(1 for w, x in zip(wm, real) for a, b in zip(w, x) if a is not None and b is not None)
        nan2 = (float("nan"), float("nan"))
        if n < self.min_groups or not math.isfinite(r):
            why = (f"{n} usable anchor groups, need {self.min_groups}" if n < self.min_groups
                   else "no within-group spread in the world-model or the real scores yet")
            return AnchorAdvice(n, n_pairs, r, nan2, costs, float("nan"), nan2, float("nan"), float("nan"), nan2,
                                float("nan"), False, f"not enough anchor groups yet ({why}): collect more (a longer pilot, or a longer training run)",
                                self.blind_spots(), b)
        f_star = optimal_anchor_fraction(r, costs.gamma, b)
        rec = min(self.f_max, max(self.f_min, f_star))
        s = predicted_speedup(rec, r, costs, b)
        s_range = (predicted_speedup(rec, r, costs), predicted_speedup(rec, r, costs, 0.0))
        r_ci = f_ci = s_ci = nan2
        if self.n_boot and n >= 2:
            # groups resampled; with "crossfit" the map is fitted again on each resample, so the
            # interval carries the uncertainty of fitting it (a fixed map given by the caller cannot be)
            refit = calibrate == "crossfit"
            rs = _bootstrap_pooled_r(self.groups()[0] if refit else wm, real, self.n_boot,
                                     np.random.default_rng(self.seed), refit=refit,
                                     raw=None if refit or calibrate is None else self.groups()[0])
            fs, ss = [], []
            for rb in rs:
                fb = optimal_anchor_fraction(rb, costs.gamma, b)
                fs.append(fb)
                ss.append(predicted_speedup(min(self.f_max, max(self.f_min, fb)), rb, costs, b))
            if rs:
                r_ci, f_ci, s_ci = (tuple(float(v) for v in np.percentile(a, [2.5, 97.5])) for a in (rs, fs, ss))
        # what a smaller real batch gives by itself (real GRPO on rec·B groups per step): with a finite b
        # fewer real groups per step cost few extra steps, and a world model must beat that, not only 1
        s_small = 1.0 if b is None or rec <= 0 else (1.0 + b) / (rec + b)
        use = s > max(1.0, s_small)
        if not use and s > 1.0:
            verdict = (f"do not use WMRL: its predicted {s:.2f}x at anchor fraction {rec:.3f} is no more than real GRPO "
                       f"on {rec:.1%} of the groups per step gives by itself ({s_small:.2f}x with b = {b:.3g}; r = "
                       f"{r:.2f}): the world model adds nothing, train on real execution with fewer groups per step")
        elif not use:
            verdict = (f"do not use WMRL: the predicted speedup at the best anchor fraction is {s:.2f}x <= 1 (r = {r:.2f}, "
                       f"gamma = {costs.gamma:.3g}); the world model is not worth its cost here, train on real execution")
            if math.isfinite(s_ci[1]) and s_ci[1] > 1.0:
                verdict += f"; uncertain: the interval reaches {s_ci[1]:.2f}x, collect more anchor groups to be sure"
        else:
            verdict = f"use WMRL at anchor fraction {rec:.3f} (predicted speedup {s:.2f}x)"
            if math.isfinite(s_ci[0]) and s_ci[0] <= 1.0:
                verdict += f"; uncertain: the interval reaches {s_ci[0]:.2f}x, collect more anchor groups to be sure"
        if math.isfinite(flat_raw_r):
            use = False
            verdict = (f"do not use WMRL: the world model carries no usable signal within groups (its calibration map "
                       f"is flat: its scores do not rise with the real ones, raw within-group r = {flat_raw_r:.2f}; "
                       "r counts as 0); train on real execution")
        return AnchorAdvice(n, n_pairs, r, r_ci, costs, f_star, f_ci, rec, s, s_ci, 1.0 / s if s > 0 else float("inf"),
                            use, verdict, self.blind_spots(), b, s_range, s_small)

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
            clean = [float(x) if isinstance(x, (bool, np.bool_)) or _finite(x) else None for x in w]
            self._groups[i] = (clean, self._groups[i][1])
        return len(items)


def _flat_map_raw_r(raw: Sequence[Scores], calibrated: Sequence[Scores], real: Sequence[Scores]) -> float:
    """The raw within-group correlation when an increasing calibration map flattened the world
    model's scores, else NaN.

    Flattened: the calibrated scores have no within-group spread while the raw and the real scores
    do. Isotonic regression pools an increasing map into a constant where the data show no
    increasing relation, so this is evidence of ``r <= 0`` (e.g. an anti-correlated world model),
    not of missing data (which leaves the raw or the real side without spread as well).
    """
    if math.isfinite(pooled_within_group_correlation(calibrated, real)[0]):
        return float("nan")
    return pooled_within_group_correlation(raw, real)[0]


def _r_bounds(wm: Sequence[Scores], real: Sequence[Scores], raw: Sequence[Scores] | None = None,
              z: float = 1.645) -> tuple[float, float] | None:
    """One-sided 95% lower and upper confidence bounds of the pooled within-group correlation
    (Fisher z with pairs − groups degrees of freedom).

    Returns ``(0.0, 0.0)`` when a calibration map flattened scores that vary (``raw`` given:
    :func:`_flat_map_raw_r`, evidence of ``r <= 0``, which counts as 0) and ``None`` when r is
    undefined otherwise (no evidence either way).
    """
    r, _ = pooled_within_group_correlation(wm, real)
    if not math.isfinite(r):
        return (0.0, 0.0) if raw is not None and math.isfinite(_flat_map_raw_r(raw, wm, real)) else None
    dof = sum(max(0, sum(a is not None and b is not None for a, b in zip(w, x)) - 1) for w, x in zip(wm, real))
    zr, half = math.atanh(max(-0.999999, min(0.999999, r))), z / math.sqrt(max(1.0, dof - 2.0))
    return math.tanh(zr - half), math.tanh(zr + half)


def _map_groups(wm: Sequence[Scores], calibrate: Callable[[Scores], Sequence[float]] | str) -> list[list[float | None]]:
    """Each group's world-model scores through a fitted map (``None`` stays ``None``)."""
    if isinstance(calibrate, str):
        raise ValueError(f"calibrate must be None, 'crossfit' or a callable, got {calibrate!r}")
    out = []
    for w in wm:
        cal = [float(v) for v in calibrate([x if x is not None else float("nan") for x in w])]
        out.append([c if x is not None and math.isfinite(c) else None for x, c in zip(w, cal)])
    return out


_CONFIRM_STEPS = 3
"""``anchor_fraction="auto"`` lowers the fraction only when that is called for on this many consecutive
steps (it raises it at once)."""

_CALIBRATION_GROUPS = 256
"""``anchor_fraction="auto"`` cross-fits its isotonic map on the last this many anchor groups (a
bounded cost per step; the correlation itself is taken over the last ``window``)."""


_CHANGE_Z = 4.0
"""``anchor_fraction="auto"`` declares a change point when r over the most recent anchor groups lies
this many standard errors (Fisher z) below r over the groups before them."""


def _change_point(wm: Sequence[Scores], real: Sequence[Scores], min_side: int, z_crit: float = _CHANGE_Z
                  ) -> tuple[int, float] | None:
    """Where the world model got worse: the split of the groups into older and recent ones at which
    r over the recent ones lies furthest below r over the older ones, if that is significant.

    For every split with at least ``min_side`` usable groups (2+ rollouts scored both ways) on each
    side, the statistic is ``(atanh(r_old) − atanh(r_new)) / sqrt(1/(d_old − 2) + 1/(d_new − 2))``
    (pooled within-group correlations, d = pairs − groups as in :func:`_r_bounds`).

    Returns:
        ``(k, z)``: the last ``k`` groups are the ones after the change point and ``z`` its
        statistic (the largest over the splits, ``> z_crit``), or ``None`` (no significant drop).
    """
    st = []  # per group: usable, pairs, sxx, syy, sxy (within-group centred)
    for w, x in zip(wm, real):
        both = [(float(a), float(b)) for a, b in zip(w, x) if _finite(a) and _finite(b)]
        if len(both) < 2:
            st.append((0, 0, 0.0, 0.0, 0.0))
            continue
        v = np.array(both)
        v -= v.mean(axis=0)
        st.append((1, len(both), float(v[:, 0] @ v[:, 0]), float(v[:, 1] @ v[:, 1]), float(v[:, 0] @ v[:, 1])))
    if sum(t[0] for t in st) < 2 * min_side:
        return None
    total = np.sum(np.array(st, dtype=float), axis=0)
    suffix = np.cumsum(np.array(st[::-1], dtype=float), axis=0)  # suffix[k - 1]: the last k groups

    def z_and_var(t: np.ndarray) -> tuple[float, float] | None:
        used, pairs, sxx, syy, sxy = t
        if sxx <= 1e-12 or syy <= 1e-12:
            return None
        r = max(-0.999999, min(0.999999, sxy / math.sqrt(sxx * syy)))
        return math.atanh(r), 1.0 / max(1.0, pairs - used - 2.0)

    best: tuple[int, float] | None = None
    for k in range(1, len(st)):
        new, old = suffix[k - 1], total - suffix[k - 1]
        if new[0] < min_side:
            continue
        if old[0] < min_side:
            break
        a, b = z_and_var(old), z_and_var(new)
        if a is None or b is None:
            continue
        z = (a[0] - b[0]) / math.sqrt(a[1] + b[1])
        if z > z_crit and (best is None or z > best[1]):
            best = (k, z)
    return best


class ExecutionBudgetSpent(RuntimeError):
    """The run's execution budget is spent and ``on_budget_spent="stop"``: training must stop."""


class AdaptiveAnchorFraction:
    """``anchor_fraction="auto"``: the anchor fraction follows the advisor's f* during training.

    Once per training step (:meth:`~wmrl_envs.core.CorrectionLoop.plan_step`), before the step's
    routes are drawn:

    1. until the advisor holds ``min_groups`` usable anchor groups (the warm-up) the fraction is
       ``start``;
    2. the cost ratio γ is ``cost_ratio`` when given (e.g. the pilot's, from ``wmrl advise``), else
       measured once from the run's ledger at the end of the warm-up
       (:meth:`CostRates.from_ledger`, CPU-seconds) and fixed from then on, so that the routes
       depend only on the seed and γ (both saved with the state);
    3. r is the pooled within-group correlation of the last ``window`` anchor groups; when the run
       debiases (``calibrate="crossfit"``) the world-model scores are calibrated out of sample
       first (:func:`crossfit_calibrated` over the last 256 anchor groups held: each group mapped
       by an isotonic fit on the other fold's pairs). A map that flattens world-model scores
       which vary within groups as the real ones do is evidence of ``r <= 0``: r counts as 0
       (recorded as 0 in :attr:`history`), not as missing data;
    4. a dead band, not a point target: r's one-sided 95% lower bound L over the window and upper
       bound U, the lower of the upper bounds over the window and over its last ``min_groups``
       groups (a world model that breaks is not hidden for long by the window's older groups;
       Fisher z, degrees of freedom = pairs − groups), give the fractions the data still allow,
       ``[clip(f*(U)), clip(f*(L))]`` (:func:`optimal_anchor_fraction` with γ and ``b``, clipped to
       [f_min, f_max]; f* falls as r rises). The fraction stays while it lies in that range and
       moves only when it lies outside by more than a factor ``1 + hysteresis`` (up at once when
       even the optimistic U calls for more anchors; down when even the pessimistic L allows fewer
       on 3 consecutive steps), and then to the conservative end ``clip(f*(L))``. Following ``clip(f*(L))`` at every step (the
       rule before issue 25) made it jump between f_min and f_max whenever L crossed f*'s switch
       point; ``benchmarks/adaptive_fraction.py`` measures both;
    5. an ``execution_budget`` (real executions) caps the anchor groups of a step to what is
       left of it, counting what an anchor group and a world-model group cost in executions (as
       measured so far: a multi-turn episode or a reward-mode episode executes once per turn or
       step, and in reward mode world-model groups execute as well) and what the groups opened
       and not yet closed will still execute (the caller passes both, see :meth:`step`); once
       what is left cannot pay the step, ``on_budget_spent="floor"`` keeps only the router's
       floor of ``min_anchor_groups`` per window (said once, as a warning) and ``"stop"`` raises
       :class:`ExecutionBudgetSpent`.

    Args:
        start, f_min, f_max: fractions in [0, 1] with ``f_min <= f_max``; ``start`` is clipped to
            [f_min, f_max].
        cost_ratio: γ (>= 0) or ``None`` (measured at the end of the warm-up).
        noise_batch_ratio: ``B_noise / B`` of real-execution GRPO (>= 0, e.g. from a pilot with
            :class:`GradientNoiseScale`) or ``None`` (unknown: the noise-limited form, which sends
            the fraction to ``f_min`` for a useful world model and to ``f_max`` for a useless one).
        window: anchor groups the online r is taken over (>= 2).
        min_groups: usable groups in the window before the fraction adapts (>= 2).
        hysteresis: how far (a factor ``1 + hysteresis``) the fraction must lie outside the range
            r's bounds allow before it moves (>= 0).
        execution_budget: real executions allowed (>= 1) or ``None``.
        on_budget_spent: ``"floor"`` or ``"stop"``.

    Attributes:
        fraction: the fraction in force.
        gamma: the cost ratio in use (``None`` until known).
        history: ``[(step, fraction, r)]``, one entry per adapted step (r NaN in the warm-up, 0
            where a flattening map showed ``r <= 0``).
        budget_spent: whether the execution budget is spent.
        group_executions: ``{"anchor": [executions, groups], "world_model": [...]}`` of the closed
            training groups (:meth:`note_group`, fed by the loop).

    Raises:
        ValueError: a setting out of range.
    """

    def __init__(self, *, start: float = 0.1, f_min: float = 0.02, f_max: float = 0.5, cost_ratio: float | None = None,
                 noise_batch_ratio: float | None = None, window: int = 16, min_groups: int = 8, hysteresis: float = 0.25, execution_budget: int | None = None,
                 on_budget_spent: str = "floor") -> None:
        if not (_finite(f_min) and _finite(f_max) and 0.0 <= f_min <= f_max <= 1.0):
            raise ValueError(f"need 0 <= f_min <= f_max <= 1, got f_min={f_min!r}, f_max={f_max!r}")
        if not (_finite(start) and 0.0 <= start <= 1.0):
            raise ValueError(f"start must be an anchor fraction in [0, 1], got {start!r}")
        if cost_ratio is not None and not (_finite(cost_ratio) and cost_ratio >= 0):
            raise ValueError(f"cost_ratio must be a number >= 0 (world model + generation + update per rollout over one "
                             f"execution) or None (measured), got {cost_ratio!r}")
        for name, v, lo in (("window", window, 2), ("min_groups", min_groups, 2)):
            if not (isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= lo):
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if min_groups > window:
            raise ValueError(f"min_groups ({min_groups}) must not exceed window ({window}): the window would never "
                             "hold enough groups to adapt")
        if not (_finite(hysteresis) and hysteresis >= 0):
            raise ValueError(f"hysteresis must be a number >= 0, got {hysteresis!r}")
        if execution_budget is not None and not (isinstance(execution_budget, numbers.Integral)
                                                 and not isinstance(execution_budget, bool) and execution_budget >= 1):
            raise ValueError(f"execution_budget must be an integer number of real executions >= 1 or None, got "
                             f"{execution_budget!r}")
        if on_budget_spent not in ("floor", "stop"):
            raise ValueError(f"on_budget_spent must be 'floor' or 'stop', got {on_budget_spent!r}")
        self.f_min, self.f_max = float(f_min), float(f_max)
        self.start = float(min(self.f_max, max(self.f_min, start)))
        self.cost_ratio = None if cost_ratio is None else float(cost_ratio)
        b = _check_b(noise_batch_ratio)
        self.noise_batch_ratio = None if math.isinf(b) else b
        self.window, self.min_groups, self.hysteresis = int(window), int(min_groups), float(hysteresis)
        self.execution_budget = None if execution_budget is None else int(execution_budget)
        self.on_budget_spent = on_budget_spent
        self.fraction = self.start
        self.gamma: float | None = self.cost_ratio
        self.history: list[tuple[int, float, float]] = []
        self.budget_spent = False
        self._pending = [0, 0]  # [direction of the move called for (+1 up, -1 down, 0 none), consecutive steps]
        self._since: int | None = None  # the advisor's count of groups added at the last change point
        self.change_points: list[tuple[int, int]] = []
        # real executions of the closed training groups, per route: [executions, groups]
        self.group_executions: dict[str, list[int]] = {"anchor": [0, 0], "world_model": [0, 0]}

    def note_group(self, route: str, executions: int) -> None:
        """Count the real executions one closed training group of ``route`` (``"anchor"`` or
        ``"world_model"``) made: what :meth:`executions_per_group` measures."""
        if route in self.group_executions:
            self.group_executions[route][0] += max(0, int(executions))
            self.group_executions[route][1] += 1

    def executions_per_group(self, route: str) -> float | None:
        """Mean real executions of a closed training group of ``route`` (``None`` before the first
        one closed): G × turns for a multi-turn anchor group, 0 for a world-model group in outcome
        mode, G × steps for any group in reward mode."""
        e, n = self.group_executions.get(route, (0, 0))
        return e / n if n else None

    def bounds(self, advisor: AnchorAdvisor, calibrate: Callable[[Scores], Sequence[float]] | str | None = None
               ) -> tuple[float, float, float] | None:
        """``(r, L, U)`` from the advisor's last ``window`` groups (point estimate and the bounds of
        step 4 of the class docstring; r is 0 for a flattening map), or ``None`` in the warm-up
        (fewer than ``min_groups`` usable groups, r undefined, or γ unknown).

        Args:
            advisor: the run's advisor.
            calibrate: as in :meth:`AnchorAdvisor.advise` (``"crossfit"``: over the last 256
                groups held; a map; ``None``: raw scores).
        """
        return self._bounds(*self._held(advisor, calibrate), calibrate is not None)

    def _held(self, advisor: AnchorAdvisor, calibrate: Callable[[Scores], Sequence[float]] | str | None
              ) -> tuple[list[list[float | None]], list[list[float | None]], list[list[float | None]]]:
        """``(calibrated, real, raw)`` of the groups the rule uses: the last 256 held, none from
        before the last change point."""
        raw_all, real_all = advisor.groups()
        keep = min(len(raw_all), _CALIBRATION_GROUPS)
        if self._since is not None:
            keep = min(keep, max(0, advisor.added - self._since))
        raw_all, real_all = raw_all[len(raw_all) - keep:], real_all[len(real_all) - keep:]
        if calibrate is None:
            cal_all = raw_all
        elif calibrate == "crossfit":
            cal_all = crossfit_calibrated(raw_all, real_all)
        else:
            cal_all = _map_groups(raw_all, calibrate)
        return cal_all, real_all, raw_all

    def _bounds(self, cal_all: list[list[float | None]], real_all: list[list[float | None]],
                raw_all: list[list[float | None]], calibrated: bool) -> tuple[float, float, float] | None:
        w = self.window
        wm, real, raw = cal_all[-w:], real_all[-w:], raw_all[-w:]
        r, n = pooled_within_group_correlation(wm, real)
        if n < self.min_groups or self.gamma is None:
            return None
        full = _r_bounds(wm, real, raw if calibrated else None)
        if full is None:
            return None
        if not math.isfinite(r):
            r = 0.0  # a flattening map: r <= 0
        recent = self.min_groups  # the short window that catches a break: as many groups as the warm-up's
        short = _r_bounds(wm[-recent:], real[-recent:], raw[-recent:] if calibrated else None)
        return r, full[0], full[1] if short is None else min(full[1], short[1])

    def _clip(self, r: float) -> float:
        f = optimal_anchor_fraction(max(-1.0, min(1.0, r)), self.gamma, self.noise_batch_ratio)
        return min(self.f_max, max(self.f_min, f))

    def target(self, advisor: AnchorAdvisor, calibrate: Callable[[Scores], Sequence[float]] | str | None = None
               ) -> tuple[float | None, float]:
        """``(fraction the rule sets now, r)``: ``clip(f*(L))`` when the fraction in force lies
        outside the range ``[clip(f*(U)), clip(f*(L))]`` by more than the hysteresis factor, else
        the fraction in force (``None`` and NaN in the warm-up)."""
        return self._target(self.bounds(advisor, calibrate))

    def _target(self, b: tuple[float, float, float] | None) -> tuple[float | None, float]:
        if b is None:
            return None, float("nan")
        r, lo, hi = b
        most, fewest = self._clip(lo), self._clip(hi)  # anchors the pessimistic / optimistic r call for
        f, k = self.fraction, 1.0 + self.hysteresis
        if f > most * k or f * k < fewest:
            return most, r  # outside the range: to the conservative end
        return f, r

    def step(self, step: int, advisor: AnchorAdvisor, ledger: CostLedger,
             calibrate: Callable[[Scores], Sequence[float]] | str | None = None, *,
             anchor_cost: float | None = None, world_model_cost: float = 0.0, in_flight: float = 0.0,
             groups_in_step: int | None = None) -> tuple[float, int | None]:
        """Adapt before drawing the routes of training step ``step``.

        Args:
            step: the step's index (for :attr:`history`).
            advisor: the run's advisor (its groups so far).
            ledger: the run's ledger (executions so far; CPU-seconds for γ when not given).
            calibrate: ``"crossfit"`` (a run that debiases), a map, or ``None`` (raw scores).
            anchor_cost: real executions one anchor group costs (measured so far, e.g. G × turns);
                ``None``: the size of the last anchor group (one execution per rollout), or one
                anchor group at most while no anchor group has closed.
            world_model_cost: real executions one world-model group costs (0 in outcome mode; a
                reward-mode episode executes every step whatever its route).
            in_flight: real executions still to come from groups opened and not closed (not in
                the ledger yet: an anchor group running, on Ray or elsewhere).
            groups_in_step: the groups of the coming step (for the world-model groups' cost).

        Returns:
            ``(fraction, free_slots)``: the fraction for this step (0 once the budget is spent: the
            router's floor alone remains) and the anchor *groups* the budget still allows
            (``None``: no cap; the caller keeps the floor of ``min_anchor_groups`` out of the cap).

        Raises:
            ExecutionBudgetSpent: the budget is spent and ``on_budget_spent == "stop"``.
        """
        import warnings

        if self.gamma is None:
            usable = sum(1 for w, x in zip(*advisor.groups())
                         if sum(a is not None and b is not None for a, b in zip(w, x)) >= 2)
            if usable >= self.min_groups:
                try:
                    self.gamma = CostRates.from_ledger(ledger).gamma
                except ValueError:
                    pass  # no measured execution yet: measure later
        held = None
        if self.gamma is not None:
            held = self._held(advisor, calibrate)
            cp = _change_point(held[0], held[1], max(2, self.min_groups // 2))
            if cp is not None:
                # the world model got worse: forget the groups before the change point and the older
                # half of those after it (the split found tends to include a few groups from before
                # the change), and take at once the fraction the pessimistic r of the groups kept
                # calls for (when higher)
                k = (cp[0] + 1) // 2
                self._since = advisor.added - k
                self.change_points.append((int(step), cp[0]))
                held = (held[0][-k:], held[1][-k:], held[2][-k:])
                lo = _r_bounds(*held[:2], held[2] if calibrate is not None else None)
                if lo is not None and self._clip(lo[0]) > self.fraction:
                    self.fraction = self._clip(lo[0])
                self._pending = [0, 0]
        target, r = self._target(None if held is None else self._bounds(*held, calibrate is not None))
        if target is not None and target != self.fraction:
            # more anchors at once; fewer only once called for on _CONFIRM_STEPS consecutive steps
            way = 1 if target > self.fraction else -1
            self._pending = [way, self._pending[1] + 1 if self._pending[0] == way else 1]
            if way > 0 or self._pending[1] >= _CONFIRM_STEPS:
                self.fraction = target
                self._pending = [0, 0]
        else:
            self._pending = [0, 0]
        free_slots = None
        if self.execution_budget is not None:
            used = ledger.count(EXECUTION)
            g = anchor_cost if anchor_cost is not None else (len(advisor.groups()[1][-1]) if len(advisor) else None)
            n = 0 if groups_in_step is None else int(groups_in_step)
            wm_cost = max(0.0, float(world_model_cost))
            # what is left once the executions in flight and the step's world-model groups are paid for
            left = self.execution_budget - used - max(0.0, float(in_flight)) - n * wm_cost
            extra = None if g is None else max(0.0, float(g) - wm_cost)  # an anchor group's cost over a WM group's
            if g is None and left > 0:  # group cost not known yet: one anchor group at most
                free_slots = 1
            elif left <= 0 or (extra is not None and extra > 0 and left < extra):
                if not self.budget_spent:
                    self.budget_spent = True
                    if self.on_budget_spent == "stop":
                        raise ExecutionBudgetSpent(
                            f"the execution budget is spent ({used} of {self.execution_budget} real executions, "
                            f"{in_flight:.0f} more in flight); training stops here (on_budget_spent='stop'; 'floor' "
                            "would go on with the anchor floor only)")
                    warnings.warn(f"the execution budget is spent ({used} of {self.execution_budget} real executions, "
                                  f"{in_flight:.0f} more in flight): from now on only the floor of min_anchor_groups "
                                  "anchor groups per window is executed"
                                  + (" (world-model groups execute too here, e.g. reward mode: only "
                                     "on_budget_spent='stop' keeps the budget)" if wm_cost > 0 else ""),
                                  UserWarning, stacklevel=3)
                elif self.on_budget_spent == "stop":
                    raise ExecutionBudgetSpent(f"the execution budget is spent ({used} of {self.execution_budget})")
                # spent: the fraction is 0 and only the router's floor remains (never capped)
            elif extra is not None and extra > 0:
                free_slots = int(left // extra)
        self.history.append((int(step), 0.0 if self.budget_spent else self.fraction, r))
        return (0.0 if self.budget_spent else self.fraction), free_slots

    def state_dict(self) -> dict[str, Any]:
        """Settings, the fraction in force, γ, the history, the budget flag and the move pending
        confirmation (JSON-serialisable)."""
        return {"start": self.start, "f_min": self.f_min, "f_max": self.f_max, "cost_ratio": self.cost_ratio,
                "noise_batch_ratio": self.noise_batch_ratio, "window": self.window, "min_groups": self.min_groups, "hysteresis": self.hysteresis,
                "execution_budget": self.execution_budget, "on_budget_spent": self.on_budget_spent,
                "fraction": self.fraction, "gamma": self.gamma,
                # strict JSON: an r not estimated yet (NaN) is written as null
                "history": [[s, f, r if math.isfinite(r) else None] for s, f, r in self.history],
                "budget_spent": self.budget_spent, "pending": list(self._pending),
                "since": self._since, "change_points": [list(c) for c in self.change_points],
                "group_executions": {k: list(v) for k, v in self.group_executions.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output.

        Raises:
            KeyError: a key is missing. ValueError: a setting out of range; nothing changed then.
        """
        fresh = AdaptiveAnchorFraction(start=state["start"], f_min=state["f_min"], f_max=state["f_max"],
                                       cost_ratio=state["cost_ratio"],
                                       noise_batch_ratio=state.get("noise_batch_ratio"),  # absent before it existed
                                       window=state["window"],
                                       min_groups=state["min_groups"], hysteresis=state["hysteresis"],
                                       execution_budget=state["execution_budget"],
                                       on_budget_spent=state["on_budget_spent"])
        if not (_finite(state["fraction"]) and 0.0 <= float(state["fraction"]) <= 1.0):
            raise ValueError(f"a saved adaptive anchor fraction must be in [0, 1], got {state['fraction']!r}")
        if float(state["fraction"]) > 0 and not fresh.f_min <= float(state["fraction"]) <= fresh.f_max:
            raise ValueError(f"a saved adaptive anchor fraction {state['fraction']!r} lies outside its own "
                             f"[f_min, f_max] = [{fresh.f_min}, {fresh.f_max}]: the state is inconsistent")
        if state["gamma"] is not None and not (_finite(state["gamma"]) and float(state["gamma"]) >= 0):
            raise ValueError(f"a saved cost ratio gamma must be None or a number >= 0, got {state['gamma']!r}")
        if not all(isinstance(h, (list, tuple)) and len(h) == 3 for h in state["history"]):
            raise ValueError("a saved adaptive history must be a list of [step, fraction, r] entries")
        fresh.fraction = float(state["fraction"])
        fresh.gamma = None if state["gamma"] is None else float(state["gamma"])
        fresh.history = [(int(s), float(f), float("nan") if r is None else float(r)) for s, f, r in state["history"]]
        fresh.budget_spent = bool(state["budget_spent"])
        pending = state.get("pending") or [0, 0]  # absent before issue 25: no move pending
        if not (isinstance(pending, (list, tuple)) and len(pending) == 2 and pending[0] in (-1, 0, 1)
                and isinstance(pending[1], numbers.Integral) and pending[1] >= 0):
            raise ValueError(f"a saved pending move must be [direction -1/0/1, steps >= 0], got {pending!r}")
        fresh._pending = [int(pending[0]), int(pending[1])]
        since = state.get("since")  # absent before change points: none detected
        if since is not None and not (isinstance(since, numbers.Integral) and not isinstance(since, bool) and since >= 0):
            raise ValueError(f"a saved change point must be None or a count of anchor groups >= 0, got {since!r}")
        fresh._since = None if since is None else int(since)
        cps = state.get("change_points") or []
        if not all(isinstance(c, (list, tuple)) and len(c) == 2 for c in cps):
            raise ValueError(f"saved change points must be [step, groups after it] entries, got {cps!r}")
        fresh.change_points = [(int(a), int(b)) for a, b in cps]
        counts = state.get("group_executions") or {}  # absent before issue 25: nothing measured yet
        for route, v in counts.items():
            if route not in fresh.group_executions or not (
                    isinstance(v, (list, tuple)) and len(v) == 2
                    and all(isinstance(x, numbers.Integral) and not isinstance(x, bool) and x >= 0 for x in v)):
                raise ValueError(f"saved group executions must be {{route: [executions, groups]}}, got {counts!r}")
            fresh.group_executions[route] = [int(v[0]), int(v[1])]
        self.__dict__.update(fresh.__dict__)
