"""Sandbox interface for executing untrusted Python code (agent-written solutions).

A sandbox runs one Python program in a *job folder*: the folder is the program's working
directory (``/workspace`` inside isolating backends), holds the public input files, and is the
only place the program may write (besides a private, size-limited ``/tmp``). Everything else
is read-only or absent (and ``hidden_paths`` are masked); the network is unreachable;
resources are bounded by :class:`SandboxLimits` -- memory and processes for the sandbox as a
whole (a cgroup, where one can be made), the job folder's total size and file count
(:class:`~wmrl_envs.sandbox.jobdirs.JobFolder`). Hidden labels never enter the job folder.

Errors: what the program causes (time-out, OOM kill, full job folder, crash) is its
:class:`ExecutionResult`; a sandbox that failed to start or broke mid-run raises
:class:`SandboxInfrastructureError` (a :class:`SandboxUnavailableError`), which callers must
not grade as the program's outcome.

Backends: :mod:`~wmrl_envs.sandbox.bubblewrap` (default), :mod:`~wmrl_envs.sandbox.docker`
(docker SDK, locally built image, no registry) and :mod:`~wmrl_envs.sandbox.subprocess`
(resource limits only, no isolation: warns loudly). :func:`wmrl_envs.sandbox.make_sandbox`
picks one. The whole-sandbox bounds hold for the processes that stay in the execution cgroup:
under bubblewrap the program runs as an unprivileged uid without ``/sys``, so it cannot leave
it; under the subprocess backend a program running as root can (see
:class:`~wmrl_envs.sandbox.subprocess.SubprocessSandbox`).
"""

from __future__ import annotations

import abc
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Mapping

__all__ = [
    "SandboxLimits",
    "ExecutionResult",
    "Sandbox",
    "SandboxUnavailableError",
    "SandboxInfrastructureError",
    "WeakLimitsWarning",
    "default_hidden_paths",
]


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The folder of the ``wmrl_envs`` package this module belongs to (absolute, links not resolved)."""


def default_hidden_paths() -> list[str]:
    """Host paths the isolating backends hide by default: this project's own installed files.

    The ``wmrl`` distribution's top-level entries in its site-packages folder (the
    ``wmrl_envs`` and ``agents`` packages of a regular install; the ``__editable__`` ``.pth``
    and finder files of an editable one, which name the checkout), its ``.dist-info`` folder,
    and the folder of the imported ``wmrl_envs`` package. The checkout itself is never bound
    (only the interpreter's prefix is), so these are what would otherwise be readable inside.

    Returns:
        Absolute paths (str), existing ones only.
    """
    import importlib.metadata as md

    out = [_PACKAGE_DIR]
    for dist in md.distributions(name="wmrl"):  # the installed one and a checkout's egg-info
        tops = {str(f).split("/", 1)[0] for f in (dist.files or [])}
        path = getattr(dist, "_path", None)  # the .dist-info / .egg-info folder
        if path is not None:
            out.append(os.path.abspath(str(path)))
        for top in sorted(tops):
            if top in ("", "..", "__pycache__") or top.startswith(".."):
                continue
            out.append(os.path.abspath(str(dist.locate_file(top))))
    return [p for p in dict.fromkeys(out) if os.path.lexists(p)]


class SandboxUnavailableError(RuntimeError):
    """The requested sandbox backend cannot run on this machine (the message says why/how to fix)."""


class SandboxInfrastructureError(SandboxUnavailableError):
    """The sandbox machinery failed for one execution (not the program's fault).

    Raised by :meth:`Sandbox.run_python` when the backend itself broke: ``bwrap`` reported a
    set-up error, ``setpriv`` or the interpreter could not be started, the per-execution cgroup
    could not be created or joined, the Docker daemon died. The program may not have run at all,
    so its outcome must not be graded as the agent's (``env.step`` leaves such a rollout
    ungraded). What the program causes itself (its time-out, an out-of-memory kill, a full job
    folder, a crash) is never raised: it is returned in the :class:`ExecutionResult`.
    """


class WeakLimitsWarning(UserWarning):
    """A whole-sandbox bound (cgroup memory/process limit, bounded job folder) is not available
    here, so a weaker per-process fallback applies (the message says which and how to fix)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one execution.

    Attributes:
        wall_time_s: wall-clock limit in seconds; the whole process tree is killed past it.
        cpu_time_s: CPU-time limit in seconds (RLIMIT_CPU).
        memory_mb: address-space / memory limit in MiB.
        file_size_mb: largest file the program may write, in MiB (RLIMIT_FSIZE).
        memory_mb: memory limit of the **whole sandbox** in MiB (a cgroup: every process of the
            run that stays in it, together, including what it writes to its tmpfs ``/tmp``,
            ``/dev/shm`` and bounded job folder; a subprocess-backend program running as root
            can leave the cgroup and with it this bound); also each process's address-space
            limit (``RLIMIT_AS``).
        file_size_mb: largest file the program may write, in MiB (RLIMIT_FSIZE).
        max_processes: most processes/threads the whole sandbox may have at once (cgroup
            ``pids.max``; fork-bomb guard).
        tmp_size_mb: size of the private ``/tmp`` in MiB (isolating backends).
        workdir_size_mb: total size of the job folder in MiB (public inputs included), for job
            folders made by :func:`~wmrl_envs.sandbox.jobdirs.JobFolder`.
        workdir_max_files: most files and folders the job folder may hold (public inputs and
            the folder itself included).

    The AutoResearch tasks' public files take at most 11 MiB in 3 files, far inside the
    defaults.
    """

    wall_time_s: float = 120.0
    cpu_time_s: float = 120.0
    memory_mb: int = 2048
    file_size_mb: int = 64
    max_processes: int = 64
    tmp_size_mb: int = 64
    workdir_size_mb: int = 512
    workdir_max_files: int = 10_000

    def __post_init__(self) -> None:
        for name in ("wall_time_s", "cpu_time_s"):
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0 seconds, got {getattr(self, name)!r}")
        for name in ("memory_mb", "file_size_mb", "max_processes", "tmp_size_mb", "workdir_size_mb", "workdir_max_files"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"SandboxLimits.{name} must be a positive integer, got {getattr(self, name)!r}")


@dataclass
class ExecutionResult:
    """What one execution produced.

    Attributes:
        exit_code: the program's exit status, or ``None`` if it was killed (time-out, signal).
        stdout: captured standard output (text, may be truncated to the last 64 KiB).
        stderr: captured standard error (text, may be truncated to the last 64 KiB).
        wall_time_s: seconds from start to end, as measured on the host.
        timed_out: ``True`` if the wall-clock limit was hit.
        signal: the signal number that ended the program, if any.
        backend: name of the backend that ran it.
        extras: backend details. All backends set ``removed_special_files`` (list of str),
            ``oom_killed`` (bool: the kernel's OOM killer ended a process of the run -- its
            memory limit, the program's fault), ``workdir_limit_exceeded`` (``""``,
            ``"workdir_size_mb"`` or ``"workdir_max_files"`` when the watchdog killed the run)
            and ``cgroup`` (bool: whole-sandbox bounds applied); bubblewrap and subprocess also
            ``oom_kills`` (int) and ``peak_memory_mb`` (float MiB or ``None``), and
            ``cpu_time_source`` (where ``cpu_time_s`` comes from: ``"cgroup"``, ``"rusage"``
            or ``None``).
        cpu_time_s: CPU-seconds (user + system) of the **whole sandboxed process tree**, or
            ``None`` where the backend cannot measure it. Bubblewrap and subprocess: the
            execution cgroup's usage where one is used (cgroup v2 ``cpu.stat`` ``usage_usec``,
            v1 ``cpuacct.usage``): every process of the run while it is in the cgroup,
            ``setsid`` escapees included. Under bubblewrap no process can leave the cgroup
            (unprivileged uid, no ``/sys``). The subprocess backend runs the program as the
            caller: as root, a program that writes its pid into another cgroup's
            ``cgroup.procs`` (e.g. ``/sys/fs/cgroup/pids/cgroup.procs``) leaves the execution
            cgroup, and its CPU from then on is not counted (nor bounded, nor killed at the
            end; :class:`~wmrl_envs.sandbox.subprocess.SubprocessSandbox` isolates nothing).
            Without one, subprocess reports the ``os.wait4`` rusage of the direct child (it and
            the descendants it waited for; a process that left with ``setsid`` and was not
            waited for is missed) and bubblewrap ``None`` (bwrap's outer process exits without
            reaping its pid namespace's init, so its rusage holds none of the program's CPU).
            Docker: ``None`` (the container's cgroup is gone once it has exited, and sampling
            it while it runs is not cheap). This is what the AutoResearch env charges as the
            execution's CPU (``info["execution_cpu_s"]``, ``docs/method.md``, "Cost accounting").
    """

    exit_code: int | None
    stdout: str
    stderr: str
    wall_time_s: float
    timed_out: bool = False
    signal: int | None = None
    backend: str = ""
    extras: dict = field(default_factory=dict)
    cpu_time_s: float | None = None

    @property
    def ok(self) -> bool:
        """``True`` when the program exited with status 0 within its limits."""
        return self.exit_code == 0 and not self.timed_out


class Sandbox(abc.ABC):
    """Runs untrusted Python programs in a job folder under :class:`SandboxLimits`."""

    name: ClassVar[str] = "base"
    isolates: ClassVar[bool] = True
    """Whether the backend isolates filesystem and network (``False`` only for subprocess)."""

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        self.limits = limits or SandboxLimits()

    def run_python(
        self,
        source: str,
        workdir: str | Path,
        *,
        limits: SandboxLimits | None = None,
        env: Mapping[str, str] | None = None,
        filename: str = "solution.py",
    ) -> ExecutionResult:
        """Write ``source`` to ``workdir/filename`` and run it with the sandbox's Python.

        Args:
            source: Python source code (str).
            workdir: existing host folder; becomes the program's cwd and only writable place.
            limits: overrides the sandbox's default limits for this run.
            env: extra environment variables for the program.
            filename: name of the script inside the job folder.

        Returns:
            An :class:`ExecutionResult`; never raises for failures of the program itself
            (time-out, memory or folder limit, crash): those are the program's outcome.

        Raises:
            FileNotFoundError: ``workdir`` does not exist.
            SandboxInfrastructureError: the backend broke for this run (bwrap set-up error,
                cgroup not joinable, Docker daemon gone); the program's outcome is unknown.

        A backend implements :meth:`_run` (called with the limits resolved), or overrides this
        method as a whole.
        """
        return self._run(source, workdir, limits or self.limits, env, filename)

    def _run(self, source: str, workdir: str | Path, limits: SandboxLimits, env: Mapping[str, str] | None,
             filename: str) -> ExecutionResult:
        """The backend's run (:meth:`run_python`'s contract, ``limits`` resolved)."""
        raise NotImplementedError(f"{type(self).__name__} must override run_python (or _run) to run programs")

    def close(self) -> None:
        """Release backend resources (containers, clients). Safe to call twice."""

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
