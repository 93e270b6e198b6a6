"""The known-truth sweep (``wmrl bench sweep``): where WMRL pays, over world-model quality × anchor fraction.

Issue 11, items 4 and 5. On :class:`~wmrl_envs.envs.known_truth.KnownTruthEnv` (a true expected
score per action, declared costs) it trains a small tabular softmax policy with GRPO under the
methods of ``wmrl bench`` (:data:`agents.experiments.methods.METHODS`: real-execution GRPO, world
model only, WMRL and its three ablations) and measures the compute-to-target speedup of each
against real GRPO (:mod:`agents.experiments.speedup`), over a grid of world-model quality levels
(:data:`~wmrl_envs.envs.known_truth.WORLD_MODEL_ERRORS`, each reported with the within-group
Pearson and Spearman correlation it produced, measured) × anchor fractions, plus a world model
that breaks mid-run.

Everything runs through the objects of the main job: one
:class:`~wmrl_envs.AnchoredWorldModelWrapper` per run (``plan_step``, ``score_group``), its
:class:`~wmrl_envs.core.CorrectionConfig` from :func:`agents.experiments.methods.method_correction`,
the advantages of :func:`agents.grpo.group_batch` and the one GRPO group step
:func:`agents.grpo.group_step` — the shape of :func:`agents.experiments.bench_run.run_method`.

Compute is the ledger's CPU-seconds over its four sources: execution and world model are
*declared* (``info["execution_cpu_s"]`` per execution, ``declared_cpu_s_per_prediction`` per
prediction), generation and update are measured. The held-out score of every snapshot is the
policy's *exact* expected true score over the evaluation tasks (all tasks:
:meth:`~wmrl_envs.envs.known_truth.KnownTruthEnv.expected_score`), so curves have no evaluation
noise; evaluation is not training compute.

Per seed, real GRPO trains ``steps`` steps; the target is ``gain_fraction`` of real GRPO's mean
gain (:func:`~agents.experiments.speedup.target_score`, at least ``min_gain``). Every other method
trains until its curve reaches the target or its compute reaches the budget,
``max_compute_factor`` × real GRPO's median compute. The compute budget is what binds: each
run's step cap is derived from its declared cost per step (:func:`declared_step_cost_s`) so that
it can spend the whole budget (:func:`step_cap_for`), within the absolute safety cap
``step_cap``, which binds first only where a run's budget would need more steps than that (world
model only, at about 1 % of real GRPO's cost per step). Each run records why it stopped
(``"target"``, ``"compute budget"`` or ``"step cap"``); a seed that stops short of the target has
compute-to-target ``inf``, and a cell that is not reached says which limit stopped it ("not
reached within budget" or "not reached within N steps (step cap)").

Outputs in ``out_dir``: ``results.json``, ``table.md``, ``speedup_heatmap.png`` (WMRL),
``speedup_heatmap_methods.png`` (world model only and the ablations), ``traces.png`` (ρ and
calibration error over steps, and the breaking world model). The method's math:
``docs/method.md``; usage: ``benchmarks/README.md``.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import tyro

from wmrl_envs.core import CorrectionConfig

from .methods import COST_SOURCES

__all__ = [
    "BREAKING",
    "REAL_AT_F",
    "SWEEP_PRESETS",
    "SweepConfig",
    "SweepRun",
    "TabularSoftmaxPolicy",
    "declared_step_cost_s",
    "equal_steps_cost_ratio",
    "main_sweep",
    "make_env",
    "make_world_model",
    "mean_over_all_seeds",
    "run_jobs",
    "run_sweep",
    "run_sweep_method",
    "step_cap_for",
]

BREAKING = "breaking"
"""The name of the world model that breaks mid-run in the sweep's tables."""

REAL_AT_F = "real_at_f"
"""The sweep's extra reference: real-execution GRPO with ``max(1, round(f × groups_per_step))``
groups per step — the anchor groups alone, without the world-model groups. Its speedup over
real GRPO is the part of an anchored method's saving that a smaller real batch gives by itself."""

_ABLATIONS = ("debias_only", "denoise_only", "anchors_raw")


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


# ---------------------------------------------------------------------- the policy
class TabularSoftmaxPolicy:
    """A softmax policy over actions per task (one logit per (task, action)), a :class:`agents.grpo.GRPOPolicy`.

    Args:
        n_tasks, n_actions: table size.
        seed: seed of the sampling generator (the logits start at 0: the uniform policy).

    ``sample(tasks, G)`` returns an int64 (len(tasks), G) array of actions and the samples handle
    ``(tasks (N,), actions (N,))`` flat, group after group; :meth:`grpo_logprobs` gives each
    row's one "token" log-probability.
    """

    def __init__(self, n_tasks: int, n_actions: int, seed: int = 0) -> None:
        import torch

        self.logits = torch.nn.Parameter(torch.zeros(n_tasks, n_actions, dtype=torch.float64))
        self._rng = np.random.default_rng([int(seed), 2718])

    def probs(self) -> np.ndarray:
        """Action probabilities, float64 (n_tasks, n_actions)."""
        x = self.logits.detach().numpy()
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def sample(self, tasks: np.ndarray, group_size: int) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """``group_size`` actions per task (see the class docstring)."""
        t = np.asarray(tasks, dtype=np.int64)
        cdf = np.cumsum(self.probs()[t], axis=1)
        u = self._rng.random((t.size, group_size))
        acts = np.minimum((u[:, :, None] > cdf[:, None, :]).sum(axis=2), cdf.shape[1] - 1).astype(np.int64)
        return acts, (np.repeat(t, group_size), acts.reshape(-1))

    def grpo_logprobs(self, samples: Any, rows: np.ndarray, *, reference: bool = False, with_entropy: bool = False):
        """Per-row log π(a|t) as a (B, 1) tensor, a (B, 1) mask of ones, and (B, 1) entropies or ``None``."""
        import torch

        tasks, actions = samples
        r = np.asarray(rows, dtype=np.int64)
        t, a = torch.as_tensor(tasks[r]), torch.as_tensor(actions[r])
        logp_all = torch.log_softmax(self.logits if not reference else self.logits.detach(), dim=1)[t]
        logp = logp_all.gather(1, a[:, None])
        ent = -(logp_all.exp() * logp_all).sum(dim=1, keepdim=True) if with_entropy else None
        return logp, torch.ones_like(logp), ent

    def trainable_parameters(self) -> list:
        """The logits."""
        return [self.logits]


# ---------------------------------------------------------------------- one run
@dataclass
class SweepRun:
    """One method, one world model, one fraction, one seed.

    Attributes:
        method, level, fraction, seed: the cell (``fraction`` ``None`` for real and wm_only).
        compute: cumulative training CPU-seconds at each snapshot (0 = the untrained policy).
        score: exact expected score of the policy at each snapshot.
        rho, mae_raw, mae_calibrated: ρ and the prequential calibration errors after each step.
        anchor_pearson: per step, the mean within-group Pearson of the step's anchor groups (NaN if none).
        executions, anchor_groups, predictions: totals (ledger's execution count, the router's
            anchor groups, the world model's predictions).
        correlation: within-group Pearson / Spearman over all anchor groups of the run.
        cpu_by_source: the ledger's CPU-seconds per source at the end.
        stop_reason: why training stopped: ``"target"`` (the score reached it), ``"compute
            budget"``, ``"step cap"`` (``max_steps`` came first) or ``"steps"`` (real GRPO's S
            steps, no target or budget given).
        max_steps: the run's step cap.
    """

    method: str
    level: str | None
    fraction: float | str | None
    seed: int
    compute: list[float] = field(default_factory=list)
    score: list[float] = field(default_factory=list)
    rho: list[float] = field(default_factory=list)
    mae_raw: list[float | None] = field(default_factory=list)
    mae_calibrated: list[float | None] = field(default_factory=list)
    anchor_pearson: list[float] = field(default_factory=list)
    anchor_fraction: list[float] = field(default_factory=list)
    """Per step, the anchor fraction in force (it moves for ``fraction="auto"``)."""
    blind_spot_mass: list[float] = field(default_factory=list)
    """At each snapshot, the policy's probability on the world model's blind-spot actions (mean
    over tasks; empty when the world model has none): how far the policy exploits them."""
    pooled_pearson: float = float("nan")
    """Pooled within-group Pearson of the run's anchor groups, world-model scores calibrated out of
    sample (:func:`wmrl_envs.core.advisor.crossfit_calibrated`): the advisor's r."""
    executions: int = 0
    anchor_groups: int = 0
    predictions: int = 0
    correlation: dict[str, float] = field(default_factory=dict)
    cpu_by_source: dict[str, float] = field(default_factory=dict)
    stop_reason: str = ""
    max_steps: int = 0
    noise_moments: list[tuple[float, float, int]] = field(default_factory=list)
    """Real-execution GRPO only: per step, the moments of its per-group policy gradients
    (:func:`agents.grpo.group_gradient_moments`), from which
    :class:`wmrl_envs.core.GradientNoiseScale` estimates the gradient noise scale."""


def make_env(cfg: SweepConfig, seed: int) -> Any:
    """The sweep's known-truth env for ``seed`` (its table of true scores is drawn from ``seed``)."""
    from wmrl_envs.envs.known_truth import KnownTruthEnv

    return KnownTruthEnv(cfg.n_tasks, cfg.n_actions, outcome_noise_std=cfg.outcome_noise_std,
                         execution_cost_s=cfg.execution_cost_s, table_seed=seed)


def _wm_error(cfg: SweepConfig, level: str) -> Any:
    from wmrl_envs.envs.known_truth import WORLD_MODEL_ERRORS

    return replace(WORLD_MODEL_ERRORS[level], declared_cpu_s_per_prediction=cfg.wm_cost_s)


def make_world_model(cfg: SweepConfig, level: str, env: Any, seed: int) -> Any:
    """The sweep's world model of error ``level`` on ``env`` (``"breaking"``: one that switches
    from ``cfg.break_from`` to ``cfg.break_to`` after ``cfg.break_at_step`` steps)."""
    from wmrl_envs.envs.known_truth import BreakingWorldModel, KnownTruthWorldModel

    if level == BREAKING:
        return BreakingWorldModel(env, _wm_error(cfg, cfg.break_from), _wm_error(cfg, cfg.break_to),
                                  break_after=cfg.break_at_step * cfg.groups_per_step * cfg.group_size, seed=seed)
    return KnownTruthWorldModel(env, _wm_error(cfg, level), seed=seed)


def run_sweep_method(
    method: str,
    level: str | None,
    fraction: float | str | None,
    seed: int,
    cfg: SweepConfig,
    *,
    max_steps: int,
    target: float | None = None,
    compute_budget_s: float | None = None,
) -> SweepRun:
    """Train one method on the known-truth env; evaluate the policy exactly after every step.

    The loop of :func:`agents.experiments.bench_run.run_method`: per step ``wrapper.plan_step``,
    ``groups_per_step`` tasks, the policy's G actions per task (charged to ``generation``),
    ``wrapper.score_group`` per group, :func:`agents.grpo.group_batch` and
    :func:`agents.grpo.group_step` (charged to ``update``). Stops after ``max_steps`` steps, once
    the exact score reaches ``target``, or once the compute reaches ``compute_budget_s``.

    Args:
        method: a name of :data:`agents.experiments.methods.METHODS`, or :data:`REAL_AT_F` (real
            GRPO with ``max(1, round(fraction × groups_per_step))`` groups per step).
        level: world-model quality (a :data:`WORLD_MODEL_ERRORS` name or :data:`BREAKING`);
            ``None`` for real.
        fraction: anchor fraction of the anchored methods (ignored by real and wm_only), or
            ``"auto"``: the adaptive fraction (``docs/method.md``, "Adaptive anchor fraction")
            with the declared cost ratio ``wm_cost_s / execution_cost_s`` as γ.
        seed: the seed (env table, world model, router, policy sampling, task draws).
        cfg: the sweep's settings.
        max_steps: the step cap.
        target: stop once the score reaches it (``None``: never).
        compute_budget_s: stop once the compute reaches it (``None``: never).

    Returns:
        A :class:`SweepRun` (``stop_reason`` says which of the three stopped it).

    Raises:
        RuntimeError: the ledger did not charge the declared execution or world-model costs
            (the sweep's compute would be wrong).
    """
    import torch

    from agents.grpo import GRPOUpdateConfig, group_batch, group_gradient_moments, group_step
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.core import GENERATION, UPDATE
    from wmrl_envs.envs.known_truth import within_group_correlation

    from .methods import METHODS, method_correction

    torch.set_num_threads(1)
    if method == REAL_AT_F:
        cfg = replace(cfg, groups_per_step=max(1, int(round(float(fraction) * cfg.groups_per_step))))
    spec = METHODS["real" if method == REAL_AT_F else method]
    env = make_env(cfg, seed)
    env.reset(seed=seed)  # seeds the outcome noise once; the groups' resets (seed=None) continue its stream
    wm = make_world_model(cfg, level, env, seed) if spec.world_model else None
    if fraction == "auto":
        base = replace(cfg.correction, anchor_fraction="auto", cost_ratio=cfg.wm_cost_s / cfg.execution_cost_s,
                       noise_batch_ratio=cfg.auto_noise_batch_ratio)
    else:
        base = cfg.correction if fraction is None else replace(cfg.correction, anchor_fraction=float(fraction))
    with warnings.catch_warnings():  # an experiment that runs auto on purpose: its warning, once per run, is noise
        warnings.filterwarnings("ignore", message="anchor_fraction='auto' is experimental")
        wrapper = AnchoredWorldModelWrapper(env, wm, group_size=cfg.group_size, groups_per_step=cfg.groups_per_step,
                                            correction=method_correction(spec, base), seed=seed)
    policy = TabularSoftmaxPolicy(cfg.n_tasks, cfg.n_actions, seed=seed)
    optimizer = torch.optim.Adam(policy.trainable_parameters(), lr=cfg.lr)
    update_config = GRPOUpdateConfig(max_grad_norm=None)
    rng = np.random.default_rng([seed, 5])
    ledger, corrector = wrapper.ledger, wrapper.corrector
    run = SweepRun(method, level, fraction if spec.anchor_fraction is None or method == REAL_AT_F else None, seed,
                   compute=[0.0], score=[env.expected_score(policy.probs())])
    run.max_steps = int(max_steps)
    run.stop_reason = "steps" if target is None and compute_budget_s is None else "step cap"
    pairs_raw: list[list[float]] = []
    pairs_real: list[list[float]] = []
    blind = getattr(wm, "blind_spots", None)  # KnownTruthWorldModel's (task, action) mask
    if blind is not None and not np.any(blind):
        blind = None
    if blind is not None:
        run.blind_spot_mass.append(float((policy.probs() * blind).sum(axis=1).mean()))
    for _step in range(1, max_steps + 1):
        wrapper.plan_step(cfg.groups_per_step)
        run.anchor_fraction.append(float(wrapper.router.anchor_fraction))
        tasks = rng.integers(cfg.n_tasks, size=cfg.groups_per_step)
        with ledger.timed(GENERATION, count=cfg.groups_per_step * cfg.group_size):
            actions, handle = policy.sample(tasks, cfg.group_size)
        groups = [wrapper.score_group(list(a), options={"task": int(t)}) for t, a in zip(tasks, actions)]
        batch = group_batch([g.rewards for g in groups], [g.advantage_weight for g in groups], update_config)
        if not spec.world_model and len(groups) >= 2:  # real-execution GRPO: its gradient noise scale
            run.noise_moments.append(group_gradient_moments(policy, handle, batch.row_index, batch.advantages,
                                                            batch.group_index, len(groups)))
        with ledger.timed(UPDATE):  # the one GRPO group step (no optimiser step when no row is kept)
            group_step(policy, optimizer, handle, batch, config=update_config)
        step_raw = [g.correction.raw_scores for g in groups if g.route == "anchor" and g.correction.raw_scores
                    and None not in g.correction.raw_scores]
        step_real = [g.correction.real_scores for g in groups if g.route == "anchor" and g.correction.raw_scores
                     and None not in g.correction.raw_scores]
        pairs_raw += step_raw
        pairs_real += step_real
        stats = corrector.stats()
        run.compute.append(float(sum(ledger.cpu_seconds(s) for s in COST_SOURCES)))
        run.score.append(env.expected_score(policy.probs()))
        if blind is not None:
            run.blind_spot_mass.append(float((policy.probs() * blind).sum(axis=1).mean()))
        run.rho.append(float(stats["rho"]))
        run.mae_raw.append(stats["calibration_mae_raw"])
        run.mae_calibrated.append(stats["calibration_mae_calibrated"])
        run.anchor_pearson.append(within_group_correlation(np.array(step_raw), np.array(step_real)).pearson
                                  if step_raw else float("nan"))
        if target is not None and run.score[-1] >= target:
            run.stop_reason = "target"
            break
        if compute_budget_s is not None and run.compute[-1] >= compute_budget_s:
            run.stop_reason = "compute budget"
            break
    run.executions = ledger.count("execution")
    run.anchor_groups = wrapper.router.n_anchor_groups
    run.predictions = ledger.count("world_model")
    run.cpu_by_source = {s: ledger.cpu_seconds(s) for s in COST_SOURCES}
    if pairs_raw:
        from wmrl_envs.core.advisor import crossfit_calibrated, pooled_within_group_correlation

        c = within_group_correlation(np.array(pairs_raw), np.array(pairs_real))
        run.correlation = {"pearson": c.pearson, "spearman": c.spearman, "n_groups": c.n_groups, "n_used": c.n_used}
        run.pooled_pearson = pooled_within_group_correlation(crossfit_calibrated(pairs_raw, pairs_real), pairs_real)[0]
    declared_exec = run.executions * cfg.execution_cost_s
    if not math.isclose(run.cpu_by_source["execution"], declared_exec, rel_tol=1e-6, abs_tol=1e-9):
        raise RuntimeError(
            f"the ledger charged {run.cpu_by_source['execution']:.6g} CPU-s to execution for {run.executions} executions "
            f"declaring {cfg.execution_cost_s} CPU-s each (expected {declared_exec:.6g}): the wrapper must charge "
            "info['execution_cpu_s']"
        )
    if wm is not None and run.cpu_by_source["world_model"] + 1e-9 < run.predictions * cfg.wm_cost_s:
        raise RuntimeError(
            f"the ledger charged {run.cpu_by_source['world_model']:.6g} CPU-s to world_model for {run.predictions} "
            f"predictions declaring {cfg.wm_cost_s} CPU-s each: the wrapper must charge declared_cpu_s_per_prediction"
        )
    return run


def _job(args: tuple) -> SweepRun:
    method, level, fraction, seed, cfg, kw = args
    return run_sweep_method(method, level, fraction, seed, cfg, **kw)


def run_jobs(jobs: list[tuple], cfg: SweepConfig, progress: Any, label: str) -> list[SweepRun]:
    """Run :func:`run_sweep_method` for each ``(method, level, fraction, seed, cfg, kwargs)`` job, in
    this process (``cfg.workers == 1``) or in ``cfg.workers`` spawned processes, advancing a ``rich``
    progress bar named ``label``.

    Returns:
        The :class:`SweepRun` of each job, in the jobs' order.
    """
    bar = progress.add_task(label, total=len(jobs))
    out: list[SweepRun | None] = [None] * len(jobs)
    if cfg.workers == 1:
        for i, j in enumerate(jobs):
            out[i] = _job(j)
            progress.update(bar, advance=1)
    else:
        import multiprocessing

        with ProcessPoolExecutor(max_workers=cfg.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futs = {pool.submit(_job, j): i for i, j in enumerate(jobs)}
            for fut in as_completed(futs):
                out[futs[fut]] = fut.result()
                progress.update(bar, advance=1)
    return [r for r in out if r is not None]


# ---------------------------------------------------------------------- the sweep
def _cells(cfg: SweepConfig) -> list[tuple[str, str, float | None]]:
    """(method, level, fraction) of every non-real cell, in table order."""
    levels = list(cfg.levels) + ([BREAKING] if cfg.breaking else [])
    cells: list[tuple[str, str | None, float | None]] = []
    if cfg.real_at_f:
        cells += [(REAL_AT_F, None, f) for f in cfg.fractions]
    for level in levels:
        if "wm_only" in cfg.methods:
            cells.append(("wm_only", level, None))
        for f in cfg.fractions:
            if "wmrl" in cfg.methods:
                cells.append(("wmrl", level, f))
            if level != BREAKING and (cfg.ablation_fractions is None or f in cfg.ablation_fractions):
                cells += [(m, level, f) for m in _ABLATIONS if m in cfg.methods]
    return cells


def run_sweep(cfg: SweepConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the sweep, compute the speedups, write the outputs (see the module docstring).

    Returns:
        The results dict (also ``out_dir/results.json``): ``config``, ``cost`` (ratio, bounds),
        ``target``, ``levels`` (correlations), ``cells`` (speedup, CI, compute-to-target per
        seed, realised fraction, executions), ``runs`` (every run's curve and traces),
        ``wall_clock_s``.

    Raises:
        ValueError: real GRPO did not improve (there is no target; from
            :func:`agents.experiments.speedup.target_score`).
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from wmrl_envs.envs.known_truth import measured_correlation

    from .speedup import Curve, compute_to_target, speedup, target_score

    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with progress:
        real = run_jobs([("real", None, None, s, cfg, {"max_steps": cfg.steps}) for s in range(cfg.seeds)],
                         cfg, progress, "real GRPO")
        real_curves = [Curve(r.compute, r.score) for r in real]
        target = target_score(real_curves, gain_fraction=cfg.gain_fraction, min_gain=cfg.min_gain)
        real_ctt = [compute_to_target(c, target) for c in real_curves]
        budget = cfg.max_compute_factor * float(np.median([r.compute[-1] for r in real]))
        log(f"[sweep] real GRPO: score {np.mean([r.score[0] for r in real]):.3f} -> {np.mean([r.score[-1] for r in real]):.3f} "
            f"in {cfg.steps} steps; target {target:.3f}; budget {budget:.0f} CPU-s (safety cap {cfg.step_cap} steps)")
        cells = _cells(cfg)
        jobs = [(m, lv, f, s, cfg, {"max_steps": step_cap_for(m, f, cfg, budget), "target": target,
                                    "compute_budget_s": budget})
                for (m, lv, f) in cells for s in range(cfg.seeds)]
        others = run_jobs(jobs, cfg, progress, "other methods")
    by_cell: dict[tuple, list[SweepRun]] = {}
    for r, (m, lv, f, *_rest) in zip(others, jobs):
        by_cell.setdefault((m, lv, f), []).append(r)
    # each level's correlation under the untrained (uniform) policy, and on the anchor groups of its runs
    env0 = make_env(cfg, 0)
    levels_out: dict[str, Any] = {}
    for lv in list(cfg.levels) + ([BREAKING] if cfg.breaking else []):
        entry: dict[str, Any] = {}
        if lv == BREAKING:
            for side, name in (("before", cfg.break_from), ("after", cfg.break_to)):
                c = measured_correlation(env0, _wm_error(cfg, name), n_groups=cfg.correlation_groups,
                                         group_size=cfg.group_size, seed=0)
                entry[f"initial_{side}"] = {"pearson": c.pearson, "spearman": c.spearman}
        else:
            c = measured_correlation(env0, _wm_error(cfg, lv), n_groups=cfg.correlation_groups,
                                     group_size=cfg.group_size, seed=0)
            entry["initial"] = {"pearson": c.pearson, "spearman": c.spearman}
        runs = [r for (m, l2, _f), rs in by_cell.items() if l2 == lv and m != "wm_only" for r in rs if r.correlation]
        used = sum(r.correlation["n_used"] for r in runs)
        if used:
            entry["anchors"] = {k: float(sum(r.correlation[k] * r.correlation["n_used"] for r in runs if r.correlation["n_used"]) / used)
                                for k in ("pearson", "spearman")}
            entry["anchors"]["n_groups"] = used
        levels_out[lv] = entry
    cells_out = []
    for (m, lv, f), runs in by_cell.items():
        runs = sorted(runs, key=lambda r: r.seed)
        ctt = [compute_to_target(Curve(r.compute, r.score), target) for r in runs]
        est = speedup(real_ctt, ctt, n_boot=cfg.n_boot, seed=0)
        cap = runs[0].max_steps
        capped = [r.seed for r, t in zip(runs, ctt) if math.isinf(t) and r.stop_reason == "step cap"]
        limit = f"within {cap} steps (step cap)" if capped else "within budget"
        gps = max(1, int(round(f * cfg.groups_per_step))) if m == REAL_AT_F else cfg.groups_per_step
        groups = sum(len(r.rho) for r in runs) * gps
        cells_out.append({
            "method": m, "level": lv, "fraction": f,
            "speedup": est.point, "low": est.low, "high": est.high, "n_reached": est.n_reached,
            "n_seeds": est.n_seeds, "reached": est.reached(), "formatted": est.format(limit=limit),
            "compute_to_target": ctt,
            "stop_reasons": [r.stop_reason for r in runs], "step_cap": cap,
            "final_compute": [r.compute[-1] for r in runs],
            "equal_steps_cost_ratio": None if m == REAL_AT_F else equal_steps_cost_ratio(
                f if m != "wm_only" else 0.0, cfg.execution_cost_s, cfg.wm_cost_s),
            "realised_fraction": (sum(r.anchor_groups for r in runs) / groups) if groups else 0.0,
            "executions": [r.executions for r in runs], "anchor_groups": [r.anchor_groups for r in runs],
            "steps": [len(r.rho) for r in runs],
        })
    results: dict[str, Any] = {
        "config": asdict(cfg),
        "cost": {"execution_cpu_s": cfg.execution_cost_s, "world_model_cpu_s": cfg.wm_cost_s,
                 "ratio_wm_to_execution": cfg.wm_cost_s / cfg.execution_cost_s,
                 "equal_steps_cost_ratio": {str(f): equal_steps_cost_ratio(f, cfg.execution_cost_s, cfg.wm_cost_s)
                                            for f in cfg.fractions},
                 "equal_steps_cost_ratio_wm_only": equal_steps_cost_ratio(0.0, cfg.execution_cost_s, cfg.wm_cost_s)},
        "target": target, "real_compute_to_target": real_ctt, "compute_budget_s": budget, "step_cap": cfg.step_cap,
        "levels": levels_out, "cells": cells_out,
        "runs": [asdict(r) for r in real + others],
        "wall_clock_s": time.perf_counter() - t_all,
    }
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=float))
    (out_dir / "table.md").write_text(format_sweep_table(results))
    _plot_heatmaps(results, out_dir)
    _plot_traces(results, out_dir)
    log(f"[sweep] {len(real) + len(others)} runs in {results['wall_clock_s']:.0f} s; outputs in {out_dir}")
    return results


# ---------------------------------------------------------------------- outputs
def _f(x: float | None, nd: int = 2) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{nd}f}"


def _stops(cell: dict[str, Any]) -> str:
    r = cell.get("stop_reasons", [])
    return f"{r.count('target')} / {r.count('compute budget')} / {r.count('step cap')}"


def format_sweep_table(results: dict[str, Any]) -> str:
    """The sweep's markdown report: costs and equal-steps cost ratios, each level's measured
    correlations, and one row per cell (speedup with its 95% CI, seeds reached, why the seeds
    stopped, equal-steps cost ratio, realised fraction)."""
    cfg, cost = results["config"], results["cost"]
    lines = [
        "# Known-truth sweep: compute-to-target speedup over real-execution GRPO",
        "",
        f"World-model : execution cost ratio {cost['world_model_cpu_s']:g} : {cost['execution_cpu_s']:g} "
        f"(declared CPU-seconds per prediction / per execution). Equal-steps cost ratio c_exec / (f·c_exec + c_wm) "
        f"(the speedup a method would have if it needed as many steps as real GRPO; generation and update ignored): "
        + ", ".join(f"f={f}: {b:.1f}×" for f, b in cost["equal_steps_cost_ratio"].items())
        + f"; world model only: {cost['equal_steps_cost_ratio_wm_only']:.0f}×. It is not a bound: a method that needs "
        "fewer steps than real GRPO beats it. A good world model can: it predicts an action's expected score without "
        "the outcome noise of a real execution (less noisy advantages), and a monotone distortion changes the spacing of "
        "the scores that GRPO standardises within a group.",
        "",
        (f"Target score {results['target']:.3f} ({cfg['gain_fraction']:g} of real GRPO's mean gain in {cfg['steps']} steps; "
         f"exact expected score over {cfg['n_tasks']} tasks). Other methods stop at the target or at the compute "
         f"budget, {results['compute_budget_s']:.0f} CPU-s ({cfg['max_compute_factor']:g}× real GRPO's median compute); "
         f"each run's step cap is derived from its declared cost per step so that it can spend the budget, within a "
         f"safety cap of {results['step_cap']} steps that binds first only where the budget needs more steps (world "
         "model only). 'not reached within budget' / 'not reached within N steps (step cap)' say which limit stopped "
         "the seeds; 'stopped' counts the seeds by reason (target / compute budget / step cap). In an interval, "
         f"'n.r.' is a resample in which the method is not reached. {cfg['seeds']} seeds per cell; 95% paired "
         "bootstrap CI over seeds."),
        "",
        "## World-model quality levels (within-group correlation of world-model vs real score, measured)",
        "",
        ("Per group the Pearson / Spearman correlation of its G world-model and real scores, averaged over the "
         "groups in which neither is constant. 'untrained policy': groups drawn from the uniform policy; "
         "'anchor groups': every anchor group of the level's anchored runs."),
        "",
        "| level | Pearson (untrained policy) | Spearman (untrained policy) | Pearson (anchor groups) | Spearman (anchor groups) |",
        "|---|---|---|---|---|",
    ]
    for lv, e in results["levels"].items():
        if "initial" in e:
            ip, isp = _f(e["initial"]["pearson"]), _f(e["initial"]["spearman"])
        else:
            ip = f"{_f(e['initial_before']['pearson'])} → {_f(e['initial_after']['pearson'])}"
            isp = f"{_f(e['initial_before']['spearman'])} → {_f(e['initial_after']['spearman'])}"
        a = e.get("anchors", {})
        lines.append(f"| {lv} | {ip} | {isp} | {_f(a.get('pearson'))} | {_f(a.get('spearman'))} |")
    if cfg["breaking"]:
        lines += ["", f"`{BREAKING}`: {cfg['break_from']} for the predictions of {cfg['break_at_step']} steps, then {cfg['break_to']}."]
    lines += ["", "## Speedup per cell", "",
              ("| level | method | f | speedup [95% CI] | seeds reached | stopped: target / budget / step cap "
               "| equal-steps cost ratio | realised f |"),
              "|---|---|---|---|---|---|---|---|"]
    for c in results["cells"]:
        if c["method"] == REAL_AT_F:
            continue
        f = "—" if c["fraction"] is None else f"{c['fraction']:g}"
        lines.append(f"| {c['level']} | {c['method']} | {f} | {c['formatted']} | {c['n_reached']}/{c['n_seeds']} | "
                     f"{_stops(c)} | {c['equal_steps_cost_ratio']:.1f}× | {c['realised_fraction']:.3f} |")
    small = [c for c in results["cells"] if c["method"] == REAL_AT_F]
    if small:
        gps = cfg["groups_per_step"]
        lines += ["", f"## Reference: real GRPO with fewer groups per step ({REAL_AT_F})", "",
                  (f"Real-execution GRPO with max(1, round(f × {gps})) groups per step: the anchor groups alone, no "
                   f"world model. Its speedup over real GRPO (at {gps} groups per step) is the saving a smaller real "
                   "batch gives by itself; an anchored method adds value over it only where its speedup is higher."), "",
                  "| f | groups per step | speedup [95% CI] | seeds reached | stopped: target / budget / step cap |",
                  "|---|---|---|---|---|"]
        for c in small:
            lines.append(f"| {c['fraction']:g} | {max(1, round(c['fraction'] * gps))} | {c['formatted']} | "
                         f"{c['n_reached']}/{c['n_seeds']} | {_stops(c)} |")
    return "\n".join(lines) + "\n"


def _bound(x: float | None) -> str:
    """An interval bound on the heat map: 0 (not reached in that resample) is 'n.r.', inf '∞'."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return "n.r." if x == 0.0 else ("∞" if math.isinf(x) else f"{x:.1f}")


def _plot_heatmaps(results: dict[str, Any], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    cfg = results["config"]
    levels = list(results["levels"])
    fracs = list(cfg["fractions"])
    cells = {(c["method"], c["level"], c["fraction"]): c for c in results["cells"]}

    def panel(ax: Any, rows: list[tuple[str, str, str | None]], cols: list[Any], title: str, labels: bool = True) -> Any:
        grid = np.full((len(rows), len(cols)), np.nan)
        for i, (_label, method, lv) in enumerate(rows):
            for j, f in enumerate(cols):
                c = cells.get((method, lv, f))
                if c is None:
                    continue
                grid[i, j] = c["speedup"] if c["reached"] and math.isfinite(c["speedup"]) and c["speedup"] > 0 else np.nan
                txt = (f"{c['speedup']:.1f}×\n[{_bound(c['low'])}, {_bound(c['high'])}]" if c["reached"]
                       else ("n.r.\n(step cap)" if "step cap" in c["formatted"] else "n.r."))
                ax.text(j, i, txt, ha="center", va="center", fontsize=7 if len(cols) < 4 or labels else 6)
        vmax = max(20.0, float(np.nanmax(grid)) if np.isfinite(grid).any() else 20.0)
        im = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", norm=LogNorm(vmin=0.1, vmax=vmax), aspect="auto")
        ax.set_xticks(range(len(cols)), [("—" if f is None else f"f={f:g}") for f in cols])
        ax.set_yticks(range(len(rows)), [r[0] for r in rows] if labels else [])
        ax.set_title(title, fontsize=9)
        return im

    fig, ax = plt.subplots(figsize=(1.6 * len(fracs) + 3, 0.55 * len(levels) + 2))
    rows = [(lv, "wmrl", lv) for lv in levels]
    if any(c["method"] == REAL_AT_F for c in results["cells"]):
        rows.append(("(reference) real GRPO,\nf × groups per step", REAL_AT_F, None))
    im = panel(ax, rows, fracs, "WMRL: compute-to-target speedup over real GRPO\n(median, 95% CI; n.r. = not reached within budget)")
    fig.colorbar(im, ax=ax, label="speedup (log scale)")
    fig.tight_layout()
    fig.savefig(out_dir / "speedup_heatmap.png", dpi=120)
    plt.close(fig)
    others = [m for m in ("wm_only", *_ABLATIONS) if any(c["method"] == m for c in results["cells"])]
    if others:
        fig, axes = plt.subplots(1, len(others), figsize=(4.2 * len(others) + 1.5, 0.6 * len(levels) + 2), squeeze=False)
        for k, (ax, m) in enumerate(zip(axes[0], others)):
            cols = [None] if m == "wm_only" else [f for f in fracs if any(c["method"] == m and c["fraction"] == f for c in results["cells"])]
            im = panel(ax, [(lv, m, lv) for lv in levels], cols, m, labels=k == 0)
        fig.colorbar(im, ax=list(axes[0]), label="speedup (log scale)")
        fig.savefig(out_dir / "speedup_heatmap_methods.png", dpi=120, bbox_inches="tight")
        plt.close(fig)


def mean_over_all_seeds(runs: list[dict[str, Any]], key: str) -> np.ndarray:
    """Mean over runs of the per-step trace ``run[key]``, only at the steps *every* run has.

    Runs stop at the target, so a later step would average only the few slow seeds and jump;
    the traces of ``traces.png`` end at the last step every seed ran. ``None`` (not yet
    measured, e.g. a calibration error before the first refit) counts as NaN and is skipped.

    Returns:
        float64 array of shape ``(min_len,)`` (empty without runs).
    """
    n = min((len(r[key]) for r in runs), default=0)
    m = np.array([[np.nan if v is None else v for v in r[key][:n]] for r in runs], dtype=np.float64).reshape(len(runs), n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a step where no run has a value: NaN
        return np.nanmean(m, axis=0) if len(runs) else np.array([])


def _plot_traces(results: dict[str, Any], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = results["config"]
    f0 = 0.1 if 0.1 in cfg["fractions"] else cfg["fractions"][0]
    runs = [r for r in results["runs"] if r["method"] == "wmrl" and r["fraction"] == f0]

    mean_trace = mean_over_all_seeds

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for i, lv in enumerate(results["levels"]):
        rs = [r for r in runs if r["level"] == lv]
        if not rs:
            continue
        axes[0].plot(np.arange(1, len(mean_trace(rs, "rho")) + 1), mean_trace(rs, "rho"), color=f"C{i}", label=lv)
        if lv != BREAKING:
            x = np.arange(1, len(mean_trace(rs, "mae_raw")) + 1)
            axes[1].plot(x, mean_trace(rs, "mae_raw"), ls="--", color=f"C{i}")
            axes[1].plot(x, mean_trace(rs, "mae_calibrated"), color=f"C{i}", label=lv)
    axes[0].set_title(f"anchor weight ρ (WMRL, f={f0:g}; mean over all seeds, up to the\n"
                      "last step every seed ran: runs stop at the target)", fontsize=9)
    axes[0].set_xlabel("step"); axes[0].legend(fontsize=7)
    axes[1].set_title("prequential calibration MAE on anchor pairs (dashed: raw, solid:\n"
                      "calibrated; WMRL; mean over all seeds, steps every seed ran)", fontsize=9)
    axes[1].set_xlabel("step"); axes[1].legend(fontsize=7)
    rs = [r for r in runs if r["level"] == BREAKING]
    if rs:
        x = np.arange(1, len(mean_trace(rs, "rho")) + 1)
        axes[2].plot(x, mean_trace(rs, "rho"), label="anchor weight ρ")
        axes[2].plot(x, mean_trace(rs, "anchor_pearson"), label="within-group Pearson of the anchor groups")
        axes[2].axvline(cfg["break_at_step"] + 0.5, color="k", ls=":", label="world model breaks")
        axes[2].set_title(f"breaking world model ({cfg['break_from']} → {cfg['break_to']}), WMRL f={f0:g}\n"
                          "(mean over all seeds, steps every seed ran)", fontsize=9)
        axes[2].set_xlabel("step"); axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "traces.png", dpi=120)
    plt.close(fig)


def main_sweep(cfg: SweepConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """``wmrl bench sweep``: :func:`run_sweep` with torch on one thread."""
    import torch

    torch.set_num_threads(1)
    log(f"[sweep] levels={list(cfg.levels)} fractions={list(cfg.fractions)} methods={list(cfg.methods)} "
        f"seeds={cfg.seeds} workers={cfg.workers}")
    return run_sweep(cfg, log=log)
