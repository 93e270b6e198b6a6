"""Choosing and building a sandbox backend (``wmrl_envs.sandbox.make_sandbox``), the errors of
a missing or broken backend (unavailable, infrastructure failures), the program's own traceback
and exit status, and the reading of each backend's return code (``wmrl_envs.sandbox.process``)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import wmrl_envs.sandbox as sandbox_pkg
from wmrl_envs.sandbox import (
    BACKENDS,
    BubblewrapSandbox,
    DockerSandbox,
    Sandbox,
    SandboxInfrastructureError,
    SandboxLimits,
    SandboxUnavailableError,
    SubprocessSandbox,
    UnsafeSandboxWarning,
    available_backends,
    make_sandbox,
)
from wmrl_envs.sandbox.process import exit_and_signal

from sandbox_helpers import FAST, _make_isolating

__all__: list[str] = []


# --------------------------------------------------------------------------- API / selection
def test_subprocess_backend_warns_and_does_not_isolate() -> None:
    with pytest.warns(UnsafeSandboxWarning):
        sb = SubprocessSandbox()
    assert sb.isolates is False and issubclass(UnsafeSandboxWarning, UserWarning)
    with pytest.warns(UnsafeSandboxWarning):
        assert make_sandbox("subprocess").name == "subprocess"


def test_make_sandbox_names_and_auto(job: Path) -> None:
    with pytest.raises(ValueError, match="bubblewrap.*docker.*subprocess"):
        make_sandbox("firejail")
    names = available_backends()
    assert names[-1] == "subprocess" and set(names) <= set(BACKENDS)
    if names[0] == "subprocess":
        with pytest.raises(SandboxUnavailableError, match="allow_unsafe"):
            make_sandbox("auto")
        with pytest.warns(UnsafeSandboxWarning):
            sb = make_sandbox("auto", allow_unsafe=True)
    else:
        sb = make_sandbox("auto", limits=SandboxLimits(wall_time_s=7))
        assert sb.isolates and sb.limits.wall_time_s == 7
    assert sb.name == names[0]
    with sb:
        res = sb.run_python("print(6 * 7)", job)
    assert res.ok and res.stdout.strip() == "42" and res.wall_time_s > 0


def test_bad_arguments(isolating: Sandbox, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        isolating.run_python("print(1)", tmp_path / "missing")
    with pytest.raises(ValueError):
        isolating.run_python("print(1)", tmp_path, filename="../escape.py")


def test_missing_bwrap_is_reported(monkeypatch) -> None:
    import wmrl_envs.sandbox.bubblewrap as bw

    monkeypatch.setattr(bw.shutil, "which", lambda name: None)
    with pytest.raises(SandboxUnavailableError, match="apt-get install -y bubblewrap"):
        BubblewrapSandbox()


def test_missing_docker_sdk_or_daemon_is_reported(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "docker", None)  # import docker -> ImportError
    with pytest.raises(SandboxUnavailableError, match="pip install"):
        DockerSandbox()
    assert DockerSandbox.is_available() is False


def test_unreachable_docker_daemon_is_reported(monkeypatch, tmp_path: Path) -> None:
    pytest.importorskip("docker")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    with pytest.raises(SandboxUnavailableError, match="dockerd"):
        DockerSandbox()


def test_auto_never_falls_back_to_no_isolation_unless_asked(monkeypatch) -> None:
    # Neither isolating backend works: "auto" refuses and says how to install one or opt in.
    monkeypatch.setattr(sandbox_pkg, "_bubblewrap_works", lambda: False)
    monkeypatch.setattr(DockerSandbox, "is_available", classmethod(lambda cls: False))
    with pytest.raises(SandboxUnavailableError) as err:
        make_sandbox("auto")
    msg = str(err.value)
    assert "apt-get install -y bubblewrap" in msg and "Docker" in msg and "allow_unsafe=True" in msg
    assert "make_sandbox('subprocess')" in msg
    with pytest.warns(UnsafeSandboxWarning):
        assert make_sandbox("auto", allow_unsafe=True).name == "subprocess"
    with pytest.warns(UnsafeSandboxWarning):  # naming it is the other explicit opt-in
        assert make_sandbox("subprocess").name == "subprocess"
    # The environment's default ("auto") follows: the first execution raises.
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv

    env = AutoResearchEnv(tasks=["house-prices"])
    with pytest.raises(SandboxUnavailableError, match="allow_unsafe"):
        env.sandbox
    env.close()



# --------------------------------------------------------------------------- infrastructure failures
def test_sandbox_that_cannot_start_raises_infrastructure_error(job: Path) -> None:
    sb = _make_isolating("bubblewrap")
    good_setpriv, good_python = sb.setpriv, sb.python
    try:
        if sb.as_root:
            sb.setpriv = "/nonexistent/setpriv"
            with pytest.raises(SandboxInfrastructureError, match="did not start"):
                sb.run_python("print(1)", job)
            sb.setpriv = good_setpriv
        sb.python = "/nonexistent/python3"
        with pytest.raises(SandboxInfrastructureError, match="did not start"):
            sb.run_python("print(1)", job)
        sb.python = good_python
        sb.bwrap = "/nonexistent/bwrap"
        with pytest.raises(SandboxInfrastructureError):
            sb.run_python("print(1)", job)
    finally:
        sb.setpriv, sb.python, sb.bwrap = good_setpriv, good_python, shutil.which("bwrap")
    assert issubclass(SandboxInfrastructureError, SandboxUnavailableError)


def test_program_imitating_a_sandbox_failure_is_still_the_programs_outcome(any_sandbox: Sandbox, job: Path) -> None:
    src = "import sys\nsys.stderr.write('bwrap: Can\\'t mount proc on /newroot/proc: Operation not permitted\\n')\nsys.exit(1)\n"
    res = any_sandbox.run_python(src, job)
    assert res.exit_code == 1 and not res.ok and "bwrap_error" not in res.extras


def test_docker_daemon_gone_mid_run_raises_infrastructure_error(job: Path) -> None:
    docker = pytest.importorskip("docker")

    class GoneContainers:
        def create(self, *a, **k):
            raise docker.errors.APIError("daemon gone (test)")

    class FakeClient:
        containers = GoneContainers()

        def ping(self):
            return True

        def close(self):
            pass

    sb = DockerSandbox.__new__(DockerSandbox)
    Sandbox.__init__(sb, FAST)
    sb._docker, sb.python, sb.uid, sb.gid, sb.cpus = docker, sys.executable, 65534, 65534, None
    sb.hidden_paths, sb.client, sb._own_client, sb.image = [], FakeClient(), False, "wmrl-sandbox:test"
    sb._binds = [("/usr", "/usr")]
    with pytest.raises(SandboxInfrastructureError, match="daemon gone"):
        sb.run_python("print(1)", job)

    # The daemon dies while the program runs: waiting, killing and removing all fail.
    from requests.exceptions import ConnectionError as RequestsConnectionError

    class DyingContainer:
        def start(self):
            pass

        def wait(self, timeout=None):
            raise RequestsConnectionError("connection refused (daemon died, test)")

        kill = remove = logs = reload = wait

    class DyingContainers:
        def create(self, *a, **k):
            return DyingContainer()

    sb.client.containers = DyingContainers()
    with pytest.raises(SandboxInfrastructureError, match="daemon died"):
        sb.run_python("print(1)", job)



def test_traceback_is_that_of_python_solution_py(any_sandbox: Sandbox, job: Path, tmp_path: Path) -> None:
    """The start-up handshake leaves no trace in what the program prints: its traceback is
    exactly that of ``python solution.py`` (compared with a plain run on the host)."""
    src = "def f():\n    raise RuntimeError('boom')\n\ntry:\n    f()\nexcept RuntimeError as e:\n    raise ValueError('x') from e\n"
    ref_dir = tmp_path / "reference"
    ref_dir.mkdir()
    (ref_dir / "solution.py").write_text(src)
    ref = subprocess.run([sys.executable, "solution.py"], cwd=ref_dir, capture_output=True, text=True, timeout=60)
    res = any_sandbox.run_python(src, job)
    where = "/workspace" if any_sandbox.isolates else str(job.resolve())
    assert res.exit_code == ref.returncode == 1
    assert "<string>" not in res.stderr
    assert res.stderr == ref.stderr.replace(str(ref_dir.resolve()), where)


def test_exit_and_signal_reads_each_backends_return_code() -> None:
    """One reading of a raw return code for the three backends (issue 26: it was written
    three times): Popen's -N (subprocess, bwrap killed), a shell's 128 + N (bwrap, Docker),
    and a time-out (no exit code; SIGKILL unless another signal was seen)."""
    assert exit_and_signal(3, False) == (3, None)
    assert exit_and_signal(-9, False) == (None, 9)
    assert exit_and_signal(137, False) == (137, None)  # subprocess: a plain exit status
    assert exit_and_signal(137, False, shell_codes=True) == (None, 9)
    assert exit_and_signal(-1, False, negative_is_signal=False, shell_codes=True) == (-1, None)  # Docker
    assert exit_and_signal(0, True) == (None, int(signal.SIGKILL))
    assert exit_and_signal(143, True, shell_codes=True) == (None, 15)
