"""Exploration in the main job's WMRL arm, setting against setting (issue 36, item 2).

Reads ``wmrl train`` run folders (a run stopped part-way counts with the steps it logged and no
held-out figures) (the WMRL arm; ``--arms wmrl`` runs or two-arm runs),
each under a label (``LABEL=RUN_DIR``), copies their light files (``config.json``,
``metrics.jsonl``, ``summary.json``, ``summary.md``) into ``--out-dir/<label>/``, and writes
``exploration.json`` and ``table.md``: per run, the distinct lines each group sampled at every step
(``distinct_lines`` in ``metrics.jsonl``: 1 is a collapse onto one line), the per-token entropy of
the trained rows, the entropy coefficient in force, and the held-out result (the relative
test-half score, the policy against copying the shown line with its t-interval, avg@k) with the
training CPU-seconds. Runs of one seed share every setting but the one named in the label, so
their rows are the setting's effect on that seed (the policy's sampling is deterministic on the
CPU: a rerun of committed seed 0 matched it exactly).

    .venv/bin/python benchmarks/main_job_exploration.py \\
        base-seed4=results/main_job_arms_run/seed4 T1.0-seed4=runs/ex-D --out-dir results/main_job_exploration
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LIGHT_FILES = ("config.json", "metrics.jsonl", "summary.json", "summary.md")


def run_figures(d: Path) -> dict[str, Any]:
    """One run's exploration and held-out figures (see the module docstring)."""
    cfg = json.loads((d / "config.json").read_text())
    s = json.loads((d / "summary.json").read_text()) if (d / "summary.json").exists() else {}
    steps = [r for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines()) if "distinct_lines" in r]
    lines = [r["distinct_lines"] for r in steps]
    last = [x for r in lines[-3:] for x in (r or [])]
    after = (s.get("copy_baseline") or {}).get("after") or {}
    if after.get("per_task"):  # today's Student-t interval over tasks (runs before it carry a bootstrap CI)
        from agents.train.relative import SCORE_AT_SHOWN, mean_t_interval

        after = {**after, "difference_ci": mean_t_interval(np.asarray(list(after["per_task"].values())) - SCORE_AT_SHOWN)}
    return {
        "seed": cfg["seed"], "temperature": cfg["temperature"], "kl_coef": cfg["kl_coef"],
        "entropy_coef": cfg["entropy_coef"], "entropy_floor": cfg.get("entropy_floor"),
        "steps": len(steps), "group_size": cfg["group_size"], "finished": bool(s),
        "distinct_lines": lines,
        "distinct_lines_last3_mean": float(np.mean(last)) if last else None,
        "groups_collapsed_last3": int(sum(1 for x in last if x == 1)), "groups_last3": len(last),
        "entropy": [r.get("entropy") for r in steps],
        "entropy_coef_in_force": [r.get("entropy_coef") for r in steps],
        "reward_mean": [r.get("reward_mean") for r in steps],
        "training_cpu_s": s.get("training_cpu_s"),
        "relative_score_after": after.get("policy_score"),
        "minus_copy": after.get("difference"), "minus_copy_ci": after.get("difference_ci"),
        "share_tasks_beaten": after.get("share_tasks_beaten"),
        "avg_at_k_after": (s.get("heldout_after") or {}).get("overall"),
    }


def _f(v: Any, nd: int = 3) -> str:
    return "—" if v is None else f"{v:.{nd}f}"


def table(res: dict[str, Any]) -> str:
    """``table.md``: one row per run."""
    out = ["| run | seed | T | KL β | entropy coef | distinct lines, last 3 steps (mean; groups at 1) | entropy, last step | "
           "held-out relative score | − copy [95% CI] | avg@k | training CPU-s | distinct lines per group, mean by step |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, r in res["runs"].items():
        ci = r["minus_copy_ci"]
        ci_txt = f"{_f(r['minus_copy'])} [{_f(ci[0])}, {_f(ci[1])}]" if ci else _f(r["minus_copy"])
        ent = next((e for e in reversed(r["entropy"]) if e is not None), None)
        label = label if r["finished"] else f"{label} (stopped after {r['steps']} steps)"
        out.append(f"| {label} | {r['seed']} | {r['temperature']} | {r['kl_coef']} | {r['entropy_coef']}"
                   f"{' (floor ' + str(r['entropy_floor']) + ')' if r['entropy_floor'] else ''} | "
                   f"{_f(r['distinct_lines_last3_mean'], 2)}; {r['groups_collapsed_last3']} of {r['groups_last3']} | "
                   f"{_f(ent)} | {_f(r['relative_score_after'])} | {ci_txt} | {_f(r['avg_at_k_after'], 1)} | "
                   f"{_f(r['training_cpu_s'], 0)} | "
                   + " ".join(f"{np.mean(x):.1f}" if x else "—" for x in r["distinct_lines"]) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", help="LABEL=RUN_DIR of finished wmrl train runs (their WMRL arm) to copy in")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "results" / "main_job_exploration")
    a = ap.parse_args(argv)
    for spec in a.runs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not Path(path).is_dir():
            ap.error(f"expected LABEL=RUN_DIR with an existing folder, got {spec!r}")
        if not (Path(path) / "metrics.jsonl").exists():
            ap.error(f"{path} holds no trained step (no metrics.jsonl)")
        (a.out_dir / label).mkdir(parents=True, exist_ok=True)
        for name in LIGHT_FILES:
            if (Path(path) / name).exists():
                shutil.copy2(Path(path) / name, a.out_dir / label / name)
    labels = sorted(p.name for p in a.out_dir.iterdir() if (p / "metrics.jsonl").exists()) if a.out_dir.is_dir() else []
    if not labels:
        print(f"no finished run in {a.out_dir}")
        return 1
    from wmrl_envs.utils import finite_or_none

    res = {"runs": {label: run_figures(a.out_dir / label) for label in labels}}
    (a.out_dir / "exploration.json").write_text(json.dumps(finite_or_none(res), indent=2, allow_nan=False) + "\n")
    (a.out_dir / "table.md").write_text(table(res))
    print(table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
