"""What the verl adapter adds per rollout, against verl's plain reward path, measured side by side.

Runs in .venv-verl (``scripts/setup.sh`` builds it)::

    .venv-verl/bin/python benchmarks/verl_reward_overhead.py [--groups 8 --n 8 --repeats 5]

Each repeat scores the same ``groups x n`` rollouts three ways, interleaved, with one cheap
scorer (a one-step text env and a length world model: their work is microseconds, so what is
measured is the machinery):

* ``verl plain``: verl's ``RateLimitedRewardManager`` with a plain ``compute_score`` that
  executes every rollout (what a verl user writes without wmrl);
* ``wmrl, local hub``: :class:`~agents.adapters.verl.WMRLRewardManager` + ``compute_score`` with
  the hub in the process (the routing, scoring and bookkeeping code alone);
* ``wmrl, Ray hub``: the same with the hub as the named Ray actor, as in a verl run (two actor
  calls per rollout).

It prints wall-clock and CPU-seconds per rollout (median and range over repeats; CPU is this
process's plus, for the Ray hub, the hub actor's), the overhead over the plain path, and the
estimator's time per training batch (``wmrl_grpo`` against verl's ``grpo`` through
``compute_advantage``). Results go to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "verl_adapter"))  # the test scorer


def plain_compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):
    """What a verl user writes without wmrl: execute the rollout, return its real score."""
    from wmrl_test_scorers import TextEnv

    env = _ENV.setdefault("env", TextEnv())
    env.reset()
    return float(env.step(solution_str)[1])


_ENV: dict = {}


def make_rollout(tok, text, uid, session):
    from verl import DataProto

    prompt = torch.tensor(tok("Write something.")["input_ids"])
    resp = torch.tensor(tok(text)["input_ids"])
    ids = torch.cat([prompt, resp]).unsqueeze(0)
    return DataProto.from_dict(
        tensors={"prompts": prompt.unsqueeze(0), "responses": resp.unsqueeze(0), "input_ids": ids,
                 "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(ids.shape[1]).unsqueeze(0)},
        non_tensors={"uid": np.array([uid], dtype=object), "session_id": np.array([session], dtype=object),
                     "global_steps": np.array([1], dtype=object), "data_source": np.array(["text"], dtype=object),
                     "reward_model": np.array([{"ground_truth": "t"}], dtype=object),
                     "extra_info": np.array([{"split": "train"}], dtype=object)})


def main() -> None:
    p = argparse.ArgumentParser(description="verl adapter overhead per rollout")
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--n", type=int, default=8, help="rollouts per group")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default="runs/verl_reward_overhead.json")
    a = p.parse_args()
    torch.set_num_threads(1)

    import ray
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_manager.limited import RateLimitedRewardManager
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.ray_trainer import compute_advantage
    from verl.trainer.ppo.reward import get_custom_reward_fn

    import agents.adapters.verl as wv
    from agents.adapters.verl_core import call_hub, connect_hub
    from wmrl_envs.world_models.smollm2 import load_smollm2_tokenizer

    tok = load_smollm2_tokenizer()
    base = {"reward": {"timeout": 60, "max_concurrent": 1,
                       "custom_reward_function": {"path": "pkg://agents.adapters.verl", "name": "compute_score",
                                                  "reward_kwargs": {"scorer": "wmrl_test_scorers:text_scorer"}}},
            "actor_rollout_ref": {"rollout": {"n": a.n}}, "data": {"train_batch_size": a.groups},
            "trainer": {"default_local_dir": "/tmp/wmrl-verl-bench", "resume_mode": "disable"}}
    texts = [("a" * (1 + (i % 7))) + "b" * (i % 3) for i in range(a.groups * a.n)]
    os.environ["WMRL_HUB_NAME"] = "bench_hub"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    hub_actor = connect_hub("bench_hub", group_size=a.n, groups_per_step=a.groups, correction={"anchor_fraction": 0.1})
    rows: dict[str, list[tuple[float, float]]] = {"verl plain": [], "wmrl, local hub": [], "wmrl, Ray hub": []}
    adv: dict[str, list[float]] = {"grpo": [], "wmrl_grpo": []}
    t_start = time.perf_counter()
    for rep in range(a.repeats):
        for name in rows:
            if name == "verl plain":
                cfg = OmegaConf.create(base)
                mgr = RateLimitedRewardManager(cfg, tok, plain_compute_score)
                actor_cpu = lambda: 0.0  # noqa: E731
            else:
                wv.use_local_hub(None)
                cfg = OmegaConf.create({**base, "reward": {**base["reward"], "custom_reward_function": {
                    **base["reward"]["custom_reward_function"],
                    "reward_kwargs": {"scorer": "wmrl_test_scorers:text_scorer"}}}})
                if name == "wmrl, local hub":
                    wv.use_local_hub(wv.WMRLHub(a.n, a.groups, {"anchor_fraction": 0.1}), "bench_hub")
                    actor_cpu = lambda: 0.0  # noqa: E731
                else:
                    actor_cpu = lambda: call_hub(hub_actor, "process_cpu_seconds")  # noqa: E731
                mgr = wv.WMRLRewardManager(cfg, tok, get_custom_reward_fn(cfg))
            data = [make_rollout(tok, t, f"r{rep}-{i // a.n}", i % a.n) for i, t in enumerate(texts)]
            c0, a0, t0 = time.process_time(), actor_cpu(), time.perf_counter()
            outs = [mgr.loop.run_until_complete(mgr.run_single(d)) for d in data]
            wall = time.perf_counter() - t0
            cpu = time.process_time() - c0 + (actor_cpu() - a0)
            assert len(outs) == len(texts)
            rows[name].append((wall / len(texts), cpu / len(texts)))
            if name == "wmrl, Ray hub":  # the trainer's side: advantages of the same batch
                b, t_len = len(texts), 8
                tlr = torch.zeros(b, t_len)
                tlr[:, -1] = torch.tensor([o["reward_score"] for o in outs])
                uids = np.array([f"r{rep}-{i // a.n}" for i in range(b)], dtype=object)
                for est in ("grpo", "wmrl_grpo"):
                    from verl import DataProto

                    d = DataProto.from_dict(tensors={"token_level_rewards": tlr.clone(), "response_mask": torch.ones(b, t_len)},
                                            non_tensors={"uid": uids})
                    t0 = time.perf_counter()
                    compute_advantage(d, adv_estimator=est, config=AlgoConfig(adv_estimator=est))
                    adv[est].append(time.perf_counter() - t0)
        print(f"repeat {rep + 1}/{a.repeats} done ({time.perf_counter() - t_start:.0f} s)", flush=True)
    ray.shutdown()

    def summary(v: list[float]) -> dict[str, float]:
        return {"median": statistics.median(v), "min": min(v), "max": max(v)}

    res = {"rollouts_per_repeat": len(texts), "repeats": a.repeats,
           "per_rollout_ms": {k: {"wall": summary([w * 1e3 for w, _ in v]), "cpu": summary([c * 1e3 for _, c in v])}
                              for k, v in rows.items()},
           "estimator_ms_per_batch": {k: summary([x * 1e3 for x in v]) for k, v in adv.items()}}
    base_w = res["per_rollout_ms"]["verl plain"]["wall"]["median"]
    base_c = res["per_rollout_ms"]["verl plain"]["cpu"]["median"]
    print(f"\nper rollout ({len(texts)} rollouts x {a.repeats} repeats; median [min, max]):")
    for k, v in res["per_rollout_ms"].items():
        w, c = v["wall"], v["cpu"]
        print(f"  {k:16s} wall {w['median']:7.2f} ms [{w['min']:.2f}, {w['max']:.2f}]   CPU {c['median']:7.2f} ms "
              f"[{c['min']:.2f}, {c['max']:.2f}]   overhead: +{w['median'] - base_w:.2f} ms wall, "
              f"+{c['median'] - base_c:.2f} CPU-ms")
    for k, v in res["estimator_ms_per_batch"].items():
        print(f"  estimator {k:10s} {v['median']:7.2f} ms per batch of {len(texts)} rows [{v['min']:.2f}, {v['max']:.2f}]")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
