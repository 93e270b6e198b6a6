"""The main job over seeds: both arms of ``wmrl train`` at equal compute (issue 36, item 5).

Reads finished ``wmrl train`` run folders (each with its real arm in ``real/``), copies their
light files (summaries, metrics, configs, the last checkpoint's ``state.json``, the plots; no
LoRA weights) into ``--out-dir/seed<k>/``, and writes, over the seeds:

* ``main_job_arms.json``: per seed and pooled, each arm's training CPU-seconds and held-out
  figures; WMRL − real paired over held-out tasks (pooled: over every (seed, task) pair, the
  bootstrap resampling seeds and then tasks within them); the WMRL policy against copying the
  shown line per seed; whether ρ left 1 on anchor groups and at which steps; the prequential
  calibration error raw → calibrated per seed; the learned world model's within-group r pooled
  over all seeds' anchor groups (each group's scores as the run's advisor held them: out of fold);
* ``table.md``: the same as a table;
* ``arms.png``: held-out relative score against training CPU-seconds, both arms, every seed.

    .venv/bin/python benchmarks/main_job_arms.py runs/seed0 runs/seed1 runs/seed2 --out-dir results/main_job_arms_run
    .venv/bin/python benchmarks/main_job_arms.py --out-dir results/main_job_arms_run   # re-aggregate the copied seeds
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LIGHT_FILES = ("config.json", "metrics.jsonl", "summary.json", "summary.md", "calibration.png", "arms.png")


def copy_run(run: Path, dest: Path) -> None:
    """Copy a finished two-arm run's light files to ``dest`` (raises if the run is unfinished)."""
    if not (run / "summary.json").exists() or not (run / "real" / "summary.json").exists():
        raise FileNotFoundError(f"{run} is not a finished two-arm run (summary.json and real/summary.json)")
    for sub in ("", "real"):
        (dest / sub).mkdir(parents=True, exist_ok=True)
        for name in LIGHT_FILES:
            if (run / sub / name).exists():
                shutil.copy2(run / sub / name, dest / sub / name)
        shutil.copy2(run / sub / "checkpoint" / "state.json", dest / sub / "state.json")


def _seed_figures(d: Path) -> dict[str, Any]:
    s = json.loads((d / "summary.json").read_text())
    real = json.loads((d / "real" / "summary.json").read_text())
    lines = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in lines if "tasks" in r]
    rho_anchor = [(r["step"], r["rho"]) for r in steps if "anchor" in r["routes"]]
    copy_after = (s.get("copy_baseline") or {}).get("after") or {}
    arms = s["arms"]
    # the paired difference recomputed from the per-task figures with today's interval (a Student t over
    # tasks; runs made before it carry a bootstrap CI, too narrow on 8 tasks)
    from agents.train.arms import paired_over_tasks

    rel_w = ((s.get("copy_baseline") or {}).get("after") or {}).get("per_task") or {}
    rel_r = ((real.get("copy_baseline") or {}).get("after") or {}).get("per_task") or {}
    paired = paired_over_tasks(rel_w, rel_r)
    return {
        "seed": json.loads((d / "config.json").read_text())["seed"],
        "training_cpu_s": arms["training_cpu_s"],
        "steps_trained": arms["steps_trained"],
        "relative_score": {k: arms["heldout"]["relative_score"][k] for k in ("wmrl", "real")},
        "relative_before": arms["heldout"]["before"]["relative_score"],
        "wmrl_minus_real": paired,
        "avg_at_k": {k: arms["heldout"]["avg_at_k"][k] for k in ("wmrl", "real")},
        "wmrl_minus_copy": {"difference": copy_after.get("difference"), "difference_ci": copy_after.get("difference_ci"),
                            "share_tasks_beaten": copy_after.get("share_tasks_beaten")},
        "real_minus_copy": {k: ((real.get("copy_baseline") or {}).get("after") or {}).get(k)
                            for k in ("difference", "difference_ci", "share_tasks_beaten")},
        "rho_on_anchor_steps": rho_anchor,
        "rho_left_1": any(abs(r - 1.0) > 1e-9 for _, r in rho_anchor),
        "calibration_mse": {"raw": s.get("calibration_mse_raw"), "calibrated": s.get("calibration_mse_calibrated")},
        "debias_map": s.get("debias_map"),
        "within_group_r": (s.get("world_model") or {}).get("within_group_r"),
        "r_among_valid": _seed_r_among_valid(d),
        "distinct_lines_last_step": steps[-1].get("distinct_lines_mean") if steps else None,
        "verdict": arms["verdict"],
    }


def _seed_r_among_valid(d: Path) -> dict[str, Any] | None:
    """The seed's r among valid programs, recomputed from its last checkpoint's anchor groups (runs
    made before the summary carried it have the groups, not the figure)."""
    from agents.train.summary import r_among_valid

    try:
        groups = json.loads((d / "state.json").read_text())["wrapper"]["advisor"]["groups"]
    except (OSError, KeyError, ValueError):
        return None
    return r_among_valid([g[0] for g in groups], [g[1] for g in groups], _valid_calibration([d]), 2000, 0)


def _valid_calibration(dirs: list[Path]) -> str | None:
    """``"crossfit"`` when every run trained with an isotonic debiasing map (it can flatten the
    valid programs' scores), else ``None`` (identity and linear maps keep their ranking)."""
    maps = {json.loads((d / "summary.json").read_text()).get("debias_map") for d in dirs}
    return "crossfit" if maps == {"isotonic"} else None


def _pooled_difference(per_seed: list[dict[str, float]], n_boot: int = 4000, seed: int = 0) -> dict[str, Any] | None:
    """Mean WMRL − real over every (seed, task) pair, with a two-stage bootstrap CI (seeds, then
    tasks within each drawn seed)."""
    groups = [np.array(list(p.values()), dtype=float) for p in per_seed if p]
    if not groups:
        return None
    rng = np.random.default_rng(seed)
    reps = []
    for _ in range(n_boot):
        pick = rng.integers(0, len(groups), len(groups))
        reps.append(np.concatenate([groups[i][rng.integers(0, groups[i].size, groups[i].size)] for i in pick]).mean())
    allv = np.concatenate(groups)
    return {"difference": float(allv.mean()), "difference_ci": [float(v) for v in np.quantile(reps, [0.025, 0.975])],
            "n_pairs": int(allv.size), "n_seeds": len(groups), "share_wmrl_higher": float(np.mean(allv > 0))}


def _pooled_r(dirs: list[Path]) -> dict[str, Any]:
    """The learned world model's within-group r over every seed's anchor groups (out-of-sample
    isotonic calibration, as each run's summary), and the same among the valid programs."""
    from agents.train.summary import _pooled_r as pooled, r_among_valid

    groups = [g for d in dirs for g in json.loads((d / "state.json").read_text())["wrapper"]["advisor"]["groups"]]
    wm, real = [g[0] for g in groups], [g[1] for g in groups]
    return {**pooled(wm, real, "crossfit", 2000, 0),
            "among_valid": r_among_valid(wm, real, _valid_calibration(dirs), 2000, 0)}


def aggregate(out_dir: Path) -> dict[str, Any]:
    dirs = sorted(p for p in out_dir.glob("seed*") if (p / "summary.json").exists())
    seeds = [_seed_figures(d) for d in dirs]
    pooled = _pooled_difference([s["wmrl_minus_real"]["per_task"] for s in seeds if s["wmrl_minus_real"]])
    try:
        r = _pooled_r(dirs)
    except (KeyError, ValueError, TypeError) as exc:  # a state without the advisor's groups
        r = {"error": str(exc)}
    return {"seeds": seeds, "pooled_wmrl_minus_real": pooled, "pooled_within_group_r": r,
            "n_seeds": len(seeds)}


def _f(v: Any, nd: int = 3) -> str:
    return f"{v:.{nd}f}" if isinstance(v, (int, float)) and math.isfinite(v) else "n/a"


def _ci(p: dict[str, Any] | None, nd: int = 3) -> str:
    if not p or p.get("difference") is None:
        return "n/a"
    ci = p.get("difference_ci")
    return f"{p['difference']:+.{nd}f}" + (f" [{ci[0]:+.{nd}f}, {ci[1]:+.{nd}f}]" if ci else "")


def _validity_note(r: dict[str, Any]) -> str:
    """What the two r's say together: when r among the valid programs lies below the overall r's
    interval, most of r is the world model telling valid programs from failed ones."""
    v, lo = (r.get("among_valid") or {}).get("r"), (r.get("r_ci") or [None])[0]
    if isinstance(v, (int, float)) and isinstance(lo, (int, float)) and math.isfinite(v) and math.isfinite(lo) and v < lo:
        return ": most of r is telling valid from failed programs, not better from worse valid ones"
    return ""


def _r_ci(r: dict[str, Any] | None) -> str:
    if not r:
        return "n/a"
    ci = r.get("r_ci") or [None, None]
    return f"{_f(r.get('r'), 2)} [{_f(ci[0], 2)}, {_f(ci[1], 2)}]"


def table(res: dict[str, Any]) -> str:
    rows = ["| seed | training CPU-s WMRL / real | steps WMRL / real | relative score before / WMRL / real | "
            "WMRL − real (paired, 95% CI) | WMRL − copy | real − copy | ρ left 1 | calib. MSE raw → cal. | r (within group) | "
            "r among valid programs |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in res["seeds"]:
        c, st, rel = s["training_cpu_s"], s["steps_trained"], s["relative_score"]
        r = s["within_group_r"] or {}
        rows.append(
            f"| {s['seed']} | {_f(c['wmrl'], 0)} / {_f(c['real'], 0)} | {st['wmrl']} / {st['real']} | "
            f"{_f(s['relative_before'])} / {_f(rel['wmrl'])} / {_f(rel['real'])} | {_ci(s['wmrl_minus_real'])} | "
            f"{_ci(s['wmrl_minus_copy'])} | {_ci(s['real_minus_copy'])} | {'yes' if s['rho_left_1'] else 'no'} | "
            f"{_f(s['calibration_mse']['raw'])} → {_f(s['calibration_mse']['calibrated'])} ({s['debias_map']}) | "
            f"{_f(r.get('r'), 2)} | {_r_ci(s.get('r_among_valid'))} |")
    p, r = res["pooled_wmrl_minus_real"], res["pooled_within_group_r"]
    rows.append("")
    rows.append(f"Pooled over seeds: WMRL − real = {_ci(p)} over {p['n_pairs'] if p else 0} (seed, task) pairs "
                f"(two-stage bootstrap); learned world model's within-group r over all seeds' anchor groups "
                f"{_f(r.get('r'), 2)} [{_f((r.get('r_ci') or [None])[0], 2)}, {_f((r.get('r_ci') or [None, None])[1], 2)}]"
                f" on {r.get('n_groups')} groups; among the valid programs {_r_ci(r.get('among_valid'))} on "
                f"{(r.get('among_valid') or {}).get('n_groups')} groups ({(r.get('among_valid') or {}).get('n_rollouts')} "
                f"rollouts){_validity_note(r)}.")
    return "\n".join(rows) + "\n"


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, s in enumerate(res["seeds"]):
        for arm, colour, name in (("wmrl", "C0", "WMRL"), ("real", "C1", "real-execution GRPO")):
            y, x = s["relative_score"][arm], s["training_cpu_s"][arm]
            if y is None or s["relative_before"] is None:
                continue
            # evaluated before and after training only: a dotted join, not a measured curve
            ax.plot([0, x], [s["relative_before"], y], ls=":", lw=1, color=colour, alpha=0.5)
            ax.plot([0, x], [s["relative_before"], y], ls="none", marker="o", color=colour, alpha=0.8,
                    label=name if i == 0 else None)
    ax.axhline(0.5, color="grey", ls="--", lw=1, label="copy the shown line (0.5)")
    ax.set_xlabel("training CPU-seconds (execution + world model + generation + update)")
    ax.set_ylabel("held-out relative score (test half)")
    ax.set_title(f"wmrl train, both arms at equal compute ({len(res['seeds'])} seeds)\n"
                 "(evaluated before and after training only)", fontsize=10)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", type=Path, help="finished two-arm run folders to copy in (seed from config.json)")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "results" / "main_job_arms_run")
    a = ap.parse_args(argv)
    for run in a.runs:
        seed = json.loads((run / "config.json").read_text())["seed"]
        copy_run(run, a.out_dir / f"seed{seed}")
    res = aggregate(a.out_dir)
    if not res["seeds"]:
        print(f"no finished seed in {a.out_dir}")
        return 1
    from wmrl_envs.utils import finite_or_none

    (a.out_dir / "main_job_arms.json").write_text(json.dumps(finite_or_none(res), indent=2, allow_nan=False) + "\n")
    (a.out_dir / "table.md").write_text(table(res))
    plot(res, a.out_dir / "arms.png")
    print(table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
