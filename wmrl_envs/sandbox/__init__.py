"""Sandboxes for running untrusted, agent-written Python programs.

Contents:
    * :class:`SandboxLimits`, :class:`ExecutionResult`, :class:`Sandbox`,
      :class:`SandboxUnavailableError` -- the interface (:mod:`.base`);
    * :class:`BubblewrapSandbox` -- ``"bubblewrap"``, the default: Linux namespaces via
      ``bwrap``, program runs as uid 65534 without network (:mod:`.bubblewrap`);
    * :class:`DockerSandbox` -- ``"docker"``: a container from a locally built, registry-free
      image through the docker SDK (:mod:`.docker`);
    * :class:`SubprocessSandbox` -- ``"subprocess"``: rlimits only, **no isolation**; warns with
      :class:`UnsafeSandboxWarning` (:mod:`.subprocess`);
    * :func:`make_sandbox` -- build a backend by name, or the best one available (``"auto"``);
    * :func:`available_backends` -- names of the backends that work on this machine.

Example:
    >>> from wmrl_envs.sandbox import make_sandbox, SandboxLimits
    >>> with make_sandbox(limits=SandboxLimits(wall_time_s=60, memory_mb=2048)) as sb:
    ...     result = sb.run_python("print('hi')", "/path/to/job")  # doctest: +SKIP
"""

from __future__ import annotations

import threading

from .base import ExecutionResult, Sandbox, SandboxLimits, SandboxUnavailableError
from .bubblewrap import BubblewrapSandbox
from .docker import DockerSandbox
from .subprocess import SubprocessSandbox, UnsafeSandboxWarning

__all__ = [
    "SandboxLimits",
    "ExecutionResult",
    "Sandbox",
    "SandboxUnavailableError",
    "UnsafeSandboxWarning",
    "BubblewrapSandbox",
    "DockerSandbox",
    "SubprocessSandbox",
    "BACKENDS",
    "make_sandbox",
    "available_backends",
]

#: Backend name -> class, in order of preference for ``"auto"``.
BACKENDS: dict[str, type[Sandbox]] = {
    BubblewrapSandbox.name: BubblewrapSandbox,
    DockerSandbox.name: DockerSandbox,
    SubprocessSandbox.name: SubprocessSandbox,
}

_bwrap_ok: bool | None = None
_bwrap_lock = threading.Lock()


def _bubblewrap_works() -> bool:
    """Probe bubblewrap once per process and cache the answer."""
    global _bwrap_ok
    with _bwrap_lock:
        if _bwrap_ok is None:
            _bwrap_ok = BubblewrapSandbox.is_available()
        return _bwrap_ok


def available_backends() -> list[str]:
    """Names of the backends that can run here, best first (``"subprocess"`` always is)."""
    names = []
    if _bubblewrap_works():
        names.append(BubblewrapSandbox.name)
    if DockerSandbox.is_available():
        names.append(DockerSandbox.name)
    names.append(SubprocessSandbox.name)
    return names


def make_sandbox(backend: str = "auto", limits: SandboxLimits | None = None) -> Sandbox:
    """Create a sandbox.

    Args:
        backend: ``"bubblewrap"``, ``"docker"``, ``"subprocess"`` or ``"auto"``: bubblewrap if
            it works here (probed once per process), else docker if a daemon answers, else
            subprocess (which warns that it does not isolate).
        limits: default :class:`SandboxLimits` of the sandbox.

    Returns:
        The sandbox; use it as a context manager or call ``close()``.

    Raises:
        ValueError: unknown backend name.
        SandboxUnavailableError: the named backend cannot run here (message says how to fix).
    """
    name = backend.strip().lower()
    if name == "auto":
        if _bubblewrap_works():
            try:
                return BubblewrapSandbox(limits)
            except SandboxUnavailableError:
                pass
        if DockerSandbox.is_available():
            try:
                return DockerSandbox(limits)
            except SandboxUnavailableError:
                pass
        return SubprocessSandbox(limits)
    if name not in BACKENDS:
        valid = ", ".join(["auto", *BACKENDS])
        raise ValueError(f"unknown sandbox backend {backend!r}; valid names: {valid}")
    return BACKENDS[name](limits)
