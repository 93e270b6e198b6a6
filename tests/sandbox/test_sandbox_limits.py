"""Resource limits of every sandbox backend (``wmrl_envs.sandbox``: bubblewrap, docker and
subprocess): memory, wall and CPU time, file size, the process group, output capture, the
whole-sandbox bounds (cgroup), the job folder's size and file count, and a real scikit-learn
solution run under them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
import os
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from wmrl_envs.sandbox import (
    JobFolder,
    Sandbox,
    SandboxLimits,
    SubprocessSandbox,
    UnsafeSandboxWarning,
    WeakLimitsWarning,
)

from sandbox_helpers import (SANDBOX_UID, SLACK_S, FAST, _program, _report, _tasks_with_marker, _wait_marked_tasks_gone,
                             _make_isolating, _require_cgroup)

__all__: list[str] = []


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
    from wmrl_envs.envs.autoresearch.env import evaluate

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
