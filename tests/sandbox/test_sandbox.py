"""Tests of the sandbox backends (``wmrl_envs.sandbox``).

The isolation tests run for every isolating backend that works here: ``bubblewrap`` (skipped
only where bwrap cannot run) and ``docker`` (skipped unless a daemon answers -- except where
``WMRL_REQUIRE_DOCKER=1``, as ``.ci/run`` sets once it started a daemon: then a missing daemon
fails them). Each runs a small hostile program and checks both what the program saw and that
the host is unchanged. The ``subprocess`` backend only gets the resource-limit tests (it
isolates nothing) and must warn.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

import wmrl_envs.sandbox as sandbox_pkg
from wmrl_envs.sandbox import (
    BACKENDS,
    BubblewrapSandbox,
    DockerSandbox,
    ExecutionResult,
    JobFolder,
    Sandbox,
    SandboxInfrastructureError,
    SandboxLimits,
    SandboxUnavailableError,
    SubprocessSandbox,
    UnsafeSandboxWarning,
    WeakLimitsWarning,
    available_backends,
    cgroup_support,
    default_hidden_paths,
    make_sandbox,
)
from wmrl_envs.sandbox.process import exit_and_signal, tasks_of_uid

__all__: list[str] = []

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


@pytest.fixture(scope="module", params=["bubblewrap", "docker"])
def isolating(request) -> Sandbox:
    sb = _make_isolating(request.param)
    yield sb
    sb.close()


def _make_unsafe() -> SubprocessSandbox:
    with pytest.warns(UnsafeSandboxWarning, match="NOT isolate"):
        return SubprocessSandbox(FAST)


@pytest.fixture(scope="module", params=["bubblewrap", "docker", "subprocess"])
def any_sandbox(request) -> Sandbox:
    """Every backend, for the resource-limit tests (subprocess must warn when built)."""
    sb = _make_unsafe() if request.param == "subprocess" else _make_isolating(request.param)
    yield sb
    sb.close()


@pytest.fixture
def job(tmp_path: Path) -> Path:
    d = tmp_path / "job"
    d.mkdir()
    return d


@pytest.fixture
def root_secret():
    """A hidden-labels file in /root (mode 700 on the host), when we may create one."""
    if os.geteuid() != 0 or not os.access("/root", os.W_OK):
        yield None
        return
    d = Path("/root") / f".wmrl_test_hidden_{uuid.uuid4().hex}"
    d.mkdir()
    f = d / "labels.csv"
    f.write_text("id,label\n1,SECRET-ROOT-LABEL\n")
    yield f
    f.unlink(missing_ok=True)
    d.rmdir()


# --------------------------------------------------------------------------- isolation
def test_network_is_unreachable(isolating: Sandbox, job: Path) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    port = server.getsockname()[1]
    try:
        # Sanity: the host itself can reach the server.
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        src = _program(f"""
            import socket
            def attempt(fn):
                try:
                    fn()
                    return "connected"
                except OSError as exc:
                    return type(exc).__name__
            report["outside"] = attempt(lambda: socket.create_connection(("1.1.1.1", 80), timeout=2).close())
            report["host_loopback"] = attempt(
                lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
            )
            def udp():
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.sendto(b"x", ("8.8.8.8", 53))
            report["udp"] = attempt(udp)
            def docker_sock():
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect("/var/run/docker.sock")
            report["docker_sock"] = attempt(docker_sock)
            report["dns"] = attempt(lambda: socket.getaddrinfo("example.com", 80))
        """)
        res = isolating.run_python(src, job)
        assert res.ok, res.stderr
        rep = _report(res)
        assert all(v != "connected" for v in rep.values()), rep
        assert set(rep) == {"outside", "host_loopback", "udp", "docker_sock", "dns"}
    finally:
        server.close()


def test_hidden_files_outside_job_are_unreadable(
    isolating: Sandbox, job: Path, tmp_path: Path, root_secret
) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    labels = hidden / "labels.csv"
    labels.write_text("id,label\n1,SECRET-TMP-LABEL\n")
    targets = [str(labels), str(Path(__file__).resolve()), "/proc/1/root" + str(labels)]
    if root_secret is not None:
        targets.append(str(root_secret))
    src = _program(f"""
        report["read"] = {{}}
        for p in {targets!r}:
            try:
                with open(p) as fh:
                    report["read"][p] = fh.read()
            except OSError as exc:
                report["read"][p] = type(exc).__name__
        report["listdir"] = {{}}
        for d in {[str(hidden), "/root", str(Path(__file__).resolve().parent)]!r}:
            try:
                report["listdir"][d] = os.listdir(d)
            except OSError as exc:
                report["listdir"][d] = type(exc).__name__
    """)
    res = isolating.run_python(src, job)
    assert res.ok, res.stderr
    rep = _report(res)
    for p, outcome in rep["read"].items():
        assert outcome in ("FileNotFoundError", "PermissionError"), (p, outcome)
    assert rep["listdir"][str(hidden)] in ("FileNotFoundError", "PermissionError")
    assert rep["listdir"][str(Path(__file__).resolve().parent)] in ("FileNotFoundError", "PermissionError")
    root_listing = rep["listdir"]["/root"]
    assert not any(".wmrl_test_hidden" in n for n in (root_listing if isinstance(root_listing, list) else []))
    assert "SECRET" not in res.stdout + res.stderr
    assert labels.read_text().endswith("SECRET-TMP-LABEL\n")


def test_writes_outside_job_fail_and_host_is_unchanged(isolating: Sandbox, job: Path, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex
    host_tmp_dir = tmp_path / "hostdir"
    host_tmp_dir.mkdir(mode=0o777)
    os.chmod(host_tmp_dir, 0o777)  # even world-writable on the host: must stay unreachable
    targets = [
        str(host_tmp_dir / f"escape_{tag}.txt"),
        f"/tmp/wmrl_escape_{tag}.txt",  # the sandbox's private /tmp: allowed there, not on host
        f"/usr/wmrl_escape_{tag}.txt",
        os.path.join(sys.prefix, f"wmrl_escape_{tag}.txt"),
        os.path.join(sys.base_prefix, f"wmrl_escape_{tag}.txt"),
        "/etc/passwd",
        f"/wmrl_escape_{tag}.txt",
    ]
    passwd_before = Path("/etc/passwd").read_bytes()
    src = _program(f"""
        report["write"] = {{}}
        for p in {targets!r}:
            try:
                with open(p, "a") as fh:
                    fh.write("pwned\\n")
                report["write"][p] = "ok"
            except OSError as exc:
                report["write"][p] = type(exc).__name__
        with open("inside.txt", "w") as fh:
            fh.write("fine")
    """)
    res = isolating.run_python(src, job)
    assert res.ok, res.stderr
    rep = _report(res)["write"]
    private_tmp = f"/tmp/wmrl_escape_{tag}.txt"
    assert rep[private_tmp] == "ok"  # the private tmpfs is writable ...
    for p, outcome in rep.items():
        if p != private_tmp:
            assert outcome != "ok", (p, outcome)
    for p in targets:  # ... and nothing appeared (or changed) on the host
        if p != "/etc/passwd":
            assert not os.path.exists(p), p
    assert Path("/etc/passwd").read_bytes() == passwd_before
    assert (job / "inside.txt").read_text() == "fine"


def test_fork_bomb_is_contained(isolating: Sandbox, job: Path) -> None:
    max_procs, wall = 16, 4.0
    baseline = tasks_of_uid(SANDBOX_UID)
    src = _program("""
        import time
        children = 0
        for _ in range(200):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            children += 1
        print(json.dumps({"children": children}), flush=True)
        while True:  # the real bomb
            try:
                os.fork()
            except OSError:
                pass
    """)
    t0 = time.monotonic()
    limits = SandboxLimits(wall_time_s=wall, cpu_time_s=30, memory_mb=512, max_processes=max_procs)
    marker = f"bomb-{os.getpid()}-{time.monotonic_ns()}"
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(isolating.run_python, src, job, limits=limits, env={"WMRL_TEST_MARKER": marker})
        seen = 0
        while not fut.done():  # the marker does find the bomb's processes while it runs
            seen = max(seen, _tasks_with_marker(SANDBOX_UID, marker))
            time.sleep(0.05)
        res = fut.result()
    assert seen > 0
    elapsed = time.monotonic() - t0
    assert res.timed_out and not res.ok and res.exit_code is None
    assert elapsed < wall + SLACK_S
    children = json.loads(res.stdout.splitlines()[0])["children"]
    assert children < max_procs
    if baseline == 0:  # RLIMIT_NPROC counts every task of the uid on the host
        assert children > 0
    # Every process of this sandbox is gone (other sandboxes may run as the same uid
    # concurrently, so its processes are told apart by a marker in their environment) and the
    # host can still start processes.
    assert _wait_marked_tasks_gone(SANDBOX_UID, marker) == 0
    assert subprocess.run(["true"], timeout=10).returncode == 0


def test_runs_as_unprivileged_uid_with_clean_env(isolating: Sandbox, job: Path, monkeypatch) -> None:
    monkeypatch.setenv("WMRL_TEST_HOST_SECRET", "hunter2")
    src = _program("""
        report["uid"] = os.getuid(); report["euid"] = os.geteuid(); report["gid"] = os.getgid()
        report["cwd"] = os.getcwd()
        report["env"] = dict(os.environ)
        report["caps"] = [l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1]
    """)
    res = isolating.run_python(src, job, env={"EXTRA": "1"})
    assert res.ok, res.stderr
    rep = _report(res)
    assert (rep["uid"], rep["euid"], rep["gid"]) == (SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
    assert int(rep["caps"], 16) == 0
    assert rep["cwd"] == "/workspace"
    env = rep["env"]
    assert "WMRL_TEST_HOST_SECRET" not in env and "hunter2" not in json.dumps(env)
    assert env["HOME"] == "/tmp" and env["EXTRA"] == "1"
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"


def test_special_files_left_in_job_folder_are_removed(isolating: Sandbox, job: Path, tmp_path: Path) -> None:
    secret = tmp_path / "labels.csv"
    secret.write_text("SECRET")
    src = _program(f"""
        os.symlink({str(secret)!r}, "submission.csv")
        os.mkfifo("pipe")
        os.makedirs("sub")
        os.symlink("/etc/passwd", "sub/link")
        with open("real.csv", "w") as fh:
            fh.write("ok")
    """)
    res = isolating.run_python(src, job)
    assert res.ok, res.stderr
    expected = ["submission.csv", "pipe", os.path.join("sub", "link")]
    assert sorted(res.extras["removed_special_files"]) == sorted(expected)
    assert not os.path.lexists(job / "submission.csv") and not os.path.lexists(job / "pipe")
    assert (job / "real.csv").read_text() == "ok"
    assert secret.read_text() == "SECRET"


# --------------------------------------------------------------------------- resource limits (all backends)
def test_memory_limit(any_sandbox: Sandbox, job: Path) -> None:
    src = _program("""
        chunks = []
        try:
            for _ in range(64):  # 64 x 32 MiB = 2 GiB
                chunks.append(bytearray(32 << 20))
        except MemoryError:
            report["allocated_mb"] = 32 * len(chunks)
            print(json.dumps(report), flush=True)
            sys.exit(3)
        report["allocated_mb"] = 32 * len(chunks)
    """)
    res = any_sandbox.run_python(src, job, limits=SandboxLimits(wall_time_s=60, cpu_time_s=60, memory_mb=256))
    assert not res.ok and not res.timed_out
    if res.exit_code == 3:  # MemoryError raised (RLIMIT_AS / RLIMIT_DATA)
        assert _report(res)["allocated_mb"] <= 256
    else:  # or killed by the cgroup OOM killer
        assert res.exit_code is None and res.signal == 9, (res.exit_code, res.signal, res.stderr[-2000:])


def test_infinite_loop_times_out(any_sandbox: Sandbox, job: Path) -> None:
    wall = 2.0
    limits = SandboxLimits(wall_time_s=wall, cpu_time_s=60)
    res = any_sandbox.run_python("while True:\n    pass\n", job, limits=limits)
    assert res.timed_out and res.exit_code is None and not res.ok
    assert wall - 0.1 <= res.wall_time_s <= wall + SLACK_S


def test_cpu_time_limit(any_sandbox: Sandbox, job: Path) -> None:
    limits = SandboxLimits(wall_time_s=30, cpu_time_s=1)
    res = any_sandbox.run_python("while True:\n    pass\n", job, limits=limits)
    assert not res.ok and not res.timed_out and res.exit_code is None
    assert res.signal in (24, 9)  # SIGXCPU at the soft limit, SIGKILL at the hard one
    assert res.wall_time_s < 30


def test_file_size_limit(any_sandbox: Sandbox, job: Path) -> None:
    src = _program("""
        try:
            with open("big.bin", "wb") as fh:
                for _ in range(8):
                    fh.write(b"0" * (1 << 20))
            report["outcome"] = "ok"
        except OSError as exc:
            report["outcome"] = type(exc).__name__
    """)
    res = any_sandbox.run_python(src, job, limits=SandboxLimits(wall_time_s=30, file_size_mb=2))
    assert res.ok, res.stderr
    assert _report(res)["outcome"] == "OSError"  # EFBIG
    assert (job / "big.bin").stat().st_size <= 2 << 20


def test_whole_process_group_killed_on_timeout(any_sandbox: Sandbox, job: Path, tmp_path: Path) -> None:
    # A background child that would write a marker after the time-out must die with its parent.
    src = textwrap.dedent("""
        import os, time
        if os.fork() == 0:
            time.sleep(1.5)
            open("late_marker", "w").write("alive")
            os._exit(0)
        while True:
            time.sleep(0.05)
    """)
    res = any_sandbox.run_python(src, job, limits=SandboxLimits(wall_time_s=1, cpu_time_s=30))
    assert res.timed_out
    time.sleep(1.5)
    assert not (job / "late_marker").exists()


def test_output_is_captured_and_truncated(any_sandbox: Sandbox, job: Path) -> None:
    src = "import sys\nprint('x' * 300_000)\nprint('END')\nprint('err-tail', file=sys.stderr)\nsys.exit(5)\n"
    res = any_sandbox.run_python(src, job)
    assert res.exit_code == 5 and not res.ok
    assert len(res.stdout.encode()) <= 64 * 1024 and res.stdout.rstrip().endswith("END")
    assert "err-tail" in res.stderr
    assert res.backend == any_sandbox.name


# --------------------------------------------------------------------------- a real solution
def test_sklearn_solution_writes_submission(any_sandbox: Sandbox, job: Path) -> None:
    rows = ["id,x1,x2,y"] + [f"{i},{i % 7},{(i * 3) % 5},{int(i % 7 > 3)}" for i in range(200)]
    (job / "train.csv").write_text("\n".join(rows) + "\n")
    (job / "test.csv").write_text("id,x1,x2\n" + "\n".join(f"{i},{i % 7},{i % 5}" for i in range(50)) + "\n")
    src = textwrap.dedent("""
        import os
        import numpy as np
        import pandas as pd
        from sklearn.ensemble import RandomForestClassifier
        train = pd.read_csv("train.csv"); test = pd.read_csv("test.csv")
        model = RandomForestClassifier(n_estimators=20, random_state=0).fit(train[["x1", "x2"]], train["y"])
        pred = model.predict(test[["x1", "x2"]])
        pd.DataFrame({"id": test["id"], "y": pred}).to_csv("submission.csv", index=False)
        print("uid", os.getuid(), "numpy", np.__version__)
    """)
    limits = SandboxLimits(wall_time_s=60, cpu_time_s=60, memory_mb=2048)
    res = any_sandbox.run_python(src, job, limits=limits)
    assert res.ok and res.exit_code == 0 and not res.timed_out, res.stderr[-3000:]
    sub = job / "submission.csv"
    assert sub.is_file() and not sub.is_symlink()
    lines = sub.read_text().splitlines()
    assert lines[0] == "id,y" and len(lines) == 51
    expected_uid = SANDBOX_UID if any_sandbox.isolates else os.getuid()
    assert f"uid {expected_uid} " in res.stdout
    assert sub.stat().st_uid == expected_uid


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


# --------------------------------------------------------------------------- whole-sandbox bounds
_FOUR_CHILDREN = _program("""
    import signal, time
    kids = []
    for i in range(4):
        pid = os.fork()
        if pid == 0:
            block = bytearray(200 << 20)  # 200 MiB, each page touched below
            for j in range(0, len(block), 4096):
                block[j] = 1
            open(f"held_{i}", "w").close()
            time.sleep(5)  # long enough that no two children could hold their block in turn
            os._exit(0)
        kids.append(pid)
    statuses = [os.waitpid(k, 0)[1] for k in kids]
    report["killed"] = sum(os.WIFSIGNALED(s) and os.WTERMSIG(s) == signal.SIGKILL for s in statuses)
    report["ok"] = sum(os.WIFEXITED(s) and os.WEXITSTATUS(s) == 0 for s in statuses)
""")


def _whole_sandbox_memory_check(sb: Sandbox, job: Path) -> None:
    limits = SandboxLimits(wall_time_s=60, cpu_time_s=60, memory_mb=256, max_processes=32)
    res = sb.run_python(_FOUR_CHILDREN, job, limits=limits)
    assert res.extras["oom_killed"] is True, (res.extras, res.stderr[-2000:])
    if res.ok:  # the parent survived and saw its children die
        rep = _report(res)
        assert rep["killed"] >= 3 and rep["ok"] <= 1, rep
    else:  # or the OOM killer took the parent too
        assert res.exit_code is None and res.signal == 9
    peak = res.extras.get("peak_memory_mb")
    if peak is not None:  # the kernel's own account of what the whole sandbox held
        assert peak <= 256 + 1, peak


def test_memory_limit_bounds_the_whole_sandbox(any_sandbox: Sandbox, job: Path) -> None:
    """Four children of 200 MiB each under memory_mb=256: at most one holds its block."""
    if any_sandbox.name != "docker":
        _require_cgroup()
    _whole_sandbox_memory_check(any_sandbox, job)


def test_fork_bomb_in_one_sandbox_does_not_starve_another(tmp_path: Path) -> None:
    """Two concurrent sandboxes of the same uid: each has its own process budget (a cgroup),
    not one RLIMIT_NPROC shared by every task of uid 65534 on the host."""
    _require_cgroup()
    sb = _make_isolating("bubblewrap")
    bomb_job, calm_job = tmp_path / "bomb", tmp_path / "calm"
    bomb_job.mkdir()
    calm_job.mkdir()
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    calm = _program("""
        import time
        kids = []
        for _ in range(8):
            pid = os.fork()
            if pid == 0:
                time.sleep(1)
                os._exit(0)
            kids.append(pid)
        report["children"] = len(kids)
        report["exits"] = [os.waitpid(k, 0)[1] for k in kids]
    """)
    marker = f"bomb-{uuid.uuid4().hex}"
    bomb_limits = SandboxLimits(wall_time_s=12, cpu_time_s=30, memory_mb=512, max_processes=16)
    calm_limits = SandboxLimits(wall_time_s=30, cpu_time_s=30, memory_mb=512, max_processes=16)
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(sb.run_python, bomb, bomb_job, limits=bomb_limits, env={"WMRL_TEST_MARKER": marker})
        deadline = time.monotonic() + 6
        while _tasks_with_marker(SANDBOX_UID, marker) < 14 and time.monotonic() < deadline:
            time.sleep(0.05)
        bombing = _tasks_with_marker(SANDBOX_UID, marker)
        res = sb.run_python(calm, calm_job, limits=calm_limits)
        still_bombing = not fut.done()
        bomb_res = fut.result()
    assert bombing >= 14 and still_bombing  # the bomb held its whole budget meanwhile
    assert res.ok, res.stderr[-2000:]
    rep = _report(res)
    assert rep["children"] == 8 and rep["exits"] == [0] * 8
    assert bomb_res.timed_out and res.extras["cgroup"] is True
    assert _wait_marked_tasks_gone(SANDBOX_UID, marker) == 0


def test_no_cgroup_warns_once_and_falls_back_to_rlimits(monkeypatch, job: Path) -> None:
    import wmrl_envs.sandbox.process as sp
    from wmrl_envs.sandbox.cgroup import CgroupSupport

    monkeypatch.setattr(sp, "cgroup_support", lambda: CgroupSupport(0, (), "read-only cgroupfs (test)"))
    monkeypatch.setattr(sp, "_warned_no_cgroup", False)
    with pytest.warns(WeakLimitsWarning, match="read-only cgroupfs.*RLIMIT_AS bounds each process"):
        with pytest.warns(UnsafeSandboxWarning):
            sb = SubprocessSandbox(FAST)
    res = sb.run_python("print('ok')", job)
    assert res.ok and res.extras["cgroup"] is False and res.extras["oom_killed"] is False


# --------------------------------------------------------------------------- job folder bounds
def test_job_folder_total_size_and_file_count_are_bounded(any_sandbox: Sandbox, tmp_path: Path) -> None:
    limits = SandboxLimits(wall_time_s=60, cpu_time_s=60, file_size_mb=4, workdir_size_mb=16, workdir_max_files=200)
    src = _program("""
        n = size = 0
        try:
            while n < 100_000:
                with open(f"f{n}.bin", "wb") as fh:
                    fh.write(b"x" * (1 << 20) if n < 64 else b"")
                n += 1
                size += (1 << 20) if n <= 64 else 0
        except OSError as exc:
            report["error"] = exc.errno
        report["files"] = n
    """)
    with JobFolder(tmp_path / "jobs", limits) as job:
        assert job.bounded == (os.geteuid() == 0)
        res = any_sandbox.run_python(src, job.path, limits=limits)
        entries = list(job.path.iterdir())
        total = sum(p.stat().st_size for p in entries)
    assert not (tmp_path / "jobs" / job.path.name).exists()
    if job.bounded:  # kernel-enforced: the program got ENOSPC and finished normally
        assert len(entries) <= 200 - 1 and total <= 16 << 20, (len(entries), total)
        assert res.ok, res.stderr[-2000:]
        assert _report(res)["error"] == 28
    else:  # the watchdog killed it
        assert res.extras["workdir_limit_exceeded"] in ("workdir_size_mb", "workdir_max_files")


def test_unbounded_job_folder_is_watched(any_sandbox: Sandbox, job: Path) -> None:
    """A plain folder (no tmpfs) still gets its bounds: the watchdog kills the run."""
    limits = SandboxLimits(wall_time_s=60, cpu_time_s=60, workdir_size_mb=64, workdir_max_files=300)
    # Without the watchdog this would create files until the wall-clock limit.
    src = "i = 0\nwhile True:\n    open(f'f{i}', 'w').close()\n    i += 1\n"
    res = any_sandbox.run_python(src, job, limits=limits)
    assert res.extras["workdir_limit_exceeded"] == "workdir_max_files"
    assert res.exit_code is None and res.signal == 9 and not res.timed_out
    assert len(list(job.iterdir())) > 300  # (checked every 0.2 s: it overshoots by what it wrote meanwhile)


def test_step_filling_its_folder_with_small_files_ends_within_the_limit(tmp_path: Path) -> None:
    """Clean-up is inside the time limit: a program that fills its job folder with small files
    and then sleeps is graded and cleaned up within wall_time_s plus a few seconds."""
    from wmrl_envs.envs.autoresearch.grading import evaluate

    sb = _make_isolating("bubblewrap")
    wall = 4.0
    limits = SandboxLimits(wall_time_s=wall, cpu_time_s=30, workdir_max_files=10_000)
    src = (
        "import os, time\n"
        "i = 0\n"
        "while True:\n"
        "    try:\n"
        "        os.makedirs(f'd{i // 1000}', exist_ok=True)\n"
        "        open(f'd{i // 1000}/f{i}', 'w').close()\n"
        "        i += 1\n"
        "    except OSError:\n"
        "        time.sleep(0.05)\n"
    )
    t0 = time.monotonic()
    g, kept = evaluate("house-prices", src, sb, workdir_root=tmp_path / "jobs", limits=limits)
    elapsed = time.monotonic() - t0
    assert g.status == "runtime_err" and kept is None
    assert elapsed <= wall + SLACK_S, elapsed
    assert [p.name for p in (tmp_path / "jobs").iterdir()] == []


# --------------------------------------------------------------------------- host paths and hidden paths
def test_no_host_job_or_checkout_path_visible_inside_bubblewrap(tmp_path: Path) -> None:
    sb = _make_isolating("bubblewrap")
    checkout = str(Path(__file__).resolve().parents[2])
    with JobFolder(tmp_path / "jobs", FAST) as job:
        src = _program("""
            texts = []
            for pid in os.listdir("/proc"):
                if pid.isdigit() or pid == "self":
                    for name in ("cmdline", "mountinfo", "environ", "cgroup"):
                        try:
                            with open(f"/proc/{pid}/{name}", "rb") as fh:
                                texts.append(fh.read().replace(b"\\0", b" ").decode(errors="replace"))
                        except OSError:
                            pass
            report["text"] = "\\n".join(texts)
            report["n"] = len(texts)
        """)
        res = sb.run_python(src, job.path)
        assert res.ok, res.stderr[-2000:]
        rep = _report(res)
        text = rep["text"]
        assert "/proc/1/cmdline" not in text and rep["n"] >= 4 and "bwrap" in text  # pid 1 was read
        assert str(job.path) not in text and str(tmp_path) not in text
        # The interpreter's prefixes are bound at their host paths and remain visible (a
        # checkout under /tmp, as in CI, puts them there); nothing else of the checkout or
        # of the host's /tmp is.
        for prefix in sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sb.python)}, key=len)[::-1]:
            text = text.replace(prefix, "<prefix>")
        assert "wmrl-bwrap-etc" not in text, [ln for ln in text.splitlines() if "wmrl-bwrap-etc" in ln][:5]
        leaked_tmp = [ln for ln in text.replace("/tmp/ ", "").splitlines() if "/tmp/" in ln]
        assert not leaked_tmp, leaked_tmp[:5]
        assert checkout not in text, [ln for ln in text.splitlines() if checkout in ln][:5]
        assert "process_api" not in text  # the host's cgroup path (a private cgroup namespace)


def test_hidden_paths_are_masked(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "data").mkdir(parents=True)
    (pkg / "data" / "rows.csv").write_text("SECRET-ROW\n")
    (pkg / "labels.txt").write_text("SECRET-LABEL\n")
    (pkg / "public.txt").write_text("public\n")
    for p in (tmp_path, pkg, pkg / "data"):
        os.chmod(p, 0o755)
    for p in (pkg / "data" / "rows.csv", pkg / "labels.txt", pkg / "public.txt"):
        os.chmod(p, 0o644)
    hidden = [str(pkg / "data"), str(pkg / "labels.txt"), *default_hidden_paths()]
    sb = BubblewrapSandbox(FAST, extra_ro_binds=[pkg], hidden_paths=hidden)
    probe_files = [str(pkg / "data" / "rows.csv"), str(pkg / "labels.txt"), str(pkg / "public.txt")]
    editable = [p for p in default_hidden_paths() if os.path.isfile(p)]
    src = _program(f"""
        def read(p):
            try:
                with open(p) as fh:
                    return fh.read()
            except OSError as exc:
                return type(exc).__name__
        report["read"] = {{p: read(p) for p in {probe_files + editable!r}}}
        try:
            report["listdir"] = os.listdir({str(pkg / "data")!r})
        except OSError as exc:
            report["listdir"] = type(exc).__name__
        try:
            import wmrl_envs
            report["wmrl_envs"] = wmrl_envs.__file__
        except ImportError as exc:
            report["wmrl_envs"] = "ImportError"
        import sklearn
        report["sklearn"] = sklearn.__version__
    """)
    job = tmp_path / "job"
    job.mkdir()
    res = sb.run_python(src, job)
    assert res.ok, res.stderr[-2000:]
    rep = _report(res)
    assert rep["read"][str(pkg / "public.txt")] == "public\n"
    assert rep["read"][str(pkg / "data" / "rows.csv")] in ("FileNotFoundError", "PermissionError")
    assert rep["read"][str(pkg / "labels.txt")] in ("", "PermissionError")
    assert rep["listdir"] in ([], "PermissionError")
    assert rep["wmrl_envs"] == "ImportError" and rep["sklearn"]
    checkout = str(Path(__file__).resolve().parents[2])
    for p in editable:  # the editable install's .pth / finder (they name the checkout)
        assert checkout not in rep["read"][p], p
    assert "SECRET" not in res.stdout + res.stderr


def test_hidden_paths_are_masked_in_docker(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "data").mkdir(parents=True)
    (pkg / "data" / "rows.csv").write_text("SECRET-ROW\n")
    (pkg / "public.txt").write_text("public\n")
    for p in (tmp_path, pkg, pkg / "data"):
        os.chmod(p, 0o755)
    sb = _make_docker(FAST, extra_ro_binds=[pkg], hidden_paths=[str(pkg / "data")])
    job = tmp_path / "job"
    job.mkdir()
    src = _program(f"""
        report["public"] = open({str(pkg / "public.txt")!r}).read()
        try:
            report["rows"] = open({str(pkg / "data" / "rows.csv")!r}).read()
        except OSError as exc:
            report["rows"] = type(exc).__name__
    """)
    res = sb.run_python(src, job)
    sb.close()
    assert res.ok, res.stderr[-2000:]
    rep = _report(res)
    assert rep["public"] == "public\n" and rep["rows"] in ("FileNotFoundError", "PermissionError")


def test_relative_hidden_path_is_rejected() -> None:
    with pytest.raises(ValueError, match="must be absolute"):
        BubblewrapSandbox(FAST, hidden_paths=["relative/data"])


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


def test_project_package_is_not_importable_by_default(isolating: Sandbox, job: Path) -> None:
    """With the default hidden paths, neither ``wmrl_envs`` nor the editable install's finder
    (which names the checkout) is readable inside."""
    editable = [p for p in default_hidden_paths() if os.path.isfile(p)]
    src = _program(f"""
        try:
            import wmrl_envs
            report["import"] = wmrl_envs.__file__
        except ImportError:
            report["import"] = "ImportError"
        report["read"] = {{}}
        for p in {editable!r}:
            try:
                report["read"][p] = open(p).read()
            except OSError as exc:
                report["read"][p] = type(exc).__name__
    """)
    res = isolating.run_python(src, job)
    assert res.ok, res.stderr[-2000:]
    rep = _report(res)
    assert rep["import"] == "ImportError"
    checkout = str(Path(__file__).resolve().parents[2])
    assert all(checkout not in text for text in rep["read"].values()), rep["read"]


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
