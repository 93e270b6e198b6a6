"""``wmrl bench advisor --out-of-sample``: the advisor's prediction from a short pilot, checked on
world models and settings it was not tuned on (:func:`run_out_of_sample`, :func:`format_oos_table`),
and the table helpers both advisor tables share."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .sweep_config import SweepConfig
from .advisor_check_config import AdvisorCheckConfig

__all__ = ["parse_oos_error", "parse_oos_setting", "run_out_of_sample", "format_oos_table", "spearman", "table_num"]


def spearman(x: list[float], y: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic) if len(x) >= 3 else float("nan")


def table_num(x: Any, nd: int = 2) -> str:
    """A table cell: ``x`` with ``nd`` decimals, or a dash when it is missing or not finite."""
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{nd}f}"


def md_table(header: list[str], rows: Any) -> list[str]:
    """The lines of a Markdown table: ``header`` (column titles), its rule, then one line a row of
    ``rows`` (each a sequence of cells, already formatted, one a column)."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(str(x) for x in row) + " |" for row in rows)]


_OOS_SETTING_FIELDS = {"wm_cost_s": float, "group_size": int, "groups_per_step": int, "outcome_noise_std": float}


_OOS_PREFIX = "oos:"  # the out-of-sample world models' level names while they run (never an in-sample name)


def parse_oos_error(spec: str) -> tuple[str, Any]:
    """``"name:field=value,..."`` → ``(name, WorldModelError)`` (see :class:`OutOfSampleConfig`).

    Raises:
        ValueError: no name, an in-sample level's name, a field that
            :class:`~wmrl_envs.envs.known_truth.WorldModelError` does not have, or a value out of
            its range.
    """
    from dataclasses import fields as dc_fields

    from wmrl_envs.envs.known_truth import WORLD_MODEL_ERRORS, WorldModelError

    name, _, body = spec.partition(":")
    name = name.strip()
    if not name or name in WORLD_MODEL_ERRORS or name.startswith(_OOS_PREFIX):
        raise ValueError(f"out-of-sample world model {spec!r}: give it a new name (not empty, not one of the "
                         f"in-sample levels {sorted(WORLD_MODEL_ERRORS)}), as name:field=value,...")
    known = {f.name for f in dc_fields(WorldModelError)} - {"declared_cpu_s_per_prediction"}
    kw: dict[str, float] = {}
    for item in filter(None, (x.strip() for x in body.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key.strip() not in known:
            raise ValueError(f"out-of-sample world model {spec!r}: {item!r} is not field=value with a field of "
                             f"WorldModelError ({sorted(known)})")
        kw[key.strip()] = float(value)
    return name, WorldModelError(**kw)


def parse_oos_setting(spec: str) -> dict[str, float | int]:
    """``"field=value,..."`` → the SweepConfig fields it replaces (see :class:`OutOfSampleConfig`).

    Raises:
        ValueError: a field outside ``wm_cost_s``, ``group_size``, ``groups_per_step``,
            ``outcome_noise_std``, or a value that is not a number (of the field's type).
    """
    out: dict[str, float | int] = {}
    for item in filter(None, (x.strip() for x in spec.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in _OOS_SETTING_FIELDS:
            raise ValueError(f"out-of-sample setting {spec!r}: {item!r} is not field=value with a field among "
                             f"{sorted(_OOS_SETTING_FIELDS)}")
        out[key] = _OOS_SETTING_FIELDS[key](value)
    if not out:
        raise ValueError(f"out-of-sample setting {spec!r}: empty (the base settings are always run)")
    return out


class _Registered:
    """Adds the out-of-sample world models to WORLD_MODEL_ERRORS (as ``oos:<name>``) while it is
    entered, so that the sweep's runs build them by level name; removes them on exit."""

    def __init__(self, errors: dict[str, Any]) -> None:
        self.errors = errors
        self.added: list[str] = []

    def __enter__(self) -> None:
        from wmrl_envs.envs.known_truth import WORLD_MODEL_ERRORS

        for name, err in self.errors.items():
            if _OOS_PREFIX + name not in WORLD_MODEL_ERRORS:  # nested: the outer one removes it
                WORLD_MODEL_ERRORS[_OOS_PREFIX + name] = err
                self.added.append(_OOS_PREFIX + name)

    def __exit__(self, *exc: Any) -> None:
        from wmrl_envs.envs.known_truth import WORLD_MODEL_ERRORS

        for key in self.added:
            WORLD_MODEL_ERRORS.pop(key, None)
        self.added = []


def _oos_job(args: tuple) -> Any:
    """One sweep run with the out-of-sample world models registered (in a worker process too)."""
    errors, (method, level, fraction, seed, sc, kw) = args
    from .sweep_run import run_sweep_method

    with _Registered(errors):
        return run_sweep_method(method, level, fraction, seed, sc, **kw)


def _run_oos_jobs(jobs: list[tuple], errors: dict[str, Any], workers: int, progress: Any, label: str) -> list[Any]:
    """:func:`agents.experiments.sweep_run.run_jobs` for jobs whose levels are out-of-sample world models."""
    bar = progress.add_task(label, total=len(jobs))
    out: list[Any] = [None] * len(jobs)
    if workers == 1:
        for i, j in enumerate(jobs):
            out[i] = _oos_job((errors, j))
            progress.update(bar, advance=1)
        return out
    from .sweep_run import map_in_processes

    return map_in_processes(_oos_job, [(errors, j) for j in jobs], workers, lambda: progress.update(bar, advance=1))


def _pilot_groups(sc: SweepConfig, level: str, seed: int, groups: int) -> tuple[list, list]:
    """A ``wmrl advise``-style pilot on the known-truth env: ``groups`` groups of the untrained
    (uniform) policy, every rollout executed and predicted (an anchor fraction of 1, no
    debiasing), through the wrapper. The env is reset once with ``seed`` and the groups continue
    its stream (``seed=None``), as in the sweep's runs, so every rollout has its own outcome noise.

    Returns:
        ``(world_model, real)``: per group, the raw world-model and the real scores.
    """
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.core import CorrectionConfig

    from .sweep_run import TabularSoftmaxPolicy, make_env, make_world_model

    env = make_env(sc, seed)
    env.reset(seed=seed)
    wm = make_world_model(sc, level, env, seed)
    wrapper = AnchoredWorldModelWrapper(env, wm, group_size=sc.group_size, groups_per_step=1, seed=seed,
                                        correction=CorrectionConfig(anchor_fraction=1.0, debias=False))
    policy = TabularSoftmaxPolicy(sc.n_tasks, sc.n_actions, seed=seed)
    rng = np.random.default_rng([seed, 11])
    for _ in range(groups):
        wrapper.plan_step(1)
        task = int(rng.integers(sc.n_tasks))
        actions, _ = policy.sample(np.array([task]), sc.group_size)
        wrapper.score_group(list(actions[0]), options={"task": task})
    return wrapper.loop.advisor.groups()


def _nearest_fraction(f: float, grid: tuple[float, ...]) -> float:
    """The grid fraction nearest to ``f`` on a log scale."""
    return min(grid, key=lambda g: abs(math.log(g / max(f, 1e-9))))


def _agreement_of(pairs: list[tuple[float, float, dict[str, Any]]]) -> dict[str, Any]:
    """Spearman, median and worst measured / predicted over ``(predicted, measured, cell)``
    triples with both finite and positive."""
    pairs = [p for p in pairs if math.isfinite(p[0]) and p[0] > 0 and 0 < p[1] < math.inf]
    if not pairs:
        return {"n_cells": 0, "spearman": float("nan"), "median_ratio": float("nan"), "worst_miss": None}
    ratios = [m / p for p, m, _ in pairs]
    miss = max(pairs, key=lambda p: abs(math.log(p[0] / p[1])))
    return {"n_cells": len(pairs), "spearman": spearman([p for p, _, _ in pairs], [m for _, m, _ in pairs]),
            "median_ratio": float(np.median(ratios)), "ratio_range": [float(min(ratios)), float(max(ratios))],
            "worst_miss": {"predicted": miss[0], "measured": miss[1], "factor": max(miss[0] / miss[1], miss[1] / miss[0]),
                           "cell": {k: miss[2][k] for k in ("error", "setting", "fraction")}}}


def run_out_of_sample(cfg: AdvisorCheckConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The advisor checked out of sample: cells and seeds the in-sample check
    (:func:`run_advisor_check`) never used, predictions from a pilot of each cell.

    For every setting (the base ``cfg.sweep`` and each of ``cfg.oos.settings``) and every world
    model of that setting (``cfg.oos.errors`` at the base, ``setting_errors`` elsewhere), at each
    fixed fraction of ``cfg.oos.fractions``: WMRL's measured compute-to-target speedup over real
    GRPO (seeds ``first_seed ..``; real GRPO is run per group size, and sets the target and the
    budget as in the in-sample check); the advisor's prediction with r from a pilot of the cell
    (:func:`_pilot_groups` on ``pilot_seeds``, cross-fitted r, :meth:`AnchorAdvisor.advise`) and b
    from real GRPO's first ``pilot_steps`` steps on the pilot seeds; the fraction-only baseline
    ``1 / (f + γ)`` (the equal-steps cost ratio); and, for reference, the prediction with r from the
    cell's own runs (the in-sample way), and the earlier model (SGD's step law, ``predicted_pilot_sgd``).
    With ``oos.real_batches``, real GRPO at each smaller batch is a cell too (measured against real GRPO
    at the full batch; predicted ``(B/B') · steps_ratio(B'/B, b)``, the fraction-only predictor
    ``B/B'``). Over all cells: Spearman, median and worst measured / predicted for each predictor.
    Per (world model, setting): whether the choice each predictor ranks first among the measured ones
    (WMRL at each fraction, real GRPO at each batch and at the full one) has a measured speedup within
    the 95% CI of the best measured choice's (``advisor_within_best_ci``, ``sgd_within_best_ci``,
    ``baseline_within_best_ci``), and the same for the advisor's recommended fraction alone
    (``advisor_fraction_within_best_ci``; nearest grid fraction, log scale).

    Returns:
        The results dict (also ``out_dir/results_oos.json``; ``table_oos.md`` beside it).

    Raises:
        ValueError: a bad world model or setting (:func:`parse_oos_error`, :func:`parse_oos_setting`),
            ``setting_errors`` not among ``errors``, or real GRPO did not improve (no target).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from wmrl_envs.core import AnchorAdvisor, CostRates, GradientNoiseScale, predicted_speedup
    from wmrl_envs.core.advisor_model import steps_ratio

    from .speedup import Curve, compute_to_target, speedup, target_score
    from .sweep_config import equal_steps_cost_ratio, step_cap_for

    oc = cfg.oos
    errors = dict(parse_oos_error(s) for s in oc.errors)
    if len(errors) != len(oc.errors):
        raise ValueError(f"oos.errors: each name once, got {list(oc.errors)}")
    missing = [e for e in oc.setting_errors if e not in errors]
    if missing:
        raise ValueError(f"oos.setting_errors {missing} are not among oos.errors' names {sorted(errors)}")
    if not oc.fractions or not all(0 < f <= 1 for f in oc.fractions):
        raise ValueError(f"oos.fractions must be anchor fractions in (0, 1], got {oc.fractions!r}")
    for name in ("pilot_groups", "pilot_steps", "first_seed"):
        v = getattr(oc, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "first_seed" else 1):
            raise ValueError(f"oos.{name} must be an integer >= {0 if name == 'first_seed' else 1}, got {v!r}")
    if not oc.pilot_seeds or any(s in range(oc.first_seed, oc.first_seed + cfg.sweep.seeds) for s in oc.pilot_seeds):
        raise ValueError(f"oos.pilot_seeds must be given and differ from the measured seeds, got {oc.pilot_seeds!r}")
    if any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in oc.real_batches):
        raise ValueError(f"oos.real_batches must be groups per step >= 1, got {oc.real_batches!r}")
    base = cfg.sweep
    settings = [("base", base)] + [(s, replace(base, **parse_oos_setting(s))) for s in oc.settings]
    cell_groups = [(e, name, sc) for name, sc in settings for e in (list(errors) if name == "base" else oc.setting_errors)]
    seeds = list(range(oc.first_seed, oc.first_seed + base.seeds))
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    def real_key(sc: SweepConfig) -> tuple:  # what real GRPO depends on (not the world model's cost)
        return (sc.group_size, sc.groups_per_step, sc.outcome_noise_std)

    reals: dict[tuple, dict[str, Any]] = {}
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with progress, _Registered(errors):
        for _name, sc in settings:
            key = real_key(sc)
            if key in reals:
                continue
            real = _run_oos_jobs([("real", None, None, s, sc, {"max_steps": sc.steps}) for s in seeds], errors,
                                 base.workers, progress, f"real GRPO, G = {sc.group_size}")
            pilot = _run_oos_jobs([("real", None, None, s, sc, {"max_steps": oc.pilot_steps}) for s in oc.pilot_seeds],
                                  errors, base.workers, progress, f"pilot real GRPO (noise scale), G = {sc.group_size}")
            curves = [Curve(r.compute, r.score) for r in real]
            target = target_score(curves, gain_fraction=sc.gain_fraction, min_gain=sc.min_gain)
            gns = GradientNoiseScale()
            for r in pilot:
                for m in r.noise_moments:
                    gns.add_step(*m)
            b = gns.ratio(sc.groups_per_step) if gns.steps else float("nan")
            reals[key] = {"target": target, "real_compute_to_target": [compute_to_target(c, target) for c in curves],
                          "budget_s": sc.max_compute_factor * float(np.median([r.compute[-1] for r in real])),
                          "noise_batch_ratio": b if math.isfinite(b) else None, "batches": {}}
            budget = reals[key]["budget_s"]
            for bb in (x for x in oc.real_batches if x < sc.groups_per_step):
                sb = replace(sc, groups_per_step=bb)
                cap = max(sc.steps, int(math.ceil(1.25 * budget / (bb * sc.group_size * sc.execution_cost_s))))
                small = _run_oos_jobs([("real", None, None, s, sb, {"max_steps": cap, "target": target,
                                                                    "compute_budget_s": budget}) for s in seeds],
                                      errors, base.workers, progress, f"real GRPO at {bb} groups per step, G = {sc.group_size}")
                reals[key]["batches"][bb] = [compute_to_target(Curve(r.compute, r.score), target) for r in small]
            log(f"[advisor-oos] G = {sc.group_size}: target {target:.3f}, budget {reals[key]['budget_s']:.0f} CPU-s, "
                f"pilot b = {b:.3g}")
        pilots: dict[tuple[str, str], dict[str, Any]] = {}
        bar = progress.add_task("pilots (r, recommended fraction)", total=len(cell_groups))
        for e, name, sc in cell_groups:
            adv = AnchorAdvisor(n_boot=base.n_boot if base.n_boot < 1000 else 1000, seed=0)
            for s in oc.pilot_seeds:
                for w, x in zip(*_pilot_groups(sc, _OOS_PREFIX + e, s, oc.pilot_groups)):
                    adv.add_group(w, x)
            costs = CostRates(sc.execution_cost_s, sc.wm_cost_s)
            a = adv.advise(costs, calibrate="crossfit", noise_batch_ratio=reals[real_key(sc)]["noise_batch_ratio"])
            pilots[(e, name)] = {"r": a.r, "r_ci": list(a.r_ci), "n_groups": a.n_groups,
                                 "recommended_fraction": a.recommended_fraction, "f_star": a.f_star,
                                 "predicted_at_recommended": a.predicted_speedup, "verdict": a.verdict,
                                 "wmrl_eligible": a.wmrl_eligible}
            progress.update(bar, advance=1)
        jobs = []
        for e, name, sc in cell_groups:
            rk = reals[real_key(sc)]
            for f in oc.fractions:
                for s in seeds:
                    jobs.append(("wmrl", _OOS_PREFIX + e, f, s, sc, {"max_steps": step_cap_for("wmrl", f, sc, rk["budget_s"]),
                                                                   "target": rk["target"], "compute_budget_s": rk["budget_s"]}))
        runs = _run_oos_jobs(jobs, errors, base.workers, progress, "WMRL at fixed fractions (out of sample)")
    by_cell: dict[tuple, list[Any]] = {}
    for r, (_m, lv, f, _s, sc, _kw) in zip(runs, jobs):
        by_cell.setdefault((lv[len(_OOS_PREFIX):], f, sc.group_size, sc.wm_cost_s), []).append(r)
    cells: list[dict[str, Any]] = []
    recommendations: list[dict[str, Any]] = []
    # real GRPO at smaller batches: one cell per (real setting, batch), shared by the world models
    real_cells: dict[tuple, list[dict[str, Any]]] = {}
    for _name, sc in settings:
        key = real_key(sc)
        if key in real_cells:
            continue
        rk = reals[key]
        real_cells[key] = []
        for bb, ctt in sorted(rk["batches"].items(), reverse=True):
            est = speedup(rk["real_compute_to_target"], ctt, n_boot=base.n_boot, seed=0)
            share = bb / sc.groups_per_step
            b = rk["noise_batch_ratio"]
            c = {"error": "(real GRPO)", "setting": f"G = {sc.group_size}, {bb} of {sc.groups_per_step} groups",
                 "kind": "real", "group_size": sc.group_size, "groups_per_step": bb, "gamma": float("nan"),
                 "fraction": None, "speedup": est.point, "low": est.low, "high": est.high, "formatted": est.format(),
                 "n_reached": est.n_reached, "n_seeds": est.n_seeds, "compute_to_target": ctt, "r_pilot": float("nan"),
                 "r_runs": float("nan"),
                 "predicted_pilot": steps_ratio(share, b) / share if b is not None else float("nan"),
                 "predicted_pilot_sgd": steps_ratio(share, b, "sgd") / share if b is not None else float("nan"),
                 "predicted_own_r": steps_ratio(share, b) / share if b is not None else float("nan"),
                 "fraction_only": 1.0 / share, "realised_fraction": 1.0, "stop_reasons": []}
            real_cells[key].append(c)
            cells.append(c)
    for e, name, sc in cell_groups:
        rk, pil = reals[real_key(sc)], pilots[(e, name)]
        gamma = sc.wm_cost_s / sc.execution_cost_s
        costs = CostRates(sc.execution_cost_s, sc.wm_cost_s)
        b = rk["noise_batch_ratio"]
        group_cells = []
        for f in oc.fractions:
            rs = sorted(by_cell[(e, f, sc.group_size, sc.wm_cost_s)], key=lambda r: r.seed)
            ctt = [compute_to_target(Curve(r.compute, r.score), rk["target"]) for r in rs]
            est = speedup(rk["real_compute_to_target"], ctt, n_boot=base.n_boot, seed=0)
            r_runs = [r.pooled_pearson for r in rs if math.isfinite(r.pooled_pearson)]
            r_own = float(np.mean(r_runs)) if r_runs else float("nan")
            r_p = pil["r"]
            steps = sum(len(r.anchor_fraction) for r in rs)
            c = {"error": e, "setting": name, "group_size": sc.group_size, "gamma": gamma, "fraction": f,
                 "speedup": est.point, "low": est.low, "high": est.high, "formatted": est.format(),
                 "n_reached": est.n_reached, "n_seeds": est.n_seeds, "compute_to_target": ctt,
                 "r_pilot": r_p, "r_runs": r_own,
                 "predicted_pilot": predicted_speedup(f, max(-1.0, min(1.0, r_p)), costs, b) if math.isfinite(r_p) else float("nan"),
                 "predicted_pilot_sgd": (predicted_speedup(f, max(-1.0, min(1.0, r_p)), costs, b, "sgd")
                                         if math.isfinite(r_p) else float("nan")),
                 "kind": "wmrl",
                 "predicted_own_r": predicted_speedup(f, max(-1.0, min(1.0, r_own)), costs, b) if math.isfinite(r_own) else float("nan"),
                 "fraction_only": equal_steps_cost_ratio(f, sc.execution_cost_s, sc.wm_cost_s),
                 "realised_fraction": sum(r.anchor_groups for r in rs) / (steps * sc.groups_per_step) if steps else 0.0,
                 "stop_reasons": [r.stop_reason for r in rs]}
            cells.append(c)
            group_cells.append(c)
        # the choices measured for this (world model, setting): WMRL at each fraction, real GRPO at each
        # smaller batch and at the full one (speedup 1 by definition)
        options = list(group_cells) + [c for c in real_cells.get(real_key(sc), [])] + [
            {"kind": "real", "groups_per_step": sc.groups_per_step, "fraction": None, "speedup": 1.0, "low": 1.0,
             "high": 1.0, "formatted": "1.0x (the reference)", "compute_to_target": rk["real_compute_to_target"]}]

        def pred_of(c: dict[str, Any], key: str) -> float:
            if c["kind"] == "wmrl":
                return c[key]
            share = c["groups_per_step"] / sc.groups_per_step
            law = "sgd" if key == "predicted_pilot_sgd" else "adam"
            if key == "fraction_only":
                return 1.0 / share
            return steps_ratio(share, b, law) / share

        def label(c: dict[str, Any]) -> str:
            return (f"WMRL f = {c['fraction']}" if c["kind"] == "wmrl"
                    else f"real, {c['groups_per_step']} groups per step")

        best = min(options, key=lambda c: (float(np.median(c["compute_to_target"])), -c["speedup"]))

        def within(c: dict[str, Any] | None) -> bool:
            return c is not None and (c is best or (math.isfinite(best["low"]) and c["speedup"] >= best["low"]))

        def pick(key: str) -> dict[str, Any]:
            cand = [c for c in options if math.isfinite(pred_of(c, key))]
            if key == "predicted_pilot" and not pil.get("wmrl_eligible", True):
                cand = [c for c in cand if c["kind"] == "real"]  # the advisor's rule: no WMRL without signal
            return max(cand, key=lambda c: pred_of(c, key))

        rec = pil["recommended_fraction"]
        rec_grid = _nearest_fraction(rec, oc.fractions) if math.isfinite(rec) else float("nan")
        adv_pick, sgd_pick, base_pick = pick("predicted_pilot"), pick("predicted_pilot_sgd"), pick("fraction_only")
        frac_cell = next((c for c in group_cells if c["fraction"] == rec_grid), None)
        recommendations.append({"error": e, "setting": name, "recommended": rec,
                                "recommended_grid": rec_grid, "best_fraction": best["fraction"], "best_choice": label(best),
                                "best": best["formatted"], "advisor_choice": label(adv_pick),
                                "advisor_choice_measured": adv_pick["formatted"],
                                "recommended_measured": None if frac_cell is None else frac_cell["formatted"],
                                "advisor_within_best_ci": within(adv_pick),
                                "advisor_fraction_within_best_ci": within(frac_cell),
                                "sgd_choice": label(sgd_pick), "sgd_within_best_ci": within(sgd_pick),
                                "baseline_choice": label(base_pick), "baseline_fraction": base_pick["fraction"],
                                "baseline_within_best_ci": within(base_pick),
                                "r_pilot": pil["r"], "r_pilot_ci": pil["r_ci"]})
    n_rec = len(recommendations)
    # at one fraction the fraction-only baseline is one number per cost ratio: can a predictor rank world models there?
    per_fraction = {str(f): {key: _agreement_of([(c[key], c["speedup"], c) for c in cells if c["fraction"] == f])["spearman"]
                             for key in ("predicted_pilot", "predicted_pilot_sgd", "fraction_only", "predicted_own_r")}
                    for f in oc.fractions}
    summary = {"spearman_per_fraction": per_fraction, "advisor_pilot": _agreement_of([(c["predicted_pilot"], c["speedup"], c) for c in cells]),
               "advisor_pilot_sgd": _agreement_of([(c["predicted_pilot_sgd"], c["speedup"], c) for c in cells]),
               "advisor_pilot_wmrl_only": _agreement_of([(c["predicted_pilot"], c["speedup"], c) for c in cells if c["kind"] == "wmrl"]),
               "fraction_only_wmrl_only": _agreement_of([(c["fraction_only"], c["speedup"], c) for c in cells if c["kind"] == "wmrl"]),
               "sgd_hits": sum(r["sgd_within_best_ci"] for r in recommendations),
               "fraction_recommendation_hits": sum(bool(r["advisor_fraction_within_best_ci"]) for r in recommendations),
               "fraction_only": _agreement_of([(c["fraction_only"], c["speedup"], c) for c in cells]),
               "advisor_own_r": _agreement_of([(c["predicted_own_r"], c["speedup"], c) for c in cells]),
               "recommendation_hits": sum(r["advisor_within_best_ci"] for r in recommendations),
               "baseline_hits": sum(r["baseline_within_best_ci"] for r in recommendations), "n_recommendations": n_rec}
    results = {"config": asdict(cfg), "seeds": seeds, "pilot_seeds": list(oc.pilot_seeds),
               "real": {f"G={k[0]},groups={k[1]}": v for k, v in reals.items()},
               "pilots": [{"error": e, "setting": n, **v} for (e, n), v in pilots.items()],
               "cells": cells, "recommendations": recommendations, "summary": summary,
               "wall_clock_s": time.perf_counter() - t0}
    (out_dir / "results_oos.json").write_text(json.dumps(results, indent=1, default=float))
    (out_dir / "table_oos.md").write_text(format_oos_table(results))
    log(f"[advisor-oos] {len(runs) + sum(1 for _ in reals) * (len(seeds) + len(oc.pilot_seeds))} runs in "
        f"{results['wall_clock_s']:.0f} s; outputs in {out_dir}")
    return results


def format_oos_table(results: dict[str, Any]) -> str:
    """``table_oos.md``: per cell measured against the predictions; the agreement of each predictor;
    the recommendations against the best measured choice."""

    lines = [f"Measured seeds {results['seeds'][0]}..{results['seeds'][-1]}; pilot seeds {results['pilot_seeds']}.", "",
             *md_table(["world model", "setting", "f", "measured speedup [95% CI]", "predicted (pilot r, pilot b)",
                        "earlier model (SGD's step law)", "fraction only", "predicted (runs' own r)", "r pilot", "r runs"],
                       ((c["error"], c["setting"], "—" if c.get("fraction") is None else c["fraction"], c["formatted"],
                         table_num(c["predicted_pilot"]), table_num(c.get("predicted_pilot_sgd", float("nan"))),
                         table_num(c["fraction_only"]), table_num(c["predicted_own_r"]), table_num(c["r_pilot"]),
                         table_num(c["r_runs"])) for c in results["cells"]))]
    s = results["summary"]
    lines += ["", "| predictor | cells | Spearman | median measured / predicted | range of measured / predicted | worst miss |",
              "|---|---|---|---|---|---|"]
    for key, what in (("advisor_pilot", "advisor, r and b from a pilot"),
                      ("advisor_pilot_sgd", "earlier model (SGD's step law), same pilot"),
                      ("fraction_only", "fraction only, 1/(f + γ) (B/B' for a real batch)"),
                      ("advisor_pilot_wmrl_only", "advisor, WMRL cells only"),
                      ("fraction_only_wmrl_only", "fraction only, WMRL cells only"),
                      ("advisor_own_r", "advisor, r from the cell's own runs (in-sample way)")):
        q = s.get(key)
        if not q:
            continue
        w = q["worst_miss"]
        worst = "—" if not w else (f"{w['cell']['error']} / {w['cell']['setting']} / f = {w['cell']['fraction']}: "
                                   f"predicted {w['predicted']:.2f}×, measured {w['measured']:.2f}× (factor {w['factor']:.2f})")
        rng = q.get("ratio_range")
        lines.append(f"| {what} | {q['n_cells']} | {table_num(q['spearman'])} | {table_num(q['median_ratio'])} | "
                     f"{'—' if not rng else f'{rng[0]:.2f} – {rng[1]:.2f}'} | {worst} |")
    pf = s.get("spearman_per_fraction") or {}
    if pf:
        lines += ["", "Spearman at one fraction (over world models and settings): "
                  + "; ".join(f"f = {f}: advisor (pilot) {table_num(v['predicted_pilot'])}, fraction only {table_num(v['fraction_only'])}, "
                              f"advisor (own r) {table_num(v['predicted_own_r'])}" for f, v in pf.items()) + "."]
    lines += ["", f"Recommended choice within the best measured choice's 95% CI: advisor {s['recommendation_hits']} of "
              f"{s['n_recommendations']}" + (f", earlier model {s['sgd_hits']}" if "sgd_hits" in s else "")
              + f", fraction-only baseline {s['baseline_hits']} of {s['n_recommendations']}.",
              "", "| world model | setting | pilot r [95% CI] | advisor's choice: measured | earlier model's choice | "
              "fraction only's choice | best measured |", "|---|---|---|---|---|---|---|"]
    for r in results["recommendations"]:
        ci = r["r_pilot_ci"]
        adv = r.get("advisor_choice")
        lines.append(f"| {r['error']} | {r['setting']} | {table_num(r['r_pilot'])} [{table_num(ci[0])}, {table_num(ci[1])}] | "
                     + (f"{adv}: {r['advisor_choice_measured']}{'' if r['advisor_within_best_ci'] else ' (outside)'}"
                        if adv else f"f = {table_num(r['recommended'], 3)} ({r['recommended_grid']}): {r['recommended_measured'] or '—'}")
                     + f" | {r.get('sgd_choice', '—')}{'' if r.get('sgd_within_best_ci', True) else ' (outside)'}"
                     f" | {r.get('baseline_choice', r.get('baseline_fraction'))}{'' if r['baseline_within_best_ci'] else ' (outside)'}"
                     f" | {r.get('best_choice', r.get('best_fraction'))}: {r['best']} |")
    return "\n".join(lines) + "\n"
