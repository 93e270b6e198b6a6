"""The method benchmark (``wmrl bench``): the paper's comparison at CPU scale, side by side.

Trains the same agent on the AutoResearch training tasks under six methods, with the same
seeds, and evaluates every trained policy on the held-out tasks (avg@k leaderboard
percentile per category and overall; ``docs/method.md``, "Evaluation"):

1. ``real`` — GRPO with real execution for every group (no world model);
2. ``wm_only`` — GRPO on raw world-model scores only (no anchors, no corrections);
3. ``wmrl`` — anchors + online debiasing + inverse-variance denoising;
4. ``debias_only``; 5. ``denoise_only``; 6. ``anchors_raw`` — anchors, raw world model,
   no correction.

Compute is measured as the paper measures GPU-hours: the wall-clock of the training process
(excluding held-out evaluation), one method after another in the same invocation, broken down
into execution, world-model inference, generation and policy update, and reported as a ratio
to method 1. Every rollout pays for its own execution (no result cache).

Comparisons: at equal steps (``steps``), and at equal compute — the held-out score each
method reaches within the compute WMRL used for ``steps`` steps and within the compute
method 1 used (cheap methods train for more steps, up to ``max_steps_factor × steps``, to fill
those budgets). To evaluate each method at all three points from one training run, the
policy is snapshotted after every step together with its cumulative compute; snapshots are
evaluated afterwards.

Outputs (in ``out_dir``): ``results.json`` (everything), ``table.md`` (the paper's layout:
method, compute ratio, held-out score per category and overall, mean ± spread over seeds),
``score_vs_compute.png``, ``rho_calibration.png``.
"""

from __future__ import annotations

import functools
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Protocol, Sequence

import numpy as np
import tyro

from wmrl_envs.core import CorrectionConfig

__all__ = [
    "METHODS",
    "MethodSpec",
    "BenchConfig",
    "method_correction",
    "BenchAgent",
    "run_method",
    "run_bench",
    "select_snapshots",
    "format_table",
]


@dataclass(frozen=True)
class MethodSpec:
    """How one method routes and corrects.

    Attributes:
        name: short id.
        label: name in tables.
        anchor_fraction: ``None`` = the benchmark's configured fraction; 1.0 = every group real.
        world_model: whether a world model scores groups.
        debias: apply the isotonic map.
        denoise: apply ρ.
    """

    name: str
    label: str
    anchor_fraction: float | None
    world_model: bool
    debias: bool
    denoise: bool


METHODS: dict[str, MethodSpec] = {
    m.name: m
    for m in [
        MethodSpec("real", "GRPO, real execution", 1.0, False, False, False),
        MethodSpec("wm_only", "GRPO, world model only", 0.0, True, False, False),
        MethodSpec("wmrl", "WMRL (debias + denoise)", None, True, True, True),
        MethodSpec("debias_only", "anchors + debiasing only", None, True, True, False),
        MethodSpec("denoise_only", "anchors + denoising only", None, True, False, True),
        MethodSpec("anchors_raw", "anchors, no correction", None, True, False, False),
    ]
}
"""The six methods of the comparison, in table order."""


class BenchAgent(Protocol):
    """What the harness needs from an agent plugin (grammar agent, LLM agent, ...)."""

    def sample(self, task_ids: Sequence[str], group_size: int) -> tuple[list[list[str]], Any]:
        """G actions (Python source) per task, plus a handle for :meth:`update`."""

    def update(self, handle: Any, row_index: np.ndarray, advantages: np.ndarray) -> dict[str, float]:
        """One GRPO step on the kept rows: ``row_index`` int64 (N,) flat indices into the sampled
        actions (group after group), ``advantages`` float64 (N,) weighted advantages
        (:func:`agents.grpo.build_advantages`). The agents of this module call
        :func:`agents.grpo.grpo_step`."""

    def snapshot(self) -> Any:
        """A copy of the policy's parameters (cheap to keep one per step)."""

    def restore(self, snap: Any) -> None:
        """Load a snapshot."""

    def reseed(self, seed: int) -> None:
        """Reset the sampling stream (evaluation draws common random numbers across methods)."""


@dataclass
class BenchConfig:
    """Configuration of ``wmrl bench`` (each field is a CLI flag)."""

    methods: tuple[str, ...] = tuple(METHODS)
    """Methods to run (subset of real, wm_only, wmrl, debias_only, denoise_only, anchors_raw)."""
    seeds: int = 3
    """Seeds per method (0..seeds-1)."""
    steps: int = 6
    """Equal-steps budget S."""
    max_steps_factor: float = 4.0
    """Cheap methods train up to this many times S steps to fill the equal-compute budgets."""
    groups_per_step: int = 4
    """Groups (tasks) per step."""
    group_size: int = 4
    """G, rollouts per group."""
    agent: Literal["grammar", "llm"] = "grammar"
    """'grammar': fast template agent; 'llm': SmolLM2 LoRA agent (the GPU-scale configuration)."""
    world_model: Literal["embedding", "degraded", "llm"] = "embedding"
    """'embedding': MiniLM + regression head fitted on other tasks; 'degraded': the same with
    its information destroyed (wm_information); 'llm': the LLM judge."""
    wm_information: float = 0.0
    """For world_model='degraded': 0 = pure noise, 1 = the embedding world model."""
    eval_k: int = 4
    """Trajectories per held-out task (avg@k)."""
    eval_parallel: int = 2
    """Concurrent sandboxed executions during evaluation."""
    exec_parallel: int = 2
    """Concurrent sandboxed executions of an anchor group's rollouts during training (same for
    every method, so compute ratios are unaffected; 2 = one per core here)."""
    lr: float | None = None
    """Learning rate of the agent (default: 0.1 for the grammar agent, 2e-4 for the LLM's LoRA)."""
    kl_coef: float = 0.0
    """KL coefficient of the GRPO loss."""
    clip_eps: float = 0.2
    """PPO clip range ε; acts only with num_iterations > 1 (in the first epoch the policy is the
    sampling policy, so the ratio is 1)."""
    num_iterations: int = 1
    """Optimisation epochs per step over its kept rows (1 = one on-policy step, ratio 1); epochs
    2.. take the log-probabilities of epoch 1 as the old policy, so --clip-eps clips there."""
    correction: Annotated[CorrectionConfig, tyro.conf.OmitArgPrefixes] = field(
        default_factory=lambda: CorrectionConfig(min_pairs=16, refit_every=8, warmup_groups=3, half_life=16.0)
    )
    """Correction settings (flags without a prefix: --anchor-fraction, --min-pairs, ...). Each
    method sets its own route share, debias and denoise on top (METHODS, method_correction):
    --anchor-fraction is that of the anchored methods (at least --min-anchor-groups anchor
    groups per step); --debias and --denoise are ignored here."""
    sandbox: str = "auto"
    """Sandbox backend."""
    max_ungraded_share: float | None = 0.5
    """Stop (TooManyUngradedError) once this share of one step's rollouts, or of one held-out
    evaluation, is ungraded because the machinery failed; None never stops."""
    world_model_timeout_s: float | None = None
    """Seconds one batched world-model call may take (None: no limit); past it the batch is ungraded."""
    out_dir: str = "runs/bench"
    """Output folder."""


# ---------------------------------------------------------------------- one method, one seed
@dataclass
class StepRecord:
    step: int
    compute_s: float
    seconds: dict[str, float]
    rho: float
    disagreement_ema: float | None
    calibration_mae_raw: float | None
    calibration_mae_calibrated: float | None
    reward_mean: float | None
    executions: int
    anchor_groups: int
    ungraded: int = 0
    """Ungraded rollouts so far (training; the machinery failed), cumulative."""
    ungraded_by_cause: dict[str, int] = field(default_factory=dict)


@dataclass
class MethodRun:
    method: str
    seed: int
    records: list[StepRecord] = field(default_factory=list)
    snapshots: list[Any] = field(default_factory=list)  # snapshots[i] = policy after step i (0 = initial)
    ungraded: dict[str, Any] = field(default_factory=dict)  # the wrapper's UngradedMonitor.stats()

    def compute_at(self, step: int) -> float:
        return 0.0 if step == 0 else self.records[step - 1].compute_s


def _mean(xs: Sequence[float | None]) -> float | None:
    v = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.mean(v)) if v else None


def method_correction(spec: MethodSpec, correction: CorrectionConfig) -> CorrectionConfig:
    """The correction settings of one method: the benchmark's ``correction`` with the method's
    anchor fraction (``None`` keeps the configured one), debias and denoise; a method without
    anchors (fraction 0) needs no anchor group per step.

    Example:
        >>> c = method_correction(METHODS["wm_only"], CorrectionConfig(anchor_fraction=0.2))
        >>> c.anchor_fraction, c.min_anchor_groups, c.debias, c.denoise
        (0.0, 0, False, False)
    """
    f = spec.anchor_fraction if spec.anchor_fraction is not None else correction.anchor_fraction
    return replace(correction, anchor_fraction=f, min_anchor_groups=0 if f == 0 else correction.min_anchor_groups,
                   debias=spec.debias, denoise=spec.denoise)


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
) -> MethodRun:
    """Train one method with one seed; snapshot the policy after every step.

    Stops after ``max_steps`` steps or once the cumulative compute reaches
    ``compute_budget_s`` (seconds; ``None`` = no compute stop).

    Returns:
        A :class:`MethodRun` with per-step records (cumulative compute in seconds, ρ,
        calibration errors) and ``max_steps + 1`` or fewer snapshots.
    """
    from agents.grpo import build_advantages
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.core import GENERATION, UPDATE

    env = make_env()
    extra_envs = [make_env() for _ in range(max(0, cfg.exec_parallel - 1))]
    wrapper = AnchoredWorldModelWrapper(
        env, world_model if spec.world_model else None, group_size=cfg.group_size,
        groups_per_step=cfg.groups_per_step, correction=method_correction(spec, cfg.correction), seed=seed,
        execution_envs=extra_envs, max_ungraded_share=cfg.max_ungraded_share,
        world_model_timeout_s=cfg.world_model_timeout_s,
    )
    corrector = wrapper.corrector
    agent = make_agent(seed)
    rng = np.random.default_rng(10_000 + seed)
    run = MethodRun(spec.name, seed, snapshots=[agent.snapshot()])
    ledger = wrapper.ledger
    compute = 0.0
    for step in range(1, max_steps + 1):
        t0 = time.perf_counter()
        wrapper.plan_step(cfg.groups_per_step)
        tasks = [str(t) for t in rng.choice(list(train_tasks), size=cfg.groups_per_step, replace=cfg.groups_per_step > len(train_tasks))]
        with ledger.timed(GENERATION, count=cfg.groups_per_step * cfg.group_size):
            actions, handle = agent.sample(tasks, cfg.group_size)
        groups = [wrapper.score_group(a, options={"task_id": t}) for t, a in zip(tasks, actions)]
        batch = build_advantages([g.rewards for g in groups], [g.advantage_weight for g in groups], drop_zero_advantage=True)
        with ledger.timed(UPDATE):
            if len(batch.row_index):
                agent.update(handle, batch.row_index, batch.advantages)
        compute += time.perf_counter() - t0
        stats = corrector.stats()
        run.records.append(StepRecord(
            step=step,
            compute_s=compute,
            seconds={s: ledger.seconds(s) for s in ("execution", "world_model", "generation", "update")},
            rho=stats["rho"] if spec.denoise else corrector.denoiser.rho,
            disagreement_ema=stats["disagreement_ema"],
            calibration_mae_raw=stats["calibration_mae_raw"],
            calibration_mae_calibrated=stats["calibration_mae_calibrated"],
            reward_mean=_mean([r for g in groups for r in g.rewards]),
            executions=ledger.count("execution"),
            anchor_groups=wrapper.router.n_anchor_groups,
            ungraded=wrapper.ungraded.n_ungraded,
            ungraded_by_cause=dict(wrapper.ungraded.causes),
        ))
        run.snapshots.append(agent.snapshot())
        if progress:
            rm = run.records[-1].reward_mean
            progress(f"{spec.name} seed {seed} step {step}: compute {compute:.0f}s reward {rm if rm is None else round(rm, 3)} rho {run.records[-1].rho:.2f}")
        if compute_budget_s is not None and compute >= compute_budget_s:
            break
    for e in (env, *extra_envs):
        e.close()
    run.ungraded = wrapper.ungraded.stats()
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
        >>> r = MethodRun("m", 0, [StepRecord(i, 10.0 * i, {}, 1, None, None, None, None, 0, 0) for i in (1, 2, 3)])
        >>> select_snapshots(r, 2, {"c": 25.0})
        {'steps': 2, 'c': 2}
    """
    last = len(run.records)
    out = {"steps": min(steps, last)}
    for name, b in budgets.items():
        j = 0
        for rec in run.records:
            if rec.compute_s <= b * 1.0001:
                j = rec.step
        out[name] = j
    return out


# ---------------------------------------------------------------------- evaluation
def evaluate_snapshot(
    agent: BenchAgent,
    snap: Any,
    heldout_tasks: Sequence[str],
    k: int,
    sandbox: Any,
    parallel: int = 2,
    eval_seed: int | None = None,
    max_ungraded_share: float | None = 0.5,
) -> dict[str, Any]:
    """Held-out avg@k of one snapshot with real execution (``parallel`` runs at a time).

    With ``eval_seed`` the agent's sampling stream is reset before sampling, so every snapshot
    of every method of one bench seed is evaluated on the same random draws (common random
    numbers: score differences then come from the policies, not from the draws).

    A trajectory whose execution fails in the machinery (``SandboxUnavailableError``) is
    ungraded: left out of avg@k and the mean score, counted in ``"ungraded"`` (by cause) and
    warned about; a task with no graded trajectory is left out.

    Raises:
        TooManyUngradedError: at least ``max_ungraded_share`` of the trajectories are ungraded.
    """
    import logging

    from agents.evaluation import avg_at_k
    from wmrl_envs.core.ungraded import SANDBOX_UNAVAILABLE, TooManyUngradedError
    from wmrl_envs.envs.autoresearch.grading import evaluate as run_solution
    from wmrl_envs.envs.autoresearch.tasks import get_task
    from wmrl_envs.sandbox.base import SandboxUnavailableError

    agent.restore(snap)
    if eval_seed is not None:
        agent.reseed(eval_seed)
    actions, _ = agent.sample(list(heldout_tasks), k)
    jobs = [(t, a) for t, acts in zip(heldout_tasks, actions) for a in acts]

    def run(job: tuple[str, str]) -> Any:
        try:
            return run_solution(job[0], job[1], sandbox)[0]
        except SandboxUnavailableError as exc:  # the machinery failed: not the agent's score
            return f"{type(exc).__name__}: {exc}"

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        outcomes = list(pool.map(run, jobs))
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
    res = avg_at_k(graded, {t: get_task(t).category for t in heldout_tasks}, k=k)
    res["mean_score"] = float(np.mean([g.score for g in grades]))
    res["ungraded"] = {SANDBOX_UNAVAILABLE: len(errors)} if errors else {}
    return res


# ---------------------------------------------------------------------- reporting
def _agg(values: Sequence[float]) -> tuple[float, float]:
    v = np.asarray([x for x in values if x is not None], dtype=float)
    if v.size == 0:
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def format_table(results: dict[str, Any], point: str) -> str:
    """Markdown table in the paper's layout for one comparison point.

    Args:
        results: the ``results.json`` structure of :func:`run_bench`.
        point: ``"steps"``, ``"compute_wmrl"`` or ``"compute_real"``.

    Returns:
        The table (str): method, compute used at that point as a ratio to method 1's compute
        at S steps, mean steps, held-out avg@k per category and overall as ``mean ± std``
        over seeds.
    """
    cats = sorted({c for m in results["methods"].values() for s in m["seeds"] for c in s["eval"][point]["per_category"]})
    head = "| method | compute ratio | steps | " + " | ".join(cats) + " | overall |"
    lines = [head, "|" + "---|" * (4 + len(cats))]
    # the unit of compute is method 1's compute at S steps, in every table
    real_c = _agg([s["compute_at"]["steps"] for s in results["methods"]["real"]["seeds"]])[0] if "real" in results["methods"] else float("nan")
    for name, m in results["methods"].items():
        comp = _agg([s["compute_at"][point] for s in m["seeds"]])[0]
        ratio = comp / real_c if real_c and math.isfinite(real_c) and real_c > 0 else float("nan")
        st = _agg([s["snapshot"][point] for s in m["seeds"]])[0]
        cells = []
        for c in cats:
            mu, sd = _agg([s["eval"][point]["per_category"].get(c) for s in m["seeds"]])
            cells.append(f"{mu:.1f} ± {sd:.1f}")
        mu, sd = _agg([s["eval"][point]["overall"] for s in m["seeds"]])
        lines.append(f"| {METHODS[name].label} | {ratio:.2f} | {st:.1f} | " + " | ".join(cells) + f" | **{mu:.1f} ± {sd:.1f}** |")
    return "\n".join(lines) + "\n"


def _ungraded_note(results: dict[str, Any]) -> str:
    """One line: ungraded rollouts (the machinery failed) per method, summed over seeds."""
    parts = []
    for name, m in results["methods"].items():
        n = sum(int(s.get("ungraded", {}).get("ungraded_rollouts", 0)) for s in m["seeds"])
        causes: dict[str, int] = {}
        for s in m["seeds"]:
            for c, k in s.get("ungraded", {}).get("ungraded_by_cause", {}).items():
                causes[c] = causes.get(c, 0) + int(k)
        ev = sum(int(v) for s in m["seeds"] for e in s["eval"].values() for v in e.get("ungraded", {}).values())
        detail = ", ".join(f"{c}: {k}" for c, k in sorted(causes.items()))
        parts.append(f"{name} {n}" + (f" ({detail})" if detail else "") + (f", held-out {ev}" if ev else ""))
    return "Ungraded rollouts (training, all seeds; failures of the machinery, left out of training): " + "; ".join(parts) + "\n"


def _plot(results: dict[str, Any], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, (name, m) in enumerate(results["methods"].items()):
        pts = []
        for point in ("steps", "compute_wmrl", "compute_real"):
            c = _agg([s["compute_at"][point] for s in m["seeds"]])[0]
            mu, sd = _agg([s["eval"][point]["overall"] for s in m["seeds"]])
            pts.append((c, mu, sd))
        pts = sorted(set(pts))
        xs, ys, es = zip(*pts)
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=METHODS[name].label, color=f"C{i}")
    ax.set_xlabel("training compute (wall-clock seconds, excluding evaluation)")
    ax.set_ylabel("held-out avg@k leaderboard percentile")
    ax.set_title("Held-out score against compute")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "score_vs_compute.png", dpi=120)
    plt.close(fig)

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for i, (name, m) in enumerate(results["methods"].items()):
        if not METHODS[name].world_model or METHODS[name].anchor_fraction == 0.0:
            continue
        n = min(len(s["records"]) for s in m["seeds"])
        steps = np.arange(1, n + 1)
        rho = np.mean([[r["rho"] for r in s["records"][:n]] for s in m["seeds"]], axis=0)
        a1.plot(steps, rho, label=METHODS[name].label, color=f"C{i}")
        raw = [[r["calibration_mae_raw"] if r["calibration_mae_raw"] is not None else np.nan for r in s["records"][:n]] for s in m["seeds"]]
        cal = [[r["calibration_mae_calibrated"] if r["calibration_mae_calibrated"] is not None else np.nan for r in s["records"][:n]] for s in m["seeds"]]
        if METHODS[name].debias:
            a2.plot(steps, np.nanmean(raw, axis=0), ls="--", color=f"C{i}", label=f"{METHODS[name].label}: raw")
            a2.plot(steps, np.nanmean(cal, axis=0), color=f"C{i}", label=f"{METHODS[name].label}: calibrated")
    a1.set_xlabel("step"); a1.set_ylabel("anchor weight ρ (mean over seeds)"); a1.legend(fontsize=7)
    a1.set_title("ρ over training (computed; applied only where denoising is on)")
    a2.set_xlabel("step"); a2.set_ylabel("prequential MAE on anchor pairs"); a2.legend(fontsize=7)
    a2.set_title("Calibration error over training")
    fig.tight_layout()
    fig.savefig(out_dir / "rho_calibration.png", dpi=120)
    plt.close(fig)


def run_bench(
    cfg: BenchConfig,
    *,
    make_agent: Callable[[int], BenchAgent],
    make_env: Callable[[], Any],
    world_model: Any | None,
    train_tasks: Sequence[str],
    heldout_tasks: Sequence[str],
    sandbox: Any,
    evaluate: Callable[..., dict[str, Any]] = evaluate_snapshot,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run every method for every seed, evaluate the comparison points, write the outputs.

    Per seed, ``real`` runs first (S steps, fixing the budget ``compute_real``), then
    ``wmrl`` (whose compute at step S fixes ``compute_wmrl``), then the others; every method
    except ``real`` trains until it reaches ``compute_real`` or ``max_steps_factor × S`` steps.

    Returns:
        The results dict (also written to ``out_dir/results.json``).

    Raises:
        ValueError: unknown method names, or a comparison without ``real``/``wmrl`` budgets.
    """
    unknown = [m for m in cfg.methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {list(METHODS)}")
    order = [m for m in ("real", "wmrl") if m in cfg.methods] + [m for m in cfg.methods if m not in ("real", "wmrl")]
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    max_steps = max(cfg.steps, int(round(cfg.max_steps_factor * cfg.steps)))
    if evaluate is evaluate_snapshot:  # the stop rule of held-out evaluation follows the config
        evaluate = functools.partial(evaluate_snapshot, max_ungraded_share=cfg.max_ungraded_share)
    from wmrl_envs.envs.autoresearch.secret import is_reference_secret, secret_fingerprint

    results: dict[str, Any] = {
        "config": asdict(cfg),
        # which task secret the AutoResearch data came from (its one-way fingerprint, never the secret)
        "task_secret": {"fingerprint": secret_fingerprint(), "reference": is_reference_secret()},
        "methods": {m: {"seeds": []} for m in order},
    }
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[info]}"), transient=False)
    t_all = time.perf_counter()
    progress.start()
    try:
        for seed in range(cfg.seeds):
            runs: dict[str, MethodRun] = {}
            budget_real: float | None = None
            for name in order:
                spec = METHODS[name]
                steps_cap = cfg.steps if name == "real" else max_steps
                t0 = time.perf_counter()
                bar = progress.add_task(f"seed {seed} {name:12s}", total=steps_cap, info="")

                def tick(msg: str, bar: Any = bar) -> None:
                    progress.update(bar, advance=1, info=msg.split(": ", 1)[-1])

                runs[name] = run_method(spec, seed, cfg, make_agent, make_env, world_model, train_tasks,
                                        max_steps=steps_cap, compute_budget_s=None if name == "real" else budget_real,
                                        progress=tick)
                progress.update(bar, total=len(runs[name].records))
                log(f"[bench] seed {seed} {name}: {len(runs[name].records)} steps, compute "
                    f"{runs[name].records[-1].compute_s:.1f}s (wall {time.perf_counter() - t0:.1f}s)")
                if name == "real":
                    budget_real = runs[name].records[-1].compute_s
            budgets = {}
            if "real" in runs:
                budgets["compute_real"] = runs["real"].compute_at(min(cfg.steps, len(runs["real"].records)))
            if "wmrl" in runs:
                budgets["compute_wmrl"] = runs["wmrl"].compute_at(min(cfg.steps, len(runs["wmrl"].records)))
            agent = make_agent(seed)
            for name in order:
                run = runs[name]
                sel = select_snapshots(run, cfg.steps, budgets)
                evals: dict[int, dict[str, Any]] = {}
                for point, idx in sel.items():
                    if idx not in evals:
                        evals[idx] = evaluate(agent, run.snapshots[idx], heldout_tasks, cfg.eval_k, sandbox, cfg.eval_parallel,
                                             eval_seed=1_000_003 + seed)
                entry = {
                    "seed": seed,
                    "snapshot": sel,
                    "compute_at": {p: run.compute_at(i) for p, i in sel.items()},
                    "eval": {p: evals[i] for p, i in sel.items()},
                    "records": [asdict(r) for r in run.records],
                    "budgets": budgets,
                    "ungraded": run.ungraded,
                }
                for p in ("steps", "compute_wmrl", "compute_real"):  # table needs every point
                    entry["snapshot"].setdefault(p, sel["steps"])
                    entry["compute_at"].setdefault(p, entry["compute_at"]["steps"])
                    entry["eval"].setdefault(p, entry["eval"]["steps"])
                results["methods"][name]["seeds"].append(entry)
                log(f"[bench] seed {seed} {name}: held-out " + ", ".join(
                    f"{p}={entry['eval'][p]['overall']:.1f} (step {entry['snapshot'][p]})" for p in sel))
            results["wall_clock_s"] = time.perf_counter() - t_all
            (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=float))
    finally:
        progress.stop()
    tables = []
    for point, title in (("steps", f"Equal steps ({cfg.steps})"), ("compute_wmrl", "Equal compute: WMRL's"),
                         ("compute_real", "Equal compute: real-execution GRPO's")):
        tables.append(f"### {title}\n\n" + format_table(results, point))
    tables.append(_ungraded_note(results))
    (out_dir / "table.md").write_text("\n".join(tables))
    _plot(results, out_dir)
    return results


# ---------------------------------------------------------------------- agents and factories
class GrammarBenchAgent:
    """:class:`agents.grammar_policy.GrammarPolicy` behind the :class:`BenchAgent` protocol.

    Each grammar choice is a "token"; :meth:`update` is the one GRPO step
    (:func:`agents.grpo.grpo_step`) on the per-choice log-probabilities, one Adam step per
    optimisation epoch, no gradient clipping.
    """

    def __init__(self, seed: int, lr: float = 0.1, kl_coef: float = 0.0, *, clip_eps: float = 0.2,
                 num_iterations: int = 1) -> None:
        import torch

        from agents.grammar_policy import GrammarPolicy
        from agents.grpo import GRPOUpdateConfig

        self.policy = GrammarPolicy(seed=seed)
        if kl_coef > 0:
            self.policy.freeze_reference()  # the KL reference: the initial policy
        self.optimizer = torch.optim.Adam(self.policy.trainable_parameters(), lr=lr)
        self.update_config = GRPOUpdateConfig(clip_eps=clip_eps, kl_coef=kl_coef, num_iterations=num_iterations,
                                              max_grad_norm=None)

    def sample(self, task_ids: Sequence[str], group_size: int) -> tuple[list[list[str]], Any]:
        from wmrl_envs.envs.autoresearch.tasks import get_task

        programs = self.policy.sample([get_task(t) for t in task_ids], group_size)
        return [[p.code for p in g] for g in programs], [p for g in programs for p in g]

    def update(self, handle: Any, row_index: np.ndarray, advantages: np.ndarray) -> dict[str, float]:
        from agents.grpo import grpo_step

        return grpo_step(self.policy, self.optimizer, handle, row_index, advantages, config=self.update_config)

    def snapshot(self) -> Any:
        return {k: (v.detach().clone() if hasattr(v, "detach") else v) for k, v in self.policy.state_dict().items()}

    def restore(self, snap: Any) -> None:
        self.policy.load_state_dict(snap)

    def reseed(self, seed: int) -> None:
        self.policy.generator.manual_seed(int(seed))


class LLMBenchAgent:
    """The LLM agent of ``wmrl train`` (:class:`agents.llm_policy.LLMPolicy`, SmolLM2 + LoRA,
    line mode) behind the :class:`BenchAgent` protocol — the GPU-scale configuration of the
    benchmark (``wmrl bench --agent llm``). :meth:`update` is the GRPO step of ``wmrl train``
    (:func:`agents.grpo.grpo_step`, one backward per group, one AdamW step per epoch).
    """

    def __init__(self, seed: int, lr: float = 2e-4, kl_coef: float = 0.0, *, lora_r: int = 16,
                 max_new_tokens: int = 32, temperature: float = 0.8, max_grad_norm: float = 1.0,
                 clip_eps: float = 0.2, num_iterations: int = 1) -> None:
        import torch

        from agents.grpo import GRPOUpdateConfig
        from agents.llm_policy import LLMPolicy
        from wmrl_envs.world_models.smollm2 import load_smollm2

        torch.manual_seed(seed)
        model, tokenizer = load_smollm2()
        self.policy = LLMPolicy(model, tokenizer, mode="line", lora_r=lora_r, lora_alpha=2 * lora_r,
                                max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
        self.optimizer = torch.optim.AdamW(self.policy.trainable_parameters(), lr=lr, weight_decay=0.0)
        self.update_config = GRPOUpdateConfig(clip_eps=clip_eps, kl_coef=kl_coef, num_iterations=num_iterations,
                                              micro_batch_per_group=True, max_grad_norm=max_grad_norm)

    def sample(self, task_ids: Sequence[str], group_size: int) -> tuple[list[list[str]], Any]:
        from wmrl_envs.envs.autoresearch.tasks import get_task

        specs = [get_task(t) for t in task_ids]
        samples = self.policy.sample([self.policy.build_prompt({}, s) for s in specs], group_size)
        actions = [[self.policy.completion_to_action(x, s) for x in texts] for s, texts in zip(specs, samples.texts)]
        return actions, samples

    def update(self, handle: Any, row_index: np.ndarray, advantages: np.ndarray) -> dict[str, float]:
        from agents.grpo import grpo_step

        groups = [gi for gi, _ in handle.row_positions(row_index)]
        return grpo_step(self.policy, self.optimizer, handle, row_index, advantages, config=self.update_config,
                         groups=groups)

    def snapshot(self) -> Any:
        return {k: v.detach().clone() for k, v in self.policy.adapter_state_dict().items()}

    def restore(self, snap: Any) -> None:
        self.policy.load_adapter_state_dict(snap)

    def reseed(self, seed: int) -> None:
        self.policy.seed = int(seed)
        self.policy.n_sample_calls = 0


def build_world_model(cfg: BenchConfig, seed: int = 0) -> Any:
    """The world model the anchored methods use (see :attr:`BenchConfig.world_model`)."""
    if cfg.world_model in ("embedding", "degraded"):
        from wmrl_envs.envs.autoresearch.embedding_world_model import DegradedWorldModel, EmbeddingWorldModel, load_execution_log

        # frozen during training; each training task is predicted by a head fitted on the
        # logged executions of the *other* tasks (held-out tasks are never used)
        wm = EmbeddingWorldModel(seed=seed).fit_leave_one_task_out(load_execution_log(split="train"))
        if cfg.world_model == "degraded":
            return DegradedWorldModel(wm, information=cfg.wm_information, seed=seed)
        return wm
    if cfg.world_model == "llm":
        from wmrl_envs.envs.autoresearch.llm_judge import LLMJudgeWorldModel

        return LLMJudgeWorldModel.from_smollm2(seed=seed, max_prompt_tokens=640)
    raise ValueError(f"world_model must be 'embedding', 'degraded' or 'llm', got {cfg.world_model!r}")


def main_bench(cfg: BenchConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """``wmrl bench``: build the real components and run :func:`run_bench`."""
    import torch

    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.secret import sandbox_hidden_paths
    from wmrl_envs.envs.autoresearch.tasks import list_tasks
    from wmrl_envs.sandbox import make_sandbox

    torch.set_num_threads(1)
    from agents.grpo import GRPOUpdateConfig

    # the update settings check themselves now, before any model is loaded or seed started
    GRPOUpdateConfig(clip_eps=cfg.clip_eps, kl_coef=cfg.kl_coef, num_iterations=cfg.num_iterations)
    if cfg.lr is not None and not cfg.lr > 0:
        raise ValueError(f"lr must be > 0 (or omitted for the agent's default), got {cfg.lr}")
    if cfg.agent not in ("grammar", "llm"):
        raise ValueError(f"agent must be 'grammar' or 'llm', got {cfg.agent!r}")
    if cfg.agent == "llm":
        # the LLM agent learns at a small rate; the grammar agent's default (0.1) would wreck LoRA
        lr = cfg.lr if cfg.lr is not None else 2e-4

        def make_agent(seed: int) -> BenchAgent:
            return LLMBenchAgent(seed, lr=lr, kl_coef=cfg.kl_coef, clip_eps=cfg.clip_eps,
                                 num_iterations=cfg.num_iterations)
    else:
        def make_agent(seed: int) -> BenchAgent:
            return GrammarBenchAgent(seed, lr=cfg.lr if cfg.lr is not None else 0.1, kl_coef=cfg.kl_coef,
                                     clip_eps=cfg.clip_eps, num_iterations=cfg.num_iterations)
    sandbox = make_sandbox(cfg.sandbox, hidden_paths=sandbox_hidden_paths())  # task secret, bundled data
    if cfg.sandbox == "auto" and not sandbox.isolates:
        raise ValueError("no isolating sandbox works here; install bubblewrap or pass --sandbox subprocess")
    wm = build_world_model(cfg)
    log(f"[bench] sandbox={sandbox.name} world model={cfg.world_model} agent={cfg.agent} methods={list(cfg.methods)} seeds={cfg.seeds}")
    try:
        # This installation's leaderboards (built once per task secret): paid before any method
        # runs, so that no method's compute includes a one-off build.
        AutoResearchEnv(tasks="all", sandbox=sandbox).prepare_leaderboards()
        return run_bench(
            cfg,
            make_agent=make_agent,
            make_env=lambda: AutoResearchEnv(tasks="train", sandbox=sandbox),
            world_model=wm,
            train_tasks=list_tasks("train"),
            heldout_tasks=list_tasks("heldout"),
            sandbox=sandbox,
            log=log,
        )
    finally:
        sandbox.close()
