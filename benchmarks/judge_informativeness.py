"""How much does the LLM judge know about execution outcomes? (and what does it cost?)

Samples solutions from the untrained SmolLM2 policy (line mode) on training tasks, executes
each for real in the sandbox, and grades each with the LLM judge in both decoding modes
("sample": the reference JSON answer; "expected": expected score from the status/bucket
probabilities). Prints the Spearman rank correlation and mean absolute error of each mode
against the real score, over all rollouts and over the rollouts that pass the deterministic
pre-check (where the model is actually consulted), and the seconds per real execution and per
judge prediction, side by side.

    .venv/bin/python benchmarks/judge_informativeness.py --tasks 4 --group-size 8
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=4, help="training tasks used")
    ap.add_argument("--group-size", type=int, default=8, help="solutions sampled per task")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the raw rows as JSON here")
    args = ap.parse_args()

    import torch
    from scipy.stats import spearmanr

    torch.set_num_threads(1)
    from agents.llm.policy import LLMPolicy
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks
    from wmrl_envs.envs.autoresearch.llm_judge import LLMJudgeWorldModel
    from wmrl_envs.world_models.smollm2 import load_smollm2

    model, tok = load_smollm2()
    policy = LLMPolicy(model, tok, temperature=0.8, max_new_tokens=32, seed=args.seed)
    env = AutoResearchEnv(tasks="train")
    tasks = list_tasks("train")[: args.tasks]
    rows = []
    obs_by_task = {}
    prompts = []
    for t in tasks:
        obs, _ = env.reset(options={"task_id": t})
        obs_by_task[t] = obs
        prompts.append(policy.build_prompt(obs, get_task(t)))
    samples = policy.sample(prompts, args.group_size)
    for t, texts in zip(tasks, samples.texts):
        for x in texts:
            code = policy.completion_to_action(x, get_task(t))
            env.reset(options={"task_id": t})
            t0 = time.perf_counter()
            _, r, _, _, info = env.step(code)
            rows.append({"task": t, "line": x.split("\n")[0], "code": code, "real": float(r), "status": info["status"],
                         "exec_s": time.perf_counter() - t0, "executed": bool(info.get("executed", True))})
    contexts = [obs_by_task[r["task"]] for r in rows]
    codes = [r["code"] for r in rows]
    for mode in ("sample", "expected"):
        judge = LLMJudgeWorldModel(policy.model, tok, decoding=mode, max_prompt_tokens=640, seed=args.seed)
        t0 = time.perf_counter()
        preds = judge.predict(contexts, codes)
        secs = time.perf_counter() - t0
        for r, p in zip(rows, preds):
            r[f"wm_{mode}"] = p.score
            r[f"wm_{mode}_status"] = p.status
            r[f"wm_{mode}_called"] = p.model_called
        rows[0][f"_{mode}_seconds"] = secs
        rows[0][f"_{mode}_model_calls"] = judge.n_model_calls
    real = np.array([r["real"] for r in rows])
    called = np.array([r["wm_sample_called"] for r in rows])
    executed = [r["exec_s"] for r in rows if r["executed"]]
    print(f"rollouts: {len(rows)}; real statuses: " + json.dumps({s: sum(r['status'] == s for r in rows) for s in sorted({r['status'] for r in rows})}))
    print(f"real execution: {np.mean(executed):.2f} s per executed rollout (n={len(executed)})")
    print(f"{'mode':10s} {'s/pred(model)':>14s} {'spearman all':>13s} {'spearman model':>15s} {'MAE all':>8s} {'MAE model':>10s}")
    for mode in ("sample", "expected"):
        wm = np.array([r[f"wm_{mode}"] for r in rows])
        rho_all = spearmanr(wm, real).statistic if np.std(wm) > 0 else float("nan")
        sub = called
        rho_m = spearmanr(wm[sub], real[sub]).statistic if sub.sum() > 2 and np.std(wm[sub]) > 0 and np.std(real[sub]) > 0 else float("nan")
        n_calls = max(1, rows[0][f"_{mode}_model_calls"])
        print(f"{mode:10s} {rows[0][f'_{mode}_seconds'] / n_calls:14.2f} {rho_all:13.3f} {rho_m:15.3f} "
              f"{np.mean(np.abs(wm - real)):8.3f} {np.mean(np.abs(wm[sub] - real[sub])) if sub.any() else float('nan'):10.3f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
