"""Tests of bounded job folders and of the removal of those a killed run left
(``wmrl_envs.sandbox.jobdirs``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from wmrl_envs.sandbox import JobFolder, OwnedFolder, SandboxLimits, sweep_stale
from wmrl_envs.sandbox.jobdirs import LOCK_SUFFIX, is_bounded

__all__: list[str] = []

ROOT = os.geteuid() == 0


def _run_and_get_killed(code: str, env: dict | None = None) -> list[str]:
    """Run ``code`` in a fresh interpreter that SIGKILLs itself at the end; returns its stdout lines."""
    script = textwrap.dedent(code) + "\nimport os, signal, sys\nsys.stdout.flush()\nos.kill(os.getpid(), signal.SIGKILL)\n"
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )
    assert proc.returncode == -9, proc.stderr[-3000:]
    return proc.stdout.split()


def test_folders_of_a_killed_owner_are_removed_by_the_next_one(tmp_path: Path) -> None:
    parent = tmp_path / "runs"
    owned_path, job_path = _run_and_get_killed(f"""
        from wmrl_envs.sandbox import JobFolder, OwnedFolder, SandboxLimits
        owned = OwnedFolder({str(parent)!r}, prefix="run-")
        job = JobFolder(owned.path / "jobs", SandboxLimits(workdir_size_mb=8, workdir_max_files=50))
        for i in range(20):
            (job.path / f"f{{i}}").write_text("x")
        print(owned.path, job.path)
    """)
    assert os.path.isdir(job_path) and len(os.listdir(job_path)) == 20
    assert os.path.ismount(job_path) == ROOT  # a tmpfs left mounted by the killed process
    live = OwnedFolder(parent, prefix="run-")  # the next start sweeps
    assert not os.path.exists(owned_path) and not os.path.exists(owned_path + LOCK_SUFFIX)
    assert not any(line.split()[4] == job_path for line in open("/proc/self/mountinfo"))
    assert sweep_stale(parent) == [] and live.path.is_dir()  # a live owner's folder stays
    live.remove()
    assert sorted(os.listdir(parent)) == []


def test_killed_environment_leaves_nothing_after_the_next_one_starts(tmp_path: Path, monkeypatch) -> None:
    """A killed run's AutoResearch job folders (its private root in the temporary folder) are
    removed when the next environment -- a new run, or a resumed one -- makes its own root."""
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (root,) = _run_and_get_killed("""
        from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
        from wmrl_envs.sandbox import JobFolder
        env = AutoResearchEnv(tasks=["house-prices"], sandbox="subprocess")
        root = env._workdir_root()
        job = JobFolder(root / "jobs")  # as if a step were running
        (job.path / "solution.py").write_text("print(1)")
        print(root)
    """, env={"TMPDIR": str(tmp)})
    assert Path(root).parent == tmp and len(list(Path(root, "jobs").iterdir())) == 2  # folder + lock
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    env = AutoResearchEnv(tasks=["house-prices"], sandbox="subprocess")
    mine = env._workdir_root()
    assert not os.path.exists(root)
    assert sorted(p.name for p in tmp.iterdir()) == sorted([mine.name, mine.name + LOCK_SUFFIX])
    env.close()
    assert list(tmp.iterdir()) == []


@pytest.mark.skipif(not ROOT, reason="tmpfs job folders need root")
def test_job_folder_is_a_bounded_tmpfs_and_removal_is_one_umount(tmp_path: Path) -> None:
    limits = SandboxLimits(workdir_size_mb=4, workdir_max_files=30)
    with JobFolder(tmp_path, limits) as job:
        assert job.bounded and is_bounded(job.path, limits)
        assert not is_bounded(job.path, SandboxLimits(workdir_size_mb=2, workdir_max_files=30))
        made = 0
        with pytest.raises(OSError) as err:
            for i in range(100):
                (job.path / f"f{i}").write_text("")
                made += 1
        assert err.value.errno == 28 and made == 29  # 30 inodes, the folder itself is one
        st = os.statvfs(job.path)
        assert st.f_blocks * st.f_frsize == 4 << 20
    assert not job.path.exists() and list(tmp_path.iterdir()) == []


def test_keep_copies_a_tmpfs_job_folder_to_a_plain_folder(tmp_path: Path) -> None:
    job = JobFolder(tmp_path, SandboxLimits())
    (job.path / "sub").mkdir()
    (job.path / "sub" / "a.txt").write_text("kept")
    kept = job.keep()
    assert (kept / "sub" / "a.txt").read_text() == "kept" and not os.path.ismount(kept)
    assert sweep_stale(tmp_path) == [] and kept.is_dir()  # kept folders are never swept
    if ROOT:
        assert kept != job.path and not job.path.exists()


def test_a_forked_child_never_removes_its_parents_folders(tmp_path: Path) -> None:
    owned = OwnedFolder(tmp_path, prefix="run-")
    job = JobFolder(owned.path / "jobs")
    pid = os.fork()
    if pid == 0:  # the child exits through the finalizers / __del__ of its copies
        owned.remove()
        job.remove()
        os._exit(0)
    os.waitpid(pid, 0)
    assert owned.path.is_dir() and job.path.is_dir() and owned.lock_path.exists()
    assert sweep_stale(tmp_path) == []  # still locked by this process
    job.remove()
    owned.remove()
    assert list(tmp_path.iterdir()) == []


def test_job_folder_without_mount_permission_warns_and_is_plain(tmp_path: Path, monkeypatch) -> None:
    import wmrl_envs.sandbox.jobdirs as jd
    from wmrl_envs.sandbox import WeakLimitsWarning

    monkeypatch.setattr(jd, "_mount_tmpfs", lambda *a: "mounting a tmpfs needs root (test)")
    monkeypatch.setattr(jd, "_warned", set())
    with pytest.warns(WeakLimitsWarning, match="needs root.*watchdog"):
        job = JobFolder(tmp_path, SandboxLimits())
    assert not job.bounded and not os.path.ismount(job.path)
    assert not is_bounded(job.path, SandboxLimits())
    job.remove()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not ROOT, reason="tmpfs job folders need root")
def test_stale_tmpfs_job_folders_anywhere_are_unmounted(tmp_path: Path) -> None:
    """A killed process's job folder inside a plain temporary folder (not an OwnedFolder, so
    no parent sweep reaches it) is unmounted by the next process's first JobFolder."""
    from wmrl_envs.sandbox.jobdirs import sweep_stale_mounts

    (job_path,) = _run_and_get_killed(f"""
        from wmrl_envs.sandbox import JobFolder
        job = JobFolder({str(tmp_path / "plain" / "jobs")!r})
        print(job.path)
    """)
    assert os.path.ismount(job_path)
    removed = sweep_stale_mounts()
    assert Path(job_path) in removed and not os.path.exists(job_path)
    assert list((tmp_path / "plain" / "jobs").iterdir()) == []


@pytest.mark.skipif(not ROOT, reason="tmpfs job folders need root")
def test_bounds_too_small_for_the_public_files_say_so(tmp_path: Path) -> None:
    from wmrl_envs.envs.autoresearch.env import evaluate
    from wmrl_envs.sandbox import Sandbox

    class NeverRuns(Sandbox):
        def run_python(self, *a, **k):  # pragma: no cover - must not be reached
            raise AssertionError("the program must not run")

    limits = SandboxLimits(workdir_size_mb=1)  # the sparse-linear files take ~2.7 MiB
    with pytest.raises(ValueError, match=r"workdir_size_mb=1.*public files of task 'sparse-linear'"):
        evaluate("sparse-linear", "print(1)", NeverRuns(limits), workdir_root=tmp_path, limits=limits)
    assert list(tmp_path.iterdir()) == []
