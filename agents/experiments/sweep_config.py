"""The configuration of the known-truth sweep (``wmrl bench sweep``): :class:`SweepConfig`, its
presets, and what a method's step is declared to cost (:func:`declared_step_cost_s`,
:func:`equal_steps_cost_ratio`, :func:`step_cap_for`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated

import tyro

from wmrl_envs.core import CorrectionConfig


__all__ = ["ABLATIONS", "BREAKING", "REAL_AT_F", "SWEEP_PRESETS", "SweepConfig", "declared_step_cost_s", "equal_steps_cost_ratio", "step_cap_for"]


BREAKING = "breaking"
"""The name of the world model that breaks mid-run in the sweep's tables."""


REAL_AT_F = "real_at_f"
"""The sweep's extra reference: real-execution GRPO with ``max(1, round(f × groups_per_step))``
groups per step — the anchor groups alone, without the world-model groups. Its speedup over
real GRPO is the part of an anchored method's saving that a smaller real batch gives by itself."""


ABLATIONS = ("debias_only", "denoise_only", "anchors_raw")


@dataclass
class SweepConfig:
    """Configuration of ``wmrl bench sweep`` (each field is a CLI flag; ``--quick`` starts from
    the CI preset)."""

    levels: tuple[str, ...] = ("perfect", "monotone", "mild_noise", "heavy_noise", "bias", "blind_spots", "useless")
    """World-model quality levels (names of wmrl_envs.envs.known_truth.WORLD_MODEL_ERRORS)."""
    fractions: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4)
    """Anchor fractions f of the anchored methods."""
    methods: tuple[str, ...] = ("real", "wm_only", "wmrl", "debias_only", "denoise_only", "anchors_raw")
    """Methods (agents.experiments.methods.METHODS); real is always run (it sets the target)."""
    ablation_fractions: tuple[float, ...] | None = None
    """Fractions at which the ablations run (None: every fraction)."""
    breaking: bool = True
    """Also run a world model that breaks mid-run (wmrl at every fraction, and wm_only)."""
    real_at_f: bool = True
    """Also run real GRPO with only round(f × groups_per_step) groups per step (the anchor groups
    alone) at every fraction: how much of the saving a smaller real batch gives by itself."""
    break_from: str = "perfect"
    """Its quality before the break."""
    break_to: str = "useless"
    """Its quality after the break."""
    break_at_step: int = 6
    """It breaks after the predictions of this many training steps (groups_per_step × group_size each)."""
    seeds: int = 10
    """Seeds per cell (0..seeds-1; runs of one seed share the env table, the world model's seed and the policy's start)."""
    steps: int = 25
    """Steps of real-execution GRPO (its budget S)."""
    max_compute_factor: float = 2.0
    """Other methods stop at this many times real GRPO's median compute (CPU-seconds): the budget."""
    step_cap: int = 1200
    """Absolute safety cap on any run's steps. Each run's own cap is the steps its declared cost per
    step needs to spend the budget, with a 25% margin (step_cap_for), but never more than this;
    it binds first only for world model only (its budget would need ~5000 steps at the defaults)."""
    gain_fraction: float = 0.9
    """The target: this share of real GRPO's mean gain from the untrained policy to step S."""
    min_gain: float = 0.01
    """Real GRPO must improve its exact expected score (0-1 scale) by more than this in S steps, or
    there is no target and the sweep stops after the real runs (target_score's min_gain)."""
    groups_per_step: int = 16
    """Groups (tasks) per step."""
    group_size: int = 8
    """G, rollouts per group."""
    n_tasks: int = 4
    """Tasks of the env (all are evaluation tasks)."""
    n_actions: int = 24
    """Actions per task."""
    outcome_noise_std: float = 0.1
    """Outcome randomness of a real execution that the action does not reveal."""
    execution_cost_s: float = 1.0
    """Declared CPU-seconds per real execution."""
    wm_cost_s: float = 0.01
    """Declared CPU-seconds per world-model prediction (replaces the levels' own)."""
    lr: float = 0.2
    """Adam learning rate of the tabular policy's logits."""
    correction: Annotated[CorrectionConfig, tyro.conf.OmitArgPrefixes] = field(
        default_factory=lambda: CorrectionConfig(min_anchor_groups=0, min_pairs=32, refit_every=16,
                                                 warmup_groups=4, half_life=16.0)
    )
    """Correction settings (flags without prefix); each method sets its own fraction, debias and
    denoise on top (METHODS, method_correction). min_anchor_groups=0: the realised fraction is
    the configured one in expectation (stochastic rounding), also at small f."""
    n_boot: int = 2000
    """Bootstrap replicates of each speedup's interval."""
    auto_noise_batch_ratio: float | None = None
    """Runs with anchor_fraction="auto" (wmrl bench advisor's; the sweep's own cells fix the fraction): the
    noise_batch_ratio they are given (B_noise / B of real GRPO); wmrl bench advisor replaces it with the
    one it measures on its real-GRPO runs' first steps; None: unknown."""
    correlation_groups: int = 512
    """Groups drawn to measure each level's correlation under the untrained policy."""
    workers: int = 2
    """Processes running the runs (1: in this process)."""
    out_dir: str = "runs/sweep"
    """Output folder."""

    def __post_init__(self) -> None:
        def check(ok: bool, name: str, what: str) -> None:
            if not ok:
                raise ValueError(f"SweepConfig.{name} must be {what}, got {getattr(self, name)!r}")

        from wmrl_envs.envs.known_truth import WORLD_MODEL_ERRORS

        from .methods import METHODS

        for name in ("levels", "fractions", "methods", "ablation_fractions"):
            values = getattr(self, name)
            if values is not None and len(set(values)) != len(values):
                dup = sorted({v for v in values if list(values).count(v) > 1}, key=str)
                raise ValueError(f"SweepConfig.{name} has duplicates {dup}: give each value once, got {values!r}")
        unknown = [x for x in self.levels if x not in WORLD_MODEL_ERRORS]
        check(bool(self.levels) and not unknown, "levels", f"a non-empty subset of {sorted(WORLD_MODEL_ERRORS)}")
        check(bool(self.fractions) and all(0 < f <= 1 for f in self.fractions), "fractions", "anchor fractions in (0, 1]")
        check(all(m in METHODS for m in self.methods), "methods", f"a subset of {list(METHODS)}")
        check(self.ablation_fractions is None or all(f in self.fractions for f in self.ablation_fractions),
              "ablation_fractions", "None or a subset of fractions")
        for name in ("break_from", "break_to"):
            check(getattr(self, name) in WORLD_MODEL_ERRORS, name, f"one of {sorted(WORLD_MODEL_ERRORS)}")
        for name in ("seeds", "steps", "groups_per_step", "n_tasks", "workers", "n_boot", "correlation_groups"):
            check(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, name, "an integer >= 1")
        check(isinstance(self.break_at_step, int) and self.break_at_step >= 0, "break_at_step", "an integer >= 0")
        b = self.auto_noise_batch_ratio
        check(b is None or (isinstance(b, (int, float)) and not isinstance(b, bool) and b >= 0),
              "auto_noise_batch_ratio", "None or a number >= 0 (B_noise / B)")
        if self.breaking and self.break_at_step >= self.steps:
            raise ValueError(
                f"SweepConfig.break_at_step={self.break_at_step} is not within real GRPO's {self.steps} steps: the "
                "breaking world model's runs stop at the target, which a good world model reaches in fewer steps "
                f"than real GRPO, so the break would not happen; give break_at_step < steps ({self.steps}) or "
                "--no-breaking"
            )
        check(isinstance(self.step_cap, int) and self.step_cap >= self.steps, "step_cap",
              f"an integer >= steps ({self.steps})")
        check(isinstance(self.group_size, int) and self.group_size >= 2, "group_size", "an integer >= 2")
        check(self.max_compute_factor > 0, "max_compute_factor", "a number > 0")
        check(0 < self.gain_fraction <= 1, "gain_fraction", "a number in (0, 1]")
        check(0 <= self.min_gain < 1, "min_gain", "a score gain in [0, 1)")
        check(self.execution_cost_s > 0, "execution_cost_s", "a number of CPU-seconds > 0")
        check(self.wm_cost_s >= 0, "wm_cost_s", "a number of CPU-seconds >= 0")
        check(self.lr > 0, "lr", "a number > 0")


SWEEP_PRESETS: dict[str, SweepConfig] = {
    "default": SweepConfig(),
    "quick": SweepConfig(levels=("perfect", "useless"), fractions=(0.1, 0.4), seeds=4, steps=15,
                         ablation_fractions=(0.1,), break_at_step=4, n_boot=500, correlation_groups=128,
                         step_cap=400, workers=1, out_dir="runs/sweep-quick"),
}
"""``default``: the full map (the issue's grid, the ablations at every fraction); ``quick``: the CI preset
(two levels, two fractions, four seeds, a safety cap of 400 steps; about a minute on one core)."""


def equal_steps_cost_ratio(fraction: float | None, execution_cost_s: float, wm_cost_s: float) -> float:
    """The equal-steps cost ratio: real GRPO's declared cost per rollout over an anchored method's,
    ``c_exec / (f·c_exec + c_wm)`` (``f = 0`` or ``None``: world model only), ignoring generation
    and update.

    It is the compute-to-target speedup a method would have if it needed exactly as many steps as
    real GRPO to reach the target. It is *not* a bound: a method that needs fewer steps beats it.
    In the known-truth env a perfect world model predicts the *expected* score of an action,
    without the outcome noise of a real execution, so its advantages are less noisy than real
    ones and it can learn faster per step than real GRPO (``docs/sweep_reference.md``).

    Example:
        >>> round(equal_steps_cost_ratio(0.1, 1.0, 0.01), 2)
        9.09
    """
    f = 0.0 if fraction is None else float(fraction)
    return float(execution_cost_s) / (f * float(execution_cost_s) + float(wm_cost_s))


def declared_step_cost_s(method: str, fraction: float | None, cfg: SweepConfig) -> float:
    """Expected declared CPU-seconds of one training step of ``method`` (generation and update,
    measured and well under 1% here, left out).

    ``real``: ``groups × G × c_exec``; :data:`REAL_AT_F`: ``max(1, round(f × groups)) × G × c_exec``;
    ``wm_only``: ``groups × G × c_wm``; anchored methods: ``f × groups × G × c_exec + groups × G ×
    c_wm`` (the router's anchor groups are ``f × groups`` in expectation; the world model predicts
    every group, the anchor groups' predictions being the calibration pairs).

    Raises:
        ValueError: an unknown method, or an anchored method without a fraction.
    """
    from .methods import METHODS

    g = cfg.groups_per_step * cfg.group_size
    if method == REAL_AT_F:
        if fraction is None:
            raise ValueError(f"{REAL_AT_F} needs a fraction")
        return max(1, int(round(float(fraction) * cfg.groups_per_step))) * cfg.group_size * cfg.execution_cost_s
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: one of {list(METHODS)} or {REAL_AT_F!r}")
    spec = METHODS[method]
    f = spec.anchor_fraction if spec.anchor_fraction is not None else fraction
    if f is None:
        raise ValueError(f"the anchored method {method!r} needs a fraction")
    return float(f) * g * cfg.execution_cost_s + (g * cfg.wm_cost_s if spec.world_model else 0.0)


def step_cap_for(method: str, fraction: float | None, cfg: SweepConfig, budget_s: float) -> int:
    """The step cap of one run: enough steps to spend ``budget_s`` CPU-seconds at the declared cost
    per step (:func:`declared_step_cost_s`) with a 25% margin (the anchor groups per step vary
    by stochastic rounding), at least ``cfg.steps`` and at most ``cfg.step_cap``.

    Example:
        >>> step_cap_for("wmrl", 0.1, SweepConfig(), 6400.0)   # 14.08 CPU-s per step
        569
        >>> step_cap_for("wm_only", None, SweepConfig(), 6400.0)  # 1.28 per step: the safety cap
        1200
    """
    cost = declared_step_cost_s(method, fraction, cfg)
    need = math.inf if cost <= 0 else math.ceil(1.25 * float(budget_s) / cost)
    return int(min(cfg.step_cap, max(cfg.steps, need)))
