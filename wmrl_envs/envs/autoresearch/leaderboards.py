"""The per-task reference leaderboards a valid submission is ranked on.

A leaderboard is the metric values of the task's :data:`REFERENCE_SOLUTIONS`, each the task's
full starter script with its model line, run on the task's data and graded like an agent's
solution (:func:`~.grading.grade_execution`), so it belongs to one task
secret (``docs/autoresearch.md``, "Leaderboards"): for the reference secret it is shipped as
``leaderboards.json`` next to this module (:data:`LEADERBOARD_PATH`, rebuilt with
``WMRL_TASK_SECRET=wmrl-reference python -m wmrl_envs.envs.autoresearch.leaderboards``); for
any other secret it is built on first use per task and cached beside the secret
(:func:`ensure_leaderboard`, :func:`leaderboard_cache_dir`). :func:`get_leaderboard` picks the
right one.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import json
import os
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from wmrl_envs.envs.autoresearch.grading import SOLUTION_FILE
from wmrl_envs.envs.autoresearch.running import EXEC_ENV
from wmrl_envs.envs.autoresearch.secret import (
    REFERENCE_SECRET,
    SECRET_ENV_VAR,
    is_reference_secret,
    secret_dir,
    secret_fingerprint,
    task_secret,
)
from wmrl_envs.envs.autoresearch.taskdata import task_data, write_public_files
from wmrl_envs.envs.autoresearch.tasks import TaskSpec, get_task, list_tasks
from wmrl_envs.utils import write_json_atomic
from wmrl_envs.sandbox.base import ExecutionResult, Sandbox, SandboxLimits
from wmrl_envs.sandbox.jobdirs import OwnedFolder

__all__ = [
    "REFERENCE_SOLUTIONS",
    "LEADERBOARD_PATH",
    "load_leaderboards",
    "get_leaderboard",
    "ensure_leaderboard",
    "leaderboard_cache_dir",
    "build_leaderboards",
    "main",
]

LEADERBOARD_PATH = Path(__file__).with_name("leaderboards.json")
"""The shipped leaderboards (JSON)."""

REFERENCE_SOLUTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "classification": (
        ("logistic", "model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300))"),
        ("knn", "model = make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=25))"),
        ("decision_tree", "model = DecisionTreeClassifier(max_depth=10, min_samples_leaf=20, random_state=0)"),
        ("random_forest", "model = RandomForestClassifier(random_state=0)"),
        ("extra_trees", "model = ExtraTreesClassifier(random_state=0)"),
        ("gradient_boosting", "model = HistGradientBoostingClassifier(random_state=0)"),
        ("gradient_boosting_slow", "model = HistGradientBoostingClassifier(learning_rate=0.05, max_iter=200, random_state=0)"),
        (
            "gradient_boosting_small_trees",
            "model = HistGradientBoostingClassifier(max_iter=200, max_leaf_nodes=15, l2_regularization=1.0, random_state=0)",
        ),
    ),
    "regression": (
        ("ridge", "model = make_pipeline(StandardScaler(), Ridge(alpha=1.0))"),
        ("knn", "model = make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors=25))"),
        ("decision_tree", "model = DecisionTreeRegressor(max_depth=10, min_samples_leaf=20, random_state=0)"),
        ("random_forest", "model = RandomForestRegressor(max_features=0.3, random_state=0)"),
        ("extra_trees", "model = ExtraTreesRegressor(max_features=0.6, random_state=0)"),
        ("gradient_boosting", "model = HistGradientBoostingRegressor(random_state=0)"),
        ("gradient_boosting_slow", "model = HistGradientBoostingRegressor(learning_rate=0.05, max_iter=200, random_state=0)"),
        (
            "gradient_boosting_small_trees",
            "model = HistGradientBoostingRegressor(max_iter=200, max_leaf_nodes=15, l2_regularization=1.0, random_state=0)",
        ),
    ),
}
"""Reference solutions per problem type: ``(name, model_line)`` pairs, roughly weak to strong. Each is
run as :meth:`TaskSpec.starter_code_with(model_line) <TaskSpec.starter_code_with>`; the
starter's own line is the weakest (``logistic`` / ``ridge``). The board is a competitive one: a
trivial model (majority class, a stump) would beat no entry, a default random forest or
gradient boosting model sits in the middle, and the top entries are tuned gradient boosting
models, so a position near 1 needs the right family *and* hyper-parameters for the task (the
design that gives the AutoResearch benchmark room to learn, ``benchmarks/bench_design.py``).
The forest and boosting entries are programs of :mod:`agents.grammar`'s grammar (up to the
random state), so the top is reachable."""


class _HostRunner(Sandbox):
    """Runs *trusted* reference scripts with the host Python (no isolation, for leaderboards)."""

    name = "host"
    isolates = False

    def run_python(self, source, workdir, *, limits=None, env=None, filename=SOLUTION_FILE):  # noqa: D102
        workdir = Path(workdir)
        if not workdir.is_dir():
            raise FileNotFoundError(workdir)
        (workdir / filename).write_text(source)
        lim = limits or self.limits
        full_env = {k: v for k, v in os.environ.items() if k != SECRET_ENV_VAR}
        full_env.update(env or {})
        t0 = time.perf_counter()
        try:
            p = subprocess.run(
                [sys.executable, filename], cwd=workdir, env=full_env, capture_output=True, text=True,
                timeout=lim.wall_time_s,
            )
            return ExecutionResult(p.returncode, p.stdout, p.stderr, time.perf_counter() - t0, backend=self.name)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            return ExecutionResult(None, out, err, time.perf_counter() - t0, timed_out=True, backend=self.name)


@functools.lru_cache(maxsize=4)
def _load_leaderboards_cached(path: str, mtime: float) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_leaderboards(path: str | Path | None = None) -> dict:
    """Load a leaderboards JSON file (cached while the file is unchanged).

    Args:
        path: the file; ``None`` for the shipped :data:`LEADERBOARD_PATH`.

    Returns:
        ``{"version": 2, "created": ..., "secret_fingerprint": ..., "environment": {...},
        "tasks": {task_id: {"metric", "higher_is_better", "category", "data_digest",
        "entries": [{"name", "model_line", "metric_value", "runtime_s"}, ...]}}}``
        (``secret_fingerprint``: :func:`~wmrl_envs.envs.autoresearch.secret.secret_fingerprint`
        of the secret the data were drawn with; ``data_digest``: :attr:`TaskData.digest`).
        Treat it as read-only.

    Raises:
        FileNotFoundError: the file does not exist (build it with :func:`build_leaderboards`).
    """
    p = Path(path) if path is not None else LEADERBOARD_PATH
    if not p.is_file():
        raise FileNotFoundError(
            f"leaderboard file {p} not found; build it with "
            "`python -m wmrl_envs.envs.autoresearch.leaderboards --out <path>`"
        )
    return _load_leaderboards_cached(str(p.resolve()), p.stat().st_mtime)


def get_leaderboard(task_id: str, path: str | Path | None = None) -> list[float]:
    """Reference metric values of one task on the data of the active task secret.

    Positions are ranks against these values, so they must come from the same data the agent's
    submission is graded on:

    * ``path`` given: that file's board (it must not record another secret or other data);
    * reference secret (``WMRL_TASK_SECRET=wmrl-reference``): the shipped
      :data:`LEADERBOARD_PATH`;
    * any other secret: this installation's board (:func:`ensure_leaderboard`), built on first
      use by running the task's reference solutions on the host (about 10-40 s per task on
      one core, progress on stderr) and cached beside the secret.

    Returns:
        The values (task units), in reference-solution order.

    Raises:
        ValueError: unknown task id; the task is missing from the file at ``path`` or from the
            shipped file; or the file at ``path`` was built for another secret / other data.
        FileNotFoundError: ``path`` or the shipped file does not exist.
        RuntimeError: a reference solution failed while building a board.
    """
    task = get_task(task_id)  # validates the id
    if path is None and not is_reference_secret():
        return ensure_leaderboard(task.task_id)
    board = load_leaderboards(path)
    shown = path or LEADERBOARD_PATH
    if task.task_id not in board["tasks"]:
        raise ValueError(
            f"task {task.task_id!r} has no leaderboard in {shown}; rebuild it with "
            f"`{SECRET_ENV_VAR}={REFERENCE_SECRET} python -m wmrl_envs.envs.autoresearch.leaderboards --tasks {task.task_id}`"
            if path is None else f"task {task.task_id!r} has no leaderboard in {shown}; build it with build_leaderboards()"
        )
    entry = board["tasks"][task.task_id]
    why = _board_mismatch(board, entry, task.task_id)
    if why:
        if path is not None:
            raise ValueError(f"the leaderboard of task {task.task_id!r} in {shown} {why}; rebuild it with build_leaderboards()")
        if task.task_id not in _STALE_WARNED:
            _STALE_WARNED.add(task.task_id)
            warnings.warn(
                f"the shipped leaderboard of task {task.task_id!r} {why} (another numpy / scikit-learn "
                f"version?): positions may be slightly off; rebuild it with "
                f"`{SECRET_ENV_VAR}={REFERENCE_SECRET} python -m wmrl_envs.envs.autoresearch.leaderboards --tasks {task.task_id}`",
                stacklevel=2,
            )
    return [float(e["metric_value"]) for e in entry["entries"]]


_STALE_WARNED: set[str] = set()


def _board_mismatch(board: Mapping, entry: Mapping, task_id: str) -> str:
    """Why a board does not belong to the active secret's data of ``task_id`` ("" when it does)."""
    fp = board.get("secret_fingerprint")
    if fp is not None and fp != secret_fingerprint():
        return f"was built for another task secret (fingerprint {fp}, active {secret_fingerprint()})"
    digest = entry.get("data_digest")
    if digest is not None and digest != task_data(task_id).digest:
        return "was computed on other data than this installation generates"
    return ""


def leaderboard_cache_dir() -> Path:
    """Folder of this installation's leaderboards for the active (non-reference) secret:
    ``secret_dir() / "leaderboards" / <secret fingerprint>`` (one JSON file per task)."""
    return secret_dir() / "leaderboards" / secret_fingerprint()


def _lazy_jobs() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def ensure_leaderboard(task_id: str, *, n_jobs: int | None = None, verbose: bool = True) -> list[float]:
    """This installation's leaderboard of one task under the active secret, built on first use.

    The board is read from :func:`leaderboard_cache_dir` ``/<task_id>.json``; when that file is
    missing or belongs to other data, the task's :data:`REFERENCE_SOLUTIONS` are run once with
    :func:`build_leaderboards` (a file lock makes concurrent processes wait for one build).

    Args:
        task_id: the task.
        n_jobs: parallel executions of the build (default: up to 4, at most the CPU count).
        verbose: print the build's progress to stderr.

    Returns:
        The reference metric values (task units), in reference-solution order.

    Raises:
        ValueError: unknown task id, or the active secret is the reference one (its board is
            the shipped file, :func:`get_leaderboard`).
        RuntimeError: a reference solution failed.
    """
    task = get_task(task_id)
    if is_reference_secret():
        raise ValueError("the reference secret's leaderboards are the shipped file; use get_leaderboard()")
    folder = leaderboard_cache_dir()
    path = folder / f"{task.task_id}.json"

    def cached() -> list[float] | None:
        if not path.is_file():
            return None
        try:
            board = load_leaderboards(path)
        except (OSError, json.JSONDecodeError):
            return None
        entry = board.get("tasks", {}).get(task.task_id)
        if entry is None or _board_mismatch(board, entry, task.task_id) or "data_digest" not in entry:
            return None
        return [float(e["metric_value"]) for e in entry["entries"]]

    values = cached()
    if values is not None:
        return values
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(folder / f"{task.task_id}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it: wait for it
        values = cached()
        if values is not None:
            return values
        n = len(REFERENCE_SOLUTIONS[task.problem_type])
        if verbose:
            print(
                f"[leaderboard] task {task.task_id!r}: no reference leaderboard yet for this installation's "
                f"task secret; running its {n} reference solutions once (a few to tens of seconds), cached in {folder}",
                file=sys.stderr, flush=True,
            )
        t0 = time.perf_counter()
        build_leaderboards([task.task_id], path=path, n_jobs=n_jobs or _lazy_jobs(), verbose=verbose)
        if verbose:
            print(f"[leaderboard] task {task.task_id!r}: built in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr, flush=True)
    values = cached()
    if values is None:  # pragma: no cover - build_leaderboards wrote the file just now
        raise RuntimeError(f"the leaderboard of task {task.task_id!r} could not be read back from {path}")
    return values


REFERENCE_DRIVER_FILE = "reference_solutions.py"
"""The file name of the program that runs one batch of a task's reference solutions."""

_MARK = "@@wmrl-reference "
_DRIVER = '''"""Runs reference solutions one after another in this interpreter (imports paid once)."""
import gc, json, os, sys, time, traceback
for _i, _name, _source in json.loads({batch!r}):
    _ns = {{"__name__": "__main__", "__file__": os.path.abspath("solution.py"), "__builtins__": __builtins__}}
    _t0 = time.perf_counter()
    try:
        exec(compile(_source, "solution.py", "exec", dont_inherit=True), _ns)
    except BaseException:
        traceback.print_exc()
        print(f"{mark}" + json.dumps({{"index": _i, "failed": True}}), flush=True)
        sys.exit(1)
    _wall = time.perf_counter() - _t0
    os.makedirs(f"ref-{{_i}}")
    if os.path.exists("submission.csv"):
        os.replace("submission.csv", os.path.join(f"ref-{{_i}}", "submission.csv"))
    print(f"{mark}" + json.dumps({{"index": _i, "wall_s": _wall}}), flush=True)
    del _ns
    gc.collect()
'''


def _expected_runtime(task_id: str, name: str) -> float:
    """Seconds one reference solution took in the shipped board (the data's size and the model
    do not depend on the secret, so this ranks the costs of any secret's build); 1.0 if unknown."""
    try:
        entries = load_leaderboards()["tasks"][task_id]["entries"]
    except (OSError, KeyError, json.JSONDecodeError):
        return 1.0
    return next((float(e.get("runtime_s") or 1.0) for e in entries if e["name"] == name), 1.0)


def _split_references(task: TaskSpec, n: int) -> list[list[tuple[int, str, str]]]:
    """The task's reference solutions ``(index, name, model_line)`` in at most ``n`` batches of
    about equal expected runtime (longest first onto the least loaded batch), each in index order."""
    refs = list(enumerate(REFERENCE_SOLUTIONS[task.problem_type]))
    bins: list[tuple[float, list[tuple[int, str, str]]]] = [(0.0, []) for _ in range(max(1, min(n, len(refs))))]
    for i, (name, line) in sorted(refs, key=lambda r: -_expected_runtime(task.task_id, r[1][0])):
        k = min(range(len(bins)), key=lambda j: bins[j][0])
        bins[k] = (bins[k][0] + _expected_runtime(task.task_id, name), bins[k][1] + [(i, name, line)])
    return [sorted(b) for _, b in bins if b]


def _run_reference_batch(task: TaskSpec, batch: list[tuple[int, str, str]], runner: Sandbox, root: Path,
                         limits: SandboxLimits, cache: Path) -> list[tuple[int, dict]]:
    """Run a batch of the task's reference solutions in one process (one job folder; each is the
    full script ``task.starter_code_with(model_line)``, executed in a fresh namespace, its
    ``submission.csv`` graded like an agent's with :func:`grade_execution`).

    The limits apply to the whole batch, with ``wall_time_s`` and ``cpu_time_s`` multiplied by
    its length. Returns ``[(index, entry)]``; raises RuntimeError when a solution fails."""
    import dataclasses

    from wmrl_envs.envs.autoresearch.grading import grade_execution
    from wmrl_envs.sandbox.jobdirs import JobFolder

    root.mkdir(parents=True, exist_ok=True)
    payload = json.dumps([[i, name, task.starter_code_with(line)] for i, name, line in batch])
    source = _DRIVER.format(batch=payload, mark=_MARK)
    scaled = dataclasses.replace(limits, wall_time_s=limits.wall_time_s * len(batch),
                                 cpu_time_s=limits.cpu_time_s * len(batch))
    names = {i: name for i, name, _ in batch}
    with JobFolder(root, scaled, prefix=f"{task.task_id}-") as job:
        write_public_files(task, job.path, cache_dir=cache)
        r = runner.run_python(source, job.path, limits=scaled, env=dict(EXEC_ENV), filename=REFERENCE_DRIVER_FILE)
        marks = [json.loads(line[len(_MARK):]) for line in (r.stdout or "").splitlines() if line.startswith(_MARK)]
        out = []
        for m in marks:
            if m.get("failed"):
                break
            res = ExecutionResult(0, r.stdout, "", float(m["wall_s"]), backend=r.backend, cpu_time_s=None)
            g = grade_execution(task, job.path / f"ref-{m['index']}", res, leaderboard=[0.0])
            if g.status != "valid":
                raise RuntimeError(f"reference solution {names[m['index']]!r} failed on task {task.task_id!r}: "
                                   f"{g.status}: {g.message}")
            out.append((m["index"], {"name": names[m["index"]], "model_line": REFERENCE_SOLUTIONS[task.problem_type][m["index"]][1],
                                     "metric_value": g.metric_value, "runtime_s": round(float(m["wall_s"]), 3)}))
        if len(out) < len(batch) or not r.ok:
            failed = names[batch[len(out)][0]] if len(out) < len(batch) else names[batch[-1][0]]
            why = ("killed: wall-clock time limit exceeded" if r.timed_out
                   else f"the program exited with status {r.exit_code}")
            raise RuntimeError(f"reference solution {failed!r} failed on task {task.task_id!r}: runtime_err: {why}\n"
                               f"{(r.stderr or '')[-2000:]}")
    return out


def build_leaderboards(
    task_ids: Sequence[str] | None = None,
    *,
    path: str | Path | None = LEADERBOARD_PATH,
    sandbox: Sandbox | None = None,
    limits: SandboxLimits | None = None,
    n_jobs: int = 1,
    verbose: bool = True,
) -> dict:
    """(Re)compute the reference leaderboards by executing every reference solution.

    Each entry of :data:`REFERENCE_SOLUTIONS` for the task's problem type is run as a full
    script (``task.starter_code_with(model_line)``) and its ``submission.csv`` graded with
    :func:`~.grading.grade_execution` (:func:`read_submission` / :func:`compute_metric`), like an
    agent's solution. A task's entries run in ``n_jobs`` batches of about equal expected runtime
    (from the shipped board's ``runtime_s``); a batch is one Python process in one job folder
    that runs its scripts one after another, each in a fresh namespace
    (:data:`REFERENCE_DRIVER_FILE`), so Python's start-up and the imports (about 1.8
    CPU-seconds) are paid once per batch rather than once per entry. The scripts are
    deterministic (``random_state=0``), so the values are those of one process per script
    (``tests/envs/autoresearch/test_leaderboard_build.py`` checks it against the shipped board).

    The data are those of the active task secret
    (:mod:`~wmrl_envs.envs.autoresearch.secret`); the file records the secret's fingerprint and
    each task's :attr:`TaskData.digest`, so a board is never used with other data.

    Args:
        task_ids: tasks to (re)compute; ``None`` for all. Tasks already in an existing file at
            ``path`` and not listed are kept when that file was built for the same secret
            (otherwise they are dropped).
        path: output JSON file (``None``: do not write). The shipped :data:`LEADERBOARD_PATH`
            may only be written under the reference secret.
        sandbox: executor; ``None`` runs the trusted reference scripts with the host Python.
        limits: limits per reference solution (default: 600 s wall time); a batch runs under
            them with ``wall_time_s`` and ``cpu_time_s`` multiplied by its length.
        n_jobs: processes run in parallel (each single-threaded, see :data:`EXEC_ENV`), and
            batches per task; the batches of all tasks share the ``n_jobs`` workers, longest first.
        verbose: print one line per reference solution to stderr (when its batch ends).

    The work folder is a :class:`~wmrl_envs.sandbox.jobdirs.OwnedFolder`
    ``wmrl-leaderboards-*`` in the system temporary folder: removed at the end, and swept by
    the next owned folder made there if the build is killed.

    Returns:
        The leaderboards dict (format of :func:`load_leaderboards`).

    Raises:
        ValueError: unknown task id, or ``path`` is the shipped file and the active secret is
            not the reference one.
        RuntimeError: a reference solution failed (its stderr tail is in the message).
    """
    import sklearn

    ids = list(task_ids) if task_ids is not None else list_tasks()
    tasks = [get_task(t) for t in ids]
    if path is not None and Path(path).resolve() == LEADERBOARD_PATH.resolve() and not is_reference_secret():
        raise ValueError(
            f"the shipped {LEADERBOARD_PATH.name} holds the reference secret's leaderboards: run with "
            f"{SECRET_ENV_VAR}={REFERENCE_SECRET}, or write elsewhere (path=...; "
            "get_leaderboard() builds this installation's boards by itself)"
        )
    fingerprint = secret_fingerprint()
    runner = sandbox or _HostRunner(SandboxLimits(wall_time_s=600.0, cpu_time_s=600.0, memory_mb=8192))
    limits = limits or SandboxLimits(wall_time_s=600.0, cpu_time_s=600.0, memory_mb=8192)
    n_proc = max(1, int(n_jobs))
    chunks = [(t, chunk) for t in tasks for chunk in _split_references(t, n_proc)]
    chunks.sort(key=lambda c: -sum(_expected_runtime(c[0].task_id, name) for _, name, _ in c[1]))  # longest first
    # an owned folder: the next build (or job folder) in the temporary folder sweeps it if this
    # process is killed, where a TemporaryDirectory would stay forever
    with OwnedFolder(prefix="wmrl-leaderboards-") as owned:
        tmp = str(owned.path)
        cache = Path(tmp) / "cache"
        for t in tasks:  # render the CSVs once, sequentially
            write_public_files(t, Path(tmp) / "warm" / t.task_id, cache_dir=cache)

        def run_chunk(job: tuple[TaskSpec, list[tuple[int, str, str]]]) -> list[tuple[str, int, dict]]:
            t, chunk = job
            got = _run_reference_batch(t, chunk, runner, Path(tmp) / "jobs", limits, cache)
            if verbose:
                for i, entry in got:
                    print(f"[leaderboard] {t.task_id:18s} {entry['name']:18s} {t.metric}={entry['metric_value']:.5f} "
                          f"({entry['runtime_s']:.2f} s)", file=sys.stderr, flush=True)
            return [(t.task_id, i, entry) for i, entry in got]

        with ThreadPoolExecutor(max_workers=n_proc) as pool:
            done = [r for rs in pool.map(run_chunk, chunks) for r in rs]
    by_task: dict[str, dict[int, dict]] = {}
    for tid, i, entry in done:
        by_task.setdefault(tid, {})[i] = entry

    out: dict = {"version": 2, "tasks": {}}
    if path is not None and Path(path).is_file():
        try:
            old = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            old = {}
        if old.get("secret_fingerprint") == fingerprint:
            out["tasks"].update(old.get("tasks", {}))
    out["created"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    out["secret_fingerprint"] = fingerprint
    out["environment"] = {
        "python": sys.version.split()[0], "numpy": np.__version__, "pandas": pd.__version__,
        "scikit-learn": sklearn.__version__, "exec_env": dict(EXEC_ENV),
        "note": "runtime_s: wall-clock seconds of the reference script on the build machine, run after the "
                "task's other reference scripts in one Python process (imports and start-up not included)",
    }
    for t in tasks:
        out["tasks"][t.task_id] = {
            "metric": t.metric, "higher_is_better": t.higher_is_better, "category": t.category,
            "data_digest": task_data(t.task_id).digest,
            "entries": [by_task[t.task_id][i] for i in sorted(by_task[t.task_id])],
        }
    out["tasks"] = {tid: out["tasks"][tid] for tid in list_tasks() if tid in out["tasks"]}
    if path is not None:
        write_json_atomic(path, out, indent=1)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``python -m wmrl_envs.envs.autoresearch.leaderboards [--tasks ID ...] [--out PATH] [--jobs N]``.

    Without ``--out``: under the reference secret (``WMRL_TASK_SECRET=wmrl-reference``) it
    rewrites the shipped ``leaderboards.json``; under any other secret it (re)builds this
    installation's boards (:func:`leaderboard_cache_dir`), which :func:`get_leaderboard` would
    otherwise build task by task on first use.
    """
    ap = argparse.ArgumentParser(description="Recompute the AutoResearch reference leaderboards.")
    ap.add_argument("--tasks", nargs="*", default=None, help="task ids (default: all)")
    ap.add_argument("--out", default=None, help="output JSON (default: the shipped file under the reference "
                    "secret, else this installation's cache)")
    ap.add_argument("--jobs", type=int, default=1, help="parallel executions")
    args = ap.parse_args(argv)
    task_secret()  # a misconfigured secret fails here, before any execution
    if args.out is not None or is_reference_secret():
        out = args.out or str(LEADERBOARD_PATH)
        build_leaderboards(args.tasks, path=out, n_jobs=args.jobs)
        print(f"wrote {out}")
        return 0
    folder = leaderboard_cache_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for tid in (args.tasks if args.tasks is not None else list_tasks()):
        (folder / f"{get_task(tid).task_id}.json").unlink(missing_ok=True)
        ensure_leaderboard(tid, n_jobs=args.jobs)
    print(f"wrote this installation's leaderboards to {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
