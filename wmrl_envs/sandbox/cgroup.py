"""Per-execution cgroups: one memory and process bound for a sandbox's whole process tree, and
its CPU-seconds.

Contents:
    * :class:`ExecutionCgroup` -- the cgroup(s) of one execution: create with limits, join from
      the child before ``exec``, read the out-of-memory count, peak use and CPU-seconds, kill
      and remove.
    * :func:`cgroup_support` -- which hierarchy this process can use (cached), or why none.

Both cgroup versions are supported. The writable hierarchy is found from ``/proc/self/cgroup``
and ``/proc/self/mountinfo``: with cgroup v2 (one unified hierarchy with the ``memory`` and
``pids`` controllers) the execution's group is a child of this process's own group where the
controllers can be delegated there, else of the hierarchy's root (a group holding processes
cannot delegate them: "no internal processes"); with cgroup v1 one child is made in the ``memory`` hierarchy and one in the ``pids`` hierarchy,
each under this process's own group there, and one in the ``cpuacct`` hierarchy where it is
mounted and writable (for the CPU-seconds; optional). Needs write access to those folders (root, or a
delegated sub-tree); :func:`cgroup_support` says when there is none.

Limits written: memory ``memory_mb`` MiB with no swap (v2 ``memory.max`` +
``memory.swap.max = 0``; v1 ``memory.limit_in_bytes`` and, if swap accounting exists,
``memory.memsw.limit_in_bytes``); processes ``pids.max``. Exceeding the memory bound gets a
process of the group killed by the kernel's OOM killer (counted by :meth:`ExecutionCgroup.oom_kills`);
``fork``/``clone`` beyond ``pids.max`` fails with ``EAGAIN``.

CPU-seconds (:meth:`ExecutionCgroup.cpu_seconds`): user + system time of every task that ran in
the group, the whole sandboxed process tree (programs that left the process group with
``setsid`` included): v2 ``cpu.stat`` ``usage_usec`` (present whether or not the ``cpu``
controller is enabled), v1 ``cpuacct.usage`` (ns). It is read when the group is empty, just
before :meth:`ExecutionCgroup.remove` deletes it.
"""

from __future__ import annotations

import itertools
import os
import signal as _signal
import threading
import time
from dataclasses import dataclass

__all__ = ["ExecutionCgroup", "CgroupSupport", "cgroup_support"]

_PREFIX = "wmrl-sbx-"
_counter = itertools.count()
_lock = threading.Lock()
_support: "CgroupSupport | None" = None


@dataclass(frozen=True)
class CgroupSupport:
    """Where execution cgroups can be made.

    Attributes:
        version: ``2``, ``1`` or ``0`` (none usable).
        parents: folders under which execution groups are created (v2: one; v1: the memory
            and the pids folder, then the cpuacct folder where that hierarchy is usable).
        reason: why none is usable (``""`` when one is).
    """

    version: int
    parents: tuple[str, ...]
    reason: str = ""

    @property
    def available(self) -> bool:
        return self.version in (1, 2)


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def _mounts(mountinfo: str = "/proc/self/mountinfo") -> list[tuple[str, str, str, set[str]]]:
    """(mount point, mount root, fs type, super options) of cgroup file systems."""
    out = []
    with open(mountinfo) as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            lf, rf = left.split(), right.split()
            if len(lf) < 5 or len(rf) < 3 or rf[0] not in ("cgroup", "cgroup2"):
                continue
            out.append((_unescape(lf[4]), _unescape(lf[3]), rf[0], set(rf[2].split(","))))
    return out


def _own_paths(proc_cgroup: str = "/proc/self/cgroup") -> dict[str, str]:
    """Controller (``""`` for v2) -> this process's cgroup path."""
    out: dict[str, str] = {}
    with open(proc_cgroup) as fh:
        for line in fh:
            parts = line.rstrip("\n").split(":", 2)
            if len(parts) != 3:
                continue
            _, ctrls, path = parts
            for c in ctrls.split(",") if ctrls else [""]:
                out[c] = path
    return out


def _folder(mount_point: str, mount_root: str, own: str) -> str | None:
    """The host folder of cgroup path ``own`` in a hierarchy mounted with root ``mount_root``."""
    root = mount_root.rstrip("/")
    if root and not (own == root or own.startswith(root + "/")):
        return None  # our group is outside what this mount shows
    rel = own[len(root):].lstrip("/")
    return os.path.join(mount_point, rel) if rel else mount_point


def _writable(folder: str) -> bool:
    probe = os.path.join(folder, f"{_PREFIX}probe-{os.getpid()}-{next(_counter)}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    try:
        os.rmdir(probe)
    except OSError:
        pass
    return True


def _v2_usable(folder: str) -> tuple[bool, str]:
    """Whether execution groups with memory and pids limits can be made under ``folder``."""
    try:
        with open(os.path.join(folder, "cgroup.controllers")) as fh:
            ctrls = set(fh.read().split())
    except OSError:
        return False, f"{folder} is not a cgroup v2 folder"
    if not {"memory", "pids"} <= ctrls:
        return False, f"cgroup v2 at {folder} lacks the memory/pids controllers ({sorted(ctrls)})"
    if not _writable(folder):
        return False, f"cgroup v2 folder {folder} is not writable by uid {os.geteuid()}"
    try:
        with open(os.path.join(folder, "cgroup.subtree_control")) as fh:
            enabled = set(fh.read().split())
    except OSError:
        enabled = set()
    if {"memory", "pids"} <= enabled:
        return True, ""
    try:
        with open(os.path.join(folder, "cgroup.subtree_control"), "w") as fh:
            fh.write("+memory +pids")
    except OSError as exc:
        return False, f"cannot enable memory/pids in {folder}/cgroup.subtree_control: {exc}"
    return True, ""


def _detect(mountinfo: str = "/proc/self/mountinfo", proc_cgroup: str = "/proc/self/cgroup") -> CgroupSupport:
    """Find the hierarchy to use from ``mountinfo`` and ``proc_cgroup`` (this process's files)."""
    try:
        mounts, own = _mounts(mountinfo), _own_paths(proc_cgroup)
    except OSError as exc:
        return CgroupSupport(0, (), f"cannot read /proc/self/cgroup or mountinfo: {exc}")
    reasons: list[str] = []
    # cgroup v2: the execution group is a child of a group whose cgroup.subtree_control has
    # memory and pids. Our own group, if they are (or can be) enabled there -- not possible
    # while it holds processes, unless it is the root ("no internal processes") --, else the
    # hierarchy's root (as root: e.g. /sys/fs/cgroup on systemd machines).
    for mp, root, fstype, _ in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        folder = _folder(mp, root, own[""])
        candidates = list(dict.fromkeys([f for f in (folder, mp) if f is not None]))
        for cand in candidates:
            ok, why = _v2_usable(cand)
            if ok:
                return CgroupSupport(2, (cand,))
            reasons.append(why)
    # cgroup v1: one hierarchy per controller.
    parents: dict[str, str] = {}
    for ctrl in ("memory", "pids"):
        for mp, root, fstype, opts in mounts:
            if fstype != "cgroup" or ctrl not in opts or ctrl not in own:
                continue
            folder = _folder(mp, root, own[ctrl])
            if folder is not None and os.path.isdir(folder):
                if _writable(folder):
                    parents[ctrl] = folder
                else:
                    reasons.append(f"cgroup v1 {ctrl} folder {folder} is not writable by uid {os.geteuid()}")
                break
    if len(parents) == 2:
        cpu_parent = _v1_folder(mounts, own, "cpuacct")  # optional: CPU-seconds of the whole tree
        return CgroupSupport(1, (parents["memory"], parents["pids"], *([cpu_parent] if cpu_parent else [])))
    if not reasons:
        reasons.append("no cgroup v2 hierarchy with memory+pids and no cgroup v1 memory and pids hierarchies are mounted")
    return CgroupSupport(0, (), "; ".join(reasons))


def _v1_folder(mounts: list[tuple[str, str, str, set[str]]], own: dict[str, str], ctrl: str) -> str | None:
    """This process's writable folder in the cgroup v1 hierarchy of ``ctrl``, or ``None``."""
    for mp, root, fstype, opts in mounts:
        if fstype != "cgroup" or ctrl not in opts or ctrl not in own:
            continue
        folder = _folder(mp, root, own[ctrl])
        return folder if folder is not None and os.path.isdir(folder) and _writable(folder) else None
    return None


def _sweep(parents: tuple[str, ...]) -> None:
    """Remove execution groups whose creating process is gone (left by a killed run)."""
    for parent in parents:
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            if not name.startswith(_PREFIX):
                continue
            try:
                pid = int(name[len(_PREFIX):].split("-")[0])
            except ValueError:
                continue
            if pid == os.getpid() or os.path.exists(f"/proc/{pid}"):
                continue
            _kill_and_rmdir([os.path.join(parent, name)], timeout_s=1.0)


def cgroup_support() -> CgroupSupport:
    """The cgroup hierarchy this process can make execution groups in (probed once, cached).

    Returns:
        A :class:`CgroupSupport`; ``version == 0`` with a ``reason`` when none is usable (not
        root and no delegated sub-tree, read-only cgroupfs, controllers missing).
    """
    global _support
    with _lock:
        if _support is None:
            _support = _detect()
            if _support.available:
                _sweep(_support.parents)
        return _support


def _read_pids(folder: str) -> list[int]:
    try:
        with open(os.path.join(folder, "cgroup.procs")) as fh:
            return [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return []


def _kill_folder(folder: str, *, kill_file_only: bool = False) -> None:
    """SIGKILL every process of one cgroup folder: ``cgroup.kill`` (v2, Linux >= 5.14) where
    it exists, else (or also, unless ``kill_file_only``) each pid of ``cgroup.procs``."""
    kill_file = os.path.join(folder, "cgroup.kill")
    if os.path.exists(kill_file):
        try:
            with open(kill_file, "w") as fh:
                fh.write("1")
            if kill_file_only:
                return
        except OSError:
            pass
    for pid in _read_pids(folder):
        try:
            os.kill(pid, _signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _kill_and_rmdir(folders: list[str], timeout_s: float) -> bool:
    """SIGKILL every process in ``folders`` until they are empty, then remove them."""
    deadline = time.monotonic() + timeout_s
    remaining = [f for f in folders if os.path.isdir(f)]
    while remaining:
        for f in list(remaining):
            _kill_folder(f)
            try:
                os.rmdir(f)
                remaining.remove(f)
            except FileNotFoundError:
                remaining.remove(f)
            except OSError:  # EBUSY: tasks still exiting
                pass
        if not remaining or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return not remaining


class ExecutionCgroup:
    """The cgroup(s) of one execution, with a memory and a process limit.

    Args:
        memory_mb: memory bound of the whole group in MiB (no swap).
        max_pids: most tasks (processes + threads) of the whole group.
        support: where to create it (default: :func:`cgroup_support`).

    Raises:
        OSError: the group could not be created or its limits written (the caller treats
            that as an infrastructure failure).
        RuntimeError: no cgroup hierarchy is usable here (check :func:`cgroup_support` first).

    Example:
        >>> cg = ExecutionCgroup(memory_mb=256, max_pids=16)  # doctest: +SKIP
        >>> subprocess.Popen(argv, preexec_fn=cg.join)        # doctest: +SKIP
        >>> cg.oom_kills(); cg.remove()                       # doctest: +SKIP
    """

    def __init__(self, memory_mb: int, max_pids: int, support: CgroupSupport | None = None) -> None:
        support = support or cgroup_support()
        if not support.available:
            raise RuntimeError(f"no usable cgroup hierarchy: {support.reason}")
        self.version = support.version
        name = f"{_PREFIX}{os.getpid()}-{next(_counter)}-{time.monotonic_ns() % 10**9}"
        self.folders = [os.path.join(p, name) for p in support.parents]
        #: The folder whose CPU usage is read (``None``: cgroup v1 without a cpuacct hierarchy).
        self.cpu_folder: str | None = None
        self._final_cpu_s: float | None = None
        mem = int(memory_mb) * 1024 * 1024
        try:
            for f in self.folders:
                os.mkdir(f)
            if self.version == 2:
                f = self.folders[0]
                self._write(f, "memory.max", str(mem))
                self._write(f, "memory.swap.max", "0", optional=True)
                self._write(f, "pids.max", str(int(max_pids)))
                self.memory_folder = self.pids_folder = self.cpu_folder = f
            else:
                self.memory_folder, self.pids_folder = self.folders[:2]
                self.cpu_folder = self.folders[2] if len(self.folders) > 2 else None
                self._write(self.memory_folder, "memory.limit_in_bytes", str(mem))
                self._write(self.memory_folder, "memory.memsw.limit_in_bytes", str(mem), optional=True)
                self._write(self.pids_folder, "pids.max", str(int(max_pids)))
        except OSError:
            _kill_and_rmdir(self.folders, timeout_s=1.0)
            raise
        # Opened here so that the child only writes between fork and exec (no allocation).
        self._procs_files = [os.path.join(f, "cgroup.procs") for f in self.folders]
        self._oom_before = self._oom_count()

    @staticmethod
    def _write(folder: str, name: str, value: str, *, optional: bool = False) -> None:
        path = os.path.join(folder, name)
        if optional and not os.path.exists(path):
            return
        with open(path, "w") as fh:
            fh.write(value)

    def join(self) -> None:
        """Move the calling process into the group (call in the child, before ``exec``)."""
        pid = str(os.getpid()).encode()
        for path in self._procs_files:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def _oom_count(self) -> int:
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            with open(os.path.join(self.memory_folder, name)) as fh:
                for line in fh:
                    key, _, val = line.partition(" ")
                    if key == "oom_kill":
                        return int(val)
        except (OSError, ValueError):
            pass
        return 0

    def oom_kills(self) -> int:
        """Processes of the group the kernel's OOM killer killed (int, >= 0)."""
        return max(0, self._oom_count() - self._oom_before)

    def peak_memory_mb(self) -> float | None:
        """Highest memory use of the group in MiB (``None`` where the kernel does not say)."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            with open(os.path.join(self.memory_folder, name)) as fh:
                return int(fh.read().split()[0]) / (1024 * 1024)
        except (OSError, ValueError, IndexError):
            return None

    def _read_cpu_s(self) -> float | None:
        if self.cpu_folder is None:
            return None
        try:
            if self.version == 2:
                with open(os.path.join(self.cpu_folder, "cpu.stat")) as fh:
                    for line in fh:
                        key, _, val = line.partition(" ")
                        if key == "usage_usec":
                            return int(val) / 1e6
                return None
            with open(os.path.join(self.cpu_folder, "cpuacct.usage")) as fh:
                return int(fh.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            return None

    def cpu_seconds(self) -> float | None:
        """User + system CPU-seconds of every task that ran in the group (the whole process
        tree, ``setsid`` escapees included); after :meth:`remove`, the value read just before
        the group was deleted. ``None`` where the kernel does not say (cgroup v1 without a
        usable ``cpuacct`` hierarchy, or the file could not be read)."""
        if self._final_cpu_s is not None:
            return self._final_cpu_s
        return self._read_cpu_s()

    def pids(self) -> list[int]:
        """Host pids of the processes now in the group."""
        return _read_pids(self.pids_folder)

    def kill(self) -> None:
        """SIGKILL every process of the group (the group stays)."""
        for f in self.folders:
            _kill_folder(f, kill_file_only=self.version == 2)

    def remove(self, timeout_s: float = 5.0) -> bool:
        """Kill what is left in the group and remove it; ``True`` when it is gone. Safe to repeat.

        The group's CPU-seconds are read once it is empty (within ``min(timeout_s, 1)`` s of
        the kill), just before it is deleted, and kept for :meth:`cpu_seconds`."""
        if self._final_cpu_s is None and self.cpu_folder is not None and os.path.isdir(self.cpu_folder):
            self.kill()
            deadline = time.monotonic() + min(float(timeout_s), 1.0)
            while _read_pids(self.cpu_folder) and time.monotonic() < deadline:
                time.sleep(0.01)  # killed tasks are still exiting
            self._final_cpu_s = self._read_cpu_s()
        return _kill_and_rmdir(self.folders, timeout_s)
