"""The main job: GRPO of an LLM agent on AutoResearch with WMRL rewards (``wmrl train``).

One flat loop, readable top to bottom (in the spirit of CleanRL):

1. evaluate the untrained policy on the held-out tasks (avg@k, real execution through the
   wrapper's evaluation mode);
2. per step: sample ``groups_per_step`` training tasks, take each task's context from the
   wrapper (:meth:`~wmrl_envs.AnchoredWorldModelWrapper.begin_group`) and build its prompt,
   sample G solutions per task (:class:`agents.llm.policy.LLMPolicy`), score every group
   (:meth:`~wmrl_envs.AnchoredWorldModelWrapper.score_group`: the group step of
   ``wmrl_envs/core``), take the one GRPO step (:func:`agents.grpo.grpo_update`: advantages,
   ρ on anchor rows, ungraded rows dropped); log metrics and write a checkpoint;
3. evaluate again, plot the calibration, write and print the summary.

The correction settings are one nested :class:`~wmrl_envs.core.config.CorrectionConfig`
(``TrainConfig.correction``; its flags keep their names: ``--anchor-fraction``, ``--min-pairs``).

A run folder holds ``config.json``, ``metrics.jsonl``, ``checkpoint/`` (LoRA weights,
optimiser, RNG states, the wrapper's routing/correction state including every anchor pair),
``calibration.png``, ``summary.json`` and ``summary.md``. ``wmrl train --resume RUN_DIR``
continues from the last checkpoint. The method: ``docs/method.md`` (Yang et al., arXiv
2608.12564).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import tyro

from agents.train.summary import plot_calibration, print_summary, secret_record, summarise, summary_markdown
from wmrl_envs.core import CorrectionConfig
from wmrl_envs.utils import write_json_atomic

__all__ = ["TrainConfig", "PRESETS", "train", "load_config", "auto_fraction_notes"]


@dataclass
class TrainConfig:
    """Configuration of ``wmrl train`` (every field is a CLI flag: ``--steps 10``; the fields of
    the nested ``correction`` keep their own names: ``--min-pairs 8``)."""

    # --- schedule
    steps: int = 7
    """GRPO steps (policy updates)."""
    groups_per_step: int = 4
    """Groups (tasks) per step; the anchor schedule puts at least min_anchor_groups anchor groups in each
    window of anchor_window steps (default: one in each step)."""
    group_size: int = 4
    """G, rollouts per group."""
    correction: Annotated[CorrectionConfig, tyro.conf.OmitArgPrefixes] = field(
        default_factory=lambda: CorrectionConfig(min_pairs=16, refit_every=8, warmup_groups=64)
    )
    """Anchor schedule, online debiasing and the anchor weight ρ (flags without a prefix:
    --anchor-fraction, --min-pairs, ...). Reference values in docs/method.md; the debiaser's
    warm-up (min_pairs, refit_every) is shortened for CPU runs, ρ's is not: with G = 4 it takes
    64 anchor groups after the first fit (the reference 32 x G = 8 in rollouts) to fix ρ's scale
    within ±0.3 of rho_target over seeds (benchmarks/rho_calibration.py), so ρ stays 1 in a
    7-step run (one anchor group per step)."""
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
    max_new_tokens: int = 32
    """Completion budget of the policy in tokens."""
    temperature: float = 0.8
    """Sampling temperature of the policy."""
    lora_r: int = 16
    """LoRA rank."""
    lr: float = 2e-4
    """AdamW learning rate of the LoRA weights."""
    kl_coef: float = 0.04
    """β of the KL penalty to the frozen reference."""
    entropy_coef: float = 0.002
    """Entropy bonus."""
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
    # --- world model (LLM judge on the agent's own frozen backbone)
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
        judge_max_new_tokens=40, correction=CorrectionConfig(min_pairs=2, refit_every=2, warmup_groups=1),
        preset="tiny",
    ),
}
"""Built-in presets: ``default`` (the README's main job, <= 15 min on 2 CPU cores) and
``tiny`` (CI's end-to-end run, a few minutes)."""


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
    cfg = TrainConfig(**data, correction=CorrectionConfig(**correction))
    _validate(cfg)
    return cfg


def _validate(cfg: TrainConfig) -> None:
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
        (cfg.executor == "local" or cfg.max_turns == 1,
         "executor='ray' runs single-turn anchor groups; multi-turn episodes (--max-turns > 1) run with --executor local"),
        (cfg.ray_workers >= 1, f"ray_workers must be >= 1, got {cfg.ray_workers}"),
        (cfg.max_staleness >= 0, f"max_staleness must be >= 0 steps, got {cfg.max_staleness}"),
        (cfg.eval_k >= 1, f"eval_k must be >= 1, got {cfg.eval_k}"),
        (cfg.lr > 0, f"lr must be > 0, got {cfg.lr}"),
        (cfg.num_iterations >= 1, f"num_iterations must be >= 1 (optimisation epochs per step), got {cfg.num_iterations}"),
        (cfg.threads >= 1, f"threads must be >= 1, got {cfg.threads}"),
        (cfg.max_ungraded_share is None or 0.0 < cfg.max_ungraded_share <= 1.0,
         f"max_ungraded_share must be in (0, 1] or None (never stop), got {cfg.max_ungraded_share}"),
        (cfg.world_model_timeout_s is None or cfg.world_model_timeout_s > 0,
         f"world_model_timeout_s must be > 0 seconds or None (no limit), got {cfg.world_model_timeout_s}"),
        (cfg.temperature > 0, f"temperature must be > 0 (sampling), got {cfg.temperature}"),
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
    if not str(cfg.model).strip() or (cfg.judge_model is not None and not str(cfg.judge_model).strip()):
        raise ValueError("model and judge_model must name a model (smollm2-135m, a hub id or a folder)")
    if cfg.solution_mode not in ("line", "script"):
        raise ValueError(f"solution_mode must be 'line' or 'script', got {cfg.solution_mode!r}")
    if not isinstance(cfg.correction, CorrectionConfig):  # it validates itself when built
        raise ValueError(f"correction must be a CorrectionConfig, got {type(cfg.correction).__name__}")
    _update_config(cfg)  # the GRPO step's settings (clip_eps, kl_coef, entropy_coef, max_grad_norm) check themselves


# ---------------------------------------------------------------------- helpers
def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.bool_):
        return bool(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def _mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.mean(xs)) if xs else None


@dataclass
class _Components:
    """What one run is made of (built by :func:`_build`)."""

    policy: Any
    judge: Any
    env: Any
    wrapper: Any
    optimizer: Any
    train_tasks: list[str]
    heldout_tasks: list[str]
    get_task: Any
    eval_wrapper: Any = None
    """The evaluation wrapper over ``env`` (built on the first :func:`evaluate`)."""
    scorer: Any = None
    """``executor="ray"``: the :class:`~wmrl_envs.distributed.AsyncAnchoredScorer` over ``wrapper``."""
    in_flight: dict[int, Any] = field(default_factory=dict)
    """``executor="ray"``: anchor groups submitted and not yet trained (:class:`_InFlight` by group id)."""


def _build(cfg: TrainConfig) -> _Components:
    """Load the policy (``cfg.model`` + LoRA, on ``cfg.device``) and the judge (its frozen
    backbone, or ``cfg.judge_model``), start the sandbox
    and the env (leaderboards prepared), wrap the env with the correction settings.

    Raises:
        SandboxUnavailableError: ``sandbox="auto"`` finds no isolating backend.
    """
    import torch

    from agents.llm.policy import LLMPolicy
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.secret import sandbox_hidden_paths
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks
    from wmrl_envs.sandbox import SandboxLimits, SandboxUnavailableError, make_sandbox
    from wmrl_envs.envs.autoresearch.llm_judge import LLMJudgeWorldModel
    from agents.llm.backbone import load_backbone, resolve_device

    if resolve_device(cfg.device).type == "cpu":
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    dtype = cfg.dtype
    if cfg.finetune == "full":
        import warnings

        if dtype == "auto":  # AdamW on half-precision weights drops updates below their resolution
            dtype = "float32"
        elif dtype in ("bfloat16", "float16"):
            warnings.warn(f"--finetune full with --dtype {dtype}: AdamW updates the {dtype} weights directly, and "
                          "updates smaller than their resolution (most, at learning rates near 1e-6) are lost; use "
                          "--dtype float32 (the default for full fine-tuning)", UserWarning, stacklevel=2)
        if cfg.lr > 1e-4:
            warnings.warn(f"--finetune full with --lr {cfg.lr}: that is a LoRA learning rate; full fine-tuning "
                          "usually takes about 1e-6 (docs/method.md, 'GRPO')", UserWarning, stacklevel=2)
    model, tokenizer = load_backbone(cfg.model, device=cfg.device, dtype=dtype)
    policy = LLMPolicy(
        model, tokenizer, mode=cfg.solution_mode, lora_r=cfg.lora_r, lora_alpha=2 * cfg.lora_r,
        max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=cfg.seed,
        finetune=cfg.finetune, gradient_checkpointing=cfg.gradient_checkpointing,
    )
    if cfg.judge_model is not None:  # another backbone, frozen as loaded
        judge_backbone, judge_tokenizer, off = *load_backbone(cfg.judge_model, device=cfg.device, dtype=cfg.dtype,
                                                              flag="--judge-model"), False
    elif policy.reference_model is not None:  # full fine-tuning: the frozen copy of the initial weights
        judge_backbone, judge_tokenizer, off = policy.reference_model, tokenizer, False
    else:  # the agent's own backbone, frozen: the same weights, adapters off
        judge_backbone, judge_tokenizer, off = policy.model, tokenizer, True
    judge_kwargs = dict(max_new_tokens=cfg.judge_max_new_tokens, batch_size=cfg.judge_batch_size,
                        max_prompt_tokens=cfg.judge_max_prompt_tokens, seed=cfg.seed, decoding=cfg.judge_decoding)
    if cfg.vllm_url is not None and cfg.judge_model is None:  # the served base model is the frozen backbone
        judge = LLMJudgeWorldModel.from_server(cfg.vllm_url, cfg.vllm_served_model or cfg.model, tokenizer, **judge_kwargs)
    else:
        judge = LLMJudgeWorldModel(judge_backbone, judge_tokenizer, disable_adapters=off, **judge_kwargs)
    limits = SandboxLimits(wall_time_s=cfg.exec_wall_time_s, cpu_time_s=cfg.exec_wall_time_s, memory_mb=cfg.exec_memory_mb)
    sandbox = make_sandbox(cfg.sandbox, limits, hidden_paths=sandbox_hidden_paths())  # task secret, bundled data
    if cfg.sandbox == "auto" and not sandbox.isolates:
        sandbox.close()
        raise SandboxUnavailableError(
            "no isolating sandbox works here (bubblewrap or a Docker daemon), so agent-written code "
            "would run unisolated. Install bubblewrap (`apt-get install -y bubblewrap`, as "
            "scripts/setup.sh does), or pass --sandbox subprocess to accept running it unisolated."
        )
    env = AutoResearchEnv(tasks="all", sandbox=sandbox, limits=limits, max_turns=cfg.max_turns)
    # This installation's leaderboards (built once per task secret, cached): paid here, before
    # any step, so that no one-off build is charged as execution cost.
    env.prepare_leaderboards()
    wrapper = AnchoredWorldModelWrapper(
        env, judge, group_size=cfg.group_size, groups_per_step=cfg.groups_per_step, correction=cfg.correction,
        seed=cfg.seed, max_ungraded_share=cfg.max_ungraded_share, world_model_timeout_s=cfg.world_model_timeout_s,
        episode_steps=cfg.max_turns, episode_score="max",  # an episode scores the max over its turns
    )
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=cfg.lr, weight_decay=0.0)
    heldout = list_tasks("heldout")
    if cfg.eval_tasks:
        heldout = heldout[: cfg.eval_tasks]
    comps = _Components(policy, judge, env, wrapper, optimizer, list_tasks("train"), heldout, get_task)
    if cfg.executor == "ray":
        from functools import partial

        from wmrl_envs.distributed import AsyncAnchoredScorer, RayExecutionPool

        # each actor builds its own env and sandbox of the same backend (hidden paths included)
        pool = RayExecutionPool(partial(AutoResearchEnv, tasks="all", sandbox=sandbox.name, limits=limits),
                                num_workers=cfg.ray_workers, ledger=wrapper.ledger,
                                execution_timeout_s=cfg.exec_wall_time_s + 120.0)
        comps.scorer = AsyncAnchoredScorer(wrapper, pool, ordered=False)
    return comps


def _evaluation_wrapper(env: Any, cfg: TrainConfig) -> Any:
    """The wrapper's evaluation mode over the training env: no world model, every group executed
    for real (``anchor_fraction=1``), ``training=False`` (nothing is learned or routed), its own
    ledger (evaluation is never counted in the training compute)."""
    from wmrl_envs import AnchoredWorldModelWrapper

    wrapper = AnchoredWorldModelWrapper(env, None, anchor_fraction=1.0, group_size=cfg.eval_k,
                                        max_ungraded_share=cfg.max_ungraded_share, episode_steps=cfg.max_turns)
    wrapper.training = False
    return wrapper


def evaluate(c: _Components, cfg: TrainConfig) -> dict[str, Any]:
    """Held-out avg@k with real execution, through the wrapper's evaluation mode
    (:func:`_evaluation_wrapper`; not counted in the training compute).

    Ungraded trajectories (the machinery failed: ``info["wmrl"]["ungraded_cause"]`` is set) are
    left out of avg@k and of the mean score, counted by cause in ``"ungraded"``, and warned
    about; a task left with no graded trajectory is left out (``"n_tasks_ungraded"``).

    Returns:
        :func:`agents.train.evaluation.avg_at_k`'s dict (percent) plus ``mean_score`` (reward scale),
        ``statuses`` (trajectories by grading status), ``generation_s`` and ``execution_s``
        (seconds), ``n_tasks``, ``k``, ``ungraded`` (``{cause: trajectories}``) and
        ``n_tasks_ungraded``.

    Raises:
        TooManyUngradedError: at least ``cfg.max_ungraded_share`` of the trajectories are ungraded.
    """
    from wmrl_envs.core.ungraded import CAUSE_KEY

    if c.eval_wrapper is None:
        c.eval_wrapper = _evaluation_wrapper(c.env, cfg)
    wrapper, policy = c.eval_wrapper, c.policy
    if cfg.max_turns > 1:
        return _evaluate_multi_turn(c, cfg)
    specs = [c.get_task(t) for t in c.heldout_tasks]
    contexts = [_task_context(wrapper, t) for t in c.heldout_tasks]
    prompts = [policy.build_prompt(ctx, spec) for ctx, spec in zip(contexts, specs)]
    t0 = time.perf_counter()
    samples = policy.sample(prompts, cfg.eval_k)
    gen_s = time.perf_counter() - t0
    positions: dict[str, list[float | None]] = {}
    scores: list[float] = []
    statuses: dict[str, int] = {}
    ungraded: dict[str, int] = {}
    messages: dict[str, str] = {}
    t0 = time.perf_counter()
    for t, ctx, spec, texts in zip(c.heldout_tasks, contexts, specs, samples.texts):
        group = _score_task(wrapper, t, ctx, [policy.completion_to_action(x, spec) for x in texts])
        positions[t] = []
        for reward, info in zip(group.rewards, group.infos):
            statuses[info.get("status", "?")] = statuses.get(info.get("status", "?"), 0) + 1
            cause = info["wmrl"][CAUSE_KEY]
            if cause is not None:  # the machinery failed: not the agent's score
                ungraded[cause] = ungraded.get(cause, 0) + 1
                messages[cause] = str(info.get("message") or info.get("error") or "")
                continue
            positions[t].append(info.get("position") if info.get("status") == "valid" else None)
            scores.append(float(reward))
    exec_s = time.perf_counter() - t0
    return _eval_result(c, cfg, positions, scores, statuses, ungraded, messages, gen_s, exec_s)


def _evaluate_multi_turn(c: _Components, cfg: TrainConfig) -> dict[str, Any]:
    """:func:`evaluate` with multi-turn episodes: ``eval_k`` episodes per held-out task, each
    rolled out turn by turn with real feedback (:func:`_rollout_episode`); a trajectory's position
    is the best valid one over its turns, its score the episode's real score (max over turns);
    ``statuses`` counts turns. ``generation_s`` and ``execution_s`` are then the two shares of the
    episodes' wall-clock (the evaluation wrapper's ledger gives the execution share)."""
    from wmrl_envs.core import EXECUTION
    from wmrl_envs.core.ungraded import CAUSE_KEY

    wrapper, policy = c.eval_wrapper, c.policy
    positions: dict[str, list[float | None]] = {}
    scores: list[float] = []
    statuses: dict[str, int] = {}
    ungraded: dict[str, int] = {}
    messages: dict[str, str] = {}
    t0, exec0 = time.perf_counter(), wrapper.ledger.seconds(EXECUTION)
    for t in c.heldout_tasks:
        spec = c.get_task(t)
        positions[t] = []
        for _ in range(cfg.eval_k):
            _, infos, _ = _rollout_episode(wrapper, policy, t, spec)
            for info in infos:
                statuses[info.get("status", "?")] = statuses.get(info.get("status", "?"), 0) + 1
            final = infos[-1]
            cause = final["wmrl"][CAUSE_KEY]
            if cause is not None:  # the machinery failed: not the agent's score
                ungraded[cause] = ungraded.get(cause, 0) + 1
                messages[cause] = str(final.get("message") or final.get("error") or "")
                continue
            valid = [i.get("position") for i in infos if i.get("status") == "valid" and i.get("position") is not None]
            positions[t].append(max(valid) if valid else None)
            scores.append(float(final["wmrl"]["real_score"]))
    exec_s = wrapper.ledger.seconds(EXECUTION) - exec0
    return _eval_result(c, cfg, positions, scores, statuses, ungraded, messages,
                        max(0.0, time.perf_counter() - t0 - exec_s), exec_s)


def _eval_result(c: _Components, cfg: TrainConfig, positions: dict[str, list[float | None]], scores: list[float],
                 statuses: dict[str, int], ungraded: dict[str, int], messages: dict[str, str], gen_s: float,
                 exec_s: float) -> dict[str, Any]:
    """The result dict of :func:`evaluate` (avg@k over graded trajectories) after the stop rule.

    Raises:
        TooManyUngradedError: at least ``cfg.max_ungraded_share`` of the trajectories are ungraded.
    """
    from agents.train.evaluation import avg_at_k
    from wmrl_envs.core.ungraded import TooManyUngradedError

    n_traj, n_ungraded = len(c.heldout_tasks) * cfg.eval_k, sum(ungraded.values())
    if n_ungraded:
        import logging

        logging.getLogger(__name__).warning(
            "held-out evaluation: %d of %d trajectories ungraded (%s); left out of avg@k", n_ungraded, n_traj, ungraded
        )
        if cfg.max_ungraded_share is not None and n_ungraded >= cfg.max_ungraded_share * n_traj:
            raise TooManyUngradedError(n_ungraded, n_traj, cfg.max_ungraded_share, ungraded, messages)
    graded_positions = {t: p for t, p in positions.items() if p}
    res = avg_at_k(graded_positions, {t: c.get_task(t).category for t in c.heldout_tasks}, k=cfg.eval_k)
    res.update(mean_score=_mean(scores), statuses=statuses, generation_s=gen_s, execution_s=exec_s,
               n_tasks=len(c.heldout_tasks), k=cfg.eval_k, ungraded=ungraded,
               n_tasks_ungraded=len(positions) - len(graded_positions))
    return res


# ---------------------------------------------------------------------- checkpoints
_JUDGE_COUNTERS = ("n_generate_calls", "n_model_calls", "n_precheck", "seconds", "tokens_generated")

def _save_checkpoint(run_dir: Path, c: _Components, step: int, rng: np.random.Generator, extra: dict[str, Any]) -> None:
    import torch

    tmp = run_dir / "checkpoint.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    torch.save(
        {
            "adapter": c.policy.adapter_state_dict(),
            "optimizer": c.optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        },
        tmp / "weights.pt",
    )
    state = {
        "step": step,
        "wrapper": c.wrapper.state_dict(),
        "numpy_rng": rng.bit_generator.state,
        "policy_sample_calls": c.policy.n_sample_calls,
        "judge": {k: getattr(c.judge, k) for k in _JUDGE_COUNTERS if hasattr(c.judge, k)},
        **extra,
    }
    write_json_atomic(tmp / "state.json", state, indent=2, default=_json_default)
    final = run_dir / "checkpoint"
    old = run_dir / "checkpoint.old"
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        final.rename(old)
    tmp.rename(final)
    if old.exists():
        shutil.rmtree(old)


def _load_checkpoint(run_dir: Path, c: _Components, rng: np.random.Generator) -> dict[str, Any]:
    import torch

    folder = run_dir / "checkpoint"
    if not folder.exists() and (run_dir / "checkpoint.old").exists():
        folder = run_dir / "checkpoint.old"  # killed between the two renames
    if not (folder / "state.json").exists():
        raise FileNotFoundError(
            f"{run_dir} has no checkpoint to resume from (expected {folder}/state.json); "
            "start a new run without --resume"
        )
    w = torch.load(folder / "weights.pt", weights_only=False, map_location=c.policy.device)
    c.policy.load_adapter_state_dict(w["adapter"])
    c.optimizer.load_state_dict(w["optimizer"])
    torch.set_rng_state(w["torch_rng"].cpu())
    if w.get("cuda_rng") is not None and torch.cuda.is_available() and len(w["cuda_rng"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([t.cpu() for t in w["cuda_rng"]])
    state = json.loads((folder / "state.json").read_text())
    c.wrapper.load_state_dict(state["wrapper"])
    rng.bit_generator.state = state["numpy_rng"]
    c.policy.n_sample_calls = int(state["policy_sample_calls"])
    for k, v in state.get("judge", {}).items():
        setattr(c.judge, k, v)  # counters; the generation seed advances with n_generate_calls
    return state


# ---------------------------------------------------------------------- main loop
def train(cfg: TrainConfig, run_dir: str | Path, *, resume: bool = False, quiet: bool = False) -> dict[str, Any]:
    """Run (or resume) the main job; returns the summary dict (also written to the run folder).

    Args:
        cfg: the configuration (ignored on resume: the run folder's config.json is used).
        run_dir: the run folder (created; must not hold another run unless ``resume``).
        resume: continue the run in ``run_dir`` from its last checkpoint.
        quiet: no progress bar or table.

    Raises:
        FileExistsError: ``run_dir`` already holds a run and ``resume`` is False.
        FileNotFoundError: ``resume`` without a checkpoint in ``run_dir``.
        ValueError: invalid configuration.
        TooManyUngradedError: the stop rule fired (the reason is in metrics.jsonl; the last
            checkpoint stays for a resume).
    """
    from rich.console import Console

    run_dir = Path(run_dir)
    console = Console(quiet=quiet)
    cfg = _start(cfg, run_dir, resume, console)
    for note in auto_fraction_notes(cfg):
        import warnings

        warnings.warn(note, UserWarning, stacklevel=2)
    t_start = time.perf_counter()
    c = _build(cfg)
    if not resume:  # written only once everything is built, so a failed start leaves no folder
        run_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(run_dir / "config.json", asdict(cfg), indent=2, default=_json_default)
    from agents.train.tracking import Tracker

    if cfg.vllm_url is not None:  # the policy samples on the server with its adapter pushed
        from agents.llm.vllm_server import VLLMServerSampler

        c.policy.sampler = VLLMServerSampler(cfg.vllm_url, cfg.vllm_served_model or cfg.model,
                                             adapter_dir=cfg.vllm_adapter_dir or run_dir / "vllm_adapters")
    elif cfg.vllm_colocate:  # experimental: an in-process engine beside the trainer
        from agents.llm.backbone import DEFAULT_MODEL
        from agents.llm.vllm_server import VLLMColocatedSampler
        from wmrl_envs.world_models.smollm2 import default_cache_dir

        base = str(default_cache_dir()) if cfg.model == DEFAULT_MODEL else cfg.model
        c.policy.sampler = VLLMColocatedSampler(base, adapter_dir=cfg.vllm_adapter_dir or run_dir / "vllm_adapters",
                                                max_lora_rank=cfg.lora_r,
                                                gpu_memory_utilization=cfg.vllm_gpu_memory_utilization)
    try:
        tracker = Tracker(cfg.report_to, run_dir, asdict(cfg), resume=resume)
        if not resume and getattr(c.policy, "sampler", None) is not None:
            c.policy.sampler.sync(c.policy)  # the server samples with this policy's adapter (fails fast here)
    except BaseException:
        if not resume and not (run_dir / "checkpoint").exists():  # a failed start leaves no folder
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    try:
        return _train_loop(cfg, run_dir, resume, c, console, tracker, t_start)
    finally:
        tracker.close()


def _train_loop(cfg: TrainConfig, run_dir: Path, resume: bool, c: _Components, console: Any, tracker: Any,
                t_start: float) -> dict[str, Any]:
    """Steps 1-3 of :func:`train` on the built components (``tracker`` mirrors the metrics)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from agents.grpo import grpo_update
    from wmrl_envs.core import GENERATION, UPDATE, TooManyUngradedError

    policy, wrapper, ledger = c.policy, c.wrapper, c.wrapper.ledger
    update_cfg = _update_config(cfg)
    rng = np.random.default_rng(cfg.seed)
    metrics_path = run_dir / "metrics.jsonl"

    # 1. the initial policy on the held-out tasks (or the state of the run being resumed)
    if resume:
        start_step, eval_before, prior_wall = _resume(run_dir, c, rng, metrics_path)
    if resume and getattr(policy, "sampler", None) is not None:
        policy.sampler.sync(policy)  # the server samples with the adapter of the restored policy
    if resume:
        console.print(f"resumed at step {start_step}/{cfg.steps} with {c.wrapper.corrector.debiaser.n_pairs} anchor pairs")
    else:
        console.print(f"evaluating the initial policy on {len(c.heldout_tasks)} held-out tasks x k={cfg.eval_k} (real execution)")
        start_step, eval_before, prior_wall = 0, evaluate(c, cfg), 0.0
        _save_checkpoint(run_dir, c, -1, rng, {"eval_before": eval_before, "wall_s": time.perf_counter() - t_start})
        tracker.log(eval_before, 0, prefix="eval/")

    # 2. GRPO steps
    progress = Progress(
        TextColumn("[bold]GRPO"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"), console=console, disable=console.quiet,
    )
    with progress:
        bar = progress.add_task("steps", total=cfg.steps, completed=start_step, info="")
        for step in range(start_step, cfg.steps):
            t_step = time.perf_counter()
            # sample the step's tasks and take each one's context from the wrapper
            wrapper.plan_step(cfg.groups_per_step)
            task_ids = [str(t) for t in rng.choice(c.train_tasks, size=cfg.groups_per_step,
                                                   replace=cfg.groups_per_step > len(c.train_tasks))]
            specs = [c.get_task(t) for t in task_ids]
            groups = []
            try:
                if cfg.max_turns > 1:  # episodes one by one, each turn's feedback in the next prompt
                    samples, turn_rollout = _multi_turn_groups(c, cfg, task_ids, specs, groups)
                else:
                    contexts = [_task_context(wrapper, t) for t in task_ids]
                    prompts = [policy.build_prompt(ctx, spec) for ctx, spec in zip(contexts, specs)]
                    # G completions per task
                    with ledger.timed(GENERATION, count=cfg.groups_per_step * cfg.group_size):
                        samples = policy.sample(prompts, cfg.group_size)
                    if c.scorer is not None:  # anchors on the Ray pool; train what has arrived
                        groups, train_samples, old_lp, async_rec = _async_groups(c, cfg, step, task_ids, specs, samples)
                    else:
                        # score every group: world model, real execution on anchors, corrections
                        for t, ctx, spec, texts in zip(task_ids, contexts, specs, samples.texts):
                            groups.append(_score_task(wrapper, t, ctx, [policy.completion_to_action(x, spec) for x in texts]))
            except TooManyUngradedError as exc:  # the stop rule: record why, keep the last checkpoint
                _append_jsonl(metrics_path, {"step": step, "stopped": "too_many_ungraded", "error": str(exc),
                                             "ungraded_step": exc.causes, **wrapper.ungraded.stats(),
                                             "ledger": ledger.to_dict()})
                console.print(f"[bold red]stopped at step {step}[/bold red]: {exc}")
                raise
            # one GRPO step on the kept rows (ρ on anchor rows, ungraded rows dropped)
            _check_judge_idle(c.judge, cfg.world_model_timeout_s)
            with ledger.timed(UPDATE):  # wall-clock and CPU-seconds of the update
                if cfg.max_turns > 1:
                    update = _multi_turn_update(policy, c.optimizer, samples, turn_rollout, groups, update_cfg)
                elif c.scorer is not None:
                    update = grpo_update(policy, c.optimizer, train_samples, [g.rewards for g in groups],
                                         [g.advantage_weight for g in groups], config=update_cfg, old_logprobs=old_lp)
                else:
                    update = grpo_update(policy, c.optimizer, samples, [g.rewards for g in groups],
                                         [g.advantage_weight for g in groups], config=update_cfg)
                if getattr(policy, "sampler", None) is not None:
                    policy.sampler.sync(policy)  # the next step samples the updated policy
            # log and checkpoint
            rec = _step_record(step, task_ids, groups, samples, update, wrapper, time.perf_counter() - t_step)
            if c.scorer is not None:
                rec.update(async_rec)
            _append_jsonl(metrics_path, rec)
            tracker.log(rec, step)
            _save_checkpoint(run_dir, c, step, rng, {"eval_before": eval_before,
                                                     "wall_s": prior_wall + time.perf_counter() - t_start,
                                                     "anchors_in_flight": len(c.in_flight)})
            reward = rec["reward_mean"] if rec["reward_mean"] is not None else float("nan")
            info = f"reward {reward:.3f} rho {rec['rho']:.2f} pairs {rec['anchor_pairs']}"
            progress.update(bar, advance=1, info=info)
            if not console.is_terminal and not console.quiet:  # a log file gets one line per step instead of a bar
                console.print(f"step {step + 1}/{cfg.steps} ({rec['step_s']:.0f} s): {info}")

    if c.scorer is not None and c.in_flight:  # their pairs still feed the corrections; too late to train
        console.print(f"waiting for {len(c.in_flight)} anchor groups still executing on the Ray pool")
        c.scorer.collect(timeout=cfg.exec_wall_time_s + 180.0)
        _append_jsonl(metrics_path, {"step": cfg.steps - 1, "after_training": True,
                                     "anchors_arrived_after_training": len(c.in_flight),
                                     "ledger": ledger.to_dict()})
        c.in_flight.clear()
        # the last checkpoint again, now with their anchor pairs and executions
        _save_checkpoint(run_dir, c, cfg.steps - 1, rng, {"eval_before": eval_before, "anchors_in_flight": 0,
                                                          "wall_s": prior_wall + time.perf_counter() - t_start})

    # 3. the trained policy on the held-out tasks, and the summary
    console.print("evaluating the trained policy on the held-out tasks (real execution)")
    eval_after = evaluate(c, cfg)
    tracker.log(eval_after, cfg.steps, prefix="eval/")
    summary = summarise(cfg, c, eval_before, eval_after, prior_wall + time.perf_counter() - t_start)
    write_json_atomic(run_dir / "summary.json", summary, indent=2, default=_json_default)
    plot_calibration(c, run_dir / "calibration.png")
    tracker.log_image("calibration", run_dir / "calibration.png", cfg.steps)
    (run_dir / "summary.md").write_text(summary_markdown(summary))
    print_summary(console, summary)
    c.env.close()
    c.env.sandbox.close()
    if c.scorer is not None:
        c.scorer.pool.close()
    return summary


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


# ---------------------------------------------------------------------- pieces of the loop
def _start(cfg: TrainConfig, run_dir: Path, resume: bool, console: Any) -> TrainConfig:
    """The run's configuration (validated, or the resumed run's), after the checks that need no
    model: a new run's folder must be free, a resumed run must be unfinished. Seeds Python's
    RNG and warns when the data come from the public reference secret.

    Raises:
        FileExistsError, FileNotFoundError, ValueError: as :func:`train`.
    """
    if resume:
        cfg = load_config(run_dir)
    else:
        _validate(cfg)
        if (run_dir / "config.json").exists():
            raise FileExistsError(
                f"{run_dir} already holds a run; pass --resume {run_dir} to continue it, or choose another --run-dir"
            )
    random.seed(cfg.seed)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    console.print(f"[bold]wmrl train[/bold] preset={cfg.preset} run_dir={run_dir}" + (" (resuming)" if resume else ""))
    if secret_record()["reference"]:
        console.print(
            "[yellow]warning[/yellow]: the AutoResearch data come from the public reference secret "
            "(WMRL_TASK_SECRET=wmrl-reference): its hidden labels can be rebuilt from this repository. "
            "Use it to reproduce published figures; unset WMRL_TASK_SECRET to train on this "
            "installation's private data (docs/autoresearch.md)."
        )
    if resume and (run_dir / "summary.json").exists():
        raise ValueError(
            f"the run in {run_dir} is complete (see {run_dir / 'summary.md'}); start a new run "
            "with --run-dir, nothing to resume"
        )
    return cfg


def _resume(run_dir: Path, c: _Components, rng: np.random.Generator, metrics_path: Path) -> tuple[int, dict, float]:
    """Load the last checkpoint into ``c`` and ``rng``; drop the metrics lines of steps after it
    (the killed step is redone). Returns ``(first step to run, eval_before, wall seconds so far)``."""
    state = _load_checkpoint(run_dir, c, rng)
    start_step = int(state["step"]) + 1
    if state.get("anchors_in_flight"):
        import logging

        logging.getLogger(__name__).warning(
            "resuming %s: %d anchor groups were still executing on the Ray pool at the checkpoint; their "
            "executions are lost (routed and world-model scored, never paired or trained)", run_dir,
            state["anchors_in_flight"])
    if metrics_path.exists():
        kept = []
        for ln in metrics_path.read_text().splitlines():
            try:
                if json.loads(ln).get("step", -1) < start_step:
                    kept.append(ln)
            except json.JSONDecodeError:  # a line torn by the kill: that step is redone
                continue
        metrics_path.write_text("".join(ln + "\n" for ln in kept))
    return start_step, state["eval_before"], float(state.get("wall_s", 0.0))


def _update_config(cfg: TrainConfig) -> Any:
    """The GRPO step's settings: one backward per group (the LLM scores one prompt per call)."""
    from agents.grpo import GRPOUpdateConfig

    return GRPOUpdateConfig(
        clip_eps=cfg.clip_eps, kl_coef=cfg.kl_coef, entropy_coef=cfg.entropy_coef, num_iterations=cfg.num_iterations,
        micro_batch_per_group=True, max_grad_norm=cfg.max_grad_norm, scale=cfg.scale_advantages,
        drop_zero_advantage=True,
    )


def _task_context(wrapper: Any, task_id: str) -> Any:
    """The observation of ``task_id`` from the wrapper (``begin_group``: the inner env reset for
    that task), what the policy is prompted with."""
    obs, _ = wrapper.begin_group(options={"task_id": task_id})
    return obs


def _score_task(wrapper: Any, task_id: str, context: Any, actions: list[str]) -> Any:
    """``wrapper.score_group`` of one task's G actions (a :class:`~wmrl_envs.wrappers.GroupRollout`).

    Every group of a step was begun (its prompt built) before the policy sampled them all in one
    batch, so each group is scored with its begun ``context``: the inner env is reset again only
    for an anchor group, to execute it; a world-model group does not touch it.
    """
    return wrapper.score_group(actions, options={"task_id": task_id}, context=context)


def _rollout_episode(wrapper: Any, policy: Any, task_id: str, spec: Any, ledger: Any = None) -> tuple[list[Any], list[Any], Any]:
    """One multi-turn episode of ``task_id`` through the wrapper's per-episode API.

    Each turn: the prompt with the earlier turns (:meth:`agents.llm.policy.LLMPolicy.build_prompt`'s
    ``history``: each completion and the feedback it got, real on anchor groups and predicted by
    the world model on world-model groups), one completion sampled, the action stepped. The
    episode ends when the wrapper says so (its last turn, or an ungraded real turn).

    Returns:
        ``(turns, infos, obs)``: per turn ``(prompt_ids, completion_ids, text)``; per turn the
        step's ``info``; the last observation.
    """
    from contextlib import nullcontext

    from wmrl_envs.core import GENERATION

    obs, _ = wrapper.reset(options={"task_id": task_id})
    history: list[tuple[str, str]] = []
    turns, infos = [], []
    while True:
        with ledger.timed(GENERATION, count=1) if ledger is not None else nullcontext():
            s = policy.sample([policy.build_prompt(obs, spec, history=history)], 1)
        text = s.texts[0][0]
        obs, _, terminated, truncated, info = wrapper.step(policy.completion_to_action(text, spec))
        turns.append((s.prompt_ids[0], s.completion_ids[0][0], text))
        infos.append(info)
        if terminated or truncated:
            return turns, infos, obs
        history.append((text, str(obs.get("feedback", "")) if isinstance(obs, dict) else ""))


def _multi_turn_groups(c: _Components, cfg: TrainConfig, task_ids: list[str], specs: list[Any],
                       groups: list[Any]) -> tuple[Any, list[int]]:
    """A step's groups of multi-turn episodes (``cfg.max_turns > 1``), appended to ``groups``.

    The G episodes of a group are rolled out one after another (:func:`_rollout_episode`); the
    wrapper routes the group, scores every turn with the world model, executes the turns of an
    anchor group, and at the group's close corrects it (``wrapper.last_group``: the training
    rewards, max over turns). Each turn becomes one row of the returned samples (its own prompt,
    which holds the earlier turns), so every turn's tokens enter the loss with the episode's advantage.

    Returns:
        ``(samples, turn_rollout)``: a :class:`agents.llm.policy.PolicySamples` with one row per
        turn, and per row the flat index (group × G + episode) of the episode it belongs to.
    """
    from agents.llm.policy import PolicySamples
    from wmrl_envs.wrappers.common import group_rollout

    prompt_ids, completion_ids, texts, turn_rollout = [], [], [], []
    for gi, (t, spec) in enumerate(zip(task_ids, specs)):
        last_infos, last_obs = [], []
        for j in range(cfg.group_size):
            turns, infos, obs = _rollout_episode(c.wrapper, c.policy, t, spec, c.wrapper.ledger)
            for p, comp, text in turns:
                prompt_ids.append(list(p))
                completion_ids.append([list(comp)])
                texts.append([text])
                turn_rollout.append(gi * cfg.group_size + j)
            last_infos.append(dict(infos[-1]))
            last_obs.append(obs)
        groups.append(group_rollout(c.wrapper.last_group, last_obs, last_infos))
    samples = PolicySamples(prompt_ids, completion_ids, texts, sum(len(x[0]) for x in completion_ids))
    return samples, turn_rollout


def _multi_turn_update(policy: Any, optimizer: Any, samples: Any, turn_rollout: list[int], groups: list[Any],
                       config: Any) -> dict[str, float]:
    """The GRPO step on multi-turn episodes: advantages per episode within its group
    (:func:`agents.grpo.build_advantages`: ρ on anchor groups, ungraded episodes dropped), given to
    every turn of the episode (:func:`agents.grpo.grpo_step` on the turn rows).

    Returns:
        As :func:`agents.grpo.grpo_update` (``n_rows`` counts turns).
    """
    from agents.grpo import build_advantages, grpo_step

    batch = build_advantages([g.rewards for g in groups], [g.advantage_weight for g in groups], scale=config.scale,
                             drop_zero_advantage=config.drop_zero_advantage)
    per_episode = dict(zip(batch.row_index.tolist(), batch.advantages.tolist()))
    g_size = len(groups[0].rewards) if groups else 1
    rows = [r for r, ep in enumerate(turn_rollout) if ep in per_episode]
    stats = grpo_step(policy, optimizer, samples, np.asarray(rows, dtype=np.int64),
                      np.asarray([per_episode[turn_rollout[r]] for r in rows], dtype=np.float64), config=config,
                      groups=np.asarray([turn_rollout[r] // g_size for r in rows], dtype=np.int64))
    stats.update(n_groups_used=float(batch.n_groups_used), n_groups_skipped=float(batch.n_groups_skipped),
                 n_ungraded=float(batch.n_ungraded))
    return stats


@dataclass
class _InFlight:
    """An anchor group on the Ray pool (``executor="ray"``), with what training it needs later."""

    step: int
    """The step it was sampled in."""
    prompt_ids: list[int]
    completion_ids: list[list[int]]
    texts: list[str]
    old_logprobs: Any
    """float32 (G, T) log-probabilities of its completions under the sampling policy."""


def _async_groups(c: _Components, cfg: TrainConfig, step: int, task_ids: list[str], specs: list[Any],
                  samples: Any) -> tuple[list[Any], Any, Any, dict[str, Any]]:
    """``executor="ray"``: submit this step's groups, return the groups to train on now.

    Every group is routed and scored by the world model at submission
    (:meth:`~wmrl_envs.distributed.AsyncAnchoredScorer.submit`, unordered): a world-model group is
    corrected at once; an anchor group's executions start on the pool and the log-probabilities of
    its completions under the current (sampling) policy are recorded. The groups trained now are
    this step's world-model groups and every anchor group whose scores have arrived (corrected on
    arrival: its pairs feed the debiaser and ρ then), unless it is more than ``cfg.max_staleness``
    steps old. A late anchor group trains with its recorded log-probabilities as the ratio's
    denominator; the dual-clipped surrogate (:func:`agents.grpo.grpo_loss`, ``dual_clip`` = 3 by
    default) bounds each of its tokens' gradient w.r.t. the log-probability by
    ``max(1 + ε, 3)·|A|`` (A ρ-weighted) whatever its ratio: PPO's clip alone would not for a
    negative advantage, whose gradient grows with the ratio.

    Returns:
        ``(groups, samples, old_logprobs, record)``: the :class:`~wmrl_envs.wrappers.GroupRollout`
        objects to train on, their completions as one :class:`~agents.llm.policy.PolicySamples`
        (rows group after group), a float32 (rows, T) tensor of recorded log-probabilities (NaN:
        none, the on-policy value is used) or ``None``, and the step's asynchrony figures for
        metrics.jsonl (``anchors_submitted``, ``anchors_arrived``, ``anchor_staleness`` (steps),
        ``anchors_stale_dropped``, ``anchors_in_flight``).
    """
    import torch

    from agents.llm.policy import PolicySamples
    from wmrl_envs.core import ANCHOR, UPDATE

    policy, g_size = c.policy, cfg.group_size
    fresh: dict[int, tuple[list[int], list[list[int]], list[str]]] = {}
    n_anchor = 0
    for gi, (t, spec) in enumerate(zip(task_ids, specs)):
        actions = [policy.completion_to_action(x, spec) for x in samples.texts[gi]]
        pending = c.scorer.submit(actions, options={"task_id": t})
        part = (samples.prompt_ids[gi], samples.completion_ids[gi], samples.texts[gi])
        if pending.route == ANCHOR:
            n_anchor += 1
            with c.wrapper.ledger.timed(UPDATE, count=0), torch.no_grad():  # one forward pass, charged to the update
                lp, _, _ = policy.grpo_logprobs(samples, list(range(gi * g_size, (gi + 1) * g_size)))
            c.in_flight[pending.group_id] = _InFlight(step, *part, lp.detach().cpu())
        else:
            fresh[pending.group_id] = part
    train: list[tuple[Any, tuple[Any, Any, Any], Any]] = []
    staleness, dropped = [], 0
    for g in c.scorer.poll():
        if g.group_id in fresh:
            train.append((g, fresh.pop(g.group_id), None))
            continue
        item = c.in_flight.pop(g.group_id)
        age = step - item.step
        if age > cfg.max_staleness:
            dropped += 1
            continue
        staleness.append(age)
        train.append((g, (item.prompt_ids, item.completion_ids, item.texts), item.old_logprobs if age > 0 else None))
    parts = [p for _, p, _ in train]
    merged = PolicySamples([list(p[0]) for p in parts], [list(p[1]) for p in parts], [list(p[2]) for p in parts],
                           sum(len(x) for p in parts for x in p[1]))
    old = None
    if any(lp is not None for _, _, lp in train):
        width = max(len(x) for p in parts for x in p[1])
        old = torch.full((len(merged), width), float("nan"))
        row = 0
        for _, p, lp in train:
            if lp is not None:
                old[row: row + lp.shape[0], : lp.shape[1]] = lp
            row += len(p[1])
    record = {"anchors_submitted": n_anchor, "anchors_arrived": len(staleness) + dropped, "anchor_staleness": staleness,
              "anchors_stale_dropped": dropped, "anchors_in_flight": len(c.in_flight)}
    return [g for g, _, _ in train], merged, old, record


def _check_judge_idle(judge: Any, timeout_s: float | None) -> None:
    """The judge is the policy's own backbone: never update it while a judge call that timed out
    is still running on it (docs/method.md, "Ungraded rollouts").

    Raises:
        RuntimeError: such a call is still running after another wait of ``timeout_s``.
    """
    from wmrl_envs.core import world_model_idle

    if judge is not None and not world_model_idle(judge, timeout_s):
        raise RuntimeError(
            f"a world-model (judge) call that exceeded world_model_timeout_s={timeout_s} s "
            "is still running on the policy's backbone after another such wait; the policy cannot be "
            "updated beside it. The judge hangs: check the model/device, then resume this run."
        )


def _step_record(step: int, task_ids: list[str], groups: list[Any], samples: Any, update: dict[str, float],
                 wrapper: Any, step_s: float) -> dict[str, Any]:
    """One line of metrics.jsonl: routes, rewards, scores, the update, ρ and the corrections, the ledger."""
    anchors = [g for g in groups if g.route == "anchor"]
    statuses: dict[str, int] = {}
    for g in anchors:
        for info in g.infos:
            statuses[info.get("status", "?")] = statuses.get(info.get("status", "?"), 0) + 1
    return {
        "step": step,
        "tasks": task_ids,
        "routes": [g.route for g in groups],
        "reward_mean": _mean([r for g in groups for r in g.rewards]),
        "real_score_mean": _mean([r for g in anchors for r in g.correction.real_scores]),
        "raw_wm_score_mean": _mean([r for g in groups for r in g.correction.raw_scores]),
        "anchor_statuses": statuses,
        "rows_trained": int(update["n_rows"]),
        "groups_used": int(update["n_groups_used"]),
        "groups_skipped": int(update["n_groups_skipped"]),
        "ungraded_rows": int(update["n_ungraded"]),
        "ungraded_by_cause_step": _step_causes(groups),
        **wrapper.ungraded.stats(),
        "loss": update["loss"], "kl": update["kl"], "entropy": update["entropy"],
        "new_tokens": samples.new_tokens,
        "realised_anchor_fraction": wrapper.router.realised_fraction,
        **_fraction_in_force(wrapper),
        **wrapper.corrector.stats(),
        "ledger": wrapper.ledger.to_dict(),
        "step_s": step_s,
        "sample_completions": samples.texts[0][:2],
    }


def _fraction_in_force(wrapper: Any) -> dict[str, Any]:
    """The step's anchor fraction: ``anchor_fraction`` (the configured one, or with
    ``anchor_fraction="auto"`` the one the adaptive rule set for this step) and, with ``auto``, the
    within-group correlation ``auto_r`` it was estimated from (``None`` while warming up) and the
    cost ratio ``auto_gamma`` (``None`` until fixed)."""
    a = wrapper.loop.adaptive
    if a is None:
        return {"anchor_fraction": wrapper.router.anchor_fraction}
    _, fraction, r = a.history[-1] if a.history else (None, a.fraction, float("nan"))
    return {"anchor_fraction": fraction, "auto_r": r if math.isfinite(r) else None, "auto_gamma": a.gamma}


def _append_jsonl(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record, default=_json_default) + "\n")


def _step_causes(groups: list[Any]) -> dict[str, int]:
    """``{cause: rollouts}`` of a step's ungraded rollouts (from ``info["wmrl"]["ungraded_cause"]``)."""
    out: dict[str, int] = {}
    for g in groups:
        for info in g.infos:
            cause = info.get("wmrl", {}).get("ungraded_cause")
            if cause:
                out[cause] = out.get(cause, 0) + 1
    return out
