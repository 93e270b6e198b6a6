"""Sandbox interface for executing untrusted Python code (agent-written solutions).

A sandbox runs one Python program in a *job folder*: the folder is the program's working
directory (``/workspace`` inside isolating backends), holds the public input files, and is the
only place the program may write (besides a private, size-limited ``/tmp``). Everything else
is read-only or absent; the network is unreachable; resources are bounded by
:class:`SandboxLimits`. Hidden labels never enter the job folder.

Backends: :mod:`~wmrl_envs.sandbox.bubblewrap` (default), :mod:`~wmrl_envs.sandbox.docker`
(docker SDK, locally built image, no registry) and :mod:`~wmrl_envs.sandbox.subprocess`
(resource limits only, no isolation: warns loudly). :func:`wmrl_envs.sandbox.make_sandbox`
picks one.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Mapping

__all__ = ["SandboxLimits", "ExecutionResult", "Sandbox", "SandboxUnavailableError"]


class SandboxUnavailableError(RuntimeError):
    """The requested sandbox backend cannot run on this machine (the message says why/how to fix)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one execution.

    Attributes:
        wall_time_s: wall-clock limit in seconds; the whole process tree is killed past it.
        cpu_time_s: CPU-time limit in seconds (RLIMIT_CPU).
        memory_mb: address-space / memory limit in MiB.
        file_size_mb: largest file the program may write, in MiB (RLIMIT_FSIZE).
        max_processes: most processes/threads the program may have (fork-bomb guard).
        tmp_size_mb: size of the private ``/tmp`` in MiB (isolating backends).
    """

    wall_time_s: float = 120.0
    cpu_time_s: float = 120.0
    memory_mb: int = 2048
    file_size_mb: int = 64
    max_processes: int = 64
    tmp_size_mb: int = 64


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
        extras: backend-specific details.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    wall_time_s: float
    timed_out: bool = False
    signal: int | None = None
    backend: str = ""
    extras: dict = field(default_factory=dict)

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

    @abc.abstractmethod
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
            An :class:`ExecutionResult`; never raises for failures of the program itself.

        Raises:
            FileNotFoundError: ``workdir`` does not exist.
            SandboxUnavailableError: the backend broke (e.g. Docker daemon gone).
        """

    def close(self) -> None:
        """Release backend resources (containers, clients). Safe to call twice."""

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
