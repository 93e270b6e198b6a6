"""One method, one seed of ``wmrl bench``: :func:`run_method` trains the agent under one method
(the one GRPO group step, :func:`agents.grpo.group_step`) and snapshots it after every step;
:func:`evaluate_snapshot` measures a snapshot's held-out avg@k with real execution; which
snapshots to evaluate (:func:`select_snapshots`, :func:`coarse_eval_steps`, :func:`refinement_step`)."""

from __future__ import annotations

import math
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from agents.protocol import BenchAgent

from .bench_config import BenchConfig
from .methods import COST_SOURCES, MethodSpec, method_correction

__all__ = ["StepRecord", "MethodRun", "run_method", "select_snapshots", "evaluate_snapshot", "coarse_eval_steps", "refinement_step",
           "bracket_refinement_step"]


@dataclass
class StepRecord:
    """One training step of one method and seed (cumulative figures)."""

    step: int
    compute_cpu_s: float
    """Training compute so far in CPU-seconds: the ledger's CPU-seconds of execution (the sandboxed
    process trees), world model, generation and update (:data:`COST_SOURCES`)."""
    compute_wall_s: float
    """Wall-clock seconds of the training loop so far (beside the CPU figure; depends on load)."""
    seconds: dict[str, float]
    """Wall-clock seconds per cost source."""
    cpu_seconds: dict[str, float]
    """CPU-seconds per cost source."""
    rho: float
    disagreement_ema: float | None
    calibration_mae_raw: float | None
    calibration_mae_calibrated: float | None
    reward_mean: float | None
    executions: int
    anchor_groups: int
    realised_anchor_fraction: float = 0.0
    """Share of the groups routed so far that were anchor groups."""
    anchor_fraction: float = 0.0
    """The anchor fraction in force at this step (it moves with ``--anchor-fraction auto``)."""
    cpu_unmeasured: int = 0
    """Executions so far whose CPU-seconds the sandbox could not measure (not in ``compute_cpu_s``:
    the compute is then understated, and the report says so)."""
    ungraded: int = 0
    """Ungraded rollouts so far (training; the machinery failed), cumulative."""
    ungraded_by_cause: dict[str, int] = field(default_factory=dict)
    execution_cpu_s_live: float | None = None
    """With an execution cost model (``--execution-cost-model``): the measured CPU-seconds of the
    executions it charged so far (``cpu_seconds["execution"]`` holds what was charged); None without one."""
    world_model_refits: int = 0
    """Refits so far of a world model that learns in the run (its ``n_refits``; 0 for a frozen one)."""


@dataclass
class MethodRun:
    method: str
    seed: int
    records: list[StepRecord] = field(default_factory=list)
    snapshots: list[Any] = field(default_factory=list)  # snapshots[i] = policy after step i (0 = initial)
    stopped: str = "steps"
    """Why training stopped: ``"target"`` (an evaluated snapshot reached the stop target),
    ``"compute budget"`` (it reached real GRPO's compute to that target), ``"step cap"``
    (``max_steps``, the safeguard, came first); ``"steps"`` in runs from before issue 35."""
    ungraded: dict[str, Any] = field(default_factory=dict)  # the wrapper's UngradedMonitor.stats()

    def compute_at(self, step: int) -> float:
        """Training compute (CPU-seconds) after ``step`` steps (0.0 for the initial policy)."""
        return 0.0 if step == 0 else self.records[step - 1].compute_cpu_s

    def wall_at(self, step: int) -> float:
        """Wall-clock seconds of training after ``step`` steps (0.0 for the initial policy)."""
        return 0.0 if step == 0 else self.records[step - 1].compute_wall_s


def _mean(xs: Sequence[float | None]) -> float | None:
    v = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.mean(v)) if v else None


def run_method(
    spec: MethodSpec,
    seed: int,
    cfg: BenchConfig,
    make_agent: Callable[[int], BenchAgent],
    make_env: Callable[[], Any],
    world_model: Any | None,
    train_tasks: Sequence[str],
    *,
    max_steps: int,
    compute_budget_s: float | None = None,
    progress: Callable[[str], None] | None = None,
    noise_scale: Any | None = None,
    groups_per_step: int | None = None,
    checkpoint: Callable[[MethodRun], bool] | None = None,
) -> MethodRun:
    """Train one method with one seed; snapshot the policy after every step.

    Every call starts with cold world-model caches (:meth:`SentenceEncoder.clear_shared_caches`):
    its world-model CPU does not depend on which methods or seeds ran before it in the process.

    Stops after ``max_steps`` steps or once the cumulative compute reaches
    ``compute_budget_s`` (seconds; ``None`` = no compute stop). With ``noise_scale`` (a
    :class:`wmrl_envs.core.GradientNoiseScale`) every step's per-group policy gradients
    (:func:`agents.grpo.group_gradient_moments`, on the agent's ``policy``) are added to it before
    the update; that measurement is charged to no cost source and left out of the wall-clock.
    ``groups_per_step`` (default ``cfg.groups_per_step``) is the groups sampled per step.
    ``checkpoint`` (``run -> stop?``) is called after every step, once its record and snapshot are
    in ``run``; ``True`` stops training there (``run.stopped = "target"``: ``wmrl bench`` evaluates
    the snapshot and stops a method once it reaches the target, issue 35, item 1). Its own time is
    not training compute and is left out of the wall-clock.

    Returns:
        A :class:`MethodRun` with per-step records (cumulative compute in seconds, ρ,
        calibration errors) and ``max_steps + 1`` or fewer snapshots.
    """
    from agents.grpo import group_batch, group_step
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.core import GENERATION, UPDATE

    from wmrl_envs.envs.autoresearch.sentence_encoder import SentenceEncoder

    n_groups = int(cfg.groups_per_step if groups_per_step is None else groups_per_step)
    # every method and seed pays cold: no embedding computed (and charged) by an earlier method or
    # seed of this process is reused (issue 35, item 2)
    SentenceEncoder.clear_shared_caches()
    env = make_env()
    extra_envs = [make_env() for _ in range(max(0, cfg.exec_parallel - 1))]
    with warnings.catch_warnings():  # world model only has no anchors by design: the loop's warning is for users
        warnings.filterwarnings("ignore", message="anchor_fraction=0: every training group", category=UserWarning)
        wrapper = AnchoredWorldModelWrapper(
            env, world_model if spec.world_model else None, group_size=cfg.group_size,
            groups_per_step=n_groups, correction=method_correction(spec, cfg.correction), seed=seed,
            execution_envs=extra_envs, max_ungraded_share=cfg.max_ungraded_share,
            world_model_timeout_s=cfg.world_model_timeout_s,
        )
    agent = make_agent(seed)
    rng = np.random.default_rng(10_000 + seed)
    run = MethodRun(spec.name, seed, snapshots=[agent.snapshot()])
    ledger = wrapper.loop.ledger
    wall = 0.0
    for step in range(1, max_steps + 1):
        t0 = time.perf_counter()
        wrapper.plan_step(n_groups)
        tasks = [str(t) for t in rng.choice(list(train_tasks), size=n_groups, replace=n_groups > len(train_tasks))]
        with ledger.timed(GENERATION, count=n_groups * cfg.group_size):
            actions, handle = agent.sample(tasks, cfg.group_size)
        groups = [wrapper.score_group(a, options={"task_id": t}) for t, a in zip(tasks, actions)]
        batch = group_batch([g.rewards for g in groups], [g.advantage_weight for g in groups], agent.update_config)
        measured_s = 0.0
        if noise_scale is not None and len(groups) >= 2:
            from agents.grpo import group_gradient_moments

            t1 = time.perf_counter()
            noise_scale.add_step(*group_gradient_moments(agent.policy, handle, batch.row_index, batch.advantages,
                                                         batch.group_index, len(groups)))
            measured_s = time.perf_counter() - t1
        with ledger.timed(UPDATE):  # the one GRPO group step (no optimiser step when no row is kept)
            group_step(agent.policy, agent.optimizer, handle, batch, config=agent.update_config)
        wall += time.perf_counter() - t0 - measured_s
        cpu = float(sum(ledger.cpu_seconds(s) for s in COST_SOURCES))
        stats = wrapper.loop.stats()  # one snapshot: ρ, corrections, routing, ungraded counts
        run.records.append(StepRecord(
            step=step,
            compute_cpu_s=cpu,
            compute_wall_s=wall,
            seconds={s: ledger.seconds(s) for s in COST_SOURCES},
            cpu_seconds={s: ledger.cpu_seconds(s) for s in COST_SOURCES},
            rho=stats["rho"] if spec.denoise else stats["denoiser_rho"],
            disagreement_ema=stats["disagreement_ema"],
            calibration_mae_raw=stats["calibration_mae_raw"],
            calibration_mae_calibrated=stats["calibration_mae_calibrated"],
            reward_mean=_mean([r for g in groups for r in g.rewards]),
            executions=stats["executions"],
            anchor_groups=stats["anchor_groups_routed"],
            realised_anchor_fraction=stats["realised_anchor_fraction"],
            anchor_fraction=stats["anchor_fraction"],
            cpu_unmeasured=ledger.cpu_unmeasured("execution"),
            ungraded=stats["ungraded_rollouts"],
            ungraded_by_cause=stats["ungraded_by_cause"],
            world_model_refits=int(getattr(world_model, "n_refits", 0) or 0) if spec.world_model else 0,
            execution_cpu_s_live=(float(sum(getattr(e, "live_cpu_s", 0.0) for e in (env, *extra_envs)))
                                  if any(hasattr(e, "live_cpu_s") for e in (env, *extra_envs)) else None),
        ))
        run.snapshots.append(agent.snapshot())
        if progress:
            rm = run.records[-1].reward_mean
            progress(f"{spec.name} seed {seed} step {step}: compute {cpu:.0f} CPU-s reward "
                     f"{rm if rm is None else round(rm, 3)} rho {run.records[-1].rho:.2f}")
        if checkpoint is not None and checkpoint(run):
            run.stopped = "target"
            break
        if compute_budget_s is not None and cpu >= compute_budget_s:
            run.stopped = "compute budget"
            break
    else:
        run.stopped = "step cap"
    for e in (env, *extra_envs):
        e.close()
    run.ungraded = wrapper.loop.ungraded.stats()
    return run


def select_snapshots(run: MethodRun, steps: int, budgets: dict[str, float]) -> dict[str, int]:
    """Which snapshot to evaluate for each comparison point.

    Args:
        run: the method's run.
        steps: the equal-steps budget S.
        budgets: name -> compute budget in seconds (e.g. ``{"compute_wmrl": .., "compute_real": ..}``).

    Returns:
        ``{"steps": i, name: j, ...}`` snapshot indices: at step ``min(S, last)``, and the last
        step whose cumulative compute is within each budget (0 = the initial policy).

    Example:
        >>> r = MethodRun("m", 0, [StepRecord(i, 10.0 * i, 12.0 * i, {}, {}, 1, None, None, None, None, 0, 0) for i in (1, 2, 3)])
        >>> select_snapshots(r, 2, {"c": 25.0})
        {'steps': 2, 'c': 2}
    """
    last = len(run.records)
    out = {"steps": min(steps, last)}
    for name, b in budgets.items():
        j = 0
        for rec in run.records:
            if rec.compute_cpu_s <= b * 1.0001:
                j = rec.step
        out[name] = j
    return out


def evaluate_snapshot(
    agent: BenchAgent,
    snap: Any,
    heldout_tasks: Sequence[str],
    k: int,
    sandbox: Any,
    parallel: int = 2,
    eval_seed: int | None = None,
    max_ungraded_share: float | None = 0.5,
    cache: dict[tuple[str, str], Any] | None = None,
    draws: int | None = None,
) -> dict[str, Any]:
    """Held-out avg@k of one snapshot with real execution (``parallel`` runs at a time).

    ``draws`` (>= k; default k) trajectories are sampled per task and avg@k is estimated from
    them without bias (:func:`agents.train.evaluation.avg_at_k_estimate`: the mean best over all
    subsets of k), which has a lower variance than one draw of k.

    With ``cache`` (a dict shared by the evaluations of one benchmark), a (task id, program
    source) pair already executed is not executed again: its grade is reused. This is sound
    because a program's source carries its ``random_state``, so the same source on the same task
    gives the same result (up to time-outs, which depend on the machine's load: they are not
    cached, nor are ungraded outcomes); held-out evaluation is not training compute, and training
    executions are never cached. Without ``cache`` every trajectory is executed. ``res["executed"]`` / ``res["cached"]`` count both kinds.

    With ``eval_seed`` the agent's sampling stream is reset before sampling, so every snapshot
    of every method of one bench seed is evaluated on the same random draws (common random
    numbers: score differences then come from the policies, not from the draws).

    A trajectory whose execution fails in the machinery (``SandboxUnavailableError``) is
    ungraded: left out of avg@k and the mean score, counted in ``"ungraded"`` (by cause) and
    warned about; a task with fewer graded draws than k is scored from the draws it has, and a
    task with no graded trajectory is left out (``res["tasks_left_out"]``).

    Raises:
        TooManyUngradedError: at least ``max_ungraded_share`` of the trajectories are ungraded.
    """
    import logging

    from agents.train.evaluation import avg_at_k_estimate
    from wmrl_envs.core.ungraded import SANDBOX_UNAVAILABLE, TooManyUngradedError
    from wmrl_envs.envs.autoresearch.env import evaluate as run_solution
    from wmrl_envs.envs.autoresearch.tasks import get_task
    from wmrl_envs.sandbox.base import SandboxUnavailableError

    agent.restore(snap)
    if eval_seed is not None:
        agent.reseed(eval_seed)
    n_draws = k if draws is None else int(draws)
    if n_draws < k:
        raise ValueError(f"draws must be >= k (trajectories per task from which avg@{k} is estimated), got {n_draws}")
    actions, _ = agent.sample(list(heldout_tasks), n_draws)
    jobs = [(t, a) for t, acts in zip(heldout_tasks, actions) for a in acts]

    def run(job: tuple[str, str]) -> Any:
        try:
            return run_solution(job[0], job[1], sandbox)[0]
        except SandboxUnavailableError as exc:  # the machinery failed: not the agent's score
            return f"{type(exc).__name__}: {exc}"

    if cache is None:  # every trajectory is executed
        todo = list(jobs)
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            outcomes = list(pool.map(run, todo))
    else:
        todo = [j for j in dict.fromkeys(jobs) if j not in cache]
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            done = dict(zip(todo, pool.map(run, todo)))
        # neither an ungraded outcome (str) nor a time-out (it depends on the machine's load) is
        # cached: they are executed again next time
        cache.update({j: g for j, g in done.items() if not isinstance(g, str) and not getattr(g, "timed_out", False)})
        outcomes = [done[j] if j in done else cache[j] for j in jobs]
    positions: dict[str, list[float | None]] = {t: [] for t in heldout_tasks}
    grades, errors = [], []
    for (t, _), g in zip(jobs, outcomes):
        if isinstance(g, str):
            errors.append(g)
            continue
        grades.append(g)
        positions[t].append(g.position if g.status == "valid" else None)
    if errors:
        logging.getLogger(__name__).warning(
            "held-out evaluation: %d of %d trajectories ungraded (%s): %s", len(errors), len(jobs), SANDBOX_UNAVAILABLE,
            errors[-1],
        )
        if max_ungraded_share is not None and len(errors) >= max_ungraded_share * len(jobs):
            raise TooManyUngradedError(len(errors), len(jobs), max_ungraded_share, {SANDBOX_UNAVAILABLE: len(errors)},
                                       {SANDBOX_UNAVAILABLE: errors[-1]})
    graded = {t: p for t, p in positions.items() if p}
    left_out = sorted(set(heldout_tasks) - set(graded))
    overall, per_cat, per_task = avg_at_k_estimate(graded, {t: get_task(t).category for t in heldout_tasks}, k)
    res: dict[str, Any] = {"overall": overall, "per_category": per_cat, "per_task": per_task}
    res["mean_score"] = float(np.mean([g.score for g in grades]))
    res["ungraded"] = {SANDBOX_UNAVAILABLE: len(errors)} if errors else {}
    res["executed"], res["cached"] = len(todo), len(jobs) - len(todo)
    res["tasks_left_out"] = left_out  # every draw ungraded: not in avg@k (the report says so)
    return res


def coarse_eval_steps(last: int, n_points: int) -> list[int]:
    """The snapshots a curve is first evaluated at: ``n_points`` step indices spread evenly over
    0..``last`` (both included), rounded, without repeats.

    Example:
        >>> coarse_eval_steps(12, 5)
        [0, 3, 6, 9, 12]
        >>> coarse_eval_steps(2, 5)
        [0, 1, 2]
    """
    if last < 0 or n_points < 2:
        raise ValueError(f"need last >= 0 and n_points >= 2, got last={last}, n_points={n_points}")
    return sorted({int(round(x)) for x in np.linspace(0, last, n_points)})


def refinement_step(steps: Sequence[int], scores: Sequence[float], target: float) -> int | None:
    """The next snapshot to evaluate so that a curve's compute-to-target is read closer to
    where it crosses ``target``: the middle step of the first evaluated interval
    ``(steps[i], steps[i+1])`` with ``scores[i] < target <= scores[i+1]`` (the interval
    :func:`agents.experiments.speedup.compute_to_target` interpolates in), or ``None`` when that
    interval has no step inside it or the curve never crosses.

    Example:
        >>> refinement_step([0, 4, 8], [10.0, 20.0, 40.0], 30.0)
        6
        >>> refinement_step([0, 1, 8], [10.0, 35.0, 40.0], 30.0) is None
        True
    """
    order = np.argsort(steps)
    st = [int(steps[i]) for i in order]
    sc = [float(scores[i]) for i in order]
    if sc and sc[0] >= target:
        return None
    for (a, b), (sa, sb) in zip(zip(st, st[1:]), zip(sc, sc[1:])):
        if sa < target <= sb:
            return (a + b) // 2 if b - a > 1 else None
    return None


def bracket_refinement_step(steps: Sequence[int], scores: Sequence[float], compute: Sequence[float], target: float,
                            max_share: float) -> int | None:
    """The next snapshot to evaluate so that the interpolation bracket of a curve's
    compute-to-target shrinks to at most ``max_share`` of it (issue 27), or ``None`` when it
    already has, is one step wide (the finest per-step snapshots allow), or the curve never
    crosses.

    The bracket is the first evaluated interval ``(a, b)`` with ``scores[a] < target <= scores[b]``
    (the one :func:`agents.experiments.speedup.compute_to_target` interpolates in); its share is
    ``(compute[b] - compute[a]) / ctt`` with ``ctt`` the interpolated compute-to-target
    (:func:`agents.experiments.speedup.bracket_share`). The step proposed is the one whose compute
    is nearest ``ctt`` (where the crossing is expected), kept in the middle half of the bracket
    (``[a + w//4, b - w//4]``, at least one step from each end, ``w = b - a``), so each evaluation
    leaves at most about three quarters of the bracket: a 30-step bracket is one step wide after at
    most 10 evaluations, usually 2–4 on a smooth curve.

    Args:
        steps: evaluated step indices (any order); scores: their held-out scores, in that order.
        compute: cumulative training CPU-seconds after every step ``0..last`` (``compute[k]`` is
            that of step ``k``; length at least ``max(steps) + 1``).
        target: the score to reach.
        max_share: the largest bracket share left alone, ``> 0``.

    Raises:
        ValueError: ``max_share <= 0`` or ``compute`` shorter than the steps need.

    Example:
        >>> c = [10.0 * k for k in range(31)]
        >>> bracket_refinement_step([0, 15, 30], [20.0, 50.0, 60.0], c, 40.0, 0.1)   # ctt 100 CPU-s: step 10
        10
        >>> bracket_refinement_step([0, 10, 11, 30], [20.0, 39.0, 41.0, 60.0], c, 40.0, 0.1) is None   # one step
        True
    """
    if not max_share > 0:
        raise ValueError(f"max_share must be a share > 0 of the compute-to-target (e.g. 0.1), got {max_share!r}")
    order = np.argsort(steps)
    st = [int(steps[i]) for i in order]
    sc = [float(scores[i]) for i in order]
    if st and len(compute) <= st[-1]:
        raise ValueError(f"compute has {len(compute)} values but the curve has step {st[-1]}: give the "
                         "compute after every step 0..last")
    if not sc or sc[0] >= target:
        return None
    for (a, b), (sa, sb) in zip(zip(st, st[1:]), zip(sc, sc[1:])):
        if sa < target <= sb:
            if b - a <= 1:
                return None
            ca, cb = float(compute[a]), float(compute[b])
            ctt = ca + (target - sa) / (sb - sa) * (cb - ca)
            if cb - ca <= max_share * ctt:
                return None
            w = b - a
            lo, hi = a + max(1, w // 4), b - max(1, w // 4)
            guess = min(range(a + 1, b), key=lambda k: (abs(float(compute[k]) - ctt), k))
            return min(max(guess, lo), hi)
    return None
