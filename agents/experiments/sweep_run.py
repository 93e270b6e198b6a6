"""One run of the known-truth sweep: the tabular softmax policy (:class:`TabularSoftmaxPolicy`),
the known-truth env and world model, and :func:`run_sweep_method` (one method, one world-model
level, one anchor fraction, one seed: the loop of :func:`agents.experiments.bench_run.run_method`
with the one GRPO group step); :func:`run_jobs` runs many in worker processes."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np


from .methods import COST_SOURCES
from .sweep_config import BREAKING, REAL_AT_F, SweepConfig

__all__ = ["TabularSoftmaxPolicy", "SweepRun", "make_env", "wm_error", "make_world_model", "run_sweep_method", "run_jobs",
           "map_in_processes"]


class TabularSoftmaxPolicy:
    """A softmax policy over actions per task (one logit per (task, action)), a :class:`agents.grpo.GRPOPolicy`.

    Args:
        n_tasks, n_actions: table size.
        seed: seed of the sampling generator (the logits start at 0: the uniform policy).

    ``sample(tasks, G)`` returns an int64 (len(tasks), G) array of actions and the samples handle
    ``(tasks (N,), actions (N,))`` flat, group after group; :meth:`grpo_logprobs` gives each
    row's one "token" log-probability.
    """

    def __init__(self, n_tasks: int, n_actions: int, seed: int = 0) -> None:
        import torch

        self.logits = torch.nn.Parameter(torch.zeros(n_tasks, n_actions, dtype=torch.float64))
        self._rng = np.random.default_rng([int(seed), 2718])

    def probs(self) -> np.ndarray:
        """Action probabilities, float64 (n_tasks, n_actions)."""
        x = self.logits.detach().numpy()
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def sample(self, tasks: np.ndarray, group_size: int) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """``group_size`` actions per task (see the class docstring)."""
        t = np.asarray(tasks, dtype=np.int64)
        cdf = np.cumsum(self.probs()[t], axis=1)
        u = self._rng.random((t.size, group_size))
        acts = np.minimum((u[:, :, None] > cdf[:, None, :]).sum(axis=2), cdf.shape[1] - 1).astype(np.int64)
        return acts, (np.repeat(t, group_size), acts.reshape(-1))

    def grpo_logprobs(self, samples: Any, rows: np.ndarray, *, reference: bool = False, with_entropy: bool = False):
        """Per-row log π(a|t) as a (B, 1) tensor, a (B, 1) mask of ones, and (B, 1) entropies or ``None``."""
        import torch

        tasks, actions = samples
        r = np.asarray(rows, dtype=np.int64)
        t, a = torch.as_tensor(tasks[r]), torch.as_tensor(actions[r])
        logp_all = torch.log_softmax(self.logits if not reference else self.logits.detach(), dim=1)[t]
        logp = logp_all.gather(1, a[:, None])
        ent = -(logp_all.exp() * logp_all).sum(dim=1, keepdim=True) if with_entropy else None
        return logp, torch.ones_like(logp), ent

    def trainable_parameters(self) -> list:
        """The logits."""
        return [self.logits]


@dataclass
class SweepRun:
    """One method, one world model, one fraction, one seed.

    Attributes:
        method, level, fraction, seed: the cell (``fraction`` ``None`` for real and wm_only).
        compute: cumulative training CPU-seconds at each snapshot (0 = the untrained policy).
        score: exact expected score of the policy at each snapshot.
        rho, mae_raw, mae_calibrated: ρ and the prequential calibration errors after each step.
        anchor_pearson: per step, the mean within-group Pearson of the step's anchor groups (NaN if none).
        executions, anchor_groups, predictions: totals (ledger's execution count, the router's
            anchor groups, the world model's predictions).
        correlation: within-group Pearson / Spearman over all anchor groups of the run.
        cpu_by_source: the ledger's CPU-seconds per source at the end.
        stop_reason: why training stopped: ``"target"`` (the score reached it), ``"compute
            budget"``, ``"step cap"`` (``max_steps`` came first) or ``"steps"`` (real GRPO's S
            steps, no target or budget given).
        max_steps: the run's step cap.
    """

    method: str
    level: str | None
    fraction: float | str | None
    seed: int
    compute: list[float] = field(default_factory=list)
    score: list[float] = field(default_factory=list)
    rho: list[float] = field(default_factory=list)
    mae_raw: list[float | None] = field(default_factory=list)
    mae_calibrated: list[float | None] = field(default_factory=list)
    anchor_pearson: list[float] = field(default_factory=list)
    anchor_fraction: list[float] = field(default_factory=list)
    """Per step, the anchor fraction in force (it moves for ``fraction="auto"``)."""
    blind_spot_mass: list[float] = field(default_factory=list)
    """At each snapshot, the policy's probability on the world model's blind-spot actions (mean
    over tasks; empty when the world model has none): how far the policy exploits them."""
    pooled_pearson: float = float("nan")
    """Pooled within-group Pearson of the run's anchor groups, world-model scores calibrated out of
    sample (:func:`wmrl_envs.core.advisor.crossfit_calibrated`): the advisor's r."""
    executions: int = 0
    anchor_groups: int = 0
    predictions: int = 0
    correlation: dict[str, float] = field(default_factory=dict)
    cpu_by_source: dict[str, float] = field(default_factory=dict)
    stop_reason: str = ""
    max_steps: int = 0
    noise_moments: list[tuple[float, float, int]] = field(default_factory=list)
    """Real-execution GRPO only: per step, the moments of its per-group policy gradients
    (:func:`agents.grpo.group_gradient_moments`), from which
    :class:`wmrl_envs.core.GradientNoiseScale` estimates the gradient noise scale."""


def make_env(cfg: SweepConfig, seed: int) -> Any:
    """The sweep's known-truth env for ``seed`` (its table of true scores is drawn from ``seed``)."""
    from wmrl_envs.envs.known_truth import KnownTruthEnv

    return KnownTruthEnv(cfg.n_tasks, cfg.n_actions, outcome_noise_std=cfg.outcome_noise_std,
                         execution_cost_s=cfg.execution_cost_s, table_seed=seed)


def wm_error(cfg: SweepConfig, level: str) -> Any:
    from wmrl_envs.envs.known_truth import WORLD_MODEL_ERRORS

    return replace(WORLD_MODEL_ERRORS[level], declared_cpu_s_per_prediction=cfg.wm_cost_s)


def make_world_model(cfg: SweepConfig, level: str, env: Any, seed: int) -> Any:
    """The sweep's world model of error ``level`` on ``env`` (``"breaking"``: one that switches
    from ``cfg.break_from`` to ``cfg.break_to`` after ``cfg.break_at_step`` steps)."""
    from wmrl_envs.envs.known_truth import BreakingWorldModel, KnownTruthWorldModel

    if level == BREAKING:
        return BreakingWorldModel(env, wm_error(cfg, cfg.break_from), wm_error(cfg, cfg.break_to),
                                  break_after=cfg.break_at_step * cfg.groups_per_step * cfg.group_size, seed=seed)
    return KnownTruthWorldModel(env, wm_error(cfg, level), seed=seed)


def run_sweep_method(
    method: str,
    level: str | None,
    fraction: float | str | None,
    seed: int,
    cfg: SweepConfig,
    *,
    max_steps: int,
    target: float | None = None,
    compute_budget_s: float | None = None,
) -> SweepRun:
    """Train one method on the known-truth env; evaluate the policy exactly after every step.

    The loop of :func:`agents.experiments.bench_run.run_method`: per step ``wrapper.plan_step``,
    ``groups_per_step`` tasks, the policy's G actions per task (charged to ``generation``),
    ``wrapper.score_group`` per group, :func:`agents.grpo.group_batch` and
    :func:`agents.grpo.group_step` (charged to ``update``). Stops after ``max_steps`` steps, once
    the exact score reaches ``target``, or once the compute reaches ``compute_budget_s``.

    Args:
        method: a name of :data:`agents.experiments.methods.METHODS`, or :data:`REAL_AT_F` (real
            GRPO with ``max(1, round(fraction × groups_per_step))`` groups per step).
        level: world-model quality (a :data:`WORLD_MODEL_ERRORS` name or :data:`BREAKING`);
            ``None`` for real.
        fraction: anchor fraction of the anchored methods (ignored by real and wm_only), or
            ``"auto"``: the adaptive fraction (``docs/method.md``, "Adaptive anchor fraction")
            with the declared cost ratio ``wm_cost_s / execution_cost_s`` as γ.
        seed: the seed (env table, world model, router, policy sampling, task draws).
        cfg: the sweep's settings.
        max_steps: the step cap.
        target: stop once the score reaches it (``None``: never).
        compute_budget_s: stop once the compute reaches it (``None``: never).

    Returns:
        A :class:`SweepRun` (``stop_reason`` says which of the three stopped it).

    Raises:
        RuntimeError: the ledger did not charge the declared execution or world-model costs
            (the sweep's compute would be wrong).
    """
    import torch

    from agents.grpo import GRPOUpdateConfig, group_batch, group_gradient_moments, group_step
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.core import GENERATION, UPDATE
    from wmrl_envs.envs.known_truth import within_group_correlation

    from .methods import METHODS, method_correction

    torch.set_num_threads(1)
    if method == REAL_AT_F:
        cfg = replace(cfg, groups_per_step=max(1, int(round(float(fraction) * cfg.groups_per_step))))
    spec = METHODS["real" if method == REAL_AT_F else method]
    env = make_env(cfg, seed)
    env.reset(seed=seed)  # seeds the outcome noise once; the groups' resets (seed=None) continue its stream
    wm = make_world_model(cfg, level, env, seed) if spec.world_model else None
    if fraction == "auto":
        base = replace(cfg.correction, anchor_fraction="auto", cost_ratio=cfg.wm_cost_s / cfg.execution_cost_s,
                       noise_batch_ratio=cfg.auto_noise_batch_ratio)
    else:
        base = cfg.correction if fraction is None else replace(cfg.correction, anchor_fraction=float(fraction))
    with warnings.catch_warnings():  # an experiment that runs auto on purpose: its warning, once per run, is noise
        warnings.filterwarnings("ignore", message="anchor_fraction='auto' is experimental")
        wrapper = AnchoredWorldModelWrapper(env, wm, group_size=cfg.group_size, groups_per_step=cfg.groups_per_step,
                                            correction=method_correction(spec, base), seed=seed)
    policy = TabularSoftmaxPolicy(cfg.n_tasks, cfg.n_actions, seed=seed)
    optimizer = torch.optim.Adam(policy.trainable_parameters(), lr=cfg.lr)
    update_config = GRPOUpdateConfig(max_grad_norm=None)
    rng = np.random.default_rng([seed, 5])
    ledger, corrector = wrapper.loop.ledger, wrapper.loop.corrector
    run = SweepRun(method, level, fraction if spec.anchor_fraction is None or method == REAL_AT_F else None, seed,
                   compute=[0.0], score=[env.expected_score(policy.probs())])
    run.max_steps = int(max_steps)
    run.stop_reason = "steps" if target is None and compute_budget_s is None else "step cap"
    pairs_raw: list[list[float]] = []
    pairs_real: list[list[float]] = []
    blind = getattr(wm, "blind_spots", None)  # KnownTruthWorldModel's (task, action) mask
    if blind is not None and not np.any(blind):
        blind = None
    if blind is not None:
        run.blind_spot_mass.append(float((policy.probs() * blind).sum(axis=1).mean()))
    for _step in range(1, max_steps + 1):
        wrapper.plan_step(cfg.groups_per_step)
        run.anchor_fraction.append(float(wrapper.loop.router.anchor_fraction))
        tasks = rng.integers(cfg.n_tasks, size=cfg.groups_per_step)
        with ledger.timed(GENERATION, count=cfg.groups_per_step * cfg.group_size):
            actions, handle = policy.sample(tasks, cfg.group_size)
        groups = [wrapper.score_group(list(a), options={"task": int(t)}) for t, a in zip(tasks, actions)]
        batch = group_batch([g.rewards for g in groups], [g.advantage_weight for g in groups], update_config)
        if not spec.world_model and len(groups) >= 2:  # real-execution GRPO: its gradient noise scale
            run.noise_moments.append(group_gradient_moments(policy, handle, batch.row_index, batch.advantages,
                                                            batch.group_index, len(groups)))
        with ledger.timed(UPDATE):  # the one GRPO group step (no optimiser step when no row is kept)
            group_step(policy, optimizer, handle, batch, config=update_config)
        step_raw = [g.correction.raw_scores for g in groups if g.route == "anchor" and g.correction.raw_scores
                    and None not in g.correction.raw_scores]
        step_real = [g.correction.real_scores for g in groups if g.route == "anchor" and g.correction.raw_scores
                     and None not in g.correction.raw_scores]
        pairs_raw += step_raw
        pairs_real += step_real
        stats = corrector.stats()
        run.compute.append(float(sum(ledger.cpu_seconds(s) for s in COST_SOURCES)))
        run.score.append(env.expected_score(policy.probs()))
        if blind is not None:
            run.blind_spot_mass.append(float((policy.probs() * blind).sum(axis=1).mean()))
        run.rho.append(float(stats["rho"]))
        run.mae_raw.append(stats["calibration_mae_raw"])
        run.mae_calibrated.append(stats["calibration_mae_calibrated"])
        run.anchor_pearson.append(within_group_correlation(np.array(step_raw), np.array(step_real)).pearson
                                  if step_raw else float("nan"))
        if target is not None and run.score[-1] >= target:
            run.stop_reason = "target"
            break
        if compute_budget_s is not None and run.compute[-1] >= compute_budget_s:
            run.stop_reason = "compute budget"
            break
    run.executions = ledger.count("execution")
    run.anchor_groups = wrapper.loop.router.n_anchor_groups
    run.predictions = ledger.count("world_model")
    run.cpu_by_source = {s: ledger.cpu_seconds(s) for s in COST_SOURCES}
    if pairs_raw:
        from wmrl_envs.core.advisor import crossfit_calibrated, pooled_within_group_correlation

        c = within_group_correlation(np.array(pairs_raw), np.array(pairs_real))
        run.correlation = {"pearson": c.pearson, "spearman": c.spearman, "n_groups": c.n_groups, "n_used": c.n_used}
        run.pooled_pearson = pooled_within_group_correlation(crossfit_calibrated(pairs_raw, pairs_real), pairs_real)[0]
    declared_exec = run.executions * cfg.execution_cost_s
    if not math.isclose(run.cpu_by_source["execution"], declared_exec, rel_tol=1e-6, abs_tol=1e-9):
        raise RuntimeError(
            f"the ledger charged {run.cpu_by_source['execution']:.6g} CPU-s to execution for {run.executions} executions "
            f"declaring {cfg.execution_cost_s} CPU-s each (expected {declared_exec:.6g}): the wrapper must charge "
            "info['execution_cpu_s']"
        )
    # relative tolerance: 256,000 declared charges summed lose a few ulps
    if wm is not None and run.cpu_by_source["world_model"] < run.predictions * cfg.wm_cost_s * (1 - 1e-9) - 1e-9:
        raise RuntimeError(
            f"the ledger charged {run.cpu_by_source['world_model']:.6g} CPU-s to world_model for {run.predictions} "
            f"predictions declaring {cfg.wm_cost_s} CPU-s each: the wrapper must charge declared_cpu_s_per_prediction"
        )
    return run


def _job(args: tuple) -> SweepRun:
    method, level, fraction, seed, cfg, kw = args
    return run_sweep_method(method, level, fraction, seed, cfg, **kw)


def _indexed(args: tuple) -> tuple[int, Any]:
    i, fn, item = args
    return i, fn(item)


def map_in_processes(fn: Callable[[Any], Any], items: Sequence[Any], workers: int,
                     on_result: Callable[[], None] = lambda: None) -> list[Any]:
    """``[fn(x) for x in items]`` in ``workers`` spawned processes, results in ``items``' order;
    ``on_result()`` is called as each one arrives (a progress bar's advance).

    An interruption (Ctrl-C, or ``kill PID`` where the command turns SIGTERM into
    ``KeyboardInterrupt``), or an error in a job, terminates the workers at once: a
    ``concurrent.futures`` pool would first run every job already queued, so a stopped sweep kept
    running for as long as it had left. ``fn`` must be picklable (a module-level function).

    Raises:
        Whatever a job raised, re-raised here, after the workers are terminated.
    """
    import multiprocessing

    out: list[Any] = [None] * len(items)
    # Pool's context exit is terminate(): the workers are stopped, not drained
    with multiprocessing.get_context("spawn").Pool(processes=workers) as pool:
        for i, res in pool.imap_unordered(_indexed, [(i, fn, x) for i, x in enumerate(items)]):
            out[i] = res
            on_result()
    return out


def run_jobs(jobs: list[tuple], cfg: SweepConfig, progress: Any, label: str) -> list[SweepRun]:
    """Run :func:`run_sweep_method` for each ``(method, level, fraction, seed, cfg, kwargs)`` job, in
    this process (``cfg.workers == 1``) or in ``cfg.workers`` spawned processes
    (:func:`map_in_processes`: a stop ends the workers at once), advancing a ``rich`` progress bar
    named ``label``.

    Returns:
        The :class:`SweepRun` of each job, in the jobs' order.
    """
    bar = progress.add_task(label, total=len(jobs))
    out: list[SweepRun | None] = [None] * len(jobs)
    if cfg.workers == 1:
        for i, j in enumerate(jobs):
            out[i] = _job(j)
            progress.update(bar, advance=1)
    else:
        out = map_in_processes(_job, jobs, cfg.workers, lambda: progress.update(bar, advance=1))
    return [r for r in out if r is not None]
