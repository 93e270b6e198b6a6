"""Compute-to-target speedup with a paired bootstrap confidence interval: the headline figure.

Every benchmark reports how much less training compute a method needs than real-execution GRPO
to reach the same held-out score (issue 11, item 1; the definition is in ``docs/method.md``,
"Compute-to-target speedup"):

1. :func:`target_score` — the target, from real GRPO's *mean* curve over seeds: the untrained
   policy's mean score plus ``gain_fraction`` (default 0.9) of real GRPO's mean gain up to a
   chosen snapshot (default: the last one every seed has evaluated).
2. :func:`compute_to_target` — per seed, the cumulative training compute (CPU-seconds) at which
   that seed's own curve first reaches the target, linearly interpolated between the two
   evaluated snapshots around the crossing; ``math.inf`` when the curve never reaches it
   ("not reached within budget", never a number).
3. :func:`speedup` — median over seeds of real GRPO's compute-to-target divided by the method's
   median (a seed that never reaches the target counts as beyond the budget in the median), with
   a 95% percentile bootstrap interval that resamples seed indices jointly for both methods
   (paired by seed). :class:`SpeedupEstimate` holds the result and formats it
   (``"3.1× [2.2, 4.5]"``, ``"3.1× [n.r., 4.5]"`` when the method is not reached in some
   resamples, ``"3.0× (1 seed, no CI)"`` or ``"not reached within budget (3/10 seeds reached)"``).
   :func:`speedup_over_best` — the same against the best of several references (e.g. real GRPO at
   several batch sizes), the best one chosen inside every bootstrap replicate.
4. :func:`speedup_table` — markdown rows of several methods against real GRPO.
5. :func:`interpolation_bracket` / :func:`bracket_share` — the two evaluated snapshots step 2
   interpolates between, and the compute between them as a share of the compute-to-target (how
   much of the figure is interpolation rather than measurement; issue 27 asks for at most 10%).

Scores are higher-is-better. The module is pure numpy (no gymnasium or torch import), so a
notebook or a report script can use it on saved curves. ``scipy.stats.bootstrap`` is not used:
the statistic (a ratio of medians that may be ``inf``, with the rule of :func:`median_ratio`
for a median that is ``inf``) needs the explicit resampling below.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Curve",
    "target_score",
    "compute_to_target",
    "interpolation_bracket",
    "bracket_share",
    "SpeedupEstimate",
    "speedup",
    "speedup_over_best",
    "speedup_table",
    "median_ratio",
    "percentile_inf",
]


# ---------------------------------------------------------------------------------------- curves
@dataclass(frozen=True, eq=False)
class Curve:
    """One method's held-out score at training snapshots, for one seed.

    Attributes:
        compute: float64 array, shape ``(n,)``: cumulative training compute at each snapshot, in
            CPU-seconds (evaluation is not training compute). ``compute[0] == 0`` is the initial
            (untrained) policy; non-decreasing; finite.
        score: float64 array, shape ``(n,)``: held-out score at each snapshot (higher is better);
            ``NaN`` marks a snapshot that was not evaluated (it is skipped). At least one
            snapshot must be evaluated; evaluated scores are finite.

    Both arrays are copied to read-only float64 arrays. Curves compare by identity (``==`` on
    arrays has no single truth value).

    Raises:
        ValueError: the arrays are not 1-D, have different lengths or are empty; ``compute`` has
            a non-finite value, does not start at 0 or decreases; ``score`` has ``±inf`` or no
            evaluated snapshot. The message names the offending index.

    Example:
        >>> c = Curve(compute=[0.0, 10.0, 20.0], score=[0.2, float("nan"), 0.8])
        >>> c.compute.dtype, len(c)
        (dtype('float64'), 3)
    """

    compute: np.ndarray
    score: np.ndarray

    def __post_init__(self) -> None:
        try:
            compute = np.array(self.compute, dtype=np.float64, copy=True)
            score = np.array(self.score, dtype=np.float64, copy=True)
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"Curve.compute and Curve.score must be sequences of numbers (CPU-seconds, scores), got "
                f"{type(self.compute).__name__} and {type(self.score).__name__} ({e})"
            ) from e
        if compute.ndim != 1 or score.ndim != 1:
            raise ValueError(
                f"Curve.compute and Curve.score must be 1-D (one value per snapshot), got shapes "
                f"{compute.shape} and {score.shape}"
            )
        if compute.shape != score.shape:
            raise ValueError(
                f"Curve.compute and Curve.score must have one value per snapshot each, got "
                f"{compute.size} compute values and {score.size} scores"
            )
        if compute.size == 0:
            raise ValueError("a Curve needs at least one snapshot (the initial policy at compute 0)")
        bad = np.flatnonzero(~np.isfinite(compute))
        if bad.size:
            raise ValueError(
                f"Curve.compute must be finite CPU-seconds, got {compute[bad[0]]} at snapshot {bad[0]}"
            )
        if compute[0] != 0.0:
            raise ValueError(
                f"Curve.compute[0] must be 0 (the initial policy, before any training), got {compute[0]}"
            )
        down = np.flatnonzero(np.diff(compute) < 0)
        if down.size:
            i = int(down[0]) + 1
            raise ValueError(
                f"Curve.compute must be non-decreasing (cumulative), but snapshot {i} has "
                f"{compute[i]} < {compute[i - 1]} at snapshot {i - 1}"
            )
        inf = np.flatnonzero(np.isinf(score))
        if inf.size:
            raise ValueError(
                f"Curve.score must be finite or NaN (not evaluated), got {score[inf[0]]} at snapshot {inf[0]}"
            )
        if np.isnan(score).all():
            raise ValueError("Curve.score has no evaluated snapshot (all NaN): there is nothing to read")
        compute.setflags(write=False)
        score.setflags(write=False)
        object.__setattr__(self, "compute", compute)
        object.__setattr__(self, "score", score)

    def __len__(self) -> int:
        return int(self.compute.size)

    def evaluated(self) -> tuple[np.ndarray, np.ndarray]:
        """``(compute, score)`` of the evaluated snapshots only (NaN scores removed), in order."""
        keep = ~np.isnan(self.score)
        return self.compute[keep], self.score[keep]

    def score_at(self, compute: float) -> float:
        """Held-out score at cumulative ``compute`` (CPU-seconds), linearly interpolated between
        the evaluated snapshots around it; at a compute shared by several snapshots, the last of
        them (the policy after every update charged so far).

        Raises:
            ValueError: ``compute`` is not finite, or lies outside
                ``[first evaluated compute, compute[-1] evaluated]`` (no extrapolation).
        """
        c, s = self.evaluated()
        x = float(compute)
        if not math.isfinite(x) or x < c[0] or x > c[-1]:
            raise ValueError(
                f"compute {compute!r} lies outside this curve's evaluated range [{c[0]}, {c[-1]}] "
                "CPU-seconds; a score is not extrapolated"
            )
        j = int(np.searchsorted(c, x, side="right"))  # first evaluated snapshot with compute > x
        if c[j - 1] == x:
            return float(s[j - 1])
        lo, hi = j - 1, j
        return float(s[lo] + (x - c[lo]) / (c[hi] - c[lo]) * (s[hi] - s[lo]))


def _check_curves(curves: Sequence[Curve], what: str) -> list[Curve]:
    curves = list(curves)
    if not curves:
        raise ValueError(f"{what} is empty: give one Curve per seed")
    for i, c in enumerate(curves):
        if not isinstance(c, Curve):
            raise ValueError(f"{what}[{i}] must be a Curve(compute=..., score=...), got {type(c).__name__}")
    return curves


def target_score(
    real_curves: Sequence[Curve],
    *,
    at_compute: float | None = None,
    steps_index: int | None = None,
    gain_fraction: float = 0.9,
    min_gain: float = 0.0,
) -> float:
    """The target held-out score: ``s0 + gain_fraction * (s_S - s0)`` on real GRPO's mean curve.

    ``s0`` is the mean over seeds of the initial policy's score (snapshot 0). ``s_S`` is the mean
    over seeds of the score at snapshot ``steps_index`` (default: the last snapshot index that
    every seed has and has evaluated) or, with ``at_compute``, of each seed's score at that
    cumulative compute (CPU-seconds, interpolated by :meth:`Curve.score_at`). Definition: issue
    11, item 1; ``docs/method.md``, "Compute-to-target speedup".

    Args:
        real_curves: real-execution GRPO's curves, one per seed.
        at_compute: read ``s_S`` at this compute instead of at a snapshot index.
        steps_index: read ``s_S`` at this snapshot index (``>= 1``; not with ``at_compute``).
        gain_fraction: share of real GRPO's gain the target asks for, in ``(0, 1]``.
        min_gain: the smallest gain ``s_S - s0`` (absolute, in score units, ``>= 0``) that counts
            as an improvement. Whatever it is, a gain of at most ``1e-9 × max(1, |s0|)`` is
            rounding, not learning, and counts as no gain.

    Returns:
        The target score (float).

    Raises:
        ValueError: no curves or a non-Curve; both ``at_compute`` and ``steps_index``; a seed
            without an evaluated initial score; ``steps_index`` out of range or not evaluated
            on every seed; ``at_compute`` outside a seed's range; ``gain_fraction`` outside
            ``(0, 1]``; ``min_gain`` negative or not a number; or real GRPO did not improve by
            more than ``min_gain`` (nor by more than the rounding tolerance): there is no target.

    Example:
        >>> real = [Curve([0, 10, 20], [0.2, 0.6, 0.7]), Curve([0, 12, 24], [0.4, 0.7, 0.9])]
        >>> round(target_score(real), 6)   # s0 = 0.3, s_S = 0.8
        0.75
    """
    curves = _check_curves(real_curves, "real_curves")
    if at_compute is not None and steps_index is not None:
        raise ValueError("give at_compute or steps_index, not both (they are two ways to pick the snapshot S)")
    if not (isinstance(gain_fraction, numbers.Real) and not isinstance(gain_fraction, bool)
            and 0.0 < gain_fraction <= 1.0):
        raise ValueError(f"gain_fraction must be a number in (0, 1], got {gain_fraction!r}")
    if not (isinstance(min_gain, numbers.Real) and not isinstance(min_gain, bool)
            and math.isfinite(float(min_gain)) and min_gain >= 0.0):
        raise ValueError(f"min_gain must be a finite number >= 0 (score units), got {min_gain!r}")
    no_start = [i for i, c in enumerate(curves) if np.isnan(c.score[0])]
    if no_start:
        raise ValueError(
            f"real GRPO seeds {no_start} have no evaluated initial score (score[0] is NaN); "
            "evaluate the untrained policy: the target is measured from it"
        )
    s0 = float(np.mean([c.score[0] for c in curves]))
    if at_compute is not None:
        if not (isinstance(at_compute, numbers.Real) and not isinstance(at_compute, bool)):
            raise ValueError(f"at_compute must be a number of CPU-seconds, got {at_compute!r}")
        s_end = float(np.mean([c.score_at(float(at_compute)) for c in curves]))
        where = f"at compute {at_compute} CPU-s"
    else:
        common = min(len(c) for c in curves)
        if steps_index is None:
            ok = [i for i in range(1, common) if all(not np.isnan(c.score[i]) for c in curves)]
            if not ok:
                raise ValueError(
                    "real GRPO's curves share no evaluated snapshot after the initial one; "
                    "evaluate a common snapshot or pass at_compute"
                )
            steps_index = ok[-1]
        if not (isinstance(steps_index, numbers.Integral) and not isinstance(steps_index, bool)
                and 1 <= steps_index < common):
            raise ValueError(
                f"steps_index must be an integer in [1, {common - 1}] (a snapshot every seed has), got {steps_index!r}"
            )
        missing = [i for i, c in enumerate(curves) if np.isnan(c.score[steps_index])]
        if missing:
            raise ValueError(
                f"real GRPO seeds {missing} have no evaluated score at snapshot {steps_index}; "
                "evaluate it there or choose another steps_index"
            )
        s_end = float(np.mean([c.score[steps_index] for c in curves]))
        where = f"at snapshot {steps_index}"
    gain = s_end - s0
    tolerance = 1e-9 * max(1.0, abs(s0))
    if not (gain > float(min_gain) and gain > tolerance):
        raise ValueError(
            f"real GRPO did not improve by more than min_gain={float(min_gain):g}; there is no target: "
            f"its mean score {where} is {s_end:.6g}, its initial mean {s0:.6g} (gain {gain:.6g}; gains of "
            f"at most {tolerance:.3g} are rounding). Train longer, raise the learning rate or check the "
            "run before comparing compute"
        )
    return s0 + float(gain_fraction) * gain


def compute_to_target(curve: Curve, target: float) -> float:
    """Cumulative compute (CPU-seconds) at which ``curve`` first reaches ``target``.

    Only evaluated snapshots count. If the first evaluated snapshot already reaches the target,
    its compute is returned (0.0 for the initial policy). Otherwise the first evaluated snapshot
    ``j`` with ``score >= target`` and the evaluated snapshot ``i`` before it are interpolated
    linearly: ``c_i + (target - s_i) / (s_j - s_i) * (c_j - c_i)``. Later dips below the target do
    not matter. Definition: issue 11, item 1; ``docs/method.md``, "Compute-to-target speedup".

    Args:
        curve: one seed's curve.
        target: the score to reach (from :func:`target_score`), finite.

    Returns:
        CPU-seconds (float), or ``math.inf`` when no evaluated snapshot reaches the target
        ("not reached within budget").

    Raises:
        ValueError: ``curve`` is not a :class:`Curve` or ``target`` is not a finite number.

    Example:
        >>> compute_to_target(Curve([0, 10, 20], [0.2, 0.4, 0.8]), 0.6)
        15.0
    """
    if not isinstance(curve, Curve):
        raise ValueError(f"curve must be a Curve(compute=..., score=...), got {type(curve).__name__}")
    if not (isinstance(target, numbers.Real) and not isinstance(target, bool) and math.isfinite(float(target))):
        raise ValueError(f"target must be a finite score, got {target!r}")
    c, s = curve.evaluated()
    hit = np.flatnonzero(s >= float(target))
    if hit.size == 0:
        return math.inf
    j = int(hit[0])
    if j == 0:
        return float(c[0])
    i = j - 1
    return float(c[i] + (float(target) - s[i]) / (s[j] - s[i]) * (c[j] - c[i]))


def interpolation_bracket(curve: Curve, target: float) -> tuple[int, int] | None:
    """The two snapshots :func:`compute_to_target` interpolates between: ``(i, j)``, indices into
    ``curve.compute`` / ``curve.score`` (NaN snapshots count in the indexing, never as ``i`` or
    ``j``), with ``j`` the first evaluated snapshot whose score reaches ``target`` and ``i`` the
    evaluated snapshot before it (its score is below the target).

    Returns:
        ``(i, j)``; ``(j, j)`` when the first evaluated snapshot already reaches the target (no
        interpolation); ``None`` when no evaluated snapshot reaches it (not reached).

    Raises:
        ValueError: as :func:`compute_to_target`.

    Example:
        >>> c = Curve([0, 10, 20, 30], [0.2, 0.4, float("nan"), 0.8])
        >>> interpolation_bracket(c, 0.6), interpolation_bracket(c, 0.1), interpolation_bracket(c, 0.9)
        ((1, 3), (0, 0), None)
    """
    compute_to_target(curve, target)  # the same checks
    idx = np.flatnonzero(~np.isnan(curve.score))
    hit = np.flatnonzero(curve.score[idx] >= float(target))
    if hit.size == 0:
        return None
    j = int(hit[0])
    return (int(idx[j]), int(idx[j])) if j == 0 else (int(idx[j - 1]), int(idx[j]))


def bracket_share(curve: Curve, target: float) -> float:
    """The interpolation bracket of :func:`compute_to_target` as a share of it:
    ``(c_j - c_i) / compute_to_target`` for the bracket ``(i, j)`` of :func:`interpolation_bracket`
    — the compute between the last evaluated snapshot below the target and the first at or above
    it, over the compute to the target. 0.1 means the crossing is located to within 10% of the
    figure; a larger share means more of the figure is linear interpolation between snapshots
    rather than an evaluated policy.

    Returns:
        The share (float, ``>= 0``; it can exceed 1 when the crossing lies early in a wide
        bracket); ``0.0`` when the first evaluated snapshot already reaches the target, or the
        bracket has no width; ``math.nan`` when the curve never reaches the target (no bracket:
        the seed is "not reached").

    Raises:
        ValueError: as :func:`compute_to_target`.

    Example:
        >>> bracket_share(Curve([0, 10, 20], [0.2, 0.4, 0.8]), 0.6)   # bracket 10..20, reached at 15
        0.6666666666666666
    """
    b = interpolation_bracket(curve, target)
    if b is None:
        return math.nan
    width = float(curve.compute[b[1]] - curve.compute[b[0]])
    if width == 0.0:
        return 0.0
    return width / compute_to_target(curve, target)  # > 0: the score at i is below the target


# ---------------------------------------------------------------------------------- statistics
def percentile_inf(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The ``q``-th percentile (0–100) with numpy's default linear interpolation, where a value
    interpolated next to ``inf`` is ``inf`` (``np.percentile`` gives NaN there).

    Args:
        values: finite numbers or ``+inf`` (a compute-to-target or a speedup: ``+inf`` means
            "beyond every finite value"), at least one, no NaN, no ``-inf``.
        q: percentile in [0, 100].

    Raises:
        ValueError: empty ``values``, a NaN, a ``-inf`` (no quantity here is ``-inf``; the
            interpolation next to it would be undefined), or ``q`` outside [0, 100].

    Example:
        >>> percentile_inf([1.0, 2.0, float("inf")], 50), percentile_inf([1.0, 2.0, float("inf")], 75)
        (2.0, inf)
    """
    x = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if x.size == 0:
        raise ValueError("percentile of no values")
    if np.isnan(x).any():
        raise ValueError("percentile of values with NaN")
    if np.isneginf(x).any():
        raise ValueError("percentile of values with -inf: only finite values and +inf (not reached) are accepted")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"q must be a percentile in [0, 100], got {q!r}")
    pos = q / 100.0 * (x.size - 1)
    lo, hi = int(math.floor(pos)), int(math.ceil(pos))
    if math.isinf(x[hi]):
        return math.inf
    return float(x[lo] + (pos - lo) * (x[hi] - x[lo]))


def median_ratio(real_median: float, method_median: float) -> float:
    """The speedup of one pair of medians: ``real_median / method_median``, with the edge cases
    spelled out: method ``inf`` (not reached) → ``0.0``, *whatever real GRPO's median* (a method
    that does not reach the target has no speedup, also when real GRPO does not reach it either);
    only real GRPO's ``inf`` (method finite) → ``inf``; method ``0`` (reached by the initial
    policy) → ``inf``, or ``1.0`` when real GRPO's median is 0 too. The point estimate and every
    bootstrap replicate of :func:`speedup` use this one rule, so the interval describes the same
    statistic as the point (``docs/method.md``, "Compute-to-target speedup").
    """
    if math.isinf(method_median):
        return 0.0
    if method_median == 0.0:
        return 1.0 if real_median == 0.0 else math.inf
    return real_median / method_median


def _median_ratios(real: np.ndarray, method: np.ndarray) -> np.ndarray:
    """:func:`median_ratio` elementwise on float64 arrays of the same shape."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = real / method
    out = np.where(np.isinf(method), 0.0, out)
    out = np.where(method == 0.0, np.where(real == 0.0, 1.0, np.inf), out)
    return out


def _check_ctt(values: Sequence[float], name: str) -> np.ndarray:
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be CPU-seconds per seed (numbers or inf), got {values!r}") from e
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence (one compute-to-target per seed), got shape {x.shape}")
    bad = np.flatnonzero(np.isnan(x) | (x < 0))
    if bad.size:
        raise ValueError(
            f"{name}[{bad[0]}] = {x[bad[0]]}: a compute-to-target is >= 0 CPU-seconds or inf (not reached)"
        )
    return x


def _fmt(x: float) -> str:
    if math.isinf(x):
        return "∞"
    if math.isnan(x):
        return "n/a"
    return f"{x:.1f}" if (x == 0.0 or abs(x) >= 0.1) else f"{x:.2g}"


def _fmt_bound(x: float) -> str:
    """A bound of the speedup interval: ``0`` is a resample where the method's median is
    ``inf`` (not reached), printed ``"n.r."`` — never as a number; ``inf`` prints ``"∞"``."""
    return "n.r." if x == 0.0 else _fmt(x)


@dataclass(frozen=True)
class SpeedupEstimate:
    """Compute-to-target speedup of one method over real GRPO, with its bootstrap interval.

    Attributes:
        point: ``median(real ctt) / median(method ctt)`` over seeds (:func:`median_ratio`);
            ``0.0`` when the method's median is ``inf`` ("not reached"), ``inf`` when only real
            GRPO's median is ``inf``.
        low, high: the ``confidence`` paired percentile bootstrap interval over seeds; ``0.0``
            (a resample where the method's median is ``inf``: not reached, formatted ``"n.r."``)
            or ``inf`` are possible; ``nan`` with fewer than 2 seeds (there is no interval).
        n_seeds: seeds (pairs) compared.
        n_reached: seeds whose method curve reached the target (finite compute-to-target).
        real_median, method_median: the two medians, CPU-seconds (``inf`` allowed).
        confidence: the interval's level, e.g. 0.95.
        n_boot: bootstrap replicates drawn (0 with fewer than 2 seeds).
        n_boot_dropped: always 0 (kept so that saved results of earlier versions, which dropped
            the replicates whose two medians were both ``inf``, still load).
    """

    point: float
    low: float
    high: float
    n_seeds: int
    n_reached: int
    real_median: float
    method_median: float
    confidence: float
    n_boot: int = 0
    n_boot_dropped: int = 0

    def reached(self) -> bool:
        """True when the method's median compute-to-target is finite (the speedup is a number)."""
        return math.isfinite(self.method_median)

    def format(self, *, limit: str = "within budget") -> str:
        """The estimate as text, never a number for a method that was not reached:

        - ``"3.1× [2.2, 4.5]"``; a bound of ``0`` (the method's median is ``inf`` in that
          resample) prints ``"n.r."`` (``"68.7× [n.r., 74.7]"``), a bound of ``inf`` ``"∞"``;
        - ``"3.0× (1 seed, no CI)"`` with a single seed (there is no interval);
        - ``"not reached within budget (3/10 seeds reached)"`` when the method's median is
          ``inf``; ``limit`` replaces ``"within budget"`` when something else stopped the runs,
          e.g. ``"within 1200 steps (step cap)"``;
        - when real GRPO's own median is ``inf`` and the method's is finite, says so instead of
          printing ``∞×``.
        """
        if not self.reached():
            return f"not reached {limit} ({self.n_reached}/{self.n_seeds} seeds reached)"
        if math.isinf(self.real_median):
            return (f"real GRPO not reached within budget; method reached "
                    f"({self.n_reached}/{self.n_seeds} seeds reached)")
        if self.n_seeds < 2:
            return f"{_fmt(self.point)}× ({self.n_seeds} seed, no CI)"
        return f"{_fmt(self.point)}× [{_fmt_bound(self.low)}, {_fmt_bound(self.high)}]"


def speedup(
    real_ctt: Sequence[float],
    method_ctt: Sequence[float],
    *,
    confidence: float = 0.95,
    n_boot: int = 10_000,
    seed: int = 0,
) -> SpeedupEstimate:
    """Compute-to-target speedup of a method over real GRPO, paired by seed, with a bootstrap CI.

    ``point = median(real_ctt) / median(method_ctt)`` (:func:`median_ratio`); ``inf`` entries (a
    seed that never reached the target) stay in the medians as values beyond the budget. The
    interval is the percentile bootstrap: ``n_boot`` replicates each draw ``n`` seed indices with
    replacement, *the same indices for both methods* (the pairing of a seed's runs is kept), and
    take the ratio of the two medians by the rule of the point (:func:`median_ratio`: a
    replicate where the method's median is ``inf`` is ``0``, not reached, whatever real GRPO's
    median; one where only real GRPO's is ``inf`` is ``inf``); no replicate is dropped, so the
    interval is not conditioned on the method being reached. ``low``/``high`` are the
    ``(1 ± confidence)/2`` percentiles of the replicates (:func:`percentile_inf`). With a single
    seed there is no interval: ``low`` and ``high`` are NaN and no replicate is drawn.
    Definition: issue 11, item 1; ``docs/method.md``, "Compute-to-target speedup".

    Args:
        real_ctt: real GRPO's compute-to-target per seed, CPU-seconds (``>= 0`` or ``inf``).
        method_ctt: the method's, same seeds in the same order.
        confidence: interval level in (0, 1).
        n_boot: bootstrap replicates (integer >= 1).
        seed: seed of the bootstrap's generator (the result is reproducible).

    Returns:
        A :class:`SpeedupEstimate`.

    Raises:
        ValueError: empty or non-1-D inputs, different lengths (not paired), a NaN or negative
            value, ``confidence`` outside (0, 1) or ``n_boot < 1``.

    Example:
        >>> est = speedup([30.0, 40.0, 50.0], [10.0, 10.0, 10.0], n_boot=200)
        >>> est.point, est.format()
        (4.0, '4.0× [3.0, 5.0]')
        >>> speedup([30.0], [10.0]).format()
        '3.0× (1 seed, no CI)'
    """
    real = _check_ctt(real_ctt, "real_ctt")
    method = _check_ctt(method_ctt, "method_ctt")
    if real.size != method.size:
        raise ValueError(
            f"real_ctt and method_ctt must be paired by seed (same length), got {real.size} and {method.size} seeds"
        )
    if not (isinstance(confidence, numbers.Real) and not isinstance(confidence, bool) and 0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be a number in (0, 1), e.g. 0.95, got {confidence!r}")
    if not (isinstance(n_boot, numbers.Integral) and not isinstance(n_boot, bool) and n_boot >= 1):
        raise ValueError(f"n_boot must be an integer >= 1, got {n_boot!r}")
    real_med, method_med = float(np.median(real)), float(np.median(method))
    point = median_ratio(real_med, method_med)
    low = high = math.nan
    drawn = 0
    if real.size >= 2:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, real.size, size=(int(n_boot), real.size))
        rm, mm = np.median(real[idx], axis=1), np.median(method[idx], axis=1)
        ratios = _median_ratios(rm, mm)
        alpha = (1.0 - float(confidence)) / 2.0
        low, high = percentile_inf(ratios, 100.0 * alpha), percentile_inf(ratios, 100.0 * (1.0 - alpha))
        drawn = int(ratios.size)
    return SpeedupEstimate(
        point=float(point), low=float(low), high=float(high), n_seeds=int(real.size),
        n_reached=int(np.isfinite(method).sum()), real_median=real_med, method_median=method_med,
        confidence=float(confidence), n_boot=drawn, n_boot_dropped=0,
    )


def speedup_over_best(
    references: Mapping[str, Sequence[float]],
    method_ctt: Sequence[float],
    *,
    confidence: float = 0.95,
    n_boot: int = 10_000,
    seed: int = 0,
) -> tuple[SpeedupEstimate, str]:
    """Speedup of a method over the *best* of several references (e.g. real GRPO at several batch
    sizes), the best chosen inside every bootstrap replicate (issue 35, item 4).

    The point is ``min_j median(references[j]) / median(method_ctt)`` (:func:`median_ratio` on the
    lowest reference median). Each replicate draws one set of seed indices, the same for every
    reference and the method (paired by seed), takes each reference's median on it, keeps the
    lowest, and divides it by the method's median on the same indices. Choosing the best once
    from the point estimates and bootstrapping against it would leave out the uncertainty of that
    choice: when two references are close, the interval must include the replicates where the other
    one is best. A reference tie keeps the first in ``references``' order.

    Args:
        references: name -> compute-to-target per seed (CPU-seconds, ``>= 0`` or ``inf``); every
            sequence the method's length, seeds in the same order; at least one reference.
        method_ctt: the method's compute-to-target per seed.
        confidence, n_boot, seed: as in :func:`speedup`.

    Returns:
        ``(estimate, best)``: a :class:`SpeedupEstimate` whose ``real_median`` is the best
        reference's median, and the name of the reference best on the point estimates.

    Raises:
        ValueError: no reference, lengths that differ, or any input :func:`speedup` refuses.

    Example:
        >>> est, best = speedup_over_best({"full": [40.0, 50.0, 60.0], "small": [30.0, 20.0, 25.0]},
        ...                               [10.0, 10.0, 10.0], n_boot=500)
        >>> best, est.point
        ('small', 2.5)
    """
    if not references:
        raise ValueError("speedup_over_best needs at least one reference (name -> compute-to-target per seed)")
    names = list(references)
    refs = [_check_ctt(references[n], f"references[{n!r}]") for n in names]
    method = _check_ctt(method_ctt, "method_ctt")
    for n, r in zip(names, refs):
        if r.size != method.size:
            raise ValueError(f"references[{n!r}] has {r.size} seeds but method_ctt has {method.size}: they must be "
                             "paired by seed (same length, same order)")
    # the point estimate (and its bookkeeping) is speedup() against the best reference
    meds = [float(np.median(r)) for r in refs]
    best = int(np.argmin(meds))
    est = speedup(refs[best], method, confidence=confidence, n_boot=n_boot, seed=seed)
    if method.size < 2:
        return est, names[best]
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, method.size, size=(int(n_boot), method.size))
    ref_meds = np.min(np.stack([np.median(r[idx], axis=1) for r in refs]), axis=0)
    ratios = _median_ratios(ref_meds, np.median(method[idx], axis=1))
    alpha = (1.0 - float(confidence)) / 2.0
    low, high = percentile_inf(ratios, 100.0 * alpha), percentile_inf(ratios, 100.0 * (1.0 - alpha))
    from dataclasses import replace as _replace

    return _replace(est, low=float(low), high=float(high), n_boot=int(ratios.size)), names[best]


def _median_iqr(x: np.ndarray) -> str:
    med = float(np.median(x))
    if math.isinf(med):
        return "not reached"
    q1, q3 = percentile_inf(x, 25.0), percentile_inf(x, 75.0)
    return f"{med:.1f} [{_fmt(q1)}, {_fmt(q3)}]"


SPEEDUP_TABLE_HEADER = (
    "| method | compute-to-target (CPU-s, median [IQR]) | seeds reached | speedup [95% CI] |\n"
    "|---|---|---|---|"
)


def speedup_table(
    real_ctt: Sequence[float],
    method_ctt: Mapping[str, Sequence[float]],
    *,
    real_name: str = "real GRPO",
    confidence: float = 0.95,
    n_boot: int = 10_000,
    seed: int = 0,
) -> str:
    """Markdown table of compute-to-target and speedup (:func:`speedup`) per method.

    Columns: ``| method | compute-to-target (CPU-s, median [IQR]) | seeds reached | speedup
    [95% CI] |`` (the header names the actual ``confidence``). The first row is real GRPO itself
    (speedup ``1×``, the reference); then one row per entry of ``method_ctt``, in its order.

    Args:
        real_ctt: real GRPO's compute-to-target per seed (CPU-seconds, ``inf`` = not reached).
        method_ctt: ``{method name: compute-to-target per seed}``, seeds paired with ``real_ctt``.
        real_name: the reference row's name.
        confidence, n_boot, seed: as in :func:`speedup` (every method uses the same seed).

    Returns:
        The table (header, separator and rows, ``\\n``-joined, no trailing newline).

    Raises:
        ValueError: as :func:`speedup`, naming the method.
    """
    real = _check_ctt(real_ctt, "real_ctt")
    header = SPEEDUP_TABLE_HEADER.replace("95% CI", f"{100 * float(confidence):g}% CI")
    rows = [header, f"| {real_name} | {_median_iqr(real)} | {int(np.isfinite(real).sum())}/{real.size} | 1× (reference) |"]
    for name, values in method_ctt.items():
        try:
            est = speedup(real, values, confidence=confidence, n_boot=n_boot, seed=seed)
        except ValueError as e:
            raise ValueError(f"method {name!r}: {e}") from e
        x = _check_ctt(values, f"method_ctt[{name!r}]")
        rows.append(f"| {name} | {_median_iqr(x)} | {est.n_reached}/{est.n_seeds} | {est.format()} |")
    return "\n".join(rows)
