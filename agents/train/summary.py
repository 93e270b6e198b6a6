"""What ``wmrl train`` reports: the summary of a run (``summary.json``), its table
(``summary.md`` and the terminal) and the calibration plot (``calibration.png``).

Split from :mod:`agents.train.loop` at the seam between running the job and reporting it; the
quantities (routes, ρ, anchor pairs, calibration errors, ungraded counts, costs per source) are
those of ``docs/method.md``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

__all__ = ["secret_record", "summarise", "world_model_record", "anchor_group_r", "r_among_valid", "task_weighted_execution_cost", "cost_vs_real_grpo", "anchor_advice", "summary_markdown", "print_summary", "plot_calibration"]


def secret_record() -> dict[str, Any]:
    """Which task secret the run's data came from: its one-way fingerprint, never the secret."""
    from wmrl_envs.envs.autoresearch.secret import is_reference_secret, secret_fingerprint

    return {"fingerprint": secret_fingerprint(), "reference": is_reference_secret()}


def summarise(cfg: Any, c: Any, before: dict, after: dict, wall: float, metrics_path: Path | None = None) -> dict[str, Any]:
    """The run's ``summary.json``.

    Args:
        cfg: the run's :class:`agents.train.config.TrainConfig`.
        c: the run's components (``wrapper``, ``judge``, ``env``; from the trainer's build).
        before, after: :func:`agents.train.evaluation.evaluate`'s results before and after training.
        wall: the run's wall-clock seconds (all sessions of a resumed run).
        metrics_path: the run's ``metrics.jsonl`` (steps trained, each group's task and its
            executions' CPU-seconds: the task-weighted cost per execution); None: not read.

    Returns:
        A JSON-serialisable dict: counts (rollouts, real executions, world-model predictions,
        groups, anchor groups), the world model (:func:`world_model_record`: its name and kind,
        its within-group r on the anchor groups with a 95% CI), wall-clock and CPU-seconds per cost
        source, ρ, anchor pairs, calibration errors, ungraded counts by cause, the held-out
        results with their spread over the held-out tasks (``heldout_spread``:
        :func:`agents.train.evaluation.heldout_spread`, Student-t 95% CIs over tasks before, after and of
        the paired difference), what real-execution GRPO would have cost (:func:`cost_vs_real_grpo`), the
        advisor's verdict (:func:`anchor_advice`) and the task secret's fingerprint.
    """
    from agents.train.evaluation import heldout_spread

    from agents.train.arms import spent_cpu_s

    led = c.wrapper.loop.ledger
    stats = c.wrapper.loop.stats()  # one snapshot: corrections, routing, ungraded counts
    judge_stats = c.judge.stats() if hasattr(c.judge, "stats") else {}
    steps = _metric_steps(metrics_path)
    per_exec = task_weighted_execution_cost(steps)
    return {
        "preset": cfg.preset,
        "arm": "real" if getattr(cfg, "world_model", None) == "none" else "wmrl",
        "steps": cfg.steps,
        "steps_trained": len(steps) if metrics_path is not None else None,
        "groups_per_step": cfg.groups_per_step,
        # what training cost in all (held-out evaluation not included): the arms are compared on it
        "training_cpu_s": spent_cpu_s(led),
        "sandbox_backend": getattr(c.env.sandbox, "name", str(c.env.sandbox)),
        "task_secret": secret_record(),
        "rollouts": stats["episodes"],
        "real_executions": led.count("execution"),
        "world_model_predictions": led.count("world_model"),
        "world_model_calls": judge_stats,
        "anchor_groups": stats["anchor_groups_routed"],
        "groups": stats["groups_routed"],
        "realised_anchor_fraction": stats["realised_anchor_fraction"],
        "configured_anchor_fraction": cfg.correction.anchor_fraction,
        # the floor of min_anchor_groups anchor groups per anchor_window steps, as a share of the groups:
        # above the configured fraction it sets the realised one (the tiny preset: 1 of 2 groups)
        "anchor_floor_share": (cfg.correction.min_anchor_groups
                               / (cfg.correction.anchor_window * max(1, cfg.groups_per_step))),
        "world_model": world_model_record(cfg, c),
        "seconds": {s: led.seconds(s) for s in ("execution", "world_model", "generation", "update")},
        "cpu_seconds": {s: led.cpu_seconds(s) for s in ("execution", "world_model", "generation", "update")},
        "seconds_per_execution": led.seconds("execution") / max(1, led.count("execution")),
        "seconds_per_world_model_prediction": led.seconds("world_model") / max(1, led.count("world_model")),
        "rho": stats["rho"],
        "disagreement_ema": stats["disagreement_ema"],
        # rho's warm-up: anchor groups that counted, of those it needs; no_spread: real scores all equal
        # (None when rho is off: nothing to warm up)
        "rho_warmup": None if not cfg.correction.denoise else {
            "counted": stats.get("denoiser_groups_counted"), "needed": stats.get("denoiser_warmup_groups"),
            "no_spread": stats.get("denoiser_groups_no_spread")},
        "anchor_pairs": stats["anchor_pairs"],
        "debiaser_fitted": stats["debiaser_fitted"],
        # the debiasing map in use (debias_map="auto" chooses it out of fold) and the candidates' errors
        "debias_map": stats.get("debias_map"),
        "debias_oof_mse": stats.get("debias_oof_mse", {}),
        # world-model groups corrected while the fitted map was flat (their calibrated scores are
        # one constant: no advantage signal; the corrector warns)
        "flat_map_groups": stats.get("flat_map_groups", 0),
        "calibration_mae_raw": stats["calibration_mae_raw"],
        "calibration_mae_calibrated": stats["calibration_mae_calibrated"],
        "calibration_mse_raw": stats["calibration_mse_raw"],
        "calibration_mse_calibrated": stats["calibration_mse_calibrated"],
        # failures of the machinery (docs/method.md, "Ungraded rollouts")
        "ungraded_rollouts": stats["ungraded_rollouts"],
        "ungraded_share": stats["ungraded_share"],
        "ungraded_by_cause": stats["ungraded_by_cause"],
        "ungraded_scores_by_cause": led.ungraded_counts(),
        "max_ungraded_share": cfg.max_ungraded_share,
        "heldout_before": before,
        "heldout_after": after,
        "heldout_spread": heldout_spread(before, after),
        # --reward relative: the policy against copying the shown line, on the held-out tasks' test half
        "reward": getattr(cfg, "reward", "leaderboard"),
        "baseline": getattr(cfg, "baseline", None),
        "copy_baseline": {"before": (before or {}).get("copy_baseline"), "after": (after or {}).get("copy_baseline")},
        "wall_clock_s": wall,
        # real-execution GRPO executes every turn of every episode (max_turns each: world-model episodes
        # always take all of them)
        "cost_vs_real_grpo": cost_vs_real_grpo(led, stats["episodes"] * int(getattr(cfg, "max_turns", 1)), per_exec,
                                               real_execution=c.judge is None),
        "anchor_advice": anchor_advice(c.wrapper.loop),
    }


def world_model_record(cfg: Any, c: Any) -> dict[str, Any]:
    """The run's world model: ``name`` (``cfg.world_model``), ``kind`` (its class), ``learns``
    (it learns from the anchor groups), ``within_group_r`` (:func:`anchor_group_r`) and, for a
    learned one, ``observed_groups``, ``train_rollouts``, ``refits``, ``fitted``, ``fit_cpu_s``
    (CPU-seconds of its refits with their out-of-fold rescoring, inside the ledger's
    ``world_model`` source), ``static_check`` (whether the host's static check decided certain
    failures) and ``prechecked_predictions`` (how many predictions it decided)."""
    wm, loop = c.judge, c.wrapper.loop
    if wm is None:  # the real arm: no world model
        return {"name": "none", "kind": None, "learns": False, "within_group_r": None}
    out: dict[str, Any] = {"name": getattr(cfg, "world_model", "judge"), "kind": type(wm).__name__,
                           "learns": bool(loop.learns), "within_group_r": anchor_group_r(loop)}
    if loop.learns:
        out.update(observed_groups=int(getattr(wm, "n_observed_groups", 0)), train_rollouts=int(getattr(wm, "n_rollouts", 0)),
                   refits=int(getattr(wm, "n_refits", 0)), fitted=bool(getattr(wm, "fitted", False)),
                   fit_cpu_s=float(getattr(wm, "fit_cpu_s", 0.0)),
                   static_check=getattr(wm, "precheck", None) is not None,
                   prechecked_predictions=int(getattr(wm, "n_precheck", 0)))
    return out


def anchor_group_r(loop: Any, n_boot: int = 1000) -> dict[str, Any]:
    """The world model's pooled within-group correlation r with the real scores on the run's
    training anchor groups, with its 95% bootstrap CI over groups, from 2 groups on (the
    advisor's verdict needs ``min_groups``; this figure does not); and the same r among the
    rollouts that ran validly (:func:`r_among_valid`).

    The scores are those the advisor holds (a learned world model's are out of fold after each
    refit, so no group's outcome enters its own score), calibrated as the advisor calibrates them
    (``"crossfit"``, an isotonic map fitted out of sample, when the run debiases; raw otherwise).
    Among valid programs the calibration follows the map the run trains with: an isotonic one
    (out of sample, as above) can flatten the valid programs' scores; an identity or linear one
    leaves their ranking as it is (the raw scores, sign-flipped by a decreasing line).

    Returns:
        ``{"r", "r_ci": [lo, hi], "n_groups", "calibration", "among_valid"}`` (NaN where not
        defined: fewer than 2 groups with 2 rollouts scored both ways, or no within-group spread);
        ``among_valid`` is :func:`r_among_valid`'s record.
    """
    wm_scores, real = loop.advisor.groups()
    calibration = "crossfit" if loop.corrector.debias else None
    seed = getattr(loop.advisor, "seed", 0)
    out = _pooled_r(wm_scores, real, calibration, n_boot, seed)
    out["calibration"] = calibration or "raw"
    debiaser = loop.corrector.debiaser
    valid_cal: Any = None
    if loop.corrector.debias and debiaser.chosen == "isotonic":
        valid_cal = "crossfit"
    elif loop.corrector.debias and debiaser.chosen == "linear":
        valid_cal = "linear"
        wm_scores = [[None if x is None else float(y) for x, y in zip(w, debiaser.transform(
            [np.nan if x is None else x for x in w]))] for w in wm_scores]
    out["among_valid"] = r_among_valid(wm_scores, real, "crossfit" if valid_cal == "crossfit" else None, n_boot, seed)
    out["among_valid"]["calibration"] = valid_cal or "raw"
    return out


def _pooled_r(wm_scores: Sequence[Sequence[Any]], real: Sequence[Sequence[Any]], calibrate: str | None, n_boot: int,
              seed: int) -> dict[str, Any]:
    """``{"r", "r_ci", "n_groups"}``: the advisor's pooled within-group r of these groups (scores
    calibrated by ``calibrate``, as :meth:`~wmrl_envs.core.advisor.AnchorAdvisor.advise` does)."""
    from wmrl_envs.core import CostRates
    from wmrl_envs.core.advisor import AnchorAdvisor

    adv = AnchorAdvisor(min_groups=2, n_boot=n_boot, seed=seed)
    for w, r in zip(wm_scores, real):
        adv.add_group(w, r)
    a = adv.advise(CostRates(execution_s=1.0, world_model_s=0.0), calibrate=calibrate)
    return {"r": a.r, "r_ci": list(a.r_ci), "n_groups": a.n_groups}


def r_among_valid(wm_scores: Sequence[Sequence[Any]], real: Sequence[Sequence[Any]], calibrate: str | None = "crossfit",
                  n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """The world model's within-group r among the anchor rollouts that ran validly: what it tells
    GRPO about *which* valid program is better, beside telling valid from failed.

    On AutoResearch a failed program scores at most 0.2 (``STATUS_SCORES``) and a valid one at
    least 0.3, so most of the within-group spread of a group with failures is validity, which a
    static check or a small model learns quickly; the task's metric lives in the valid programs'
    spread. A high r overall with r near 0 here says the world model teaches format, not quality
    (issue 36). The scores are calibrated over *all* groups first (``calibrate``), then each group
    keeps its rollouts whose real score is above the highest failure score; groups with fewer than
    2 such rollouts drop out. The interval is a percentile bootstrap over those groups: a
    resample whose world-model scores never vary among valid programs while the real ones do
    counts as r = 0 (no ranking), one whose real scores never vary is drawn again, so a figure
    carried by a single group gets the width it deserves.

    Args:
        wm_scores, real: per anchor group, the world-model scores (raw, or already mapped) and the
            real scores of its rollouts (``AnchorAdvisor.groups()``; ``None`` = missing).
        calibrate: ``"crossfit"`` (an out-of-sample isotonic map, as the run's isotonic debiasing)
            or ``None`` (the scores as given).
        n_boot, seed, level: the bootstrap over groups and the interval's coverage.

    Returns:
        ``{"r", "r_ci": [lo, hi], "n_groups", "n_rollouts", "above", "world_model_varies"}``.
        ``above`` is the failure score the real scores must exceed. ``world_model_varies`` is False
        when no kept group's world-model scores vary: ``r`` is then ``None`` (nothing ranked, so no
        correlation to report; the summary says so). ``r`` is NaN with fewer than 2 kept groups or
        no real spread; ``r_ci`` is ``[NaN, NaN]`` wherever no interval can be drawn.
    """
    from wmrl_envs.core.advisor_model import crossfit_calibrated, pooled_within_group_correlation
    from wmrl_envs.envs.autoresearch.grading import STATUS_SCORES

    above = max(STATUS_SCORES.values())
    scored = crossfit_calibrated(wm_scores, real) if calibrate == "crossfit" else [list(w) for w in wm_scores]
    kept_w, kept_r = [], []
    for w, r in zip(scored, real):
        keep = [i for i, x in enumerate(r) if x is not None and math.isfinite(x) and x > above
                and w[i] is not None and math.isfinite(w[i])]
        if len(keep) >= 2:
            kept_w.append(np.asarray([w[i] for i in keep], dtype=float))
            kept_r.append(np.asarray([r[i] for i in keep], dtype=float))
    nan2 = [float("nan"), float("nan")]
    out: dict[str, Any] = {"n_groups": len(kept_r), "n_rollouts": int(sum(x.size for x in kept_r)), "above": above}
    varies_w = [bool(np.ptp(w) > 1e-12) for w in kept_w]
    varies_r = [bool(np.ptp(r) > 1e-12) for r in kept_r]
    out["world_model_varies"] = any(varies_w)
    if len(kept_r) < 2 or not any(varies_r):
        return {**out, "r": float("nan"), "r_ci": nan2}
    if not any(varies_w):
        return {**out, "r": None, "r_ci": nan2}
    r_point, _ = pooled_within_group_correlation(kept_w, kept_r)
    rng = np.random.default_rng(seed)
    reps = []
    for _ in range(int(n_boot)):
        idx = rng.integers(0, len(kept_r), len(kept_r))
        if not any(varies_r[i] for i in idx):
            continue
        if not any(varies_w[i] for i in idx):
            reps.append(0.0)
            continue
        rb, _ = pooled_within_group_correlation([kept_w[i] for i in idx], [kept_r[i] for i in idx])
        reps.append(rb if math.isfinite(rb) else 0.0)
    ci = ([float(v) for v in np.quantile(reps, [(1 - level) / 2, (1 + level) / 2])] if len(reps) >= 20 else nan2)
    return {**out, "r": float(r_point), "r_ci": ci}


def _metric_steps(metrics_path: Path | None) -> list[dict[str, Any]]:
    """The trained steps' lines of ``metrics.jsonl`` (those with ``tasks``; none without a path)."""
    import json

    if metrics_path is None or not Path(metrics_path).exists():
        return []
    out = []
    for ln in Path(metrics_path).read_text().splitlines():
        try:
            rec = json.loads(ln)
        except json.JSONDecodeError:
            continue
        if "tasks" in rec and "routes" in rec:
            out.append(rec)
    return out


def task_weighted_execution_cost(steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The CPU-seconds of one execution, weighted by how often each task was trained on.

    An AutoResearch execution's cost depends on the task (its data and model) and the outcome;
    the run's executions are its anchor groups' (a few tasks), so their plain mean weights tasks
    by the chance of being anchors. Here each task's mean over its measured executions is
    weighted by the task's share of all the run's groups; a task never executed takes the pooled
    mean of the others.

    Args:
        steps: ``metrics.jsonl``'s step lines (``tasks``, ``routes`` and ``execution_cpu_s``: per
            group, its rollouts' execution CPU-seconds, or None on a world-model group).

    Returns:
        ``{"seconds_per_execution" (task-weighted), "seconds_per_execution_unweighted",
        "tasks_measured", "tasks_trained", "groups_imputed"}``; ``None`` without a measured
        execution.
    """
    by_task: dict[str, list[float]] = {}
    groups: dict[str, int] = {}
    for rec in steps:
        costs = rec.get("execution_cpu_s") or [None] * len(rec["tasks"])
        for task, cost in zip(rec["tasks"], costs):
            groups[task] = groups.get(task, 0) + 1
            for x in cost or []:
                if isinstance(x, (int, float)) and math.isfinite(x):
                    by_task.setdefault(task, []).append(float(x))
    if not by_task:
        return None
    pooled = float(np.mean([x for v in by_task.values() for x in v]))
    means = {t: float(np.mean(v)) for t, v in by_task.items()}
    total = sum(groups.values())
    weighted = sum(n * means.get(t, pooled) for t, n in groups.items()) / total
    return {"seconds_per_execution": weighted, "seconds_per_execution_unweighted": pooled,
            "tasks_measured": len(means), "tasks_trained": len(groups),
            "groups_imputed": int(sum(n for t, n in groups.items() if t not in means))}


def cost_vs_real_grpo(ledger: Any, rollouts: int, per_execution: dict[str, Any] | None = None, *,
                      real_execution: bool = False) -> dict[str, Any]:
    """What the run's training rollouts cost, beside what the same rollouts would have cost under
    real-execution GRPO: every rollout executed at this run's measured cost per execution, no world
    model, the same generation and update.

    This is arithmetic on the anchor fraction, not a measurement of the method: a world model
    that carries no signal would print the same saving. What the method buys is the comparison
    of held-out quality at equal compute (the run's real arm, :func:`agents.train.arms.compare_arms`).

    Args:
        ledger: the run's :class:`~wmrl_envs.core.CostLedger`.
        rollouts: executions real-execution GRPO would make for the run's training rollouts (its
            episodes × turns per episode).
        per_execution: :func:`task_weighted_execution_cost`'s result: its task-weighted CPU-seconds
            per execution replace the ledger's plain mean in ``cpu_s`` (None: the plain mean).
        real_execution: the run *is* real-execution GRPO (no world model: the real arm); the
            verdict says so instead of comparing the run with itself.

    Returns:
        ``{"cpu_s": {...}, "wall_s": {...}, "verdict": str}``; each of the first two with
        ``spent`` (execution + world model + generation + update, seconds), ``real_grpo`` (rollouts
        × seconds per execution + generation + update), ``saving`` (``real_grpo / spent``; NaN
        without a measured execution), ``execution_share_of_real_grpo`` (its executions' share of
        ``real_grpo``: the most any world model could save) and ``spent_by_source``. ``verdict``
        says in CPU-seconds whether this run cost less than real-execution GRPO would have.
    """
    out: dict[str, Any] = {}
    for key, sec in (("cpu_s", ledger.cpu_seconds), ("wall_s", ledger.seconds)):
        n_exec = ledger.count("execution") - (ledger.cpu_unmeasured("execution") if key == "cpu_s" else 0)
        per_exec = sec("execution") / n_exec if n_exec > 0 else float("nan")
        if key == "cpu_s" and per_execution is not None:  # weighted by task (task_weighted_execution_cost)
            per_exec = float(per_execution["seconds_per_execution"])
        common = sec("generation") + sec("update")
        spent = sec("execution") + sec("world_model") + common
        real = rollouts * per_exec + common
        out[key] = {"spent": spent, "real_grpo": real, "seconds_per_execution": per_exec,
                    "saving": real / spent if spent > 0 and math.isfinite(real) else float("nan"),
                    "execution_share_of_real_grpo": rollouts * per_exec / real if real > 0 else float("nan"),
                    "spent_by_source": {s: sec(s) for s in ("execution", "world_model", "generation", "update")}}
    out["cpu_s"]["per_execution_weighting"] = per_execution or {"weighting": "none (plain mean of the ledger)"}
    c = out["cpu_s"]
    if real_execution:
        out["verdict"] = (f"this run is real-execution GRPO (every rollout executed): {c['spent']:.0f} CPU-s; set "
                          "against WMRL at equal compute in the arms' comparison")
    elif not math.isfinite(c["saving"]):
        out["verdict"] = "no measured execution: the cost of real-execution GRPO is unknown"
    elif c["saving"] < 1.0:
        out["verdict"] = (f"these rollouts cost more than executing each of them would have: {c['spent']:.0f} CPU-s "
                          f"against {c['real_grpo']:.0f} ({c['saving']:.2f}x; executions are "
                          f"{c['execution_share_of_real_grpo']:.0%} of that cost)")
    else:
        out["verdict"] = (f"these rollouts cost {c['spent']:.0f} CPU-s against {c['real_grpo']:.0f} had each been "
                          f"executed ({c['saving']:.2f}x less: the anchor fraction's arithmetic, whatever the world "
                          "model's quality; quality at equal compute is the arms' comparison)")
    return out


def anchor_advice(loop: Any) -> dict[str, Any]:
    """The advisor's answer for the run's own anchor groups (:func:`agents.advise.advise_loop`: the
    run's calibration, CPU-seconds from its ledger, and every choice priced at the run's groups per
    step: real execution from the anchor batch up to the run's batch, WMRL at each fraction, world
    model only; ``docs/method.md``, "Every choice"), as a dict, with ``"anchor_window_hint"``
    (:func:`agents.advise.anchor_window_hint`: the ``--anchor-fraction``/``--anchor-window`` that
    realise the fraction at the run's groups per step) when it recommends WMRL;
    ``{"verdict": <why there is none>}`` when the run has no execution or no world-model prediction
    to compare."""
    from agents.advise import advise_loop, anchor_window_hint

    gps = getattr(loop, "groups_per_step", None)
    try:
        advice = advise_loop(loop, groups_per_step=gps)
    except ValueError as exc:
        return {"verdict": f"no advice: {exc}"}
    out = advice.to_dict()
    if advice.use_wmrl and gps and math.isfinite(advice.recommended_fraction):  # the flags that realise it
        out["anchor_window_hint"] = anchor_window_hint(advice.recommended_fraction, gps)
    return out


def _fmt(v: Any, nd: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


_CORRECTION_ROWS = ("world-model predictions (one per turn)", "anchor groups / groups", "realised anchor fraction (configured)",
                    "seconds in the world model", "seconds per world-model prediction", "anchor weight rho",
                    "anchor pairs (debiaser fitted)",
                    "debiasing map in use (out-of-fold MSE of identity / linear / isotonic)",
                    "world-model groups corrected with a flat map", "calibration MAE before (raw WM)",
                    "calibration MAE after (calibrated, prequential)", "calibration MSE before / after (prequential)",
                    "ungraded scores incl. world model on anchors (by cause)")
"""Rows of the world model and its corrections: left out of a real-execution run's table (the real arm)."""


def _fraction(s: dict[str, Any]) -> str:
    """The realised anchor fraction, the configured one, and the floor when the floor set it."""
    real, conf, floor = s["realised_anchor_fraction"], s["configured_anchor_fraction"], s.get("anchor_floor_share")
    text = f"{_fmt(real, 2)} ({_fmt(conf, 2)})"
    if isinstance(floor, float) and isinstance(conf, float) and floor > conf:
        text += (f"; the floor of --min-anchor-groups per --anchor-window steps is {floor:.2f} of the groups, above "
                 "the configured fraction")
    return text


def _rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    rows = _all_rows(s)
    if (s.get("world_model") or {}).get("name") == "none":  # real-execution GRPO: no world model, nothing corrected
        rows = [r for r in rows if r[0] not in _CORRECTION_ROWS]
    return rows


def _all_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    sec = s["seconds"]
    return [
        ("rollouts (training episodes)", _fmt(s["rollouts"])),
        ("sandbox", _fmt(s.get("sandbox_backend"))),
        ("real executions (training; one per turn)", _fmt(s["real_executions"])),
        ("world-model predictions (one per turn)", _fmt(s["world_model_predictions"])),
        ("world model", _fmt_world_model(s.get("world_model"))),
        *([("  of which LLM calls / pre-checks", f"{_fmt(s['world_model_calls'].get('n_model_calls'))} / "
            f"{_fmt(s['world_model_calls'].get('n_precheck'))}")] if s.get("world_model_calls") else []),
        ("anchor groups / groups", f"{s['anchor_groups']} / {s['groups']}"),
        ("realised anchor fraction (configured)", _fraction(s)),
        ("seconds executing", _fmt(sec["execution"], 1)),
        ("seconds in the world model", _fmt(sec["world_model"], 1)),
        ("seconds generating", _fmt(sec["generation"], 1)),
        ("seconds updating", _fmt(sec["update"], 1)),
        ("seconds per real execution", _fmt(s["seconds_per_execution"], 2)),
        ("seconds per world-model prediction", _fmt(s["seconds_per_world_model_prediction"], 2)),
        ("anchor weight rho", _fmt(s["rho"], 2) + _rho_warmup_note(s)),
        ("anchor pairs (debiaser fitted)", f"{s['anchor_pairs']} ({s['debiaser_fitted']})"),
        ("debiasing map in use (out-of-fold MSE of identity / linear / isotonic)",
         f"{s.get('debias_map')} ({' / '.join(_fmt(s.get('debias_oof_mse', {}).get(k)) for k in ('identity', 'linear', 'isotonic'))})"),
        ("world-model groups corrected with a flat map", _fmt(s.get("flat_map_groups", 0))),
        ("calibration MAE before (raw WM)", _fmt(s["calibration_mae_raw"])),
        ("calibration MAE after (calibrated, prequential)", _fmt(s["calibration_mae_calibrated"])),
        ("calibration MSE before / after (prequential)",
         f"{_fmt(s.get('calibration_mse_raw'))} / {_fmt(s.get('calibration_mse_calibrated'))}"),
        ("ungraded rollouts (training; by cause)",
         f"{_fmt(s.get('ungraded_rollouts', 0))} ({_fmt_causes(s.get('ungraded_by_cause', {}))})"),
        ("ungraded scores incl. world model on anchors (by cause)", _fmt_causes(s.get("ungraded_scores_by_cause", {}))),
        ("ungraded held-out trajectories before / after",
         f"{sum(s['heldout_before'].get('ungraded', {}).values())} / {sum(s['heldout_after'].get('ungraded', {}).values())}"),
        *_heldout_rows(s),
        *_copy_rows(s),
        ("wall-clock seconds", _fmt(s["wall_clock_s"], 1)),
        *_advice_rows(s),
    ]


def _signed(v: Any, nd: int) -> str:
    return f"{v:+.{nd}f}" if isinstance(v, float) and math.isfinite(v) else _fmt(v, nd)


def _ci(part: dict[str, Any] | None, key: str, nd: int) -> str:
    """`` [95% CI lo, hi]`` of ``part[key + "_ci"]``, or nothing where there is none."""
    ci = (part or {}).get(f"{key}_ci")
    return f" [95% CI {_fmt(ci[0], nd)}, {_fmt(ci[1], nd)}]" if ci else ""


def _heldout_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """Held-out avg@k and mean score before and after, each with its t-interval over the held-out
    tasks where the summary has one (``heldout_spread``), and their paired difference."""
    b, a, sp = s["heldout_before"], s["heldout_after"], s.get("heldout_spread") or {}
    sb, sa, d = sp.get("before"), sp.get("after"), sp.get("difference")
    rows = [
        (f"held-out avg@{b['k']} before (percentile)", _fmt(b["overall"], 1) + _ci(sb, "overall", 1)),
        (f"held-out avg@{a['k']} after (percentile)", _fmt(a["overall"], 1) + _ci(sa, "overall", 1)),
        ("held-out mean score before / after", f"{_fmt(b['mean_score'])}{_ci(sb, 'mean_score', 3)} / "
                                               f"{_fmt(a['mean_score'])}{_ci(sa, 'mean_score', 3)}"),
    ]
    if d:
        rows.append((f"held-out after - before, paired on {d['n_tasks']} tasks: avg@{a['k']} / mean score",
                     f"{_signed(d['overall'], 1)}{_ci(d, 'overall', 1)} / {_signed(d['mean_score'], 3)}"
                     f"{_ci(d, 'mean_score', 3)}"))
    return rows


def _copy_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """``--reward relative``: the held-out test half's relative score of the policy beside copying
    the shown line (0.5 by construction), their paired difference with its CI over tasks, and the
    share of tasks where the policy beats the copy; before and after training."""
    cb = s.get("copy_baseline") or {}
    rows = []
    for when in ("before", "after"):
        r = cb.get(when)
        if not r:
            continue
        ci = r.get("difference_ci")
        rows += [
            (f"held-out test half {when}: policy / copy the shown line / board's best (relative score)",
             f"{_fmt(r['policy_score'])} / {_fmt(r['copy_score'])} / {_fmt(r['best_score'])}"),
            (f"held-out test half {when}: policy - copy, paired on {r['n_tasks']} tasks",
             _signed(r["difference"], 3) + (f" [95% CI {_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else "")),
            (f"held-out tasks where the policy beats the copy ({when})", _fmt(r["share_tasks_beaten"], 2)),
        ]
    return rows


def _rho_warmup_note(s: dict[str, Any]) -> str:
    """`` (warm-up: 27 of 64 anchor groups counted; 93 not, their real scores all equal)`` while ρ's
    warm-up has not ended, else ``""`` (also with ρ off, and for a summary written before the field)."""
    w = s.get("rho_warmup") or {}
    counted, needed, no_spread = w.get("counted"), w.get("needed"), w.get("no_spread")
    if counted is None or needed is None or counted >= max(1, needed):
        return ""
    return (f" (warm-up: {counted} of {max(1, needed)} anchor groups counted"
            + (f"; {no_spread} not, their real scores all equal)" if no_spread else ")"))


def _fmt_world_model(w: dict[str, Any] | None) -> str:
    if not w:
        return "n/a"
    if w.get("name") == "none":
        return "none (real-execution GRPO: every group executed)"
    r = w.get("within_group_r") or {}
    ci = r.get("r_ci") or [None, None]
    learned = (f"; learned from {w.get('observed_groups')} anchor groups (refits: {w.get('refits')}, "
               f"{_fmt(w.get('fit_cpu_s'), 2)} CPU-s)" if w.get("learns") else "")
    v = r.get("among_valid") or {}
    vci = v.get("r_ci") or [None, None]
    ng = v.get("n_groups")
    where = f"among the valid programs ({v.get('n_rollouts')} rollouts in {ng} group{'' if ng == 1 else 's'}"
    if not v:
        valid = ""
    elif v.get("world_model_varies") is False and ng:
        valid = (f"; {where}) none: its scores ({_calibration_name(v.get('calibration'))}) do not vary among them, "
                 "so they rank nothing")
    else:
        valid = (f"; {where}, {_calibration_name(v.get('calibration'))}) {_fmt(v.get('r'))} "
                 f"[95% CI {_fmt(vci[0])}, {_fmt(vci[1])}]")
    return (f"{w.get('name')} ({w.get('kind')}){learned}; within-group r on {r.get('n_groups')} anchor groups "
            f"({_calibration_name(r.get('calibration'))}) {_fmt(r.get('r'))} [95% CI {_fmt(ci[0])}, {_fmt(ci[1])}]"
            f"{valid}")


def _calibration_name(c: Any) -> str:
    """How a printed r's scores were calibrated, in words (the run's own debiasing map may differ:
    the overall r is calibrated as the advisor calibrates, out of sample)."""
    return {"crossfit": "isotonic map fitted out of sample", "raw": "raw scores",
            "linear": "the run's linear map"}.get(c, str(c) if c else "calibration unknown")


def _advice_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    cv = s.get("cost_vs_real_grpo")
    if (s.get("world_model") or {}).get("name") == "none":  # the real arm: nothing to set against itself, no advice
        by = (cv or {}).get("cpu_s", {}).get("spent_by_source")
        if by:
            rows.append(("CPU-s by source: execution / world model / generation / update",
                         " / ".join(_fmt(by[k], 1) for k in ("execution", "world_model", "generation", "update"))))
        if (cv or {}).get("verdict"):
            rows.append(("cost", str(cv["verdict"])))
        return rows
    if cv:
        c = cv["cpu_s"]
        rows.append(("CPU-s spent / the same rollouts had each been executed (arithmetic, not quality)",
                     f"{_fmt(c['spent'], 1)} / {_fmt(c['real_grpo'], 1)} ({_fmt(c['saving'], 2)}x)"))
        w = c.get("per_execution_weighting") or {}
        if "seconds_per_execution_unweighted" in w:
            rows.append(("CPU-s per execution, weighted by task / plain mean of the anchors' (tasks measured of trained)",
                         f"{_fmt(w['seconds_per_execution'], 2)} / {_fmt(w['seconds_per_execution_unweighted'], 2)} "
                         f"({w['tasks_measured']} of {w['tasks_trained']})"))
        by = c.get("spent_by_source")
        if by:
            rows.append(("CPU-s by source: execution / world model / generation / update",
                         " / ".join(_fmt(by[k], 1) for k in ("execution", "world_model", "generation", "update"))))
            rows.append(("executions' share of real-execution GRPO's CPU-s", _fmt(c.get("execution_share_of_real_grpo"), 2)))
        if cv.get("verdict"):
            rows.append(("cost of the same rollouts (arithmetic of the anchor fraction, not a measured saving)",
                         str(cv["verdict"])))
    adv = s.get("anchor_advice")
    if adv:
        if "r" in adv:
            rows.append(("advisor's within-group r (95% CI; n/a below its 8 anchor groups)",
                         f"{_fmt(adv['r'])} [{_fmt(adv['r_ci'][0])}, {_fmt(adv['r_ci'][1])}]"))
            finite = isinstance(adv.get("predicted_speedup"), float) and math.isfinite(adv["predicted_speedup"])
            if not finite:
                rows.append(("recommended anchor fraction / predicted speedup (a model, not a bound)",
                             "none: too few anchor groups (see the verdict)"))
            elif adv.get("use_wmrl"):
                rows.append(("recommended anchor fraction / predicted speedup (a model, not a bound)",
                             f"{_fmt(adv['recommended_fraction'])} / {_fmt(adv['predicted_speedup'], 2)}x"))
            else:  # as wmrl advise says it: WMRL's fraction, not a recommendation
                rows.append(("WMRL's fraction / its predicted speedup (a model, not a bound)",
                             f"WMRL's fraction {_fmt(adv['recommended_fraction'])} (WMRL not recommended: see the "
                             f"verdict) / {_fmt(adv['predicted_speedup'], 2)}x"))
            if adv.get("best_choice"):
                rows.append(("advisor's best choice (every choice priced from this run's anchors)", str(adv["best_choice"])))
            for c in adv.get("choices") or ():
                lo, hi = c["ci"]
                ci = (f" [{_fmt(lo, 2)}, {_fmt(hi, 2)}]" if isinstance(lo, float) and isinstance(hi, float)
                      and math.isfinite(lo) and math.isfinite(hi) and lo != hi else "")
                rows.append((f"  {c['words']}", f"{_fmt(c['predicted_speedup'], 2)}x{ci} ({_fmt(c['steps_factor'], 2)}x steps)"))
        rows.append(("advisor's verdict", str(adv["verdict"])))
        if adv.get("anchor_window_hint"):
            rows.append(("how to train at the recommended fraction", str(adv["anchor_window_hint"])))
    return rows


def _fmt_causes(causes: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(causes.items())) or "none"


def summary_markdown(s: dict[str, Any]) -> str:
    """``summary.md``: the :func:`summarise` dict as a two-column Markdown table (str), led by the
    arms' comparison at equal compute when the run has one (``s["arms"]``)."""
    from agents.train.arms import arms_rows

    rows = arms_rows(s.get("arms"))
    if rows:
        rows.append(("THE WMRL ARM", ""))
    lines = ["| quantity | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows + _rows(s)]
    return "\n".join(lines) + "\n"


def print_summary(console: Any, s: dict[str, Any], title: str = "wmrl train — summary",
                  rows: list[tuple[str, str]] | None = None) -> None:
    """Print the :func:`summarise` dict as a table on a ``rich`` console (``rows``: other rows to
    print instead, under ``title``)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title)
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for k, v in (rows if rows is not None else _rows(s)):  # a value such as "[n/a, n/a]" is text, not rich markup
        table.add_row(escape(k), escape(v))
    console.print(table)


def plot_calibration(c: Any, path: Path) -> None:
    """``calibration.png``: the anchor pairs (raw world-model score against real score) and the
    debiaser's fitted isotonic map, from ``c.wrapper.loop.corrector.debiaser``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    deb = c.wrapper.loop.corrector.debiaser
    raw, real = deb.pairs()
    fig, ax = plt.subplots(figsize=(5, 4.2))
    if raw.size:
        jitter = np.random.default_rng(0).normal(0, 0.006, size=(2, raw.size))
        ax.scatter(raw + jitter[0], real + jitter[1], s=14, alpha=0.5, label=f"anchor pairs (n={raw.size})")
        xs, ys = deb.curve()
        ax.plot(xs, ys, color="C3", lw=2, label="fitted isotonic map" if deb.fitted else "map (identity, not fitted)")
    ax.plot([0, 1], [0, 1], color="grey", ls="--", lw=1, label="identity")
    ax.set_xlabel("world-model raw score r̂")
    ax.set_ylabel("real score r")
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("Online debiasing: anchor pairs and f̂")
    ax.legend(loc="best", fontsize=8, framealpha=0.6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
