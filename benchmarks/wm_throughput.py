"""World-model throughput: batched against unbatched inference, side by side in one run.

World-model inference is what WMRL pays instead of execution on most groups, and the wrapper
scores a whole group with ONE ``predict`` call (``score_group``), so batching is where its
cost is decided. This script scores the same distinct AutoResearch programs (from the shipped
execution log) with each world model twice — one action per ``predict``/forward call, then
batched — and prints seconds per prediction and the speed-up:

* the MiniLM sentence encoder of :class:`~wmrl_envs.envs.autoresearch.EmbeddingWorldModel`
  (fresh encoders, so its text cache never answers);
* the SmolLM2-135M LLM judge (:class:`~wmrl_envs.envs.autoresearch.LLMJudgeWorldModel`, greedy, same
  ``max_new_tokens``), ``batch_size=1`` against ``batch_size=B``.

    .venv/bin/python benchmarks/wm_throughput.py                 # ~2-3 minutes on 2 cores
    .venv/bin/python benchmarks/wm_throughput.py --judge-n 16 --judge-batch 16

``--constraint`` measures instead what the judge's JSON-constrained decoding costs: the same
programs, the judge as it is used (its default sampling, ``batch_size``, ``max_new_tokens``),
once unconstrained (``constrained=False``: stop at the first ``}``, strict parser) and once
under the JSON constraint (llguidance), alternating for ``--repeats`` rounds; it prints
wall-clock and CPU seconds (``time.process_time``, this process) per prediction side by side,
with the generated tokens per prediction and the answers that were no prediction::

    .venv/bin/python benchmarks/wm_throughput.py --constraint --judge-n 8 --judge-batch 8 --repeats 3
"""

from __future__ import annotations

import argparse
import time


def _programs(n: int) -> list[tuple[str, str]]:
    from wmrl_envs.envs.autoresearch.embedding_world_model import load_execution_log

    seen, out = set(), []
    for rec in load_execution_log(split="train"):
        code = rec["code"]
        if code in seen:
            continue
        try:
            compile(code, "solution.py", "exec")
        except SyntaxError:  # pre-checked programs never reach the model: skip them
            continue
        seen.add(code)
        out.append((rec["task_id"], code))
        if len(out) == n:
            break
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--encoder-n", type=int, default=128, help="programs for the sentence encoder")
    p.add_argument("--encoder-batch", type=int, default=64)
    p.add_argument("--judge-n", type=int, default=8, help="programs for the LLM judge")
    p.add_argument("--judge-batch", type=int, default=8)
    p.add_argument("--judge-tokens", type=int, default=48, help="max_new_tokens of the judge")
    p.add_argument("--constraint", action="store_true",
                   help="measure the JSON constraint's cost instead (see the module docstring)")
    p.add_argument("--repeats", type=int, default=3, help="rounds of the --constraint comparison")
    args = p.parse_args(argv)
    if args.constraint:
        _constraint_cost(args.judge_n, args.judge_batch, args.repeats)
        return

    import torch

    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.embedding_world_model import action_text
    from wmrl_envs.envs.autoresearch.sentence_encoder import SentenceEncoder
    from wmrl_envs.envs.autoresearch.llm_judge import LLMJudgeWorldModel
    from wmrl_envs.world_models.smollm2 import load_smollm2

    torch.set_num_threads(1)
    rows = []

    progs = _programs(args.encoder_n)
    texts = [action_text(c) for _, c in progs]
    for label, bs in (("unbatched", 1), (f"batch {args.encoder_batch}", args.encoder_batch)):
        enc = SentenceEncoder(batch_size=bs)
        enc.encode(["warm-up"])
        t0 = time.perf_counter()
        enc.encode(texts)
        dt = time.perf_counter() - t0
        rows.append(("MiniLM encoder", label, len(texts), dt))

    progs = _programs(args.judge_n)
    model, tokenizer = load_smollm2()
    env = AutoResearchEnv(tasks="all")
    contexts = [env.reset(options={"task_id": t})[0] for t, _ in progs]
    env.close()
    actions = [c for _, c in progs]
    for label, bs in (("unbatched", 1), (f"batch {args.judge_batch}", args.judge_batch)):
        judge = LLMJudgeWorldModel(model, tokenizer, batch_size=bs, temperature=0.0, max_new_tokens=args.judge_tokens,
                                   max_prompt_tokens=640)
        judge.predict(contexts[:1], actions[:1])  # warm-up
        t0 = time.perf_counter()
        if bs == 1:
            for c, a in zip(contexts, actions):
                judge.predict([c], [a])
        else:
            judge.predict(contexts, actions)
        dt = time.perf_counter() - t0
        rows.append(("SmolLM2 judge", label, len(actions), dt))

    print(f"{'world model':16s} {'mode':10s} {'n':>5s} {'s total':>9s} {'ms / prediction':>16s} {'speed-up':>9s}")
    for i, (wm, label, n, dt) in enumerate(rows):
        base = rows[i - 1][3] if i % 2 else dt
        print(f"{wm:16s} {label:10s} {n:5d} {dt:9.2f} {1000 * dt / n:16.1f} {base / dt:8.2f}x")


def _constraint_cost(n: int, batch: int, repeats: int) -> None:
    """Seconds per judge prediction without and with the JSON constraint (see the module docstring)."""
    import statistics

    import torch

    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.llm_judge import LLMJudgeWorldModel
    from wmrl_envs.world_models.smollm2 import load_smollm2

    torch.set_num_threads(1)
    progs = _programs(n)
    model, tokenizer = load_smollm2()
    env = AutoResearchEnv(tasks="all")
    contexts = [env.reset(options={"task_id": t})[0] for t, _ in progs]
    env.close()
    actions = [c for _, c in progs]
    judges = {label: LLMJudgeWorldModel(model, tokenizer, batch_size=batch, seed=0, constrained=flag)
              for label, flag in (("unconstrained", False), ("constrained", True))}
    for judge in judges.values():
        judge.predict(contexts[:1], actions[:1])  # warm-up (and the llguidance tokenizer, built once)
    runs: dict[str, list[tuple[float, float, int, int]]] = {label: [] for label in judges}
    for _ in range(repeats):
        for label, judge in judges.items():
            tokens, errors = judge.tokens_generated, judge.n_parse_errors
            w0, c0 = time.perf_counter(), time.process_time()
            judge.predict(contexts, actions)
            runs[label].append((time.perf_counter() - w0, time.process_time() - c0,
                                judge.tokens_generated - tokens, judge.n_parse_errors - errors))
    print(f"SmolLM2-135M judge, {len(actions)} programs, batch_size={batch}, max_new_tokens="
          f"{judges['constrained'].max_new_tokens}, {repeats} rounds (mean, min-max over rounds)")
    print(f"{'decoding':14s} {'wall s / pred':>20s} {'CPU s / pred':>20s} {'tokens / pred':>14s} {'no prediction':>14s}")
    for label, rows in runs.items():
        wall = [r[0] / len(actions) for r in rows]
        cpu = [r[1] / len(actions) for r in rows]
        tok = sum(r[2] for r in rows) / (len(rows) * len(actions))
        err = sum(r[3] for r in rows)
        print(f"{label:14s} {statistics.mean(wall):7.3f} ({min(wall):.3f}-{max(wall):.3f}) "
              f"{statistics.mean(cpu):7.3f} ({min(cpu):.3f}-{max(cpu):.3f}) {tok:14.1f} "
              f"{err:6d} / {len(rows) * len(actions)}")
    per_tok = {label: sum(r[1] for r in rows) / max(sum(r[2] for r in rows), 1) for label, rows in runs.items()}
    print(f"CPU s per generated token: unconstrained {per_tok['unconstrained']:.4f}, "
          f"constrained {per_tok['constrained']:.4f}")


if __name__ == "__main__":
    main()
