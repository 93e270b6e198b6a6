"""``CorrectionConfig``: the correction settings of one run, declared once.

Every CLI config (``wmrl train``, ``wmrl bench``, the embodied experiment) nests this dataclass
and every wrapper accepts it, so the anchor schedule, the debiaser and the denoiser are set by
the same names everywhere (tyro turns the field docstrings into ``--help``). The defaults are
the reference settings of ``docs/method.md``; :meth:`CorrectionConfig.build_corrector` and
:meth:`CorrectionConfig.build_router` make the objects of :mod:`wmrl_envs.core` from it.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import Literal

from .adaptive import AdaptiveAnchorFraction
from .corrector import WMRLCorrector
from .debias import IsotonicDebiaser
from .denoise import InverseVarianceDenoiser
from .ledger import CostLedger
from .routing import AnchorRouter

__all__ = ["CorrectionConfig"]


@dataclass(frozen=True)
class CorrectionConfig:
    """Anchor schedule, online debiasing and inverse-variance denoising settings (validated once).

    Integer fields accept any :class:`numbers.Integral` but ``bool`` (e.g. ``np.int64``), number
    fields any finite :class:`numbers.Real`; values are stored as given.

    Raises:
        ValueError: a field is out of range (the message names the field and its range), or
            ``buffer_size < min_pairs`` (the map would never be fitted).

    Example:
        >>> cfg = CorrectionConfig(anchor_fraction=0.25, min_pairs=16)
        >>> cfg.build_corrector().debiaser.min_pairs, cfg.build_router(seed=0).anchor_fraction
        (16, 0.25)
    """

    anchor_fraction: float | Literal["auto"] = 0.1
    """Share of groups that are also executed for real (anchors), in [0, 1]; or "auto": it follows
    the advisor's f* during training (auto_start_fraction, f_min, f_max, cost_ratio, ...;
    docs/method.md, "Choosing the anchor fraction")."""
    min_anchor_groups: int = 1
    """Anchor groups per window of anchor_window training steps at least (0 allows windows without anchors)."""
    anchor_window: int = 1
    """Steps per window of the min_anchor_groups floor, >= 1 (1: the floor holds every step; e.g. 10
    with 2 groups per step at anchor_fraction 0.05 keeps the realised fraction near 0.05)."""
    debias: bool = True
    """Apply online debiasing (the isotonic map f̂) to world-model scores."""
    debias_map: str = "isotonic"
    """The debiasing map (:data:`~wmrl_envs.core.debias.MAP_KINDS`): ``"isotonic"`` (the paper's),
    ``"linear"``, ``"identity"``, or ``"auto"``: at each fit the one of the three with the lowest
    out-of-fold squared error on the buffered pairs (so that a map fitted on few noisy pairs over a
    world model already on the real scale does not calibrate worse than the raw score)."""
    denoise: bool = True
    """Apply the anchor weight ρ to anchor-group advantages."""
    buffer_size: int = 5000
    """FIFO capacity of the debiaser's anchor pairs (reference 5000)."""
    min_pairs: int = 200
    """Anchor pairs before the first isotonic fit; the map is the identity before (reference 200)."""
    refit_every: int = 64
    """Refit the isotonic map after this many new anchor pairs (reference 64)."""
    warmup_groups: int = 32
    """Anchor groups with a defined disagreement before ρ leaves 1, counted from the debiaser's first fit
    on (calibrated scores; from the first group with debias=False); c is fixed from their mean (reference 32;
    ρ's spread over seeds per warm-up: benchmarks/rho_calibration.py)."""
    half_life: float = 64.0
    """Half-life, in anchor groups, of the disagreement EMA s̄² after the warm-up (reference 64)."""
    rho_target: float = 2.0
    """ρ at the moment of calibration (calibrated mode; reference 2)."""
    rho_max: float = 4.0
    """Upper clip of ρ (reference 4)."""
    rho_mode: Literal["calibrated", "parameter_free"] = "calibrated"
    """How ρ is scaled: c fixed at the end of warm-up (calibrated) or c = 1 (parameter_free)."""
    disagreement_floor: float = InverseVarianceDenoiser.DEFAULT_DISAGREEMENT_FLOOR
    """ε: in calibrated mode a disagreement below it counts as ε (share of the real within-group variance)."""
    auto_start_fraction: float = 0.1
    """anchor_fraction="auto": the fraction until the advisor holds auto_min_groups anchor groups."""
    f_min: float = 0.02
    """anchor_fraction="auto": the lowest fraction it may choose."""
    f_max: float = 0.5
    """anchor_fraction="auto": the highest fraction it may choose."""
    cost_ratio: float | None = None
    """anchor_fraction="auto": gamma = (world model + generation + update) / execution cost per rollout,
    e.g. from `wmrl advise`; None: measured from the run's ledger in cost_basis at the end of the warm-up, then
    fixed (give it for routes that depend on the seed alone)."""
    noise_batch_ratio: float | None = None
    """anchor_fraction="auto": B_noise / B, real-execution GRPO's gradient noise scale (in groups) over this
    run's groups per step (GradientNoiseScale.ratio(groups_per_step), e.g. measured on a few real GRPO
    steps before the run; B_noise does not depend on the batch, b does), fixed like cost_ratio;
    None: unknown (the noise-limited form: f_min for a useful world model, f_max for a useless one)."""
    auto_window: int = 16
    """anchor_fraction="auto": the last anchor groups the online within-group correlation is taken over."""
    auto_min_groups: int = 8
    """anchor_fraction="auto": usable anchor groups in the window before the fraction adapts."""
    auto_step_law: Literal["sgd", "adam"] = "adam"
    """anchor_fraction="auto": the step law its f* is taken under: "adam" (default: Adam's law with this run's
    anchor weight, rho_target when it denoises, 1 when not; a world model without signal needs about
    sqrt(2 gamma / 3)) or "sgd" (the rule before: a world model without signal sends the fraction to f_max
    without a noise scale); docs/method.md, "Adaptive anchor fraction"; benchmarks/auto_step_law.py."""
    auto_hysteresis: float = 0.25
    """anchor_fraction="auto": the fraction moves only when it lies outside the range of fractions r's
    confidence bounds allow by more than this factor - 1 (docs/method.md, "Adaptive anchor fraction")."""
    execution_budget: int | None = None
    """anchor_fraction="auto": real executions allowed in all (None: no budget); the floor of
    min_anchor_groups is never removed (see on_budget_spent)."""
    on_budget_spent: Literal["floor", "stop"] = "stop"
    """anchor_fraction="auto", once execution_budget is spent: "stop" (default: ExecutionBudgetSpent ends
    training at the last group that fits in the budget; ``wmrl train`` then evaluates and writes its summary) or
    "floor" (the min_anchor_groups floor keeps executing, past the budget, with a warning: the
    corrections keep getting fresh pairs, the budget is no longer a cap)."""
    cost_basis: Literal["cpu", "wall", "per_call"] = "cpu"
    """What a cost is, for the ledger, gamma (cost_ratio measured), the advisor and every summary: "cpu"
    (CPU-seconds of this machine: local execution), "wall" (wall-clock seconds: the wait for a remote job, a
    GPU queue or a paid API counts) or "per_call" (a declared price per event, cost_prices, or the price an
    execution reports in info["execution_cost"])."""
    cost_prices: dict[str, float] | None = None
    """cost_basis="per_call": {source: price of one event}, "execution" (> 0) and every other source the
    run records ("world_model"; "generation", "update" where a trainer records them), e.g.
    {"execution": 0.02, "world_model": 0.0001}. An execution whose env reports its own price in its step info
    (info["execution_cost"], a finite number >= 0 in cost_unit) is charged that instead; cost_prices["execution"]
    is then the price of an execution that reports none."""
    cost_unit: str | None = None
    """cost_basis="per_call": the prices' unit, e.g. "USD" or "GPU-s" (default "units")."""

    def __post_init__(self) -> None:
        def check(ok: bool, field: str, what: str) -> None:
            if not ok:
                raise ValueError(f"CorrectionConfig.{field} must be {what}, got {getattr(self, field)!r}")

        def is_num(v: object) -> bool:
            return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))

        def is_int(v: object) -> bool:  # numpy integers too (not bools)
            return isinstance(v, numbers.Integral) and not isinstance(v, bool)

        check(self.anchor_fraction == "auto" or (is_num(self.anchor_fraction) and 0.0 <= self.anchor_fraction <= 1.0),
              "anchor_fraction", "a number in [0, 1] or 'auto'")
        self.build_adaptive()  # the auto settings' own checks, named (they are checked whatever the fraction)
        if self.anchor_fraction != "auto":
            unused = [f for f in _AUTO_FIELDS if getattr(self, f) != _AUTO_DEFAULTS[f]]
            if unused:
                raise ValueError(f"CorrectionConfig: {unused} only apply with anchor_fraction='auto' (it is "
                                 f"{self.anchor_fraction!r}); set anchor_fraction='auto' or leave them at their defaults")
        check(is_int(self.min_anchor_groups) and self.min_anchor_groups >= 0, "min_anchor_groups", "an integer >= 0")
        check(is_int(self.anchor_window) and self.anchor_window >= 1, "anchor_window", "an integer number of steps >= 1")
        check(isinstance(self.debias, bool), "debias", "True or False")
        check(isinstance(self.denoise, bool), "denoise", "True or False")
        from .debias import MAP_KINDS

        check(self.debias_map in MAP_KINDS, "debias_map", f"one of {', '.join(repr(k) for k in MAP_KINDS)}")
        for name in ("buffer_size", "min_pairs", "refit_every"):
            check(is_int(getattr(self, name)) and getattr(self, name) >= 1, name, "an integer >= 1")
        check(self.buffer_size >= self.min_pairs, "buffer_size",
              f"an integer >= min_pairs={self.min_pairs!r} (a smaller buffer never holds enough pairs to fit)")
        check(is_int(self.warmup_groups) and self.warmup_groups >= 0, "warmup_groups", "an integer >= 0")
        check(is_num(self.half_life) and self.half_life > 0, "half_life", "a number of groups > 0")
        check(is_num(self.rho_max) and self.rho_max >= 1.0, "rho_max", "a number >= 1")
        check(is_num(self.rho_target) and 1.0 <= self.rho_target <= self.rho_max, "rho_target",
              f"a number in [1, rho_max={self.rho_max!r}]")
        check(self.rho_mode in ("calibrated", "parameter_free"), "rho_mode", "'calibrated' or 'parameter_free'")
        check(is_num(self.disagreement_floor) and self.disagreement_floor > 0, "disagreement_floor",
              "a finite share of the real variance > 0 (e.g. 0.01)")
        try:
            self.build_ledger()
        except ValueError as exc:
            msg = str(exc).replace("prices", "cost_prices").replace("cost_prices and unit", "cost_prices and cost_unit")
            raise ValueError(f"CorrectionConfig: {msg}") from None

    def build_ledger(self) -> CostLedger:
        """A fresh :class:`~wmrl_envs.core.CostLedger` counting costs in ``cost_basis``."""
        return CostLedger(self.cost_basis, prices=self.cost_prices, unit=self.cost_unit)

    def build_debiaser(self) -> IsotonicDebiaser:
        """A fresh :class:`~wmrl_envs.core.IsotonicDebiaser` with these settings."""
        return IsotonicDebiaser(buffer_size=self.buffer_size, min_pairs=self.min_pairs, refit_every=self.refit_every,
                                map_kind=self.debias_map)

    def build_denoiser(self) -> InverseVarianceDenoiser:
        """A fresh :class:`~wmrl_envs.core.InverseVarianceDenoiser` with these settings."""
        return InverseVarianceDenoiser(
            warmup_groups=self.warmup_groups, half_life=self.half_life, rho_target=self.rho_target,
            rho_max=self.rho_max, mode=self.rho_mode, disagreement_floor=self.disagreement_floor,
        )

    def build_corrector(self) -> WMRLCorrector:
        """A fresh :class:`~wmrl_envs.core.WMRLCorrector` (debiaser + denoiser) with these settings."""
        return WMRLCorrector(self.build_debiaser(), self.build_denoiser(), debias=self.debias, denoise=self.denoise)

    @property
    def adaptive(self) -> bool:
        """Whether the anchor fraction is ``"auto"``."""
        return self.anchor_fraction == "auto"

    def build_adaptive(self) -> AdaptiveAnchorFraction:
        """A fresh :class:`~wmrl_envs.core.AdaptiveAnchorFraction` with the ``auto_*`` settings.

        Raises:
            ValueError: an ``auto_*``, ``f_min``/``f_max``, ``cost_ratio`` or budget setting out of
                range (the message names it).
        """
        try:
            return AdaptiveAnchorFraction(
                start=self.auto_start_fraction, f_min=self.f_min, f_max=self.f_max, cost_ratio=self.cost_ratio,
                noise_batch_ratio=self.noise_batch_ratio, window=self.auto_window, min_groups=self.auto_min_groups, hysteresis=self.auto_hysteresis,
                execution_budget=self.execution_budget, on_budget_spent=self.on_budget_spent,
                step_law=self.auto_step_law,
                rho=(self.rho_target if self.denoise else 1.0) if self.auto_step_law == "adam" else None)
        except ValueError as exc:
            msg = str(exc)
            for arg, fld in (("min_groups", "auto_min_groups"), ("window", "auto_window"),
                             ("hysteresis", "auto_hysteresis"), ("start", "auto_start_fraction"),
                             ("step_law", "auto_step_law")):
                msg = re.sub(rf"(?<![a-z_]){arg}(?![a-z_])", fld, msg)
            raise ValueError(f"CorrectionConfig: {msg}") from None

    def build_router(self, seed: int = 0) -> AnchorRouter:
        """A fresh :class:`~wmrl_envs.core.AnchorRouter` (``anchor_fraction``, ``min_anchor_groups``,
        ``anchor_window``) seeded with ``seed`` (int)."""
        start = min(self.f_max, max(self.f_min, self.auto_start_fraction)) if self.adaptive else self.anchor_fraction
        return AnchorRouter(start, min_anchor_groups=self.min_anchor_groups, seed=seed,
                            anchor_window=self.anchor_window)


_AUTO_FIELDS = ("auto_start_fraction", "f_min", "f_max", "cost_ratio", "noise_batch_ratio", "auto_window", "auto_min_groups",
                "auto_hysteresis", "auto_step_law", "execution_budget", "on_budget_spent")
"""The settings of ``anchor_fraction="auto"`` (refused with a fixed fraction unless at their defaults)."""
_AUTO_DEFAULTS = {f: CorrectionConfig.__dataclass_fields__[f].default for f in _AUTO_FIELDS}
