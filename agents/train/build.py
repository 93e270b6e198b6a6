"""What one ``wmrl train`` run is made of, built from its :class:`~agents.train.config.TrainConfig`:
the LoRA policy, the judge (world model), the sandbox and the AutoResearch env, the anchored
wrapper, the optimiser, and with ``executor="ray"`` the Ray execution pool (:func:`build_components`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from agents.train.config import TrainConfig

if TYPE_CHECKING:
    import torch

    from agents.llm.policy import LLMPolicy
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.distributed import AsyncAnchoredScorer
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.llm_judge import LLMJudgeWorldModel
    from wmrl_envs.envs.autoresearch.tasks import TaskSpec

__all__ = ["Components", "InFlight", "build_components", "build_world_model"]


@dataclass
class Components:
    """What one run is made of (built by :func:`build_components`)."""

    policy: LLMPolicy
    judge: Any
    """The world model (``cfg.world_model``: an :class:`LLMJudgeWorldModel`, or a
    :class:`~wmrl_envs.world_models.learned.LearnedWorldModel`; :func:`build_world_model`)."""
    env: AutoResearchEnv
    wrapper: AnchoredWorldModelWrapper
    optimizer: torch.optim.Optimizer
    train_tasks: list[str]
    heldout_tasks: list[str]
    get_task: Callable[[str], TaskSpec]
    eval_wrapper: AnchoredWorldModelWrapper | None = None
    """The evaluation wrapper over ``env`` (built on the first :func:`~agents.train.evaluation.evaluate`)."""
    scorer: AsyncAnchoredScorer | None = None
    """``executor="ray"``: the :class:`~wmrl_envs.distributed.AsyncAnchoredScorer` over ``wrapper``."""
    in_flight: dict[int, InFlight] = field(default_factory=dict)
    """``executor="ray"``: anchor groups submitted and not yet trained (:class:`InFlight` by group id)."""


@dataclass
class InFlight:
    """An anchor group on the Ray pool (``executor="ray"``), with what training it needs later."""

    step: int
    """The step it was sampled in."""
    prompt_ids: list[int]
    completion_ids: list[list[int]]
    texts: list[str]
    old_logprobs: Any
    """float32 (G, T) log-probabilities of its completions under the sampling policy."""


def build_world_model(cfg: TrainConfig, policy: LLMPolicy, tokenizer: Any) -> Any:
    """The run's world model (``cfg.world_model``), on the policy's frozen backbone where it uses one.

    - ``"judge"``: :class:`~wmrl_envs.envs.autoresearch.llm_judge.LLMJudgeWorldModel` on
      ``cfg.judge_model``, else on the policy's backbone with its LoRA adapters disabled (the
      frozen reference copy with ``--finetune full``; the served base model with ``--vllm-url``).
    - ``"learned-policy"``: :func:`~wmrl_envs.envs.autoresearch.learned_features.autoresearch_policy_world_model`
      on the same frozen backbone (adapters disabled during featurization, or the reference copy),
      refitted after every anchor group.
    - both learned models take the host's static check's score for a certain failure
      (``cfg.static_check``, :mod:`wmrl_envs.envs.autoresearch.static_check`).
    - ``"learned-encoder"``: :func:`~wmrl_envs.envs.autoresearch.learned_features.autoresearch_learned_world_model`
      (the shipped MiniLM sentence encoder), refitted after every anchor group.
    - ``"none"``: ``None`` (no world model: every group is executed; the real arm).

    A learned world model is taught by the wrapper's loop at each anchor group's close (after the
    group was predicted and corrected: out of sample), its refits are charged to the ledger's
    ``world_model`` source, and its state is part of the wrapper's (so of the checkpoint).

    Raises:
        ValueError: an unknown ``cfg.world_model``.
    """
    from agents.llm.backbone import load_backbone

    if cfg.world_model == "none":  # real-execution GRPO: every group executed (anchor_fraction 1)
        return None
    from wmrl_envs.envs.autoresearch.static_check import static_check_score

    precheck = static_check_score if getattr(cfg, "static_check", False) else None
    if cfg.world_model == "learned-encoder":
        from wmrl_envs.envs.autoresearch.learned_features import autoresearch_learned_world_model

        return autoresearch_learned_world_model(refit_every=1, precheck=precheck)
    if cfg.world_model == "learned-policy":
        from wmrl_envs.envs.autoresearch.learned_features import autoresearch_policy_world_model

        frozen = policy.reference_model  # full fine-tuning: the frozen copy of the initial weights
        return autoresearch_policy_world_model(frozen if frozen is not None else policy.model, tokenizer,
                                               disable_adapters=frozen is None, refit_every=1, precheck=precheck)
    if cfg.world_model != "judge":
        raise ValueError(f"world_model must be one of judge, learned-policy, learned-encoder, got {cfg.world_model!r}")
    from wmrl_envs.envs.autoresearch.llm_judge import LLMJudgeWorldModel

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
        return LLMJudgeWorldModel.from_server(cfg.vllm_url, cfg.vllm_served_model or cfg.model, tokenizer, **judge_kwargs)
    return LLMJudgeWorldModel(judge_backbone, judge_tokenizer, disable_adapters=off, **judge_kwargs)


def _shown_lines(cfg: TrainConfig) -> dict[str, str] | None:
    """``--baseline board-low``: every task's weakest leaderboard entry (the line its prompt shows)."""
    if cfg.baseline != "board-low":
        return None
    from agents.train.relative import shown_model_line
    from wmrl_envs.envs.autoresearch.tasks import list_tasks

    return {t: shown_model_line(t, "board-low") for t in list_tasks()}


def _env_class(cfg: TrainConfig) -> tuple[type, dict[str, Any]]:
    """The env class of ``cfg.reward`` and its extra arguments: the relative reward's
    :class:`~agents.train.relative.RelativeRewardEnv` (with the shown line's baseline), or the
    benchmark's :class:`~wmrl_envs.envs.autoresearch.env.AutoResearchEnv`."""
    if cfg.reward == "relative":
        from agents.train.relative import RelativeRewardEnv

        return RelativeRewardEnv, {"baseline": cfg.baseline}
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv

    return AutoResearchEnv, {}


def build_components(cfg: TrainConfig) -> Components:
    """Load the policy (``cfg.model`` + LoRA, on ``cfg.device``) and the world model
    (:func:`build_world_model`), start the sandbox
    and the env (leaderboards prepared), wrap the env with the correction settings.

    Raises:
        SandboxUnavailableError: ``sandbox="auto"`` finds no isolating backend.
    """
    import torch

    from agents.llm.policy import LLMPolicy
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.envs.autoresearch.secret import sandbox_hidden_paths
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks
    from wmrl_envs.sandbox import SandboxLimits, SandboxUnavailableError, make_sandbox
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
        finetune=cfg.finetune, gradient_checkpointing=cfg.gradient_checkpointing, baseline=cfg.baseline,
        shown_lines=_shown_lines(cfg),
    )
    judge = build_world_model(cfg, policy, tokenizer)
    limits = SandboxLimits(wall_time_s=cfg.exec_wall_time_s, cpu_time_s=cfg.exec_wall_time_s, memory_mb=cfg.exec_memory_mb)
    sandbox = make_sandbox(cfg.sandbox, limits, hidden_paths=sandbox_hidden_paths())  # task secret, bundled data
    if cfg.sandbox == "auto" and not sandbox.isolates:
        sandbox.close()
        raise SandboxUnavailableError(
            "no isolating sandbox works here (bubblewrap or a Docker daemon), so agent-written code "
            "would run unisolated. Install bubblewrap (`apt-get install -y bubblewrap`, as "
            "scripts/setup.sh does), or pass --sandbox subprocess to accept running it unisolated."
        )
    env_cls, env_kwargs = _env_class(cfg)
    env = env_cls(tasks="all", sandbox=sandbox, limits=limits, max_turns=cfg.max_turns, **env_kwargs)
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
    if cfg.reward == "relative":  # the shown line's and the best's metrics on both halves: measured once, cached
        env.prepare_reference_levels(list_tasks("train") + heldout)
    comps = Components(policy, judge, env, wrapper, optimizer, list_tasks("train"), heldout, get_task)
    if cfg.executor == "ray":
        from functools import partial

        from wmrl_envs.distributed import AsyncAnchoredScorer, RayExecutionPool

        # each actor builds its own env and sandbox of the same backend (hidden paths included)
        pool = RayExecutionPool(partial(env_cls, tasks="all", sandbox=sandbox.name, limits=limits, **env_kwargs),
                                num_workers=cfg.ray_workers, ledger=wrapper.loop.ledger,
                                execution_timeout_s=cfg.exec_wall_time_s + 120.0)
        comps.scorer = AsyncAnchoredScorer(wrapper, pool, ordered=False)
    return comps
