"""What sampling and the GRPO update cost in the main job, before and after issue 28's changes.

``wmrl train`` (default :class:`~agents.train.config.TrainConfig`: SmolLM2-135M + LoRA r=16,
float32, one CPU thread, 4 groups × G=4 per step, ``max_new_tokens`` 32, line mode) spends
most of its non-execution CPU-seconds sampling completions and updating the policy, and the
prompt is what costs. This script builds the policy as :func:`agents.train.build.build_components`
does (no sandbox, no judge), prompts it on the AutoResearch training tasks, and measures side by
side, per variant and repeat (seed):

* ``prompt_tokens``: mean tokens of the step's prompts;
* sampling: CPU-seconds per rollout and new tokens per CPU-second of ``policy.sample`` on the
  step's 4 prompts × G;
* update: CPU-seconds per rollout of :func:`agents.grpo.grpo_update` with the trainer's settings
  (:func:`agents.train.config.update_config`: KL to the reference, entropy bonus, one backward
  per group) on those samples with random rewards: ``update_cold`` the first update on a prompt,
  ``update_warm`` a second update on the same prompts (as every later step on a task: the
  reference's prompt encoding is kept between steps);
* ``valid_share``: per prompt (before / after), the share of completions of the untrained policy
  (sampled with the current sampler, whose draws follow the same distribution as the old one) whose action passes the
  judge's host pre-check (:func:`~wmrl_envs.envs.autoresearch.grading.check_source`: the code
  compiles) and whose ``model = ...`` line builds an object with a ``fit`` method (evaluated with
  the script's sklearn imports and no builtins), over ``--valid-samples`` completions.

Variants: ``before`` = the code before issue 28 (``generate`` on every row, the prompt with the
imports twice and the overview's evaluation/submission clauses, the prompt's logits computed
and the reference's prompt encoded at every update: copied here from that commit);
``shared_prefix`` = the old prompt with the new sampler and update; ``after`` = the current
code (both). CPU-seconds: ``time.process_time`` of this process (torch runs on one thread here;
no children); wall-clock beside it (noisier on a shared machine).

Run::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sampling_cost.py            # 3 repeats, 64 valid samples
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sampling_cost.py --quick    # smoke run (1 repeat, tiny)

Writes ``--out`` (default ``results/sampling_cost.json``; with ``--quick``
``runs/sampling_cost_quick.json``, so a smoke run never overwrites the committed figures; strict JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.llm.policy import LLMPolicy, PolicySamples  # noqa: E402

__all__ = ["main"]


# ----------------------------------------------------------------------------- the code before issue 28
def build_prompt_before(policy: LLMPolicy, task: Any) -> str:
    """The line-mode prompt before issue 28 (imports in the user turn and the pre-fill)."""
    imports = "\n".join(ln for ln in task.starter_code.splitlines() if ln.startswith(("from sklearn", "import sklearn")))
    direction = "higher" if task.higher_is_better else "lower"
    overview = " ".join(str(task.overview).split())[:400]
    current = next(ln for ln in task.starter_code.splitlines() if ln.startswith("model ="))
    user = (f"Task: {overview}\nMetric: {task.metric} ({direction} is better).\n"
            f"Here is the current model of the script:\n```python\n{imports}\n{current}\n```\n"
            "Write one better line that creates `model`.")
    msgs = [{"role": "system", "content": "You are an expert machine-learning engineer who writes scikit-learn code."},
            {"role": "user", "content": user}]
    text = policy.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return text + f"```python\n{imports}\nmodel ="


def build_prompt_mid(policy: LLMPolicy, task: Any) -> str:
    """The prompt before issue 28 with the overview cut before its evaluation/submission clauses
    (the imports still in the user turn and the pre-fill): a middle variant for the valid share."""
    text = build_prompt_before(policy, task)
    overview = " ".join(str(task.overview).split())[:400]
    return text.replace(overview, overview.split(" Evaluation:")[0], 1)


class BeforePolicy(LLMPolicy):
    """:class:`LLMPolicy` with the sampler and the log-probabilities of the commit before issue 28."""

    def sample(self, prompts, group_size):  # noqa: D102 - generate on every row, one global stream
        from transformers import LogitsProcessor, LogitsProcessorList

        tok, temperature = self.tokenizer, self.temperature
        generator = torch.Generator(device=self.device).manual_seed(self.seed * 1_000_003 + self.n_sample_calls)
        self.n_sample_calls += 1

        class _Sampler(LogitsProcessor):
            def __call__(self, input_ids, scores):
                probs = torch.softmax(scores.float() / temperature, dim=-1)
                drawn = torch.multinomial(probs, 1, generator=generator)
                return torch.full_like(scores, float("-inf")).scatter_(1, drawn, 0.0)

        was = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                enc = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
                flat = [ids for ids in enc for _ in range(group_size)]
                width = max(len(x) for x in flat)
                pad = tok.pad_token_id
                input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in flat])
                attn = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in flat])
                out = self.model.generate(input_ids=input_ids, attention_mask=attn, do_sample=False, temperature=None,
                                          top_k=None, top_p=None, logits_processor=LogitsProcessorList([_Sampler()]),
                                          max_new_tokens=self.max_new_tokens, pad_token_id=pad, stop_strings=["\n"],
                                          tokenizer=tok)
                gen = out[:, width:].tolist()
        finally:
            self.model.train(was)
        return self._samples(enc, gen, group_size)

    def _group_logprobs(self, prompt_ids, completion_ids, with_entropy, model=None, reuse_prompt=False):
        model = self.model if model is None else model
        g = len(completion_ids)
        c = max(len(x) for x in completion_ids)
        pad = self.tokenizer.pad_token_id
        comp = torch.tensor([list(x) + [pad] * (c - len(x)) for x in completion_ids])
        mask = torch.tensor([[1.0] * len(x) + [0.0] * (c - len(x)) for x in completion_ids])
        p = torch.tensor([list(prompt_ids)])
        out_p = model(input_ids=p, use_cache=True)
        cache = out_p.past_key_values
        cache.batch_repeat_interleave(g)
        attn = torch.ones(g, p.shape[1] + c, dtype=torch.long)
        out_c = model(input_ids=comp, cache=cache, attention_mask=attn, use_cache=False)
        first = out_p.logits[:, -1:, :].expand(g, 1, -1)
        logits = torch.cat([first, out_c.logits[:, :-1, :]], dim=1).float() / self.temperature
        logp_all = torch.log_softmax(logits, dim=-1)
        lp = logp_all.gather(-1, comp.unsqueeze(-1)).squeeze(-1) * mask
        ent = -(logp_all.exp() * logp_all).sum(-1) * mask if with_entropy else None
        return lp, mask, ent


# ----------------------------------------------------------------------------- measurement
def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + r.ru_utime + r.ru_stime


def _timed(fn):
    c0, w0 = _cpu(), time.perf_counter()
    out = fn()
    return out, _cpu() - c0, time.perf_counter() - w0


def valid_action(policy: LLMPolicy, completion: str, task: Any) -> bool:
    """The action compiles (the judge's host pre-check) and its model line builds an estimator."""
    from wmrl_envs.envs.autoresearch.grading import check_source

    action = policy.completion_to_action(completion, task)
    if check_source(action) is not None:
        return False
    lines = action.splitlines()
    imports = [ln for ln in lines if ln.startswith(("from sklearn", "import sklearn"))]
    model_line = next((ln for ln in lines if ln.startswith("model =")), None)
    if model_line is None:
        return False
    ns: dict[str, Any] = {}
    try:
        exec("\n".join(imports), ns)  # noqa: S102 - the script's own sklearn imports
        exec(model_line, {"__builtins__": {}, **{k: v for k, v in ns.items() if k != "__builtins__"}}, ns)  # noqa: S102
    except Exception:  # noqa: BLE001 - any failure is an invalid line
        return False
    return hasattr(ns.get("model"), "fit")


def summarise(xs: list[float]) -> dict[str, Any]:
    a = np.asarray(xs, dtype=float)
    return {"mean": float(a.mean()), "sd": float(a.std(ddof=1)) if a.size > 1 else 0.0,
            "min": float(a.min()), "max": float(a.max()), "n": int(a.size), "values": [float(x) for x in a]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rep-start", type=int, default=0, help="first repeat (seed); runs of other repeats merge with --merge")
    ap.add_argument("--valid-samples", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 repeat, 2 groups x G=2, 8 valid samples")
    ap.add_argument("--variants", default="before,shared_prefix,after")
    ap.add_argument("--valid-seed", type=int, default=1234, help="policy seed of the valid-share samples")
    ap.add_argument("--valid-styles", default="before,after", help="prompts whose valid-action share is measured")
    ap.add_argument("--merge", nargs="+", help="merge these outputs of runs over other variants into --out, and stop")
    ap.add_argument("--out", default=None, help="default results/sampling_cost.json; with --quick runs/sampling_cost_quick.json")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = "runs/sampling_cost_quick.json" if args.quick else "results/sampling_cost.json"
    if args.merge:
        parts = [json.loads(Path(f).read_text()) for f in args.merge]
        out = dict(parts[0])
        values: dict[str, dict[str, list[float]]] = {}
        for part in parts:  # runs over other variants or other repeats (--rep-start) of the same variant
            for v, figs in part["variants"].items():
                for k, f in figs.items():
                    values.setdefault(v, {}).setdefault(k, []).extend(f["values"])
        out["variants"] = {v: {k: summarise(x) for k, x in figs.items()} for v, figs in values.items()}
        out["config"]["repeats"] = max(len(x) for figs in values.values() for x in figs.values())
        valid: dict[str, Any] = {}
        for part in parts:  # the same prompt style over several --valid-seed runs: counts pooled
            for k, v in part["valid_action_share"].items():
                w = valid.setdefault(k, {"valid": 0, "n": 0, "runs": [], "examples": v["examples"]})
                w["valid"] += v["valid"]
                w["n"] += v["n"]
                w["runs"].append({"valid": v["valid"], "n": v["n"], "seed": v.get("seed")})
        for w in valid.values():
            w["share"] = w["valid"] / w["n"]
            w["wilson95"] = list(_wilson(w["valid"], w["n"]))
        out["valid_action_share"] = valid
        out["command"] = " ; ".join(p["command"] for p in parts) + " ; then --merge of their outputs"
        Path(args.out).write_text(json.dumps(out, indent=1, allow_nan=False) + "\n")
        return out

    from agents.llm.backbone import load_backbone
    from agents.grpo import grpo_update
    from agents.train.config import TrainConfig, update_config
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks

    cfg = TrainConfig()
    torch.set_num_threads(cfg.threads)
    n_groups, g_size = cfg.groups_per_step, cfg.group_size
    repeats, n_valid = args.repeats, args.valid_samples
    if args.quick:
        n_groups, g_size, repeats, n_valid = 2, 2, 1, 8
    model, tok = load_backbone(cfg.model, device="cpu", dtype="float32")
    tasks = [get_task(t) for t in list_tasks("train")]
    variants = [v for v in args.variants.split(",") if v]
    results: dict[str, Any] = {}
    policies: dict[str, LLMPolicy] = {}
    lora_state = None
    for v in variants:
        cls = BeforePolicy if v == "before" else LLMPolicy
        # one backbone, LoRA added once: every variant wraps the same PeftModel with the same initial adapters
        pol = cls(model, tok, mode=cfg.solution_mode, lora_r=cfg.lora_r, lora_alpha=2 * cfg.lora_r,
                  max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=cfg.seed, finetune=cfg.finetune)
        model = pol.model
        if lora_state is None:
            lora_state = pol.adapter_state_dict()
        policies[v] = pol

    def prompt_of(v: str, pol: LLMPolicy, task: Any) -> str:
        return build_prompt_before(pol, task) if v in ("before", "shared_prefix") else pol.build_prompt({"task_id": task.task_id}, task)

    for v in variants:
        pol = policies[v]
        rec: dict[str, list[float]] = {k: [] for k in (
            "prompt_tokens", "sample_cpu_s_per_rollout", "sample_wall_s_per_rollout", "new_tokens_per_cpu_s",
            "new_tokens_per_rollout", "update_cold_cpu_s_per_rollout", "update_warm_cpu_s_per_rollout",
            "update_cold_wall_s_per_rollout", "update_warm_wall_s_per_rollout")}
        for rep in range(args.rep_start, args.rep_start + repeats):
            pol.load_adapter_state_dict(lora_state)
            pol.seed, pol.n_sample_calls = rep, 0
            pol._prompt_cache.clear()
            opt = torch.optim.AdamW(pol.trainable_parameters(), lr=cfg.lr, weight_decay=0.0)
            step_tasks = [tasks[(rep * n_groups + i) % len(tasks)] for i in range(n_groups)]
            prompts = [prompt_of(v, pol, t) for t in step_tasks]
            rec["prompt_tokens"].append(float(np.mean([len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts])))
            samples, cpu_s, wall_s = _timed(lambda: pol.sample(prompts, g_size))
            n_rows = n_groups * g_size
            rec["sample_cpu_s_per_rollout"].append(cpu_s / n_rows)
            rec["sample_wall_s_per_rollout"].append(wall_s / n_rows)
            rec["new_tokens_per_cpu_s"].append(samples.new_tokens / cpu_s)
            rec["new_tokens_per_rollout"].append(samples.new_tokens / n_rows)
            rng = np.random.default_rng(rep)
            rewards = [list(rng.uniform(0, 1, g_size)) for _ in range(n_groups)]
            ucfg = update_config(cfg)
            # the code before issue 28 keeps nothing between updates: its warm update is its cold one (not re-measured)
            for phase in (("cold",) if v == "before" else ("cold", "warm")):
                _, cpu_u, wall_u = _timed(lambda: grpo_update(pol, opt, samples, rewards, None, config=ucfg))
                rec[f"update_{phase}_cpu_s_per_rollout"].append(cpu_u / n_rows)
                rec[f"update_{phase}_wall_s_per_rollout"].append(wall_u / n_rows)
            if v == "before":
                rec["update_warm_cpu_s_per_rollout"].append(rec["update_cold_cpu_s_per_rollout"][-1])
                rec["update_warm_wall_s_per_rollout"].append(rec["update_cold_wall_s_per_rollout"][-1])
            print(f"[{v} rep {rep}] prompt {rec['prompt_tokens'][-1]:.0f} tok; sample {cpu_s:.1f} CPU-s "
                  f"({samples.new_tokens} new tok); update cold {rec['update_cold_cpu_s_per_rollout'][-1] * n_rows:.1f} / "
                  f"warm {rec['update_warm_cpu_s_per_rollout'][-1] * n_rows:.1f} CPU-s", flush=True)
        results[v] = {k: summarise(x) for k, x in rec.items()}

    # valid-action share of the untrained policy (the prompt is what changes it): the same sampler for both prompts
    valid: dict[str, Any] = {}
    # the current sampler for both prompts (the samplers draw from the same distribution; only the prompt differs)
    pol = next((policies[v] for v in variants if v != "before"), None) or LLMPolicy(
        model, tok, mode=cfg.solution_mode, lora_r=cfg.lora_r, lora_alpha=2 * cfg.lora_r,
        max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=cfg.seed)
    if lora_state is not None:
        pol.load_adapter_state_dict(lora_state)  # the untrained adapters (LoRA B = 0: the base model)
    per = 8 if not args.quick else 4
    for style in [x for x in args.valid_styles.split(",") if x]:
        pol.seed, pol.n_sample_calls = args.valid_seed, 0
        ok, n, lines = 0, 0, []
        gi = 0
        while n < n_valid:
            k = min(per, n_valid - n)
            task = tasks[gi % len(tasks)]
            gi += 1
            p = {"before": build_prompt_before, "mid": build_prompt_mid}.get(
                style, lambda q, t: q.build_prompt({"task_id": t.task_id}, t))(pol, task)
            s = pol.sample([p], k)
            for text in s.texts[0]:
                good = valid_action(pol, text, task)
                ok += int(good)
                lines.append({"task": task.task_id, "line": (text.splitlines() or [""])[0][:160], "valid": good})
            n += k
        lo, hi = _wilson(ok, n)
        valid[style] = {"valid": ok, "n": n, "share": ok / n, "wilson95": [lo, hi], "seed": args.valid_seed,
                        "examples": lines[:12]}
        print(f"[valid {style}] {ok}/{n} = {ok / n:.3f} (95% CI {lo:.3f}-{hi:.3f})", flush=True)

    out = {
        "benchmark": "sampling_cost",
        "command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sampling_cost.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "config": {"model": cfg.model, "dtype": "float32", "threads": cfg.threads, "groups_per_step": n_groups,
                   "group_size": g_size, "max_new_tokens": cfg.max_new_tokens, "temperature": cfg.temperature,
                   "lora_r": cfg.lora_r, "kl_coef": cfg.kl_coef, "entropy_coef": cfg.entropy_coef,
                   "repeats": repeats, "torch": torch.__version__},
        "cpu_seconds": "time.process_time of this process plus its children (torch on one thread); wall-clock beside it",
        "variants": results,
        "valid_action_share": valid,
        "load_note": "measured on a shared 2-core machine with other jobs running: CPU-seconds are the comparable figure",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, allow_nan=False) + "\n")
    return out


def _wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


if __name__ == "__main__":
    main()
