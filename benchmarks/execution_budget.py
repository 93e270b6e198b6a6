"""``execution_budget`` of ``anchor_fraction="auto"``: how far past its budget does a run go?

A simulation on the library's own objects (issue 25, finding 4). Each run trains with
``anchor_fraction="auto"`` (start fraction 0.5, f_max 0.5), an ``execution_budget`` and
``on_budget_spent="stop"`` until :class:`~wmrl_envs.core.advisor.ExecutionBudgetSpent` ends it,
and reports the real executions it made beyond the budget, in groups (one group = what an
anchor group executes). Scenarios:

* ``outcome-1``: :class:`~wmrl_envs.AnchoredWorldModelWrapper`, outcome mode, one turn per
  episode (one execution per rollout);
* ``outcome-4``: the same with 4 turns per episode (an anchor group of G = 4 executes 16 times);
* ``reward-4``: reward mode, 4 steps per episode (every episode executes, whatever its route);
* ``vector-<lanes>``: :class:`~wmrl_envs.AnchoredWorldModelVectorWrapper` in reward mode with
  ``<lanes>`` lanes of G rollouts × 4 steps (a ``TimeLimit``): every lane opens its group before
  any group has closed, so the budget counts them at their prior cost (G × the step limit);
* ``plain-<lanes>``: the same on a plain ``SyncVectorEnv`` (no RoutedSubEnv; issue 37: its
  executions were recorded without a ticket, and with 2+ lanes no group was credited any);
* ``varvector-<lanes>``, ``varplain-<lanes>``: the ``vector``/``plain`` scenarios with episodes of
  variable length (:class:`Geometric`: each step ends the episode with probability 0.3, a
  20-step ``TimeLimit``; the members of a lane run out of step). Before the review of issue 37 a
  member that finished early opened its lane's next group priced at the step limit (G × 20) and the
  budget was declared spent while the first groups were in flight: 16 executions, none credited,
  on 4 plain lanes at a budget of 400. Now a routed lane whose group does not fit waits
  (placeholder steps) until the groups in flight close; plain lanes never wait (their sub-envs
  execute anyway) and the run stops before the first vector step the budget cannot pay;
* ``shared-<n>``: ``n`` per-episode wrappers in reward mode (4 steps) sharing one loop, their
  episodes interleaved (a group open in each at once);
* ``late``: a bare :class:`~wmrl_envs.core.CorrectionLoop` whose anchor groups close one step
  after they were opened (the Ray scorer's late anchors: executions in flight at the next plan).

Each row also gives ``credited``: the share of the executions that the closed groups were
credited with (what the budget prices a group from; 1.0 when every execution names its group;
below 1 where groups in flight were abandoned at the stop, as on plain vector envs).

``--accounting legacy`` replays the accounting before issue 25 (an anchor group costs G
executions, world-model groups nothing, groups in flight nothing) for comparison. The figures
before issue 37 come from the same script run on the code before it (``PYTHONPATH`` pointing
at a checkout of that commit): ``results/execution_budget_before_37.json``; those of the
variable-length scenarios before the review of issue 37 (the code at aae04a3):
``results/execution_budget_before_37_review.json`` (``--scenarios varvector-4 ... varplain-16``).

Run (figures in ``docs/method.md``, "Adaptive anchor fraction")::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/execution_budget.py --seeds 10 --out results/execution_budget.json
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/execution_budget.py --seeds 10 --accounting legacy \
        --out results/execution_budget_legacy.json
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from wmrl_envs.world_models import Trajectory
from wmrl_envs.world_models.base import WorldModelPrediction

__all__ = ["main", "run_one", "Turns", "TurnWM", "NoisyTarget", "RandomWM"]

G = 4


class Turns(gym.Env):
    """``turns`` turns an episode; each turn's reward (the real score) is its action, 0 or 1."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, turns: int = 4):
        self.turns = turns

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return 0, {}

    def step(self, action):
        self.t += 1
        return 0, float(action), self.t >= self.turns, False, {}


class TurnWM:
    """The world model of :class:`Turns`: a turn's action plus ``offset``; a whole trajectory
    scores its length."""

    def __init__(self, offset: float = 0.0):
        self.offset = offset

    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=float(len(a)) if isinstance(a, Trajectory) else float(a) + self.offset)
                for a in actions]


class NoisyTarget(gym.Env):
    """Reward mode: a target in [-1, 1] drawn at reset; a step's reward is −(a − target)² plus
    N(0, 0.3²) noise; never ends by itself (wrap it in a ``TimeLimit``)."""

    observation_space = gym.spaces.Box(-10, 10, (1,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target = float(self.np_random.uniform(-1, 1))
        return np.array([self.target], np.float32), {}

    def step(self, a):
        r = -(float(a[0]) - self.target) ** 2 + float(self.np_random.normal(0, 0.3))
        return np.array([self.target], np.float32), r, False, False, {}


class Geometric(gym.Env):
    """Reward mode with episodes of variable length: each step ends the episode with probability
    0.3 (wrap it in a ``TimeLimit``); a step's reward is the action plus N(0, 1) noise."""

    observation_space = gym.spaces.Box(-10, 10, (1,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, a):
        r = float(a[0]) + float(self.np_random.normal())
        return np.zeros(1, np.float32), r, bool(self.np_random.random() < 0.3), False, {}


class RandomWM:
    """A world model without signal: uniform [0, 1) scores from its own ``seed``."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=float(self.rng.random())) for _ in actions]


def _legacy(loop: Any) -> None:
    """Make ``loop``'s adaptive fraction count the budget as before issue 25."""
    a = loop.adaptive
    step = a.step

    def legacy_step(step_i, advisor, ledger, calibrate=None, **_ignored):
        return step(step_i, advisor, ledger, calibrate)  # anchor group = G, no world-model cost, nothing in flight

    a.step = legacy_step
    loop._check_budget_at_open = lambda route: None  # nor did opening a group check the budget


def _credited(loop: Any) -> float:
    """Executions credited to the closed training groups (what the budget prices a group from)."""
    ge = loop.adaptive.group_executions
    return float(sum(v[0] for v in ge.values()))


def _wrapper_run(mode: str, turns: int, budget: int, groups: int, seed: int, legacy: bool
                 ) -> tuple[int, float, float]:
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.core import CorrectionConfig
    from wmrl_envs.core.adaptive import ExecutionBudgetSpent

    cfg = CorrectionConfig(anchor_fraction="auto", cost_ratio=0.01, f_max=0.5, auto_start_fraction=0.5,
                           execution_budget=budget, on_budget_spent="stop")
    env = AnchoredWorldModelWrapper(Turns(turns), TurnWM(0.1), group_size=G, mode=mode, groups_per_step=groups,
                                    episode_steps=turns, correction=cfg, seed=seed)
    if legacy:
        _legacy(env.loop)
    rng = np.random.default_rng(seed)
    try:
        for _ in range(10_000):
            env.plan_step(groups)
            for _ in range(groups * G):
                env.reset()
                done = False
                while not done:
                    _, _, term, trunc, _ = env.step(int(rng.integers(0, 2)))
                    done = term or trunc
    except ExecutionBudgetSpent:
        pass
    return env.loop.ledger.count("execution"), float(G * turns), _credited(env.loop)


def _shared_run(n: int, budget: int, groups: int, seed: int, legacy: bool, turns: int = 4) -> tuple[int, float, float]:
    """``n`` per-episode wrappers in reward mode sharing one loop, their episodes interleaved."""
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.core import CorrectionConfig, CorrectionLoop
    from wmrl_envs.core.adaptive import ExecutionBudgetSpent

    cfg = CorrectionConfig(anchor_fraction="auto", cost_ratio=0.01, f_max=0.5, auto_start_fraction=0.5,
                           execution_budget=budget, on_budget_spent="stop")
    loop = CorrectionLoop(cfg, world_model=TurnWM(0.1), groups_per_step=groups, seed=seed)
    if legacy:
        _legacy(loop)
    envs = [AnchoredWorldModelWrapper(Turns(turns), None, group_size=G, mode="reward", loop=loop) for _ in range(n)]
    rng = np.random.default_rng(seed)
    try:
        for _ in range(10_000):
            for e in envs:
                e.reset()
            for _ in range(turns):
                for e in envs:
                    e.step(int(rng.integers(0, 2)))
    except ExecutionBudgetSpent:
        pass
    return loop.ledger.count("execution"), float(G * turns), _credited(loop)


def _vector_run(lanes: int, budget: int, groups: int, seed: int, legacy: bool, turns: int = 4,
                plain: bool = False, variable: bool = False) -> tuple[int, float, float]:
    """Reward mode, ``lanes`` groups at a time on a vector env (sub-envs with a 4-step TimeLimit;
    ``variable``: :class:`Geometric` with a 20-step TimeLimit, without ``task_fn``);
    ``plain``: a ``SyncVectorEnv`` without RoutedSubEnv (and without ``task_fn``, which needs it)."""
    from wmrl_envs.core import CorrectionConfig
    from wmrl_envs.core.adaptive import ExecutionBudgetSpent
    from wmrl_envs.wrappers import AnchoredWorldModelVectorWrapper, make_vector_env

    cfg = CorrectionConfig(anchor_fraction="auto", cost_ratio=0.01, f_max=0.5, auto_start_fraction=0.5,
                           execution_budget=budget, on_budget_spent="stop")
    if variable:
        fn = lambda: gym.wrappers.TimeLimit(Geometric(), 20)  # noqa: E731
    else:
        fn = lambda: gym.wrappers.TimeLimit(NoisyTarget(), turns)  # noqa: E731
    venv = gym.vector.SyncVectorEnv([fn] * (G * lanes)) if plain else make_vector_env(fn, G * lanes)
    kw: dict[str, Any] = {} if plain or variable else {"task_fn": lambda lane, rnd: (1000 * lane + rnd, None)}
    w = AnchoredWorldModelVectorWrapper(venv, RandomWM(seed), group_size=G, mode="reward", groups_per_step=groups,
                                        correction=cfg, seed=seed, **kw)
    if legacy:
        _legacy(w.loop)
    rng = np.random.default_rng(seed)
    try:
        w.reset(seed=seed)
        for _ in range(100_000):
            w.step(rng.uniform(-1, 1, (G * lanes, 1)).astype(np.float32))
    except ExecutionBudgetSpent:
        pass
    # one group's executions: G x the mean episode length (variable: 1 / 0.3, the 20-step limit aside)
    return w.loop.ledger.count("execution"), float(G / 0.3 if variable else G * turns), _credited(w.loop)


def _late_run(budget: int, groups: int, seed: int, legacy: bool) -> tuple[int, float, float]:
    """Anchor groups close one step after they were opened (executions recorded at close)."""
    from wmrl_envs.core import CorrectionConfig, CorrectionLoop
    from wmrl_envs.core.adaptive import ExecutionBudgetSpent
    from wmrl_envs.world_models.base import WorldModelPrediction

    class WM:
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=0.0) for _ in actions]

    cfg = CorrectionConfig(anchor_fraction="auto", cost_ratio=0.01, f_max=0.5, auto_start_fraction=0.5,
                           execution_budget=budget, on_budget_spent="stop")
    loop = CorrectionLoop(cfg, world_model=WM(), groups_per_step=groups, seed=seed)
    if legacy:
        _legacy(loop)
    rng = np.random.default_rng(seed)
    running: list[Any] = []

    def finish(t: Any) -> None:
        loop.record_execution(1.0, G, cpu_seconds=1.0, ticket=t)
        z = rng.normal(size=G)
        loop.close_group(t, list(z + rng.normal(size=G)), list(z))

    try:
        for _ in range(10_000):
            routes = loop.plan_step()
            late = running
            running = []
            for _ in routes:
                t = loop.open_group()
                if t.route == "anchor":
                    running.append(t)  # submitted: it executes while the next step is planned
                else:
                    loop.close_group(t, [0.0] * G, None)
            for t in late:
                finish(t)
    except ExecutionBudgetSpent:
        for t in running:  # what was submitted still executes
            finish(t)
    return loop.ledger.count("execution"), float(G), _credited(loop)


def run_one(scenario: str, budget: int, groups: int, seed: int, legacy: bool) -> dict[str, Any]:
    """One run; returns the executions, the budget, the overrun in groups and the share of the
    executions credited to the closed groups."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        kind, _, arg = scenario.partition("-")
        if scenario == "late":
            used, group, credited = _late_run(budget, groups, seed, legacy)
        elif kind in ("vector", "plain", "varvector", "varplain"):
            used, group, credited = _vector_run(int(arg), budget, groups, seed, legacy, plain=kind.endswith("plain"),
                                                variable=kind.startswith("var"))
        elif kind == "shared":
            used, group, credited = _shared_run(int(arg), budget, groups, seed, legacy)
        else:
            used, group, credited = _wrapper_run(kind, int(arg), budget, groups, seed, legacy)
    return {"scenario": scenario, "budget": budget, "groups": groups, "seed": seed, "executions": used,
            "over_budget_groups": (used - budget) / group, "credited": credited / used if used else float("nan")}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Simulate, print the table, write ``--out``; returns the JSON written."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budgets", type=int, nargs="+", default=[100, 400])
    ap.add_argument("--groups", type=int, nargs="+", default=[10, 20], help="groups per step")
    ap.add_argument("--scenarios", nargs="+", default=["outcome-1", "outcome-4", "reward-4", "late", "vector-4", "vector-8",
                                                        "vector-16", "plain-4", "plain-8", "plain-16", "varvector-4",
                                                        "varvector-8", "varvector-16", "varplain-4", "varplain-8",
                                                        "varplain-16", "shared-2"])
    ap.add_argument("--accounting", choices=["current", "legacy"], default="current")
    ap.add_argument("--out", default="results/execution_budget.json")
    args = ap.parse_args(argv)
    t0 = time.time()
    rows = []
    print(f"execution budget, on_budget_spent='stop', G = {G}, {args.accounting} accounting: executions beyond the "
          "budget in groups (one anchor group's executions); median and max over seeds")
    for sc in args.scenarios:
        for b in args.budgets:
            for n in args.groups:
                runs = [run_one(sc, b, n, s, args.accounting == "legacy") for s in range(args.seeds)]
                over = [r["over_budget_groups"] for r in runs]
                credited = [r["credited"] for r in runs]
                rows.append({"scenario": sc, "budget": b, "groups_per_step": n, "median_over_groups": float(np.median(over)),
                             "max_over_groups": float(np.max(over)),
                             "median_executions": float(np.median([r["executions"] for r in runs])),
                             "min_executions": float(np.min([r["executions"] for r in runs])),
                             "max_executions": float(np.max([r["executions"] for r in runs])),
                             "median_credited": float(np.nanmedian(credited)) if not np.all(np.isnan(credited)) else None})
                cr = rows[-1]["median_credited"]
                print(f"  {sc:10s} budget {b:4d}, {n:2d} groups/step: executions {rows[-1]['median_executions']:.0f} "
                      f"(median; {rows[-1]['min_executions']:.0f}-{rows[-1]['max_executions']:.0f}); over budget "
                      f"{rows[-1]['median_over_groups']:+.2f} groups (median), {rows[-1]['max_over_groups']:+.2f} (max); "
                      f"credited {'-' if cr is None else f'{cr:.2f}'}")
    worst = max(r["max_over_groups"] for r in rows)
    print(f"worst overrun: {worst:+.2f} groups; {time.time() - t0:.0f} s")
    result = {"settings": {k: v for k, v in vars(args).items() if k != "out"}, "rows": rows, "worst_over_groups": worst}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
