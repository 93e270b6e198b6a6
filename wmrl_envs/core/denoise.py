"""Inverse-variance denoising: the anchor weight ρ on anchor-group advantages.

:func:`group_disagreement` is one anchor group's normalised disagreement ``s²`` (the share of
the real within-group variation the world model gets wrong); :class:`InverseVarianceDenoiser`
pools it over anchor groups into ``s̄²`` (the mean over the warm-up, an EMA afterwards) and
turns that into ``ρ`` (warm-up on the calibrated scale, calibration of the scale ``c``, the
floor ``ε`` for a near-perfect warm-up, the clip). The formulas, and why each piece is there,
are in ``docs/method.md`` ("Inverse-variance denoising"), after Yang et al., arXiv 2608.12564;
``benchmarks/rho_calibration.py`` measures how far ρ lands from ``rho_target`` over seeds.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Sequence

import numpy as np

from wmrl_envs.utils import check_arg

__all__ = ["InverseVarianceDenoiser", "group_disagreement", "group_disagreement_parts"]


def group_disagreement_parts(
    calibrated: Sequence[float | None], real: Sequence[float | None], eps: float = 1e-8
) -> tuple[float, float] | None:
    """The two parts of one anchor group's ``s²``: ``(mean squared residual, Var(r))``.

    The residual of rollout i is ``(d_i − mean d) − (r_i − mean r)``; both parts are in squared
    units of the real score, and ``s² = part[0] / part[1]``.

    Args:
        calibrated: calibrated world-model scores d_i, shape (G,); ``None``/NaN = ungraded.
        real: real scores r_i, shape (G,); ``None``/NaN = ungraded.
        eps: ``Var(r)`` at or below this counts as zero (group skipped).

    Returns:
        ``(mean squared residual, Var(r))`` (floats, the second > ``eps``) over the rollouts
        with both scores, or ``None`` when fewer than 2 rollouts have both scores or the real
        scores do not vary.

    Raises:
        ValueError: the two sequences differ in length.
    """
    if len(calibrated) != len(real):
        raise ValueError(f"calibrated and real differ in length: {len(calibrated)} vs {len(real)}")
    d = np.array([np.nan if v is None else v for v in calibrated], dtype=np.float64)
    r = np.array([np.nan if v is None else v for v in real], dtype=np.float64)
    ok = np.isfinite(d) & np.isfinite(r)
    if ok.sum() < 2:
        return None
    d, r = d[ok], r[ok]
    var_r = float(np.var(r))
    if var_r <= eps:
        return None
    resid = (d - d.mean()) - (r - r.mean())
    return float(np.mean(resid**2)), var_r


def group_disagreement(calibrated: Sequence[float | None], real: Sequence[float | None], eps: float = 1e-8) -> float | None:
    """Normalised disagreement ``s²`` of one anchor group.

    Args:
        calibrated: calibrated world-model scores d_i, shape (G,); ``None``/NaN = ungraded.
        real: real scores r_i, shape (G,); ``None``/NaN = ungraded.
        eps: ``Var(r)`` at or below this counts as zero (group skipped).

    Returns:
        ``s²`` (float, >= 0), or ``None`` when fewer than 2 rollouts have both scores or the
        real scores do not vary.

    Raises:
        ValueError: the two sequences differ in length.
    """
    parts = group_disagreement_parts(calibrated, real, eps)
    return None if parts is None else parts[0] / parts[1]


def _both_scored(calibrated: Sequence[float | None], real: Sequence[float | None]) -> int:
    """Rollouts with both a calibrated and a real score (finite)."""
    return sum(1 for c, r in zip(calibrated, real)
               if c is not None and r is not None and math.isfinite(float(c)) and math.isfinite(float(r)))


class InverseVarianceDenoiser:
    """Pools the anchor groups' disagreement into ``s̄²`` and gives the anchor weight ``ρ``.

    ``s̄²`` is the ratio of two running averages over the groups that count: of each group's
    mean squared residual and of its real variance ``Var(r)`` (:func:`group_disagreement_parts`),
    i.e. the pooled share of the real within-group variance that the world model gets wrong. A
    group whose real scores barely vary (a large ``s²`` on a tiny ``Var(r)``) therefore cannot
    dominate it. Over the first ``warmup_groups`` counted groups both averages are plain means
    (each warm-up group weighs the same); after the warm-up they are EMAs with a half-life of
    ``half_life`` groups that start from the warm-up means.

    ``ρ = 1`` until ``warmup_groups`` groups have counted. In calibrated mode ``c`` is then fixed
    once, ``c = (rho_target − 1)/max(s̄², ε)``, so that ``ρ = rho_target`` at that moment; from then
    on ``ρ = clip(1 + c·max(s̄², ε), 1, rho_max)`` (parameter-free mode: ``c = 1``, no floor).

    **A world model that learns** (:meth:`recalibrate`): every refit makes a new world model, and
    ``s̄²`` and ``c`` describe the old ones. At the first refit after every ``warmup_groups`` counted
    groups since ``c`` was last fixed, the loop passes the current model's out-of-fold scores of
    its stored anchor groups: ``s̄²`` is measured again on them and ``c`` fixed again, so that ρ is
    ``rho_target`` for the model in use (what a frozen model's ρ is at its calibration), and then
    follows the groups that arrive, as for a frozen model. Without it ρ fell as the model learned:
    ``c`` had been fixed on the cold model's larger disagreement (``docs/method.md``,
    "Inverse-variance denoising", "A world model that learns").

    A group counts only when its scores are on the scale the run trains on (``calibrated_scale``
    of :meth:`update`). :class:`~wmrl_envs.core.WMRLCorrector` passes ``calibrated_scale=False``
    before the debiaser's first fit, when the "calibrated" scores are still the world model's raw
    ones, so the warm-up starts after that fit whatever the raw scale.

    Args:
        warmup_groups: counted anchor groups before ρ leaves 1 (int >= 0). Reference: 32.
        half_life: EMA half-life in counted groups after the warm-up (> 0). Reference: 64.
        rho_target: ρ at the moment of calibration (``mode="calibrated"``). Reference: 2.
        rho_max: upper clip of ρ. Reference: 4.
        mode: ``"calibrated"`` (fix ``c`` at warm-up end) or ``"parameter_free"`` (``c = 1``).
        disagreement_floor: ``ε`` (float > 0, a share of the real within-group variance, like
            ``s²``): in calibrated mode a disagreement below it counts as ``ε``, both in ``c`` and
            in ρ (``docs/method.md``, "Inverse-variance denoising"). Default 0.01.

    Attributes:
        training: when ``False``, :meth:`update` is ignored unless its ``training`` argument
            says otherwise (evaluation freezes ρ).
        ema: current ``s̄²`` (float; NaN before the first counted group).
        c: the scale fixed at calibration (NaN before; 1.0 in parameter-free mode).
        disagreement_floor: ``ε``.
        n_scored_groups: groups that counted (entered ``s̄²`` and the warm-up).
        n_uncalibrated: groups with a defined ``s²`` that did not count (not on the training scale).
        n_skipped: groups without a defined ``s²`` (fewer than 2 graded rollouts, constant real scores).
        n_no_spread: of those, the groups whose real scores did not vary (at least 2 rollouts with
            both scores): a policy that repeats one action per group, binary outcomes all 0 or 1.
        no_spread_run: such groups in a row since the last group whose real scores varied (groups
            with fewer than 2 rollouts scored by both leave it as it is).
        n_since_calibration: groups counted since ``c`` was last fixed (at the warm-up's end or by
            :meth:`recalibrate`).
        n_recalibrations: times :meth:`recalibrate` measured ``s̄²`` again (and fixed ``c`` again).

    Raises:
        ValueError: invalid arguments.

    Example:
        >>> w = InverseVarianceDenoiser(warmup_groups=2)
        >>> w.update([5.0, 15.0], [0.0, 1.0], calibrated_scale=False)  # raw scale: returned, not counted
        81.0
        >>> _ = w.update([0.0, 1.0], [0.0, 1.0]); w.rho
        1.0
        >>> _ = w.update([0.0, 1.0], [0.0, 1.0]); w.rho  # perfect warm-up: calibrated at the floor
        2.0
    """

    DEFAULT_DISAGREEMENT_FLOOR = 0.01
    """Default ``ε`` of ``disagreement_floor``: a residual std of 10% of the real within-group std."""

    def __init__(
        self,
        warmup_groups: int = 32,
        half_life: float = 64.0,
        rho_target: float = 2.0,
        rho_max: float = 4.0,
        mode: Literal["calibrated", "parameter_free"] = "calibrated",
        disagreement_floor: float = DEFAULT_DISAGREEMENT_FLOOR,
    ) -> None:
        check_arg(warmup_groups >= 0, "warmup_groups", ">= 0", warmup_groups)
        check_arg(half_life > 0, "half_life", "> 0 groups", half_life)
        if not 1.0 <= rho_target <= rho_max:
            raise ValueError(f"need 1 <= rho_target <= rho_max, got {rho_target}, {rho_max}")
        check_arg(mode in ("calibrated", "parameter_free"), "mode", "'calibrated' or 'parameter_free'", mode)
        check_arg(math.isfinite(disagreement_floor) and disagreement_floor > 0, "disagreement_floor",
                  "a finite share of the real variance > 0 (e.g. 0.01)", disagreement_floor)
        self.warmup_groups = int(warmup_groups)
        self.half_life = float(half_life)
        self.rho_target = float(rho_target)
        self.rho_max = float(rho_max)
        self.mode = mode
        self.disagreement_floor = float(disagreement_floor)
        self.training = True
        self.alpha = 1.0 - 0.5 ** (1.0 / self.half_life)
        self.ema = float("nan")
        self._var_real = float("nan")  # the running average of Var(r): s̄²'s denominator
        self.n_scored_groups = 0
        self.n_uncalibrated = 0
        self.n_skipped = 0
        self.n_no_spread = 0
        self.no_spread_run = 0
        self.n_since_calibration = 0
        self.n_recalibrations = 0
        self.c = 1.0 if mode == "parameter_free" else float("nan")

    @property
    def warmed_up(self) -> bool:
        """``True`` once ``warmup_groups`` groups have counted (and at least one)."""
        return self.n_scored_groups >= self.warmup_groups and self.n_scored_groups > 0

    @property
    def rho(self) -> float:
        """The current anchor weight ρ (float in [1, rho_max]); exactly 1.0 before warm-up."""
        if not self.warmed_up or not math.isfinite(self.ema) or not math.isfinite(self.c):
            return 1.0
        ema = max(self.ema, self.disagreement_floor) if self.mode == "calibrated" else self.ema
        return float(min(max(1.0 + self.c * ema, 1.0), self.rho_max))

    def update(
        self,
        calibrated: Sequence[float | None],
        real: Sequence[float | None],
        *,
        training: bool | None = None,
        calibrated_scale: bool = True,
    ) -> float | None:
        """Feed one anchor group; returns its ``s²``.

        Args:
            calibrated: calibrated world-model scores of the group, shape (G,); ``None``/NaN =
                ungraded.
            real: real scores of the group, shape (G,); ``None``/NaN = ungraded.
            training: whether this group may update at all; ``None``: :attr:`training` now. The
                flag itself is never changed (readers on other threads see it as it is).
            calibrated_scale: whether ``calibrated`` is on the scale the run trains on (scores
                mapped by a fitted debiaser, or raw scores when debiasing is off). ``False``:
                ``s²`` is returned (for logging) but enters neither ``s̄²`` nor the warm-up, and
                :attr:`n_uncalibrated` counts the group.

        Returns:
            The group's ``s²`` (float), or ``None`` when it has none (:attr:`n_skipped` counts
            it) or the group may not update.

        Raises:
            ValueError: ``calibrated`` and ``real`` differ in length.
        """
        if not (self.training if training is None else training):
            return None
        parts = group_disagreement_parts(calibrated, real)
        if parts is None:
            self.n_skipped += 1
            if _both_scored(calibrated, real) >= 2:  # scored, but the real scores do not vary
                self.n_no_spread += 1
                self.no_spread_run += 1
            return None
        self.no_spread_run = 0
        resid, var_r = parts
        s2 = resid / var_r
        if not calibrated_scale:
            self.n_uncalibrated += 1
            return s2
        self.n_scored_groups += 1
        self.n_since_calibration += 1
        n = self.n_scored_groups
        if not math.isfinite(self.ema):
            num, self._var_real = resid, var_r
        else:
            if not math.isfinite(self._var_real):
                # a state saved before s̄² was pooled has no Var(r) average: start it at this group's
                self._var_real = var_r
            w = 1.0 / n if n <= self.warmup_groups else self.alpha  # warm-up: running mean; then EMA
            num = self.ema * self._var_real
            num += w * (resid - num)
            self._var_real += w * (var_r - self._var_real)
        self.ema = num / self._var_real
        if self.mode == "calibrated" and not math.isfinite(self.c) and n >= self.warmup_groups:
            # Fix c once so that rho == rho_target right now: 1 + c * max(ema, eps) = rho_target
            # (a near-perfect warm-up calibrates at the floor eps, not at a vanishing ema).
            self.c = (self.rho_target - 1.0) / max(self.ema, self.disagreement_floor)
            self.n_since_calibration = 0
        return s2

    @property
    def stall_groups(self) -> int:
        """Anchor groups without real spread in a row that make a warm-up stalled:
        ``max(16, warmup_groups // 2)`` (:attr:`warmup_stalled`)."""
        return max(16, self.warmup_groups // 2)

    @property
    def warmup_stalled(self) -> bool:
        """Whether ρ's warm-up is stalled: it has not ended, and the last :attr:`stall_groups`
        anchor groups with scores all had real scores that did not vary, so none of them counted.

        Simulated (``benchmarks/rho_warmup_stall.py``, ``results/rho_warmup_stall.json``, 2,000 seeds
        per cell): when each anchor group's real scores vary with probability q, the share of runs
        flagged before their warm-up ends is at most 0.1% at q = 0.5 and 2.6–9.7% at q = 0.3 for
        warm-ups of 8 to 32 groups (0.0% at 64); at q = 0.1, where the warm-up takes 10 times its
        length, 81–100% are flagged; a stall (q = 0) is flagged after :attr:`stall_groups` groups.
        At q = 0.2 (five times the length) 4.5% (warm-up 64) to 59% (32) are. The simulation draws
        each group's spread independently; a collapsing policy makes runs of groups without
        spread, so on a real run these rates are lower bounds.
        """
        return not self.warmed_up and self.no_spread_run >= self.stall_groups

    @property
    def recalibration_due(self) -> bool:
        """Whether :meth:`recalibrate` would act now: warmed up, and ``warmup_groups`` groups (at
        least one) counted since ``c`` was last fixed."""
        return self.warmed_up and self.n_since_calibration >= max(1, self.warmup_groups)

    def recalibrate(
        self,
        calibrated_groups: Sequence[Sequence[float | None]],
        real_groups: Sequence[Sequence[float | None]],
        *,
        training: bool | None = None,
    ) -> bool:
        """The world model changed (a learned model's refit): measure ``s̄²`` again on the current
        model's scores of past anchor groups and, in calibrated mode, fix ``c`` again.

        Acts only when :attr:`recalibration_due`. ``s̄²`` becomes the pooled disagreement of the
        groups given, weighted as the EMA weighs them (the last group 1, each older one by another
        ``0.5 ** (1 / half_life)``), and ``c = (rho_target − 1)/max(s̄², ε)``, so ρ is
        ``rho_target`` now; in parameter-free mode only ``s̄²`` changes. The scores must be out of
        sample for each group (scores from a model fitted without the group, calibrated by a map
        fitted without it: :func:`~wmrl_envs.core.advisor_model.crossfit_calibrated`), as the
        groups that :meth:`update` sees are: in-sample scores would understate the disagreement.

        Args:
            calibrated_groups: per group, oldest first, the current model's calibrated scores
                (shape (G,) each; ``None``/NaN = missing).
            real_groups: per group, its real scores.
            training: whether this may update; ``None``: :attr:`training` now (the flag is never
                changed).

        Returns:
            Whether ``s̄²`` (and ``c``) were measured again (``False``: not due, not training, or
            no group with a defined ``s²``).

        Raises:
            ValueError: the two sequences differ in length, or a group's two score lists do.
        """
        if len(calibrated_groups) != len(real_groups):
            raise ValueError(f"{len(calibrated_groups)} groups of calibrated scores but {len(real_groups)} of real ones")
        if not (self.training if training is None else training) or not self.recalibration_due:
            return False
        parts = [group_disagreement_parts(c, r) for c, r in zip(calibrated_groups, real_groups)]
        decay = 1.0 - self.alpha
        num = den = 0.0
        weight = 1.0
        for p in reversed(parts):  # the newest group first, weight 1
            if p is not None:
                num += weight * p[0]
                den += weight * p[1]
                weight *= decay
        if den <= 0.0:
            return False
        self.ema, self._var_real = num / den, den / sum(decay**i for i in range(sum(p is not None for p in parts)))
        if self.mode == "calibrated":
            self.c = (self.rho_target - 1.0) / max(self.ema, self.disagreement_floor)
        self.n_since_calibration = 0
        self.n_recalibrations += 1
        return True

    def state_dict(self) -> dict[str, Any]:
        """All counters and the running averages (JSON-serialisable; NaN stored as ``None``)."""
        nan_to_none = lambda v: None if not math.isfinite(v) else v  # noqa: E731
        return {
            "warmup_groups": self.warmup_groups,
            "half_life": self.half_life,
            "rho_target": self.rho_target,
            "rho_max": self.rho_max,
            "mode": self.mode,
            "disagreement_floor": self.disagreement_floor,
            "ema": nan_to_none(self.ema),
            "ema_var_real": nan_to_none(self._var_real),
            "n_scored_groups": self.n_scored_groups,
            "n_uncalibrated": self.n_uncalibrated,
            "n_skipped": self.n_skipped,
            "n_no_spread": self.n_no_spread,
            "no_spread_run": self.no_spread_run,
            "n_since_calibration": self.n_since_calibration,
            "n_recalibrations": self.n_recalibrations,
            "c": nan_to_none(self.c),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (the ``training`` flag is kept as it is).

        States saved by earlier versions load: without ``disagreement_floor`` the floor is
        ``1e-6``, the guard their ``c`` was computed with, so that ρ stays what that ``c``
        implies; without ``ema_var_real`` (s̄² was an EMA of the groups' ``s²``) the pooled
        average of ``Var(r)`` starts at the next counted group's, so ``s̄²`` continues from the
        saved value; without ``n_uncalibrated``, ``n_no_spread`` or ``no_spread_run`` they are 0;
        without ``n_since_calibration`` it counts from the warm-up's end.
        """
        training = self.training
        self.__init__(
            warmup_groups=state["warmup_groups"],
            half_life=state["half_life"],
            rho_target=state["rho_target"],
            rho_max=state["rho_max"],
            mode=state["mode"],
            disagreement_floor=state.get("disagreement_floor", 1e-6),
        )
        self.ema = float("nan") if state["ema"] is None else float(state["ema"])
        var_real = state.get("ema_var_real")
        self._var_real = float("nan") if var_real is None else float(var_real)
        self.c = float("nan") if state["c"] is None else float(state["c"])
        self.n_scored_groups = int(state["n_scored_groups"])
        self.n_uncalibrated = int(state.get("n_uncalibrated", 0))
        self.n_skipped = int(state["n_skipped"])
        self.n_no_spread = int(state.get("n_no_spread", 0))  # absent before issue 35's session 8
        self.no_spread_run = int(state.get("no_spread_run", 0))
        # absent before issue 37: counted from the warm-up's end (c was fixed then, never again)
        self.n_since_calibration = int(state.get("n_since_calibration",
                                                 max(0, self.n_scored_groups - self.warmup_groups)))
        self.n_recalibrations = int(state.get("n_recalibrations", 0))
        self.training = training
