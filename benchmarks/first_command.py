"""What the README's first command (``wmrl train``, default preset) costs before and beside its
GRPO steps: the first run's leaderboard build, and real executions (issue 28).

Two parts, each printed as JSON and merged into ``--out`` (default ``results/first_command.json``,
strict JSON) under its own key:

``leaderboards``
    A fresh build of this installation's boards for the tasks the default run uses (its 7
    training and 8 held-out tasks: all 15), exactly as ``wmrl train`` pays it
    (``python -m wmrl_envs.envs.autoresearch.leaderboards --jobs N``: task after task, each
    through :func:`~wmrl_envs.envs.autoresearch.leaderboards.ensure_leaderboard`), in a
    temporary ``WMRL_HOME`` under the secret ``--secret`` (not the reference one, whose boards
    are shipped). Records wall-clock seconds, CPU-seconds (user + system of the build's
    processes, ``resource.RUSAGE_CHILDREN``) and the built values (``values``, to compare
    two builds of the same secret).

``executions``
    The untrained policy of the default configuration (SmolLM2-135M + fresh LoRA, seed 0)
    samples G = ``--group-size`` completions for each training task and every one is executed
    for real (``evaluation_wrapper``: no world model); then the held-out evaluation of
    ``wmrl train`` (:func:`agents.train.evaluation.evaluate`) runs once. Records the CPU-seconds
    of sampling and of every execution (the sandbox's ``execution_cpu_s``), by status, and the
    evaluation's executions and CPU-seconds (its own ledger; ``host_cpu_s``: this process's CPU
    during the evaluation, i.e. sampling and grading; the sandboxed executions are not in it).
    Run it under the reference secret (``WMRL_TASK_SECRET=wmrl-reference``): its boards are
    shipped, and an execution's cost does not depend on the secret.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/first_command.py leaderboards --jobs 2
    WMRL_TASK_SECRET=wmrl-reference OMP_NUM_THREADS=1 .venv/bin/python benchmarks/first_command.py executions
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "results" / "first_command.json"


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def leaderboards(jobs: int, secret: str) -> dict:
    """A fresh build of all 15 boards as ``wmrl train`` pays it (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="wmrl-first-command-") as home:
        env = {**os.environ, "WMRL_HOME": home, "WMRL_TASK_SECRET": secret, "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "wmrl_envs.envs.autoresearch.leaderboards", "--jobs", str(jobs)]
        load0, cpu0, t0 = _load_avg(), _children_cpu(), time.perf_counter()
        p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
        if p.returncode != 0:
            raise RuntimeError(f"the leaderboard build failed:\n{p.stderr[-3000:]}")
        values = {}
        for f in sorted(Path(home).glob("leaderboards/*/*.json")):
            board = json.loads(f.read_text())
            for tid, e in board["tasks"].items():
                values[tid] = [x["metric_value"] for x in e["entries"]]
    return {"command": " ".join(["python"] + cmd[1:]), "jobs": jobs, "tasks": len(values), "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1), "load_avg_before": load0, "load_avg_after": _load_avg(), "values": values}


def executions(group_size: int, seed: int) -> dict:
    """The untrained policy's executions on the training tasks, and one held-out evaluation."""
    import dataclasses
    import statistics
    from types import SimpleNamespace

    import torch

    from agents.llm.backbone import load_backbone
    from agents.llm.policy import LLMPolicy
    from agents.train.config import TrainConfig
    from agents.train.evaluation import evaluate, evaluation_wrapper
    from wmrl_envs.core import EXECUTION
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.secret import sandbox_hidden_paths
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks
    from wmrl_envs.sandbox import SandboxLimits, make_sandbox

    cfg = dataclasses.replace(TrainConfig(), seed=seed)
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    model, tok = load_backbone(cfg.model, device=cfg.device, dtype=cfg.dtype)
    policy = LLMPolicy(model, tok, mode=cfg.solution_mode, lora_r=cfg.lora_r, lora_alpha=2 * cfg.lora_r,
                       max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=cfg.seed)
    limits = SandboxLimits(wall_time_s=cfg.exec_wall_time_s, cpu_time_s=cfg.exec_wall_time_s, memory_mb=cfg.exec_memory_mb)
    sandbox = make_sandbox(cfg.sandbox, limits, hidden_paths=sandbox_hidden_paths())
    env = AutoResearchEnv(tasks="all", sandbox=sandbox, limits=limits, max_turns=1)
    env.prepare_leaderboards()
    train_tasks, heldout = list_tasks("train"), list_tasks("heldout")

    # the training tasks: G completions each, all executed
    wrapper = evaluation_wrapper(env, dataclasses.replace(cfg, eval_k=group_size))
    contexts = [wrapper.begin_group(options={"task_id": t})[0] for t in train_tasks]
    prompts = [policy.build_prompt(ctx, get_task(t)) for ctx, t in zip(contexts, train_tasks)]
    c0, t0 = time.process_time(), time.perf_counter()
    samples = policy.sample(prompts, group_size)
    gen_cpu, gen_wall = time.process_time() - c0, time.perf_counter() - t0
    rows = []
    for t, ctx, texts in zip(train_tasks, contexts, samples.texts):
        g = wrapper.score_group([policy.completion_to_action(x, get_task(t)) for x in texts], options={"task_id": t},
                                context=ctx)
        for text, info in zip(texts, g.infos):
            rows.append({"task": t, "status": info.get("status"), "executed": bool(info.get("executed")),
                         "cpu_s": info.get("execution_cpu_s"), "runtime_s": info.get("runtime_s"),
                         "completion": text[:120]})
    led = wrapper.loop.ledger

    def stats(xs: list[float]) -> dict:
        return ({"n": len(xs), "mean": round(statistics.fmean(xs), 2), "median": round(statistics.median(xs), 2),
                 "max": round(max(xs), 2), "sum": round(sum(xs), 1)} if xs else {"n": 0})

    by_status: dict[str, list[float]] = {}
    for r in rows:
        if r["executed"] and r["cpu_s"] is not None:
            by_status.setdefault(r["status"], []).append(float(r["cpu_s"]))
    train = {
        "tasks": train_tasks, "group_size": group_size, "rollouts": len(rows),
        "sampling_cpu_s": round(gen_cpu, 1), "sampling_wall_s": round(gen_wall, 1), "new_tokens": samples.new_tokens,
        "sampling_cpu_s_per_rollout": round(gen_cpu / max(1, len(rows)), 2),
        "execution_cpu_s_ledger": round(led.cpu_seconds(EXECUTION), 1), "executions_ledger": led.count(EXECUTION),
        "execution_wall_s_ledger": round(led.seconds(EXECUTION), 1),
        "execution_cpu_s_by_status": {s: stats(v) for s, v in sorted(by_status.items())},
        "execution_cpu_s_all_executed": stats([x for v in by_status.values() for x in v]),
        "rows": rows,
    }

    # one held-out evaluation, as wmrl train runs it before and after training
    c = SimpleNamespace(eval_wrapper=None, env=env, policy=policy, heldout_tasks=heldout, get_task=get_task)
    c0, t0 = time.process_time(), time.perf_counter()
    res = evaluate(c, cfg)
    host_cpu, ev_wall = time.process_time() - c0, time.perf_counter() - t0
    eled = c.eval_wrapper.loop.ledger
    evaluation = {
        "tasks": len(heldout), "k": cfg.eval_k, "trajectories": len(heldout) * cfg.eval_k,
        "executions": eled.count(EXECUTION), "execution_cpu_s": round(eled.cpu_seconds(EXECUTION), 1),
        "execution_wall_s": round(res["execution_s"], 1), "generation_wall_s": round(res["generation_s"], 1),
        "host_cpu_s": round(host_cpu, 1), "total_wall_s": round(ev_wall, 1), "statuses": res["statuses"],
        "avg_at_k": res["overall"], "mean_score": res["mean_score"],
    }
    env.close()
    sandbox.close()
    return {"command": "WMRL_TASK_SECRET=wmrl-reference OMP_NUM_THREADS=1 .venv/bin/python benchmarks/first_command.py "
                       f"executions --group-size {group_size} --seed {seed}",
            "sandbox": sandbox.name, "load_avg_after": _load_avg(), "train_tasks": train, "evaluation_once": evaluation}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=["leaderboards", "executions"])
    ap.add_argument("--jobs", type=int, default=2, help="leaderboards: parallel processes")
    ap.add_argument("--secret", default="first-command-bench", help="leaderboards: the (non-reference) task secret")
    ap.add_argument("--group-size", type=int, default=4, help="executions: completions per training task")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--key", default=None, help="key in --out (default: the part's name)")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    res = leaderboards(args.jobs, args.secret) if args.part == "leaderboards" else executions(args.group_size, args.seed)
    res["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    res["measured_at"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    out = Path(args.out)
    data = json.loads(out.read_text()) if out.is_file() else {}
    data[args.key or args.part] = res
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k not in ("values", "train_tasks")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
