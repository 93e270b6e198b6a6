"""GrammarPolicy speed: sampling and log-probs of a GRPO step's programs, against one real execution.

The benchmark agent (:class:`agents.grammar.policy.GrammarPolicy`) must cost next to nothing
beside the programs it writes, so that execution dominates the cost of real-execution GRPO as
in the paper. This script times ``sample`` and ``log_probs`` + ``backward`` on 4 tasks x G
programs (one thread) and prints each in milliseconds and as a ratio to the median seconds of
one real execution in the shipped execution log (``runtime_s`` of
``wmrl_envs/envs/autoresearch/data/autoresearch_executions.jsonl``). It replaces the wall-clock
threshold that used to sit in ``tests/agents/grammar/test_grammar_policy.py`` (the unit test now checks the
batching that makes these calls cheap).

    .venv/bin/python benchmarks/grammar_policy_speed.py            # a few seconds
    .venv/bin/python benchmarks/grammar_policy_speed.py --group-size 16 --repeats 50
"""

from __future__ import annotations

import argparse
import statistics
import time


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--group-size", type=int, default=8, help="programs per task (G)")
    ap.add_argument("--repeats", type=int, default=20, help="timed calls of each kind")
    args = ap.parse_args(argv)

    import torch

    from agents.grammar.policy import GrammarPolicy
    from wmrl_envs.envs.autoresearch.embedding_world_model import load_execution_log

    torch.set_num_threads(1)
    tasks = ["hastie-noisy", "house-prices", "land-cover", "credit-default"]
    pol = GrammarPolicy(seed=0)
    groups = pol.sample(tasks, args.group_size)  # warm-up: derives and caches the task contexts
    t0 = time.perf_counter()
    for _ in range(args.repeats):
        groups = pol.sample(tasks, args.group_size)
    t_sample = (time.perf_counter() - t0) / args.repeats
    flat = [p for g in groups for p in g]
    t0 = time.perf_counter()
    for _ in range(args.repeats):
        pol.zero_grad()
        pol.log_probs(flat).sum().backward()
    t_lp = (time.perf_counter() - t0) / args.repeats
    exec_s = statistics.median(r["runtime_s"] for r in load_execution_log())
    n = len(flat)
    print(f"GrammarPolicy, {n} programs ({len(tasks)} tasks x G={args.group_size}), 1 thread, {args.repeats} repeats")
    print(f"  sample:               {1e3 * t_sample:8.2f} ms   = {t_sample / exec_s:.5f} x one real execution")
    print(f"  log_probs + backward: {1e3 * t_lp:8.2f} ms   = {t_lp / exec_s:.5f} x one real execution")
    print(f"  one real execution (median of the shipped log): {exec_s:.2f} s; "
          f"{n} executions cost {n * exec_s / (t_sample + t_lp):.0f} x the policy's sampling + log-probs")


if __name__ == "__main__":
    main()
