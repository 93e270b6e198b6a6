"""Which world model carries most signal on ``wmrl train``'s anchor groups, out of sample, and at what cost?

A pilot made as the main job makes its groups: the default untrained policy (SmolLM2-135M + LoRA,
line mode, the default ``TrainConfig``) samples ``--groups`` groups of G (``--group-size``, default 8 as ``wmrl train``) on the default training
tasks, ``groups_per_step`` = 4 tasks per ``policy.sample`` call, tasks drawn as ``wmrl train`` draws
them; every rollout is executed for real in the run's sandbox (bubblewrap). The pilot (contexts,
actions, real scores, CPU-s per execution and per sampled rollout) is cached in ``--pilot`` and reused
on the next call (``--fresh`` re-samples and re-executes), and so is each world model's scoring
(``--rescore`` scores again).

Each world model then scores the pilot's groups in order, as a run scores its anchor groups:

- ``learned-policy`` / ``learned-encoder``: the world models ``wmrl train --world-model ...`` builds
  (:func:`agents.train.build.build_world_model`), through the library's own
  ``LearnedWorldModel.predict`` then ``observe`` (and, after a refit, ``crossfit_scores``, as the
  loop does): group i is predicted by a model that has observed only groups 0 … i-1
  (PREQUENTIAL; the first groups get the cold-start constant, which carries no within-group signal);
- ``judge``: the generative LLM judge (frozen backbone, the run's settings); it does not learn, so
  its r is simply out of sample. It costs ~6.7 CPU-s per prediction: scored on the first
  ``--judge-groups`` groups only.

r is the advisor's pooled within-group correlation of the raw world-model scores with the real ones,
with its 95% bootstrap CI over groups (``AnchorAdvisor.advise(calibrate=None)``), over all groups
scored and over the last half (a learned model improves with data); for the learned models also the
out-of-fold r after the last group (``crossfit_scores``: what the run's advisor reports after a
refit). CPU-s per prediction counts ``predict`` and, for a learned model, ``observe`` with its refits
and out-of-fold rescoring (what the ledger charges to ``world_model``), over the predictions made.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/main_job_world_models.py            # 24 groups, judge on 8
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/main_job_world_models.py --quick              # 4 groups x 2, smoke

Writes ``results/main_job_world_models.json`` (strict JSON) unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORLD_MODELS = ("learned-policy", "learned-encoder", "judge")


def make_pilot(n_groups: int, group_size: int, seed: int, path: Path, **overrides: Any) -> dict[str, Any]:
    """Sample and execute the pilot (saved to ``path`` after every step's groups); ``overrides``:
    other ``TrainConfig`` settings (e.g. ``temperature``)."""
    import torch

    from agents.train.build import build_components
    from agents.train.config import TrainConfig
    from wmrl_envs.core.group import real_score
    from wmrl_envs.wrappers.group_api import real_step

    cfg = TrainConfig(group_size=group_size, seed=seed, world_model="learned-encoder", **overrides)  # no judge loaded
    c = build_components(cfg)
    torch.set_num_threads(1)
    rng = np.random.default_rng(cfg.seed)
    pilot = {"settings": {"groups": n_groups, "group_size": group_size, "seed": seed,
                          "groups_per_step": cfg.groups_per_step, "model": cfg.model,
                          "solution_mode": cfg.solution_mode, "max_new_tokens": cfg.max_new_tokens,
                          "temperature": cfg.temperature, "sandbox": c.env.sandbox.name},
             "groups": []}
    while len(pilot["groups"]) < n_groups:
        k = min(cfg.groups_per_step, n_groups - len(pilot["groups"]))
        task_ids = [str(t) for t in rng.choice(c.train_tasks, size=cfg.groups_per_step,
                                               replace=cfg.groups_per_step > len(c.train_tasks))][:k]
        specs = [c.get_task(t) for t in task_ids]
        contexts = [c.env.reset(options={"task_id": t})[0] for t in task_ids]
        prompts = [c.policy.build_prompt(ctx, spec) for ctx, spec in zip(contexts, specs)]
        t0 = time.process_time()
        samples = c.policy.sample(prompts, group_size)
        gen_cpu = (time.process_time() - t0) / (k * group_size)
        for t, ctx, spec, texts in zip(task_ids, contexts, specs, samples.texts):
            actions = [c.policy.completion_to_action(x, spec) for x in texts]
            real, cpu, status = [], [], []
            for a in actions:
                obs, _ = c.env.reset(options={"task_id": t})
                _obs, reward, _te, _tr, info = real_step(c.env, a, obs)
                score, _cause, _msg = real_score(reward, info)
                real.append(score)
                cpu.append(float(info.get("execution_cpu_s", float("nan"))))
                status.append(str(info.get("status", "?")))
            pilot["groups"].append({"task_id": t, "context": _jsonable(ctx), "completions": list(texts),
                                    "actions": actions, "real": real, "execution_cpu_s": cpu, "status": status,
                                    "generation_cpu_s_per_rollout": gen_cpu})
            print(f"group {len(pilot['groups'])}/{n_groups} {t}: real {['%.3f' % r if r is not None else None for r in real]}",
                  flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(pilot, indent=1, allow_nan=False, default=str))
        tmp.replace(path)  # atomic: a reader never sees half a file
    c.env.close()
    c.env.sandbox.close()
    return pilot


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


def r_with_ci(pred: list[list[float]], real: list[list[float | None]], n_boot: int = 1000) -> dict[str, Any]:
    """The advisor's pooled within-group r of raw scores with its 95% bootstrap CI (NaN -> None)."""
    from wmrl_envs.core import CostRates
    from wmrl_envs.core.advisor import AnchorAdvisor

    if len(pred) < 2:
        return {"r": None, "r_ci": [None, None], "n_groups": len(pred)}
    adv = AnchorAdvisor(min_groups=2, n_boot=n_boot, seed=0)
    for p, r in zip(pred, real):
        adv.add_group(p, r)
    a = adv.advise(CostRates(execution_s=1.0, world_model_s=0.0), calibrate=None)
    fin = lambda v: float(v) if v is not None and math.isfinite(v) else None  # noqa: E731
    return {"r": fin(a.r), "r_ci": [fin(a.r_ci[0]), fin(a.r_ci[1])], "n_groups": a.n_groups}


def paired_r_difference(a: list, b: list, real: list, lo: int = 0, n_boot: int = 2000) -> dict[str, Any]:
    """r(a) - r(b) on groups ``lo``... with a 95% paired bootstrap CI (the same groups resampled for both)."""
    from wmrl_envs.core.advisor_model import pooled_within_group_correlation as pooled

    idx = np.arange(lo, len(real))
    point = pooled(a[lo:], real[lo:])[0] - pooled(b[lo:], real[lo:])[0]
    rng, diffs = np.random.default_rng(0), []
    for _ in range(n_boot):
        i = rng.choice(idx, size=idx.size)
        d = pooled([a[j] for j in i], [real[j] for j in i])[0] - pooled([b[j] for j in i], [real[j] for j in i])[0]
        if math.isfinite(d):
            diffs.append(d)
    ci = [float(v) for v in np.percentile(diffs, [2.5, 97.5])] if diffs else [None, None]
    return {"difference": point, "ci": ci, "groups": [lo, len(real)]}


def score_world_model(name: str, groups: list[dict[str, Any]], policy: Any, tokenizer: Any, cfg: Any) -> dict[str, Any]:
    """Predict then (learned) observe every group in order; r (all, last half), CPU-s per prediction."""
    from agents.train.build import build_world_model

    wm = build_world_model(cfg, policy, tokenizer)
    learned = callable(getattr(wm, "observe", None))
    preds, reals, cpu_predict, cpu_learn, n_pred, fitted_at = [], [], 0.0, 0.0, 0, []
    for i, g in enumerate(groups):
        ctx = [g["context"]] * len(g["actions"])
        t0 = time.process_time()
        p = [float(x.score) if x.score is not None and math.isfinite(x.score) else None
             for x in wm.predict(ctx, g["actions"])]
        cpu_predict += time.process_time() - t0
        n_pred += len(p)
        preds.append(p)
        reals.append(g["real"])
        fitted_at.append(bool(getattr(wm, "fitted", True)))
        if learned:  # as CorrectionLoop._learn_from_group: observe, and rescore after a refit
            t0 = time.process_time()
            if wm.observe(ctx, g["actions"], g["real"], group_id=i):
                wm.crossfit_scores()
            cpu_learn += time.process_time() - t0
        print(f"  {name}: group {i + 1}/{len(groups)} pred {['%.3f' % x if x is not None else None for x in p]} "
              f"real {['%.3f' % x if x is not None else None for x in g['real']]}", flush=True)
    half = len(groups) // 2
    out = {
        "world_model": name,
        "n_groups": len(groups),
        "n_predictions": n_pred,
        "prequential" if learned else "out_of_sample": r_with_ci(preds, reals),
        "last_half": {**r_with_ci(preds[half:], reals[half:]), "groups": [half, len(groups)]},
        "cpu_s_per_prediction": (cpu_predict + cpu_learn) / max(1, n_pred),
        "cpu_s_predict_per_prediction": cpu_predict / max(1, n_pred),
        "cpu_s_learning_total": cpu_learn,
        "groups_predicted_by_a_fitted_head": int(sum(fitted_at)) if learned else None,
        "predictions": preds,
    }
    if learned:
        cf = wm.crossfit_scores().by_group()
        out["crossfit_after_last_group"] = r_with_ci([cf[i] for i in sorted(cf)], [groups[i]["real"] for i in sorted(cf)])
        out["n_refits"] = wm.n_refits
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=24, help="pilot groups (anchor groups of the run)")
    ap.add_argument("--group-size", type=int, default=8, help="G, rollouts per group (wmrl train's default 8)")
    ap.add_argument("--judge-groups", type=int, default=8, help="groups the judge scores (the first ones; it is costly)")
    ap.add_argument("--world-models", nargs="+", default=list(WORLD_MODELS), choices=WORLD_MODELS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pilot", default=str(ROOT / "runs" / "main_job_world_models" / "pilot.json"),
                    help="cache of the executed pilot (reused when it has the same settings)")
    ap.add_argument("--fresh", action="store_true", help="re-sample and re-execute the pilot (and score again)")
    ap.add_argument("--rescore", action="store_true", help="score the world models again (their scores on the same "
                    "pilot groups are cached beside the pilot and reused otherwise)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 4 groups x G=2, judge on 2, a separate pilot cache")
    ap.add_argument("--out", default=None, help="results JSON (default results/main_job_world_models.json; --quick: none)")
    args = ap.parse_args()
    if args.quick:
        args.groups, args.group_size, args.judge_groups = 4, 2, 2
        args.pilot = str(Path(args.pilot).with_name("pilot_quick.json"))
    out_path = Path(args.out) if args.out else (None if args.quick else ROOT / "results" / "main_job_world_models.json")

    pilot_path = Path(args.pilot)
    want = {"group_size": args.group_size, "seed": args.seed}
    pilot = json.loads(pilot_path.read_text()) if pilot_path.exists() and not args.fresh else None
    if pilot is not None and ({k: pilot["settings"][k] for k in want} != want or len(pilot["groups"]) < args.groups):
        print(f"the cached pilot {pilot_path} has other settings or fewer groups: sampling a new one")
        pilot = None
    t0 = time.perf_counter()
    if pilot is None:
        pilot = make_pilot(args.groups, args.group_size, args.seed, pilot_path)
    groups = pilot["groups"][: args.groups]
    pilot_wall = time.perf_counter() - t0

    import torch

    from agents.llm.backbone import load_backbone
    from agents.llm.policy import LLMPolicy
    from agents.train.config import TrainConfig

    torch.set_num_threads(1)
    results = []
    for name in args.world_models:
        cfg = TrainConfig(group_size=args.group_size, seed=args.seed, world_model=name, device="cpu")
        if name == "judge" and args.judge_groups < 2:
            continue
        subset = groups[: args.judge_groups] if name == "judge" else groups
        key = hashlib.sha1(json.dumps([[g["task_id"], g["actions"], g["real"]] for g in subset]).encode()).hexdigest()[:12]
        cache = pilot_path.with_name(f"{pilot_path.stem}_scores_{name}_{len(subset)}_{key}.json")
        res = json.loads(cache.read_text()) if cache.exists() and not args.fresh and not args.rescore else None
        if res is not None and (name == "judge" or "predictions" in res):  # scored before on the same pilot groups
            print(f"{name}: reusing the scores in {cache} (--rescore scores again)")
        else:
            model, tok = load_backbone(cfg.model, device="cpu", dtype="float32")
            policy = LLMPolicy(model, tok, mode=cfg.solution_mode, lora_r=cfg.lora_r, lora_alpha=2 * cfg.lora_r,
                               max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=cfg.seed)
            res = score_world_model(name, subset, policy, tok, cfg)
            cache.write_text(json.dumps(res, allow_nan=True))
        if name != "judge" and args.judge_groups >= 2:  # beside the judge, on the groups it scored
            k = min(args.judge_groups, len(groups))
            res["on_the_judge_groups"] = {**r_with_ci(res["predictions"][:k], [g["real"] for g in groups[:k]]),
                                          "groups": [0, k]}
        if name == "judge":
            res["note"] = (f"scored on the first {len(subset)} of the {len(groups)} pilot groups only "
                           "(it costs several CPU-s per prediction)")
        results.append(res)
        print(json.dumps(res), flush=True)

    paired = {}
    by = {r["world_model"]: r["predictions"] for r in results if "predictions" in r and r["n_groups"] == len(groups)}
    if {"learned-policy", "learned-encoder"} <= set(by):
        reals = [g["real"] for g in groups]
        for label, lo in (("all_groups", 0), ("last_half", len(groups) // 2)):
            paired[label] = paired_r_difference(by["learned-policy"], by["learned-encoder"], reals, lo)
    exec_cpu = [x for g in groups for x in g["execution_cpu_s"] if x is not None and math.isfinite(x)]
    statuses: dict[str, int] = {}
    for g in groups:
        for s in g["status"]:
            statuses[s] = statuses.get(s, 0) + 1
    report = {
        "command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/main_job_world_models.py "
                   + " ".join(sys.argv[1:]),
        "what": "prequential within-group r (advisor's pooled r of raw scores, 95% bootstrap CI over groups) of each "
                "world model on wmrl train's anchor groups (untrained default policy, every rollout executed), and "
                "its CPU-s per prediction (predict + observe/refit/rescoring)",
        "pilot": {**pilot["settings"], "groups_used": len(groups), "cache": str(pilot_path.relative_to(ROOT))
                  if pilot_path.is_relative_to(ROOT) else str(pilot_path),
                  "execution_cpu_s_per_rollout": float(np.mean(exec_cpu)) if exec_cpu else None,
                  "generation_cpu_s_per_rollout": float(np.mean([g["generation_cpu_s_per_rollout"] for g in groups])),
                  "statuses": statuses, "tasks": sorted({g["task_id"] for g in groups}),
                  "wall_s_this_call": pilot_wall},
        "table": [{"world_model": r["world_model"], "n_groups": r["n_groups"],
                   "r": (r.get("prequential") or r.get("out_of_sample"))["r"],
                   "r_ci": (r.get("prequential") or r.get("out_of_sample"))["r_ci"],
                   "r_last_half": r["last_half"]["r"], "r_last_half_ci": r["last_half"]["r_ci"],
                   "r_on_the_judge_groups": (r.get("on_the_judge_groups") or {}).get("r"),
                   "cpu_s_per_prediction": r["cpu_s_per_prediction"]} for r in results],
        "learned_policy_minus_learned_encoder": paired,
        "world_models": results,
        "machine": "2 CPU cores shared with other jobs (CPU-seconds are per process; wall-clock is noisy)",
    }
    from wmrl_envs.utils import finite_or_none

    text = json.dumps(finite_or_none(report), indent=2, allow_nan=False)
    print(text)
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(text + "\n")
        print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
