"""One run of a solution, graded against a leaderboard the caller gives: :func:`run_solution`
pre-checks a solution (:func:`~.grading.check_source`), materialises its job folder
(:mod:`.taskdata`), runs it in a sandbox under :data:`EXEC_ENV` and grades the execution
(:func:`~.grading.grade_execution`; ``docs/method.md``, "Reward scale").

This module does not know where leaderboards come from, so that :mod:`.leaderboards` can build
a board by running the reference solutions under the same :data:`EXEC_ENV`;
:func:`~.env.evaluate` adds the task's default board (:func:`~.leaderboards.get_leaderboard`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Mapping

from wmrl_envs.envs.autoresearch.grading import SOLUTION_FILE, Grade, Leaderboard, check_source, grade_execution
from wmrl_envs.envs.autoresearch.taskdata import write_public_files
from wmrl_envs.envs.autoresearch.tasks import TaskSpec, get_task
from wmrl_envs.sandbox.base import Sandbox, SandboxLimits

__all__ = ["EXEC_ENV", "run_solution"]

EXEC_ENV: dict[str, str] = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",
    "PYTHONUNBUFFERED": "1",
}
"""Environment variables of every execution: one BLAS/OpenMP thread (the timing budget of the
tasks assumes one core) and a fixed hash seed."""


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

    Sources that fail :func:`~.grading.check_source` are graded without any execution (and without a
    job folder). :func:`~.env.evaluate` is this with the task's default leaderboard.

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
        leaderboard: reference values, or ``task_id -> values`` (see :func:`~.grading.grade_execution`).
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
