"""Helpers the sandbox tests share (imported as ``sandbox_helpers``: pytest puts each test
folder on ``sys.path``): the fast limits, the report-printing program wrapper, the
backend makers that skip (or fail, where the backend must work) and the host-task counters.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
import time

import pytest

from wmrl_envs.sandbox import (
    BubblewrapSandbox,
    DockerSandbox,
    ExecutionResult,
    Sandbox,
    SandboxLimits,
    SandboxUnavailableError,
    SubprocessSandbox,
    UnsafeSandboxWarning,
    cgroup_support,
)
from wmrl_envs.sandbox.process import tasks_of_uid

__all__ = [
    "SANDBOX_UID",
    "SLACK_S",
    "FAST",
    "_program",
    "_report",
    "_tasks_with_marker",
    "_wait_marked_tasks_gone",
    "_make_isolating",
    "_make_docker",
    "_require_cgroup",
    "_make_unsafe",
]

SANDBOX_UID = 65534
# Generous slack for a noisy 2-core machine.
SLACK_S = 10.0
FAST = SandboxLimits(wall_time_s=30, cpu_time_s=30, memory_mb=1024, max_processes=32)


# --------------------------------------------------------------------------- helpers
def _program(body: str) -> str:
    """Wrap ``body`` so that it prints its ``report`` dict as JSON on the last line."""
    return "import json, os, sys\nreport = {}\n" + textwrap.dedent(body) + "\nprint(json.dumps(report))\n"


def _report(result: ExecutionResult) -> dict:
    lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
    assert lines, f"no output; exit={result.exit_code} stderr={result.stderr[-2000:]}"
    return json.loads(lines[-1])


def _tasks_with_marker(uid: int, marker: str) -> int:
    """Host tasks of ``uid`` whose environment contains ``marker`` (one sandbox's processes,
    not those of other sandboxes that may run as the same uid at the same time)."""
    return tasks_of_uid(uid, environ_marker=marker.encode())


def _wait_marked_tasks_gone(uid: int, marker: str, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        n = _tasks_with_marker(uid, marker)
        if n == 0 or time.monotonic() > deadline:
            return n
        time.sleep(0.1)


def _make_isolating(name: str) -> Sandbox:
    if name == "bubblewrap":
        try:
            return BubblewrapSandbox(FAST)
        except SandboxUnavailableError as exc:
            if os.environ.get("CI") or shutil.which("bwrap"):
                # bwrap is installed (CI installs it): it not working is a bug, not a skip.
                pytest.fail(f"bubblewrap is installed but does not work: {exc}")
            pytest.skip(f"bubblewrap unavailable here: {exc}")
    if name == "docker":
        return _make_docker(FAST)
    raise AssertionError(name)


def _make_docker(limits: SandboxLimits, **kwargs) -> DockerSandbox:
    """A Docker sandbox; skips without a daemon unless ``WMRL_REQUIRE_DOCKER=1`` (CI with a
    daemon it started), where a missing daemon is a failure."""
    if not DockerSandbox.is_available():
        why = "docker backend: SDK missing or no Docker daemon reachable (start dockerd to test it)"
        if os.environ.get("WMRL_REQUIRE_DOCKER") == "1":
            pytest.fail(f"WMRL_REQUIRE_DOCKER=1 but {why}")
        pytest.skip(why)
    return DockerSandbox(limits, **kwargs)


def _require_cgroup() -> None:
    """Skip where no cgroup can be made (non-root); as root -- CI -- that is a failure."""
    support = cgroup_support()
    if not support.available:
        if os.geteuid() == 0:
            pytest.fail(f"running as root but no cgroup is usable: {support.reason}")
        pytest.skip(f"no writable cgroup here: {support.reason}")


def _make_unsafe() -> SubprocessSandbox:
    with pytest.warns(UnsafeSandboxWarning, match="NOT isolate"):
        return SubprocessSandbox(FAST)
