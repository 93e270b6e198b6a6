"""Sandboxes for running untrusted, agent-written Python programs.

Contents:
    * :class:`SandboxLimits`, :class:`ExecutionResult`, :class:`Sandbox`,
      :class:`SandboxUnavailableError`, :class:`SandboxInfrastructureError`,
      :class:`WeakLimitsWarning`, :func:`default_hidden_paths` -- the interface (:mod:`.base`);
    * :class:`BubblewrapSandbox` -- ``"bubblewrap"``, the default: Linux namespaces via
      ``bwrap``, program runs as uid 65534 without network (:mod:`.bubblewrap`);
    * :class:`DockerSandbox` -- ``"docker"``: a container from a locally built, registry-free
      image through the docker SDK (:mod:`.docker`);
    * :class:`SubprocessSandbox` -- ``"subprocess"``: rlimits only, **no isolation**; warns with
      :class:`UnsafeSandboxWarning` (:mod:`.subprocess`);
    * :class:`JobFolder`, :class:`OwnedFolder`, :func:`sweep_stale` -- job folders bounded in
      size and file count, removed even after their owner was killed (:mod:`.jobdirs`);
    * :class:`ExecutionCgroup`, :func:`cgroup_support` -- the per-execution cgroup that bounds
      a run's memory and processes as a whole (:mod:`.cgroup`);
    * :func:`make_sandbox` -- build a backend by name, or the best isolating one (``"auto"``);
    * :func:`available_backends` -- names of the backends that work on this machine.

No isolation is always an explicit choice: ``make_sandbox("auto")`` raises
:class:`SandboxUnavailableError` when neither bubblewrap nor Docker works, unless the caller
passes ``allow_unsafe=True`` (or names ``"subprocess"``).

Example:
    >>> from wmrl_envs.sandbox import make_sandbox, SandboxLimits
    >>> with make_sandbox(limits=SandboxLimits(wall_time_s=60, memory_mb=2048)) as sb:  # doctest: +SKIP
    ...     with JobFolder("/tmp/wmrl-jobs", sb.limits) as job:
    ...         result = sb.run_python("print('hi')", job.path)
"""

from __future__ import annotations

import os
import threading
from typing import Iterable

from .base import (
    ExecutionResult,
    Sandbox,
    SandboxInfrastructureError,
    SandboxLimits,
    SandboxUnavailableError,
    WeakLimitsWarning,
    default_hidden_paths,
)
from .bubblewrap import BubblewrapSandbox
from .cgroup import ExecutionCgroup, cgroup_support
from .docker import DockerSandbox
from .jobdirs import JobFolder, OwnedFolder, sweep_stale
from .subprocess import SubprocessSandbox, UnsafeSandboxWarning

__all__ = [  # sorted
    "available_backends",
    "BACKENDS",
    "BubblewrapSandbox",
    "cgroup_support",
    "default_hidden_paths",
    "DockerSandbox",
    "ExecutionCgroup",
    "ExecutionResult",
    "JobFolder",
    "make_sandbox",
    "OwnedFolder",
    "Sandbox",
    "SandboxInfrastructureError",
    "SandboxLimits",
    "SandboxUnavailableError",
    "SubprocessSandbox",
    "sweep_stale",
    "UnsafeSandboxWarning",
    "WeakLimitsWarning",
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
    """Names of the backends that can run here, best first (``"subprocess"``, always last, runs
    everywhere but isolates nothing: ``make_sandbox("auto")`` never picks it unasked)."""
    names = []
    if _bubblewrap_works():
        names.append(BubblewrapSandbox.name)
    if DockerSandbox.is_available():
        names.append(DockerSandbox.name)
    names.append(SubprocessSandbox.name)
    return names


_NO_ISOLATION_HELP = (
    "no isolating sandbox works here, and running agent-written code without isolation is "
    "never chosen silently. Install bubblewrap (`apt-get install -y bubblewrap`, as "
    "scripts/setup.sh does) or start a Docker daemon with the docker SDK installed "
    "(`pip install 'wmrl[docker]'`); or opt in to no isolation explicitly with "
    "make_sandbox('auto', allow_unsafe=True), make_sandbox('subprocess') or "
    "--sandbox subprocess"
)


def make_sandbox(
    backend: str = "auto",
    limits: SandboxLimits | None = None,
    *,
    allow_unsafe: bool = False,
    hidden_paths: Iterable[str | os.PathLike] | None = None,
) -> Sandbox:
    """Create a sandbox.

    Args:
        backend: ``"bubblewrap"``, ``"docker"``, ``"subprocess"`` or ``"auto"``: bubblewrap if
            it works here (probed once per process), else docker if a daemon answers, else --
            only with ``allow_unsafe`` -- subprocess (which warns that it does not isolate).
        limits: default :class:`SandboxLimits` of the sandbox.
        allow_unsafe: let ``"auto"`` fall back to the non-isolating subprocess backend.
        hidden_paths: host paths the isolating backends make unreadable inside (an empty
            read-only tmpfs over a folder, an empty file over a file) where a bind would
            otherwise expose them; ``None``: :func:`default_hidden_paths`. Passing a list
            replaces the default, so add ``*default_hidden_paths()`` to keep it. Ignored by
            ``"subprocess"``, which hides nothing.

    Returns:
        The sandbox; use it as a context manager or call ``close()``.

    Raises:
        ValueError: unknown backend name, or a relative hidden path.
        SandboxUnavailableError: the named backend cannot run here, or ``"auto"`` found no
            isolating backend and ``allow_unsafe`` is False (the message says how to fix).
    """
    name = backend.strip().lower()
    iso_kwargs = {"hidden_paths": hidden_paths}
    if name == "auto":
        errors = []
        for cls, works, missing in ((BubblewrapSandbox, _bubblewrap_works, "not installed or its probe failed"),
                                    (DockerSandbox, DockerSandbox.is_available, "SDK missing or no daemon answers")):
            if not works():
                errors.append(f"{cls.name}: {missing}")
                continue
            try:
                return cls(limits, **iso_kwargs)
            except SandboxUnavailableError as exc:
                errors.append(f"{cls.name}: {exc}")
        if allow_unsafe:
            return SubprocessSandbox(limits)
        raise SandboxUnavailableError(f"{_NO_ISOLATION_HELP} ({'; '.join(errors)}).")
    if name not in BACKENDS:
        valid = ", ".join(["auto", *BACKENDS])
        raise ValueError(f"unknown sandbox backend {backend!r}; valid names: {valid}")
    if name == SubprocessSandbox.name:
        return SubprocessSandbox(limits)
    return BACKENDS[name](limits, **iso_kwargs)
