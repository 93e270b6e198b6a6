"""The closed forms behind the anchor-fraction advice (``docs/method.md``, "Choosing the anchor fraction").

The within-group correlation r of world-model and real scores (:func:`pooled_within_group_correlation`,
out of sample with :func:`crossfit_calibrated`, one-sided bounds with :func:`r_confidence_bounds`),
the per-rollout costs (:class:`CostRates`, read from a :class:`~wmrl_envs.core.CostLedger`), the
gradient noise scale of real-execution GRPO (:class:`GradientNoiseScale`), and from them the predicted
speedup (:func:`predicted_speedup`) and the anchor fraction that maximises it
(:func:`optimal_anchor_fraction`). :class:`~wmrl_envs.core.advisor.AnchorAdvisor` applies them to
the anchor groups of a run; :class:`~wmrl_envs.core.adaptive.AdaptiveAnchorFraction` follows them
during training. All are importable from :mod:`wmrl_envs.core.advisor` as well.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .ledger import EXECUTION, GENERATION, UPDATE, WORLD_MODEL_SOURCE, CostLedger

__all__ = [
    "CostRates",
    "GradientNoiseScale",
    "Scores",
    "check_noise_batch_ratio",
    "crossfit_calibrated",
    "flat_map_raw_r",
    "is_finite_number",
    "map_groups",
    "optimal_anchor_fraction",
    "pooled_within_group_correlation",
    "predicted_speedup",
    "r_confidence_bounds",
    "STEP_LAWS",
    "check_step_law",
    "steps_ratio",
]

Scores = Sequence[float | None]


def is_finite_number(x: object) -> bool:
    """Whether ``x`` is a finite real number (a bool is not)."""
    if type(x) is float:  # the common case, without the abstract-class check (hot in the cross-fit)
        return math.isfinite(x)
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(float(x))


def _check_r(r: float) -> float:
    if not is_finite_number(r) or not -1.0 <= float(r) <= 1.0:
        raise ValueError(f"r must be a correlation in [-1, 1], got {r!r}")
    return float(r)


@dataclass(frozen=True)
class CostRates:
    """Cost of one rollout per source, in seconds or another unit (when read from a ledger: the
    ledger's cost basis, CPU-seconds by default; the ``_s`` names are historical).

    Attributes:
        execution_s: one real execution (> 0).
        world_model_s: one world-model prediction (>= 0).
        other_s: what every rollout costs under any method: generation and the policy update,
            per rollout (>= 0).
        unit: ``"CPU-s"``, ``"wall-clock s"`` or a declared price's unit (what the figures are).

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
            if not is_finite_number(v) or v < 0:
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
    def from_ledger(cls, ledger: CostLedger, *, cpu: bool | None = None) -> CostRates:
        """Per-rollout costs measured in a run: each source's cost divided by its count.

        ``execution`` and ``world_model`` are counted per rollout by the wrappers; generation and
        update are spread over the rollouts generated (``generation``'s count, or the world
        model's when no generation was recorded). With CPU-seconds, executions whose CPU could
        not be measured are left out of the execution average (their count too).

        Args:
            ledger: the run's cost ledger.
            cpu: ``None`` (default): the ledger's own cost basis
                (:attr:`CostLedger.cost_basis <wmrl_envs.core.CostLedger>`: CPU-seconds unless the
                run chose wall-clock or a price per call); ``True``: CPU-seconds; ``False``:
                wall-clock seconds.

        Raises:
            ValueError: the ledger has no execution with a measured cost, or no world-model call
                (nothing to compare); a ``"per_call"`` ledger without a price for a source it counts.
        """
        if cpu is not None and ledger.cost_basis != ("cpu" if cpu else "wall"):
            view = CostLedger("cpu" if cpu else "wall")
            view.merge(ledger)
            ledger = view
        n_exec = ledger.cost_count(EXECUTION)
        if n_exec <= 0 or ledger.cost(EXECUTION) <= 0:
            raise ValueError("the ledger has no real execution with a measured cost: run anchor groups first")
        n_wm = ledger.count(WORLD_MODEL_SOURCE)
        if n_wm <= 0:
            raise ValueError("the ledger has no world-model prediction: run world-model groups first")
        n_roll = ledger.count(GENERATION) or n_wm
        return cls(
            execution_s=ledger.cost(EXECUTION) / n_exec,
            world_model_s=ledger.cost(WORLD_MODEL_SOURCE) / n_wm,
            other_s=(ledger.cost(GENERATION) + ledger.cost(UPDATE)) / n_roll,
            unit=ledger.cost_unit,
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
        both = [(float(a), float(b)) for a, b in zip(w, r) if is_finite_number(a) and is_finite_number(b)]
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
    ok = [[is_finite_number(a) for a in w] for w in world_model]
    pairs = [[(float(a), float(b)) for a, b, f in zip(w, r, o) if f and is_finite_number(b)]
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


STEP_LAWS = ("adam", "sgd")
"""How the steps to a target grow with gradient noise (``docs/method.md``, "Choosing the anchor
fraction"): ``"adam"`` (default), an RMS-normalised optimiser (Adam, AdamW, RMSprop) at a fixed
learning rate, steps ``∝ sqrt(1 + B_noise/B)``; ``"sgd"``, McCandlish et al.'s law for SGD with its
learning rate retuned for every batch, steps ``∝ 1 + B_noise/B``."""


def check_step_law(step_law: str) -> str:
    """``step_law`` if it is one of :data:`STEP_LAWS`.

    Raises:
        ValueError: another value.
    """
    if step_law not in STEP_LAWS:
        raise ValueError(f"step_law must be one of {STEP_LAWS} (the optimiser: 'adam' for Adam/AdamW/RMSprop at a "
                         f"fixed learning rate, 'sgd' for SGD retuned per batch), got {step_law!r}")
    return step_law


def steps_ratio(q: float, noise_batch_ratio: float | None = None, step_law: str = "adam") -> float:
    """Real-execution GRPO's steps to the target over those of a batch worth ``q`` of its own.

    ``step_law="adam"``: ``sqrt((1 + b) / (1 + b / q))``; ``"sgd"``: ``(1 + b) / (1 + b / q)``;
    ``b → ∞`` (``None``): ``sqrt(q)`` and ``q``. ``q`` may exceed 1 (a larger real batch).

    Args:
        q: the batch's worth in real groups over real GRPO's batch (>= 0; 0: no signal, ratio 0).
        noise_batch_ratio: ``b = B_noise / B`` of real GRPO's batch, >= 0; ``None``: ``∞``.
        step_law: one of :data:`STEP_LAWS`.

    Raises:
        ValueError: ``q`` negative or NaN, a bad ``b`` or ``step_law``.

    Example:
        >>> round(steps_ratio(0.125, 15.86 / 16), 2), round(steps_ratio(0.125, 15.86 / 16, "sgd"), 2)
        (0.47, 0.22)
    """
    check_step_law(step_law)
    if not (isinstance(q, numbers.Real) and q >= 0):
        raise ValueError(f"q must be a batch's worth >= 0, got {q!r}")
    if q <= 0:
        return 0.0
    b = check_noise_batch_ratio(noise_batch_ratio)
    lin = q if math.isinf(b) else (1.0 + b) / (1.0 + b / q)
    return math.sqrt(lin) if step_law == "adam" else lin


def optimal_anchor_fraction(r: float, gamma: float, noise_batch_ratio: float | None = None,
                            step_law: str = "adam", rho: float | None = None) -> float:
    """The anchor fraction that maximises :func:`predicted_speedup` (the GRPO-specific optimum).

    Maximises ``steps_ratio(q(f), b) / (f + γ)`` with ``q(f) = f + (1 − f) r²`` over ``f`` in
    [0, 1] (:func:`steps_ratio`; the argmax over a grid: 0 and 2001 log-spaced fractions from 1e-4
    to 1; where the objective is flat, as for ``r = 0`` with ``γ = 0``, the grid's first maximum).
    With Adam's step law and no noise scale (``b → ∞``) the objective is ``sqrt(q) / (f + γ)``,
    maximal at ``f* = max(0, γ − 2r² / (1 − r²))``: at most γ, and 0 once a world-model group is
    worth its cost; with SGD's (``step_law="sgd"``) it is ``q / (f + γ)``, monotone in ``f``: 0
    when ``r² > γ (1 − r²)`` and 1 otherwise. With a finite ``b`` the optimum can lie inside; for
    a useless world model (``r = 0``) under SGD's law it is ``sqrt(γ b)``. Textbook double sampling
    (Cochran; ``ppi_py``'s power analysis) gives ``sqrt(γ (1 − r²) / r²)`` instead, because there
    the world model's predictions enter only through a difference estimator that the anchors make
    unbiased; WMRL trains on the calibrated world-model scores directly, so its world-model groups
    add signal ``r²`` each rather than buying variance reduction with anchors (``docs/method.md``,
    "Choosing the anchor fraction"). The model ignores the world model's bias, which is what
    anchors are also for: clip the answer to a floor (``f_min``).

    Args:
        r: within-group correlation of (calibrated) world-model and real scores, in [-1, 1]
            (``r <= 0`` counts as 0: isotonic calibration cannot flip a sign).
        gamma: (world model + generation + update) cost per rollout over one execution's, >= 0.
        noise_batch_ratio: ``b = B_noise / B`` >= 0 (:class:`GradientNoiseScale`); ``None``: ``∞``.
        step_law: the optimiser's step law (:data:`STEP_LAWS`).
        rho: the weight of the anchor groups' advantages the run will train with; ``None``: the
            inverse-variance optimum ``1/r``, where a step is worth ``q = f + (1 − f) r²``. A
            fixed ``ρ`` gives ``q = (ρf + (1 − f) r)² / (ρ² f + 1 − f)`` (the weighted sum's signal
            over its noise; equal at ``ρ = 1/r``): world-model groups without signal still add
            their noise, so at ``r = 0`` and Adam's law f* is about sqrt(2γ/3) (ρ = 2, γ = 0.01:
            0.087) instead of γ (``benchmarks/auto_step_law.py`` trains both).

    Returns:
        f* in [0, 1] (0: no anchors needed for the variance; the floor decides).

    Raises:
        ValueError: ``r`` outside [-1, 1], ``gamma`` negative, ``noise_batch_ratio`` negative or
            NaN, an unknown ``step_law``.

    Example:
        >>> optimal_anchor_fraction(0.8, 0.01), optimal_anchor_fraction(0.0, 0.01, step_law="sgd")
        (0.0, 1.0)
        >>> round(optimal_anchor_fraction(0.0, 0.01), 3)   # γ: Adam's law, r = 0, b = ∞
        0.01
        >>> round(optimal_anchor_fraction(0.0, 0.01, noise_batch_ratio=1.0, step_law="sgd"), 2)   # sqrt(γ b)
        0.1
    """
    r = _check_r(r)
    if not is_finite_number(gamma) or gamma < 0:
        raise ValueError(f"gamma must be a cost ratio >= 0, got {gamma!r}")
    b = check_noise_batch_ratio(noise_batch_ratio)
    check_step_law(step_law)
    if rho is not None and not (is_finite_number(rho) and rho > 0):
        raise ValueError(f"rho must be an anchor weight > 0 (or None: the optimum 1/r), got {rho!r}")
    r2 = max(0.0, r) ** 2
    f = _F_GRID
    if rho is None:
        q = f + (1.0 - f) * r2
    else:
        q = (rho * f + (1.0 - f) * max(0.0, r)) ** 2 / (rho * rho * f + 1.0 - f)
    with np.errstate(divide="ignore", invalid="ignore"):
        if math.isinf(b):
            lin = q
        else:
            lin = (1.0 + b) / (1.0 + np.where(q > 0, b / np.where(q > 0, q, 1.0), np.inf))
        obj = (np.sqrt(lin) if step_law == "adam" else lin) / (f + gamma)
    obj = np.where(np.isfinite(obj), obj, np.where(np.isnan(obj), -np.inf, obj))
    return float(f[int(np.argmax(obj))])


_F_GRID = np.concatenate([[0.0], np.logspace(-4.0, 0.0, 2001)])


def check_noise_batch_ratio(b: float | None) -> float:
    """``b = B_noise / B`` as a float (``None``: ``inf``).

    Raises:
        ValueError: ``b`` negative, NaN or not a number.
    """
    if b is None:
        return math.inf
    if isinstance(b, bool) or not isinstance(b, numbers.Real) or math.isnan(float(b)) or float(b) < 0:
        raise ValueError(f"noise_batch_ratio must be B_noise / B >= 0 (or None), got {b!r}")
    return float(b)


def predicted_speedup(f: float, r: float, costs: CostRates, noise_batch_ratio: float | None = None,
                      step_law: str = "adam") -> float:
    """Predicted compute-to-target speedup of WMRL at anchor fraction f over real-execution GRPO.

    ``S(f) = (c_other + c_exec) / (c_other + c_wm + f·c_exec) · steps_ratio(q, b)`` with
    ``q = f + (1 − f) r²``: the cost ratio per step times the ratio of steps to the target
    (:func:`steps_ratio`). WMRL's batch is worth ``q·B`` real groups: an anchor group counts fully,
    a world-model group as ``r²`` of one (the share of its advantages' variance that follows the
    real scores, with the anchor up-weight ρ at its inverse-variance optimum). The steps follow
    the gradient noise scale: with Adam at a fixed learning rate (``step_law="adam"``, default) an
    update is the gradient over its root mean square, so the expected progress per step is
    ``|G|² / sqrt(|G|² + tr(Σ)/B)`` and the steps grow as ``sqrt(1 + B_noise/B)``; McCandlish et
    al.'s ``1 + B_noise/B`` (2018, "An empirical model of large-batch training") holds for SGD
    with its learning rate retuned for every batch (``"sgd"``). On the known-truth map real GRPO
    at 8, 4, 2 and 1 groups per step needed 1.22, 1.58, 2.09 and 2.91 × the steps of 16 groups,
    Adam's law 1.22, 1.58, 2.12, 2.91, SGD's 1.50, 2.49, 4.48, 8.47
    (``benchmarks/advisor_root_cause.py``). ``b = B_noise / B`` is real-execution GRPO's gradient
    noise scale over its batch (:class:`GradientNoiseScale`): with ``b → 0`` the extra noise costs
    no steps and ``S`` is the cost ratio; with ``b → ∞`` (``None``) ``S`` is ``sqrt(q)`` (Adam) or
    ``q`` (SGD) × the cost ratio. It is a model, not a bound: it ignores the world model's bias
    (the corrections exist for it), which makes it optimistic where bias remains after calibration
    (blind spots, per-action bias). Its check against measured speedups: ``docs/advisor_check.md``;
    the derivation: ``docs/method.md``, "Choosing the anchor fraction".

    Args:
        f: anchor fraction in [0, 1] (0: world model only).
        r: within-group correlation, in [-1, 1] (``r <= 0`` counts as 0).
        costs: per-rollout costs.
        noise_batch_ratio: ``B_noise / B`` >= 0, both in groups; ``None``: ``∞``.
        step_law: the optimiser's step law (:data:`STEP_LAWS`).

    Returns:
        The predicted speedup (>= 0; ``(c_other + c_exec) / (c_other + c_wm + c_exec)`` < 1 at
        f = 1; ``inf`` when WMRL's step is free and its batch carries signal).

    Raises:
        ValueError: ``f`` outside [0, 1], ``r`` outside [-1, 1], ``noise_batch_ratio`` negative or
            NaN, an unknown ``step_law``.

    Example:
        >>> c = CostRates(1.0, 0.01)
        >>> round(predicted_speedup(0.1, 0.8, c), 2), round(predicted_speedup(0.1, 0.8, c, noise_batch_ratio=1.0), 2)
        (7.47, 8.17)
        >>> round(predicted_speedup(0.1, 0.8, c, noise_batch_ratio=1.0, step_law="sgd"), 2)
        7.33
    """
    if not is_finite_number(f) or not 0.0 <= f <= 1.0:
        raise ValueError(f"f must be an anchor fraction in [0, 1], got {f!r}")
    if not isinstance(costs, CostRates):
        raise TypeError(f"costs must be a CostRates (e.g. CostRates.from_ledger(ledger)), got {type(costs).__name__}")
    r2 = max(0.0, _check_r(r)) ** 2
    b = check_noise_batch_ratio(noise_batch_ratio)
    check_step_law(step_law)
    real = costs.other_s + costs.execution_s
    per_rollout = costs.other_s + costs.world_model_s + f * costs.execution_s
    q = f + (1.0 - f) * r2
    if q <= 0.0:  # world model only and no signal in its scores
        return 0.0
    steps = steps_ratio(q, b, step_law)  # real GRPO's steps over WMRL's
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
            if not is_finite_number(v) or float(v) < 0:
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


def flat_map_raw_r(raw: Sequence[Scores], calibrated: Sequence[Scores], real: Sequence[Scores]) -> float:
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


def r_confidence_bounds(wm: Sequence[Scores], real: Sequence[Scores], raw: Sequence[Scores] | None = None,
              z: float = 1.645) -> tuple[float, float] | None:
    """One-sided 95% lower and upper confidence bounds of the pooled within-group correlation
    (Fisher z with pairs − groups degrees of freedom).

    Returns ``(0.0, 0.0)`` when a calibration map flattened scores that vary (``raw`` given:
    :func:`flat_map_raw_r`, evidence of ``r <= 0``, which counts as 0) and ``None`` when r is
    undefined otherwise (no evidence either way).
    """
    r, _ = pooled_within_group_correlation(wm, real)
    if not math.isfinite(r):
        return (0.0, 0.0) if raw is not None and math.isfinite(flat_map_raw_r(raw, wm, real)) else None
    dof = sum(max(0, sum(a is not None and b is not None for a, b in zip(w, x)) - 1) for w, x in zip(wm, real))
    zr, half = math.atanh(max(-0.999999, min(0.999999, r))), z / math.sqrt(max(1.0, dof - 2.0))
    return math.tanh(zr - half), math.tanh(zr + half)


def map_groups(wm: Sequence[Scores], calibrate: Callable[[Scores], Sequence[float]] | str) -> list[list[float | None]]:
    """Each group's world-model scores through a fitted map (``None`` stays ``None``)."""
    if isinstance(calibrate, str):
        raise ValueError(f"calibrate must be None, 'crossfit' or a callable, got {calibrate!r}")
    out = []
    for w in wm:
        cal = [float(v) for v in calibrate([x if x is not None else float("nan") for x in w])]
        out.append([c if x is not None and math.isfinite(c) else None for x, c in zip(w, cal)])
    return out
