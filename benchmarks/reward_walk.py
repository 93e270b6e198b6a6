"""Walk one reward of ``wmrl train`` from its producer to the GRPO loss (issue 26's measure).

Runs the single-turn step of :func:`agents.train.loop._train_loop` with its real functions
(``wrapper.plan_step``, :func:`agents.train.rollout.task_context` → ``begin_group``,
:func:`agents.train.rollout.score_task` → ``score_group``, :func:`agents.grpo.grpo_update` with
:func:`agents.train.config.update_config` of the ``tiny`` preset and its correction settings) on a
cheap stand-in for AutoResearch: ``KnownTruthEnv`` (the real execution) and
``KnownTruthWorldModel`` (the world model), and a tabular softmax policy defined in this file
(so the policy's own module, ``agents.llm.policy`` in ``wmrl train``, is not counted; it is not
on the reward's path: it only supplies log-probabilities to the loss).

Under ``sys.setprofile``, every Python call into a project module (``wmrl_envs.*``, ``agents.*``)
is recorded. Figures:

(a) ``data_path_modules``: the project modules on the call stacks that carry the reward: the
    stack when the producer is called (``KnownTruthEnv.step`` on an anchor group,
    ``KnownTruthWorldModel.predict`` on a world-model group: the frames the produced value
    returns through), the stack when the correction turns raw scores into training rewards
    (every call into ``wmrl_envs.core.corrector`` / ``debias`` / ``denoise`` under
    ``CorrectionLoop.score_group``), and the stacks when the reward is consumed (the advantage,
    ``agents.grpo.group_advantages``, and the loss, ``agents.grpo.grpo_loss``). The union of those
    chains' modules. Helpers called beside the chain (validation, ledger, routing) are not in (a).
(b) ``modules_per_group``: every project module entered while one group is processed: the step's
    ``plan_step``, that group's ``begin_group`` + ``score_group``, and the step's ``grpo_update``.
(c) ``wrapper_to_loop_calls_per_group``: calls whose caller frame is in ``wmrl_envs/wrappers/``
    and whose callee is a method (or property) of the wrapper's ``CorrectionLoop``, between the
    group's ``begin_group`` and the end of its ``score_group`` (``plan_step``, once per step, is
    reported separately).

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/reward_walk.py`` (a few seconds on one core);
writes ``results/reward_walk.json``.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.grpo import grpo_update  # noqa: E402
from agents.train.config import PRESETS, update_config  # noqa: E402
from agents.train.rollout import score_task, task_context  # noqa: E402
from wmrl_envs import AnchoredWorldModelWrapper  # noqa: E402
from wmrl_envs.envs.known_truth import KnownTruthEnv, KnownTruthWorldModel  # noqa: E402

PROJECT = ("wmrl_envs", "agents")
WRAPPERS_DIR = str(ROOT / "wmrl_envs" / "wrappers") + os.sep
CORRECTION_MODULES = ("wmrl_envs.core.corrector", "wmrl_envs.core.debias", "wmrl_envs.core.denoise")


class Rows:
    """The policy's samples: int64 (N,) tasks and actions, one row per rollout, group after group."""

    def __init__(self, tasks: np.ndarray, actions: np.ndarray) -> None:
        self.tasks, self.actions = tasks, actions

    def __len__(self) -> int:
        return len(self.actions)


class TinyPolicy:
    """A softmax over actions per task (a :class:`agents.grpo.GRPOPolicy`); samples are ``(tasks, actions)``."""

    def __init__(self, n_tasks: int, n_actions: int) -> None:
        self.logits = torch.nn.Parameter(torch.zeros(n_tasks, n_actions, dtype=torch.float64))
        self.rng = np.random.default_rng(0)

    def sample(self, tasks: list[int], g: int) -> np.ndarray:
        p = torch.softmax(self.logits.detach(), 1).numpy()
        return np.array([[self.rng.choice(p.shape[1], p=p[t]) for _ in range(g)] for t in tasks], dtype=np.int64)

    def grpo_logprobs(self, samples, rows, *, reference=False, with_entropy=False):
        tasks, actions = samples.tasks, samples.actions
        r = np.asarray(rows, dtype=np.int64)
        lp_all = torch.log_softmax(self.logits.detach() if reference else self.logits, 1)[torch.as_tensor(tasks[r])]
        lp = lp_all.gather(1, torch.as_tensor(actions[r])[:, None])
        ent = -(lp_all.exp() * lp_all).sum(1, keepdim=True) if with_entropy else None
        return lp, torch.ones_like(lp), ent

    def trainable_parameters(self):
        return [self.logits]


def _mod(frame) -> str | None:
    name = frame.f_globals.get("__name__", "")
    return name if name.split(".")[0] in PROJECT else None


def _chain(frame) -> list[str]:
    """The project modules on the stack, innermost first (consecutive repeats merged)."""
    out = []
    while frame is not None:
        m = _mod(frame)
        if m is not None and (not out or out[-1] != m):
            out.append(m)
        frame = frame.f_back
    return out


def _importing(frame) -> bool:
    """Whether the call runs inside a module's import (its ``<module>`` code), not the step's own work."""
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") != "__main__":
            return True
        frame = frame.f_back
    return False


class Tracer:
    def __init__(self, loop, producers, consumers) -> None:
        self.loop, self.producers, self.consumers = loop, producers, consumers
        self.loop_methods = {n for n in dir(type(loop)) if not n.startswith("__")}
        self.touched: set[str] = set()
        self.imported: set[str] = set()
        self.chains: dict[str, set[str]] = {"producer": set(), "correction": set(), "consumer": set()}
        self.chain_examples: dict[str, list[str]] = {}
        self.loop_calls: Counter = Counter()

    def __call__(self, frame, event, arg) -> None:
        if event != "call":
            return
        m = _mod(frame)
        if m is None or _importing(frame):
            if m is not None:
                self.imported.add(m)
            return
        self.touched.add(m)
        code = frame.f_code
        kind = ("producer" if code in self.producers else "consumer" if code in self.consumers
                else "correction" if m in CORRECTION_MODULES and "score_group" in _names(frame) else None)
        if kind is not None:
            chain = _chain(frame)
            self.chains[kind].update(chain)
            self.chain_examples.setdefault(f"{kind}:{m}.{code.co_name}", chain[::-1])
        if (frame.f_locals.get("self") is self.loop and code.co_name in self.loop_methods
                and frame.f_back is not None and frame.f_back.f_code.co_filename.startswith(WRAPPERS_DIR)):
            self.loop_calls[f"{m}.{code.co_name}"] += 1

    def take(self) -> tuple[set[str], Counter]:
        t, c = self.touched, self.loop_calls
        self.touched, self.loop_calls = set(), Counter()
        return t, c


def _names(frame) -> set[str]:
    out = set()
    while frame is not None:
        out.add(frame.f_code.co_name)
        frame = frame.f_back
    return out


def main(steps: int = 6, n_tasks: int = 4, n_actions: int = 8) -> dict:
    torch.set_num_threads(1)
    cfg = PRESETS["tiny"]
    env = KnownTruthEnv(n_tasks=n_tasks, n_actions=n_actions)
    env.reset(seed=0)
    wm = KnownTruthWorldModel(env, seed=0)
    wrapper = AnchoredWorldModelWrapper(env, wm, group_size=cfg.group_size, groups_per_step=cfg.groups_per_step,
                                        correction=cfg.correction, seed=cfg.seed)
    policy = TinyPolicy(n_tasks, n_actions)
    opt = torch.optim.Adam(policy.trainable_parameters(), lr=0.1)
    ucfg = update_config(cfg)
    import agents.grpo as grpo

    tracer = Tracer(wrapper.loop, {KnownTruthEnv.step.__code__, KnownTruthWorldModel.predict.__code__},
                    {grpo.grpo_loss.__code__, grpo.group_advantages.__code__})
    per_group = []
    sys.setprofile(tracer)
    try:
        for step in range(steps):
            tracer.take()
            wrapper.plan_step(cfg.groups_per_step)
            plan_mods, plan_calls = tracer.take()
            contexts = [task_context(wrapper, str(k)) for k in range(cfg.groups_per_step)]
            begin_mods, begin_calls = tracer.take()  # every group of a step is begun before any is scored
            acts = policy.sample([int(c) for c in contexts], cfg.group_size)
            tracer.take()
            groups, recs = [], []
            for k, ctx in enumerate(contexts):
                groups.append(score_task(wrapper, str(k), ctx, list(acts[k])))
                mods, calls = tracer.take()
                recs.append((groups[-1].route, mods, calls))
            samples = Rows(np.repeat([int(c) for c in contexts], cfg.group_size), acts.reshape(-1))
            grpo_update(policy, opt, samples, [g.rewards for g in groups], [g.advantage_weight for g in groups],
                        config=ucfg)
            upd_mods, _ = tracer.take()
            n = len(groups)
            for route, mods, calls in recs:
                c = calls + Counter({k: v / n for k, v in begin_calls.items()})  # begin_group's share
                per_group.append({"step": step, "route": route,
                                  "modules": sorted(plan_mods | begin_mods | mods | upd_mods),
                                  "wrapper_to_loop_calls": sum(c.values()), "by_method": dict(c),
                                  "plan_step_calls_per_step": sum(plan_calls.values())})
    finally:
        sys.setprofile(None)

    data_path = sorted(set().union(*tracer.chains.values()))
    all_mods = sorted(set().union(*(set(g["modules"]) for g in per_group)))
    out = {
        "command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/reward_walk.py",
        "setup": {"env": "KnownTruthEnv", "world_model": "KnownTruthWorldModel", "policy": "TinyPolicy (this file)",
                  "preset": "tiny", "steps": steps, "groups_per_step": cfg.groups_per_step,
                  "group_size": cfg.group_size},
        "a_data_path_modules": {"count": len(data_path), "packages": sorted({m.rsplit(".", 1)[0] for m in data_path}),
                                "modules": data_path,
                                "by_chain": {k: sorted(v) for k, v in tracer.chains.items()},
                                "chains": tracer.chain_examples},
        "b_modules_per_group": {"max": max(len(g["modules"]) for g in per_group),
                                "by_route_max": {r: max(len(g["modules"]) for g in per_group if g["route"] == r)
                                                 for r in {g["route"] for g in per_group}},
                                "union_over_run": {"count": len(all_mods), "modules": all_mods}},
        "c_wrapper_to_loop_calls_per_group": {
            "by_route": {r: sorted({g["wrapper_to_loop_calls"] for g in per_group if g["route"] == r})
                         for r in {g["route"] for g in per_group}},
            "plan_step_per_step": sorted({g["plan_step_calls_per_step"] for g in per_group}),
            "example_by_method": {r: next(g["by_method"] for g in per_group if g["route"] == r)
                                  for r in {g["route"] for g in per_group}}},
        "imported_during_run_not_counted": sorted(tracer.imported),
        "notes": [
            "(a) counts the modules of the frames on the stack at the producer's call, at every call into "
            "wmrl_envs.core.corrector/debias/denoise under score_group, and at group_advantages/grpo_loss; "
            "this script stands in for agents.train.loop (it calls grpo_update itself), so wmrl train adds "
            "agents.train.loop to the consumer chain (+1)",
            "the producer here is KnownTruthEnv/KnownTruthWorldModel (one module); in wmrl train it is "
            "AutoResearchEnv (wmrl_envs.envs.autoresearch.*) and the LLM judge (…autoresearch.llm_judge.*), "
            "whose internal modules are not measured here",
            "(b) excludes module code run by a first import during the run (listed in "
            "imported_during_run_not_counted) and this file's policy (agents.llm.policy in wmrl train)",
        ],
        "groups": [{k: g[k] for k in ("step", "route", "wrapper_to_loop_calls")} | {"n_modules": len(g["modules"])}
                   for g in per_group],
    }
    return out


if __name__ == "__main__":
    res = main()
    path = ROOT / "results" / "reward_walk.json"
    path.write_text(json.dumps(res, indent=1) + "\n")
    a, b, c = res["a_data_path_modules"], res["b_modules_per_group"], res["c_wrapper_to_loop_calls_per_group"]
    print(f"(a) modules on one reward's data path: {a['count']} in packages {a['packages']}")
    for m in a["modules"]:
        print("    ", m)
    for k, v in a["chains"].items():
        print(f"  chain {k}: {' > '.join(v)}")
    print(f"(b) project modules per group: max {b['max']} (by route {b['by_route_max']}); "
          f"over the run {b['union_over_run']['count']}")
    for m in b["union_over_run"]["modules"]:
        print("    ", m)
    print(f"(c) wrapper -> CorrectionLoop calls per group: {c['by_route']} {c['example_by_method']}; "
          f"plan_step per step: {c['plan_step_per_step']}")
    print(f"wrote {path}")
