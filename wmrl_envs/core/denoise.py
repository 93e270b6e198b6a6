"""Inverse-variance denoising: the anchor weight ρ on anchor-group advantages.

For each anchor group with calibrated world-model scores ``d_i = f̂(r̂_i)`` and real scores
``r_i`` the *disagreement* is

    s² = mean_i[((d_i − mean d) − (r_i − mean r))²] / Var_i(r),

the share of the real within-group variation that the world model gets wrong (groups with
``Var(r) ≈ 0`` or fewer than 2 graded rollouts are skipped). Its exponential moving average
``s̄²`` (half-life 64 groups) tracks how noisy world-model advantages are. The anchor weight is
``ρ = 1`` during a warm-up of 32 groups; then ``c`` is fixed once so that ``ρ = ρ_target``
(2) at that moment, and from then on ``ρ = clip(1 + c·s̄², 1, ρ_max)`` (``ρ_max = 4``), i.e.
``ρ = 1 + η̂²/η̂²_cal`` with ``η̂²_cal`` the disagreement frozen at calibration. The
parameter-free variant uses ``c = 1``. ``ρ`` multiplies the post-normalisation GRPO advantages
of anchor-group rows only, so training leans on real executions when the world model is poor.
See ``docs/method.md`` ("Inverse-variance denoising"), after Yang et al., arXiv 2608.12564.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Sequence

import numpy as np

__all__ = ["AnchorWeighter", "group_disagreement"]


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


class AnchorWeighter:
    """Tracks the disagreement EMA ``s̄²`` and gives the anchor weight ``ρ``.

    Args:
        warmup_groups: anchor groups (with a defined ``s²``) before ρ leaves 1. Reference: 32.
        half_life: EMA half-life in groups. Reference: 64.
        rho_target: ρ at the moment of calibration (``mode="calibrated"``). Reference: 2.
        rho_max: upper clip of ρ. Reference: 4.
        mode: ``"calibrated"`` (fix ``c`` at warm-up end) or ``"parameter_free"`` (``c = 1``).

    Attributes:
        training: when ``False``, :meth:`update` is ignored (evaluation freezes ρ).
        ema: current ``s̄²`` (NaN before the first group).
        c: the scale fixed at calibration (NaN before; 1.0 in parameter-free mode).

    Raises:
        ValueError: invalid arguments.

    Example:
        >>> w = AnchorWeighter(warmup_groups=2)
        >>> _ = w.update([0.0, 1.0], [0.0, 1.0]); w.rho
        1.0
    """

    def __init__(
        self,
        warmup_groups: int = 32,
        half_life: float = 64.0,
        rho_target: float = 2.0,
        rho_max: float = 4.0,
        mode: Literal["calibrated", "parameter_free"] = "calibrated",
    ) -> None:
        if warmup_groups < 0:
            raise ValueError(f"warmup_groups must be >= 0, got {warmup_groups}")
        if half_life <= 0:
            raise ValueError(f"half_life must be > 0 groups, got {half_life}")
        if not 1.0 <= rho_target <= rho_max:
            raise ValueError(f"need 1 <= rho_target <= rho_max, got {rho_target}, {rho_max}")
        if mode not in ("calibrated", "parameter_free"):
            raise ValueError(f"mode must be 'calibrated' or 'parameter_free', got {mode!r}")
        self.warmup_groups = int(warmup_groups)
        self.half_life = float(half_life)
        self.rho_target = float(rho_target)
        self.rho_max = float(rho_max)
        self.mode = mode
        self.training = True
        self.alpha = 1.0 - 0.5 ** (1.0 / self.half_life)
        self.ema = float("nan")
        self.n_groups = 0
        self.n_skipped = 0
        self.c = 1.0 if mode == "parameter_free" else float("nan")
        self.last_s2: float | None = None

    @property
    def warmed_up(self) -> bool:
        """``True`` once ``warmup_groups`` groups have contributed a disagreement."""
        return self.n_groups >= self.warmup_groups and self.n_groups > 0

    @property
    def rho(self) -> float:
        """The current anchor weight ρ (float in [1, rho_max]); exactly 1.0 before warm-up."""
        if not self.warmed_up or not math.isfinite(self.ema) or not math.isfinite(self.c):
            return 1.0
        return float(min(max(1.0 + self.c * self.ema, 1.0), self.rho_max))

    def update(self, calibrated: Sequence[float | None], real: Sequence[float | None]) -> float | None:
        """Feed one anchor group; returns its ``s²`` (``None`` if skipped or not training).

        Args:
            calibrated: calibrated world-model scores of the group, shape (G,).
            real: real scores of the group, shape (G,).
        """
        if not self.training:
            return None
        s2 = group_disagreement(calibrated, real)
        self.last_s2 = s2
        if s2 is None:
            self.n_skipped += 1
            return None
        self.ema = s2 if not math.isfinite(self.ema) else (1 - self.alpha) * self.ema + self.alpha * s2
        self.n_groups += 1
        if self.mode == "calibrated" and not math.isfinite(self.c) and self.n_groups >= self.warmup_groups:
            # Fix c once so that rho == rho_target right now: 1 + c * ema = rho_target.
            self.c = (self.rho_target - 1.0) / max(self.ema, 1e-6)
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
            "ema": nan_to_none(self.ema),
            "n_groups": self.n_groups,
            "n_skipped": self.n_skipped,
            "c": nan_to_none(self.c),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (the ``training`` flag is kept as it is)."""
        training = self.training
        self.__init__(
            warmup_groups=state["warmup_groups"],
            half_life=state["half_life"],
            rho_target=state["rho_target"],
            rho_max=state["rho_max"],
            mode=state["mode"],
        )
        self.ema = float("nan") if state["ema"] is None else float(state["ema"])
        self.c = float("nan") if state["c"] is None else float(state["c"])
        self.n_groups = int(state["n_groups"])
        self.n_skipped = int(state["n_skipped"])
        self.training = training
