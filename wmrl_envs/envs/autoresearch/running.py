"""One run of a solution, graded against a leaderboard the caller gives: the host-side
pre-check, the grade of an execution, and one run.

:func:`run_solution` pre-checks a solution (:func:`check_source`), materialises its job folder
(:mod:`.taskdata`), runs it in a sandbox and grades it (:func:`grade_execution`): the submission
is read and scored (:mod:`.submission`), placed on the leaderboard passed in and mapped to the
reward scale (:mod:`.scale`; ``docs/method.md``).

This module does not know where leaderboards come from, so that :mod:`.leaderboards` can build
a board by running the reference solutions here; :mod:`.grading` (``grade``, ``evaluate``) adds
the task's default board (:func:`~.leaderboards.get_leaderboard`) on top.
"""

from __future__ import annotations

import math
import tempfile
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, Union

from wmrl_envs.envs.autoresearch.scale import STATUSES, position_score, score_from_status
from wmrl_envs.envs.autoresearch.submission import compute_metric, read_submission
from wmrl_envs.envs.autoresearch.taskdata import task_data, write_public_files
from wmrl_envs.envs.autoresearch.tasks import TaskSpec, get_task
from wmrl_envs.sandbox.base import ExecutionResult, Sandbox, SandboxLimits

__all__ = [
    "Grade",
    "Leaderboard",
    "SOLUTION_FILE",
    "EXEC_ENV",
    "TAIL_CHARS",
    "check_source",
    "grade_execution",
    "run_solution",
]

SOLUTION_FILE = "solution.py"
"""The file name a solution runs under in its job folder."""

EXEC_ENV: dict[str, str] = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",
    "PYTHONUNBUFFERED": "1",
}
"""Environment variables of every execution: one BLAS/OpenMP thread (the timing budget of the
tasks assumes one core) and a fixed hash seed."""

TAIL_CHARS = 2000
"""Characters of stdout / stderr kept in a :class:`Grade` (the tail)."""

Leaderboard = Union[Sequence[float], Callable[[str], Sequence[float]]]
"""Reference metric values (task units), or a function ``task_id -> values`` called only when a
submission is valid (looking a board up may build it)."""


@dataclass
class Grade:
    """The graded outcome of one solution on one task.

    Attributes:
        task_id: the task.
        status: one of :data:`~wmrl_envs.envs.autoresearch.scale.STATUSES`.
        score: reward in [0, 1] (:func:`~wmrl_envs.envs.autoresearch.scale.score_from_status`).
        metric: name of the task metric.
        higher_is_better: direction of the metric.
        metric_value: the submission's metric value (task units), ``None`` unless ``valid``.
        position: leaderboard position score in [0, 1], ``None`` unless ``valid``.
        n_reference: number of reference solutions on the task's leaderboard.
        runtime_s: wall-clock seconds of the execution (0.0 when not executed).
        cpu_time_s: CPU-seconds (user + system) of the whole sandboxed process tree
            (``ExecutionResult.cpu_time_s``); 0.0 when not executed, ``None`` when the sandbox
            could not measure it (see :class:`~wmrl_envs.sandbox.base.ExecutionResult`).
        executed: whether the program was run (``False`` for ``malformed`` / ``syntax_err``).
        exit_code: the program's exit status (``None`` when killed or not executed).
        timed_out: whether the wall-clock limit killed it.
        message: the grader's explanation (why the submission is invalid, the syntax error...).
        stdout_tail: last :data:`TAIL_CHARS` characters of stdout.
        stderr_tail: last :data:`TAIL_CHARS` characters of stderr (for ``syntax_err``: the
            error as Python would print it).
        n_rows: number of rows of a valid submission (``None`` otherwise).
    """

    task_id: str
    status: str
    score: float
    metric: str
    higher_is_better: bool
    metric_value: float | None = None
    position: float | None = None
    n_reference: int = 0
    runtime_s: float = 0.0
    cpu_time_s: float | None = 0.0
    executed: bool = False
    exit_code: int | None = None
    timed_out: bool = False
    message: str = ""
    stdout_tail: str = ""
    stderr_tail: str = ""
    n_rows: int | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; expected one of {STATUSES}")

    def to_dict(self) -> dict[str, Any]:
        """The grade as a plain dict (JSON-serialisable)."""
        return asdict(self)


def _tail(text: str | None, n: int = TAIL_CHARS) -> str:
    text = text or ""
    return text if len(text) <= n else text[-n:]


def check_source(source: Any, filename: str = SOLUTION_FILE) -> tuple[str, str, str] | None:
    """Host-side pre-check of a solution, without executing it.

    Args:
        source: the solution's Python source (str expected).

    Returns:
        ``None`` if the source compiles; otherwise ``(status, message, stderr)`` with status
        ``"malformed"`` (not a string, empty / whitespace-only, or containing NUL bytes) or
        ``"syntax_err"`` (``compile()`` fails), and ``stderr`` the error as Python would print
        it when running ``solution.py``.
    """
    if not isinstance(source, str):
        return "malformed", f"the solution is not text (got {type(source).__name__})", ""
    if not source.strip():
        return "malformed", "the solution is empty", ""
    if "\x00" in source:
        return "malformed", "the solution contains NUL bytes", ""
    try:
        compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as e:  # includes IndentationError / TabError
        err = "".join(traceback.format_exception_only(type(e), e))
        return "syntax_err", f"{type(e).__name__}: {e.msg} (line {e.lineno})", err
    except (ValueError, RecursionError, MemoryError, OverflowError) as e:
        return "syntax_err", f"{type(e).__name__}: {e}", f"{type(e).__name__}: {e}\n"
    return None


def _base(task: TaskSpec, status: str, **kw: Any) -> Grade:
    return Grade(
        task_id=task.task_id, status=status, score=score_from_status(status) if status != "valid" else 0.0,
        metric=task.metric, higher_is_better=task.higher_is_better, **kw,
    )


def grade_execution(
    task: TaskSpec | str,
    job_dir: str | Path | None,
    execution_result: ExecutionResult | None,
    *,
    leaderboard: Leaderboard,
    source: str | None = None,
) -> Grade:
    """Grade one execution of a solution.

    Args:
        task: a :class:`TaskSpec` or task id.
        job_dir: the job folder the program ran in (holds ``submission.csv``); may be
            ``None`` when the source fails the pre-check.
        execution_result: the sandbox's result; may be ``None`` when ``source`` is given and
            fails :func:`check_source` (no execution is needed then).
        source: the solution source; when given, :func:`check_source` runs first and decides
            ``malformed`` / ``syntax_err`` without looking at the execution.
        leaderboard: reference metric values, or ``task_id -> values`` (called only for a valid
            submission).

    Returns:
        The :class:`Grade`.

    Raises:
        ValueError: unknown task, or no ``execution_result`` for a source that passes the
            pre-check (or for no source at all).
    """
    task = get_task(task) if isinstance(task, str) else task
    if source is not None:
        pre = check_source(source)
        if pre is not None:
            status, message, err = pre
            return _base(task, status, message=message, stderr_tail=_tail(err))
    if execution_result is None:
        raise ValueError("execution_result is required unless `source` fails the host pre-check")
    r = execution_result
    cpu = getattr(r, "cpu_time_s", None)  # a sandbox-like object may not report it
    common = dict(
        runtime_s=float(r.wall_time_s), cpu_time_s=None if cpu is None else float(cpu), executed=True, exit_code=r.exit_code, timed_out=bool(r.timed_out),
        stdout_tail=_tail(r.stdout), stderr_tail=_tail(r.stderr),
    )
    if r.timed_out:
        return _base(task, "runtime_err", message="killed: wall-clock time limit exceeded", **common)
    extras = getattr(r, "extras", None) or {}
    if extras.get("workdir_limit_exceeded"):  # the program's own doing: it filled its folder
        return _base(task, "runtime_err", message="killed: job folder limit exceeded "
                     f"({extras['workdir_limit_exceeded']})", **common)
    if r.exit_code != 0:
        why = f"exited with status {r.exit_code}" if r.exit_code is not None else (
            f"killed by signal {r.signal}" if r.signal else "killed"
        )
        if extras.get("oom_killed"):
            why += " (memory limit exceeded: a process of the run was OOM-killed)"
        return _base(task, "runtime_err", message=f"the program {why}", **common)
    if job_dir is None:
        raise ValueError("job_dir is required to grade a program that ran")
    preds, reason = read_submission(task, job_dir)
    if preds is None:
        return _base(task, "ran_no_sub", message=reason, **common)
    data = task_data(task.task_id)
    try:
        value = compute_metric(task.metric, data.y_test.to_numpy(), preds)
    except ValueError as e:
        return _base(task, "ran_no_sub", message=f"could not score the submission: {e}", **common)
    if not math.isfinite(value):
        return _base(task, "ran_no_sub", message=f"the metric is not finite ({value})", **common)
    board = list(leaderboard(task.task_id) if callable(leaderboard) else leaderboard)
    pos = position_score(value, board, task.higher_is_better)
    return Grade(
        task_id=task.task_id, status="valid", score=score_from_status("valid", pos), metric=task.metric,
        higher_is_better=task.higher_is_better, metric_value=value, position=pos, n_reference=len(board),
        message=f"valid submission with {len(preds)} rows", n_rows=len(preds), **common,
    )


def run_solution(
    task: TaskSpec | str,
    source: str,
    sandbox: Sandbox,
    *,
    leaderboard: Leaderboard,
    workdir_root: str | Path | None = None,
    limits: SandboxLimits | None = None,
    cache_dir: str | Path | None = None,
    keep_job_dir: bool = False,
    env: Mapping[str, str] | None = None,
) -> tuple[Grade, Path | None]:
    """Pre-check, materialise, execute in a sandbox and grade one solution.

    Sources that fail :func:`check_source` are graded without any execution (and without a
    job folder). :func:`~.grading.evaluate` is this with the task's default leaderboard.

    The job folder is a :class:`~wmrl_envs.sandbox.jobdirs.JobFolder`: bounded to
    ``workdir_size_mb`` MiB and ``workdir_max_files`` entries (a tmpfs where mounting is
    allowed, so its removal is one ``umount`` and the step ends within the wall-clock limit
    plus a few seconds however many files the program wrote), and removed by the next run
    in ``workdir_root`` if this process is killed first.

    Args:
        task: a :class:`TaskSpec` or task id.
        source: the solution's Python source.
        sandbox: anything with ``run_python(source, workdir, *, limits, env, filename)``.
        workdir_root: where to create the job folder (system temp dir if ``None``).
        limits: per-run limits (``None``: the sandbox's defaults).
        cache_dir: rendered-CSV cache for :func:`write_public_files`.
        keep_job_dir: keep the job folder (else it is deleted after grading); a tmpfs job
            folder is copied to a plain folder ``<job>-kept`` first.
        leaderboard: reference values, or ``task_id -> values`` (see :func:`grade_execution`).
        env: environment variables for the program (default :data:`EXEC_ENV`).

    Returns:
        ``(grade, job_dir)``; ``job_dir`` is ``None`` when no folder was created or it was
        deleted.

    Raises:
        ValueError: unknown task, or a job folder bound (``workdir_size_mb``,
            ``workdir_max_files``) too small for the task's public files.
        FileNotFoundError, SandboxUnavailableError: from the sandbox
            (:class:`~wmrl_envs.sandbox.base.SandboxInfrastructureError` when the sandbox
            failed for this run; nothing is graded then).
    """
    task = get_task(task) if isinstance(task, str) else task
    pre = check_source(source)
    if pre is not None:
        return grade_execution(task, None, None, source=source, leaderboard=leaderboard), None
    import errno

    from wmrl_envs.sandbox.jobdirs import JobFolder

    root = Path(workdir_root) if workdir_root is not None else Path(tempfile.gettempdir())
    bounds = limits or getattr(sandbox, "limits", None) or SandboxLimits()
    job = JobFolder(root, bounds, prefix=f"{task.task_id}-")
    kept: Path | None = None
    try:
        try:
            write_public_files(task, job.path, cache_dir=cache_dir)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            raise ValueError(
                f"the job folder's bounds (workdir_size_mb={bounds.workdir_size_mb}, workdir_max_files="
                f"{bounds.workdir_max_files}) cannot hold the public files of task {task.task_id!r}: "
                "raise them in SandboxLimits"
            ) from exc
        result = sandbox.run_python(
            source, job.path, limits=limits, env=dict(EXEC_ENV if env is None else env), filename=SOLUTION_FILE
        )
        g = grade_execution(task, job.path, result, leaderboard=leaderboard)
        if keep_job_dir:
            kept = job.keep()
    finally:
        job.remove()  # one umount for a tmpfs job folder; nothing after keep()
    return g, kept
