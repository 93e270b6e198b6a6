"""The configuration of ``wmrl bench`` (:class:`BenchConfig`, every field a CLI flag), its presets,
and the checks a configuration passes before anything runs (:func:`check_bench_config`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import tyro

from wmrl_envs.core import CorrectionConfig

from .methods import METHODS, MethodSpec


__all__ = ["BenchConfig", "BENCH_PRESETS", "BENCH_METHODS", "LEARNED_WM_METHODS", "REAL_METHODS",
           "method_groups_per_step", "check_bench_config"]

BENCH_METHODS: dict[str, MethodSpec] = {
    **METHODS,
    # real execution for every group, but only the anchor groups' batch: f x groups per step groups
    "real_anchor_batch": MethodSpec("real_anchor_batch", "GRPO, real execution, anchor groups' batch", 1.0, False,
                                    False, False),
    # real execution for every group at a batch between the anchor groups' and the full one (their
    # geometric middle): the best real batch size is then not only ever an end of the range
    "real_mid_batch": MethodSpec("real_mid_batch", "GRPO, real execution, middle batch", 1.0, False, False, False),
    # WMRL with a world model learned from its own anchor groups (LearnedWorldModel; nothing pre-fitted)
    "wmrl_learned": MethodSpec("wmrl_learned", "WMRL, world model learned from its anchors", None, True, True, True),
}
"""The methods of ``wmrl bench``: the six of :data:`~agents.experiments.methods.METHODS` and two more,
``real_anchor_batch`` (real-execution GRPO with f x groups per step groups per step,
:func:`method_groups_per_step`) and ``wmrl_learned`` (WMRL whose world model starts empty and learns
online from its anchor groups, its refits charged to the ledger's ``world_model`` source)."""

LEARNED_WM_METHODS: frozenset[str] = frozenset({"wmrl_learned"})
"""Methods whose world model is learned in the run (a fresh one per seed; no fitting cost outside the ledger)."""

REAL_METHODS: tuple[str, ...] = ("real", "real_mid_batch", "real_anchor_batch")
"""The real-execution GRPO batch sizes: WMRL's speedup is also reported over the best of them."""


def _numeric_fraction(cfg: "BenchConfig") -> float:
    f = cfg.correction.anchor_fraction
    return float(cfg.correction.auto_start_fraction if f == "auto" else f)


def method_groups_per_step(name: str, cfg: "BenchConfig") -> int:
    """Groups per step of one method: ``groups_per_step``, except ``real_anchor_batch``'s
    ``a = max(1, round(f x groups_per_step))`` (f the anchored methods' --anchor-fraction; for
    ``auto``, its --auto-start-fraction), the batch of WMRL's anchor groups, and ``real_mid_batch``'s
    ``round(sqrt(a x groups_per_step))`` kept strictly between the two when they are 2 or more apart.

    Example:
        >>> [method_groups_per_step(m, BenchConfig()) for m in ("real_anchor_batch", "real_mid_batch", "real")]
        [1, 3, 10]
    """
    anchor = max(1, int(round(_numeric_fraction(cfg) * cfg.groups_per_step)))
    if name == "real_anchor_batch":
        return anchor
    if name == "real_mid_batch":  # the geometric middle, strictly inside (anchor, full) when there is room
        full = int(cfg.groups_per_step)
        mid = int(round((anchor * full) ** 0.5))
        return min(max(mid, anchor + 1), full - 1) if full - anchor >= 2 else anchor
    return int(cfg.groups_per_step)


@dataclass
class BenchConfig:
    """Configuration of ``wmrl bench`` (each field is a CLI flag)."""

    methods: tuple[str, ...] = ("real", "wmrl")
    """Methods to run (subset of real, real_anchor_batch, real_mid_batch, wm_only, wmrl, wmrl_learned,
    debias_only, denoise_only, anchors_raw; :data:`BENCH_METHODS`). The default is the headline pair;
    the headline run's command (every real batch size, world model only, WMRL on the pre-fitted and on
    the learned world model) and the ablations are in benchmarks/README.md. Real GRPO trains to the
    seed's stop target (``stop_gain``), every other method to that target or real GRPO's compute."""
    seeds: int = 5
    """Seeds per method (0..seeds-1); the speedup's bootstrap CI is over them."""
    steps: int = 10
    """S: the target is read from real-execution GRPO's curve at step S (it is still improving at
    step 10, docs/autoresearch.md)."""
    max_steps_factor: float = 5.0
    """A safeguard only: real GRPO trains at most this many times S steps, every other method at most
    ``groups_per_step`` times as many (a method cheaper per step needs more steps to spend real
    GRPO's compute). What stops a method is the stop target or, for every method but real GRPO,
    real GRPO's compute to it (``stop_gain``)."""
    stop_gain: float = 1.2
    """One budget in compute (issue 35, item 1): every method trains until an evaluated snapshot
    reaches the stop target s0 + stop_gain x (s_S - s0), or (all but real GRPO) until it has spent
    real GRPO's compute to that target on the same seed (past it a method cannot be cheaper). s0
    and s_S are real GRPO's mean held-out scores untrained and at step S over the seeds run so far,
    this one included; real GRPO always trains S steps. The report's highest target is 1.0 x the
    gain on the mean over *all* seeds, known only at the end: the margin above 1 keeps a seed that
    stopped at the provisional target above the final one (the spread of s_S over 5 seeds of the
    reference run was 55-69 for a gain of about 35, so 0.2 x the gain is about 1.5 of its SDs)."""
    check_factor: float = 1.5
    """A method's snapshot is evaluated (and the stop rule checked) at step 1 and then whenever its
    compute has grown by this factor since the last evaluated step (real GRPO also at step S): a
    method overshoots its crossing by at most this factor of compute, and the refinement
    (``refine_evals``) then reads the crossing from the snapshots in between."""
    groups_per_step: int = 10
    """Groups (tasks) per step: with 10, an anchor fraction of 0.1 is one anchor group per step, so
    the realised fraction is the configured one."""
    group_size: int = 4
    """G, rollouts per group."""
    agent: Literal["grammar", "llm"] = "grammar"
    """'grammar': fast template agent; 'llm': an LLM with LoRA (--model; the GPU-scale configuration)."""
    model: str = "smollm2-135m"
    """Backbone of the 'llm' agent and the 'llm' world model: 'smollm2-135m' (shipped), a hub id or
    a local folder."""
    device: str = "auto"
    """Device of the 'llm' agent and world model: auto (the GPU when torch sees one), cpu, cuda or cuda:N."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Their parameter dtype; auto: bfloat16 on a GPU, float32 on the CPU."""
    world_model: Literal["embedding", "degraded", "llm"] = "embedding"
    """'embedding': MiniLM + regression head fitted on other tasks; 'degraded': the same with
    its information destroyed (wm_information); 'llm': the LLM judge on --model, frozen."""
    wm_information: float = 0.0
    """For world_model='degraded': 0 = pure noise, 1 = the embedding world model."""
    eval_k: int = 1
    """k of the held-out avg@k (the best of k trajectories per task). A large k hides learning:
    the untrained grammar policy scores 27.5 at avg@1 but 74 at avg@8 (docs/autoresearch.md)."""
    eval_draws: int = 8
    """Trajectories sampled per held-out task and snapshot (>= eval_k); avg@k is estimated from all
    of them (agents.train.evaluation.avg_at_k_estimate), so more draws = less evaluation noise."""
    eval_parallel: int = 2
    """Concurrent sandboxed executions during evaluation."""
    exec_parallel: int = 2
    """Concurrent sandboxed executions of an anchor group's rollouts during training (same for
    every method, so compute ratios are unaffected; 2 = one per core here)."""
    lr: float | None = None
    """Learning rate of the agent (default: 0.1 for the grammar agent, 2e-4 for the LLM's LoRA)."""
    kl_coef: float = 0.0
    """KL coefficient of the GRPO loss."""
    clip_eps: float = 0.2
    """PPO clip range ε; acts only with num_iterations > 1 (in the first epoch the policy is the
    sampling policy, so the ratio is 1)."""
    num_iterations: int = 1
    """Optimisation epochs per step over its kept rows (1 = one on-policy step, ratio 1); epochs
    2.. take the log-probabilities of epoch 1 as the old policy, so --clip-eps clips there."""
    correction: Annotated[CorrectionConfig, tyro.conf.OmitArgPrefixes] = field(
        default_factory=lambda: CorrectionConfig(min_pairs=16, refit_every=8, warmup_groups=64, half_life=16.0)
    )
    """Correction settings (flags without a prefix: --anchor-fraction, --min-pairs, ...). Each
    method sets its own route share, debias and denoise on top (METHODS, method_correction):
    --anchor-fraction is that of the anchored methods (at least --min-anchor-groups anchor
    groups per window of --anchor-window steps); --debias and --denoise are ignored here.
    ρ's warm-up is 64 anchor groups (counted from the debiaser's first fit), as in ``wmrl train``'s
    preset: with G = 4 and min_pairs 16, a warm-up of 3 fixes ρ's constant c from too few groups
    (ρ's 5-95% over 200 seeds [1.54, 3.72] pass/fail, [1.39, 3.99] Gaussian for a target of 2), 32
    still leaves [1.65, 2.36] (Gaussian), 64 keeps it within [1.71, 2.21]
    (``benchmarks/rho_calibration.py``, ``results/rho_calibration.json``). A default run (about one
    anchor group per step) ends before that warm-up: ρ stays 1 and the anchored methods are
    debiased and denoised with an unweighted anchor advantage."""
    execution_cost_model: str | None = None
    """A JSON cost model of CPU-seconds per execution measured on an idle machine
    (:class:`agents.experiments.bench_costs.ExecutionCostModel`, written by
    ``benchmarks/execution_load.py``): training executions are charged from it, per task, program
    family and outcome, so that no method's bill moves with what else shares the cores; the measured
    CPU-seconds are kept beside it (``execution_cpu_s_live`` in every step record). None: charge the
    measured CPU-seconds."""
    learned_refit_every: int = 4
    """``wmrl_learned``'s world model refits after this many anchor groups (its first fit once it holds
    2 groups)."""
    sandbox: str = "auto"
    """Sandbox backend."""
    max_ungraded_share: float | None = 0.5
    """Stop (TooManyUngradedError) once this share of one step's rollouts, or of one held-out
    evaluation, is ungraded because the machinery failed; None never stops."""
    world_model_timeout_s: float | None = None
    """Seconds one batched world-model call may take (None: no limit); past it the batch is ungraded."""
    target_gain: float = 0.9
    """The compute-to-target headline's target: this share of real-execution GRPO's gain from the
    untrained policy to its score after S steps (its mean curve over seeds)."""
    refine_evals: int = 6
    """At most this many extra evaluations per curve (over all of a run's --resume parts, for one
    target) inside the interval where it first crosses the target (bracket_refinement_step: at the expected crossing, kept in the bracket's middle half),
    stopping once the bracket is within --max-bracket-share or one step wide. On the committed
    reference and ablation curves (benchmarks/bracket_schedule.py) 6 reaches that in every case, at
    about the evaluations the earlier fixed 2 bisections spent (6.3 per curve against 6.1)."""
    max_bracket_share: float = 0.1
    """The interpolation bracket a curve's refinement aims for: the compute between the evaluated
    snapshots around its target crossing, as a share of its compute-to-target (issue 27: at most
    10%). A one-step bracket cannot be narrowed further (the policy changes once per step); the
    report flags every bracket above this share and says which are one step wide."""
    eval_cache: bool = True
    """Reuse the held-out grade of a (task, program) pair already executed in this run (held-out
    evaluation only; training executions are never cached)."""
    out_dir: str = "runs/bench"
    """Output folder."""
    reuse_methods: tuple[str, ...] | None = None
    """With --reuse-from: which of its methods to read (default: every method of --methods it holds);
    e.g. --reuse-methods real to run WMRL again at another --anchor-fraction against the same real GRPO."""
    resume: bool = False
    """Continue a stopped run in --out-dir: the seeds its results.json holds for every method are kept
    (with their snapshots, when snapshots/seed<k>.pt exists, so their curves can still be refined),
    the remaining seeds are run, then the refinement and the report. The settings must be the run's
    (:func:`resumed_state` names any that differ)."""
    reuse_from: str | None = None
    """results.json of an earlier ``wmrl bench`` run with the same settings: the methods of --methods
    that it holds (e.g. real and wmrl) are read from it, curves and costs as measured there, instead
    of being trained and evaluated again (the ablation command reuses the headline run's real GRPO and
    WMRL this way). Settings that change what a method learns or how it is scored must match
    (:func:`reused_entries` names any that differ); when real GRPO alone is reused, the world-model
    and correction settings may differ (e.g. WMRL at another --anchor-fraction against the same real
    GRPO); --seeds must not exceed the earlier run's."""


BENCH_PRESETS: dict[str, BenchConfig] = {
    "default": BenchConfig(),
    # CI: one seed, three methods (WMRL on the pre-fitted and on the learned world model), a few
    # steps and one held-out draw per task (minutes, not hours). A stop target out of reach
    # (stop_gain 5) makes every method train to its budget or the 3-step cap, so that the learned
    # world model, refitted after every anchor group, is fitted at its 2nd and refitted at its 3rd
    # (issue 35, item 6); the stop at the target is tested on fakes (tests/agents/experiments)
    "quick": BenchConfig(methods=("real", "wmrl", "wmrl_learned"), seeds=1, steps=2, max_steps_factor=1.5,
                         stop_gain=5.0, groups_per_step=4, group_size=3, eval_k=1, eval_draws=1, refine_evals=1,
                         learned_refit_every=1, out_dir="runs/bench-quick"),
}
"""``wmrl bench`` starts from ``"default"``; ``wmrl bench --quick`` from ``"quick"`` (flags apply on top)."""


def check_bench_config(cfg: BenchConfig) -> None:
    """Refuse, before anything is trained, the settings that could only fail (or mean nothing)
    once the methods have run.

    Raises:
        ValueError: naming the setting, what it must be, and what was given.
    """
    unknown = [m for m in cfg.methods if m not in BENCH_METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {list(BENCH_METHODS)}")
    if len(set(cfg.methods)) != len(cfg.methods):
        raise ValueError(f"--methods lists a method twice: {list(cfg.methods)}")
    if "real" not in cfg.methods:
        raise ValueError(f"--methods {' '.join(cfg.methods)} has no real-execution GRPO, which every speedup and the "
                         "target are measured against: add real (with --reuse-from a run that has it, it is read "
                         "from there, not trained again)")
    if cfg.reuse_from is not None and not Path(cfg.reuse_from).is_file():
        raise FileNotFoundError(f"--reuse-from {cfg.reuse_from}: no such file (give the results.json of an earlier "
                                "wmrl bench run)")
    if cfg.execution_cost_model is not None and not Path(cfg.execution_cost_model).is_file():
        raise FileNotFoundError(f"--execution-cost-model {cfg.execution_cost_model}: no such file (measure one with "
                                "benchmarks/execution_load.py on an idle machine)")
    if cfg.resume and not Path(cfg.out_dir).is_dir():
        raise ValueError(f"--resume --out-dir {cfg.out_dir}: no such folder, so there is nothing to resume (is the "
                         "path right? without --resume a new run starts there)")
    for name, value, ok, what in (
        ("seeds", cfg.seeds, cfg.seeds >= 1, ">= 1"),
        ("steps", cfg.steps, cfg.steps >= 1, ">= 1"),
        ("max_steps_factor", cfg.max_steps_factor, cfg.max_steps_factor >= 1, ">= 1 (the others train at least S steps)"),
        ("groups_per_step", cfg.groups_per_step, cfg.groups_per_step >= 1, ">= 1"),
        ("learned_refit_every", cfg.learned_refit_every, cfg.learned_refit_every >= 1, ">= 1"),
        ("group_size", cfg.group_size, cfg.group_size >= 2, ">= 2 (GRPO standardises within a group)"),
        ("eval_k", cfg.eval_k, cfg.eval_k >= 1, ">= 1"),
        ("eval_draws", cfg.eval_draws, cfg.eval_draws >= cfg.eval_k, f">= eval_k ({cfg.eval_k}): avg@k is estimated from them"),
        ("stop_gain", cfg.stop_gain, cfg.stop_gain >= 1, ">= 1 (the report's highest target is 1.0 x real GRPO's gain)"),
        ("check_factor", cfg.check_factor, cfg.check_factor > 1, "> 1 (a growth factor of compute between evaluations)"),
        ("refine_evals", cfg.refine_evals, cfg.refine_evals >= 0, ">= 0"),
        ("max_bracket_share", cfg.max_bracket_share, cfg.max_bracket_share > 0, "> 0 (a share of the compute-to-target, e.g. 0.1)"),
        ("target_gain", cfg.target_gain, 0 < cfg.target_gain <= 1, "in (0, 1] (a share of real GRPO's gain)"),
    ):
        if not ok:
            raise ValueError(f"--{name.replace('_', '-')} must be {what}, got {value!r}")
    if cfg.agent != "llm" and cfg.world_model != "llm":
        defaults = BenchConfig()
        given = [f"--{k}" for k in ("model", "device", "dtype") if getattr(cfg, k) != getattr(defaults, k)]
        if given:
            raise ValueError(f"{', '.join(given)} apply to the LLM agent and the LLM world model (--agent llm, "
                             "--world-model llm); this run uses neither")
    if cfg.agent == "llm" or cfg.world_model == "llm":
        from agents.llm.backbone import DTYPES, resolve_device

        resolve_device(cfg.device)  # an unknown value, or a GPU torch does not see
        if cfg.dtype not in DTYPES:
            raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {cfg.dtype!r}")
