"""Worker of ``tests/agents/adapters/test_adapter_trl.py::test_two_processes_*``: two CPU processes (gloo), two
GRPO steps of ``WMRLGRPOTrainer`` with a tiny model; each process writes what it saw to
``<out>/rank<r>.json``.

Usage: ``torchrun --standalone --nproc_per_node 2 tests/agents/adapters/trl_two_process.py OUT_DIR``
(``accelerate launch --cpu --num_processes 2`` runs several CPU processes through mpirun
(``--mpirun_hostfile``), which is not installed here; torchrun starts the same processes and
TRL's ``Accelerator`` joins them with gloo.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_adapter_trl import RHO_25, dataset, grpo_config, make_wrapper, tiny_model  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from agents.adapters.trl import WMRLGRPOTrainer, WMRLRewardFunction, completion_text  # noqa: E402
from wmrl_envs.world_models.smollm2 import load_smollm2_tokenizer  # noqa: E402

torch.set_num_threads(1)
G = 4
PER_DEVICE = 6  # 2 processes x 6 rows = 3 groups of 4 per step: the middle group is split over both


class RecordingReward(WMRLRewardFunction):
    """Keeps every batch the function scored itself (process 0: the whole generation batch)."""

    scored: list[dict] = []

    def _score_local(self, prompts, completions, **kwargs):
        out = super()._score_local(prompts, completions, **kwargs)
        self.scored.append({"prompts": list(prompts), "completions": [completion_text(c) for c in completions],
                            "task_id": list(kwargs["task_id"]), "routes": self.last_batch.routes,
                            "rewards": self.last_batch.rewards})
        return out


class RecordingTrainer(WMRLGRPOTrainer):
    calls: list[dict] = []

    def _generate_and_score_completions(self, inputs):
        raw: dict = {}
        orig = GRPOTrainer._generate_and_score_completions

        def spy(trainer, batch):
            out = orig(trainer, batch)
            raw["adv"] = out["advantages"].detach().clone()
            return out

        GRPOTrainer._generate_and_score_completions = spy  # type: ignore[method-assign]
        try:
            out = super()._generate_and_score_completions(inputs)
        finally:
            GRPOTrainer._generate_and_score_completions = orig  # type: ignore[method-assign]
        b = self.wmrl_reward.last_batch
        self.calls.append({"routes": b.routes, "weights": b.advantage_weights, "rewards": b.rewards,
                           "group_ids": b.group_ids, "task_id": [x["task_id"] for x in inputs],
                           "raw_adv": raw["adv"].tolist(), "adv": out["advantages"].tolist()})
        return out


def main(out_dir: str) -> None:
    tok = load_smollm2_tokenizer()
    w = make_wrapper(anchor_fraction=0.5, group_size=G, rho_state=RHO_25, seed=7)
    fn = RecordingReward(w)
    cfg = grpo_config(Path(out_dir) / "run", per_device_train_batch_size=PER_DEVICE, num_generations=G,
                      max_steps=2, use_cpu=True)
    trainer = RecordingTrainer(model=tiny_model(tok), reward_funcs=fn, args=cfg, train_dataset=dataset(12),
                               processing_class=tok)
    trainer.train()
    rank = trainer.accelerator.process_index
    stats = w.loop.corrector.stats()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps({
        "rank": rank, "world_size": trainer.accelerator.num_processes, "calls": trainer.calls,
        "scored": fn.scored, "env_steps": w.env.unwrapped.steps, "anchor_pairs": stats["anchor_pairs"],
        "executions": w.loop.ledger.count("execution"), "groups_routed": w.loop.router.n_groups_routed,
        "anchor_groups": w.loop.router.n_anchor_groups,
    }))


if __name__ == "__main__":
    main(sys.argv[1])
