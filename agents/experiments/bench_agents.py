"""The agents of ``wmrl bench`` (:class:`agents.protocol.BenchAgent`): the grammar policy (the
fast CPU agent) and the LLM policy of ``wmrl train``; and the world model the anchored methods use."""

from __future__ import annotations

from typing import Any, Sequence

from .bench_config import BenchConfig

__all__ = ["GrammarBenchAgent", "LLMBenchAgent", "build_world_model", "world_model_fitting_cost"]


class GrammarBenchAgent:
    """:class:`agents.grammar.policy.GrammarPolicy` behind the :class:`BenchAgent` protocol.

    Each grammar choice is a "token"; the update (:func:`agents.grpo.group_step` with
    ``update_config``) is the one GRPO step on the per-choice log-probabilities, one Adam step per
    optimisation epoch, no gradient clipping.
    """

    def __init__(self, seed: int, lr: float = 0.1, kl_coef: float = 0.0, *, clip_eps: float = 0.2,
                 num_iterations: int = 1) -> None:
        import torch

        from agents.grammar.policy import GrammarPolicy
        from agents.grpo import GRPOUpdateConfig

        self.policy = GrammarPolicy(seed=seed)
        if kl_coef > 0:
            self.policy.freeze_reference()  # the KL reference: the initial policy
        self.optimizer = torch.optim.Adam(self.policy.trainable_parameters(), lr=lr)
        self.update_config = GRPOUpdateConfig(clip_eps=clip_eps, kl_coef=kl_coef, num_iterations=num_iterations,
                                              max_grad_norm=None)

    def sample(self, task_ids: Sequence[str], group_size: int) -> tuple[list[list[str]], Any]:
        from wmrl_envs.envs.autoresearch.tasks import get_task

        programs = self.policy.sample([get_task(t) for t in task_ids], group_size)
        return [[p.code for p in g] for g in programs], [p for g in programs for p in g]

    def snapshot(self) -> Any:
        return {k: (v.detach().clone() if hasattr(v, "detach") else v) for k, v in self.policy.state_dict().items()}

    def restore(self, snap: Any) -> None:
        self.policy.load_state_dict(snap)

    def reseed(self, seed: int) -> None:
        self.policy.generator.manual_seed(int(seed))


class LLMBenchAgent:
    """The LLM agent of ``wmrl train`` (:class:`agents.llm.policy.LLMPolicy`, ``model`` + LoRA on
    ``device`` (:func:`agents.llm.backbone.load_backbone`), line mode) behind the :class:`BenchAgent`
    protocol — the GPU-scale configuration of the benchmark (``wmrl bench --agent llm``). The update is the GRPO step of ``wmrl train``
    (:func:`agents.grpo.group_step`, one backward per group, one AdamW step per epoch).
    """

    def __init__(self, seed: int, lr: float = 2e-4, kl_coef: float = 0.0, *, lora_r: int = 16,
                 max_new_tokens: int = 32, temperature: float = 0.8, max_grad_norm: float = 1.0,
                 clip_eps: float = 0.2, num_iterations: int = 1, model: str = "smollm2-135m", device: str = "auto",
                 dtype: str = "auto") -> None:
        import torch

        from agents.llm.backbone import load_backbone
        from agents.grpo import GRPOUpdateConfig
        from agents.llm.policy import LLMPolicy

        torch.manual_seed(seed)
        backbone, tokenizer = load_backbone(model, device=device, dtype=dtype)
        self.policy = LLMPolicy(backbone, tokenizer, mode="line", lora_r=lora_r, lora_alpha=2 * lora_r,
                                max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
        self.optimizer = torch.optim.AdamW(self.policy.trainable_parameters(), lr=lr, weight_decay=0.0)
        self.update_config = GRPOUpdateConfig(clip_eps=clip_eps, kl_coef=kl_coef, num_iterations=num_iterations,
                                              micro_batch_per_group=True, max_grad_norm=max_grad_norm)

    def sample(self, task_ids: Sequence[str], group_size: int) -> tuple[list[list[str]], Any]:
        from wmrl_envs.envs.autoresearch.tasks import get_task

        specs = [get_task(t) for t in task_ids]
        samples = self.policy.sample([self.policy.build_prompt({}, s) for s in specs], group_size)
        actions = [[self.policy.completion_to_action(x, s) for x in texts] for s, texts in zip(specs, samples.texts)]
        return actions, samples

    def snapshot(self) -> Any:
        return {k: v.detach().clone() for k, v in self.policy.adapter_state_dict().items()}

    def restore(self, snap: Any) -> None:
        self.policy.load_adapter_state_dict(snap)

    def reseed(self, seed: int) -> None:
        self.policy.seed = int(seed)
        self.policy.n_sample_calls = 0


def build_world_model(cfg: BenchConfig, seed: int = 0) -> Any:
    """The world model the anchored methods use (see :attr:`BenchConfig.world_model`)."""
    if cfg.world_model in ("embedding", "degraded"):
        from wmrl_envs.envs.autoresearch.embedding_world_model import DegradedWorldModel, EmbeddingWorldModel, load_execution_log

        # frozen during training; each training task is predicted by a head fitted on the
        # logged executions of the *other* tasks (held-out tasks are never used)
        wm = EmbeddingWorldModel(seed=seed).fit_leave_one_task_out(load_execution_log(split="train"))
        if cfg.world_model == "degraded":
            return DegradedWorldModel(wm, information=cfg.wm_information, seed=seed)
        return wm
    if cfg.world_model == "llm":
        from agents.llm.backbone import load_backbone
        from wmrl_envs.envs.autoresearch.llm_judge import LLMJudgeWorldModel

        # the agent's backbone as loaded (its own frozen copy: the agent trains another)
        backbone, tokenizer = load_backbone(cfg.model, device=cfg.device, dtype=cfg.dtype)
        return LLMJudgeWorldModel(backbone, tokenizer, seed=seed, max_prompt_tokens=640)
    raise ValueError(f"world_model must be 'embedding', 'degraded' or 'llm', got {cfg.world_model!r}")


def world_model_fitting_cost(cfg: BenchConfig) -> tuple[float, str, bool]:
    """CPU-seconds of the real executions the benchmark's world model was fitted on.

    The embedding world model (and its degraded twin) is fitted on the shipped log of real
    executions of the training tasks (leave-one-task-out, so every training-task record is
    used); a user without that log would pay for those executions first, so the headline reports
    the speedup with this cost charged too. The LLM judge is a frozen backbone fitted on none.

    Returns:
        ``(seconds, what, is_cpu)``: the sum of the log's ``cpu_s`` per record where every record
        has it (``is_cpu`` True), else of its wall-clock ``runtime_s`` (``is_cpu`` False: reported
        under that name, never as CPU-seconds); ``what`` says which; 0.0 for the LLM judge.
    """
    if cfg.world_model == "llm":
        return 0.0, "none (frozen backbone)", True
    from wmrl_envs.envs.autoresearch.embedding_world_model import load_execution_log

    records = load_execution_log(split="train")
    if records and all(r.get("cpu_s") is not None for r in records):
        return float(sum(float(r["cpu_s"]) for r in records)), f"{len(records)} logged executions, CPU-seconds", True
    return float(sum(float(r.get("runtime_s") or 0.0) for r in records)), (
        f"{len(records)} logged executions, wall-clock seconds (the log has no CPU-seconds)"), False


def world_model_fitting_executions(cfg: BenchConfig) -> int:
    """How many real executions the pre-fitted world model was fitted on: the shipped log's
    training-task records for the embedding world model (and its degraded twin), 0 for the LLM
    judge (frozen, fitted on none). The headline charges them at the run's own CPU-seconds per
    execution (:func:`agents.experiments.bench_report.compute_speedups`)."""
    if cfg.world_model == "llm":
        return 0
    from wmrl_envs.envs.autoresearch.embedding_world_model import load_execution_log

    return len(load_execution_log(split="train"))


def build_learned_world_model(seed: int, *, refit_every: int = 4) -> Any:
    """The world model of ``wmrl_learned``: a fresh
    :func:`wmrl_envs.envs.autoresearch.learned_features.autoresearch_learned_world_model` (the
    AutoResearch featurizer on the shipped sentence encoder, refitted every ``refit_every`` anchor
    groups, ``--learned-refit-every``); nothing pre-fitted, it learns from the seed's anchor groups and
    its refits are charged to the ledger's ``world_model`` source. ``seed`` is unused (the head is
    deterministic); it is the factory's signature."""
    from wmrl_envs.envs.autoresearch.learned_features import autoresearch_learned_world_model

    return autoresearch_learned_world_model(refit_every=refit_every)

