"""``anchor_fraction="auto"``: the anchor fraction follows the advisor's f* during training
(``docs/method.md``, "Adaptive anchor fraction"), within an execution budget.

:class:`AdaptiveAnchorFraction` (built by :class:`~wmrl_envs.core.CorrectionConfig`, run once per
training step by :class:`~wmrl_envs.core.CorrectionLoop`) and :class:`ExecutionBudgetSpent`; both are
exported by :mod:`wmrl_envs.core`. The formulas it uses:
:mod:`wmrl_envs.core.advisor_model`. Its behaviour over many seeds: ``benchmarks/adaptive_fraction.py``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np

from .advisor_model import (
    CostRates,
    Scores,
    check_noise_batch_ratio,
    check_step_law,
    crossfit_calibrated,
    is_finite_number,
    map_groups,
    optimal_anchor_fraction,
    pooled_within_group_correlation,
    r_confidence_bounds,
)
from .ledger import EXECUTION, CostLedger

if TYPE_CHECKING:
    from .advisor import AnchorAdvisor

__all__ = ["AdaptiveAnchorFraction", "ExecutionBudgetSpent", "ExecutionBudgetWait", "change_point_threshold"]


_CONFIRM_STEPS = 3
"""``anchor_fraction="auto"`` lowers the fraction only when that is called for on this many consecutive
steps (it raises it at once)."""

_CALIBRATION_GROUPS = 256
"""``anchor_fraction="auto"`` cross-fits its isotonic map on the last this many anchor groups (a
bounded cost per step; the correlation itself is taken over the last ``window``)."""


_CHANGE_FALSE_ALARMS_PER_STEP = 1e-3
"""``anchor_fraction="auto"`` tests for a change point once per training step and keeps the
expected false alarms of a world model of constant quality at or below this many per step (one per
1,000 steps): Bonferroni over the splits of each test, a union bound over the tests (see
:func:`change_point_threshold`)."""


def change_point_threshold(n_splits: int, false_alarms_per_step: float = _CHANGE_FALSE_ALARMS_PER_STEP) -> float:
    """The z a change point must exceed when ``n_splits`` splits are tested at once.

    Each split's statistic is one-sided standard normal under a world model of constant quality
    (Fisher z), so testing every split at level ``α / n_splits`` (Bonferroni) bounds the chance
    that one test declares a change by ``α``; tested once per training step, a run of T steps
    then expects at most ``α·T`` false change points (a union bound over the tests, whatever their
    correlation). Bonferroni is conservative here, as the splits of one test share their groups
    (``benchmarks/adaptive_fraction.py --change-points`` measures the rate and the delay).

    Args:
        n_splits: splits tested (>= 1; fewer count as 1).
        false_alarms_per_step: α in (0, 1).

    Never below 4, the rule's fixed threshold before issue 37: with few splits Bonferroni alone asks
    less (3.09 for one split), and near |r| = 1 Fisher z's standard error is too optimistic for
    discrete scores (a world model of r ≈ 0.99 whose r moves between 0.99 and 0.999 swings z by more
    than one unit), so a lower threshold declared false change points for a near-perfect world model
    (``wmrl bench advisor --quick``: its adaptive fraction ended at 0.047 instead of the floor 0.02).
    A higher threshold keeps Bonferroni's bound.

    Returns:
        ``max(4, Φ⁻¹(1 − α / n_splits))`` (4 up to 31 splits, 4.26 for 100, 4.46 for 248 at α = 0.001).

    Raises:
        ValueError: α outside (0, 1).
    """
    if not (is_finite_number(false_alarms_per_step) and 0.0 < false_alarms_per_step < 1.0):
        raise ValueError(f"false_alarms_per_step must be in (0, 1), got {false_alarms_per_step!r}")
    return max(4.0, NormalDist().inv_cdf(1.0 - false_alarms_per_step / max(1, int(n_splits))))


def _change_point(wm: Sequence[Scores], real: Sequence[Scores], min_side: int, z_crit: float | None = None
                  ) -> tuple[int, float] | None:
    """Where the world model got worse: the split of the groups into older and recent ones at which
    r over the recent ones lies furthest below r over the older ones, if that is significant.

    For every split with at least ``min_side`` usable groups (2+ rollouts scored both ways) on each
    side, the statistic is ``(atanh(r_old) − atanh(r_new)) / sqrt(1/(d_old − 2) + 1/(d_new − 2))``
    (pooled within-group correlations, d = pairs − groups as in :func:`r_confidence_bounds`). The
    largest is significant when it exceeds :func:`change_point_threshold` of the number of splits
    tested (``z_crit``: a fixed threshold instead; the rule before issue 37 used 4 whatever the
    number of splits, which let the false alarms grow with the groups held).

    Returns:
        ``(k, z)``: the last ``k`` groups are the ones after the change point and ``z`` its
        statistic (the largest over the splits, above the threshold), or ``None`` (no significant drop).
    """
    st = []  # per group: usable, pairs, sxx, syy, sxy (within-group centred)
    for w, x in zip(wm, real):
        both = [(float(a), float(b)) for a, b in zip(w, x) if is_finite_number(a) and is_finite_number(b)]
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
    tested = 0
    for k in range(1, len(st)):
        new, old = suffix[k - 1], total - suffix[k - 1]
        if new[0] < min_side or not st[len(st) - k][0]:
            continue  # too few recent groups, or the same split as the one before (an unusable group)
        if old[0] < min_side:
            break
        a, b = z_and_var(old), z_and_var(new)
        if a is None or b is None:
            continue
        tested += 1
        z = (a[0] - b[0]) / math.sqrt(a[1] + b[1])
        if best is None or z > best[1]:
            best = (k, z)
    if best is None or best[1] <= (change_point_threshold(tested) if z_crit is None else z_crit):
        return None
    return best


class ExecutionBudgetSpent(RuntimeError):
    """The run's execution budget is spent and ``on_budget_spent="stop"``: training must stop."""


class ExecutionBudgetWait(ExecutionBudgetSpent):
    """``on_budget_spent="stop"``: the next group does not fit in what is left of the execution
    budget *now*, but training groups are still in flight (opened, not closed): their executions are
    priced at an estimate (a prior, or the mean of the closed groups), and when they close the price
    is measured again and a group may fit. Nothing changed in the loop (no route used, the budget
    not declared spent). A caller that can wait (the vector wrapper's lanes:
    :class:`~wmrl_envs.wrappers.vector.AnchoredWorldModelVectorWrapper`) opens the group later; one
    that cannot stops here, as for :class:`ExecutionBudgetSpent` (its subclass)."""


class AdaptiveAnchorFraction:
    """``anchor_fraction="auto"``: the anchor fraction follows the advisor's f* during training.

    Once per training step (:meth:`~wmrl_envs.core.CorrectionLoop.plan_step`), before the step's
    routes are drawn:

    1. until the advisor holds ``min_groups`` usable anchor groups (the warm-up) the fraction is
       ``start``;
    2. the cost ratio γ (the cost of a rollout's world-model call, generation and update over one
       real execution's, a ratio without unit) is ``cost_ratio`` when given (e.g. the pilot's,
       from ``wmrl advise``), else measured once from the run's ledger at the end of the warm-up
       (:meth:`CostRates.from_ledger`, in the ledger's cost basis, ``CorrectionConfig.cost_basis``:
       CPU-seconds by default, wall-clock seconds, or prices per call) and fixed from then on, so
       that the routes depend only on the seed and γ (both saved with the state);
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
    4a. a change point, before step 4: when r over the most recent groups (at least
       ``max(2, min_groups // 2)`` usable ones on each side) lies below r over the older groups
       since the last change point by more than :func:`change_point_threshold` standard errors
       (Fisher z; Bonferroni over the splits tested, so that a world model of constant quality
       expects at most one false change point per 1,000 steps), the world model got worse. The
       split with the largest such gap is taken; the groups before it and the older half
       of those after it (a split found that early tends to include a few groups from before the
       change) no longer count for r, its bounds or the cross-fitted map, and the fraction rises at
       once to ``clip(f*(0))``, the fraction for a world model without signal (under SGD's law
       ``f_max`` without a noise scale, ``sqrt(γ b)`` with one; under Adam's law with the run's
       ``rho``, about ``sqrt(2γ/3)``), when that is higher. Until ``min_groups`` groups count
       again the fraction stays (step 1's warm-up, without returning to ``start``); then step 4
       lowers it if the groups after the change point show enough signal. Without
       it a measured noise scale kept the fraction at the floor after a break: with b ≈ 1 and γ =
       0.01, f*(r) = 0 for r ≥ 0.1 and U over 8 groups of 8 of a useless world model is about 0.22,
       so step 4 never called for more anchors. :attr:`change_points` records
       ``(step, groups after the split)``;
    5. an ``execution_budget`` (real executions) caps the anchor groups of a step to what is
       left of it, counting what an anchor group and a world-model group cost in executions (as
       measured so far: a multi-turn episode or a reward-mode episode executes once per turn or
       step, and in reward mode world-model groups execute as well) and what the groups opened
       and not yet closed will still execute (the caller passes both, see :meth:`step`); once
       what is left cannot pay the step, ``on_budget_spent="floor"`` keeps only the router's
       floor of ``min_anchor_groups`` per window (said once, as a warning) and ``"stop"`` raises
       :class:`ExecutionBudgetSpent` — or, while groups are in flight (priced at an estimate, they
       may close cheaper), :class:`ExecutionBudgetWait`, which leaves the budget undeclared and
       the fraction's state as it was. The budget is checked before steps 3–4, so a step refused
       changes nothing.

    Args:
        start, f_min, f_max: fractions in [0, 1] with ``f_min <= f_max``; ``start`` is clipped to
            [f_min, f_max].
        cost_ratio: γ (>= 0, a ratio of costs in the run's cost basis) or ``None`` (measured at the end of the warm-up).
        noise_batch_ratio: ``B_noise / B`` of real-execution GRPO (>= 0, e.g. from a pilot with
            :class:`GradientNoiseScale`) or ``None`` (unknown: the noise-limited form, which sends
            the fraction to ``f_min`` for a useful world model and to ``f_max`` for a useless one).
        window: anchor groups the online r is taken over (>= 2).
        min_groups: usable groups in the window before the fraction adapts (>= 2).
        hysteresis: how far (a factor ``1 + hysteresis``) the fraction must lie outside the range
            r's bounds allow before it moves (>= 0).
        execution_budget: real executions allowed (>= 1) or ``None``.
        on_budget_spent: ``"floor"`` or ``"stop"``.
        step_law: the step law ``f*`` is taken under (:func:`optimal_anchor_fraction`):
            ``"sgd"`` (the class default, which needs no ρ: a useless world model sends the
            fraction to ``f_max`` without a noise scale) or ``"adam"`` (Adam's law;
            ``CorrectionConfig`` defaults to it, with the run's ρ).
        rho: the anchor weight f* assumes (:func:`optimal_anchor_fraction`); ``None``: the
            optimum ``1/r``. With Adam's law and the optimum, f*(0) <= γ: a useless world model
            kept the fraction at the floor, and training lost to real GRPO
            (``benchmarks/auto_step_law.py``); give the run's ρ (``CorrectionConfig`` does).

    Attributes:
        fraction: the fraction in force.
        gamma: the cost ratio in use (``None`` until known).
        history: ``[(step, fraction, r)]``, one entry per adapted step (r NaN in the warm-up, 0
            where a flattening map showed ``r <= 0``).
        budget_spent: whether the execution budget is spent.
        change_points: ``[(step, groups after the split)]``, one entry per change point (step 4a).
        group_executions: ``{"anchor": [executions, groups], "world_model": [...]}`` of the closed
            training groups (:meth:`note_group`, fed by the loop).

    Raises:
        ValueError: a setting out of range.
    """

    def __init__(self, *, start: float = 0.1, f_min: float = 0.02, f_max: float = 0.5, cost_ratio: float | None = None,
                 noise_batch_ratio: float | None = None, window: int = 16, min_groups: int = 8, hysteresis: float = 0.25, execution_budget: int | None = None,
                 on_budget_spent: str = "stop", step_law: str = "sgd", rho: float | None = None) -> None:
        if not (is_finite_number(f_min) and is_finite_number(f_max) and 0.0 <= f_min <= f_max <= 1.0):
            raise ValueError(f"need 0 <= f_min <= f_max <= 1, got f_min={f_min!r}, f_max={f_max!r}")
        if not (is_finite_number(start) and 0.0 <= start <= 1.0):
            raise ValueError(f"start must be an anchor fraction in [0, 1], got {start!r}")
        if cost_ratio is not None and not (is_finite_number(cost_ratio) and cost_ratio >= 0):
            raise ValueError(f"cost_ratio must be a number >= 0 (world model + generation + update per rollout over one "
                             f"execution) or None (measured), got {cost_ratio!r}")
        for name, v, lo in (("window", window, 2), ("min_groups", min_groups, 2)):
            if not (isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= lo):
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if min_groups > window:
            raise ValueError(f"min_groups ({min_groups}) must not exceed window ({window}): the window would never "
                             "hold enough groups to adapt")
        if not (is_finite_number(hysteresis) and hysteresis >= 0):
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
        b = check_noise_batch_ratio(noise_batch_ratio)
        self.noise_batch_ratio = None if math.isinf(b) else b
        self.window, self.min_groups, self.hysteresis = int(window), int(min_groups), float(hysteresis)
        self.execution_budget = None if execution_budget is None else int(execution_budget)
        self.on_budget_spent = on_budget_spent
        check_step_law(step_law)
        if rho is not None and not (is_finite_number(rho) and rho > 0):
            raise ValueError(f"rho must be the run's anchor weight > 0 (or None: the optimum 1/r), got {rho!r}")
        self.step_law, self.rho = step_law, None if rho is None else float(rho)
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
        """``(r, L, U)`` from the advisor's last ``window`` groups since the last change point (point
        estimate and the bounds of step 4 of the class docstring; r is 0 for a flattening map), or
        ``None`` in the warm-up
        (fewer than ``min_groups`` usable groups, r undefined, or γ unknown).

        Args:
            advisor: the run's advisor.
            calibrate: as in :meth:`AnchorAdvisor.advise` (``"crossfit"``: over the last 256
                groups held since the last change point; a map; ``None``: raw scores).
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
            cal_all = map_groups(raw_all, calibrate)
        return cal_all, real_all, raw_all

    def _bounds(self, cal_all: list[list[float | None]], real_all: list[list[float | None]],
                raw_all: list[list[float | None]], calibrated: bool) -> tuple[float, float, float] | None:
        w = self.window
        wm, real, raw = cal_all[-w:], real_all[-w:], raw_all[-w:]
        r, n = pooled_within_group_correlation(wm, real)
        if n < self.min_groups or self.gamma is None:
            return None
        full = r_confidence_bounds(wm, real, raw if calibrated else None)
        if full is None:
            return None
        if not math.isfinite(r):
            r = 0.0  # a flattening map: r <= 0
        recent = self.min_groups  # the short window that catches a break: as many groups as the warm-up's
        short = r_confidence_bounds(wm[-recent:], real[-recent:], raw[-recent:] if calibrated else None)
        return r, full[0], full[1] if short is None else min(full[1], short[1])

    def _clip(self, r: float) -> float:
        f = optimal_anchor_fraction(max(-1.0, min(1.0, r)), self.gamma, self.noise_batch_ratio, step_law=self.step_law,
                                    rho=self.rho)
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
             groups_in_step: int | None = None, enforce_budget: bool = True) -> tuple[float, int | None]:
        """Adapt before drawing the routes of training step ``step``.

        Args:
            step: the step's index (for :attr:`history`).
            advisor: the run's advisor (its groups so far).
            ledger: the run's ledger: the executions made so far (a count, for the budget) and,
                when ``cost_ratio`` was not given, the costs γ is measured from, in the ledger's
                ``cost_basis`` (``"cpu"``, ``"wall"`` or ``"per_call"``).
            calibrate: ``"crossfit"`` (a run that debiases), a map, or ``None`` (raw scores).
            anchor_cost: real executions one anchor group costs (measured so far, e.g. G × turns);
                ``None``: the size of the last anchor group (one execution per rollout), or one
                anchor group at most while no anchor group has closed.
            world_model_cost: real executions one world-model group costs (0 in outcome mode; a
                reward-mode episode executes every step whatever its route).
            in_flight: real executions still to come from groups opened and not closed (not in
                the ledger yet: an anchor group running, on Ray or elsewhere).
            groups_in_step: world-model groups of the coming step to charge up front, each at
                ``world_model_cost`` real executions (a count, not a cost in the ledger's basis);
                ``None``: none (the loop passes none: it checks each group as it opens, so a step
                spends what fits).
            enforce_budget: ``False``: the caller keeps the budget itself (a plain vector env,
                :meth:`CorrectionLoop.check_executions_fit
                <wmrl_envs.core.CorrectionLoop.check_executions_fit>`): nothing is raised nor
                declared spent here, and the anchors are not capped.

        Returns:
            ``(fraction, free_slots)``: the fraction for this step (0 once the budget is spent: the
            router's floor alone remains) and the anchor *groups* the budget still allows
            (``None``: no cap; the caller keeps the floor of ``min_anchor_groups`` out of the cap).

        Raises:
            ExecutionBudgetWait: ``on_budget_spent == "stop"``, what is left does not pay a group now
                but ``in_flight > 0`` (raised before anything changes; the budget is not declared
                spent: the groups in flight may close cheaper than priced).
            ExecutionBudgetSpent: the budget is spent (nothing in flight) and ``on_budget_spent == "stop"``.
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
        # the budget first: a step refused (raised) changes nothing of the fraction's state
        free_slots = None
        if self.execution_budget is not None and enforce_budget:
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
                if self.on_budget_spent == "stop" and in_flight > 0:
                    # groups in flight were priced at an estimate: when they close, a group may fit
                    raise ExecutionBudgetWait(
                        f"no group fits in the execution budget now ({used} of {self.execution_budget} real "
                        f"executions made, {in_flight:.0f} more in flight); wait for the groups in flight to close")
                if not self.budget_spent:
                    self.budget_spent = True
                    if self.on_budget_spent == "stop":
                        raise ExecutionBudgetSpent(
                            f"the execution budget is spent ({used} of {self.execution_budget} real executions, "
                            f"{in_flight:.0f} more in flight); training stops here (on_budget_spent='stop'; 'floor' "
                            "would go on with the anchor floor only)")
                    warnings.warn(f"the execution budget is spent ({used} of {self.execution_budget} real executions, "
                                  f"{in_flight:.0f} more in flight): from now on only the floor of min_anchor_groups "
                                  "anchor groups per window is executed, PAST the budget (the default on_budget_spent="
                                  "'floor' keeps the corrections fed); to end training at the budget set "
                                  "on_budget_spent='stop', or thin the floor with a larger anchor_window"
                                  + (" (world-model groups execute too here, e.g. reward mode: only "
                                     "on_budget_spent='stop' keeps the budget)" if wm_cost > 0 else ""),
                                  UserWarning, stacklevel=3)
                elif self.on_budget_spent == "stop":
                    raise ExecutionBudgetSpent(f"the execution budget is spent ({used} of {self.execution_budget})")
                # spent: the fraction is 0 and only the router's floor remains (never capped)
            elif extra is not None and extra > 0:
                free_slots = int(left // extra)
        held = None
        if self.gamma is not None:
            held = self._held(advisor, calibrate)
            cp = _change_point(held[0], held[1], max(2, self.min_groups // 2))
            if cp is not None:
                # the world model got worse: forget the groups before the change point and the older
                # half of those after it (the split found tends to include a few groups from before
                # the change), and until the groups kept and those that follow show otherwise, take
                # the fraction for a world model without signal, clip(f*(0)) (when higher)
                k = (cp[0] + 1) // 2
                self._since = advisor.added - k
                self.change_points.append((int(step), cp[0]))
                held = (held[0][-k:], held[1][-k:], held[2][-k:])
                self.fraction = max(self.fraction, self._clip(0.0))
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
        self.history.append((int(step), 0.0 if self.budget_spent else self.fraction, r))
        return (0.0 if self.budget_spent else self.fraction), free_slots

    def state_dict(self) -> dict[str, Any]:
        """Settings, the fraction in force, γ, the history, the budget flag, the move pending
        confirmation and the last change point (as the advisor's count of groups added,
        :attr:`AnchorAdvisor.added`, JSON-serialisable)."""
        return {"start": self.start, "f_min": self.f_min, "f_max": self.f_max, "cost_ratio": self.cost_ratio,
                "noise_batch_ratio": self.noise_batch_ratio, "window": self.window, "min_groups": self.min_groups, "hysteresis": self.hysteresis,
                "execution_budget": self.execution_budget, "on_budget_spent": self.on_budget_spent,
                "step_law": self.step_law, "rho": self.rho, "fraction": self.fraction, "gamma": self.gamma,
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
                                       on_budget_spent=state["on_budget_spent"],
                                       step_law=state.get("step_law", "sgd"),  # absent before it existed: SGD's
                                       rho=state.get("rho"))
        if not (is_finite_number(state["fraction"]) and 0.0 <= float(state["fraction"]) <= 1.0):
            raise ValueError(f"a saved adaptive anchor fraction must be in [0, 1], got {state['fraction']!r}")
        if float(state["fraction"]) > 0 and not fresh.f_min <= float(state["fraction"]) <= fresh.f_max:
            raise ValueError(f"a saved adaptive anchor fraction {state['fraction']!r} lies outside its own "
                             f"[f_min, f_max] = [{fresh.f_min}, {fresh.f_max}]: the state is inconsistent")
        if state["gamma"] is not None and not (is_finite_number(state["gamma"]) and float(state["gamma"]) >= 0):
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
