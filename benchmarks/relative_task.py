"""How far the line the prompt shows is from the board's best, against the test half's noise
(issue 36, item 1; :mod:`agents.train.relative`).

For every AutoResearch task (or ``--tasks``), under the active task secret, the starter's line, the
weakest board entry (``--baseline board-low``) and the board's best entry are run once (one host
process, :func:`agents.train.relative._run_lines`) and scored on the validation and test halves of
the test rows (:func:`agents.train.relative.split_masks`). The noise of the test half is the
bootstrap standard deviation over its rows of the paired metric difference best − shown
(``--n-boot`` resamples of the rows, seeded): the gap is "beatable by more than the noise" when
``gap / sd >= 2``. Figures per task: each line's metric on both halves, the gap in task units and as a
share of the shown line's metric, and gap / sd; and the relative score (:meth:`ReferenceLevels.score`)
the starter and the best entry get on the test half when board-low is shown.

Writes ``results/relative_task.json``. About 1-2 CPU-minutes for all 15 tasks.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    from agents.train.relative import ReferenceLevels, _run_lines, best_model_line, shown_model_line, split_masks
    from wmrl_envs.envs.autoresearch.grading import compute_metric
    from wmrl_envs.envs.autoresearch.secret import is_reference_secret
    from wmrl_envs.envs.autoresearch.taskdata import task_data
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="*", default=None, help="task ids (default: all 15)")
    ap.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples of the test half's rows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="results/relative_task.json")
    args = ap.parse_args(argv)
    ids = args.tasks or list_tasks()
    lines = {t: {"starter": shown_model_line(t, "starter"), "board_low": shown_model_line(t, "board-low"),
                 "best": best_model_line(t)[1]} for t in ids}
    t0 = time.perf_counter()
    preds = _run_lines([(t, list(lines[t].values())) for t in ids])
    run_s = time.perf_counter() - t0
    rng = np.random.default_rng(args.seed)
    rows = {}
    for t in ids:
        task = get_task(t)
        y = task_data(t).y_test.to_numpy()
        val, test = split_masks(t)
        p = dict(zip(lines[t], preds[t]))
        metric = {k: {"val": compute_metric(task.metric, y[val], v[val]), "test": compute_metric(task.metric, y[test], v[test])}
                  for k, v in p.items()}
        sign = 1.0 if task.higher_is_better else -1.0
        idx = np.flatnonzero(test)
        per = {}
        for shown in ("starter", "board_low"):
            diffs = []
            for _ in range(args.n_boot):
                b = rng.choice(idx, size=idx.size, replace=True)
                diffs.append(sign * (compute_metric(task.metric, y[b], p["best"][b])
                                     - compute_metric(task.metric, y[b], p[shown][b])))
            gap = sign * (metric["best"]["test"] - metric[shown]["test"])
            sd = float(np.std(diffs, ddof=1))
            per[shown] = {"gap_test": gap, "gap_share": gap / abs(metric[shown]["test"]) if metric[shown]["test"] else None,
                          "sd_test": sd, "gap_over_sd": gap / sd if sd > 0 else None}
        lv = ReferenceLevels(t, task.higher_is_better, lines[t]["board_low"], "best", lines[t]["best"],
                             metric["board_low"], metric["best"])
        rows[t] = {"metric": task.metric, "higher_is_better": task.higher_is_better, "n_val": int(val.sum()),
                   "n_test": int(test.sum()), "lines": lines[t], "metrics": metric, "vs_best": per,
                   "board_low_scores_test": {k: lv.score(metric[k]["test"], "test") for k in metric}}
        print(f"{t:18s} {task.metric:8s} starter {metric['starter']['test']:.4g} board-low {metric['board_low']['test']:.4g} "
              f"best {metric['best']['test']:.4g} | gap/sd starter {per['starter']['gap_over_sd']:.1f} "
              f"board-low {per['board_low']['gap_over_sd']:.1f}", flush=True)
    out = {"benchmark": "relative_task", "reference_secret": is_reference_secret(), "n_boot": args.n_boot,
           "seed": args.seed, "run_s": run_s, "tasks": rows,
           "min_gap_over_sd": {s: min(r["vs_best"][s]["gap_over_sd"] for r in rows.values()) for s in ("starter", "board_low")}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"min gap/sd: {out['min_gap_over_sd']}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
