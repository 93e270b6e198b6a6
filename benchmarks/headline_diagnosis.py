"""Why the headline run's denoising never acts and its learned world model's curve flattens
(issue 35), and how many groups carry no gradient: three measurements on a ``wmrl bench`` run's committed output, no execution.

1. **ρ's warm-up, from the step records.** Inverse-variance denoising keeps ρ = 1 until
   ``warmup_groups`` anchor groups have *counted* (:class:`wmrl_envs.core.denoise.InverseVarianceDenoiser`):
   a group counts only once the debiaser has its first fit and only when its real scores vary
   (a group whose G rollouts score the same has no ``s²``). Before the warm-up ends nothing but a
   counted group moves the pooled disagreement ``s̄²`` (a learned model's ρ recalibration needs
   the warm-up to have ended), and a counted group moves it unless its ``s²`` equals ``s̄²``
   exactly, which happens when ``s̄²`` is exactly 1 and the group's calibrated scores are equal
   (a flat map or a constant world model: ``s² = 1``). So the steps where the logged
   ``disagreement_ema`` changes are the steps whose anchor group counted, and the steps where it
   stays at exactly 1.0 may have counted too: the count is given as a range. Per method and seed
   (one anchor group per step): anchor groups, groups before ``s̄²``'s first value (the debiaser's
   first fit), groups that counted, the last step with one, against ``warmup_groups``.
2. **Collapse within groups, from the policy snapshots.** Every step's grammar-policy snapshot is
   in ``snapshots/seed<k>.pt``. At the evaluated steps of each method's curve, the snapshot samples
   ``--draws`` groups of G programs on every training task (its own generator, seeded the same for
   every snapshot, so the run's state is untouched and snapshots are compared on paired draws)
   and counts the groups whose G programs make the same grammar choices (the rollout's random
   state aside). With this run's GRPO (one epoch, so the PPO ratio is 1; no KL or entropy term)
   such a group teaches nothing whatever its scores: its G rollouts have the same
   log-probability gradient, and their advantages sum to zero within the group. Its real
   scores are also equal as a rule (608 of the 629 held-out programs in the run's evaluation
   cache that differ from another only in their random state score the same), so it cannot count
   towards ρ's warm-up either.

3. **Groups without real spread, from the held-out evaluations.** A group whose G real scores are
   all equal has zero advantages: it gives GRPO no gradient whatever its programs, and at one
   group per step (``real_anchor_batch``) such a step trains nothing. The held-out evaluation of an
   evaluated step sampled ``eval_draws`` programs per held-out task from that step's snapshot with
   the bench's evaluation seed (``1_000_003 + seed``) and stored every graded outcome in the run's
   evaluation cache (``eval_cache.pkl``). The same draws are sampled again here and their scores
   read back from the cache (nothing is executed); per task, the share of the G-subsets of those
   draws whose scores are all equal estimates the chance that a group of G has no real spread
   (an unbiased U-statistic), averaged over the held-out tasks. It is measured on held-out tasks,
   not on the training tasks the groups were trained on (no training outcome is stored; the
   policy trains on those and may converge faster there, so the training groups' share is likely
   higher). Per method and seed it is averaged over the steps before the run first reached the
   report's target (``--gain-fraction`` of real GRPO's gain, 0.9 by default: the crossing step
   interpolated between evaluated steps as the report interpolates compute) and over all its
   steps, linear between evaluated steps. This tests the cause ``docs/advisor_check.md`` proposed
   for the advisor's miss at one group per step.

Run (about 5 CPU-s per seed)::

    .venv/bin/python benchmarks/headline_diagnosis.py --run-dir results/headline_run \\
        --out results/headline_run/diagnosis.json

Writes the JSON, ``diagnosis.md`` (the tables) and ``diagnosis.png`` (share of collapsed groups,
held-out score and share of groups without real spread against step, one line per method and
seed) beside it.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Sequence

__all__ = ["counted_anchor_groups", "collapsed_share", "equal_score_share", "no_spread_share", "mean_over_steps",
           "step_to_target", "collapse_at_steps", "main"]


def counted_anchor_groups(records: Sequence[dict[str, Any]]) -> dict[str, list[int]]:
    """Which steps' anchor groups entered ρ's pooled disagreement ``s̄²`` (one anchor group per step).

    Args:
        records: a method run's step records (``results.json``'s ``records``), each with ``step``
            and ``disagreement_ema`` (float, or ``None`` before the first counted group).

    Returns:
        ``{"counted": steps, "maybe": steps, "before": steps}``: the steps at which
        ``disagreement_ema`` took a new value (the first defined value included: those groups
        counted); the steps at which it stayed at exactly 1.0 (a counted group with equal calibrated
        scores leaves it there, a skipped one too); and the steps before its first value. Exact
        before ρ's warm-up ends (module docstring); after it a learned model's recalibration also
        moves ``s̄²``.
    """
    out: dict[str, list[int]] = {"counted": [], "maybe": [], "before": []}
    prev = None
    for rec in records:
        ema, step = rec.get("disagreement_ema"), int(rec["step"])
        if ema is None:
            if prev is None:
                out["before"].append(step)
        elif ema != prev:
            out["counted"].append(step)
        elif ema == 1.0:
            out["maybe"].append(step)
        prev = ema
    return out


def collapsed_share(snapshot: dict[str, Any], seed: int, tasks: Sequence[str], group_size: int, draws: int,
                    sample_seed: int = 12345) -> tuple[float, float]:
    """Share of groups whose programs all make the same grammar choices, and mean distinct
    choice-sets per group, for one grammar-policy snapshot.

    Args:
        snapshot: a :class:`agents.grammar.policy.GrammarPolicy` state dict.
        seed: the run's seed (builds the policy the snapshot is loaded into).
        tasks: training task ids; each gets ``draws`` groups.
        group_size: G.
        draws: groups per task (>= 1).
        sample_seed: the sampling generator's seed (the same for every snapshot: paired).

    Returns:
        ``(share of groups with one distinct program, mean distinct programs per group)``.

    Raises:
        ValueError: no tasks, ``draws < 1`` or ``group_size < 1``.
    """
    from agents.grammar.policy import GrammarPolicy

    if not tasks or draws < 1 or group_size < 1:
        raise ValueError(f"need tasks, draws >= 1 and group_size >= 1, got {len(tasks)} tasks, draws={draws}, "
                         f"group_size={group_size}")

    policy = GrammarPolicy(seed=seed)
    policy.load_state_dict(snapshot)
    policy.generator.manual_seed(int(sample_seed))
    groups = policy.sample(list(tasks) * int(draws), group_size)
    distinct = [len({(p.slot_ids, p.option_ids) for p in g}) for g in groups]
    return sum(d == 1 for d in distinct) / len(distinct), sum(distinct) / len(distinct)


def equal_score_share(scores: Sequence[float], group_size: int) -> float | None:
    """The chance that ``group_size`` draws taken without replacement from ``scores`` all score the
    same: the share of the ``group_size``-subsets of ``scores`` whose values are equal (an unbiased
    estimate, from ``len(scores)`` i.i.d. draws, of the chance that a group of that size has no
    spread). Scores are compared to 9 decimals.

    Returns:
        The share in [0, 1]; ``None`` when there are fewer scores than ``group_size``.

    Raises:
        ValueError: ``group_size < 2``.

    Example:
        >>> equal_score_share([0.5, 0.5, 0.5, 0.9], 2)  # 3 of the 6 pairs are equal
        0.5
    """
    import math
    from collections import Counter

    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 (a group of one always lacks spread), got {group_size}")
    if len(scores) < group_size:
        return None
    counts = Counter(round(float(x), 9) for x in scores)
    return sum(math.comb(n, group_size) for n in counts.values()) / math.comb(len(scores), group_size)


def no_spread_share(snapshot: dict[str, Any], seed: int, tasks: Sequence[str], cache: dict[tuple[str, str], Any],
                    draws: int, group_size: int, eval_seed: int) -> tuple[float | None, int]:
    """The held-out evaluation's draws of one snapshot, re-sampled and scored from the run's
    evaluation cache: the mean over tasks of :func:`equal_score_share`.

    Args:
        snapshot: a :class:`agents.grammar.policy.GrammarPolicy` state dict.
        seed: the run's seed (builds the agent the snapshot is loaded into).
        tasks: the held-out task ids, in the bench's order (the draws depend on it).
        cache: ``(task id, program) -> grade`` (the run's ``eval_cache.pkl``; a grade has ``score``).
        draws: programs per task (the run's ``eval_draws``).
        group_size: G.
        eval_seed: the sampling seed the bench evaluated with (``1_000_003 + seed``).

    Returns:
        ``(share or None when no task has G cached draws, draws missing from the cache)``. A draw
        is missing when its outcome was ungraded or timed out (neither is cached).
    """
    from agents.experiments.bench_agents import GrammarBenchAgent

    agent = GrammarBenchAgent(seed)
    agent.restore(snapshot)
    agent.reseed(eval_seed)
    actions, _ = agent.sample(list(tasks), draws)
    shares, missing = [], 0
    for task, programs in zip(tasks, actions):
        scores = []
        for program in programs:
            grade = cache.get((task, program))
            if grade is None:
                missing += 1
            else:
                scores.append(float(grade.score))
        share = equal_score_share(scores, group_size)
        if share is not None:
            shares.append(share)
    return (sum(shares) / len(shares) if shares else None), missing


def mean_over_steps(points: Sequence[tuple[int, float]], last: int) -> float | None:
    """The mean of a quantity over the steps ``0..last - 1`` of a run, linear between the
    evaluated steps ``points`` (``(step, value)``, steps increasing) and flat beyond them.

    Example:
        >>> mean_over_steps([(0, 0.0), (4, 0.4)], 5)  # steps 0..4: 0, 0.1, 0.2, 0.3, 0.4
        0.2
    """
    import numpy as np

    if not points or last < 1:
        return None
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return float(np.mean(np.interp(np.arange(last), xs, ys)))


def step_to_target(steps: Sequence[int], scores: Sequence[float], target: float) -> float | None:
    """The training step at which a curve first reaches ``target``: linear between the evaluated
    step before and the first evaluated step at or above it (as
    :func:`agents.experiments.speedup.compute_to_target` interpolates compute).

    Returns:
        The step (float); ``None`` when no evaluated step reaches the target.

    Example:
        >>> step_to_target([0, 4, 8], [30.0, 50.0, 70.0], 60.0)
        6.0
    """
    from agents.experiments.speedup import Curve, compute_to_target

    at = compute_to_target(Curve([float(x) for x in steps], [float(x) for x in scores]), float(target))
    return None if math.isinf(at) else at


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", type=Path, default=Path("results/headline_run"),
                    help="a wmrl bench --out-dir with results.json and snapshots/")
    ap.add_argument("--out", type=Path, default=None, help="JSON output (default RUN_DIR/diagnosis.json)")
    ap.add_argument("--draws", type=int, default=8, help="groups sampled per training task at each evaluated step")
    ap.add_argument("--gain-fraction", type=float, default=0.9,
                    help="the target, as a share of real GRPO's gain (the report's headline: 0.9), up to which the "
                         "share of groups without real spread is averaged")
    args = ap.parse_args(argv)
    if args.draws < 1:
        ap.error(f"--draws must be >= 1, got {args.draws}")
    results_path = args.run_dir / "results.json"
    if not results_path.is_file():
        ap.error(f"{results_path} is missing: pass the --out-dir of a wmrl bench run")
    import torch

    from agents.experiments.bench_config import BENCH_METHODS
    from agents.experiments.bench_report import real_target
    from agents.experiments.bench_resume import load_eval_cache
    from wmrl_envs.envs.autoresearch.tasks import list_tasks

    try:
        res = json.loads(results_path.read_text())
        cfg, methods = res["config"], res["methods"]
        warmup = int(cfg["correction"]["warmup_groups"])
    except (ValueError, KeyError, TypeError) as err:
        ap.error(f"{results_path} is not a wmrl bench results.json ({type(err).__name__}: {err})")
    if cfg.get("agent") != "grammar":
        ap.error(f"{results_path}: agent {cfg.get('agent')!r}; the snapshots this reads are the grammar agent's")
    group_size = int(cfg["group_size"])
    try:
        target = real_target(res, steps=int(cfg["steps"]), gain_fraction=args.gain_fraction)[0] if "real" in methods else None
    except ValueError:  # real GRPO did not improve, or a real seed lacks step 0 / S
        target = None
    tasks = list_tasks("train")
    heldout = list_tasks("heldout")
    cache = load_eval_cache(args.run_dir)  # {} when the run kept none: no spread measurement then
    eval_draws = int(cfg.get("eval_draws") or cfg.get("eval_k") or 1)
    out: dict[str, Any] = {"run_dir": str(args.run_dir), "warmup_groups": warmup, "group_size": group_size,
                           "draws_per_task": args.draws, "train_tasks": len(tasks), "heldout_tasks": len(heldout),
                           "eval_draws": eval_draws, "eval_cache_entries": len(cache), "gain_fraction": args.gain_fraction,
                           "target": target, "methods": {}}
    snapshot_files: dict[int, dict[str, Any]] = {}
    for name, entry in methods.items():
        per_seed = []
        for s in entry["seeds"]:
            seed, records = int(s["seed"]), s["records"]
            row: dict[str, Any] = {"seed": seed, "steps": len(records), "stopped": s.get("stopped")}
            spec = BENCH_METHODS.get(name)
            if records and spec is not None and spec.denoise:
                steps = counted_anchor_groups(records)
                row.update(anchor_groups=int(records[-1]["anchor_groups"]), before_first_fit=len(steps["before"]),
                           counted_groups=len(steps["counted"]), maybe_counted=len(steps["maybe"]),
                           last_counted_step=steps["counted"][-1] if steps["counted"] else None,
                           rho_max=max(float(r["rho"]) for r in records))
            snap_path = args.run_dir / "snapshots" / f"seed{seed}.pt"
            if seed not in snapshot_files and snap_path.is_file():
                snapshot_files[seed] = torch.load(snap_path, weights_only=True)
            if seed in snapshot_files:
                snaps = snapshot_files[seed].get(name)
                if snaps:
                    curve = s["curve"]
                    pts = []
                    for step, score in zip(curve["step"], curve["score"]):
                        if 0 <= int(step) < len(snaps):
                            share, distinct = collapsed_share(snaps[int(step)], seed, tasks, group_size, args.draws)
                            pt = {"step": int(step), "heldout": float(score), "collapsed_share": share,
                                  "distinct_per_group": distinct}
                            if cache and eval_draws >= group_size:
                                pt["equal_scores_share"], pt["draws_not_cached"] = no_spread_share(
                                    snaps[int(step)], seed, heldout, cache, eval_draws, group_size, 1_000_003 + seed)
                            pts.append(pt)
                    row["collapse"] = pts
                    spread = [(p["step"], p["equal_scores_share"]) for p in pts if p.get("equal_scores_share") is not None]
                    row["equal_scores_mean_over_steps"] = mean_over_steps(spread, len(records))
                    cross = step_to_target(curve["step"], curve["score"], target) if target is not None else None
                    row["target_step"] = cross
                    row["equal_scores_mean_to_target"] = (mean_over_steps(spread, max(1, math.ceil(cross)))
                                                          if cross is not None else None)
            per_seed.append(row)
            print(f"[diagnosis] {name} seed {seed}: " + ", ".join(
                f"{k}={row[k]}" for k in ("steps", "anchor_groups", "counted_groups", "maybe_counted", "last_counted_step")
                if k in row)
                + (f", collapsed at last step {row['collapse'][-1]['collapsed_share']:.2f}" if row.get("collapse") else "")
                + (f", equal real scores {row['equal_scores_mean_over_steps']:.2f} over its steps"
                   if row.get("equal_scores_mean_over_steps") is not None else ""),
                flush=True)
        out["methods"][name] = per_seed
    out_path = args.out or (args.run_dir / "diagnosis.json")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=1))
    _write_markdown(out, out_path.with_suffix(".md"))
    _plot(out, out_path.with_suffix(".png"))
    print(f"[diagnosis] wrote {out_path}, {out_path.with_suffix('.md')}, {out_path.with_suffix('.png')}")
    return out


def _write_markdown(out: dict[str, Any], path: Path) -> None:
    lines = [f"# Headline run: ρ's warm-up and collapse within groups ({out['run_dir']})", "",
             "`benchmarks/headline_diagnosis.py`. Anchor groups that counted toward ρ's warm-up "
             f"(needs {out['warmup_groups']}), per seed:", "",
             "| method | seed | steps | anchor groups | before the debiaser's first fit | counted | "
             "last step with a counted group | max ρ |",
             "|---|---|---|---|---|---|---|---|"]
    for name, rows in out["methods"].items():
        for r in rows:
            if "counted_groups" in r:
                counted = (f"{r['counted_groups']}" if not r["maybe_counted"]
                           else f"{r['counted_groups']}–{r['counted_groups'] + r['maybe_counted']}")
                lines.append(f"| `{name}` | {r['seed']} | {r['steps']} | {r['anchor_groups']} | {r['before_first_fit']} | "
                             f"{counted} | {r['last_counted_step']} | {r['rho_max']:.2f} |")
    lines += ["", "Counted: the steps where the logged s̄² moved; a range where s̄² sat at exactly 1.0, which a "
              "counted group with equal calibrated scores leaves unchanged. The other anchor groups after the first "
              "fit had real scores that did not vary (or fewer than 2 graded rollouts: see the run's ungraded counts)."]
    lines += ["", f"Groups of G = {out['group_size']} whose programs are all the same (sampled from the snapshot, "
              f"{out['draws_per_task']} groups on each of {out['train_tasks']} training tasks), first and last "
              "evaluated step, per seed (held-out score in brackets):", "",
              "| method | seed | first step | last step | collapsed share, first → last | distinct per group, first → last |",
              "|---|---|---|---|---|---|"]
    for name, rows in out["methods"].items():
        for r in rows:
            pts = r.get("collapse") or []
            if pts:
                a, b = pts[0], pts[-1]
                lines.append(f"| `{name}` | {r['seed']} | {a['step']} ({a['heldout']:.1f}) | {b['step']} ({b['heldout']:.1f}) | "
                             f"{a['collapsed_share']:.2f} → {b['collapsed_share']:.2f} | "
                             f"{a['distinct_per_group']:.2f} → {b['distinct_per_group']:.2f} |")
    eq = collapse_at_steps(out)
    ks = list(next(iter(eq.values())).keys()) if eq else []
    lines += ["", "At equal training steps (collapsed share at the last evaluated step at or before k, median over the "
              "seeds whose run lasted at least 0.8·k steps; n seeds):", "",
              "| method | " + " | ".join(f"step {k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for name, row in eq.items():
        lines.append(f"| `{name}` | " + " | ".join("—" if row[k] is None else f"{row[k][0]:.2f} ({row[k][1]})" for k in ks)
                     + " |")
    rows_spread = {name: [r for r in rows if r.get("equal_scores_mean_over_steps") is not None]
                   for name, rows in out["methods"].items()}
    if any(rows_spread.values()):
        import statistics

        lines += ["", f"Groups of G = {out['group_size']} whose real scores are all equal (no advantage, no gradient), "
                  f"estimated from the held-out evaluations' {out['eval_draws']} draws per task on "
                  f"{out['heldout_tasks']} held-out tasks, scored from the run's evaluation cache (held-out tasks: "
                  "the training tasks' share is likely higher). Mean over each run's steps before it first reached "
                  + (f"the {out['gain_fraction']:.0%} target ({out['target']:.1f}; seeds that reached it)"
                     if out.get("target") is not None else "the target (none: no real GRPO target)")
                  + ", over all its steps (linear between evaluated steps), and at its last evaluated step; "
                  "median [min, max] over seeds:", "",
                  "| method | seeds | to the target | over all its steps | at the last step |",
                  "|---|---|---|---|---|"]

        def cell(vals: list[float]) -> str:
            return f"{statistics.median(vals):.2f} [{min(vals):.2f}, {max(vals):.2f}] ({len(vals)})" if vals else "—"

        for name, rows in rows_spread.items():
            if not rows:
                continue
            means = [r["equal_scores_mean_over_steps"] for r in rows]
            to_target = [r["equal_scores_mean_to_target"] for r in rows if r.get("equal_scores_mean_to_target") is not None]
            lasts = [p["equal_scores_share"] for r in rows for p in r["collapse"][-1:]
                     if p.get("equal_scores_share") is not None]
            lines.append(f"| `{name}` | {len(rows)} | {cell(to_target)} | {cell(means)} | {cell(lasts)} |")
        eq = collapse_at_steps(out, key="equal_scores_share")
        lines += ["", "Equal real scores at equal training steps (as above, median over seeds; n seeds):", "",
                  "| method | " + " | ".join(f"step {k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
        for name, row in eq.items():
            lines.append(f"| `{name}` | " + " | ".join("—" if row[k] is None else f"{row[k][0]:.2f} ({row[k][1]})"
                                                        for k in ks) + " |")
    path.write_text("\n".join(lines) + "\n")


def collapse_at_steps(out: dict[str, Any], steps: Sequence[int] = (10, 20, 30, 50, 80),
                      key: str = "collapsed_share") -> dict[str, dict[int, Any]]:
    """A share at equal training steps: per method and step k, the median over seeds of the share
    ``key`` (``"collapsed_share"`` or ``"equal_scores_share"``) at the last evaluated step at or
    before k, over the seeds whose run lasted at least 0.8·k steps (``None`` when none did).

    Returns:
        ``{method: {k: (median share, seeds) or None}}``.
    """
    import statistics

    table: dict[str, dict[int, Any]] = {}
    for name, rows in out["methods"].items():
        table[name] = {}
        for k in steps:
            vals = []
            for r in rows:
                pts = [p for p in r.get("collapse") or [] if p["step"] <= k and p.get(key) is not None]
                if pts and r["collapse"][-1]["step"] >= 0.8 * k:
                    vals.append(pts[-1][key])
            table[name][k] = (statistics.median(vals), len(vals)) if vals else None
    return table


def _plot(out: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    for name, rows in out["methods"].items():
        for i, r in enumerate(rows):
            pts = r.get("collapse") or []
            if not pts:
                continue
            steps = [p["step"] for p in pts]
            kw = {"label": name} if i == 0 else {}
            color = {"real": "C0", "real_mid_batch": "C1", "real_anchor_batch": "C2", "wm_only": "C3",
                     "wmrl": "C4", "wmrl_learned": "C5"}.get(name, "k")
            axes[0].plot(steps, [p["collapsed_share"] for p in pts], color=color, alpha=0.7, **kw)
            axes[1].plot(steps, [p["heldout"] for p in pts], color=color, alpha=0.7, **kw)
            spread = [(p["step"], p["equal_scores_share"]) for p in pts if p.get("equal_scores_share") is not None]
            if spread:
                axes[2].plot(*zip(*spread), color=color, alpha=0.7, **kw)
    axes[0].set(xlabel="training step", ylabel="share of groups with one distinct program", xscale="symlog")
    axes[1].set(xlabel="training step", ylabel="held-out score", xscale="symlog")
    axes[2].set(xlabel="training step", ylabel="share of groups with equal real scores (held-out)", xscale="symlog")
    axes[0].legend(fontsize=8)
    fig.suptitle("Collapse within groups, held-out score and groups without real spread, one line per seed")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
