"""The outputs of the known-truth sweep: its table (:func:`format_sweep_table`), the speedup
heatmaps and the traces of ρ and the calibration error (``sweep_*.png``)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np


from .sweep_config import ABLATIONS, BREAKING, REAL_AT_F

__all__ = ["format_sweep_table", "mean_over_all_seeds", "plot_heatmaps", "plot_traces"]


def _f(x: float | None, nd: int = 2) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{nd}f}"


def _stops(cell: dict[str, Any]) -> str:
    r = cell.get("stop_reasons", [])
    return f"{r.count('target')} / {r.count('compute budget')} / {r.count('step cap')}"


def format_sweep_table(results: dict[str, Any]) -> str:
    """The sweep's markdown report: costs and equal-steps cost ratios, each level's measured
    correlations, and one row per cell (speedup with its 95% CI, seeds reached, why the seeds
    stopped, equal-steps cost ratio, realised fraction)."""
    cfg, cost = results["config"], results["cost"]
    lines = [
        "# Known-truth sweep: compute-to-target speedup over real-execution GRPO",
        "",
        f"World-model : execution cost ratio {cost['world_model_cpu_s']:g} : {cost['execution_cpu_s']:g} "
        f"(declared CPU-seconds per prediction / per execution). Equal-steps cost ratio c_exec / (f·c_exec + c_wm) "
        f"(the speedup a method would have if it needed as many steps as real GRPO; generation and update ignored): "
        + ", ".join(f"f={f}: {b:.1f}×" for f, b in cost["equal_steps_cost_ratio"].items())
        + f"; world model only: {cost['equal_steps_cost_ratio_wm_only']:.0f}×. It is not a bound: a method that needs "
        "fewer steps than real GRPO beats it. A good world model can: it predicts an action's expected score without "
        "the outcome noise of a real execution (less noisy advantages), and a monotone distortion changes the spacing of "
        "the scores that GRPO standardises within a group.",
        "",
        (f"Target score {results['target']:.3f} ({cfg['gain_fraction']:g} of real GRPO's mean gain in {cfg['steps']} steps; "
         f"exact expected score over {cfg['n_tasks']} tasks). Other methods stop at the target or at the compute "
         f"budget, {results['compute_budget_s']:.0f} CPU-s ({cfg['max_compute_factor']:g}× real GRPO's median compute); "
         f"each run's step cap is derived from its declared cost per step so that it can spend the budget, within a "
         f"safety cap of {results['step_cap']} steps that binds first only where the budget needs more steps (world "
         "model only). 'not reached within budget' / 'not reached within N steps (step cap)' say which limit stopped "
         "the seeds; 'stopped' counts the seeds by reason (target / compute budget / step cap). In an interval, "
         f"'n.r.' is a resample in which the method is not reached. {cfg['seeds']} seeds per cell; 95% paired "
         "bootstrap CI over seeds."),
        "",
        "## World-model quality levels (within-group correlation of world-model vs real score, measured)",
        "",
        ("Per group the Pearson / Spearman correlation of its G world-model and real scores, averaged over the "
         "groups in which neither is constant. 'untrained policy': groups drawn from the uniform policy; "
         "'anchor groups': every anchor group of the level's anchored runs."),
        "",
        "| level | Pearson (untrained policy) | Spearman (untrained policy) | Pearson (anchor groups) | Spearman (anchor groups) |",
        "|---|---|---|---|---|",
    ]
    for lv, e in results["levels"].items():
        if "initial" in e:
            ip, isp = _f(e["initial"]["pearson"]), _f(e["initial"]["spearman"])
        else:
            ip = f"{_f(e['initial_before']['pearson'])} → {_f(e['initial_after']['pearson'])}"
            isp = f"{_f(e['initial_before']['spearman'])} → {_f(e['initial_after']['spearman'])}"
        a = e.get("anchors", {})
        lines.append(f"| {lv} | {ip} | {isp} | {_f(a.get('pearson'))} | {_f(a.get('spearman'))} |")
    if cfg["breaking"]:
        lines += ["", f"`{BREAKING}`: {cfg['break_from']} for the predictions of {cfg['break_at_step']} steps, then {cfg['break_to']}."]
    lines += ["", "## Speedup per cell", "",
              ("| level | method | f | speedup [95% CI] | seeds reached | stopped: target / budget / step cap "
               "| equal-steps cost ratio | realised f |"),
              "|---|---|---|---|---|---|---|---|"]
    for c in results["cells"]:
        if c["method"] == REAL_AT_F:
            continue
        f = "—" if c["fraction"] is None else f"{c['fraction']:g}"
        lines.append(f"| {c['level']} | {c['method']} | {f} | {c['formatted']} | {c['n_reached']}/{c['n_seeds']} | "
                     f"{_stops(c)} | {c['equal_steps_cost_ratio']:.1f}× | {c['realised_fraction']:.3f} |")
    small = [c for c in results["cells"] if c["method"] == REAL_AT_F]
    if small:
        gps = cfg["groups_per_step"]
        lines += ["", f"## Reference: real GRPO with fewer groups per step ({REAL_AT_F})", "",
                  (f"Real-execution GRPO with max(1, round(f × {gps})) groups per step: the anchor groups alone, no "
                   f"world model. Its speedup over real GRPO (at {gps} groups per step) is the saving a smaller real "
                   "batch gives by itself; an anchored method adds value over it only where its speedup is higher."), "",
                  "| f | groups per step | speedup [95% CI] | seeds reached | stopped: target / budget / step cap |",
                  "|---|---|---|---|---|"]
        for c in small:
            lines.append(f"| {c['fraction']:g} | {max(1, round(c['fraction'] * gps))} | {c['formatted']} | "
                         f"{c['n_reached']}/{c['n_seeds']} | {_stops(c)} |")
    return "\n".join(lines) + "\n"


def _bound(x: float | None) -> str:
    """An interval bound on the heat map: 0 (not reached in that resample) is 'n.r.', inf '∞'."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return "n.r." if x == 0.0 else ("∞" if math.isinf(x) else f"{x:.1f}")


def plot_heatmaps(results: dict[str, Any], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    cfg = results["config"]
    levels = list(results["levels"])
    fracs = list(cfg["fractions"])
    cells = {(c["method"], c["level"], c["fraction"]): c for c in results["cells"]}

    def panel(ax: Any, rows: list[tuple[str, str, str | None]], cols: list[Any], title: str, labels: bool = True) -> Any:
        grid = np.full((len(rows), len(cols)), np.nan)
        for i, (_label, method, lv) in enumerate(rows):
            for j, f in enumerate(cols):
                c = cells.get((method, lv, f))
                if c is None:
                    continue
                grid[i, j] = c["speedup"] if c["reached"] and math.isfinite(c["speedup"]) and c["speedup"] > 0 else np.nan
                txt = (f"{c['speedup']:.1f}×\n[{_bound(c['low'])}, {_bound(c['high'])}]" if c["reached"]
                       else ("n.r.\n(step cap)" if "step cap" in c["formatted"] else "n.r."))
                ax.text(j, i, txt, ha="center", va="center", fontsize=7 if len(cols) < 4 or labels else 6)
        vmax = max(20.0, float(np.nanmax(grid)) if np.isfinite(grid).any() else 20.0)
        im = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", norm=LogNorm(vmin=0.1, vmax=vmax), aspect="auto")
        ax.set_xticks(range(len(cols)), [("—" if f is None else f"f={f:g}") for f in cols])
        ax.set_yticks(range(len(rows)), [r[0] for r in rows] if labels else [])
        ax.set_title(title, fontsize=9)
        return im

    fig, ax = plt.subplots(figsize=(1.6 * len(fracs) + 3, 0.55 * len(levels) + 2))
    rows = [(lv, "wmrl", lv) for lv in levels]
    if any(c["method"] == REAL_AT_F for c in results["cells"]):
        rows.append(("(reference) real GRPO,\nf × groups per step", REAL_AT_F, None))
    im = panel(ax, rows, fracs, "WMRL: compute-to-target speedup over real GRPO\n(median, 95% CI; n.r. = not reached within budget)")
    fig.colorbar(im, ax=ax, label="speedup (log scale)")
    fig.tight_layout()
    fig.savefig(out_dir / "speedup_heatmap.png", dpi=120)
    plt.close(fig)
    others = [m for m in ("wm_only", *ABLATIONS) if any(c["method"] == m for c in results["cells"])]
    if others:
        fig, axes = plt.subplots(1, len(others), figsize=(4.2 * len(others) + 1.5, 0.6 * len(levels) + 2), squeeze=False)
        for k, (ax, m) in enumerate(zip(axes[0], others)):
            cols = [None] if m == "wm_only" else [f for f in fracs if any(c["method"] == m and c["fraction"] == f for c in results["cells"])]
            im = panel(ax, [(lv, m, lv) for lv in levels], cols, m, labels=k == 0)
        fig.colorbar(im, ax=list(axes[0]), label="speedup (log scale)")
        fig.savefig(out_dir / "speedup_heatmap_methods.png", dpi=120, bbox_inches="tight")
        plt.close(fig)


def mean_over_all_seeds(runs: list[dict[str, Any]], key: str) -> np.ndarray:
    """Mean over runs of the per-step trace ``run[key]``, only at the steps *every* run has.

    Runs stop at the target, so a later step would average only the few slow seeds and jump;
    the traces of ``traces.png`` end at the last step every seed ran. ``None`` (not yet
    measured, e.g. a calibration error before the first refit) counts as NaN and is skipped.

    Returns:
        float64 array of shape ``(min_len,)`` (empty without runs).
    """
    n = min((len(r[key]) for r in runs), default=0)
    m = np.array([[np.nan if v is None else v for v in r[key][:n]] for r in runs], dtype=np.float64).reshape(len(runs), n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a step where no run has a value: NaN
        return np.nanmean(m, axis=0) if len(runs) else np.array([])


def plot_traces(results: dict[str, Any], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = results["config"]
    f0 = 0.1 if 0.1 in cfg["fractions"] else cfg["fractions"][0]
    runs = [r for r in results["runs"] if r["method"] == "wmrl" and r["fraction"] == f0]

    mean_trace = mean_over_all_seeds

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for i, lv in enumerate(results["levels"]):
        rs = [r for r in runs if r["level"] == lv]
        if not rs:
            continue
        axes[0].plot(np.arange(1, len(mean_trace(rs, "rho")) + 1), mean_trace(rs, "rho"), color=f"C{i}", label=lv)
        if lv != BREAKING:
            x = np.arange(1, len(mean_trace(rs, "mae_raw")) + 1)
            axes[1].plot(x, mean_trace(rs, "mae_raw"), ls="--", color=f"C{i}")
            axes[1].plot(x, mean_trace(rs, "mae_calibrated"), color=f"C{i}", label=lv)
    axes[0].set_title(f"anchor weight ρ (WMRL, f={f0:g}; mean over all seeds, up to the\n"
                      "last step every seed ran: runs stop at the target)", fontsize=9)
    axes[0].set_xlabel("step"); axes[0].legend(fontsize=7)
    axes[1].set_title("prequential calibration MAE on anchor pairs (dashed: raw, solid:\n"
                      "calibrated; WMRL; mean over all seeds, steps every seed ran)", fontsize=9)
    axes[1].set_xlabel("step"); axes[1].legend(fontsize=7)
    rs = [r for r in runs if r["level"] == BREAKING]
    if rs:
        x = np.arange(1, len(mean_trace(rs, "rho")) + 1)
        axes[2].plot(x, mean_trace(rs, "rho"), label="anchor weight ρ")
        axes[2].plot(x, mean_trace(rs, "anchor_pearson"), label="within-group Pearson of the anchor groups")
        axes[2].axvline(cfg["break_at_step"] + 0.5, color="k", ls=":", label="world model breaks")
        axes[2].set_title(f"breaking world model ({cfg['break_from']} → {cfg['break_to']}), WMRL f={f0:g}\n"
                          "(mean over all seeds, steps every seed ran)", fontsize=9)
        axes[2].set_xlabel("step"); axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "traces.png", dpi=120)
    plt.close(fig)
