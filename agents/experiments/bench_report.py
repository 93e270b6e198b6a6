"""Reporting of ``wmrl bench``: the compute-to-target headline, the cost split, the paper's tables, the plots.

Everything here reads the ``results.json`` structure that :func:`agents.experiments.bench.run_bench`
writes, so a finished run can be re-reported (``write_report``) without training again.

``results.json`` is strict JSON (``json.dumps(..., allow_nan=False)`` passes; :func:`strict_results`):
every non-finite number is written as ``null`` and its path and value are listed in the field
``"nonfinite"`` (``{"/speedup/methods/wmrl/ctt/2": "inf", ...}``, JSON-Pointer paths, values
``"inf"``, ``"-inf"`` or ``"nan"``). ``inf`` means *not reached*: a compute-to-target (``ctt``,
``total_ctt``, ``*_median``) of a seed that did not reach the target, or a speedup bound beyond
every replicate; ``nan`` means no value (e.g. a CI with one seed). A ``null`` not listed there is a
plain absent value (``None``). :func:`restore_nonfinite` puts the numbers back; it accepts files
written before this scheme too (they held bare ``NaN``/``Infinity``, which Python's ``json`` reads).
 The
speedup's definition (target, interpolation, median over seeds, paired bootstrap CI) is in
:mod:`agents.experiments.speedup` and ``docs/method.md`` ("Compute-to-target speedup").
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .bench_config import BENCH_METHODS as METHODS, LEARNED_WM_METHODS, REAL_METHODS
from .methods import COST_SOURCES

__all__ = ["strict_results", "restore_nonfinite", "format_sensitivity_table", "format_table", "format_speedup_table", "format_cost_table", "format_bracket_table", "brackets_of", "compute_speedups", "cost_summary",
           "write_report", "curve_of", "real_target", "report_finished_seeds"]


NONFINITE_NOTE = ("results.json is strict JSON: each non-finite number is written as null and listed here by its "
                  "JSON-Pointer path: 'inf' = not reached (compute-to-target) or an unbounded speedup bound, "
                  "'nan' = no value (e.g. no CI with one seed), '-inf' = minus infinity")


def strict_results(results: Any) -> Any:
    """A copy of a results structure that is strict JSON: non-finite floats become ``None`` and are
    listed under ``"nonfinite"`` (path -> ``"inf"`` / ``"-inf"`` / ``"nan"``), with
    ``"nonfinite_note"`` saying so (only when the structure is a dict).

    Example:
        >>> r = strict_results({"ctt": [1.0, float("inf")], "x": None})
        >>> r["ctt"], r["nonfinite"]
        ([1.0, None], {'/ctt/1': 'inf'})
    """
    found: dict[str, str] = {}

    def walk(x: Any, path: str) -> Any:
        if isinstance(x, dict):
            return {k: walk(v, f"{path}/{str(k).replace('~', '~0').replace('/', '~1')}") for k, v in x.items()
                    if k not in ("nonfinite", "nonfinite_note") or path}
        if isinstance(x, (list, tuple)):
            return [walk(v, f"{path}/{i}") for i, v in enumerate(x)]
        if isinstance(x, (float, np.floating)):
            v = float(x)
            if not math.isfinite(v):
                found[path] = "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
                return None
            return v
        if isinstance(x, np.integer):
            return int(x)
        return x

    out = walk(results, "")
    if isinstance(out, dict):
        out["nonfinite"] = found
        out["nonfinite_note"] = NONFINITE_NOTE
    return out


def restore_nonfinite(results: dict[str, Any]) -> dict[str, Any]:
    """Undo :func:`strict_results` in place: each path of ``results["nonfinite"]`` gets its float back
    (the field and its note are removed). A file without the field (written before strict JSON,
    with bare ``NaN``/``Infinity``) is returned as it is.

    A listed path that is no longer there (an entry removed from the file since, e.g. a
    truncated seed list) is skipped.

    Returns:
        ``results``.
    """
    listed = results.pop("nonfinite", None) or {}
    results.pop("nonfinite_note", None)
    for path, what in listed.items():
        keys = [k.replace("~1", "/").replace("~0", "~") for k in path.split("/")[1:]]
        node: Any = results
        try:
            for k in keys[:-1]:
                node = node[int(k)] if isinstance(node, list) else node[k]
            last = keys[-1]
            if isinstance(node, list):
                if node[int(last)] is None:
                    node[int(last)] = float(what)
            elif node.get(last, 0) is None:
                node[last] = float(what)
        except (KeyError, IndexError, ValueError, TypeError, AttributeError):
            continue  # removed since it was written
    return results


def _agg(values: Sequence[float]) -> tuple[float, float]:
    v = np.asarray([x for x in values if x is not None], dtype=float)
    if v.size == 0:
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def format_table(results: dict[str, Any], point: str) -> str:
    """Markdown table in the paper's layout for one comparison point.

    Args:
        results: the ``results.json`` structure of :func:`run_bench`.
        point: ``"steps"``, ``"compute_wmrl"``, ``"compute_real"`` (runs from before issue 35) or
            ``"last"`` (each method's last step).

    Returns:
        The table (str): method, compute used at that point as a ratio to method 1's compute
        at S steps, mean steps, held-out avg@k per category and overall as ``mean ± std``
        over seeds.
    """
    cats = sorted({c for m in results["methods"].values() for s in m["seeds"] for c in s["eval"][point]["per_category"]})
    head = "| method | compute ratio | steps | " + " | ".join(cats) + " | overall |"
    lines = [head, "|" + "---|" * (4 + len(cats))]
    # the unit of compute is method 1's compute at S steps, in every table
    unit = "steps" if all("steps" in s["compute_at"] for s in results["methods"].get("real", {}).get("seeds", [])) else point
    real_c = _agg([s["compute_at"][unit] for s in results["methods"]["real"]["seeds"]])[0] if "real" in results["methods"] else float("nan")
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
        ev = sum(int(s.get("heldout_ungraded", 0)) for s in m["seeds"])
        detail = ", ".join(f"{c}: {k}" for c, k in sorted(causes.items()))
        parts.append(f"{name} {n}" + (f" ({detail})" if detail else "") + (f", held-out {ev}" if ev else ""))
    return "Ungraded rollouts (training, all seeds; failures of the machinery, left out of training): " + "; ".join(parts) + "\n"


def _plot(results: dict[str, Any], out_dir: Path) -> None:
    """``score_vs_compute.png`` (every seed's curve and the target) and ``rho_calibration.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (name, m) in enumerate(results["methods"].items()):
        for j, e in enumerate(m["seeds"]):  # each seed's evaluated curve
            c = e.get("curve")
            if c:
                ax.plot(c["compute_cpu_s"], c["score"], marker=".", lw=1, alpha=0.55, color=f"C{i}",
                        label=METHODS[name].label if j == 0 else None)
    sp = results.get("speedup") or {}
    if sp:
        ax.axhline(sp["target"], color="k", ls=":", lw=1, label=f"target {sp['target']:.1f}")
    ax.set_xlim(left=0)
    ax.set_xlabel("training compute (CPU-seconds, evaluation excluded)")
    ax.set_ylabel("held-out avg@k leaderboard percentile")
    ax.set_title("Held-out score against compute (one line per seed)")
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
    a1.set_xlabel("step"); a1.set_ylabel("anchor weight ρ (mean over seeds)")
    a1.set_title("ρ over training (computed; applied only where denoising is on)")
    a2.set_xlabel("step"); a2.set_ylabel("prequential MAE on anchor pairs")
    for ax_ in (a1, a2):
        if ax_.get_legend_handles_labels()[0]:
            ax_.legend(fontsize=7)
    a2.set_title("Calibration error over training")
    fig.tight_layout()
    fig.savefig(out_dir / "rho_calibration.png", dpi=120)
    plt.close(fig)


def curve_of(entry: dict[str, Any]) -> Any:
    from agents.experiments.speedup import Curve

    c = entry["curve"]
    return Curve(np.asarray(c["compute_cpu_s"], dtype=float), np.asarray(c["score"], dtype=float))


def real_target(results: dict[str, Any], *, steps: int | None = None, gain_fraction: float = 0.9) -> tuple[float, float, float]:
    """The target of the headline from real-execution GRPO's mean curve over seeds.

    Reads each real seed's held-out score at step 0 and at step ``steps`` (default: its last
    evaluated step) from its evaluated curve and applies
    :func:`agents.experiments.speedup.target_score` to them.

    Returns:
        ``(target, s0, s_S)``: the target and the two means it comes from.

    Raises:
        ValueError: no real seed, a seed without step 0 or step S evaluated, or real GRPO did not
            improve (there is no target).
    """
    from agents.experiments.speedup import Curve, target_score

    pts = []
    for e in results["methods"]["real"]["seeds"]:
        c = e["curve"]
        s = min(steps, c["step"][-1]) if steps is not None else c["step"][-1]
        if 0 not in c["step"] or s not in c["step"]:
            raise ValueError(f"real GRPO seed {e['seed']} has no evaluation at step 0 and step {s}")
        i0, iS = c["step"].index(0), c["step"].index(s)
        pts.append(Curve(np.array([0.0, c["compute_cpu_s"][iS]]), np.array([c["score"][i0], c["score"][iS]])))
    if not pts:
        raise ValueError("no real-execution GRPO seed to take the target from")
    s0 = float(np.mean([p.score[0] for p in pts]))
    sS = float(np.mean([p.score[1] for p in pts]))
    return target_score(pts, steps_index=1, gain_fraction=gain_fraction), s0, sS


MAX_BRACKET_SHARE = 0.1
"""The largest interpolation bracket, as a share of the compute-to-target, that the report does not
flag (issue 27); a run's own limit is its ``config["max_bracket_share"]`` (``--max-bracket-share``)."""


def brackets_of(results: dict[str, Any], name: str, target: float) -> dict[str, list[Any]]:
    """Per seed of method ``name``, the interpolation bracket of its compute-to-target at ``target``
    (:func:`agents.experiments.speedup.bracket_share`).

    Returns:
        ``{"bracket_share": [float per seed], "bracket_steps": [[step below, step at or above] per
        seed]}``: the compute between the two evaluated snapshots the crossing is interpolated
        between, over the seed's compute-to-target (``0.0`` when the untrained policy already
        reaches the target, ``nan`` — written ``null`` and listed as ``"nan"`` in results.json —
        when the seed does not reach it); the steps of those two snapshots (``[s, s]`` when no
        interpolation, ``None`` when not reached). A bracket one step wide is the finest the
        per-step snapshots allow: evaluating more snapshots cannot narrow it.
    """
    from agents.experiments.speedup import bracket_share, interpolation_bracket

    shares, steps = [], []
    for e in results["methods"][name]["seeds"]:
        c = curve_of(e)
        b = interpolation_bracket(c, target)
        shares.append(bracket_share(c, target))
        steps.append(None if b is None else [int(e["curve"]["step"][b[0]]), int(e["curve"]["step"][b[1]])])
    return {"bracket_share": shares, "bracket_steps": steps}


def format_bracket_table(results: dict[str, Any]) -> str:
    """Markdown table of the interpolation brackets of the headline's compute-to-target: per method,
    the median and largest bracket share over the seeds that reached the target, and the seeds whose
    bracket exceeds the run's limit (``max_bracket_share``, default :data:`MAX_BRACKET_SHARE`), each
    named with its share and steps; a bracket one step wide is marked as at step resolution
    (evaluating more snapshots cannot narrow it). Results written before the field existed get
    their brackets computed from their curves. Empty string without a headline."""
    sp = results.get("speedup") or {}
    if not sp or "target" not in sp:
        return ""
    limit = float(sp.get("max_bracket_share", results["config"].get("max_bracket_share", MAX_BRACKET_SHARE)))
    lines = [f"### Interpolation brackets (compute between the evaluated snapshots around each seed's crossing, "
             f"as a share of its compute-to-target; flagged above {limit:.0%})\n",
             "| method | seeds reached | median share | largest share | seeds above the limit |", "|---|---|---|---|---|"]
    wide = 0
    for name, row in sp["methods"].items():
        if name not in results["methods"]:
            continue
        br = row if "bracket_share" in row else brackets_of(results, name, sp["target"])
        pairs = [(e["seed"], float(v), st) for e, v, st in zip(results["methods"][name]["seeds"],
                                                                br["bracket_share"], br["bracket_steps"])
                 if v is not None and math.isfinite(float(v))]
        if not pairs:
            lines.append(f"| {METHODS[name].label} | 0/{len(results['methods'][name]['seeds'])} | — | — | — |")
            continue
        vals = np.array([v for _, v, _ in pairs])
        over = []
        for seed, v, st in pairs:
            if v > limit:
                one = st is not None and st[1] - st[0] <= 1
                wide += not one
                over.append(f"**seed {seed}: {v:.1%}** (steps {st[0]}–{st[1]}{', one step: the finest the snapshots allow' if one else ''})")
        lines.append(f"| {METHODS[name].label} | {len(pairs)}/{len(results['methods'][name]['seeds'])} | "
                     f"{np.median(vals):.0%} | {vals.max():.0%} | "
                     f"{'; '.join(over) if over else 'none'} |")
    if wide:
        lines.append(f"\n**{wide} bracket(s) above {limit:.0%} span more than one step**: evaluating the saved "
                     "snapshots inside them narrows them (`wmrl bench --resume` on the finished run, with its settings, "
                     "refines each curve up to `--refine-evals` evaluations in all; a larger `--refine-evals` allows more).")
    return "\n".join(lines) + "\n"


SENSITIVITY_GAINS: tuple[float, ...] = (0.5, 0.7, 0.9, 1.0)
"""The targets of the sensitivity table: these shares of real GRPO's gain after S steps."""


def run_cpu_s_per_execution(results: dict[str, Any]) -> float | None:
    """This run's own CPU-seconds per real execution, from its ledger: execution CPU-seconds over
    executions with a CPU figure, at each seed's last step, summed over every method and seed
    (``None`` when the run executed nothing it could measure)."""
    cpu, n = 0.0, 0
    for m in results["methods"].values():
        for e in m["seeds"]:
            if e.get("records"):
                r = e["records"][-1]
                cpu += float(r["cpu_seconds"].get("execution", 0.0))
                n += int(r["executions"]) - int(r.get("cpu_unmeasured", 0))
    return cpu / n if n > 0 and cpu > 0 else None


def _prefitted(name: str) -> bool:
    """A method that uses the pre-fitted world model (its fitting is part of its total compute)."""
    return METHODS[name].world_model and name not in LEARNED_WM_METHODS


def compute_speedups(results: dict[str, Any], *, gain_fraction: float = 0.9, steps: int | None = None,
                     fitting_cpu_s: float = 0.0, fitting_executions: int | None = None,
                     n_boot: int = 10_000, sensitivity_gains: Sequence[float] = SENSITIVITY_GAINS,
                     n_boot_sensitivity: int | None = None) -> dict[str, Any]:
    """The headline: total compute-to-target of every method and its speedup over real-execution GRPO.

    The target is ``gain_fraction`` of real GRPO's gain from the untrained policy to its score
    after ``steps`` steps, on its mean curve over seeds (:func:`agents.experiments.speedup.target_score`;
    real GRPO trains past S, up to the step cap of every method, so its own seeds are not censored
    at S); each seed's compute-to-target (CPU-seconds of training: executions, world model
    including the learned model's refits, generation, update; interpolated between evaluated
    snapshots; ``inf`` when not reached) comes from its own curve; the speedup is the ratio of
    medians over seeds with a paired 95% bootstrap CI (:func:`agents.experiments.speedup.speedup`).
    The sensitivity table's intervals (and the report's decomposition, which reads them) use
    ``n_boot_sensitivity`` replicates. The default, ``n_boot``, makes its row at ``gain_fraction``
    (when that share is one of ``sensitivity_gains``) repeat the headline's interval digit for
    digit; any other count draws other replicates and can move the ends.

    Total compute (``total_ctt``): a method on the pre-fitted world model also pays its fitting,
    added to each seed's compute-to-target: ``fitting_executions`` executions charged at this
    run's own CPU-seconds per execution (:func:`run_cpu_s_per_execution`); without
    ``fitting_executions`` (or without a measured rate) the given ``fitting_cpu_s``. The learned
    world model (``wmrl_learned``) is fitted in the run, on its ledger, and pays nothing more.

    Returns:
        ``{"target", "s0", "s_S", "gain_fraction", "fitting_cpu_s" (charged), "fitting_cpu_s_logged",
        "fitting_executions", "cpu_s_per_execution", "best_real" (the real-GRPO batch size with the
        lowest median compute-to-target), "max_bracket_share" (the run's limit, flagged in the report),
        "methods": {name: {"ctt": [per seed], "total_ctt": [per seed], "bracket_share": [per seed],
        "bracket_steps": [per seed] (:func:`brackets_of`), "fitting_charged": bool, "speedup": SpeedupEstimate fields (training only),
        "speedup_with_fitting": ... or None (pre-fitted methods), "speedup_total": over real GRPO,
        "speedup_over_best_real": over the best real-GRPO batch size, chosen inside each bootstrap replicate
        (:func:`agents.experiments.speedup.speedup_over_best`; methods that are not real GRPO),
        "speedup_over_wm_only": over world model only (``wm_only``, its fitting counted; methods that are
        neither real GRPO nor ``wm_only``, when the run has ``wm_only``; else None)}},
        "sensitivity": {share as str: {"target", "methods": {name: {"median_total_ctt", "n_reached",
        "speedup_total", "speedup_over_best_real", "speedup_over_wm_only"}}}}}``; ``{}`` without a
        ``real`` method.
    """
    from agents.experiments.speedup import compute_to_target, speedup, speedup_over_best

    if "real" not in results["methods"]:
        return {}
    rate = run_cpu_s_per_execution(results)
    fit = float(fitting_cpu_s)
    if fitting_executions and rate is not None:
        fit = float(fitting_executions) * rate
    target, s0, sS = real_target(results, steps=steps, gain_fraction=gain_fraction)
    out: dict[str, Any] = {"target": target, "s0": s0, "s_S": sS, "gain_fraction": gain_fraction,
                           "fitting_cpu_s": fit, "fitting_cpu_s_logged": float(fitting_cpu_s),
                           "fitting_executions": int(fitting_executions or 0), "cpu_s_per_execution": rate,
                           "methods": {}}

    def rows_at(tgt: float, nb: int) -> tuple[dict[str, Any], str]:
        ctt = {name: [compute_to_target(curve_of(e), tgt) for e in m["seeds"]] for name, m in results["methods"].items()}
        total = {name: [c + fit if _prefitted(name) else c for c in v] for name, v in ctt.items()}
        reals = [n for n in REAL_METHODS if n in total and len(total[n]) == len(total["real"])]
        best = min(reals, key=lambda n: (float(np.median(total[n])), REAL_METHODS.index(n)))
        # the best batch size is chosen inside each bootstrap replicate (issue 35, item 4)
        real_refs = {n: total[n] for n in reals}
        rows: dict[str, Any] = {}
        for name in results["methods"]:
            row: dict[str, Any] = {"ctt": ctt[name], "total_ctt": total[name], **brackets_of(results, name, tgt),
                                   "fitting_charged": _prefitted(name),
                                   "speedup": None, "speedup_with_fitting": None, "speedup_total": None,
                                   "speedup_over_best_real": None, "speedup_over_wm_only": None}
            if name != "real" and len(ctt[name]) == len(ctt["real"]):
                row["speedup"] = asdict(speedup(ctt["real"], ctt[name], n_boot=nb))
                row["speedup_total"] = asdict(speedup(total["real"], total[name], n_boot=nb))
                if _prefitted(name) and fit > 0:
                    row["speedup_with_fitting"] = row["speedup_total"]
            if name not in REAL_METHODS and len(total[name]) == len(total[best]):
                row["speedup_over_best_real"] = asdict(speedup_over_best(real_refs, total[name], n_boot=nb)[0])
            # the goal's other comparison (issue 35): the same world model's job done without anchors,
            # fitting counted; paired by seed like every other speedup
            if name not in REAL_METHODS and name != "wm_only" and "wm_only" in total and len(total["wm_only"]) == len(total[name]):
                row["speedup_over_wm_only"] = asdict(speedup(total["wm_only"], total[name], n_boot=nb))
            rows[name] = row
        return rows, best

    out["max_bracket_share"] = float(results["config"].get("max_bracket_share", MAX_BRACKET_SHARE))
    out["methods"], out["best_real"] = rows_at(target, n_boot)
    out["sensitivity"] = {}
    for g in sensitivity_gains:
        try:
            tg = real_target(results, steps=steps, gain_fraction=float(g))[0]
        except ValueError:
            continue
        rows, best = rows_at(tg, n_boot if n_boot_sensitivity is None else n_boot_sensitivity)
        out["sensitivity"][f"{float(g):g}"] = {"target": tg, "best_real": best, "methods": {
            n: {"median_total_ctt": float(np.median(r["total_ctt"])) if r["total_ctt"] else float("nan"),
                "n_reached": int(np.isfinite(r["total_ctt"]).sum()),
                "speedup_total": r["speedup_total"], "speedup_over_best_real": r["speedup_over_best_real"],
                "speedup_over_wm_only": r["speedup_over_wm_only"]}
            for n, r in rows.items()}}
    return out


def format_sensitivity_table(results: dict[str, Any]) -> str:
    """Markdown table of the headline's sensitivity to the target (``results["speedup"]["sensitivity"]``):
    per target share of real GRPO's gain, each method's median total compute-to-target (CPU-s,
    fitting included for the pre-fitted world model) and its speedup over real GRPO and over the
    best real-GRPO batch size, with 95% CIs. Empty string for results without it (older files)."""
    sens = (results.get("speedup") or {}).get("sensitivity") or {}
    if not sens:
        return ""
    lines = ["### Sensitivity to the target (total CPU-s to target, fitting included)\n",
             "| target (share of real GRPO's gain) | method | median total CPU-s | seeds reached | speedup over real GRPO | "
             "over the best real-GRPO batch |", "|---|---|---|---|---|---|"]
    for g, block in sens.items():
        for name, r in block["methods"].items():
            med = r["median_total_ctt"]
            med_s = "not reached" if med is None or not math.isfinite(med) else f"{med:.0f}"
            n = len(results["methods"][name]["seeds"])
            lines.append(f"| {float(g):.0%} ({block['target']:.1f}) | {METHODS[name].label} | {med_s} | {r['n_reached']}/{n} | "
                         f"{'1 (reference)' if name == 'real' else _fmt_speedup(r['speedup_total'])} | "
                         f"{_fmt_speedup(r['speedup_over_best_real'])} |")
    return "\n".join(lines) + "\n"


def format_decomposition(results: dict[str, Any], learned: str = "wmrl_learned") -> str:
    """Where the saving comes from (issue 35's report), from ``results["speedup"]["sensitivity"]``:
    per target, real GRPO → the best real-GRPO batch (the batch size's share of the saving) → the
    anchored method ``learned`` (the world model's share: its speedup over the best real batch,
    chosen inside each bootstrap replicate), world model only over the best real batch, and
    ``learned`` over world model only (both with their fitting counted, paired by seed); then
    where each method stopped: seeds that reach each target and the median last held-out score of
    every method (a plateau shows only in a method that spent real GRPO's compute below its stop
    target). The two shares multiply to the total only roughly (each
    is a ratio of medians over seeds). Empty string without a sensitivity table or ``learned``."""
    sens = (results.get("speedup") or {}).get("sensitivity") or {}
    if not sens or learned not in results["methods"]:
        return ""
    n_seeds = {name: len(m["seeds"]) for name, m in results["methods"].items()}
    lines = ["### Where the saving comes from (total CPU-s to target, fitting included)\n",
             f"Real GRPO at {results['config'].get('groups_per_step', '?')} groups a step → the best real-GRPO batch (batch size alone) → {METHODS[learned].label} "
             "(the world model on top of a small real batch). Speedups are ratios of medians over seeds with paired "
             "95% bootstrap CIs; the two steps multiply to the total only roughly.\n",
             f"| target | best real batch | batch size: its speedup over real GRPO | world model: {METHODS[learned].label} "
             f"over the best real batch | {METHODS[learned].label} over real GRPO | world model only over the best real batch | "
             f"{METHODS[learned].label} over world model only |",
             "|---|---|---|---|---|---|---|"]
    for g, block in sens.items():
        best, rows = block.get("best_real"), block.get("methods", {})
        if best not in rows or learned not in rows:
            continue  # a block saved without them (nothing to decompose)
        batch = "1 (real GRPO's own batch)" if best == "real" else _fmt_speedup(rows[best]["speedup_total"])
        wm_only = rows.get("wm_only")
        lines.append(f"| {float(g):.0%} ({block['target']:.1f}) | {METHODS[best].label} | {batch} | "
                     f"{_fmt_speedup(rows[learned]['speedup_over_best_real'])} | {_fmt_speedup(rows[learned]['speedup_total'])} | "
                     f"{_fmt_speedup(wm_only['speedup_over_best_real']) if wm_only else '—'} | "
                     f"{_over_wm_only(rows[learned].get('speedup_over_wm_only'))} |")
    reach = []
    for name in results["methods"]:
        per_target = ", ".join(f"{float(g):.0%} {block['methods'][name]['n_reached']}/{n_seeds[name]}"
                               for g, block in sens.items() if name in block["methods"])
        last = [e["eval"]["last"]["overall"] for e in results["methods"][name]["seeds"]
                if "last" in e.get("eval", {}) and e["eval"]["last"].get("overall") is not None]
        med = f"{float(np.median(last)):.1f}" if last else "—"
        reach.append(f"| {METHODS[name].label} | {per_target} | {med} |")
    lines += ["", "Where each method stopped: seeds that reach each target, and the held-out score at its last step "
              "(median over seeds). A method stops at its stop target or at real GRPO's compute to it, so a plateau "
              "shows only in a method that spent that compute below its stop target.\n",
              "| method | seeds reaching each target (share of real GRPO's gain) | last held-out score (median) |",
              "|---|---|---|", *reach]
    return "\n".join(lines) + "\n"


CAUSE_WORDS = {"steps": "end of its S steps", "compute budget": "compute budget (real GRPO's compute)",
               "target": "provisional stop target (set from the seeds run before it)",
               "step cap": "step cap (max_steps_factor × S)"}
"""How a seed that did not reach the target is described, by why its training stopped."""


def _over_wm_only(d: dict[str, Any] | None) -> str:
    """A speedup over world model only as text: as :func:`_fmt_speedup`, but naming world model only
    when its own median is not reached (``_fmt_speedup`` would name real GRPO)."""
    if d is not None and math.isinf(d["real_median"]) and math.isfinite(d["method_median"]):
        return f"world model only not reached; this method reached ({d['n_reached']}/{d['n_seeds']} seeds)"
    return _fmt_speedup(d)


def _fmt_speedup(d: dict[str, Any] | None, limit: str = "within budget") -> str:
    from agents.experiments.speedup import SpeedupEstimate

    return "—" if d is None else SpeedupEstimate(**d).format(limit=limit)


def format_speedup_table(results: dict[str, Any]) -> str:
    """Markdown table of the headline (``results["speedup"]``, :func:`compute_speedups`): per method,
    compute-to-target in CPU-seconds (median and inter-quartile range over seeds), seeds that
    reached the target, speedup over real-execution GRPO with its 95% bootstrap CI, and the
    same with the world model's fitting cost charged."""
    from agents.experiments.speedup import percentile_inf

    sp = results.get("speedup") or {}
    if not sp:
        return "(no compute-to-target: the run has no real-execution GRPO)\n"
    fit = sp["fitting_cpu_s"]
    unit = results.get("world_model_fitting_unit", "CPU-s")
    how = ""
    if sp.get("fitting_executions") and sp.get("cpu_s_per_execution"):
        how = (f" The pre-fitted world model's fitting: {sp['fitting_executions']} executions × this run's own "
               f"{sp['cpu_s_per_execution']:.2f} CPU-s per execution = {fit:.0f} CPU-s (the log's own figure: "
               f"{sp.get('fitting_cpu_s_logged', 0.0):.0f}); the learned world model is fitted in the run, on its ledger.")
    best = sp.get("best_real")
    lines = [
        f"Target: held-out {sp['target']:.1f} = {sp['s0']:.1f} + {sp['gain_fraction']:g} × ({sp['s_S']:.1f} − {sp['s0']:.1f}) "
        f"(real-execution GRPO's mean curve: untrained → after S steps).{how}",
        "",
        f"| method | compute-to-target, CPU-s (median [IQR]) | seeds reached | speedup [95% CI] | with world-model fitting ({fit:.0f} {unit}) | "
        f"total CPU-s to target (median) | total speedup over the best real-GRPO batch ({METHODS[best].label if best else '—'}) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in sp["methods"].items():
        c = np.asarray(row["ctt"], dtype=float)
        fin = c[np.isfinite(c)]
        med = percentile_inf(c, 50) if c.size else float("nan")
        q1, q3 = (percentile_inf(c, 25), percentile_inf(c, 75)) if c.size else (float("nan"),) * 2
        cell = ("not reached" if not math.isfinite(med) else f"{med:.0f}") + " [" + ", ".join(
            "n.r." if not math.isfinite(q) else f"{q:.0f}" for q in (q1, q3)) + "]"
        causes: dict[str, int] = {}
        for e, v in zip(results["methods"][name]["seeds"], c):
            if not math.isfinite(v):
                causes[e.get("stopped", "steps")] = causes.get(e.get("stopped", "steps"), 0) + 1
        why = "; ".join(f"{k} at the {CAUSE_WORDS.get(w, w)}" for w, k in sorted(causes.items()))
        limit = "within budget" if set(causes) <= {"compute budget"} else "before its run stopped (" + why + ")"
        lines.append(f"| {METHODS[name].label} | {cell} | {fin.size}/{c.size}{f' (not reached: {why})' if why else ''} | "
                     f"{'1 (reference)' if name == 'real' else _fmt_speedup(row['speedup'], limit)} | "
                     f"{_fmt_speedup(row['speedup_with_fitting'], limit) if name != 'real' else '—'} | "
                     f"{_median_cell(row.get('total_ctt'))} | {_fmt_speedup(row.get('speedup_over_best_real'), limit)} |")
    return "\n".join(lines) + "\n"


def _median_cell(values: Sequence[float] | None) -> str:
    from agents.experiments.speedup import percentile_inf

    if not values:
        return "—"
    med = percentile_inf(np.asarray(values, dtype=float), 50)
    return "not reached" if not math.isfinite(med) else f"{med:.0f}"


def cost_summary(results: dict[str, Any]) -> dict[str, Any]:
    """Per method, mean over seeds at its last step: CPU-seconds per source, executions, realised
    anchor fraction, and under ``"_ratio"`` each world-model method's world-model : execution cost per
    rollout (its CPU-seconds per prediction over the run's CPU-seconds per execution), which bounds
    the attainable speedup."""
    out: dict[str, Any] = {}
    for name, m in results["methods"].items():
        last = [e["records"][-1] for e in m["seeds"] if e["records"]]
        if not last:
            continue
        cpu = {s: float(np.mean([r["cpu_seconds"].get(s, 0.0) for r in last])) for s in COST_SOURCES}
        n_exec = float(np.mean([r["executions"] for r in last]))
        out[name] = {"cpu_seconds": cpu, "executions": n_exec,
                     "wall_s": float(np.mean([r["compute_wall_s"] for r in last])),
                     "cpu_unmeasured": float(np.mean([r.get("cpu_unmeasured", 0) for r in last])),
                     "realised_anchor_fraction": float(np.mean([r["realised_anchor_fraction"] for r in last])),
                     "cpu_s_per_execution": cpu["execution"] / n_exec if n_exec else None}
        live = [r.get("execution_cpu_s_live") for r in last]
        if live and all(v is not None for v in live):  # charged from a cost model: the measured figure beside it
            out[name]["execution_cpu_s_live"] = float(np.mean(live))
    per_exec = [v["cpu_s_per_execution"] for v in out.values() if v["cpu_s_per_execution"]]
    wm = [(v["cpu_seconds"]["world_model"], n) for n, v in out.items()
          if METHODS[n].world_model and v["cpu_seconds"]["world_model"] > 0]
    ratios = {}
    for cpu_wm, name in wm if per_exec else []:  # each world-model method: its own cost per prediction
        m = results["methods"][name]["seeds"]
        n_pred = np.mean([len(e["records"]) for e in m]) * results["config"]["groups_per_step"] * results["config"]["group_size"]
        c_wm = cpu_wm / n_pred
        ratios[name] = {"cpu_s_per_prediction": c_wm, "cpu_s_per_execution": float(np.mean(per_exec)),
                        "wm_to_execution": c_wm / float(np.mean(per_exec))}
    if ratios:
        out["_ratio"] = ratios
    return out


def write_report(results: dict[str, Any], out_dir: Path) -> None:
    """``table.md`` (headline, cost split, the three comparison tables, ungraded counts, evaluation
    counts, the interpolation brackets of :func:`format_bracket_table`) and the plots, from a
    ``results.json`` structure."""
    cfg = results["config"]
    parts = ["## Compute-to-target speedup (headline; CPU-seconds of training, evaluation excluded)\n\n"
             + (format_speedup_table(results) if results.get("speedup") else
                f"(no compute-to-target: {results.get('speedup_error', 'the run has no real-execution GRPO')})\n")]
    if results.get("reused_from"):
        ru = results["reused_from"]
        parts[0] += (f"\n{', '.join(METHODS[m].label for m in ru['methods'])}: read from `{ru['path']}` (trained, "
                     "evaluated and refined there on the same seeds; not run again; its CPU-seconds were measured "
                     "then). Its equal-compute points are those of its own run.\n")
    sens = format_sensitivity_table(results)
    if sens:
        parts.append(sens)
    decomposition = format_decomposition(results)
    if decomposition:
        parts.append(decomposition)
    parts.append(format_cost_table(results))
    for point, title in (("steps", f"Equal steps ({cfg['steps']})"), ("compute_wmrl", "Equal compute: WMRL's"),
                         ("compute_real", "Equal compute: real-execution GRPO's"),
                         ("last", "Each method's last step (where its training stopped)")):
        owner = {"compute_wmrl": "wmrl", "compute_real": "real"}.get(point)
        if owner is not None and owner not in results["methods"]:
            continue  # no budget to compare at: that method did not run
        if not all(point in e["eval"] for m in results["methods"].values() for e in m["seeds"]):
            continue  # a run that stops each method at the target evaluates no equal-compute point
        parts.append(f"### {title}\n\n" + format_table(results, point))
    parts.append(_ungraded_note(results))
    ev = results.get("evaluation", {})
    if ev:
        parts.append(f"Held-out evaluation: {ev['evaluations']} snapshot evaluations, {ev['executed']} programs executed, "
                     f"{ev['cached']} taken from the (task, program) cache.\n")
    brackets = format_bracket_table(results)  # last: how far each compute-to-target is interpolated
    if brackets:
        parts.append(brackets)
    (out_dir / "table.md").write_text("\n".join(parts))
    _plot(results, out_dir)


def format_cost_table(results: dict[str, Any]) -> str:
    """Markdown table of where each method's training compute went (CPU-seconds per source, mean
    over seeds at its last step), its executions and realised anchor fraction, and the
    world-model : execution cost per rollout."""
    costs = results.get("costs") or cost_summary(results)
    lines = ["### Cost split (CPU-seconds, mean over seeds, at each method's last step)\n",
             "| method | execution | world model | generation | update | total CPU-s | wall-clock s | executions | realised anchor fraction |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, c in costs.items():
        if name.startswith("_"):
            continue
        cs = c["cpu_seconds"]
        lines.append(f"| {METHODS[name].label} | {cs['execution']:.1f} | {cs['world_model']:.1f} | {cs['generation']:.1f} | "
                     f"{cs['update']:.1f} | {sum(cs.values()):.1f} | {c['wall_s']:.1f} | {c['executions']:.0f} | "
                     f"{c['realised_anchor_fraction']:.3f} |")
    live = {n: c for n, c in costs.items() if not n.startswith("_") and c.get("execution_cpu_s_live") is not None}
    if live:
        lines.append("\nExecutions are charged from the idle-machine cost model (`" + str(results["config"].get(
            "execution_cost_model")) + "`); measured CPU-s of the same executions beside it (charged / measured): "
                     + ", ".join(f"{METHODS[n].label} {c['cpu_seconds']['execution']:.0f} / {c['execution_cpu_s_live']:.0f}"
                                 for n, c in live.items()) + ".")
    unmeasured = {n: c["cpu_unmeasured"] for n, c in costs.items() if not n.startswith("_") and c.get("cpu_unmeasured")}
    if unmeasured:
        lines.append("\n**Warning: compute understated.** Executions whose CPU-seconds the sandbox could not measure "
                     "(mean per seed, not in the figures above): " + ", ".join(f"{METHODS[n].label} {v:.0f}" for n, v in unmeasured.items())
                     + ". Run with a sandbox that measures CPU (bubblewrap or subprocess with a writable cgroup).")
    ratios = costs.get("_ratio") or {}
    if "wm_to_execution" in ratios:  # a results.json from before the per-method ratios: its first world-model method
        ratios = {"": ratios}
    for name, r in ratios.items():
        who = f" of {METHODS[name].label}" if name in METHODS else ""
        lines.append(f"\nWorld model{who} : execution cost per rollout = 1 : {1 / r['wm_to_execution']:.3g} "
                     f"({r['cpu_s_per_prediction'] * 1e3:.1f} CPU-ms per prediction vs {r['cpu_s_per_execution']:.2f} CPU-s per execution); the speedup at "
                     f"equal steps is 1 / (f + {r['wm_to_execution']:.3f}) for anchor fraction f (the speedup of a method "
                     f"that needs as many steps as real GRPO; not a bound: fewer or more steps move it).")
    fit = results.get("world_model_fitting_cpu_s") or 0.0
    if fit:
        unit = results.get("world_model_fitting_unit", "CPU-s")
        lines.append(f"World-model fitting cost (the real executions it was fitted on, paid once): {fit:.0f} {unit}.")
    return "\n".join(lines) + "\n"


def report_finished_seeds(results: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """The report of the seeds a (possibly stopped) ``wmrl bench`` run finished: the seeds that
    every method holds are kept, the headline and the cost split are computed from them, and
    ``table.md`` and the plots are written to ``out_dir`` (``wmrl bench report``).

    A run stopped before its refinement pass reads compute-to-target between its spread
    snapshots only; the table's first line says how many seeds it has and that it is a partial
    report when the run planned more.

    Args:
        results: a ``results.json`` structure of ``wmrl bench``.
        out_dir: where to write.

    Returns:
        The results restricted to the finished seeds, with ``speedup`` and ``costs``.

    Raises:
        ValueError: no seed is finished by every method.
    """
    import copy

    res = restore_nonfinite(copy.deepcopy(results))  # strict JSON's nulls (and older files' NaN/Infinity)
    n = min(len(m["seeds"]) for m in res["methods"].values())
    if n == 0:
        raise ValueError("no seed was finished by every method: nothing to report yet")
    planned = int(res["config"]["seeds"])
    for m in res["methods"].values():
        m["seeds"] = m["seeds"][:n]
    res["config"]["seeds"] = n
    if "real" in res["methods"]:
        try:
            res["speedup"] = compute_speedups(
                res, gain_fraction=res["config"]["target_gain"], steps=res["config"]["steps"],
                fitting_cpu_s=res.get("world_model_fitting_cpu_s", 0.0)
                if res.get("world_model_fitting_unit", "CPU-s") == "CPU-s" else 0.0,
                fitting_executions=res.get("world_model_fitting_executions", 0))
        except ValueError as exc:
            res["speedup"], res["speedup_error"] = {}, str(exc)
    res["costs"] = cost_summary(res)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_report(res, out_dir)
    if n < planned:
        text = (out_dir / "table.md").read_text()
        (out_dir / "table.md").write_text(f"**Partial report: {n} of the {planned} planned seeds finished.**\n\n" + text)
    return res
