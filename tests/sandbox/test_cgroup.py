"""Tests of the per-execution cgroup (``wmrl_envs.sandbox.cgroup``).

The hierarchy detection is tested on fake ``mountinfo`` / ``/proc/self/cgroup`` files and fake
cgroup folders for both versions (this machine may offer only one); the real hierarchy, where
one is writable, is tested end to end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from wmrl_envs.sandbox.cgroup import CgroupSupport, ExecutionCgroup, _detect, cgroup_support

__all__: list[str] = []


def _files(tmp_path: Path, mountinfo: list[str], cgroup: list[str]) -> tuple[str, str]:
    mi, cg = tmp_path / "mountinfo", tmp_path / "cgroup"
    mi.write_text("\n".join(mountinfo) + "\n")
    cg.write_text("\n".join(cgroup) + "\n")
    return str(mi), str(cg)


def test_detects_cgroup_v2_and_enables_controllers_for_the_child(tmp_path: Path) -> None:
    root = tmp_path / "unified"
    own = root / "user.slice" / "me"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu io memory pids\n")
    mi, cg = _files(
        tmp_path,
        [f"41 31 0:38 / {root} rw,relatime - cgroup2 cgroup2 rw"],
        ["0::/user.slice/me"],
    )
    support = _detect(mi, cg)
    assert support == CgroupSupport(2, (str(own),))
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids"
    ex = ExecutionCgroup(memory_mb=256, max_pids=18, support=support)
    (folder,) = ex.folders
    assert Path(folder).parent == own
    assert Path(folder, "memory.max").read_text() == str(256 << 20)
    assert Path(folder, "pids.max").read_text() == "18"
    Path(folder, "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 2\n")
    assert ex.oom_kills() == 2


def test_cgroup_v2_falls_back_to_the_root_when_our_group_cannot_delegate(tmp_path: Path) -> None:
    """Our group holds processes, so controllers cannot be enabled below it (EBUSY; simulated
    by an unwritable cgroup.subtree_control): the hierarchy's root, which has them, is used."""
    root = tmp_path / "unified"
    own = root / "session-1.scope"
    own.mkdir(parents=True)
    for d in (root, own):
        (d / "cgroup.controllers").write_text("memory pids\n")
    (own / "cgroup.subtree_control").mkdir()  # open(..., "w") fails
    (root / "cgroup.subtree_control").write_text("cpu memory pids\n")
    mi, cg = _files(tmp_path, [f"41 31 0:38 / {root} rw - cgroup2 cgroup2 rw"], ["0::/session-1.scope"])
    support = _detect(mi, cg)
    assert support == CgroupSupport(2, (str(root),))
    assert (root / "cgroup.subtree_control").read_text() == "cpu memory pids\n"  # left as it was


def test_detects_cgroup_v1_memory_and_pids_under_our_own_groups(tmp_path: Path) -> None:
    mem, pids = tmp_path / "memory", tmp_path / "pids"
    (mem / "process_api" / "abc").mkdir(parents=True)
    pids.mkdir()
    mi, cg = _files(
        tmp_path,
        [
            f"35 31 0:32 / {mem} rw,relatime - cgroup cgroup rw,memory",
            f"39 31 0:36 / {pids} rw,relatime - cgroup cgroup rw,pids",
            f"41 31 0:38 / {tmp_path / 'unified'} rw,relatime - cgroup2 cgroup2 rw",
        ],
        ["8:pids:/", "4:memory:/process_api/abc", "0::/"],
    )
    support = _detect(mi, cg)  # v2 has no controllers here (no cgroup.controllers): v1 is used
    assert support == CgroupSupport(1, (str(mem / "process_api" / "abc"), str(pids)))
    ex = ExecutionCgroup(memory_mb=64, max_pids=5, support=support)
    m, p = (Path(f) for f in ex.folders)
    assert (m / "memory.limit_in_bytes").read_text() == str(64 << 20)
    assert not (m / "memory.memsw.limit_in_bytes").exists()  # optional: only where swap is accounted
    assert (p / "pids.max").read_text() == "5"
    (m / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    assert ex.oom_kills() == 3


def test_cgroup_namespace_mount_root_is_stripped(tmp_path: Path) -> None:
    """In a container the hierarchy is mounted at our group's path: its root is that path."""
    mem, pids = tmp_path / "memory", tmp_path / "pids"
    mem.mkdir()
    pids.mkdir()
    mi, cg = _files(
        tmp_path,
        [
            f"35 31 0:32 /docker/123 {mem} rw - cgroup cgroup rw,memory",
            f"39 31 0:36 /docker/123 {pids} rw - cgroup cgroup rw,pids",
        ],
        ["8:pids:/docker/123", "4:memory:/docker/123"],
    )
    assert _detect(mi, cg) == CgroupSupport(1, (str(mem), str(pids)))


def test_no_writable_hierarchy_says_why(tmp_path: Path) -> None:
    mi, cg = _files(tmp_path, ["22 1 0:5 / /proc rw - proc proc rw"], ["0::/"])
    support = _detect(mi, cg)
    assert not support.available and "no cgroup v2 hierarchy" in support.reason
    with pytest.raises(RuntimeError, match="no usable cgroup"):
        ExecutionCgroup(64, 5, support=support)


def test_real_cgroup_bounds_a_process_tree() -> None:
    support = cgroup_support()
    if not support.available:
        if os.geteuid() == 0:
            pytest.fail(f"root but no usable cgroup: {support.reason}")
        pytest.skip(support.reason)
    ex = ExecutionCgroup(memory_mb=64, max_pids=4)
    code = (
        "import os, time\n"
        "n = 0\n"
        "for _ in range(10):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            os.close(1); os.close(2); time.sleep(60); os._exit(0)\n"
        "        n += 1\n"
        "    except OSError:\n"
        "        break\n"
        "print(n, flush=True)\n"
        "b = bytearray(128 << 20)\n"  # beyond 64 MiB: OOM-killed
        "for i in range(0, len(b), 4096): b[i] = 1\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], preexec_fn=ex.join, capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["3"]  # pids.max = 4: the parent and three children
    assert proc.returncode == -9 and ex.oom_kills() == 1
    assert ex.peak_memory_mb() <= 64 + 1e-6
    assert len(ex.pids()) == 3  # the sleeping children are still in the group ...
    assert ex.remove() and not any(os.path.exists(f) for f in ex.folders)  # ... until removed
