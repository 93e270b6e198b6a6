"""Walk one reward of ``wmrl train`` from its producer to the GRPO loss (issue 26's measure).

Two walks, both written to ``results/reward_walk.json``:

**real** (:func:`real_main`): one single-turn GRPO step of the main job itself, at the ``tiny``
preset (``agents.train.config.PRESETS["tiny"]``) with ``steps=1``, ``anchor_fraction=0.5`` (its 2
groups: one anchor group, one world-model group; the run fails if the routes differ),
``sandbox="bubblewrap"`` and ``eval_tasks=1``. The components come from
:func:`agents.train.build.build_components` (SmolLM2-135M LoRA policy, the LLM judge on its frozen
backbone, AutoResearchEnv over bubblewrap, the anchored wrapper) and the step is
:func:`agents.train.loop._train_loop`'s own; tracing runs from its ``wrapper.plan_step`` call to
the return of its ``grpo_update`` (the held-out evaluations, metrics and checkpoint around it are
not traced). Of each group's G=2 rollouts, one gets the task's starter line and the other a
line that fails the host pre-check (``model = (``), so each producer's two branches (executed /
judged by the model; decided by the pre-check) are on the trace whatever the policy samples
(:func:`_force_both_branches`). 3 to 4 minutes, about 50 CPU-seconds (2 loaded cores).

**stand_in** (:func:`stand_in_main`, ``--stand-in-only`` prints it alone in seconds): the same
single-turn step re-written here (``wrapper.plan_step``, ``wrapper.begin_group``,
``wrapper.score_group``, :func:`agents.grpo.grpo_update` with the ``tiny`` preset's
update and correction settings) on ``KnownTruthEnv`` (the real execution) and
``KnownTruthWorldModel`` (the world model) with a tabular softmax policy defined in this file, for
6 steps. It does not have ``agents.train.loop`` (it calls ``grpo_update`` itself).

Under ``sys.setprofile`` (and ``threading.setprofile`` in the real walk: the judge runs in a
thread under ``world_model_timeout_s``; a thread's stack continues with the frame that started
it), every Python call into a project module (``wmrl_envs.*``, ``agents.*``) is recorded; module
code run by a first import is not counted. Figures:

(a) ``a_data_path_modules``, what "on the path" means (``ON_THE_PATH``): the union of the project
    modules on the call stacks at the reward's value events, never the helpers called beside them
    (validation, ledger, routing, cost accounting):

    - ``produce``: the producer's call (the frames the produced value returns through). Stand-in:
      ``KnownTruthEnv.step`` on an anchor group, ``KnownTruthWorldModel.predict`` on a
      world-model group. Real, anchor: the sandbox running the program
      (``wmrl_envs.sandbox.process.run_process``) and its outcome made the sandbox's
      ``ExecutionResult`` (``process.execution_result``); world model: the judge's ``predict`` and
      its generation ``_generate``.
    - ``score`` (real only; in the stand-in the producer returns the score): where the raw value
      becomes a score, under the producer's root call (``AutoResearchEnv.step``;
      ``LLMJudgeWorldModel.predict``). Anchor: ``grading.check_source``,
      ``grading.grade_execution``, ``grading.read_submission``, ``grading.compute_metric``,
      ``grading.position_score``, ``grading.score_from_status``, and ``core.group.real_score``
      (the wrapper taking the score from the step's info). World model: ``grading.check_source``
      (the judge's pre-check), ``parser.parse_judge_output_with_reason``,
      ``ParsedJudgement.score``, ``grading.score_from_status``.
    - ``correct``: every call into ``wmrl_envs.core.corrector`` / ``debias`` / ``denoise`` under
      ``score_group`` (the correction turning scores into training rewards and ρ).
    - ``consume``: ``agents.grpo.group_advantages`` and ``agents.grpo.grpo_loss`` (real also:
      the ``GroupRollout.rewards`` / ``advantage_weight`` reads that hand them to ``grpo_update``).

    The real walk reports the anchor reward and the world-model reward separately: each path's
    ``produce``/``score``/``correct`` events of its own group (the judge's prediction on the
    anchor group is a paired prediction, not the anchor reward, and is not on the anchor path),
    plus the step's ``consume`` events. The modules entered under the producer's root call but
    on no event's stack (task data, job folders, cgroups, the JSON constraint) are listed
    beside, not counted. ``a_merge_candidates``: the merges that would bring a path to 12.
(b) ``b_modules_per_group``: every project module entered while one group is processed: the
    step's ``plan_step``, that group's ``begin_group`` (and, real, its prompt, its
    ``completion_to_action`` and) ``score_group``, and the step's ``grpo_update`` (the real
    policy's ``agents.llm.policy`` included). The batched sampling is not per group (listed under
    ``step_phases_not_per_group``).
(c) ``c_wrapper_to_loop_calls_per_group``: calls whose caller frame is in ``wmrl_envs/wrappers/``
    and whose callee is a method (or property) of the wrapper's ``CorrectionLoop``, during the
    group's ``begin_group`` and ``score_group`` (``plan_step``, once per step, reported apart).

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/reward_walk.py`` (needs bubblewrap and the
shipped SmolLM2-135M; writes ``results/reward_walk.json``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.grpo import grpo_update  # noqa: E402
from agents.train.config import PRESETS, update_config  # noqa: E402
from wmrl_envs import AnchoredWorldModelWrapper  # noqa: E402
from wmrl_envs.envs.known_truth import KnownTruthEnv, KnownTruthWorldModel  # noqa: E402

PROJECT = ("wmrl_envs", "agents")
ON_THE_PATH = (
    "a module is on a reward's path when one of its frames is on the call stack at one of the reward's value "
    "events: produce (the producer's call), score (real walk: the raw value made a score under the producer's "
    "root call), correct (a call into core.corrector/debias/denoise under score_group), consume "
    "(group_advantages, grpo_loss; real walk also GroupRollout.rewards/advantage_weight); helpers called beside "
    "those stacks are not on it. The events' functions are listed in benchmarks/reward_walk.py's docstring."
)
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


def stand_in_main(steps: int = 6, n_tasks: int = 4, n_actions: int = 8) -> dict:
    """The stand-in step (KnownTruth env and world model, this file's policy); see the module docstring."""
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
            contexts = [wrapper.begin_group(options={"task_id": str(k)})[0] for k in range(cfg.groups_per_step)]
            begin_mods, begin_calls = tracer.take()  # every group of a step is begun before any is scored
            acts = policy.sample([int(c) for c in contexts], cfg.group_size)
            tracer.take()
            groups, recs = [], []
            for k, ctx in enumerate(contexts):
                groups.append(wrapper.score_group(list(acts[k]), options={"task_id": str(k)}, context=ctx))
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
            "the producer here is KnownTruthEnv/KnownTruthWorldModel (one module); in wmrl train it is the "
            "sandbox under AutoResearchEnv and the LLM judge: the 'real' walk of this file measures that path",
            "(b) excludes module code run by a first import during the run (listed in "
            "imported_during_run_not_counted) and this file's policy (agents.llm.policy in wmrl train)",
        ],
        "groups": [{k: g[k] for k in ("step", "route", "wrapper_to_loop_calls")} | {"n_modules": len(g["modules"])}
                   for g in per_group],
    }
    return out


# --------------------------------------------------------------------------------------------
# --real: one single-turn step of the main job itself (agents.train.loop._train_loop)
# --------------------------------------------------------------------------------------------

COMPREHENSIONS = ("<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>")


def _real_events() -> dict[str, dict[str, set]]:
    """The value events of the real path, by path and kind: ``{path: {kind: {code objects}}}``.

    ``produce``: where the reward's raw value comes from (anchor: the sandbox runs the program,
    :func:`wmrl_envs.sandbox.process.run_process`, and its outcome becomes the sandbox's
    ``ExecutionResult``, :func:`~wmrl_envs.sandbox.process.execution_result`; world model: the
    judge's ``predict`` and its generation ``_generate``). ``score``: where that raw value becomes
    a score (anchor: :func:`~wmrl_envs.envs.autoresearch.grading.grade_execution`, the submission
    read and its metric, the leaderboard position, ``score_from_status``, and
    :func:`wmrl_envs.core.group.real_score` taking it from the step's info; world model: the
    judge's parser and ``score_from_status``). A source that fails the host pre-check is scored
    without execution (anchor) or without the judge's model (world model): the pre-check
    (``check_source``, the judge's too) decides its status then, so it is a
    ``score`` event too. A ``score`` event counts for a path only under that path's producer
    root (``AutoResearchEnv.step``; ``LLMJudgeWorldModel.predict``), except ``real_score``.
    """
    from wmrl_envs.core import group as core_group
    from wmrl_envs.envs.autoresearch import grading
    from wmrl_envs.envs.autoresearch.llm_judge import judge, parser
    from wmrl_envs.sandbox import process

    return {
        "anchor": {
            "produce": {process.run_process.__code__, process.execution_result.__code__},
            "score": {grading.check_source.__code__, grading.grade_execution.__code__,
                      grading.read_submission.__code__, grading.compute_metric.__code__,
                      grading.position_score.__code__, grading.score_from_status.__code__,
                      core_group.real_score.__code__},
        },
        "world_model": {
            "produce": {judge.LLMJudgeWorldModel.predict.__code__, judge.LLMJudgeWorldModel._generate.__code__},
            "score": {grading.check_source.__code__,
                      parser.parse_judge_output_with_reason.__code__, parser.ParsedJudgement.score.fget.__code__,
                      grading.score_from_status.__code__},
        },
    }


class RealTracer:
    """``sys.setprofile``/``threading.setprofile`` hook over one step of ``_train_loop``.

    Active from the loop's ``wrapper.plan_step`` call to the return of its ``grpo_update``
    (the held-out evaluation before it, the metrics, checkpoint and evaluation after it are not
    traced). A thread started by the traced code (the judge runs in one, under
    ``world_model_timeout_s``) continues the call stack of the frame that started it.
    """

    def __init__(self, loop, events, consumers) -> None:
        from agents.train import loop as train_loop
        from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
        from wmrl_envs.envs.autoresearch.llm_judge.judge import LLMJudgeWorldModel

        self.loop, self.events, self.consumers = loop, events, consumers
        self.loop_methods = {n for n in dir(type(loop)) if not n.startswith("__")}
        self.train_loop_code = train_loop._train_loop.__code__
        self.thread_start = threading.Thread.start.__code__
        self.roots = {"anchor": AutoResearchEnv.step.__code__, "world_model": LLMJudgeWorldModel.predict.__code__}
        self.phase_of = {"plan_step": "plan", "begin_group": "begin", "build_prompt": "prompt",
                         "sample": "sample", "completion_to_action": "action", "score_group": "score",
                         "grpo_update": "update", "rewards": "update", "advantage_weight": "update"}
        self.counts = Counter()
        self.parents: dict = {}  # thread -> the frame that started it
        self.root_parents: dict = {}  # a thread's first frame -> the frame that started the thread
        self.active = self.done = False
        self.loop_frame = None
        self.t_step = self.cpu_step = 0.0
        self.touched: dict[tuple, set[str]] = {}
        self.imported: set[str] = set()
        self.chains: dict[tuple, set[str]] = {}  # (phase, kind) -> modules
        self.chain_examples: dict[str, list[str]] = {}
        self.under_root: dict[tuple, set[str]] = {}  # (phase, path) -> modules entered under the root call
        self.loop_calls: dict[tuple, Counter] = {}
        self.routes: dict[int, str] = {}
        self.rollouts: dict[str, dict] = {}

    def _stack(self, frame) -> list:
        """``frame`` and its callers up to the loop's frame, across the threads that started this one."""
        out, first_root = [], True
        while frame is not None:
            out.append(frame)
            if frame is self.loop_frame:
                break
            if frame.f_back is None:  # a thread's first frame: continue with the frame that started it
                if first_root:  # the first one met walking up is the current thread's
                    self.root_parents.setdefault(frame, self.parents.get(threading.current_thread()))
                    first_root = False
                frame = self.root_parents.get(frame)
            else:
                frame = frame.f_back
        return out

    def _phase(self, stack) -> tuple | None:
        if not stack or stack[-1] is not self.loop_frame or len(stack) < 2:
            return None
        top = stack[-2]
        if top.f_code.co_name in COMPREHENSIONS and len(stack) > 2:
            top = stack[-3]
        p = self.phase_of.get(top.f_code.co_name, "other")
        if p in ("begin", "prompt"):
            return (p, self.counts[p] - 1)
        if p == "action":
            return ("action", self.counts["score"])  # the actions of the group scored next
        if p == "score":
            return ("score", self.counts["score"] - 1)
        return (p, -1)

    def __call__(self, frame, event, arg) -> None:
        if self.done:
            return
        code = frame.f_code
        if not self.active:
            if (event == "call" and code.co_name == "plan_step" and frame.f_back is not None
                    and frame.f_back.f_code is self.train_loop_code):
                self.active, self.loop_frame = True, frame.f_back
                self.t_step, self.cpu_step = time.perf_counter(), time.process_time()
            else:
                return
        if event == "return":
            if frame.f_back is self.loop_frame:
                if code.co_name == "score_group":
                    self.routes[self.counts["score"] - 1] = arg.route
                    self.rollouts[arg.route] = {
                        "real_status": [i.get("status") for i in arg.infos] if arg.route == "anchor" else None,
                        "predicted_status": [p.status for p in arg.predictions],
                        "judge_model_called": [bool(p.model_called) for p in arg.predictions],
                        "rewards": arg.rewards, "advantage_weight": arg.advantage_weight}
                elif code.co_name == "grpo_update":
                    self.done, self.active = True, False
                    self.t_step, self.cpu_step = time.perf_counter() - self.t_step, time.process_time() - self.cpu_step
            return
        if event != "call":
            return
        if code is self.thread_start:
            self.parents[frame.f_locals["self"]] = frame.f_back
            return
        m = _mod(frame)
        if m is None:
            return
        if _importing(frame):
            self.imported.add(m)
            return
        if frame.f_back is self.loop_frame and code.co_name in self.phase_of:
            p = self.phase_of[code.co_name]
            if p in ("begin", "prompt", "score"):
                self.counts[p] += 1
        stack = self._stack(frame)
        phase = self._phase(stack)
        if phase is None:
            return
        self.touched.setdefault(phase, set()).add(m)
        chain = _mods_of(stack)
        names = {f.f_code for f in stack}
        kinds = []
        for path, ev in self.events.items():
            for kind, codes in ev.items():
                if code in codes and (kind == "produce" or self.roots[path] in names or code.co_name == "real_score"):
                    kinds.append(f"{kind}:{path}")
            if self.roots[path] in names:
                self.under_root.setdefault((phase, path), set()).add(m)
        if m in CORRECTION_MODULES and any(f.f_code.co_name == "score_group" for f in stack):
            kinds.append("correct")
        if code in self.consumers:
            kinds.append("consume")
        for kind in kinds:
            self.chains.setdefault((phase, kind), set()).update(chain)
            self.chain_examples.setdefault(f"{kind}:{m}.{code.co_name}", chain[::-1])
        if (frame.f_locals.get("self") is self.loop and code.co_name in self.loop_methods
                and frame.f_back is not None and frame.f_back.f_code.co_filename.startswith(WRAPPERS_DIR)):
            self.loop_calls.setdefault(phase, Counter())[f"{m}.{code.co_name}"] += 1


def _mods_of(stack) -> list[str]:
    """The project modules of ``stack`` (innermost first, consecutive repeats merged)."""
    out: list[str] = []
    for f in stack:
        m = _mod(f)
        if m is not None and (not out or out[-1] != m):
            out.append(m)
    return out


def real_main() -> dict:
    """One single-turn GRPO step of ``wmrl train --preset tiny`` traced (see the module docstring)."""
    import dataclasses
    import tempfile

    from rich.console import Console

    import agents.grpo as grpo
    from agents.train.build import build_components
    from agents.train.config import validate
    from agents.train.loop import _train_loop
    from agents.train.tracking import Tracker
    from wmrl_envs.core.group import GroupRollout

    t0, cpu0, ch0 = time.perf_counter(), time.process_time(), _children_cpu()
    tiny = PRESETS["tiny"]
    cfg = dataclasses.replace(tiny, steps=1, sandbox="bubblewrap", eval_tasks=1,
                              correction=dataclasses.replace(tiny.correction, anchor_fraction=0.5))
    validate(cfg)
    c = build_components(cfg)
    t_built = time.perf_counter() - t0
    _force_both_branches(c.policy)
    events = _real_events()
    consumers = {grpo.grpo_loss.__code__, grpo.group_advantages.__code__,
                 GroupRollout.rewards.fget.__code__, GroupRollout.advantage_weight.fget.__code__}
    tracer = RealTracer(c.wrapper.loop, events, consumers)
    with tempfile.TemporaryDirectory() as run_dir:
        t_start = time.perf_counter()
        tracker = Tracker("none", run_dir, dataclasses.asdict(cfg))
        threading.setprofile(tracer)
        sys.setprofile(tracer)
        try:
            _train_loop(cfg, Path(run_dir), False, c, Console(quiet=True), tracker, t_start)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
            tracker.close()
    if not tracer.done:
        raise RuntimeError("the traced step did not reach grpo_update (see metrics.jsonl of the run): nothing measured")
    routes = tracer.routes
    if sorted(routes.values()) != ["anchor", "world_model"]:
        raise RuntimeError(f"expected one anchor and one world-model group, got routes {routes}")

    def chain(kind: str, phases) -> set[str]:
        return set().union(*(v for (ph, k), v in tracer.chains.items() if k == kind and ph in phases))

    update = {("update", -1)}
    paths = {}
    for k, route in sorted(routes.items()):
        score_phase = {("score", k)}
        by_chain = {"produce": chain(f"produce:{route}", score_phase), "score": chain(f"score:{route}", score_phase),
                    "correct": chain("correct", score_phase), "consume": chain("consume", update)}
        mods = sorted(set().union(*by_chain.values()))
        under = sorted(tracer.under_root.get((("score", k), route), set()))
        paths[route] = {"count": len(mods), "modules": mods, "by_chain": {n: sorted(v) for n, v in by_chain.items()},
                        "entered_under_producer_root_not_counted": sorted(set(under) - set(mods)),
                        "producer_root": {"anchor": "AutoResearchEnv.step", "world_model": "LLMJudgeWorldModel.predict"}[route]}
    shared = {("plan", -1)} | update
    per_group, calls = {}, {}
    for k, route in sorted(routes.items()):
        own = {("begin", k), ("prompt", k), ("action", k), ("score", k)}
        mods = set().union(*(tracer.touched.get(p, set()) for p in own | shared))
        per_group[route] = {"count": len(mods), "modules": sorted(mods)}
        c_k = sum((tracer.loop_calls.get(p, Counter()) for p in (("begin", k), ("score", k))), Counter())
        calls[route] = {"calls": sum(c_k.values()), "by_method": dict(c_k)}
    elsewhere = {f"{p[0]}": sorted(v) for p, v in tracer.touched.items() if p[0] in ("sample", "other")}
    return {
        "setup": {"preset": "tiny", "steps": 1, "groups_per_step": cfg.groups_per_step, "group_size": cfg.group_size,
                  "anchor_fraction": 0.5, "sandbox": "bubblewrap", "eval_tasks": 1, "model": cfg.model,
                  "judge": "the policy's backbone, adapters off (LLMJudgeWorldModel)", "routes": routes,
                  "completions": "per group, one rollout: the task's starter model line; the other: 'model = (' "
                                 "(fails the host pre-check); see _force_both_branches",
                  "ledger_after_step": c.wrapper.loop.ledger.to_dict(),
                  "rollouts": tracer.rollouts,
                  "traced": "agents.train.loop._train_loop, from its wrapper.plan_step call to the return of its "
                            "grpo_update (the step's evaluation, metrics and checkpoint are not traced)"},
        "a_data_path_modules": paths,
        "a_merge_candidates": _merge_candidates(paths),
        "b_modules_per_group": per_group,
        "c_wrapper_to_loop_calls_per_group": calls,
        "plan_step_calls_per_step": sum(tracer.loop_calls.get(("plan", -1), Counter()).values()),
        "step_phases_not_per_group": elsewhere,
        "chains": tracer.chain_examples,
        "imported_during_step_not_counted": sorted(tracer.imported),
        "seconds": {"wall_total": round(time.perf_counter() - t0, 1), "build": round(t_built, 1),
                    "traced_step_wall": round(tracer.t_step, 1),
                    "cpu_total_self": round(time.process_time() - cpu0, 1),
                    "cpu_total_children": round(_children_cpu() - ch0, 1),
                    "traced_step_cpu_self": round(tracer.cpu_step, 1)},
    }


#: Modules on the real path that could merge (``(modules, into, why)``); listed for a path only
#: when all of ``modules`` are on it. Each merge takes ``len(modules)`` off that path's count.
MERGES = [
    (["wmrl_envs.core.group"], "wmrl_envs.core.loop",
     "score_group is CorrectionLoop's (its GroupScoring part lives in core.group)"),
    (["wmrl_envs.core.debias", "wmrl_envs.core.denoise"], "wmrl_envs.core.corrector",
     "the corrector's two parts; split on purpose (one test file each): the costliest merge"),
]


def _merge_candidates(paths: dict) -> dict:
    out = {}
    for route, p in paths.items():
        mods, left, steps = set(p["modules"]), p["count"], []
        for merged, into, why in MERGES:
            if set(merged) <= mods and into in mods:
                left -= len(merged)
                steps.append({"merge": merged, "into": into, "count_after": left, "why": why})
        out[route] = {"count": p["count"], "over_12_by": max(0, p["count"] - 12), "in_order": steps}
    return out


def _force_both_branches(policy) -> None:
    """Completions alternate (so each group of G=2 gets one of each): the task's starter line
    (passes the host pre-check: it is executed on an anchor group and judged by the model on a
    world-model group) and a line that fails the pre-check (``model = (``: graded or predicted
    without execution or model), so
    both branches of each producer are on the trace whatever the policy samples. The policy's own
    ``completion_to_action`` still builds the action; only its completion text is replaced."""
    original, calls = policy.completion_to_action, Counter()

    def completion_to_action(completion: str, task=None) -> str:
        i = calls["n"]
        calls["n"] += 1
        line = task.starter_model_line.split("=", 1)[1] if i % 2 == 0 else " ("
        return original(line, task)

    policy.completion_to_action = completion_to_action


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system



def main() -> dict:
    """Both walks: the real step (:func:`real_main`) and the stand-in (:func:`stand_in_main`)."""
    return {"command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/reward_walk.py",
            "on_the_path": ON_THE_PATH, "real": real_main(), "stand_in": stand_in_main()}


def _print_stand_in(res: dict) -> None:
    a, b, c = res["a_data_path_modules"], res["b_modules_per_group"], res["c_wrapper_to_loop_calls_per_group"]
    print(f"stand-in (a) modules on one reward's data path: {a['count']}")
    for m in a["modules"]:
        print("    ", m)
    print(f"stand-in (b) project modules per group: max {b['max']} (by route {b['by_route_max']})")
    print(f"stand-in (c) wrapper -> CorrectionLoop calls per group: {c['by_route']}; "
          f"plan_step per step: {c['plan_step_per_step']}")


def _print_real(res: dict) -> None:
    for route, p in res["a_data_path_modules"].items():
        m = res["a_merge_candidates"][route]
        print(f"real (a) {route} reward: {p['count']} modules on its path (over 12 by {m['over_12_by']})")
        for mod in p["modules"]:
            print("    ", mod)
        for step in m["in_order"]:
            print(f"   could merge {step['merge']} into {step['into']} -> {step['count_after']}")
    print("real (b) project modules per group:", {r: v["count"] for r, v in res["b_modules_per_group"].items()})
    print("real (c) wrapper -> CorrectionLoop calls per group:",
          {r: v["calls"] for r, v in res["c_wrapper_to_loop_calls_per_group"].items()},
          "plan_step per step:", res["plan_step_calls_per_step"])
    print("seconds:", res["seconds"])


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stand-in-only", action="store_true",
                    help="walk the KnownTruth stand-in only (seconds) and print it; results/ is not written")
    args = ap.parse_args()
    if args.stand_in_only:
        _print_stand_in(stand_in_main())
        sys.exit(0)
    torch.set_num_threads(1)
    res = main()
    path = ROOT / "results" / "reward_walk.json"
    path.write_text(json.dumps(res, indent=1) + "\n")
    _print_real(res["real"])
    _print_stand_in(res["stand_in"])
    print(f"wrote {path}")
