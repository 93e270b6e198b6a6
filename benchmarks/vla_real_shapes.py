"""The VLA protocol's models at their real shapes, randomly initialised: rollout speed, Robometer
seconds per trajectory, peak memory.

No weights are needed (none can be downloaded here): the models are built from configurations of
the published shapes and initialised at random, which costs the same compute as the real ones.

* **Policy**: MiniVLA-1B's architecture (:data:`agents.vla.prismatic.MINIVLA_SHAPES`: DINOv2-L/14
  with registers and SigLIP so400m/14 at 224 px, 256 image tokens, the fused-GELU-MLP projector,
  Qwen2.5-0.5B with 151 936 vocabulary rows) as :func:`agents.vla.load.load_prismatic_vla` builds
  it for a real run, in a ``VLAPolicy`` with LoRA. The last block of each tower is not built (its
  output is unused; openvla-mini's timm towers still compute it, ~4% of their FLOPs). The prompt is 49 tokens long, the length of
  MiniVLA's prompt for ``libero_10`` task 0 with the real Qwen2.5 tokenizer
  (``tests/golden/prismatic/real_qwen_tokenizer.json``; the tokenizer here is an offline byte-level
  one, so the prompt is 49 bytes). One *group step* is ``VLAPolicy.sample`` on the G observations of
  a group (one sample each, 7 action tokens, as ``wmrl libero`` steps a group). Printed: group
  steps/s, policy steps/s (G × that), seconds per 520-step LIBERO-Long episode (policy only; the
  simulator's own speed is ``benchmarks/libero_parallel.py``).
* **Robometer-4B**: ``RobometerModel`` on a ``Qwen3VLModel`` of Qwen3-VL-4B-Instruct's shape (text
  36 layers × 2560, 32 heads, 8 KV heads, head dim 128; vision 24 layers × 1024, patch 16,
  merge 2, DeepStack at 5/11/17), scoring trajectories of ``--frames`` frames (LIBERO 128 px
  renders: 16 visual tokens each) as ``RobometerWorldModel`` does. Printed: seconds per
  trajectory (batch of one and batch of ``--group-size``).

Peak memory: the process's peak resident set (CPU; in a run of both models the second figure is
the process's peak so far) or ``torch.cuda.max_memory_allocated`` since the model was built (GPU).
Timings are medians over ``--repeats`` after one warm-up call, with min and max; CPU-seconds of
the process are printed beside wall-clock.

    .venv/bin/python benchmarks/vla_real_shapes.py                     # CPU: policy fp32, Robometer bf16 (~9 GB)
    .venv/bin/python benchmarks/vla_real_shapes.py --device cuda       # a GPU, bf16 (not measured yet)
    .venv/bin/python benchmarks/vla_real_shapes.py --skip-robometer    # the policy only (~6 GB)
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path

import numpy as np
import torch


def _peak_mb(device: str) -> float:
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(fn, repeats: int, device: str) -> dict:
    """Median/min/max wall and CPU seconds of ``fn`` over ``repeats`` calls after one warm-up."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"wall_s": {"median": statistics.median(wall), "min": min(wall), "max": max(wall)},
            "cpu_s": {"median": statistics.median(cpu), "min": min(cpu), "max": max(cpu)}}


PROMPT_TOKENS = 49
"""Tokens of MiniVLA's prompt for libero_10 task 0 with the real Qwen2.5 tokenizer."""


def build_policy(device: str, dtype: torch.dtype, tiny: bool = False):
    """A VLAPolicy of MiniVLA's architecture with random weights (``tiny``: the same code path at
    toy sizes, for the smoke test)."""
    import dataclasses

    from agents.vla.prismatic import MINIVLA_SHAPES, PrismaticProcessor, build_prismatic_vla
    from agents.vla.load import build_tiny_vla
    from agents.vla.policy import VLAPolicy

    _, tiny_processor = build_tiny_vla()  # an offline byte-level tokenizer (no Qwen2.5 download)
    tok = tiny_processor.tokenizer
    shapes = MINIVLA_SHAPES
    if tiny:
        shapes = dataclasses.replace(
            shapes, dino_width=32, dino_depth=2, dino_heads=2, dino_mlp=64, siglip_width=32, siglip_depth=2,
            siglip_heads=2, siglip_mlp=64, projector=(64, 64, 32, 32),
            llm=dict(shapes.llm, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                     num_key_value_heads=1))
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        model = build_prismatic_vla(shapes).to(device)
    finally:
        torch.set_default_dtype(prev)
    n_params = sum(p.numel() for p in model.parameters())
    processor = PrismaticProcessor(tok, image_size=shapes.image_size, num_patches=shapes.num_patches)
    policy = VLAPolicy(model, processor, action_vocab_size=151_921, image_keys=("agentview_image",), seed=0,
                       prompt_template="a" * PROMPT_TOKENS)
    return policy, n_params


def build_robometer(device: str, dtype: torch.dtype, tiny: bool = False):
    """RobometerModel on a Qwen3-VL-4B-shaped backbone, random weights, with the tiny processor's
    token ids (the vocabulary size is the real one)."""
    from transformers import Qwen3VLConfig, Qwen3VLModel

    from wmrl_envs.envs.libero.robometer import IMAGE_PAD, VISION_END, VISION_START, RobometerModel, build_tiny_robometer

    tiny_model, processor = build_tiny_robometer(seed=0)
    if tiny:
        return tiny_model.to(device=device, dtype=dtype), processor, sum(p.numel() for p in tiny_model.parameters())
    ids = processor.tokenizer.convert_tokens_to_ids
    cfg = Qwen3VLConfig(
        text_config=dict(vocab_size=151_936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=262_144,
                         tie_word_embeddings=True,
                         rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0,
                                          "mrope_section": [24, 20, 20], "mrope_interleaved": True}),
        vision_config=dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=2560,
                           num_position_embeddings=2304, deepstack_visual_indexes=[5, 11, 17]),
        image_token_id=ids(IMAGE_PAD), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids(VISION_START), vision_end_token_id=ids(VISION_END),
    )
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        model = RobometerModel(Qwen3VLModel(cfg)).eval().to(device)
    finally:
        torch.set_default_dtype(prev)
    model.requires_grad_(False)
    return model, processor, sum(p.numel() for p in model.parameters())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--group-size", type=int, default=8, help="G: observations per group step / trajectories per batch")
    p.add_argument("--frames", type=int, default=8, help="frames per Robometer trajectory (the reference reward: 8)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-robometer", action="store_true")
    p.add_argument("--skip-policy", action="store_true")
    p.add_argument("--shape", choices=("real", "tiny"), default="real",
                   help="tiny: the same code path at toy sizes (the smoke test); the figures then mean nothing")
    p.add_argument("--threads", type=int, default=None, help="torch threads on the CPU (default: all cores)")
    p.add_argument("--out", type=Path, default=None, help="also write the figures as JSON")
    args = p.parse_args()
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else ("cpu" if args.device == "auto" else args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    out: dict = {"shape": args.shape, "device": device, "torch_threads": torch.get_num_threads(), "group_size": args.group_size,
                 "gpu": torch.cuda.get_device_name() if device == "cuda" else None}
    g = args.group_size
    if not args.skip_policy:
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        t0 = time.perf_counter()
        policy, n_params = build_policy(device, dtype, tiny=args.shape == "tiny")
        build_s = time.perf_counter() - t0
        obs = [{"agentview_image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
                "instruction": "put both the alphabet soup and the tomato sauce in the basket"} for _ in range(g)]
        with torch.no_grad():
            act = _timed(lambda: policy.sample(obs, group_size=1), args.repeats, device)
        step_s = act["wall_s"]["median"]
        out["policy"] = {
            "architecture": "MiniVLA (agents.vla.prismatic.MINIVLA_SHAPES)", "params": n_params, "dtype": str(dtype),
            "prompt_tokens": PROMPT_TOKENS, "build_s": round(build_s, 1), "act_group": act,
            "group_steps_per_s": 1.0 / step_s, "policy_steps_per_s": g / step_s,
            "episode_520_steps_s": 520 * step_s, "peak_mb": _peak_mb(device),
        }
        print(f"[policy] {n_params / 1e9:.2f} B (MiniVLA: DINOv2-L + SigLIP so400m + Qwen2.5-0.5B), {dtype}, {device}, "
              f"built in {build_s:.0f} s")
        print(f"  act on a group of {g}: {act['wall_s']['median']:.2f} s wall [{act['wall_s']['min']:.2f}, "
              f"{act['wall_s']['max']:.2f}], {act['cpu_s']['median']:.2f} CPU-s")
        print(f"  {1 / step_s:.3f} group steps/s = {g / step_s:.2f} policy steps/s; one 520-step episode (group): "
              f"{520 * step_s / 60:.1f} min of policy time; peak memory {out['policy']['peak_mb']:.0f} MB")
        del policy
    if not args.skip_robometer:
        from wmrl_envs.envs.libero.robometer import RobometerWorldModel
        from wmrl_envs.world_models.base import Trajectory

        dtype = torch.bfloat16
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        model, processor, n_params = build_robometer(device, dtype, tiny=args.shape == "tiny")
        build_s = time.perf_counter() - t0
        wm_one = RobometerWorldModel(model, processor, batch_size=1)
        wm_group = RobometerWorldModel(model, processor, batch_size=g)

        def trajectory():
            frames = [{"agentview_image": rng.integers(0, 256, (128, 128, 3), dtype=np.uint8)} for _ in range(args.frames)]
            return Trajectory(frames, [None] * (args.frames - 1), True)

        ctx = {"instruction": "put both the alphabet soup and the tomato sauce in the basket"}
        one = _timed(lambda: wm_one.predict([ctx], [trajectory()]), args.repeats, device)
        group = _timed(lambda: wm_group.predict([ctx] * g, [trajectory() for _ in range(g)]), max(1, args.repeats - 1), device)
        out["robometer"] = {"params": n_params, "dtype": str(dtype), "build_s": round(build_s, 1), "frames": args.frames,
                            "one_trajectory": one, "group": group,
                            "s_per_trajectory_batch1": one["wall_s"]["median"],
                            "s_per_trajectory_batched": group["wall_s"]["median"] / g, "peak_mb": _peak_mb(device)}
        print(f"[robometer] {n_params / 1e9:.2f} B (Qwen3-VL-4B shape + heads), {dtype}, {device}, built in {build_s:.0f} s")
        print(f"  {args.frames} frames of 128 px: {one['wall_s']['median']:.1f} s per trajectory "
              f"[{one['wall_s']['min']:.1f}, {one['wall_s']['max']:.1f}] ({one['cpu_s']['median']:.1f} CPU-s); "
              f"batched by {g}: {group['wall_s']['median'] / g:.1f} s per trajectory; "
              f"peak memory {out['robometer']['peak_mb']:.0f} MB")
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
