"""The configuration of ``wmrl train``: :class:`TrainConfig` (every field a CLI flag), the presets,
and the checks a configuration passes before any model is loaded (:func:`validate`).

The correction settings are one nested :class:`~wmrl_envs.core.config.CorrectionConfig`
(``TrainConfig.correction``; its flags keep their names: ``--anchor-fraction``, ``--min-pairs``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import tyro

from wmrl_envs.core import CorrectionConfig

if TYPE_CHECKING:
    from agents.grpo import GRPOUpdateConfig

WORLD_MODELS = ("judge", "learned-policy", "learned-encoder", "none")
"""The choices of ``--world-model`` (:attr:`TrainConfig.world_model`; ``"none"``: no world model,
every group executed for real, with ``--anchor-fraction 1``: real-execution GRPO)."""

ARMS = ("wmrl", "real")
"""The choices of ``--arms`` (:attr:`TrainConfig.arms`)."""

__all__ = ["WORLD_MODELS", "ARMS", "TrainConfig", "PRESETS", "load_config", "validate", "update_config", "auto_fraction_notes",
           "next_entropy_coef"]


@dataclass
class TrainConfig:
    """Configuration of ``wmrl train`` (every field is a CLI flag: ``--steps 10``; the fields of
    the nested ``correction`` keep their own names: ``--min-pairs 8``)."""

    # --- schedule
    steps: int = 8
    """GRPO steps (policy updates). 8 by default: at one anchor group per step, the advisor's 8 anchor
    groups for a verdict (``AnchorAdvisor.min_groups``)."""
    groups_per_step: int = 4
    """Groups (tasks) per step; the anchor schedule puts at least min_anchor_groups anchor groups in each
    window of anchor_window steps (default: one in each step)."""
    group_size: int = 8
    """G, rollouts per group (TRL's default num_generations is 8 too): a group's prompt is encoded
    once for sampling and once for the update, so more rows per group cost less per rollout."""
    correction: Annotated[CorrectionConfig, tyro.conf.OmitArgPrefixes] = field(
        default_factory=lambda: CorrectionConfig(anchor_fraction=0.25, min_pairs=16, refit_every=8, warmup_groups=3,
                                         debias_map="auto")
    )
    """Anchor schedule, online debiasing and the anchor weight ρ (flags without a prefix:
    --anchor-fraction, --min-pairs, ...). The anchor fraction is 0.25 (the library's default is 0.1):
    with 4 groups per step and at least one anchor group per step, 0.1 would realise 0.25 anyway;
    0.25 is one anchor group per step, so the realised fraction is the configured one. Reference values in docs/method.md. Both warm-ups are shortened so that both corrections act
    within the 8-step run (issue 36): the debiaser fits from 16 pairs (the 2nd anchor group of G = 8)
    and ρ is calibrated 3 anchor groups later (the reference waits 32), so ρ leaves 1 at the
    5th of the run's 8 anchor groups (2.0 on seeds 0-2, results/main_job_arms_run). The price is ρ's spread over seeds at calibration: 5-95% [1.60, 2.89]
    around rho_target 2 for a world model of constant quality, against [1.85, 2.11] after 32 groups
    (200 seeds, G = 8; `benchmarks/rho_calibration.py --settings preset --candidates 3`,
    results/rho_calibration_train.json)."""
    # --- backbone and device
    model: str = "smollm2-135m"
    """The policy's backbone: 'smollm2-135m' (the shipped SmolLM2-135M-Instruct, no download), a
    Hugging Face hub id or a local folder (a chat model: its tokenizer needs a chat template)."""
    judge_model: str | None = None
    """The judge's backbone; None: the policy's own backbone, frozen (LoRA adapters off; with
    --finetune full, the frozen copy of the initial weights)."""
    device: str = "auto"
    """auto (the GPU when torch sees one), cpu, cuda or cuda:N; the policy, the judge and the update
    all run there."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Parameter dtype; auto: bfloat16 on a GPU, float32 on the CPU (and always float32 with --finetune full:
    AdamW on half-precision weights loses small updates)."""
    finetune: Literal["lora", "full"] = "lora"
    """'lora': train LoRA adapters (the KL reference is the backbone with adapters off); 'full':
    every weight (the reference is a frozen copy: twice the weights' memory)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, more compute)."""
    vllm_url: str | None = None
    """A vLLM OpenAI-compatible server (API root, e.g. http://gpu-node:8000/v1) that samples the policy's
    completions with its LoRA adapter pushed after every update, and generates the judge's predictions
    on the served base model (unless --judge-model); start it with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
    vllm serve MODEL --enable-lora`. None: transformers generation here."""
    vllm_colocate: bool = False
    """Experimental: sample the policy with an in-process vllm.LLM on the same GPU (TRL's colocate mode;
    the adapter passed as a LoRARequest after every update; needs `pip install vllm`)."""
    vllm_gpu_memory_utilization: float = 0.3
    """The colocated engine's share of the GPU memory (--vllm-colocate)."""
    vllm_served_model: str | None = None
    """The base model's name on that server (default: --model)."""
    vllm_adapter_dir: str | None = None
    """Where the pushed adapters are written; the server must read it (default: RUN_DIR/vllm_adapters)."""
    # --- episodes
    max_turns: int = 1
    """Turns per episode (the reference uses up to 4): each turn's feedback, real on anchor groups and
    predicted by the world model on world-model groups, goes into the next turn's prompt; an
    episode scores the max over its turns and every turn's tokens are in the loss. With more than
    one turn the episodes of a group are rolled out one by one (generation is not batched)."""
    # --- agent
    solution_mode: Literal["line", "script"] = "line"
    """'line': write the `model = ...` line of a working starter script; 'script': whole scripts."""
    baseline: Literal["board-low", "starter", "boosting"] = "board-low"
    """Line mode: the model the prompt shows as the script's current one. 'board-low' (default): the
    weakest entry of the task's own leaderboard, which the board's best beats by 4 to 27 standard
    deviations of the test half's noise on every task (results/relative_task.json; the starter is
    within that noise of the best on insurance-claims and digits-rotated), so copying it is not
    the best a policy can do (issue 36); 'boosting': histogram gradient boosting (the board's best
    or near it on most tasks: issue 28's choice, whose fits take seconds); 'starter': the task's
    starter line (a scaled linear model)."""
    reward: Literal["relative", "leaderboard"] = "relative"
    """'relative' (default): a valid submission scores 0.5 + 0.25 x its gain over the shown line on a
    validation half of the test rows, in units of the board's best entry's gain (the shown line 0.5,
    the best 0.75, clipped to [0.3, 1.0]); held-out figures add the same score on the other half
    and the copy-the-shown-line baseline (agents/train/relative.py). 'leaderboard': the benchmark's
    reward, 0.5 + 0.5 x the position on the task's 8-entry board (wmrl bench's)."""
    max_new_tokens: int = 32
    """Completion budget of the policy in tokens."""
    temperature: float = 0.8
    """Sampling temperature of the policy (training and the held-out evaluation). Higher keeps
    exploration alive (at 1.0 no group of the default run's seed 4 collapsed onto one line; at 0.8,
    9 of its last 12 did) at a cost in held-out quality within 8 steps on some seeds
    (results/main_job_exploration/)."""
    lora_r: int = 16
    """LoRA rank."""
    lr: float = 2e-4
    """AdamW learning rate of the LoRA weights."""
    kl_coef: float = 0.04
    """β of the KL penalty to the frozen reference."""
    entropy_coef: float = 0.002
    """Entropy bonus."""
    entropy_floor: float | None = None
    """An entropy floor (issue 36, item 2), in nats per token of the trained rows: when a step's mean
    entropy is below it (or no row trained), the next step's entropy coefficient doubles, up to
    --entropy-coef-max; when it is above, the coefficient halves, down to --entropy-coef. None (the
    default): off, a fixed --entropy-coef. On the default run's seed 4 a floor of 0.5 could reach
    only 0.032 in 8 steps, and even 0.05 from the start kept the entropy within 0.04 nats of the
    default's over 5 steps; the temperature acts (results/main_job_exploration/)."""
    entropy_coef_max: float = 0.1
    """The largest entropy coefficient the floor may reach (--entropy-floor)."""
    clip_eps: float = 0.2
    """PPO clip range ε of the ratio to the sampling policy; acts only with num_iterations > 1
    (in the first epoch the policy is the sampling policy, so the ratio is 1)."""
    num_iterations: int = 1
    """Optimisation epochs per step over its kept rows (1 = one on-policy gradient step, ratio 1);
    epochs 2.. take the log-probabilities of epoch 1 as the old policy, so --clip-eps clips there."""
    scale_advantages: bool = True
    """Standardise advantages within groups (False: centring only)."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""
    dual_clip: float | None = 3.0
    """Dual clip c (> 1) of the surrogate for negative advantages: a token's gradient w.r.t. its
    log-probability stays within ``max(1 + ε, c)·|A|`` whatever its ratio (it acts on late anchor
    groups, ``--executor ray``, and from the second epoch); 0 or None: off (PPO's clip only)."""
    # --- the real-execution arm (issue 36: quality at equal compute, in the same command)
    arms: tuple[Literal["wmrl", "real"], ...] = ("wmrl", "real")
    """What the run trains: 'wmrl' (this configuration, in RUN_DIR) and 'real' (real-execution
    GRPO from the same initial policy, tasks and seed, with the CPU-seconds the WMRL arm spent on
    training, in RUN_DIR/real; the summary compares the two on the held-out tasks). ``--arms wmrl``
    trains WMRL alone (for a user who only wants the policy)."""
    concurrent_arms: bool = True
    """Train the real arm beside the WMRL arm, one process each (on the CPU with one torch thread,
    no vLLM, ``executor='local'``, >= 2 cores; elsewhere after it): the real arm stops at the step
    it would have stopped at after the WMRL arm (it starts a step only when the WMRL arm's CPU-seconds
    so far allow it, and waits while they cannot tell yet), so the comparison is unchanged and the
    run takes about one arm's wall-clock instead of two. ``--no-concurrent-arms``: one after the
    other (each arm then has the machine to itself)."""
    real_groups_per_step: int | None = None
    """Groups per step of the real arm; None: the WMRL arm's anchor groups per step
    (groups_per_step x anchor_fraction, at least 1): each real step then executes as many groups as
    a WMRL step's anchors, and where execution dominates a step's cost the real arm takes about as
    many steps as WMRL (more where generation and update dominate, as in the tiny preset), whereas
    at WMRL's full batch it could afford about a quarter of them. Real GRPO at the anchor batch is
    the stronger baseline where batches this small are not noise-limited (issue 39: on the
    known-truth map it reached the target 3.7x cheaper than at the full batch)."""
    cpu_budget_s: float | None = None
    """Train until this many CPU-seconds of training (execution, world model, generation and
    update, the ledger's sources) are spent: a step starts only while the spent CPU-seconds are below
    the budget less half the mean step's, so the arm ends as close to the budget as whole steps
    allow; --steps is then a cap. None: --steps alone. The real arm's is the WMRL arm's spent
    CPU-seconds."""
    # --- world model
    world_model: Literal["judge", "learned-policy", "learned-encoder", "none"] = "learned-policy"
    """What scores the world-model groups: 'learned-policy' (a world model that learns from the run's
    anchor groups: a ridge head on the policy's frozen backbone's hidden state over the task text and
    the solution, LoRA adapters off, or the frozen reference copy with --finetune full);
    'learned-encoder' (the same head on the shipped MiniLM sentence encoder's embeddings); 'judge'
    (the generative LLM judge on the agent's frozen backbone, or --judge-model; it generates a
    structured prediction per rollout). On the main job's anchor groups with its defaults (24 groups x
    G=8, untrained policy; results/main_job_world_models_g8.json) the prequential within-group r was
    0.59 [0.50, 0.68] for learned-policy and 0.52 [0.39, 0.64] for learned-encoder. With G=4 and the
    linear starter (results/main_job_world_models.json) it was 0.72 [0.57, 0.85]
    for learned-policy (0.26 CPU-s per prediction), 0.68 [0.50, 0.82] for learned-encoder (0.02) and
    0.50 [0.32, 0.64] for the judge on 8 groups (2.9). On those same 8 groups (the first 8: the learned
    models' cold start) learned-policy had 0.46 [0.20, 0.73] and learned-encoder 0.39, below the judge;
    the learned default rests on its cost and on its r once it has data (0.87 [0.73, 0.96] over the
    last 12 groups). A learned world model starts uninformative:
    until it has seen 2 anchor groups it gives every rollout one constant score, so world-model
    groups carry no advantage (GRPO drops them) and the first steps train on their anchor groups
    only; it is refitted after every anchor group and its state is saved in the checkpoint.
    'none': no world model, every group executed (needs --anchor-fraction 1: real-execution GRPO)."""
    static_check: bool = True
    """A learned world model ('learned-policy', 'learned-encoder') takes the score of a failure that is
    certain before execution from the host's static check of the line
    (:func:`wmrl_envs.envs.autoresearch.static_check.static_check_score`: a syntax error, a name the
    starter does not import, a value with no ``fit``, arguments a scikit-learn signature refuses) and
    asks its head only about the rest. Without it a policy finds lines the head has never seen fail
    and scores like valid ones (issue 36: seed 1 moved to ``model = None``). ``--no-static-check``:
    the head scores every line. The judge has its own pre-check (syntax only)."""
    judge_max_new_tokens: int = 48
    """Token budget of the judge's structured prediction."""
    judge_max_prompt_tokens: int = 640
    """Judge prompts longer than this are cut in the middle."""
    judge_batch_size: int = 8
    """Judge batch size."""
    judge_decoding: Literal["sample", "expected"] = "sample"
    """'sample': sample and parse the JSON prediction (reference); 'expected': expected score from
    the status/bucket probabilities (one prompt pass, no decoding)."""
    # --- environment
    sandbox: str = "auto"
    """Sandbox backend: auto, bubblewrap, docker or subprocess."""
    exec_wall_time_s: float = 90.0
    """Wall-clock limit of one real execution in seconds."""
    exec_memory_mb: int = 3072
    """Memory limit of one real execution in MiB."""
    eval_k: int = 2
    """Trajectories per held-out task for avg@k."""
    eval_tasks: int = 0
    """Held-out tasks evaluated (0 = all)."""
    # --- where anchor groups execute
    executor: Literal["local", "ray"] = "local"
    """'local': each step waits for its anchor groups' executions (serial, the default); 'ray': they
    run on a Ray pool of --ray-workers actors while the next steps generate and update; an anchor
    group is trained when its scores arrive (its ratio taken against the log-probabilities recorded
    at sampling; PPO's clip and the dual clip, c = 3 for negative advantages, bound each token's
    gradient by 3·|A| however far the policy moved) unless it is more than --max-staleness steps old.
    Single-turn episodes only."""
    ray_workers: int = 2
    """Ray actors executing anchor rollouts (executor='ray'), one CPU each."""
    max_staleness: int = 9
    """Steps an anchor group may arrive after the step it was sampled in and still be trained
    (executor='ray'; the reference allows 9); older ones only feed the corrections."""
    # --- failures of the machinery (docs/method.md, "Ungraded rollouts")
    max_ungraded_share: float | None = 0.5
    """Stop the run (TooManyUngradedError) once this share of one step's rollouts is ungraded
    because the machinery failed (sandbox, world model); None never stops."""
    world_model_timeout_s: float | None = 600.0
    """Seconds one batched world-model (judge) call may take; past it the batch is ungraded.
    None: no limit."""
    # --- run
    report_to: Literal["none", "tensorboard", "wandb"] = "none"
    """Mirror the per-step metrics (rewards, loss, KL, ρ, realised anchor fraction, costs) and the
    held-out scores to TensorBoard (RUN_DIR/tensorboard) or Weights & Biases ($WANDB_PROJECT,
    default wmrl); metrics.jsonl is written either way."""
    seed: int = 0
    """Seed of task sampling, routing, sampling and the judge."""
    threads: int = 1
    """torch threads on the CPU (1 measured fastest for generation on 2 cores); not set on a GPU."""
    preset: str = "default"
    """Name of the preset these values came from (informational)."""


PRESETS: dict[str, TrainConfig] = {
    "default": TrainConfig(),
    "tiny": TrainConfig(
        steps=2, groups_per_step=2, group_size=2, eval_k=1, eval_tasks=2, max_new_tokens=24,
        judge_max_new_tokens=40, correction=CorrectionConfig(min_pairs=2, refit_every=2, warmup_groups=1, debias_map="auto"),
        world_model="judge", preset="tiny",
    ),
}
"""Built-in presets: ``default`` (the README's main job, <= 15 min on 2 CPU cores) and
``tiny`` (CI's end-to-end run, a few minutes; it keeps the LLM judge, whose path the CI runs
cover; ``--world-model learned-policy`` has its own end-to-end test)."""


def load_config(run_dir: str | Path) -> TrainConfig:
    """Read ``RUN_DIR/config.json`` (its ``"correction"`` object becomes the nested
    :class:`~wmrl_envs.core.config.CorrectionConfig`, validated again).

    Raises:
        FileNotFoundError: ``run_dir`` is not a run folder (no config.json).
        ValueError: config.json has keys this version does not know, or an invalid setting.
    """
    path = Path(run_dir) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} is not a wmrl run folder: {path} is missing")
    data = json.loads(path.read_text())
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(TrainConfig)})
    correction = data.pop("correction", {})
    unknown += [f"correction.{k}" for k in sorted(set(correction) - {f.name for f in dataclasses.fields(CorrectionConfig)})]
    if unknown:
        raise ValueError(f"{path} has unknown keys {unknown}; was it written by another wmrl version?")
    data.setdefault("baseline", "starter")  # a run folder from before --baseline showed the starter's line
    data.setdefault("reward", "leaderboard")  # a run folder from before --reward had the benchmark's reward
    data["arms"] = tuple(data.get("arms", ["wmrl"]))  # a run folder from before --arms trained WMRL alone
    data.setdefault("static_check", False)  # a run folder from before the static check ran without it
    data.setdefault("concurrent_arms", False)  # a run folder from before the arms trained side by side
    cfg = TrainConfig(**data, correction=CorrectionConfig(**correction))
    validate(cfg)
    return cfg


def validate(cfg: TrainConfig) -> None:
    """Check the settings before any model is loaded or run folder written (the correction
    settings have checked themselves when their :class:`CorrectionConfig` was built).

    Raises:
        ValueError: the first invalid setting (the message names it and its range).
    """
    checks = [
        (cfg.steps >= 1, f"steps must be >= 1, got {cfg.steps}"),
        (cfg.groups_per_step >= 1, f"groups_per_step must be >= 1, got {cfg.groups_per_step}"),
        (cfg.group_size >= 2, f"group_size must be >= 2 (GRPO compares rollouts within a group), got {cfg.group_size}"),
        (cfg.max_turns >= 1, f"max_turns must be >= 1 (turns per episode), got {cfg.max_turns}"),
        (cfg.executor in ("local", "ray"), f"executor must be 'local' or 'ray', got {cfg.executor!r}"),
        (cfg.world_model in WORLD_MODELS,
         f"world_model must be one of {', '.join(WORLD_MODELS)} (--world-model), got {cfg.world_model!r}"),
        (bool(cfg.arms) and set(cfg.arms) <= set(ARMS) and "wmrl" in cfg.arms and len(set(cfg.arms)) == len(cfg.arms),
         f"arms must be 'wmrl' or 'wmrl real' (--arms; the real arm needs the WMRL arm's compute), got {cfg.arms!r}"),
        (cfg.world_model != "none" or cfg.correction.anchor_fraction == 1.0,
         "--world-model none executes every group, so it needs --anchor-fraction 1 (real-execution GRPO); "
         f"got anchor_fraction={cfg.correction.anchor_fraction!r}"),
        (cfg.world_model != "none" or "real" not in cfg.arms,
         "--world-model none already trains real-execution GRPO: pass --arms wmrl (the real arm would repeat it)"),
        ("real" not in cfg.arms or cfg.correction.cost_basis == "cpu",
         f"the real arm is trained at the WMRL arm's CPU-seconds, but cost_basis is {cfg.correction.cost_basis!r}: "
         "pass --arms wmrl (and compare arms yourself in that basis), or --cost-basis cpu"),
        (cfg.real_groups_per_step is None or cfg.real_groups_per_step >= 1,
         f"real_groups_per_step must be >= 1 or None (the anchor groups per step), got {cfg.real_groups_per_step}"),
        (cfg.cpu_budget_s is None or (math.isfinite(cfg.cpu_budget_s) and cfg.cpu_budget_s > 0),
         f"cpu_budget_s must be > 0 CPU-seconds or None (--steps alone), got {cfg.cpu_budget_s}"),
        (cfg.executor == "local" or cfg.max_turns == 1,
         "executor='ray' runs single-turn anchor groups; multi-turn episodes (--max-turns > 1) run with --executor local"),
        (cfg.ray_workers >= 1, f"ray_workers must be >= 1, got {cfg.ray_workers}"),
        (cfg.max_staleness >= 0, f"max_staleness must be >= 0 steps, got {cfg.max_staleness}"),
        (cfg.eval_k >= 1, f"eval_k must be >= 1, got {cfg.eval_k}"),
        (cfg.lr > 0, f"lr must be > 0, got {cfg.lr}"),
        (cfg.lora_r >= 1, f"lora_r must be >= 1 (--lora-r, the LoRA rank; 16 by default), got {cfg.lora_r}"),
        (cfg.num_iterations >= 1, f"num_iterations must be >= 1 (optimisation epochs per step), got {cfg.num_iterations}"),
        (cfg.threads >= 1, f"threads must be >= 1, got {cfg.threads}"),
        (cfg.max_ungraded_share is None or 0.0 < cfg.max_ungraded_share <= 1.0,
         f"max_ungraded_share must be in (0, 1] or None (never stop), got {cfg.max_ungraded_share}"),
        (cfg.world_model_timeout_s is None or cfg.world_model_timeout_s > 0,
         f"world_model_timeout_s must be > 0 seconds or None (no limit), got {cfg.world_model_timeout_s}"),
        (cfg.temperature > 0, f"temperature must be > 0 (sampling), got {cfg.temperature}"),
        (cfg.entropy_floor is None or (math.isfinite(cfg.entropy_floor) and cfg.entropy_floor > 0),
         f"entropy_floor must be > 0 nats per token or None (off), got {cfg.entropy_floor}"),
        (math.isfinite(cfg.entropy_coef_max) and cfg.entropy_coef_max >= cfg.entropy_coef,
         f"entropy_coef_max must be >= entropy_coef ({cfg.entropy_coef}), got {cfg.entropy_coef_max}"),
        (cfg.max_new_tokens >= 1, f"max_new_tokens must be >= 1, got {cfg.max_new_tokens}"),
        (cfg.exec_wall_time_s > 0, f"exec_wall_time_s must be > 0 seconds, got {cfg.exec_wall_time_s}"),
        (cfg.exec_memory_mb >= 1, f"exec_memory_mb must be a positive number of MiB, got {cfg.exec_memory_mb}"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ValueError(msg)
    from wmrl_envs.sandbox import BACKENDS

    if cfg.sandbox not in ("auto", *BACKENDS):
        raise ValueError(f"sandbox must be one of auto, {', '.join(BACKENDS)}; got {cfg.sandbox!r}")
    from agents.llm.backbone import DTYPES, resolve_device

    from agents.train.tracking import check_report_to

    check_report_to(cfg.report_to)  # an unknown tracker, or its package missing
    resolve_device(cfg.device)  # raises on an unknown value or a GPU torch does not see
    if cfg.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {cfg.dtype!r}")
    if cfg.finetune not in ("lora", "full"):
        raise ValueError(f"finetune must be 'lora' or 'full', got {cfg.finetune!r}")
    if cfg.vllm_colocate:
        import importlib.util

        if cfg.vllm_url is not None:
            raise ValueError("--vllm-colocate and --vllm-url are two ways to sample with vLLM: pass one")
        if cfg.finetune != "lora":
            raise ValueError("--vllm-colocate passes LoRA adapters to the engine; --finetune full samples with transformers")
        if importlib.util.find_spec("vllm") is None:
            raise ValueError("--vllm-colocate needs vLLM in this environment (`pip install vllm`, CUDA); or run "
                             "`vllm serve` and pass --vllm-url")
        if not 0 < cfg.vllm_gpu_memory_utilization < 1:
            raise ValueError(f"vllm_gpu_memory_utilization must be in (0, 1), got {cfg.vllm_gpu_memory_utilization}")
    if cfg.vllm_url is not None:
        if not str(cfg.vllm_url).startswith(("http://", "https://")):
            raise ValueError(f"vllm_url must be the server's API root (http://HOST:PORT/v1), got {cfg.vllm_url!r}")
        if cfg.finetune != "lora":
            raise ValueError("--vllm-url pushes LoRA adapters to the server; --finetune full samples locally")
    if cfg.judge_model is not None and cfg.world_model != "judge":
        raise ValueError(f"--judge-model sets the LLM judge's backbone, but --world-model is {cfg.world_model!r} (a "
                         "world model that learns from the anchors): drop --judge-model, or pass --world-model judge")
    if not str(cfg.model).strip() or (cfg.judge_model is not None and not str(cfg.judge_model).strip()):
        raise ValueError("model and judge_model must name a model (smollm2-135m, a hub id or a folder)")
    if cfg.baseline not in ("board-low", "starter", "boosting"):
        raise ValueError(f"baseline must be 'board-low', 'starter' or 'boosting', got {cfg.baseline!r}")
    if cfg.reward not in ("relative", "leaderboard"):
        raise ValueError(f"reward must be 'relative' or 'leaderboard' (--reward), got {cfg.reward!r}")
    if cfg.solution_mode not in ("line", "script"):
        raise ValueError(f"solution_mode must be 'line' or 'script', got {cfg.solution_mode!r}")
    if not isinstance(cfg.correction, CorrectionConfig):  # it validates itself when built
        raise ValueError(f"correction must be a CorrectionConfig, got {type(cfg.correction).__name__}")
    update_config(cfg)  # the GRPO step's settings (clip_eps, kl_coef, entropy_coef, max_grad_norm, dual_clip) check themselves


def update_config(cfg: TrainConfig) -> GRPOUpdateConfig:
    """The GRPO step's settings: one backward per group (the LLM scores one prompt per call)."""
    from agents.grpo import GRPOUpdateConfig

    return GRPOUpdateConfig(
        clip_eps=cfg.clip_eps, kl_coef=cfg.kl_coef, entropy_coef=cfg.entropy_coef, num_iterations=cfg.num_iterations,
        micro_batch_per_group=True, max_grad_norm=cfg.max_grad_norm, scale=cfg.scale_advantages,
        drop_zero_advantage=True, dual_clip=cfg.dual_clip or None,  # 0: off
    )


def auto_fraction_notes(cfg: TrainConfig) -> list[str]:
    """What ``anchor_fraction="auto"`` cannot do in this run (empty for a fixed fraction, or when
    it can adapt fully): a run too short for the rule to leave its start fraction, and a floor of
    one anchor group per window that holds the realised fraction above ``f_min``.

    Returns:
        One sentence per limit, each with the setting that lifts it.
    """
    corr = cfg.correction
    if corr.anchor_fraction != "auto":
        return []
    notes = []
    floor = corr.min_anchor_groups / (cfg.groups_per_step * corr.anchor_window)
    per_step = max(cfg.groups_per_step * corr.auto_start_fraction, corr.min_anchor_groups / corr.anchor_window)
    if cfg.steps * per_step < corr.auto_min_groups:
        notes.append(
            f"anchor_fraction='auto' needs {corr.auto_min_groups} anchor groups (--auto-min-groups) before it adapts; "
            f"{cfg.steps} steps x {cfg.groups_per_step} groups at the start fraction {corr.auto_start_fraction} give about "
            f"{cfg.steps * per_step:.0f}, so this run keeps the start fraction throughout: run more --steps or lower "
            "--auto-min-groups")
    if floor > corr.f_min:
        window = math.ceil(corr.min_anchor_groups / (cfg.groups_per_step * corr.f_min) - 1e-9)
        notes.append(
            f"the floor of {corr.min_anchor_groups} anchor group(s) per window of {corr.anchor_window} step(s) of "
            f"{cfg.groups_per_step} groups realises at least {floor:.3g}, above --f-min {corr.f_min}: 'auto' can only "
            f"raise the fraction above that floor (--anchor-window {window} lets it go down to --f-min)")
    return notes


def next_entropy_coef(coef: float, entropy: float | None, cfg: TrainConfig) -> float:
    """The next step's entropy coefficient under ``cfg.entropy_floor`` (:attr:`TrainConfig.entropy_floor`).

    Args:
        coef: this step's coefficient.
        entropy: this step's mean per-token entropy of the trained rows (nats); ``None`` or NaN
            when no row trained (every group's rewards were equal: the policy may have collapsed).

    Returns:
        ``coef`` itself without a floor; else ``min(2 coef, entropy_coef_max)`` below the floor
        (or with no entropy) and ``max(coef / 2, entropy_coef)`` above it.

    Example:
        >>> cfg = TrainConfig(entropy_floor=0.3, entropy_coef=0.002, entropy_coef_max=0.005)
        >>> next_entropy_coef(0.002, 0.1, cfg), next_entropy_coef(0.004, None, cfg), next_entropy_coef(0.004, 0.5, cfg)
        (0.004, 0.005, 0.002)
    """
    if cfg.entropy_floor is None:
        return coef
    if entropy is None or not math.isfinite(entropy) or entropy < cfg.entropy_floor:
        return min(2.0 * coef if coef > 0 else max(cfg.entropy_coef, 1e-3), cfg.entropy_coef_max)
    return max(coef / 2.0, cfg.entropy_coef)
