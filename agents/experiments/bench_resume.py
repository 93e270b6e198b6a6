"""Resuming and reusing ``wmrl bench`` runs: which methods an earlier finished run can give
(:func:`reused_entries`), where a stopped run continues (:func:`resumed_state`), every step's
policy snapshots per seed (:func:`save_snapshots`, :func:`restore_seed`), and the methods a seed
has finished before the run was stopped (:func:`save_partial_seed`, :func:`load_partial_seed`:
a seed of the headline run takes hours, longer than one sitting)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from .bench_config import BenchConfig
from .bench_report import restore_nonfinite
from .bench_run import MethodRun, StepRecord

__all__ = ["reused_entries", "resumed_state", "restore_seed", "save_snapshots", "settings_differ", "load_eval_cache",
           "save_eval_cache", "EVAL_CACHE_FILE", "save_partial_seed", "load_partial_seed", "drop_partial_seed",
           "partial_seed_wall_clock"]

EVAL_CACHE_FILE = "eval_cache.pkl"
"""The held-out evaluation cache of a run, in its ``out_dir``: ``{(task id, program source): grade}``."""


# settings that must be equal for a method's earlier run to stand in for a new one (what it
# learns, how it is charged, how it is evaluated, when it stops); refine_evals / out_dir may differ
_REUSE_MUST_MATCH = ("steps", "max_steps_factor", "stop_gain", "check_factor", "groups_per_step", "group_size", "agent", "model", "world_model",
                     "wm_information", "world_model_timeout_s", "eval_k", "eval_draws", "exec_parallel", "lr",
                     "kl_coef", "clip_eps", "num_iterations", "correction", "sandbox", "target_gain",
                     "learned_refit_every", "execution_cost_model")


_WORLD_MODEL_SETTINGS = ("world_model", "wm_information", "world_model_timeout_s", "correction", "max_steps_factor",
                         "learned_refit_every")
"""Settings that change no real-GRPO run (so --reuse-from of real GRPO alone may differ in them)."""


def settings_differ(cfg: BenchConfig, earlier: dict[str, Any], keys: Sequence[str]) -> list[str]:
    """``"key: here X, there Y"`` for each of ``keys`` whose value in ``cfg`` differs from the
    earlier run's config. A nested setting (the correction) is compared field by field; a field
    the earlier run did not record yet (added since) counts as equal when it has its default."""
    mine = json.loads(json.dumps(asdict(cfg), default=float))
    defaults = json.loads(json.dumps(asdict(BenchConfig()), default=float))
    out = []
    for k in keys:
        a, b = mine.get(k), earlier.get(k)
        if k not in earlier and a == defaults.get(k):
            continue  # a setting added since, left at its default
        if isinstance(a, dict) and isinstance(b, dict):
            b = {**{f: v for f, v in a.items() if f not in b and v == defaults[k].get(f)}, **b}
        if a != b:
            out.append(f"{k}: here {a!r}, there {b!r}")
    return out


def reused_entries(cfg: BenchConfig) -> dict[str, list[dict[str, Any]]]:
    """The per-seed entries of the methods ``cfg.reuse_from`` holds and ``cfg.methods`` asks for.

    Returns:
        ``{method: [entry of seed 0, ..., entry of seed cfg.seeds - 1]}`` (empty without
        ``reuse_from``); each entry is the earlier run's, as written to its ``results.json``
        (curve, records, snapshots chosen, held-out results).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: it is not a ``wmrl bench`` results file; a setting of :data:`_REUSE_MUST_MATCH`
            differs (each is named with both values); its task data came from another task secret;
            it has fewer seeds than ``cfg.seeds``; or it holds none of ``cfg.methods``.
    """
    if cfg.reuse_from is None:
        return {}
    path = Path(cfg.reuse_from)
    if not path.is_file():
        raise FileNotFoundError(f"--reuse-from {path}: no such file (give the results.json of an earlier wmrl bench run)")
    ref = restore_nonfinite(json.loads(path.read_text()))
    if not isinstance(ref, dict) or "config" not in ref or "methods" not in ref:
        raise ValueError(f"--reuse-from {path}: not a wmrl bench results.json (no 'config' and 'methods')")
    if "speedup" not in ref:
        raise ValueError(f"--reuse-from {path}: that run did not finish (no refinement pass, no headline); finish it "
                         "with wmrl bench --resume first, so that the curves read from it are refined like this run's")
    wanted = [m for m in cfg.methods if m in ref.get("methods", {})
              and (cfg.reuse_methods is None or m in cfg.reuse_methods)]
    if not wanted:
        raise ValueError(f"--reuse-from {path}: it holds none of the methods asked for ({list(cfg.methods)}"
                         + ("" if cfg.reuse_methods is None else f", --reuse-methods {list(cfg.reuse_methods)}")
                         + f"; it has {list(ref['methods'])})")
    # real GRPO uses neither the world model nor the corrections: reusing it alone allows other ones
    keys = [k for k in _REUSE_MUST_MATCH if k not in _WORLD_MODEL_SETTINGS] if wanted == ["real"] else _REUSE_MUST_MATCH
    diff = settings_differ(cfg, ref["config"], keys)
    if diff:
        raise ValueError(f"--reuse-from {path}: the earlier run was made with other settings, so its methods "
                         f"cannot stand in for this run's ({'; '.join(diff)}); run with the same settings or "
                         "without --reuse-from")
    from wmrl_envs.envs.autoresearch.secret import secret_fingerprint

    if ref.get("task_secret", {}).get("fingerprint") != secret_fingerprint():
        raise ValueError(f"--reuse-from {path}: its task data came from another task secret (fingerprint "
                         f"{ref.get('task_secret', {}).get('fingerprint')!r}, here {secret_fingerprint()!r}); set "
                         "WMRL_TASK_SECRET as for that run, or run without --reuse-from")
    if int(ref["config"].get("seeds", 0)) < cfg.seeds:
        raise ValueError(f"--reuse-from {path}: it has {ref['config'].get('seeds')} seeds, this run asks for "
                         f"{cfg.seeds}; pass --seeds {ref['config'].get('seeds')} or fewer")
    out = {m: list(ref["methods"][m]["seeds"][: cfg.seeds]) for m in wanted}
    short = [m for m, e in out.items() if len(e) < cfg.seeds]
    if short:
        raise ValueError(f"--reuse-from {path}: methods {short} have fewer than {cfg.seeds} seeds there (was it "
                         "stopped early?); pass fewer --seeds")
    return out


def resumed_state(cfg: BenchConfig, order: Sequence[str]) -> tuple[int, dict[str, Any] | None]:
    """What ``--resume`` continues from: ``(finished seeds, the earlier results)``.

    A seed is finished when every method of ``order`` has its entry in ``out_dir/results.json``
    (seeds finish in order). Without ``cfg.resume`` or without a results file: ``(0, None)``.
    Every setting must be the earlier run's except ``refine_evals`` and ``max_bracket_share``:
    on a finished run, ``--resume`` with them only evaluates more saved snapshots near each
    curve's target crossing (the refinement) and rewrites the report.

    Raises:
        ValueError: the earlier run was made with other settings (each named with both values),
            other methods, another task secret, or more seeds than ``cfg.seeds``.
    """
    path = Path(cfg.out_dir) / "results.json"
    if not cfg.resume or not path.is_file():
        return 0, None
    try:
        prior = restore_nonfinite(json.loads(path.read_text()))
        prior["config"], prior["methods"]  # noqa: B018 - a wmrl bench results file has both
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"--resume {cfg.out_dir}: {path} is not a readable wmrl bench results.json "
                         f"({type(exc).__name__}: {exc})") from None
    # refine_evals and max_bracket_share may differ: the refinement runs at the end of every
    # invocation over every seed with saved snapshots, so a resumed (or finished) run is refined
    # with the new settings throughout
    keys = (*_REUSE_MUST_MATCH, "reuse_from", "reuse_methods", "eval_cache", "max_ungraded_share")
    diff = settings_differ(cfg, prior["config"], keys)
    if sorted(prior["methods"]) != sorted(order):
        diff.append(f"methods: here {sorted(order)}, there {sorted(prior['methods'])}")
    if diff:
        raise ValueError(f"--resume {cfg.out_dir}: the run there was made with other settings ({'; '.join(diff)}); "
                         "resume with its settings, or start a new run in another --out-dir")
    from wmrl_envs.envs.autoresearch.secret import secret_fingerprint

    if prior.get("task_secret", {}).get("fingerprint") != secret_fingerprint():
        raise ValueError(f"--resume {cfg.out_dir}: that run's task data came from another task secret; set "
                         "WMRL_TASK_SECRET as for that run")
    done = min(len(prior["methods"][m]["seeds"]) for m in order)
    if done > cfg.seeds:
        raise ValueError(f"--resume {cfg.out_dir}: it has {done} finished seeds, more than --seeds {cfg.seeds}")
    return done, prior


def restore_seed(out_dir: Path, seed: int, entries: dict[str, dict[str, Any]]
                  ) -> tuple[dict[str, MethodRun], dict[str, dict[int, dict[str, Any]]]] | None:
    """A finished seed's runs (records and, from ``snapshots/seed<k>.pt``, snapshots) and its
    evaluated points, for the refinement; ``None`` when its snapshots were not saved."""
    import torch

    path = out_dir / "snapshots" / f"seed{seed}.pt"
    if not path.is_file():
        return None
    snaps = torch.load(path, weights_only=True)
    runs, evaluated = {}, {}
    for name, e in entries.items():
        if name not in snaps:  # a method read with --reuse-from: refined in its own run
            continue
        fields = set(StepRecord.__dataclass_fields__)
        runs[name] = MethodRun(name, seed, [StepRecord(**{k: v for k, v in r.items() if k in fields}) for r in e["records"]],
                               snapshots=list(snaps[name]), stopped=e["stopped"], ungraded=e.get("ungraded", {}))
        evaluated[name] = {int(st): {"overall": sc} for st, sc in zip(e["curve"]["step"], e["curve"]["score"])}
    return runs, evaluated


def save_snapshots(out_dir: Path, seed: int, runs: dict[str, MethodRun]) -> None:
    """``snapshots/seed<k>.pt``: every step's policy snapshot of each method run of this seed, so
    that ``--resume`` can still refine the seed's curves."""
    import torch

    folder = out_dir / "snapshots"
    folder.mkdir(exist_ok=True)
    tmp = folder / f"seed{seed}.pt.tmp"
    torch.save({name: list(run.snapshots) for name, run in runs.items()}, tmp)
    tmp.replace(folder / f"seed{seed}.pt")


def save_eval_cache(out_dir: Path, cache: dict[tuple[str, str], Any]) -> None:
    """Write the held-out evaluation cache to ``out_dir/eval_cache.pkl`` (atomically), so that a
    ``--resume`` part does not execute again a (task, program) an earlier part executed (issue 35,
    item 5). Only graded outcomes that are not time-outs are in it (:func:`evaluate_snapshot`)."""
    import pickle

    tmp = out_dir / (EVAL_CACHE_FILE + ".tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(dict(cache), fh, protocol=pickle.HIGHEST_PROTOCOL)
    tmp.replace(out_dir / EVAL_CACHE_FILE)


def load_eval_cache(out_dir: Path) -> dict[tuple[str, str], Any]:
    """The held-out evaluation cache an earlier part of this run saved (:func:`save_eval_cache`);
    an empty dict when there is none (a run from before the cache was kept, or a new run). The
    file is this run's own output, read back by the same code that wrote it."""
    import pickle

    path = Path(out_dir) / EVAL_CACHE_FILE
    if not path.is_file():
        return {}
    with open(path, "rb") as fh:
        return dict(pickle.load(fh))


def _partial_path(out_dir: Path, seed: int) -> Path:
    return Path(out_dir) / "partial" / f"seed{seed}.pkl"


def save_partial_seed(out_dir: Path, seed: int, config: dict[str, Any], runs: dict[str, MethodRun],
                      evaluated: dict[str, dict[int, dict[str, Any]]], budget_real: float | None,
                      stop_target: float | None, wall_clock_s: float | None = None) -> None:
    """``partial/seed<k>.pkl`` (atomically): the methods of seed ``seed`` finished so far — each
    one's step records, snapshots, stop reason, ungraded counts and evaluated points — with real
    GRPO's budget and the seed's stop target, so that ``--resume`` continues the seed at its next
    method instead of its first (:func:`load_partial_seed`).

    Args:
        config: the run's ``results["config"]`` (checked against the resuming run's settings).
        runs, evaluated: the finished methods' :class:`MethodRun` and ``{step: evaluation}``.
        budget_real, stop_target: as the bench's seed loop holds them.
        wall_clock_s: the run's wall-clock so far, seconds, earlier parts included
            (:func:`partial_seed_wall_clock`; ``results.json`` is written only when a seed ends).
    """
    import pickle

    path = _partial_path(out_dir, seed)
    path.parent.mkdir(exist_ok=True)
    payload = {"seed": seed, "config": json.loads(json.dumps(config, default=float)),
               "budget_real": budget_real, "stop_target": stop_target, "wall_clock_s": wall_clock_s,
               "methods": {name: {"records": [asdict(r) for r in run.records], "snapshots": list(run.snapshots),
                                  "stopped": run.stopped, "ungraded": run.ungraded, "evaluated": evaluated[name]}
                           for name, run in runs.items()}}
    tmp = path.with_suffix(".pkl.tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(payload, fh, protocol=pickle.HIGHEST_PROTOCOL)
    tmp.replace(path)


def load_partial_seed(cfg: BenchConfig, seed: int
                      ) -> tuple[dict[str, MethodRun], dict[str, dict[int, dict[str, Any]]], float | None, float | None] | None:
    """What :func:`save_partial_seed` kept of seed ``seed`` in ``cfg.out_dir``: ``(runs, evaluated,
    budget_real, stop_target)``; ``None`` without ``cfg.resume`` or without a file.

    Raises:
        ValueError: the file was written by a run with other settings (each named).
    """
    import pickle

    path = _partial_path(Path(cfg.out_dir), seed)
    if not cfg.resume or not path.is_file():
        return None
    with open(path, "rb") as fh:  # this run's own file (written by save_partial_seed)
        payload = pickle.load(fh)  # noqa: S301
    keys = (*_REUSE_MUST_MATCH, "reuse_from", "reuse_methods", "eval_cache", "max_ungraded_share")
    diff = settings_differ(cfg, payload["config"], keys)
    if diff:
        raise ValueError(f"--resume {cfg.out_dir}: {path} (seed {seed}'s finished methods) was written with other "
                         f"settings ({'; '.join(diff)}); resume with its settings, or delete it to run the seed again")
    fields = set(StepRecord.__dataclass_fields__)
    runs, evaluated = {}, {}
    for name, m in payload["methods"].items():
        runs[name] = MethodRun(name, seed, [StepRecord(**{k: v for k, v in r.items() if k in fields}) for r in m["records"]],
                               snapshots=list(m["snapshots"]), stopped=m["stopped"], ungraded=m["ungraded"])
        evaluated[name] = {int(k): v for k, v in m["evaluated"].items()}
    return runs, evaluated, payload["budget_real"], payload["stop_target"]


def partial_seed_wall_clock(out_dir: Path, seed: int) -> float | None:
    """The run's wall-clock (seconds, earlier parts included) when seed ``seed``'s last finished
    method was saved (:func:`save_partial_seed`), so that a part stopped inside a seed still counts
    the time of the methods it finished; ``None`` without a partial file or for one written before
    this was recorded."""
    import pickle

    path = _partial_path(Path(out_dir), seed)
    if not path.is_file():
        return None
    with open(path, "rb") as fh:  # this run's own file (written by save_partial_seed)
        value = pickle.load(fh).get("wall_clock_s")  # noqa: S301
    return None if value is None else float(value)


def drop_partial_seed(out_dir: Path, seed: int) -> None:
    """Remove seed ``seed``'s partial file once the seed is in ``results.json``."""
    _partial_path(Path(out_dir), seed).unlink(missing_ok=True)
