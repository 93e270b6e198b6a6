"""Inverse-variance denoising: the anchor weight ρ on anchor-group advantages.

:func:`group_disagreement` is one anchor group's normalised disagreement ``s²`` (the share of
the real within-group variation the world model gets wrong); :class:`InverseVarianceDenoiser`
keeps its EMA ``s̄²`` and turns it into ``ρ`` (warm-up, calibration of the scale ``c``, the
floor ``ε`` for a near-perfect warm-up, the clip). The formulas and why the floor is needed are
in ``docs/method.md`` ("Inverse-variance denoising"), after Yang et al., arXiv 2608.12564.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Sequence

import numpy as np

__all__ = ["InverseVarianceDenoiser", "group_disagreement"]


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
    return float(np.mean(resid**2) / var_r)


class InverseVarianceDenoiser:
    """Tracks the disagreement EMA ``s̄²`` and gives the anchor weight ``ρ``.

    Args:
        warmup_groups: anchor groups (with a defined ``s²``) before ρ leaves 1. Reference: 32.
        half_life: EMA half-life in groups. Reference: 64.
        rho_target: ρ at the moment of calibration (``mode="calibrated"``). Reference: 2.
        rho_max: upper clip of ρ. Reference: 4.
        mode: ``"calibrated"`` (fix ``c`` at warm-up end) or ``"parameter_free"`` (``c = 1``).
        disagreement_floor: ``ε`` (float > 0, a share of the real within-group variance, like
            ``s²``): in calibrated mode a disagreement below it counts as ``ε``, both in ``c`` and
            in ρ (``docs/method.md``, "Inverse-variance denoising"). Default 0.01.

    Attributes:
        training: when ``False``, :meth:`update` is ignored (evaluation freezes ρ).
        ema: current ``s̄²`` (NaN before the first group).
        c: the scale fixed at calibration (NaN before; 1.0 in parameter-free mode).
        disagreement_floor: ``ε``.

    Raises:
        ValueError: invalid arguments.

    Example:
        >>> w = InverseVarianceDenoiser(warmup_groups=2)
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
        if warmup_groups < 0:
            raise ValueError(f"warmup_groups must be >= 0, got {warmup_groups}")
        if half_life <= 0:
            raise ValueError(f"half_life must be > 0 groups, got {half_life}")
        if not 1.0 <= rho_target <= rho_max:
            raise ValueError(f"need 1 <= rho_target <= rho_max, got {rho_target}, {rho_max}")
        if mode not in ("calibrated", "parameter_free"):
            raise ValueError(f"mode must be 'calibrated' or 'parameter_free', got {mode!r}")
        if not (math.isfinite(disagreement_floor) and disagreement_floor > 0):
            raise ValueError(
                f"disagreement_floor must be a finite share of the real variance > 0 (e.g. 0.01), got {disagreement_floor}"
            )
        self.warmup_groups = int(warmup_groups)
        self.half_life = float(half_life)
        self.rho_target = float(rho_target)
        self.rho_max = float(rho_max)
        self.mode = mode
        self.disagreement_floor = float(disagreement_floor)
        self.training = True
        self.alpha = 1.0 - 0.5 ** (1.0 / self.half_life)
        self.ema = float("nan")
        self.n_scored_groups = 0
        self.n_skipped = 0
        self.c = 1.0 if mode == "parameter_free" else float("nan")

    @property
    def warmed_up(self) -> bool:
        """``True`` once ``warmup_groups`` groups have contributed a disagreement."""
        return self.n_scored_groups >= self.warmup_groups and self.n_scored_groups > 0

    @property
    def rho(self) -> float:
        """The current anchor weight ρ (float in [1, rho_max]); exactly 1.0 before warm-up."""
        if not self.warmed_up or not math.isfinite(self.ema) or not math.isfinite(self.c):
            return 1.0
        ema = max(self.ema, self.disagreement_floor) if self.mode == "calibrated" else self.ema
        return float(min(max(1.0 + self.c * ema, 1.0), self.rho_max))

    def update(self, calibrated: Sequence[float | None], real: Sequence[float | None]) -> float | None:
        """Feed one anchor group; returns its ``s²`` (``None`` if skipped or not training).

        Args:
            calibrated: calibrated world-model scores of the group, shape (G,).
            real: real scores of the group, shape (G,).
        """
        if not self.training:
            return None
        s2 = group_disagreement(calibrated, real)
        if s2 is None:
            self.n_skipped += 1
            return None
        self.ema = s2 if not math.isfinite(self.ema) else (1 - self.alpha) * self.ema + self.alpha * s2
        self.n_scored_groups += 1
        if self.mode == "calibrated" and not math.isfinite(self.c) and self.n_scored_groups >= self.warmup_groups:
            # Fix c once so that rho == rho_target right now: 1 + c * max(ema, eps) = rho_target
            # (a near-perfect warm-up calibrates at the floor eps, not at a vanishing ema).
            self.c = (self.rho_target - 1.0) / max(self.ema, self.disagreement_floor)
        return s2

    def state_dict(self) -> dict[str, Any]:
        """All counters and the EMA (JSON-serialisable; NaN stored as ``None``)."""
        nan_to_none = lambda v: None if not math.isfinite(v) else v  # noqa: E731
        return {
            "warmup_groups": self.warmup_groups,
            "half_life": self.half_life,
            "rho_target": self.rho_target,
            "rho_max": self.rho_max,
            "mode": self.mode,
            "disagreement_floor": self.disagreement_floor,
            "ema": nan_to_none(self.ema),
            "n_scored_groups": self.n_scored_groups,
            "n_skipped": self.n_skipped,
            "c": nan_to_none(self.c),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (the ``training`` flag is kept as it is).

        A state saved before ``disagreement_floor`` existed gets ``1e-6``, the guard its ``c``
        was computed with, so that ρ stays what that ``c`` implies.
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
        self.c = float("nan") if state["c"] is None else float(state["c"])
        self.n_scored_groups = int(state["n_scored_groups"])
        self.n_skipped = int(state["n_skipped"])
        self.training = training
