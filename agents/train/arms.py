"""The real-execution arm of ``wmrl train`` and the comparison of the two arms at equal compute.

Issue 36, item 4: a run's own figures must show the method, not the anchor fraction's arithmetic
(what "these rollouts would have cost under real GRPO" prints is the same for a constant world
model). So the default run also trains real-execution GRPO from the same initial policy, tasks
and seed, with the CPU-seconds the WMRL arm spent on training, and evaluates both on the same
held-out tasks. This module holds what that needs beside the training loop itself
(:mod:`agents.train.loop`):

- :func:`real_arm_config`: the real arm's configuration (no world model, every group executed,
  ``--cpu-budget-s`` set to the WMRL arm's spent CPU-seconds, its batch the WMRL arm's anchor
  groups per step);
- :func:`spent_cpu_s` and :func:`budget_reached`: the stop rule at equal compute;
- :func:`publish_progress` and :class:`CpuBudget`: how the two arms train side by side (one
  process each; ``--concurrent-arms``, the default on the CPU): the WMRL arm writes its training
  CPU-seconds after every step to ``RUN_DIR/arm_progress.json``; the real arm starts a step only
  when :func:`budget_reached` says it would have started it against the WMRL arm's final total,
  and waits while it cannot tell yet, so it stops at the step a run after the WMRL arm would;
- :func:`compare_arms`: held-out quality of both arms, paired over tasks with Student-t CIs, and
  their compute;
- :func:`arms_rows` and :func:`plot_arms`: the summary's leading rows and ``arms.png``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

__all__ = ["TRAINING_SOURCES", "PROGRESS_FILE", "real_arm_config", "spent_cpu_s", "budget_reached", "CpuBudget",
           "publish_progress", "read_progress", "compare_arms", "arms_rows", "plot_arms", "paired_over_tasks"]

TRAINING_SOURCES = ("execution", "world_model", "generation", "update")
"""The ledger's sources a run's training compute is made of (held-out evaluation is not: both
arms pay the same evaluation)."""


PROGRESS_FILE = "arm_progress.json"
"""The WMRL arm's progress, read by the real arm training beside it (:func:`publish_progress`)."""


def real_arm_config(cfg: Any, cpu_budget_s: float | None) -> Any:
    """The real arm's :class:`~agents.train.config.TrainConfig` from the WMRL arm's.

    Real-execution GRPO: no world model (``world_model="none"``), every group executed
    (``anchor_fraction=1``), ``real_groups_per_step`` groups per step (default: the WMRL arm's
    anchor groups per step, ``groups_per_step x anchor_fraction`` rounded, at least 1; with
    ``"auto"`` its start fraction), training until ``cpu_budget_s`` CPU-seconds are spent, with a
    cap of 4x the WMRL arm's rollouts in steps. Everything else (backbone, LoRA, optimiser, GRPO
    settings, sandbox, evaluation, seed) is the WMRL arm's.

    Args:
        cfg: the WMRL arm's configuration.
        cpu_budget_s: CPU-seconds the real arm may spend on training (> 0): the WMRL arm's
            :func:`spent_cpu_s`; ``None`` when the arms train side by side (the budget is then
            followed as the WMRL arm spends it: :class:`CpuBudget`).

    Returns:
        A new ``TrainConfig`` (``arms=("wmrl",)``: its folder holds one run).

    Raises:
        ValueError: ``cpu_budget_s`` not ``None`` nor a positive finite number.
    """
    if cpu_budget_s is not None and not (isinstance(cpu_budget_s, (int, float)) and math.isfinite(cpu_budget_s) and cpu_budget_s > 0):
        raise ValueError(f"cpu_budget_s must be a positive number of CPU-seconds, got {cpu_budget_s!r}: the WMRL arm "
                         "spent nothing on training (no step ran?)")
    corr = cfg.correction
    fraction = corr.auto_start_fraction if corr.anchor_fraction == "auto" else float(corr.anchor_fraction)
    groups = cfg.real_groups_per_step or max(1, round(cfg.groups_per_step * fraction))
    cap = math.ceil(4 * cfg.steps * cfg.groups_per_step / groups)
    return dataclasses.replace(
        cfg, arms=("wmrl",), world_model="none", judge_model=None, groups_per_step=groups, steps=cap,
        real_groups_per_step=None, cpu_budget_s=None if cpu_budget_s is None else float(cpu_budget_s), preset=f"{cfg.preset}/real-arm",
        # a shared adapter folder gets a subfolder: the WMRL arm's last adapter may still be loaded
        vllm_adapter_dir=str(Path(cfg.vllm_adapter_dir) / "real-arm") if cfg.vllm_adapter_dir else None,
        # every group executed; nothing to correct; the costs counted as the WMRL arm counts them
        correction=type(corr)(anchor_fraction=1.0, cost_basis=corr.cost_basis, cost_prices=corr.cost_prices,
                              cost_unit=corr.cost_unit),
    )


def spent_cpu_s(ledger: Any) -> float:
    """CPU-seconds a run has spent on training: the sum of :data:`TRAINING_SOURCES` in ``ledger``
    (a :class:`~wmrl_envs.core.CostLedger`; a learned world model's refits are in ``world_model``)."""
    return float(sum(ledger.cpu_seconds(s) for s in TRAINING_SOURCES))


def budget_reached(spent: float, steps_done: int, budget: float | None, next_step: float | None = None) -> bool:
    """Whether a run under ``--cpu-budget-s`` stops before its next step.

    A step starts only while ``spent + next_step / 2 < budget``: the run ends at the whole number of
    steps whose total is nearest the budget, as far as the next step's cost is known.

    Args:
        spent: CPU-seconds spent on training so far.
        steps_done: steps trained so far (a run always trains its first step).
        budget: the budget in CPU-seconds; ``None``: no budget (never stops).
        next_step: the next step's expected CPU-seconds; ``None``: the mean step so far (``spent /
            steps_done``). Steps grow dearer as a policy learns to write programs that run longer
            (the real arm's last steps cost up to 1.5 times its mean), so the mean so far let the
            real arm overrun the WMRL arm's compute by more than half a step in 4 of 8 runs; the
            loop passes the mean of the last 3 steps.

    Example:
        >>> budget_reached(90.0, 3, 100.0), budget_reached(80.0, 4, 100.0), budget_reached(0.0, 0, 1.0)
        (True, False, False)
    """
    if budget is None or steps_done <= 0:
        return False
    step = spent / steps_done if next_step is None else float(next_step)
    return spent + 0.5 * step >= budget


MIN_TASKS_FOR_VERDICT = 5
"""Held-out tasks both arms must have graded before the verdict names a winner: with fewer, even a
t-interval rests on 1-3 degrees of freedom (a tiny run's 2 tasks)."""


def publish_progress(run_dir: str | Path, *, eval_before: Mapping[str, Any], spent: float, steps_trained: int,
                     final: bool, steps_planned: int | None = None) -> None:
    """Write the WMRL arm's progress to ``run_dir/arm_progress.json`` (atomically) for the real arm
    training beside it: the initial policy's held-out evaluation (the real arm's too: the same
    initial policy), the training CPU-seconds spent so far (:func:`spent_cpu_s`), the steps trained,
    and whether training is over (``final``: ``spent`` is then the summary's ``training_cpu_s``).

    Args:
        run_dir: the WMRL arm's run folder.
        eval_before: :func:`agents.train.evaluation.evaluate`'s dict for the initial policy.
        spent: training CPU-seconds so far (>= 0).
        steps_trained: GRPO steps done.
        final: the WMRL arm trains no further step.
        steps_planned: the WMRL arm's configured steps (for the real arm's estimate of the
            budget while it is not final: :meth:`CpuBudget.estimate`).
    """
    from agents.train.checkpoint import json_default
    from wmrl_envs.utils import write_json_atomic

    write_json_atomic(Path(run_dir) / PROGRESS_FILE, {"eval_before": eval_before, "training_cpu_s": float(spent),
                                                      "steps_trained": int(steps_trained), "final": bool(final),
                                                      "steps_planned": steps_planned},
                      default=json_default)


def read_progress(run_dir: str | Path) -> dict[str, Any] | None:
    """The dict :func:`publish_progress` wrote in ``run_dir``; ``None`` before the first write."""
    try:
        return json.loads((Path(run_dir) / PROGRESS_FILE).read_text())
    except FileNotFoundError:
        return None


class CpuBudget:
    """The stop rule of an arm under a CPU budget (:func:`budget_reached`), with the budget either
    known or followed from the WMRL arm as it trains beside this one.

    Followed (``follow``), the budget is not known until the WMRL arm ends training; until then
    its spent CPU-seconds are a lower bound of it. :meth:`stop_before` starts a step when the rule
    says so against that lower bound (it would against the final total too), stops when the total
    is final and the rule says stop, and otherwise waits for the WMRL arm's next step. So the real
    arm stops at the same step as it would trained after the WMRL arm, never ahead of its compute.

    Args:
        cpu_s: a known budget in CPU-seconds (``None`` with ``follow`` unset: no budget).
        follow: the WMRL arm's run folder, whose :data:`PROGRESS_FILE` gives the budget.
        poll_s: seconds between reads of that file while waiting.
        alive: called while waiting; ``False`` means the WMRL arm's process has gone without a
            final total (default: always alive).
        log: called with a line when :meth:`stop_before` starts waiting for the WMRL arm and
            when it goes on (default: silent), e.g. ``print`` for the real arm's log.

    Raises:
        ValueError: both ``cpu_s`` and ``follow`` given.
    """

    def __init__(self, cpu_s: float | None = None, *, follow: str | Path | None = None, poll_s: float = 1.0,
                 alive: Any = None, log: Any = None) -> None:
        if cpu_s is not None and follow is not None:
            raise ValueError("CpuBudget takes a known budget (cpu_s) or a run folder to follow, not both")
        self.cpu_s, self.follow, self.poll_s = cpu_s, None if follow is None else Path(follow), float(poll_s)
        self._alive = alive or (lambda: True)
        self._log = log or (lambda line: None)
        self.waited_s = 0.0
        """Seconds :meth:`stop_before` spent waiting for the WMRL arm (wall-clock, no CPU)."""

    def limit(self) -> tuple[float | None, bool]:
        """``(budget or lower bound in CPU-seconds, whether it is final)``; ``(None, True)``: no budget."""
        if self.follow is None:
            return self.cpu_s, True
        progress = read_progress(self.follow)
        if progress is None:
            return 0.0, False
        return float(progress["training_cpu_s"]), bool(progress["final"])

    def estimate(self) -> float | None:
        """The budget as best known now, for a progress display only (not for the stop rule): a
        final or known budget as it is; a followed one still growing extrapolated from the WMRL
        arm's mean step to its planned steps (its lower bound when that is unknown)."""
        budget, final = self.limit()
        if final or self.follow is None:
            return budget
        progress = read_progress(self.follow) or {}
        done, planned = progress.get("steps_trained") or 0, progress.get("steps_planned")
        if done > 0 and planned:
            return max(budget, budget / done * planned)
        return budget

    def stop_before(self, spent: float, steps_done: int, next_step: float | None = None) -> bool:
        """Whether the arm stops before its next step, having spent ``spent`` CPU-seconds on
        ``steps_done`` steps, the next expected to cost ``next_step`` (:func:`budget_reached`);
        blocks while a followed budget cannot tell yet.

        Raises:
            RuntimeError: the followed WMRL arm's process ended without a final total.
        """
        t0, waiting, decided = time.perf_counter(), False, None
        try:
            while True:
                budget, final = self.limit()
                if final and budget is not None and budget <= 0 and self.follow is not None:
                    decided = True
                    return True  # the WMRL arm trained nothing: no compute to match
                if not budget_reached(spent, steps_done, budget, next_step):
                    decided = False
                    return False
                if final:
                    decided = True
                    return True
                if not self._alive():
                    raise RuntimeError(f"the WMRL arm in {self.follow} stopped before the end of its training; the "
                                       "real arm waits for its total: resume the run with wmrl train --resume")
                if not waiting:
                    waiting = True
                    self._log(f"waiting for the WMRL arm: this arm has spent {spent:.0f} CPU-s in {steps_done} "
                              f"step(s), the WMRL arm {budget:.0f} CPU-s so far; another step could overrun it")
                time.sleep(self.poll_s)
        finally:
            self.waited_s += time.perf_counter() - t0
            if waiting and decided is not None:  # not on an interrupt or an error
                self._log(f"{'stops here' if decided else 'went on'} after {time.perf_counter() - t0:.0f} s of waiting "
                          "for the WMRL arm" + (": its final total leaves no room for another step" if decided else ""))


def paired_over_tasks(a: Mapping[str, float], b: Mapping[str, float], level: float = 0.95,
                      bounds: tuple[float, float] | None = (-1.0, 1.0)) -> dict[str, Any] | None:
    """Mean of ``a[t] - b[t]`` over the tasks both have, with a Student-t interval over tasks.

    A percentile bootstrap over a handful of tasks is far too narrow (a fresh review measured 13%
    of null runs "resolved" at 8 tasks and 50% at 2); the t-interval keeps its coverage for few
    tasks when the differences are roughly normal. It covers the held-out tasks and their
    evaluation draws for *one* pair of trained policies, not training's variation over seeds.

    Args:
        a, b: ``{task: figure}`` (non-finite figures are left out).
        level: the interval's coverage, in (0, 1).
        bounds: the range of the mean difference, to which the interval is clipped (default
            ``(-1, 1)``: figures on the reward scale [0, 1]); ``None`` leaves it unclipped.

    Returns:
        ``{"difference", "difference_ci": [lo, hi] or None (fewer than 2 tasks), "share_tasks_a_higher",
        "share_tasks_tied", "n_tasks", "per_task": {task: a - b}}``; ``None`` without a common task.

    Example:
        >>> p = paired_over_tasks({"x": 0.6, "y": 0.7, "z": 0.8}, {"x": 0.5, "y": 0.7, "z": 0.6})
        >>> round(p["difference"], 3), [round(v, 3) for v in p["difference_ci"]]
        (0.1, [-0.148, 0.348])
    """
    tasks = sorted(t for t in set(a) & set(b)
                   if a[t] is not None and b[t] is not None and math.isfinite(a[t]) and math.isfinite(b[t]))
    if not tasks:
        return None
    d = np.array([a[t] - b[t] for t in tasks], dtype=float)
    from agents.train.relative import mean_t_interval

    ci = mean_t_interval(d, level, bounds)
    return {"difference": float(d.mean()), "difference_ci": ci, "share_tasks_a_higher": float(np.mean(d > 0)),
            "share_tasks_tied": float(np.mean(d == 0)), "n_tasks": int(d.size), "method": "t-interval over tasks",
            "per_task": {t: float(x) for t, x in zip(tasks, d)}}


def _relative_per_task(summary: Mapping[str, Any]) -> dict[str, float]:
    after = ((summary.get("copy_baseline") or {}).get("after") or {})
    return dict(after.get("per_task") or {})


def _mean_score_per_task(evaluation: Mapping[str, Any] | None) -> dict[str, float]:
    out = {}
    for t, v in ((evaluation or {}).get("trajectories") or {}).items():
        s = [x for x in v.get("scores", []) if x is not None and math.isfinite(x)]
        if s:
            out[t] = float(np.mean(s))
    return out


def compare_arms(wmrl: Mapping[str, Any], real: Mapping[str, Any]) -> dict[str, Any]:
    """The two arms of a run at equal compute, from their ``summary.json`` dicts.

    Args:
        wmrl, real: the WMRL arm's and the real arm's summaries (:func:`agents.train.summary.summarise`).

    Returns:
        ``{"training_cpu_s": {"wmrl", "real", "ratio"}, "cpu_s_per_execution": {"real", "wmrl_estimate"},
        "steps_trained", "rollouts", "real_executions", "groups_per_step", "heldout": {...}}``
        (``cpu_s_per_execution``: measured over the real arm's executions, and the WMRL arm's
        task-weighted figure from its anchors behind ``cost_vs_real_grpo``) where ``heldout`` holds, after
        training, each arm's relative test-half score (``--reward relative``: the shown line 0.5,
        the board's best 0.75) and mean held-out score, and their paired differences WMRL − real
        over the held-out tasks (:func:`paired_over_tasks`); and avg@k of both arms with the
        difference's CI (:func:`agents.train.evaluation.heldout_spread`, a t-interval over the
        tasks). ``verdict``: one sentence. (:func:`agents.train.loop.train` adds
        ``schedule``: whether the real arm trained beside the WMRL arm or after it.)
    """
    from agents.train.evaluation import heldout_spread

    cw = (wmrl.get("training_cpu_s") or 0.0)
    cr = (real.get("training_cpu_s") or 0.0)
    rel_w, rel_r = _relative_per_task(wmrl), _relative_per_task(real)
    mean_w = _mean_score_per_task(wmrl.get("heldout_after"))
    mean_r = _mean_score_per_task(real.get("heldout_after"))
    spread = heldout_spread(real.get("heldout_after"), wmrl.get("heldout_after"))  # "after" - "before" = WMRL - real
    rel = paired_over_tasks(rel_w, rel_r)
    heldout = {
        "relative_score": {"wmrl": _mean(rel_w), "real": _mean(rel_r), "paired": rel},
        "mean_score": {"wmrl": _mean(mean_w), "real": _mean(mean_r), "paired": paired_over_tasks(mean_w, mean_r)},
        "avg_at_k": {"k": (wmrl.get("heldout_after") or {}).get("k"),
                     "wmrl": (wmrl.get("heldout_after") or {}).get("overall"),
                     "real": (real.get("heldout_after") or {}).get("overall"),
                     "difference": (spread.get("difference") or {}).get("overall"),
                     "difference_ci": (spread.get("difference") or {}).get("overall_ci")},
        "before": {"relative_score": _mean(dict(((wmrl.get("copy_baseline") or {}).get("before") or {}).get("per_task")
                                                 or {})),
                   "avg_at_k": (wmrl.get("heldout_before") or {}).get("overall")},
    }
    # what one execution cost: measured over the real arm's executions, and the WMRL arm's anchors' figure
    # behind its "cost of the same rollouts" arithmetic (a few anchor groups, e.g. free syntax errors)
    n_real_exec = real.get("real_executions") or 0
    per_exec = {"real": ((real.get("cpu_seconds") or {}).get("execution", float("nan")) / n_real_exec
                         if n_real_exec else float("nan")),
                "wmrl_estimate": ((wmrl.get("cost_vs_real_grpo") or {}).get("cpu_s") or {}).get("seconds_per_execution",
                                                                                                 float("nan"))}
    out = {
        "training_cpu_s": {"wmrl": cw, "real": cr, "ratio": cr / cw if cw > 0 else float("nan")},
        "cpu_s_per_execution": per_exec,
        "steps_trained": {"wmrl": wmrl.get("steps_trained"), "real": real.get("steps_trained")},
        "groups_per_step": {"wmrl": wmrl.get("groups_per_step"), "real": real.get("groups_per_step")},
        "rollouts": {"wmrl": wmrl.get("rollouts"), "real": real.get("rollouts")},
        "real_executions": {"wmrl": wmrl.get("real_executions"), "real": real.get("real_executions")},
        "heldout": heldout,
    }
    out["verdict"] = _verdict(out)
    return out


def _mean(per_task: Mapping[str, float]) -> float | None:
    v = [x for x in per_task.values() if x is not None and math.isfinite(x)]
    return float(np.mean(v)) if v else None


def _verdict(out: Mapping[str, Any]) -> str:
    p = out["heldout"]["relative_score"]["paired"] or out["heldout"]["mean_score"]["paired"]
    what = "relative test-half score" if out["heldout"]["relative_score"]["paired"] else "mean held-out score"
    c = out["training_cpu_s"]
    if not p:
        return "no held-out task graded in both arms: no comparison"
    at = f"at {c['wmrl']:.0f} vs {c['real']:.0f} training CPU-s"
    diff = f"WMRL - real GRPO = {p['difference']:+.3f} in {what} over {p['n_tasks']} held-out tasks"
    ci = p["difference_ci"]
    if ci is None or p["n_tasks"] < MIN_TASKS_FOR_VERDICT:
        return f"{diff} {at}: too few tasks for a verdict (fewer than {MIN_TASKS_FOR_VERDICT})"
    ci_s = f"[95% CI {ci[0]:+.3f}, {ci[1]:+.3f}]"
    seed = "on this seed (one pair of trained policies: training's variation over seeds is not in the CI)"
    if ci[0] > 0:
        return f"WMRL ahead of real-execution GRPO {at} {seed}: {diff} {ci_s}"
    if ci[1] < 0:
        return f"real-execution GRPO ahead of WMRL {at} {seed}: {diff} {ci_s}"
    return f"no difference resolved {at} {seed}: {diff} {ci_s}"


def arms_rows(arms: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The summary table's leading rows: both arms' held-out quality at equal compute."""
    if not arms:
        return []

    def f(v: Any, nd: int = 3) -> str:
        return f"{v:.{nd}f}" if isinstance(v, (int, float)) and math.isfinite(v) else "n/a"

    def d(p: Mapping[str, Any] | None) -> str:
        if not p:
            return "n/a"
        ci = p.get("difference_ci")
        return f"{p['difference']:+.3f}" + (f" [95% CI {ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "") + \
            f" on {p['n_tasks']} tasks (WMRL higher on {p['share_tasks_a_higher']:.0%}, tied on {p['share_tasks_tied']:.0%})"

    if "skipped" in arms:
        return [("ARMS AT EQUAL COMPUTE", f"no real arm: {arms['skipped']}")]
    h, c = arms["heldout"], arms["training_cpu_s"]
    rel, ms, ak = h["relative_score"], h["mean_score"], h["avg_at_k"]
    ak_ci = ak.get("difference_ci")
    return [
        ("ARMS AT EQUAL COMPUTE: training CPU-s, WMRL / real-execution GRPO",
         f"{f(c['wmrl'], 0)} / {f(c['real'], 0)} (real / WMRL {f(c['ratio'], 2)})"),
        ("  steps x groups per step, WMRL / real", f"{arms['steps_trained']['wmrl']} x {arms['groups_per_step']['wmrl']} / "
                                                   f"{arms['steps_trained']['real']} x {arms['groups_per_step']['real']}"),
        ("  the real arm trained", arms.get("schedule", "n/a")),
        *([("  CPU-s per execution: measured on the real arm / the WMRL arm's estimate from its anchors",
            f"{f(arms['cpu_s_per_execution']['real'], 2)} / {f(arms['cpu_s_per_execution']['wmrl_estimate'], 2)} (the "
            "estimate prices 'the cost of the same rollouts' below)")] if arms.get("cpu_s_per_execution") else []),
        ("  held-out relative score (test half; shown line 0.5, board's best 0.75), before / WMRL / real",
         f"{f(h['before']['relative_score'])} / {f(rel['wmrl'])} / {f(rel['real'])}"),
        ("  WMRL - real, relative score, paired over tasks", d(rel["paired"])),
        ("  each arm - copying the shown line (relative score 0.5): WMRL / real",
         f"{f(rel['wmrl'] - 0.5 if rel['wmrl'] is not None else None)} / "
         f"{f(rel['real'] - 0.5 if rel['real'] is not None else None)}"),
        ("  held-out mean score, WMRL / real; WMRL - real", f"{f(ms['wmrl'])} / {f(ms['real'])}; {d(ms['paired'])}"),
        (f"  held-out avg@{ak.get('k')}, WMRL / real; WMRL - real",
         f"{f(ak['wmrl'], 1)} / {f(ak['real'], 1)}; "
         + (f"{ak['difference']:+.1f}" if isinstance(ak.get("difference"), (int, float)) else "n/a")
         + (f" [95% CI {ak_ci[0]:+.1f}, {ak_ci[1]:+.1f}]" if ak_ci else "")),
        ("  verdict at equal compute", arms["verdict"]),
    ]


def plot_arms(wmrl: Mapping[str, Any], real: Mapping[str, Any], path: str | Path) -> None:
    """``arms.png``: held-out relative score (or mean score without ``--reward relative``) against
    training CPU-seconds for both arms: the shared initial policy at 0, each arm's trained policy at
    its spent CPU-seconds (one run; ``benchmarks/main_job_arms.py`` plots the committed seeds), joined
    by a dotted line because nothing was evaluated in between. Each
    trained end carries ± half the paired interval's half-width, so ends whose bars do not overlap
    differ by about what the interval resolves; the relative score's axis is its whole range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = compare_arms(wmrl, real)
    rel = arms["heldout"]["relative_score"]
    key, label = ("relative_score", "held-out relative score (test half)") if rel["wmrl"] is not None else \
        ("mean_score", "held-out mean score")
    before = arms["heldout"]["before"]["relative_score"] if key == "relative_score" else \
        _mean(_mean_score_per_task(wmrl.get("heldout_before")))
    fig, ax = plt.subplots(figsize=(6, 4.2))
    p = arms["heldout"][key]["paired"]
    half = (p["difference_ci"][1] - p["difference_ci"][0]) / 2 if p and p.get("difference_ci") else None
    for arm, colour in (("wmrl", "C0"), ("real", "C1")):
        y = arms["heldout"][key][arm]
        x = arms["training_cpu_s"][arm]
        if y is None or before is None:
            continue
        # two evaluations only (before and after training): a dotted join, not a measured curve
        ax.plot([0, x], [before, y], ls=":", lw=1, color=colour, alpha=0.6)
        ax.plot([0, x], [before, y], ls="none", marker="o", color=colour,
                label="WMRL" if arm == "wmrl" else "real-execution GRPO")
        if half is not None:  # the paired difference's half-width: how far apart the two ends must be
            ax.errorbar([x], [y], yerr=[[half / 2], [half / 2]], color=colour, capsize=4)
    if key == "relative_score":  # the score's whole range: a zoomed axis makes a tie look like a lead
        ax.axhline(0.5, color="grey", ls="--", lw=1, label="copy the shown line")
        ax.set_ylim(0.28, 1.02)
    ax.set_xlabel("training CPU-seconds")
    ax.set_ylabel(label)
    ax.set_title("wmrl train: both arms at equal compute\n(evaluated before and after training only)", fontsize=10)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
