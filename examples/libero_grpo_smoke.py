"""A few GRPO groups of a VLA policy on a real LIBERO-Long task, with the wrapper in reward mode.

End to end on CPU: the real ``libero_10`` simulator (``wmrl/LIBERO-Long-v0``) steps in every
episode; :class:`wmrl_envs.AnchoredWorldModelWrapper` (``mode="reward"``) routes each group of
G episodes — which share one initial state from the training split (states 0-15) — either to
the simulator's sparse success (anchor groups) or to a Robometer reward (world-model groups,
where the real success is withheld); the anchor pairs feed the isotonic debiaser and ρ; the
policy (:class:`agents.vla.policy.VLAPolicy`, OpenVLA-style binned action tokens + LoRA) takes
one GRPO step per group, every step of an episode carrying its episode's advantage.

Neither MiniVLA nor Robometer weights can be downloaded here, so by default both are tiny
randomly initialised models of the same architectures (the numbers then measure the machinery
and its cost, not learning). Pass ``--vla PATH`` / ``--robometer PATH`` with local checkpoints
to run the real models (a GPU is advisable).

Usage::

    .venv/bin/python examples/libero_grpo_smoke.py --groups 4 --group-size 2 --max-steps 40

Prints one line per group and a JSON summary (also written to ``--out`` when given).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from wmrl_envs.core import CorrectionConfig


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task-id", type=int, default=0, help="libero_10 task (0-9)")
    p.add_argument("--groups", type=int, default=4, help="GRPO groups (one update each)")
    p.add_argument("--group-size", type=int, default=2, help="G episodes per group (one initial state)")
    p.add_argument("--max-steps", type=int, default=40, help="policy steps per episode (LIBERO-Long: 520)")
    p.add_argument("--image-size", type=int, default=64, help="camera resolution (pixels)")
    p.add_argument("--anchor-fraction", type=float, default=0.5, help="share of groups scored by real success")
    p.add_argument("--vla", default=None, help="local MiniVLA/OpenVLA checkpoint (default: tiny random VLA)")
    p.add_argument("--robometer", default=None, help="local Robometer checkpoint (default: tiny random Robometer)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the JSON summary here")
    args = p.parse_args(argv)

    import numpy as np
    import torch

    from agents.grpo import GRPOUpdateConfig, build_advantages, grpo_step
    from agents.vla.load import build_tiny_vla, load_vla
    from agents.vla.policy import VLAPolicy, VLASamples
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.envs.libero import LiberoEnv
    from wmrl_envs.envs.libero.robometer import RobometerWorldModel, build_tiny_robometer

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    t_build = time.perf_counter()
    model, processor = load_vla(args.vla) if args.vla else build_tiny_vla(seed=args.seed)
    policy = VLAPolicy(model, processor, image_keys=("agentview_image",), seed=args.seed)
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=args.lr, weight_decay=0.0)
    update_config = GRPOUpdateConfig(kl_coef=0.0, micro_batch_size=32)
    if args.robometer:
        world_model = RobometerWorldModel.from_pretrained(args.robometer)
    else:
        world_model = RobometerWorldModel(*build_tiny_robometer(seed=args.seed))
    env = AnchoredWorldModelWrapper(
        LiberoEnv(args.task_id, image_size=args.image_size, multisample=False, max_steps=args.max_steps),
        world_model,
        correction=CorrectionConfig(anchor_fraction=args.anchor_fraction, min_pairs=2, refit_every=2, warmup_groups=1),
        group_size=args.group_size,
        mode="reward",
        groups_per_step=max(1, round(1 / max(args.anchor_fraction, 1e-9))),
        seed=args.seed,
    )
    build_s = time.perf_counter() - t_build
    rng = np.random.default_rng(args.seed)
    records = []
    t_all = time.perf_counter()
    for gi in range(args.groups):
        t0 = time.perf_counter()
        state = int(rng.choice(LiberoEnv.TRAIN_STATES))
        returns, parts, episode_of_row, successes_seen = [], [], [], []
        info: dict = {}
        for ep in range(args.group_size):
            obs, info = env.reset(options={"init_state_id": state})
            ret, done = 0.0, False
            while not done:
                smp = policy.sample([obs], group_size=1)
                obs, r, term, trunc, info = env.step(smp.actions[0])
                parts.append(smp)
                episode_of_row.append(ep)
                ret += float(r)
                done = term or trunc
            returns.append(ret if info["wmrl"]["graded"] else None)
            successes_seen.append(info.get("success"))  # None on world-model episodes (withheld)
        route, rho = info["wmrl"]["route"], info["wmrl"]["advantage_weight"]
        batch = build_advantages([returns], [rho])
        adv_of_episode = dict(zip(batch.row_index.tolist(), batch.advantages.tolist()))
        rows = [i for i, e in enumerate(episode_of_row) if e in adv_of_episode]
        stats = {}
        if rows:
            stats = grpo_step(policy, optimizer, VLASamples.concat(parts), rows,
                              [adv_of_episode[episode_of_row[i]] for i in rows], config=update_config)
        rec = {
            "group": gi, "init_state_id": state, "route": route, "rho": rho, "returns": returns,
            "success_seen_by_agent": successes_seen, "policy_steps": len(parts), "rows_trained": len(rows),
            "loss": stats.get("loss"), "anchor_pairs": env.loop.corrector.debiaser.n_pairs,
            "seconds": round(time.perf_counter() - t0, 2),
        }
        records.append(rec)
        print(json.dumps(rec))
    ledger = env.loop.ledger
    summary = {
        "task_id": args.task_id, "groups": args.groups, "group_size": args.group_size, "max_steps": args.max_steps,
        "image_size": args.image_size, "models": {"vla": args.vla or "tiny-random", "robometer": args.robometer or "tiny-random"},
        "build_seconds": round(build_s, 1), "wall_seconds": round(time.perf_counter() - t_all, 1),
        "simulator_steps": ledger.count("execution"), "simulator_seconds": round(ledger.seconds("execution"), 1),
        "world_model_calls": ledger.count("world_model"), "world_model_seconds": round(ledger.seconds("world_model"), 2),
        "anchor_groups": env.loop.router.n_anchor_groups, "realised_anchor_fraction": env.loop.router.realised_fraction,
        "anchor_pairs": env.loop.corrector.debiaser.n_pairs, "rho": env.loop.rho, "records": records,
    }
    env.close()
    print(json.dumps({k: v for k, v in summary.items() if k != "records"}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))
    return summary


if __name__ == "__main__":
    main()
