"""Offline, predicted-before-observed within-group r of the headline run's world models on its own program distribution.

Why: in ``results/headline_run/`` (``wmrl bench``, grammar agent on AutoResearch) the curve of
``wmrl_learned`` flattens. One hypothesis is that its world model (a
:class:`~wmrl_envs.world_models.learned.LearnedWorldModel` learned online from the anchor groups)
tells failed programs from valid ones but ranks the *valid* programs poorly, and GRPO's
advantages live mostly in the valid programs' spread. This script measures it without executing
anything.

What: for each seed of ``results.json`` and each chosen method (default ``wmrl_learned``), each
evaluated step's held-out draws are re-sampled exactly as the bench's held-out evaluation drew
them (``GrammarBenchAgent(seed)``, ``restore(snapshot)``, ``reseed(1_000_003 + seed)``,
``sample(list_tasks("heldout"), eval_draws)``, as ``benchmarks/headline_diagnosis.py`` does) and
scored from the run's ``eval_cache.pkl``: one *pseudo-group* of ``eval_draws`` (8) programs per
held-out task and evaluated step, all sampled from one policy, with their real scores and statuses.
Two world models score them:

* ``learned``: a fresh world model as the bench builds it
  (:func:`agents.experiments.bench_agents.build_learned_world_model`, ``refit_every`` = the run's
  ``learned_refit_every``), fed the pseudo-groups in time order: every evaluated step's groups are
  *predicted before any of them is observed* (out of sample in time), then observed one by one
  (``observe`` refits when due). Out of sample in time is not out of sample in programs: the
  policy draws the same programs again at later steps, so many predicted draws repeat a (task,
  program) the model has already observed with its real score (on ``wmrl_learned``'s draws in the
  headline run, 63% of the scored draws are exact source repeats and 73% once the program's
  ``random_state=<int>`` is normalised, :func:`program_key`; 33% and 51% when learning from the
  first 4 draws of each group; on ``wmrl``'s draws 48% and 54%), and the model can have memorised
  them. The "repeats left out" figures drop those draws (normalised) and are the
  memorisation-free ones;
* ``embedding``: the frozen pre-fitted world model of ``wmrl`` / ``wm_only``
  (:func:`agents.experiments.bench_agents.build_world_model`, fitted on the shipped log of real
  executions of the *training* tasks; held-out tasks go to its head fitted on all of them).

Both are scored on the same groups: those of every evaluated step but a seed's first (the learned
model predicts that step with its cold-start constant, before any data). Reported per seed and
pooled over seeds: the pooled within-group r
(:func:`wmrl_envs.core.advisor_model.pooled_within_group_correlation`) of the raw world-model
scores with the real ones, overall and among the valid programs only (those whose grade status
is ``"valid"``: groups with >= 2 of them, centred among them; a world model that never varies
among them while the real scores do gets r = 0 in the bootstrap, as in
:func:`agents.train.summary.r_among_valid`), each also with the repeats left out; each with a
95% percentile *cluster* bootstrap CI (a held-out task's groups share programs across steps, so
per seed the bootstrap resamples held-out tasks, all of a task's groups together, and pooled
over seeds it resamples (seed, task) pairs); and the median with [min, max] over seeds.

Run (a few CPU-minutes on one core, most of it the sentence encoder and the learned head's fits):

    OMP_NUM_THREADS=1 python benchmarks/learned_wm_heldout_r.py [--methods wmrl_learned wmrl] [--no-embedding]

It writes ``results/learned_wm_heldout_r.json`` and ``.md`` (``--out``).

Caveats:

* held-out tasks, not the run's anchors: the run's learned model learned from *training*-task
  anchor groups of G = ``group_size`` (4), about one per step; here it learns from 8 held-out
  groups of 8 per *evaluated* step (a sparse, growing subset of the steps). Same policy
  snapshots, same head class and settings, different tasks and data volume and timing;
* offline, unbudgeted by default: in the run the learned model refitted only within its CPU
  budget (``cpu_share`` = 10% of the execution CPU-seconds, its ledger), so it may have refitted
  less often than here; ``--cpu-budget`` binds it to the cached grades' ``cpu_time_s`` of the
  groups observed so far (an approximation of that ledger);
* raw scores: the run trained on isotonically calibrated scores (``debias_map``); a monotone map
  leaves the ranking within a group almost unchanged but can flatten ties, so r on calibrated
  scores may differ somewhat;
* a draw missing from the cache (ungraded or timed out in the run) has no real score and is left
  out of its group (counted in ``draws_not_cached``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["PseudoGroup", "reconstruct_groups", "score_online", "program_key", "seen_before", "score_frozen",
           "within_group_record", "summarise_seeds", "main"]

EVAL_SEED_OFFSET = 1_000_003
"""The bench's held-out sampling seed is ``EVAL_SEED_OFFSET + seed``."""


@dataclass
class PseudoGroup:
    """The draws of one held-out task at one evaluated step, from one policy snapshot.

    Attributes:
        seed, step: the run's seed and the training step of the snapshot.
        task: the held-out task id (the world models' context).
        programs: the G sampled programs (Python source).
        scores: their real scores in [0, 1] (``None``: not in the cache).
        valid: whether each one's grade status is ``"valid"`` (False where not in the cache).
    """

    seed: int
    step: int
    task: str
    programs: list[str]
    scores: list[float | None]
    valid: list[bool]


def reconstruct_groups(snapshots: Sequence[Any], steps: Sequence[int], seed: int, tasks: Sequence[str],
                       cache: Mapping[tuple[str, str], Any], draws: int) -> tuple[list[list[PseudoGroup]], int]:
    """Re-sample the bench's held-out draws of each evaluated step and score them from the cache.

    Args:
        snapshots: the method's grammar-policy state dicts, one per step (``snapshots/seed<k>.pt``).
        steps: the evaluated steps (``curve["step"]``), increasing; steps without a snapshot are skipped.
        seed: the run's seed.
        tasks: the held-out task ids in the bench's order (the draws depend on it).
        cache: ``(task id, program) -> grade`` (``eval_cache.pkl``; a grade has ``score`` and ``status``).
        draws: programs per task (the run's ``eval_draws``).

    Returns:
        ``(per evaluated step: its len(tasks) groups, draws missing from the cache)``.
    """
    from agents.experiments.bench_agents import GrammarBenchAgent

    out: list[list[PseudoGroup]] = []
    missing = 0
    for step in steps:
        if not 0 <= int(step) < len(snapshots):
            continue
        agent = GrammarBenchAgent(seed)
        agent.restore(snapshots[int(step)])
        agent.reseed(EVAL_SEED_OFFSET + seed)
        actions, _ = agent.sample(list(tasks), draws)
        groups = []
        for task, programs in zip(tasks, actions):
            grades = [cache.get((task, p)) for p in programs]
            missing += sum(g is None for g in grades)
            groups.append(PseudoGroup(seed, int(step), str(task), list(programs),
                                      [None if g is None else float(g.score) for g in grades],
                                      [g is not None and g.status == "valid" for g in grades]))
        out.append(groups)
    return out, missing


def _scores(preds: Sequence[Any]) -> list[float]:
    return [float(getattr(p, "score", p)) for p in preds]


def score_online(steps: Sequence[Sequence[PseudoGroup]], model: Any,
                 observe_first: int | None = None) -> list[tuple[PseudoGroup, list[float], bool]]:
    """Feed the groups to an online world model in time order, each step predicted before it is observed.

    At each step every group is predicted (``model.predict([task] * G, programs)``) before any
    group of that step is observed (out of sample in time; a program drawn again at a later step
    has been observed, see :func:`seen_before`); then each is observed
    (``model.observe([task] * n, programs[:n], scores[:n], group_id=...)``, ``n`` =
    ``observe_first`` or G; missing scores are ``None``).

    Args:
        steps: per step (in time order), its groups.
        model: an object with ``predict(contexts, actions) -> G predictions`` (objects with ``score``,
            or numbers) and ``observe(contexts, actions, real_scores, group_id)``; ``fitted`` (bool,
            optional) says whether it has left its cold start.
        observe_first: learn from only the first this many draws of each group (a random subsample,
            the draws being i.i.d.; ``None``: all). Every draw is still predicted.

    Returns:
        Per group, in order: ``(group, its G predicted scores, whether the model was fitted when
        it predicted them)`` (``fitted`` is True when the model has no such attribute).
    """
    out = []
    gid = 0
    for groups in steps:
        fitted = bool(getattr(model, "fitted", True))
        preds = [_scores(model.predict([g.task] * len(g.programs), g.programs)) for g in groups]
        out += [(g, p, fitted) for g, p in zip(groups, preds)]
        for g in groups:
            n = len(g.programs) if observe_first is None else int(observe_first)
            model.observe([g.task] * len(g.programs[:n]), g.programs[:n], g.scores[:n], group_id=gid)
            gid += 1
    return out


RANDOM_STATE = re.compile(r"\brandom_state=\d+\b")
"""The grammar agent writes its estimators' random state as ``random_state=<int>`` (once or twice
per program, e.g. a ``PCA`` and the model); :func:`program_key` normalises it."""


def program_key(program: str) -> str:
    """The program's source with every ``random_state=<int>`` replaced by ``random_state=<seed>``.

    Programs that differ only in the random state score the same almost always (in the headline
    run's evaluation cache its 6,061 (task, program) entries collapse to 3,753 keys, 52 of them with
    differing scores), so an online model that has observed one has in effect observed the others.

    Example:
        >>> program_key("PCA(n_components=4, random_state=7), Tree(random_state=7)")
        'PCA(n_components=4, random_state=<seed>), Tree(random_state=<seed>)'
    """
    return RANDOM_STATE.sub("random_state=<seed>", program)


def seen_before(steps: Sequence[Sequence[PseudoGroup]], observe_first: int | None = None,
                normalise: bool = True) -> list[list[bool]]:
    """Per group (in :func:`score_online`'s order) and draw: whether the same task and program,
    with a real score, was observed at an earlier step by :func:`score_online` with this
    ``observe_first`` (a repeat the online model can have memorised; grades are deterministic).

    Args:
        steps: per step (in time order), its groups.
        observe_first: as :func:`score_online` (``None``: every draw of a group is observed).
        normalise: compare programs by :func:`program_key` (the source up to the random state;
            default) rather than by their exact source.

    Returns:
        Per group, a list of G booleans (True: a repeat). Draws of the same step never count as
        repeats of one another (the step is predicted before any of it is observed).
    """
    key = program_key if normalise else (lambda x: x)
    seen: set[tuple[str, str]] = set()
    out = []
    for groups in steps:
        out += [[(g.task, key(p)) in seen for p in g.programs] for g in groups]
        for g in groups:
            n = len(g.programs) if observe_first is None else int(observe_first)
            seen.update((g.task, key(p)) for p, s in zip(g.programs[:n], g.scores[:n]) if s is not None)
    return out


def score_frozen(groups: Sequence[PseudoGroup], model: Any) -> list[tuple[PseudoGroup, list[float], bool]]:
    """Score groups with a frozen world model (``model.predict(contexts, actions)``).

    Returns:
        Per group: ``(group, its G predicted scores, True)`` (as :func:`score_online`).
    """
    return [(g, _scores(model.predict([g.task] * len(g.programs), g.programs)), True) for g in groups]


def _cluster_bootstrap_r(wm: Sequence[np.ndarray], real: Sequence[np.ndarray], clusters: Sequence[Any],
                         n_boot: int, seed: int, level: float = 0.95) -> list[float]:
    """Percentile *cluster* bootstrap of the pooled within-group r.

    Each resample draws as many clusters as there are, with replacement, and takes every group of a
    drawn cluster (groups that share programs are not independent, so resampling them one by one
    would make the interval too narrow). Conventions of
    :func:`agents.train.summary.r_among_valid`: a resample whose world-model scores never vary
    within a group while the real ones do counts as r = 0; one whose real scores never vary is
    skipped.

    Args:
        wm, real: per group, the world-model and real scores (finite, equal lengths >= 2).
        clusters: per group, its cluster label (hashable).
        n_boot, seed, level: resamples, the generator's seed and the interval's coverage.

    Returns:
        ``[lo, hi]``; ``[NaN, NaN]`` with fewer than 20 usable resamples.
    """
    if not real or n_boot <= 0:
        return [float("nan"), float("nan")]
    index = {c: i for i, c in enumerate(dict.fromkeys(clusters))}
    k = len(index)
    mom = np.zeros((k, 5))  # per cluster: Σ d̃·r̃, Σ d̃², Σ r̃², any world-model spread, any real spread
    for w, r, c in zip(wm, real, clusters):
        x = np.column_stack([np.asarray(w, float), np.asarray(r, float)])
        x -= x.mean(axis=0)
        mom[index[c]] += [x[:, 0] @ x[:, 1], x[:, 0] @ x[:, 0], x[:, 1] @ x[:, 1],
                          float(np.ptp(w) > 1e-12), float(np.ptp(r) > 1e-12)]
    counts = np.random.default_rng(seed).multinomial(k, np.full(k, 1.0 / k), size=int(n_boot))
    sxy, sxx, syy, vw, vr = (counts @ mom).T
    use = vr > 0
    reps = np.where(vw > 0, sxy / np.sqrt(np.maximum(sxx * syy, 1e-300)), 0.0)[use]
    if reps.size < 20:
        return [float("nan"), float("nan")]
    return [float(v) for v in np.quantile(reps, [(1 - level) / 2, (1 + level) / 2])]


def _kept(pred: Sequence[Any], real: Sequence[Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """The draws with a finite prediction and a finite real score (``None``: fewer than 2)."""
    keep = [i for i, (w, r) in enumerate(zip(pred, real)) if r is not None and math.isfinite(r)
            and w is not None and math.isfinite(w)]
    if len(keep) < 2:
        return None
    return np.asarray([pred[i] for i in keep], float), np.asarray([real[i] for i in keep], float)


def within_group_record(scored: Sequence[tuple[PseudoGroup, list[float], bool]], n_boot: int = 1000,
                        seed: int = 0, drop: Sequence[Sequence[bool]] | None = None) -> dict[str, Any]:
    """Pooled within-group r of predicted vs real scores, overall and among valid programs.

    The intervals are percentile cluster bootstraps: a cluster is a group's ``(seed, task)``, so
    all the groups of one held-out task (which share programs across steps) are resampled
    together; within one seed that is resampling tasks, pooled over seeds resampling (seed, task)
    pairs.

    Args:
        scored: ``(group, G predicted scores, fitted)`` triples (:func:`score_online`,
            :func:`score_frozen`); every triple given is used (filter the cold ones first).
        n_boot, seed: the cluster bootstrap's resamples and seed (0 resamples: no interval).
        drop: per triple and draw, True to leave that draw out (e.g. :func:`seen_before`'s repeats).

    Returns:
        ``{"r", "r_ci": [lo, hi], "n_groups", "n_clusters", "n_rollouts", "world_model_varies",
        "among_valid"}``: ``r`` in [-1, 1] over the rollouts with a real score (groups of < 2
        scored rollouts drop out; NaN without any within-group spread of the real scores, or of
        either side; 0 when the world model never varies within a group while the real scores do).
        ``among_valid`` is the same record on the programs whose grade status is ``"valid"``
        (groups with >= 2 of them, centred among them), with ``r`` ``None`` when the world model
        never varies among them while the real scores do, NaN with < 2 such groups or no real
        spread. ``n_clusters`` counts the clusters of the groups kept; ``r_ci`` is ``[NaN, NaN]``
        where no interval can be drawn.

    Raises:
        ValueError: a group's predictions and programs differ in length, or ``drop`` has another length.
    """
    from wmrl_envs.core.advisor_model import pooled_within_group_correlation

    nan2 = [float("nan"), float("nan")]
    if drop is not None and len(drop) != len(scored):
        raise ValueError(f"{len(drop)} drop masks for {len(scored)} groups")
    wm_all, real_all, cl_all, wm_valid, real_valid, cl_valid = [], [], [], [], [], []
    for j, (g, pred, _) in enumerate(scored):
        if len(pred) != len(g.programs):
            raise ValueError(f"{g.task} step {g.step}: {len(pred)} predictions for {len(g.programs)} programs")
        out_ = drop[j] if drop is not None else [False] * len(g.programs)
        real = [None if d else s for s, d in zip(g.scores, out_)]
        for (w_out, r_out, c_out), reals in (((wm_all, real_all, cl_all), real),
                                             ((wm_valid, real_valid, cl_valid),
                                              [s if v else None for s, v in zip(real, g.valid)])):
            kept = _kept(pred, reals)
            if kept is not None:
                w_out.append(kept[0])
                r_out.append(kept[1])
                c_out.append((g.seed, g.task))

    r, n = pooled_within_group_correlation(wm_all, real_all) if wm_all else (float("nan"), 0)
    varies = any(bool(np.ptp(w) > 1e-12) for w in wm_all)
    if wm_all and not varies and any(bool(np.ptp(x) > 1e-12) for x in real_all):
        r = 0.0  # a world model that never varies within a group ranks nothing
    ci = _cluster_bootstrap_r(wm_all, real_all, cl_all, n_boot, seed) if n_boot and n >= 2 else nan2

    valid: dict[str, Any] = {"n_groups": len(real_valid), "n_clusters": len(set(cl_valid)),
                             "n_rollouts": int(sum(x.size for x in real_valid)),
                             "world_model_varies": any(bool(np.ptp(w) > 1e-12) for w in wm_valid)}
    if len(real_valid) < 2 or not any(bool(np.ptp(x) > 1e-12) for x in real_valid):
        valid.update(r=float("nan"), r_ci=nan2)
    elif not valid["world_model_varies"]:
        valid.update(r=None, r_ci=nan2)  # nothing ranked among the valid programs
    else:
        valid.update(r=float(pooled_within_group_correlation(wm_valid, real_valid)[0]),
                     r_ci=_cluster_bootstrap_r(wm_valid, real_valid, cl_valid, n_boot, seed) if n_boot else nan2)
    return {"r": r, "r_ci": ci, "n_groups": n, "n_clusters": len(set(cl_all)),
            "n_rollouts": int(sum(x.size for x in real_all)), "world_model_varies": varies, "among_valid": valid}


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and v is not None and math.isfinite(v) else None


def summarise_seeds(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Median and [min, max] over seeds of ``r`` and ``among_valid.r`` (seeds where it is not a
    finite number are left out and counted).

    Args:
        rows: per seed, a :func:`within_group_record`.

    Returns:
        ``{"r": {"median", "min", "max", "n_seeds"}, "r_among_valid": {...}}`` (``None`` values with no seed).
    """
    def stats(vals: list[float | None]) -> dict[str, Any]:
        v = [x for x in vals if x is not None]
        if not v:
            return {"median": None, "min": None, "max": None, "n_seeds": 0, "n_undefined": len(vals)}
        return {"median": float(np.median(v)), "min": float(min(v)), "max": float(max(v)), "n_seeds": len(v),
                "n_undefined": len(vals) - len(v)}

    return {"r": stats([_num(r["r"]) for r in rows]),
            "r_among_valid": stats([_num(r["among_valid"]["r"]) for r in rows])}


# ---------------------------------------------------------------------------------------------- CLI


def _fmt(v: Any, ci: Sequence[Any] | None = None) -> str:
    if v is None:
        return "none (flat)"
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        return "n/a"
    s = f"{v:.2f}"
    if ci and all(isinstance(c, (int, float)) and math.isfinite(c) for c in ci):
        s += f" [{ci[0]:.2f}, {ci[1]:.2f}]"
    return s


def _markdown(out: Mapping[str, Any]) -> str:
    obs = out.get("observe_first")
    lines = ["# Within-group r of the headline run's world models on its held-out draws (offline)", "",
             f"`benchmarks/learned_wm_heldout_r.py` on `{out['run_dir']}`. Pseudo-groups: the {out['eval_draws']} "
             f"held-out draws per task ({out['n_heldout_tasks']} tasks) at each evaluated step, re-sampled from the "
             "snapshots and scored from the run's evaluation cache. Raw world-model scores; r pooled within groups; "
             "95% percentile cluster-bootstrap CI: a seed's row resamples its held-out tasks (all of a task's groups, "
             "which share programs across steps, together), the pooled row resamples (seed, task) pairs; groups of "
             "every evaluated step but each seed's first (the learned model's cold start). `learned`: a fresh "
             "`build_learned_world_model` fed the groups in time order, each step predicted before any of it is "
             f"observed{' (CPU-budgeted)' if out['cpu_budget'] else ' (no CPU budget)'}, so out of sample in time "
             "but not in programs (they repeat across steps)"
             + (f"; `learned_obs{obs}`: the same, learning from only the first {obs} draws of each group (about the "
                "run's anchor rollouts per task)" if obs else "")
             + "; `embedding`: the frozen pre-fitted world model of `wmrl`/`wm_only`. Valid: grade status `valid`; "
             "groups with >= 2 valid programs. Repeats: predicted draws whose task and program, up to the "
             "program's `random_state=<int>` (which almost never changes the score), the learned model had already "
             "observed with its real score (in parentheses: exact source repeats only); the last column leaves them "
             "out, the memorisation-free figure (for `embedding`, frozen, the learned model's repeats are left out, "
             "for the same draws).", ""]
    for method, m in out["methods"].items():
        lines += [f"## Draws of `{method}`'s snapshots", "",
                  "| world model | seed | groups | r overall [CI] | groups (>= 2 valid) | r among valid [CI] | "
                  "repeats (exact) | r among valid, repeats left out [CI] |",
                  "|---|---|---|---|---|---|---|---|"]
        for wm_name, w in m["world_models"].items():
            for row in w["per_seed"] + [dict(w["pooled"], seed="pooled")]:
                v, u = row["among_valid"], row["unseen"]["among_valid"]
                lines.append(f"| {wm_name} | {row['seed']} | {row['n_groups']} | {_fmt(row['r'], row['r_ci'])} | "
                             f"{v['n_groups']} | {_fmt(v['r'], v['r_ci'])} | {row['repeat_share']:.0%} "
                             f"({row['exact_repeat_share']:.0%}) | "
                             f"{_fmt(u['r'], u['r_ci'])} ({u['n_groups']} groups) |")
            s = w["over_seeds"]

            def med(d: Mapping[str, Any]) -> str:
                return "n/a" if d["median"] is None else f"{d['median']:.2f} [{d['min']:.2f}, {d['max']:.2f}]"
            lines.append(f"| {wm_name} | median [min, max] over seeds | | {med(s['r'])} | | {med(s['r_among_valid'])} | "
                         f"| {med(s['unseen_r_among_valid'])} |")
        lines += ["", f"Draws not in the cache: {m['draws_not_cached']}; rollouts scored: "
                  f"{m['n_rollouts']} ({m['valid_share']:.0%} valid).", ""]
    lines += ["Caveats: held-out tasks and groups of 8 at each evaluated step, not the run's training-task anchor groups "
              "of 4 at every step; offline (the run's learned model also refitted only within its 10% CPU budget); raw, "
              "not isotonically calibrated, scores. CPU-seconds of this measurement: "
              f"{out['cpu_s']:.0f}.", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The CLI (see the module docstring). Returns the JSON written.

    Raises:
        SystemExit: a missing or malformed run directory, or an unknown method.
    """
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", type=Path, default=Path("results/headline_run"))
    ap.add_argument("--methods", nargs="+", default=["wmrl_learned"], help="whose snapshots' draws to score")
    ap.add_argument("--seeds", type=int, nargs="*", default=None, help="default: every seed in results.json")
    ap.add_argument("--no-embedding", action="store_true", help="skip the frozen embedding world model")
    ap.add_argument("--observe-first", type=int, default=None,
                    help="also run a learned model that learns from only the first N draws of each group")
    ap.add_argument("--cpu-budget", action="store_true",
                    help="bind the learned model's refit budget to the cached grades' cpu_time_s of the draws observed")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=Path("results/learned_wm_heldout_r.json"))
    args = ap.parse_args(argv)
    if args.observe_first is not None and args.observe_first < 1:
        ap.error(f"--observe-first must be >= 1, got {args.observe_first}")
    cpu0 = time.process_time()

    import torch

    from agents.experiments.bench_agents import build_learned_world_model, build_world_model
    from agents.experiments.bench_resume import load_eval_cache
    from wmrl_envs.envs.autoresearch.sentence_encoder import SentenceEncoder
    from wmrl_envs.envs.autoresearch.tasks import list_tasks

    torch.set_num_threads(1)
    try:
        res = json.loads((args.run_dir / "results.json").read_text())
        cfg, methods = res["config"], res["methods"]
    except (OSError, ValueError, KeyError) as err:
        ap.error(f"{args.run_dir}/results.json: not a readable wmrl bench results.json ({err})")
    if cfg.get("agent") != "grammar":
        ap.error(f"agent {cfg.get('agent')!r}: the snapshots this reads are the grammar agent's")
    for m in args.methods:
        if m not in methods:
            ap.error(f"method {m!r} is not in {sorted(methods)}")
    draws = int(cfg.get("eval_draws") or cfg.get("eval_k") or 1)
    refit_every = int(cfg.get("learned_refit_every") or 4)
    heldout = list_tasks("heldout")
    cache = load_eval_cache(args.run_dir)
    if not cache:
        ap.error(f"{args.run_dir}: no eval_cache.pkl; the draws cannot be scored without executing them")
    embedding = None
    if not args.no_embedding:
        embedding = build_world_model(argparse.Namespace(world_model="embedding", wm_information=0.0))
    variants: dict[str, int | None] = {"learned": None}
    if args.observe_first is not None:
        variants[f"learned_obs{args.observe_first}"] = args.observe_first
    out: dict[str, Any] = {"run_dir": str(args.run_dir), "eval_draws": draws, "n_heldout_tasks": len(heldout),
                           "learned_refit_every": refit_every, "cpu_budget": bool(args.cpu_budget),
                           "observe_first": args.observe_first, "n_boot": args.n_boot, "methods": {}}

    def budgeted(model: Any) -> Any:
        """Bind the model's refit budget to the cached CPU-seconds of the draws it observes."""
        spent = {"s": 0.0}
        orig = model.observe

        def observe(contexts: Sequence[Any], actions: Sequence[Any], real_scores: Sequence[Any],
                    group_id: int | None = None) -> bool:
            spent["s"] += sum(float(getattr(cache.get((c, a)), "cpu_time_s", None) or 0.0)
                              for c, a in zip(contexts, actions))
            return orig(contexts, actions, real_scores, group_id=group_id)

        model.observe = observe
        model.bind_execution_cost(lambda: spent["s"])
        return model

    for method in args.methods:
        seeds = [s for s in methods[method]["seeds"] if args.seeds is None or int(s["seed"]) in args.seeds]
        names = list(variants) + (["embedding"] if embedding is not None else [])
        per_wm: dict[str, list[dict[str, Any]]] = {k: [] for k in names}
        pooled: dict[str, list[Any]] = {k: [] for k in names}
        pooled_seen: dict[str, list[list[bool]]] = {k: [] for k in names}
        pooled_exact: dict[str, list[list[bool]]] = {k: [] for k in names}
        missing_total = n_roll = n_valid = 0
        for s in seeds:
            seed = int(s["seed"])
            snaps = torch.load(args.run_dir / "snapshots" / f"seed{seed}.pt", weights_only=True).get(method) or []
            steps, missing = reconstruct_groups(snaps, s["curve"]["step"], seed, heldout, cache, draws)
            missing_total += missing
            if len(steps) < 2:
                print(f"[heldout-r] {method} seed {seed}: {len(steps)} evaluated step(s) with a snapshot; left out")
                continue
            n_cold = len(steps[0])  # the first evaluated step: predicted before any data, left out
            scored: dict[str, list[Any]] = {}
            seen: dict[str, list[list[bool]]] = {}
            exact: dict[str, list[list[bool]]] = {}
            info: dict[str, dict[str, Any]] = {}
            for name, n_obs in variants.items():
                SentenceEncoder.clear_shared_caches()  # every model pays for its own embeddings, as in the bench
                model = build_learned_world_model(seed, refit_every=refit_every)
                if args.cpu_budget:
                    budgeted(model)
                t0 = time.process_time()
                online = score_online(steps, model, n_obs)
                info[name] = {"n_refits": model.n_refits, "n_selections": model.n_selections,
                              "head": model.head_name, "head_r": model.head_r,
                              "refits_deferred": model.refits_deferred, "rollouts_held": model.n_rollouts,
                              "unfitted_predictions_scored": sum(not x[2] for x in online[n_cold:]),
                              "cpu_s": round(time.process_time() - t0, 1)}
                scored[name] = online[n_cold:]
                seen[name] = seen_before(steps, n_obs)[n_cold:]
                exact[name] = seen_before(steps, n_obs, normalise=False)[n_cold:]
            groups = [x[0] for x in scored["learned"]]
            if embedding is not None:
                scored["embedding"] = score_frozen(groups, embedding)
                seen["embedding"] = seen["learned"]
                exact["embedding"] = exact["learned"]
            for k, rows in scored.items():
                rec = within_group_record(rows, args.n_boot, seed)
                rec["repeat_share"] = float(np.mean([x for m in seen[k] for x in m]))
                rec["exact_repeat_share"] = float(np.mean([x for m in exact[k] for x in m]))
                rec["unseen"] = within_group_record(rows, args.n_boot, seed, drop=seen[k])
                rec.update(seed=seed, evaluated_steps=len(steps), first_step_left_out=steps[0][0].step)
                if k in info:
                    rec["model"] = info[k]
                per_wm[k].append(rec)
                pooled[k] += rows
                pooled_seen[k] += seen[k]
                pooled_exact[k] += exact[k]
            n_roll += sum(sum(x is not None for x in g.scores) for g in groups)
            n_valid += sum(sum(g.valid) for g in groups)
            print(f"[heldout-r] {method} seed {seed}: {len(steps)} evaluated steps, {missing} draws not cached; "
                  + "; ".join(f"{k} r {_fmt(v[-1]['r'])}, among valid {_fmt(v[-1]['among_valid']['r'])} "
                              f"(unseen {_fmt(v[-1]['unseen']['among_valid']['r'])})" for k, v in per_wm.items()),
                  flush=True)
        wms = {}
        for k in names:
            p = within_group_record(pooled[k], args.n_boot, 0)
            p["repeat_share"] = float(np.mean([x for m in pooled_seen[k] for x in m])) if pooled_seen[k] else float("nan")
            p["exact_repeat_share"] = (float(np.mean([x for m in pooled_exact[k] for x in m])) if pooled_exact[k]
                                       else float("nan"))
            p["unseen"] = within_group_record(pooled[k], args.n_boot, 0, drop=pooled_seen[k])
            over = summarise_seeds(per_wm[k])
            over["unseen_r_among_valid"] = summarise_seeds([r["unseen"] for r in per_wm[k]])["r_among_valid"]
            wms[k] = {"per_seed": per_wm[k], "over_seeds": over, "pooled": p}
        out["methods"][method] = {"draws_not_cached": missing_total, "n_rollouts": n_roll,
                                  "valid_share": n_valid / max(n_roll, 1), "world_models": wms}
    out["cpu_s"] = time.process_time() - cpu0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, default=float))
    args.out.with_suffix(".md").write_text(_markdown(out))
    print(f"[heldout-r] wrote {args.out} and {args.out.with_suffix('.md')} ({out['cpu_s']:.0f} CPU-s)")
    return out


if __name__ == "__main__":
    main()
