"""Grading one solution on the task's reference leaderboard: :func:`grade` (one execution) and
:func:`evaluate` (pre-check, job folder, sandbox run, grade).

These are :func:`~.running.grade_execution` and :func:`~.running.run_solution` with the task's
default leaderboard (:func:`~.leaderboards.get_leaderboard`, looked up only for a valid
submission). The run itself lives in :mod:`.running`, which :mod:`.leaderboards` uses to build
a board, so the two modules do not import each other (issue 26).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from wmrl_envs.envs.autoresearch.leaderboards import get_leaderboard
from wmrl_envs.envs.autoresearch.running import (
    EXEC_ENV,
    SOLUTION_FILE,
    TAIL_CHARS,
    Grade,
    Leaderboard,
    check_source,
    grade_execution,
    run_solution,
)
from wmrl_envs.envs.autoresearch.tasks import TaskSpec
from wmrl_envs.sandbox.base import ExecutionResult, Sandbox, SandboxLimits

__all__ = [
    "Grade",
    "SOLUTION_FILE",
    "EXEC_ENV",
    "TAIL_CHARS",
    "check_source",
    "grade",
    "evaluate",
]


def grade(
    task: TaskSpec | str,
    job_dir: str | Path | None,
    execution_result: ExecutionResult | None,
    *,
    source: str | None = None,
    leaderboard: Leaderboard | None = None,
) -> Grade:
    """Grade one execution of a solution: :func:`~.running.grade_execution` (arguments,
    returns and errors there) with ``leaderboard`` defaulting to the task's
    (:func:`~.leaderboards.get_leaderboard`, looked up only for a valid submission)."""
    return grade_execution(task, job_dir, execution_result, source=source,
                           leaderboard=get_leaderboard if leaderboard is None else leaderboard)


def evaluate(task: TaskSpec | str, source: str, sandbox: Sandbox, *, workdir_root: str | Path | None = None,
             limits: SandboxLimits | None = None, cache_dir: str | Path | None = None, keep_job_dir: bool = False,
             leaderboard: Leaderboard | None = None, env: Mapping[str, str] | None = None) -> tuple[Grade, Path | None]:
    """Pre-check, materialise, execute in a sandbox and grade one solution:
    :func:`~.running.run_solution` (arguments, returns and errors there) with ``leaderboard``
    defaulting to the task's (:func:`~.leaderboards.get_leaderboard`, looked up only for a
    valid submission).

    Returns:
        ``(grade, job_dir)``; ``job_dir`` is ``None`` when no folder was created or it was deleted.
    """
    return run_solution(task, source, sandbox, workdir_root=workdir_root, limits=limits, cache_dir=cache_dir,
                        keep_job_dir=keep_job_dir, env=env,
                        leaderboard=get_leaderboard if leaderboard is None else leaderboard)
