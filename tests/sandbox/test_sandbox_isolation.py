"""Isolation of the sandbox backends (``wmrl_envs.sandbox.bubblewrap``, ``.docker``): network,
hidden files, writes outside the job folder, fork bombs, the unprivileged uid, special files,
host and hidden paths, and the project package kept out.

The isolation tests run for every isolating backend that works here: ``bubblewrap`` (skipped
only where bwrap cannot run) and ``docker`` (skipped unless a daemon answers -- except where
``WMRL_REQUIRE_DOCKER=1``, as ``.ci/run`` sets once it started a daemon: then a missing daemon
fails them). Each runs a small hostile program and checks both what the program saw and that
the host is unchanged. The ``subprocess`` backend isolates nothing and is not tested here.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from wmrl_envs.sandbox import BubblewrapSandbox, JobFolder, Sandbox, SandboxLimits, default_hidden_paths
from wmrl_envs.sandbox.process import tasks_of_uid

from sandbox_helpers import (SANDBOX_UID, SLACK_S, FAST, _program, _report, _tasks_with_marker, _wait_marked_tasks_gone,
                             _make_isolating, _make_docker)

__all__: list[str] = []


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
