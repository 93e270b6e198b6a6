"""Unsafe fallback backend: a plain child process under resource limits, **no isolation**.

Contents:
    * :class:`UnsafeSandboxWarning` -- the warning every :class:`SubprocessSandbox` emits.
    * :class:`SubprocessSandbox` -- backend ``"subprocess"``.

The process-running helpers it shares with the other backends live in :mod:`.process`.

Note: this module is named ``subprocess`` but, as every module here uses absolute imports,
``import subprocess`` inside the package still means the standard library.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Mapping

from .base import ExecutionResult, Sandbox, SandboxInfrastructureError, SandboxLimits
from .process import (StartedPipe, base_env, count_tasks_of_uid, execution_result, limit_extras, make_preexec,
                      new_cgroup, prepare_workdir, rlimit_table, run_job, warn_if_no_cgroup)

__all__ = ["SubprocessSandbox", "UnsafeSandboxWarning"]


class UnsafeSandboxWarning(UserWarning):
    """Emitted when a backend that does not isolate filesystem and network is used."""


class SubprocessSandbox(Sandbox):
    """Runs the program as a plain child process under rlimits. **It does not isolate.**

    What it limits:
        * memory and processes of the **whole run**, where a cgroup can be made (root; see
          :mod:`~wmrl_envs.sandbox.cgroup`): ``memory_mb`` MiB for all its processes together
          (the OOM killer ends it beyond, ``extras["oom_killed"]``) and ``max_processes``
          tasks (``pids.max``); at the end every process of the cgroup is killed, including
          those that left the process group with ``setsid`` (but not one that left the cgroup
          itself, see below); the CPU-seconds (``ExecutionResult.cpu_time_s``) are the
          cgroup's usage;
        * memory per process: ``RLIMIT_AS`` = ``memory_mb`` MiB of address space (allocations
          beyond it raise ``MemoryError``);
        * CPU: ``RLIMIT_CPU`` = ``ceil(cpu_time_s)`` seconds (then SIGXCPU, SIGKILL 1 s later);
        * file size: ``RLIMIT_FSIZE`` = ``file_size_mb`` MiB per file; the job folder's total
          size and entry count as described in :mod:`~wmrl_envs.sandbox.jobdirs`;
        * open files: ``RLIMIT_NOFILE`` = 256;
        * wall clock: ``wall_time_s`` seconds, then the whole process group (new session) is
          SIGKILLed.

    Without a cgroup (warns once with :class:`~wmrl_envs.sandbox.base.WeakLimitsWarning`):
    memory is only the per-process ``RLIMIT_AS``, and processes are bounded by
    ``RLIMIT_NPROC`` = the caller's current task count + ``max_processes`` when the caller is
    not root (root ignores it: then there is **no** fork-bomb guard).

    What it does NOT do: the program runs with the caller's uid and sees the caller's whole
    filesystem (it can read hidden labels, write anywhere the caller can) and network, and can
    escape the process group with ``setsid``. When the caller is root (where the cgroup
    exists), the program is root too and can leave its execution cgroup by writing its pid
    into another group's ``cgroup.procs`` (e.g. ``/sys/fs/cgroup/pids/cgroup.procs``, and the
    ``memory`` and ``cpuacct`` ones under cgroup v1): from then on that process escapes the
    memory and process bounds, the CPU-seconds and the final kill, and may outlive the run.
    This backend cannot stop it; the bubblewrap backend can (the program runs as an
    unprivileged uid, without ``/sys``). The environment is clean (no host variables),
    ``HOME``/``TMPDIR`` point at the job folder. ``tmp_size_mb`` is not enforced.

    Use only for trusted code or when nothing else runs; constructing it emits an
    :class:`UnsafeSandboxWarning`.

    Args:
        limits: default limits (see :class:`~wmrl_envs.sandbox.base.SandboxLimits`).
        python: interpreter to run (default: ``sys.executable``).
    """

    name = "subprocess"
    isolates = False

    def __init__(self, limits: SandboxLimits | None = None, *, python: str | None = None) -> None:
        super().__init__(limits)
        self.python = python or sys.executable
        warn_if_no_cgroup(self.name)
        warnings.warn(
            "SubprocessSandbox does NOT isolate the filesystem or the network: the untrusted "
            "program runs as your user and can read hidden labels, write outside its job "
            "folder and open connections; only resource limits apply. Use the 'bubblewrap' "
            "(apt-get install -y bubblewrap) or 'docker' backend for untrusted code.",
            UnsafeSandboxWarning,
            stacklevel=2,
        )

    def _run(self, source: str, workdir: str | Path, limits: SandboxLimits, env: Mapping[str, str] | None,
             filename: str) -> ExecutionResult:
        path = prepare_workdir(workdir, source, filename)
        uid = os.getuid()
        cgroup = new_cgroup(limits)
        nproc = None if (uid == 0 or cgroup is not None) else count_tasks_of_uid(uid) + int(limits.max_processes)
        started = StartedPipe()
        out, removed = run_job(lambda: ([self.python, "-c", started.bootstrap(), filename], ()), cwd=str(path),
                               env=base_env(str(path), str(path), env), limits=limits, workdir=path, cgroup=cgroup,
                               preexec_fn=make_preexec(rlimit_table(limits, nproc=nproc), cgroup), started=started)
        if not out.started:
            raise SandboxInfrastructureError(
                f"the interpreter {self.python!r} did not start (exit status {out.returncode}"
                f"{', killed at the wall-clock limit' if out.timed_out else ''}): {out.stderr.strip()[-2000:]}"
            )
        extras = {"uid": uid, "nproc_limit": nproc, "output_truncated": out.truncated, "removed_special_files": removed,
                  **limit_extras(out, cgroup is not None)}
        return execution_result(out, self.name, cpu_time_s=out.cpu_time_s, extras=extras)
