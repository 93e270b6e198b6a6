"""Throughput of the main job on a backbone of a real shape: tokens/s, seconds per step by cost source, peak memory.

``wmrl train`` runs on any causal LM (``--model``); what a user with a GPU needs before a long run
is how fast a step goes on the shape they will use. No weights are needed for that: this script
builds a randomly initialised model of a real architecture from its config (default: the shape of
Qwen2.5-0.5B — 24 layers, hidden 896, 14 heads / 2 KV heads, MLP 4864 — with the shipped SmolLM2
tokenizer's 49,152-token vocabulary instead of Qwen's 151,936, since no tokenizer can be
downloaded here), writes it as a model folder, and runs a short ``wmrl train`` on it
(:func:`agents.train.loop.train`: sampling, the LLM judge on the same frozen backbone, real sandboxed
execution of the anchor groups, the GRPO update). A random model writes nonsense, so the
executions are mostly syntax errors decided on the host: the execution share printed here is a
floor, and the judge's time is the model's own (constrained decoding keeps its answers valid).

Run::

    .venv/bin/python benchmarks/train_throughput.py                           # Qwen2.5-0.5B shape, --device auto
    .venv/bin/python benchmarks/train_throughput.py --shape tiny --device cpu # the CI smoke run (seconds)

Prints and writes ``--out`` (JSON): the shape and parameter count, the device and dtype, tokens/s
of sampling, seconds per step by cost source (generation, world model, execution, update) and in
all, and peak memory (``torch.cuda.max_memory_allocated`` on a GPU; the process's peak resident
set on the CPU, which includes everything the process loaded).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

__all__ = ["SHAPES", "main"]

SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1_000_000.0,
                         tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True),
}
"""Qwen2 shapes by name (vocabulary: the SmolLM2 tokenizer's)."""


def build_model_folder(shape: str, folder: Path, seed: int = 0) -> int:
    """Write a randomly initialised ``Qwen2ForCausalLM`` of ``shape`` with the SmolLM2 tokenizer to
    ``folder``; returns its parameter count."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from wmrl_envs.world_models.smollm2 import load_smollm2_tokenizer

    tok = load_smollm2_tokenizer()
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, **SHAPES[shape])
    model = Qwen2ForCausalLM(cfg)
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return sum(p.numel() for p in model.parameters())


def measure_components(folder: Path, args: Any, device: Any) -> dict[str, Any]:
    """The costs a random policy's run skips (its nonsense is decided by the pre-checks): the judge
    on valid scripts (the training tasks' starter scripts, one group of G), the GRPO update on
    sampled completions with spread rewards, and the real sandboxed execution of that group.

    Returns:
        ``judge_s_per_prediction``, ``judge_model_calls``, ``update_s``, ``update_rows``,
        ``execution_s_per_rollout`` (wall-clock seconds).
    """
    import numpy as np
    import torch

    from agents.llm.backbone import load_backbone
    from agents.grpo import GRPOUpdateConfig, grpo_update
    from agents.llm.policy import LLMPolicy
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.llm_judge import LLMJudgeWorldModel
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks

    model, tok = load_backbone(str(folder), device=args.device, dtype=args.dtype)
    policy = LLMPolicy(model, tok, max_new_tokens=args.max_new_tokens, temperature=0.8, seed=0)
    judge = LLMJudgeWorldModel(policy.model, tok, seed=0, disable_adapters=True, max_prompt_tokens=640)
    env = AutoResearchEnv(tasks="all", sandbox="auto")
    task = get_task(list_tasks("train")[0])
    obs, _ = env.reset(options={"task_id": task.task_id})
    actions = [task.starter_code] * args.group_size
    t0 = time.perf_counter()
    judge.predict([obs] * len(actions), actions)
    judge_s = (time.perf_counter() - t0) / len(actions)
    samples = policy.sample([policy.build_prompt(obs, task)] * args.groups_per_step, args.group_size)
    rewards = [list(np.linspace(0.0, 1.0, args.group_size)) for _ in range(args.groups_per_step)]
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-4)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    stats = grpo_update(policy, opt, samples, rewards, [1.0] * args.groups_per_step,
                        config=GRPOUpdateConfig(kl_coef=0.04, micro_batch_per_group=True))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    update_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for a in actions:
        env.reset(options={"task_id": task.task_id})
        env.step(a)
    exec_s = (time.perf_counter() - t0) / len(actions)
    env.close()
    return {"judge_s_per_prediction": judge_s, "judge_model_calls": judge.n_model_calls, "update_s": update_s,
            "update_rows": int(stats["n_rows"]), "execution_s_per_rollout": exec_s}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Build, run, print; returns the JSON written to ``--out``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    ap.add_argument("--dtype", default="auto", help="auto (bf16 on a GPU), float32, bfloat16, float16")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--groups-per-step", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", default="runs/train_throughput.json")
    args = ap.parse_args(argv)

    import torch

    from agents.llm.backbone import resolve_device, resolve_dtype
    from agents.train.config import TrainConfig
    from agents.train.loop import train
    from wmrl_envs.core import CorrectionConfig

    device = resolve_device(args.device)
    with tempfile.TemporaryDirectory(prefix="wmrl-throughput-") as tmp:
        folder = Path(tmp) / "model"
        n_params = build_model_folder(args.shape, folder)
        cfg = TrainConfig(
            steps=args.steps, groups_per_step=args.groups_per_step, group_size=args.group_size, eval_k=1, eval_tasks=1,
            max_new_tokens=args.max_new_tokens, model=str(folder), device=args.device, dtype=args.dtype,
            correction=CorrectionConfig(min_pairs=4, refit_every=4, warmup_groups=1), preset=f"throughput-{args.shape}",
        )
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        t0 = time.perf_counter()
        summary = train(cfg, Path(tmp) / "run", quiet=True)
        wall = time.perf_counter() - t0
        lines = [json.loads(x) for x in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
        components = measure_components(folder, args, device)
    new_tokens = sum(r["new_tokens"] for r in lines)
    secs = summary["seconds"]
    per_step = {k: v / args.steps for k, v in secs.items()}
    if device.type == "cuda":
        peak = {"what": "torch.cuda.max_memory_allocated", "gib": torch.cuda.max_memory_allocated(device) / 2**30}
    else:
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        peak = {"what": "peak resident set of the process", "gib": kib / 2**20}
    out = {
        "shape": args.shape, "parameters": n_params, "device": str(device),
        "dtype": str(resolve_dtype(args.dtype, device)).replace("torch.", ""),
        "steps": args.steps, "groups_per_step": args.groups_per_step, "group_size": args.group_size,
        "max_new_tokens": args.max_new_tokens,
        "sampled_tokens": new_tokens,
        "sampling_tokens_per_s": new_tokens / secs["generation"] if secs["generation"] > 0 else None,
        "seconds_per_step": {**per_step, "all": sum(r["step_s"] for r in lines) / len(lines)},
        "real_executions": summary["real_executions"], "world_model_predictions": summary["world_model_predictions"],
        "peak_memory": peak, "wall_clock_s": wall,
        "components_on_valid_actions": components,
    }
    print(f"{args.shape}: {n_params / 1e6:.0f}M parameters on {out['device']} ({out['dtype']})")
    print(f"sampling: {new_tokens} tokens, {out['sampling_tokens_per_s'] or 0:.1f} tokens/s")
    print("seconds per step: " + ", ".join(f"{k} {v:.2f}" for k, v in out["seconds_per_step"].items()))
    print(f"peak memory: {peak['gib']:.2f} GiB ({peak['what']}); whole run {wall:.0f} s")
    c = components
    print(f"on valid actions (the tasks' starter scripts): judge {c['judge_s_per_prediction']:.3f} s per prediction "
          f"({c['judge_model_calls']} model calls), update {c['update_s']:.2f} s for {c['update_rows']} rows, "
          f"execution {c['execution_s_per_rollout']:.2f} s per rollout")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
