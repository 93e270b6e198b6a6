"""Job folders with a bounded size and file count, removed even when their owner was killed.

Contents:
    * :class:`OwnedFolder` -- a folder marked as owned by a live process (a lock file beside it,
      held with ``flock``); :func:`sweep_stale` removes those whose owner is gone.
    * :class:`JobFolder` -- one job folder: an :class:`OwnedFolder` that, where mounting is
      allowed, is a private tmpfs of ``workdir_size_mb`` MiB and ``workdir_max_files`` inodes.
    * :func:`is_bounded` -- whether a folder is such a kernel-bounded job folder.
    * :func:`sweep_stale` -- remove the folders (and unmount the tmpfs) of dead owners in one
      parent folder; :func:`sweep_stale_mounts` -- the tmpfs job folders of dead owners
      anywhere (run once per process, by the first :class:`JobFolder`).

How the bounds are enforced:
    * **tmpfs** (root, or ``CAP_SYS_ADMIN``; the measured-good configuration): the folder is a
      tmpfs mount with ``size=workdir_size_mb m`` and ``nr_inodes=workdir_max_files``, so a
      write beyond either fails with ``ENOSPC`` in the program; removing the folder is one
      ``umount`` (constant time, however many files were written). The folder's contents live
      in memory: what the program writes there counts toward its cgroup's ``memory_mb``.
    * **fallback** (mounting not allowed, e.g. non-root): a plain folder; the sandboxes then run
      a watchdog (:class:`FolderWatch`) that kills the run once the folder exceeds its bounds
      (checked every 0.2 s, so a fast writer can overshoot by what it writes in that time, each
      file still capped by ``file_size_mb``); removal walks the folder, which the file-count
      bound keeps short. A :class:`~wmrl_envs.sandbox.base.WeakLimitsWarning` says so once.

Stale folders: a folder's owner holds ``flock`` on ``<folder>.wmrl-lock``; the kernel drops
the lock when the process dies however it dies (SIGKILL included), so the next
:class:`OwnedFolder` made in the same parent folder (the next run, or ``wmrl train --resume``)
unmounts and deletes what a killed run left; the first :class:`JobFolder` of a process also
unmounts stale tmpfs job folders wherever they are (one left in a temporary folder that a
killed process never removed would otherwise hold its memory until reboot).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import shutil
import stat
import tempfile
import threading
import uuid
import warnings
from pathlib import Path

from .base import SandboxLimits, WeakLimitsWarning

__all__ = ["OwnedFolder", "JobFolder", "FolderWatch", "is_bounded", "sweep_stale", "sweep_stale_mounts", "LOCK_SUFFIX"]

#: Suffix of the lock file beside each owned folder.
LOCK_SUFFIX = ".wmrl-lock"
_MNT_DETACH = 2
_MS_NOSUID, _MS_NODEV = 2, 4
_warned: set[str] = set()
_warn_lock = threading.Lock()


def _warn_once(key: str, message: str) -> None:
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, WeakLimitsWarning, stacklevel=3)


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _mount_tmpfs(path: str, size_mb: int, max_inodes: int) -> str:
    """Mount a private tmpfs on ``path``; returns ``""`` or why it failed."""
    if os.geteuid() != 0:
        return f"mounting a tmpfs needs root (running as uid {os.geteuid()})"
    opts = f"size={int(size_mb)}m,nr_inodes={int(max_inodes)},mode=0700".encode()
    libc = _libc()
    if libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts) != 0:
        err = ctypes.get_errno()
        return f"mount(tmpfs) on {path} failed: {os.strerror(err)}"
    return ""


def _mount_points_under(path: str) -> list[str]:
    """Mount points at or below ``path``, deepest first (from /proc/self/mountinfo)."""
    real = os.path.realpath(path)
    out = []
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                mp = line.split()[4].replace("\\040", " ").replace("\\134", "\\")
                if mp == real or mp.startswith(real.rstrip("/") + "/"):
                    out.append(mp)
    except (OSError, IndexError):
        return []
    return sorted(set(out), key=lambda p: -p.count("/"))


def _tmpfs_mount_points() -> list[str]:
    """Mount points of tmpfs file systems (from /proc/self/mountinfo)."""
    out = []
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                if right.split()[:1] == ["tmpfs"]:
                    out.append(left.split()[4].replace("\\040", " ").replace("\\134", "\\"))
    except (OSError, IndexError):
        pass
    return out


def _try_sweep_one(lock_path: Path) -> Path | None:
    """Remove ``lock_path``'s folder if no live process holds the lock; returns it if removed."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # the owner is alive
        folder = lock_path.with_name(lock_path.name[: -len(LOCK_SUFFIX)])
        _umount_all(str(folder))
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():
            return None
        try:
            lock_path.unlink()
        except FileNotFoundError:
            pass
        return folder
    finally:
        os.close(fd)


_mounts_swept = False


def sweep_stale_mounts() -> list[Path]:
    """Unmount and remove every tmpfs :class:`JobFolder` on this machine whose owner is gone,
    wherever it lies (e.g. inside a temporary folder that a killed process never deleted).

    Returns:
        The removed job folders.
    """
    removed = []
    for mp in _tmpfs_mount_points():
        lock = Path(mp + LOCK_SUFFIX)
        if os.path.basename(mp) and lock.exists():
            folder = _try_sweep_one(lock)
            if folder is not None:
                removed.append(folder)
    return removed


def _umount_all(path: str) -> None:
    mps = _mount_points_under(path)
    if not mps:
        return
    libc = _libc()
    for mp in mps:
        libc.umount2(os.fsencode(mp), _MNT_DETACH)


def is_bounded(path: str | os.PathLike, limits: SandboxLimits) -> bool:
    """Whether ``path`` is a mount whose size and inode count the kernel keeps within ``limits``.

    Args:
        path: a folder.
        limits: the bounds (``workdir_size_mb`` MiB, ``workdir_max_files`` inodes).

    Returns:
        ``True`` for a :class:`JobFolder` tmpfs (or any mount) no larger than the bounds.
    """
    p = os.fspath(path)
    if not os.path.ismount(p):
        return False
    try:
        st = os.statvfs(p)
    except OSError:
        return False
    return (
        0 < st.f_blocks * st.f_frsize <= int(limits.workdir_size_mb) * 1024 * 1024
        and 0 < st.f_files <= int(limits.workdir_max_files)
    )


def sweep_stale(parent: str | os.PathLike) -> list[Path]:
    """Remove the owned folders in ``parent`` whose owner process is gone.

    A folder is stale when nobody holds the lock on its ``<folder>.wmrl-lock`` file. Mounts
    under it are detached first, then it is deleted, then the lock file. Folders without a
    lock file (and every other file) are left alone.

    Args:
        parent: folder to sweep (missing: nothing to do).

    Returns:
        The removed folders.
    """
    parent = Path(parent)
    removed: list[Path] = []
    try:
        entries = [e for e in os.listdir(parent) if e.endswith(LOCK_SUFFIX) and not e.startswith(".")]
    except OSError:
        return removed
    for entry in entries:
        folder = _try_sweep_one(parent / entry)
        if folder is not None:
            removed.append(folder)
    return removed


class OwnedFolder:
    """A new folder in ``parent`` that :func:`sweep_stale` removes once this process is gone.

    Creating one first sweeps ``parent`` (so a run started after a killed one cleans up after
    it). The lock file ``<path>.wmrl-lock`` lies *beside* the folder, outside it, so a program
    running in the folder can neither see nor remove it.

    Args:
        parent: where to create it (created if missing; default: the system temporary folder).
        prefix: start of the folder's name.

    Attributes:
        path: the folder (:class:`pathlib.Path`).

    Raises:
        OSError: ``parent`` cannot be created or written.
    """

    def __init__(self, parent: str | os.PathLike | None = None, prefix: str = "wmrl-") -> None:
        self.parent = Path(parent if parent is not None else tempfile.gettempdir())
        self.parent.mkdir(parents=True, exist_ok=True)
        self._pid = os.getpid()  # a forked child inherits the object, never the ownership
        self._lock_fd: int | None = None
        sweep_stale(self.parent)
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.parent))
        # Lock a hidden temporary name first, then rename it into place: a sweeper only ever
        # sees lock files that are already held.
        tmp = self.parent / f".{self.path.name}.{uuid.uuid4().hex}{LOCK_SUFFIX}"
        self._lock_fd: int | None = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        os.write(self._lock_fd, f"{os.getpid()}\n".encode())
        os.rename(tmp, self.lock_path)

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + LOCK_SUFFIX)

    def _release(self) -> None:
        if self._lock_fd is not None and os.getpid() == self._pid:
            try:
                self.lock_path.unlink()
            except FileNotFoundError:
                pass
            os.close(self._lock_fd)
            self._lock_fd = None

    def remove(self) -> None:
        """Unmount and delete the folder, then drop the lock. Safe to call twice; does nothing
        in a forked child of the owner."""
        if self._lock_fd is None or os.getpid() != self._pid:
            return
        _umount_all(str(self.path))
        shutil.rmtree(self.path, ignore_errors=True)
        self._release()

    def keep(self) -> Path:
        """Stop owning the folder: it stays (and is never swept); returns its path."""
        self._release()
        return self.path

    def __enter__(self) -> "OwnedFolder":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def __del__(self) -> None:  # best effort; a killed process is handled by sweep_stale
        try:
            self.remove()
        except Exception:
            pass


class JobFolder(OwnedFolder):
    """One job folder bounded to ``limits.workdir_size_mb`` MiB and ``limits.workdir_max_files``.

    Where the process may mount (root), the folder is a fresh tmpfs (kernel-enforced bounds;
    :attr:`bounded` is ``True``; removal is one ``umount``). Elsewhere it is a plain folder
    (:attr:`bounded` ``False``) whose bounds the sandboxes enforce with a watchdog; a
    :class:`~wmrl_envs.sandbox.base.WeakLimitsWarning` is emitted once per process.

    Args:
        parent: where to create it (default: the system temporary folder).
        limits: the bounds (default :class:`~wmrl_envs.sandbox.base.SandboxLimits`).
        prefix: start of the folder's name.

    Example:
        >>> with JobFolder("/tmp/jobs", SandboxLimits(workdir_size_mb=64)) as job:  # doctest: +SKIP
        ...     sandbox.run_python("print(1)", job.path)
    """

    def __init__(
        self, parent: str | os.PathLike | None = None, limits: SandboxLimits | None = None, prefix: str = "job-"
    ) -> None:
        global _mounts_swept
        if not _mounts_swept:  # once per process: tmpfs job folders of killed runs, anywhere
            _mounts_swept = True
            sweep_stale_mounts()
        super().__init__(parent, prefix)
        self.limits = limits or SandboxLimits()
        why = _mount_tmpfs(str(self.path), self.limits.workdir_size_mb, self.limits.workdir_max_files)
        self.bounded = not why
        if why:
            _warn_once(
                "tmpfs",
                f"job folders cannot be bounded by the kernel here ({why}): the sandbox enforces "
                "workdir_size_mb / workdir_max_files with a watchdog that kills the run once the "
                "folder exceeds them (checked every 0.2 s), and removal walks the folder. Run as "
                "root for tmpfs-backed job folders.",
            )

    def keep(self) -> Path:
        """Copy the folder to a plain folder ``<path>-kept`` (regular files and folders only),
        unmount and remove the original; returns the copy's path (never swept)."""
        if self._lock_fd is None or os.getpid() != self._pid:
            return self.path
        if not self.bounded:
            return super().keep()
        dest = self.path.with_name(self.path.name + "-kept")
        dest.mkdir(mode=0o700)
        for dirpath, dirnames, filenames in os.walk(self.path, followlinks=False):
            rel = os.path.relpath(dirpath, self.path)
            for d in dirnames:
                if stat.S_ISDIR(os.lstat(os.path.join(dirpath, d)).st_mode):
                    os.makedirs(dest / rel / d, exist_ok=True)
            for f in filenames:
                src = os.path.join(dirpath, f)
                if stat.S_ISREG(os.lstat(src).st_mode):
                    shutil.copyfile(src, dest / rel / f, follow_symlinks=False)
        self.remove()
        return dest


def _usage(root: str, max_files: int, max_bytes: int) -> tuple[int, int]:
    """(entries, bytes) under ``root``, stopping early once either bound is passed."""
    files = 1
    size = 0
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for e in it:
                files += 1
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                size += st.st_blocks * 512
                if stat.S_ISDIR(st.st_mode):
                    stack.append(e.path)
                if files > max_files or size > max_bytes:
                    return files, size
    return files, size


class FolderWatch(threading.Thread):
    """Watchdog for an unbounded job folder: calls ``on_exceed`` once its size or entry count
    passes ``limits`` (polled every ``interval_s`` seconds until :meth:`stop`).

    Args:
        path: the job folder.
        limits: ``workdir_size_mb`` (MiB, allocated blocks) and ``workdir_max_files`` (files
            and folders, the folder itself included).
        on_exceed: called once, from the watchdog thread (e.g. kills the run).
        interval_s: polling period in seconds.

    Attributes:
        exceeded: ``""``, ``"workdir_size_mb"`` or ``"workdir_max_files"``.
    """

    def __init__(self, path: str | os.PathLike, limits: SandboxLimits, on_exceed, interval_s: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.path = os.fspath(path)
        self.max_files = int(limits.workdir_max_files)
        self.max_bytes = int(limits.workdir_size_mb) * 1024 * 1024
        self.on_exceed = on_exceed
        self.interval_s = float(interval_s)
        self.exceeded = ""
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            files, size = _usage(self.path, self.max_files, self.max_bytes)
            if files > self.max_files or size > self.max_bytes:
                self.exceeded = "workdir_max_files" if files > self.max_files else "workdir_size_mb"
                self.on_exceed()
                return

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5.0)
