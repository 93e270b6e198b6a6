"""Running one program on the host under limits: what every sandbox backend shares.

The backends (:mod:`.subprocess`, :mod:`.bubblewrap`, :mod:`.docker`) differ in how they
isolate a program; they share how a job folder is prepared and cleaned (:func:`prepare_workdir`,
:func:`chown_tree`, :func:`sanitize_workdir`), the rlimits and the child's pre-exec set-up
(:func:`rlimit_table`, :func:`make_preexec`), the per-execution cgroup (:func:`new_cgroup`), the
"program started" handshake (:class:`StartedPipe`), the environment variables
(:func:`base_env`), and the run loop with bounded output capture, time-outs and the job-folder
watchdog (:func:`run_process`, :class:`ProcessOutcome`, :func:`limit_extras`), and the CPU-seconds of
the run's process tree (:attr:`ProcessOutcome.cpu_time_s`). Limits and their enforcement:
``docs/sandbox.md``; cost accounting: ``docs/method.md``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import math
import os
import resource
import signal as _signal
import stat
import subprocess
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .base import ExecutionResult, SandboxInfrastructureError, SandboxLimits, WeakLimitsWarning
from .cgroup import ExecutionCgroup, cgroup_support
from .jobdirs import FolderWatch, is_bounded

__all__ = [
    "OUTPUT_TAIL_BYTES", "DEFAULT_NOFILE", "prepare_workdir", "chown_tree", "sanitize_workdir", "rlimit_table",
    "make_preexec", "warn_if_no_cgroup", "new_cgroup", "StartedPipe", "base_env", "tail_text", "ProcessOutcome",
    "run_process", "run_job", "exit_and_signal", "execution_result", "limit_extras", "count_tasks_of_uid", "tasks_of_uid",
]

#: Bytes of stdout / stderr kept (the tail).
OUTPUT_TAIL_BYTES = 64 * 1024
_MIB = 1024 * 1024
#: Open-file limit given to sandboxed programs.
DEFAULT_NOFILE = 256
#: Seconds to wait for output readers after the process tree is gone.
_READER_JOIN_S = 5.0


def _check_filename(filename: str) -> None:
    if (
        not filename
        or filename in (".", "..")
        or "/" in filename
        or "\\" in filename
        or "\0" in filename
    ):
        raise ValueError(f"filename must be a plain file name, got {filename!r}")


def prepare_workdir(workdir: str | Path, source: str, filename: str) -> Path:
    """Resolve ``workdir`` (must exist) and write the script into it."""
    _check_filename(filename)
    path = Path(workdir)
    if not path.is_dir():
        raise FileNotFoundError(f"job folder does not exist: {path}")
    path = path.resolve()
    script = path / filename
    if script.is_symlink() or (script.exists() and not script.is_file()):
        script.unlink()  # never write through a symlink/fifo left by an earlier run
    script.write_text(source, encoding="utf-8")
    return path


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Give ``root`` and everything under it to ``uid:gid`` (never following symlinks).

    Symlinks are skipped entirely: chown/chmod through a symlink planted by an earlier run
    would hand a host file to the sandbox user.
    """

    def fix(path: str, is_dir: bool) -> None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            return
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            return
        if st.st_uid != uid or st.st_gid != gid:
            os.chown(path, uid, gid, follow_symlinks=False)
        want = stat.S_IMODE(st.st_mode) | (0o700 if is_dir else 0o600)
        if want != stat.S_IMODE(st.st_mode):
            os.chmod(path, want)

    fix(str(root), True)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames:
            fix(os.path.join(dirpath, name), True)
        for name in filenames:
            fix(os.path.join(dirpath, name), False)


def sanitize_workdir(root: Path) -> list[str]:
    """Remove everything in ``root`` that is neither a regular file nor a directory.

    Symlinks (e.g. ``submission.csv -> /root/hidden/labels.csv``), FIFOs (which would block a
    grader's ``open``), sockets and device nodes created by the program are deleted so that
    the host reading the job folder afterwards only ever sees real files; set-uid/set-gid bits
    are cleared. Returns the removed paths, relative to ``root``.
    """
    removed: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in list(dirnames) + filenames:
            path = os.path.join(dirpath, name)
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
                if mode & (stat.S_ISUID | stat.S_ISGID):  # no set-id files left on the host
                    try:
                        os.chmod(path, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))
                    except OSError:
                        pass
                continue
            try:
                os.unlink(path)
                removed.append(os.path.relpath(path, root))
            except OSError:
                pass
            if name in dirnames:
                dirnames.remove(name)
    return removed


def rlimit_table(limits: SandboxLimits, *, nproc: int | None) -> dict[int, tuple[int, int]]:
    """The rlimits (resource -> (soft, hard)) that implement ``limits``."""
    cpu = max(1, int(math.ceil(limits.cpu_time_s)))
    mem = int(limits.memory_mb) * _MIB
    fsize = int(limits.file_size_mb) * _MIB
    out = {
        resource.RLIMIT_AS: (mem, mem),
        resource.RLIMIT_CPU: (cpu, cpu + 1),  # SIGXCPU first, SIGKILL one second later
        resource.RLIMIT_FSIZE: (fsize, fsize),
        resource.RLIMIT_NOFILE: (DEFAULT_NOFILE, DEFAULT_NOFILE),
        resource.RLIMIT_CORE: (0, 0),
    }
    if nproc is not None:
        out[resource.RLIMIT_NPROC] = (nproc, nproc)
    return out


_PR_SET_PDEATHSIG = 1
try:
    _prctl = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl
except (OSError, AttributeError):  # pragma: no cover - non-glibc platforms
    _prctl = None


def make_preexec(
    rlimits: Mapping[int, tuple[int, int]], cgroup: ExecutionCgroup | None = None
) -> Callable[[], None]:
    """The child's set-up between fork and exec: join the execution cgroup (so everything the
    program starts is inside it), die with the host process (``PR_SET_PDEATHSIG``), rlimits."""
    items = list(rlimits.items())
    join = cgroup.join if cgroup is not None else None

    def preexec() -> None:  # runs in the child between fork and exec: keep it minimal
        if join is not None:
            join()
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, int(_signal.SIGKILL), 0, 0, 0)
        for res, value in items:
            resource.setrlimit(res, value)

    return preexec


_warned_no_cgroup = False


def warn_if_no_cgroup(backend: str) -> bool:
    """Whether whole-sandbox cgroup bounds work here; warns once per process when not."""
    global _warned_no_cgroup
    support = cgroup_support()
    if not support.available and not _warned_no_cgroup:
        _warned_no_cgroup = True
        warnings.warn(
            f"{backend}: no writable cgroup here ({support.reason}), so memory_mb and "
            "max_processes are per-process rlimits only: RLIMIT_AS bounds each process (a "
            "program with N processes may hold N x memory_mb) and RLIMIT_NPROC counts every "
            "task of the sandbox uid on the host (concurrent sandboxes of one uid share it). "
            "Run as root (cgroup v1 memory+pids, or cgroup v2 with a delegated sub-tree) for "
            "whole-sandbox bounds.",
            WeakLimitsWarning,
            stacklevel=3,
        )
    return support.available


def new_cgroup(limits: SandboxLimits, extra_pids: int = 0) -> ExecutionCgroup | None:
    """The execution cgroup for one run (``None`` where cgroups cannot be used here).

    Raises:
        SandboxInfrastructureError: cgroups work here but this one could not be made.
    """
    if not cgroup_support().available:
        return None
    try:
        return ExecutionCgroup(int(limits.memory_mb), int(limits.max_processes) + int(extra_pids))
    except OSError as exc:
        raise SandboxInfrastructureError(f"could not create the execution cgroup: {exc}") from exc


class StartedPipe:
    """Tells the host whether the untrusted program was reached at all.

    The interpreter is started with :meth:`bootstrap` as ``-c`` code: it writes one byte to
    the pipe, closes it, then runs the script in ``__main__`` (``sys.argv``, ``__file__``,
    ``sys.path[0]`` and the printed traceback of an uncaught exception as for
    ``python script.py``). Everything that fails before that byte (bwrap set-up, ``setpriv``, the interpreter's
    start-up) is the sandbox's failure; everything after is the program's. The program cannot
    forge the byte's absence or presence: the pipe is closed before its first line runs.
    """

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        fcntl.fcntl(self.r, fcntl.F_SETFL, os.O_NONBLOCK)
        self.started = False

    def bootstrap(self) -> str:
        """The ``-c`` code for this pipe (its write end keeps its number in the child)."""
        return self.bootstrap_for(self.w)

    @staticmethod
    def bootstrap_for(w: int) -> str:
        """The ``-c`` code that signals on file descriptor ``w``, then runs ``sys.argv[1]``."""
        return (
            f"import os,sys;os.write({w},b'S');os.close({w});del sys.argv[0];"
            "__file__=os.path.abspath(sys.argv[0]);sys.path[0]=os.path.dirname(__file__);"
            "sys.excepthook=lambda t,v,tb,_h=sys.__excepthook__:(lambda x:_h(t,v.with_traceback(x),x))("
            "tb.tb_next if tb is not None and tb.tb_frame.f_code.co_filename=='<string>' else tb);"
            "del os,sys;exec(compile(open(__file__,'rb').read(),__file__,'exec'))"
        )

    def close_writer(self) -> None:
        if self.w >= 0:
            os.close(self.w)
            self.w = -1

    def close(self) -> None:
        self.close_writer()
        if self.r >= 0:
            try:
                self.started = self.started or os.read(self.r, 1) == b"S"
            except BlockingIOError:
                pass
            os.close(self.r)
            self.r = -1


def base_env(home: str, tmpdir: str, extra: Mapping[str, str] | None) -> dict[str, str]:
    """A clean environment for the program: no host variables leak in."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": tmpdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONHASHSEED": "0",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": tmpdir,
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1",
        "VECLIB_MAXIMUM_THREADS": "1",
    }
    if extra:
        env.update({str(k): str(v) for k, v in extra.items()})
    return env


class _TailReader(threading.Thread):
    """Drains a pipe, keeping only the last ``OUTPUT_TAIL_BYTES`` bytes."""

    def __init__(self, stream) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.buf = bytearray()
        self.total = 0

    def run(self) -> None:
        try:
            while True:
                chunk = self.stream.read1(65536) if hasattr(self.stream, "read1") else self.stream.read(65536)
                if not chunk:
                    break
                self.total += len(chunk)
                self.buf += chunk
                if len(self.buf) > 2 * OUTPUT_TAIL_BYTES:
                    del self.buf[: len(self.buf) - OUTPUT_TAIL_BYTES]
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        return bytes(self.buf[-OUTPUT_TAIL_BYTES:]).decode("utf-8", errors="replace")

    @property
    def truncated(self) -> bool:
        return self.total > OUTPUT_TAIL_BYTES


def tail_text(data: bytes) -> str:
    return data[-OUTPUT_TAIL_BYTES:].decode("utf-8", errors="replace")


@dataclass
class ProcessOutcome:
    """What :func:`run_process` observed (the backends turn it into an ``ExecutionResult``).

    ``cpu_time_s`` (float seconds, user + system, or ``None``) comes from ``cpu_time_source``:
    ``"cgroup"`` (the execution cgroup's usage: the whole process tree, ``setsid`` escapees
    included) or ``"rusage"`` (``os.wait4`` of the direct child: it and the descendants it
    waited for; a process that left with ``setsid`` and was not waited for is missed).
    """

    returncode: int
    stdout: str
    stderr: str
    wall_time_s: float
    timed_out: bool
    truncated: bool
    started: bool = True
    oom_kills: int = 0
    peak_memory_mb: float | None = None
    workdir_exceeded: str = ""
    cleanup_s: float = 0.0
    cpu_time_s: float | None = None
    cpu_time_source: str | None = None


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, _signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_process(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    wall_time_s: float,
    preexec_fn: Callable[[], None] | None,
    pass_fds: Sequence[int] = (),
    cgroup: ExecutionCgroup | None = None,
    started: StartedPipe | None = None,
    workdir: Path | None = None,
    limits: SandboxLimits | None = None,
) -> ProcessOutcome:
    """Run ``argv`` in a new session; on wall-clock time-out kill its whole process group.

    With ``cgroup``, the whole group is killed at the end (background children and programs
    that left the process group with ``setsid`` included) and removed; its OOM-kill count,
    peak memory and CPU-seconds are reported. The direct child is reaped with ``os.wait4``, so
    without a cgroup (or a cgroup v1 without ``cpuacct``) the CPU-seconds are its rusage: the
    child and the descendants it waited for (a process that escaped with ``setsid`` and was
    not waited for is not counted). With ``workdir`` and ``limits``, a :class:`FolderWatch` kills the
    run when a job folder that the kernel does not bound exceeds ``workdir_size_mb`` or
    ``workdir_max_files``.

    Raises:
        SandboxInfrastructureError: the process could not be started (missing binary, the
            cgroup could not be joined).
    """
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            pass_fds=tuple(pass_fds),
            preexec_fn=preexec_fn,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        if started is not None:
            started.close()
        raise SandboxInfrastructureError(f"could not start {argv[0]!r}: {exc}") from exc
    if started is not None:
        started.close_writer()

    def kill_all() -> None:
        _kill_group(proc.pid)
        if cgroup is not None:
            cgroup.kill()

    # The child is reaped here with wait4 (for its rusage), never by Popen: until it is, its pid
    # cannot be reused, so signalling it by pid stays safe.
    reaped: dict[str, object] = {}

    def reap() -> None:
        try:
            _, status, usage = os.wait4(proc.pid, 0)
            reaped["rc"], reaped["ru"] = os.waitstatus_to_exitcode(status), usage
        except ChildProcessError:  # reaped elsewhere (not expected): no rusage
            reaped["rc"] = proc.poll()

    reaper = threading.Thread(target=reap, name=f"wmrl-reap-{proc.pid}", daemon=True)
    reaper.start()

    def kill_child() -> None:
        try:
            os.kill(proc.pid, _signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    watch = None
    if workdir is not None and limits is not None and not is_bounded(workdir, limits):
        watch = FolderWatch(workdir, limits, kill_all)
        watch.start()
    readers = [_TailReader(proc.stdout), _TailReader(proc.stderr)]
    for r in readers:
        r.start()
    timed_out = False
    try:
        reaper.join(max(0.0, wall_time_s))
        timed_out = reaper.is_alive()
    except BaseException:  # e.g. KeyboardInterrupt: never leave the tree running
        kill_all()
        kill_child()
        reaper.join()
        raise
    finally:
        # Kill leftovers of the group even after a normal exit (background children).
        kill_all()
        if watch is not None:
            watch.stop()
    if timed_out:
        kill_child()
        reaper.join()
    if proc.returncode is None:
        proc.returncode = reaped.get("rc")  # type: ignore[assignment]
    wall = time.monotonic() - start
    t_clean = time.monotonic()
    oom, peak = 0, None
    cpu: float | None = None
    cpu_source: str | None = None
    if cgroup is not None:
        oom, peak = cgroup.oom_kills(), cgroup.peak_memory_mb()
        cgroup.remove()
        cpu = cgroup.cpu_seconds()
        cpu_source = "cgroup" if cpu is not None else None
    ru = reaped.get("ru")
    if cpu is None and ru is not None:
        cpu, cpu_source = ru.ru_utime + ru.ru_stime, "rusage"  # type: ignore[attr-defined]
    for r in readers:
        r.join(_READER_JOIN_S)
    for stream in (proc.stdout, proc.stderr):
        try:
            stream.close()
        except OSError:
            pass
    if started is not None:
        started.close()
    return ProcessOutcome(
        returncode=proc.returncode,
        stdout=readers[0].text(),
        stderr=readers[1].text(),
        wall_time_s=wall,
        timed_out=timed_out,
        truncated=readers[0].truncated or readers[1].truncated,
        started=True if started is None else started.started,
        oom_kills=oom,
        peak_memory_mb=peak,
        workdir_exceeded=watch.exceeded if watch is not None else "",
        cleanup_s=time.monotonic() - t_clean,
        cpu_time_s=cpu,
        cpu_time_source=cpu_source,
    )


def run_job(
    command: Callable[[], tuple[Sequence[str], Sequence[int]]],
    *,
    cwd: str,
    env: Mapping[str, str],
    limits: SandboxLimits,
    workdir: Path,
    cgroup: ExecutionCgroup | None,
    preexec_fn: Callable[[], None] | None,
    started: StartedPipe,
) -> tuple[ProcessOutcome, list[str]]:
    """One run of a job folder's program by a process backend: :func:`run_process` of the
    command under ``limits`` (wall-clock time, folder bounds), then :func:`sanitize_workdir`.

    Args:
        command: ``() -> (argv, fds)``: the command and the extra descriptors to pass to it
            (built inside the clean-up, so that a failure while building it releases the rest).
        cwd, env: the process's working folder and environment.
        limits: the run's limits; workdir: the job folder; cgroup: the run's cgroup (or
            ``None``); preexec_fn: :func:`make_preexec`'s function; started: the run's pipe.

    Returns:
        ``(outcome, removed)``: the :class:`ProcessOutcome` and the special files removed from
        the job folder. The descriptors, the pipe and the cgroup are released in every case.

    Raises:
        SandboxInfrastructureError: from :func:`run_process`.
    """
    fds: Sequence[int] = ()
    try:
        argv, fds = command()
        out = run_process(argv, cwd=cwd, env=env, wall_time_s=limits.wall_time_s, preexec_fn=preexec_fn,
                          pass_fds=(started.w, *fds), cgroup=cgroup, started=started, workdir=workdir, limits=limits)
    finally:
        started.close()
        for fd in fds:
            os.close(fd)
        if cgroup is not None:
            cgroup.remove()
    return out, sanitize_workdir(workdir)


def exit_and_signal(rc: int, timed_out: bool, *, negative_is_signal: bool = True,
                    shell_codes: bool = False) -> tuple[int | None, int | None]:
    """``(exit_code, signal)`` of a program from its raw return code.

    Args:
        rc: the return code as the backend saw it.
        timed_out: whether the wall-clock limit killed it (no exit code then; the signal is
            SIGKILL unless another one was seen).
        negative_is_signal: ``-N`` means killed by signal N (``subprocess``' convention).
        shell_codes: ``128 + N`` (N <= 64) means the child was killed by signal N (how bwrap
            and Docker report it).
    """
    sig: int | None = None
    exit_code: int | None = rc
    if negative_is_signal and rc < 0:
        sig, exit_code = -rc, None
    elif shell_codes and 128 < rc < 128 + 65:
        sig, exit_code = rc - 128, None
    if timed_out:
        exit_code = None
        sig = sig or int(_signal.SIGKILL)
    return exit_code, sig


def execution_result(out: ProcessOutcome, backend: str, *, cpu_time_s: float | None, extras: dict,
                     shell_codes: bool = False) -> ExecutionResult:
    """The :class:`~.base.ExecutionResult` of a :func:`run_process` outcome (exit code and
    signal by :func:`exit_and_signal`)."""
    exit_code, sig = exit_and_signal(out.returncode, out.timed_out, shell_codes=shell_codes)
    return ExecutionResult(exit_code=exit_code, stdout=out.stdout, stderr=out.stderr, wall_time_s=out.wall_time_s,
                           timed_out=out.timed_out, signal=sig, backend=backend, cpu_time_s=cpu_time_s, extras=extras)


def limit_extras(out: ProcessOutcome, cgroup_used: bool) -> dict:
    """The ``extras`` entries about whole-sandbox limits shared by the backends."""
    return {
        "cgroup": cgroup_used,
        "oom_killed": out.oom_kills > 0,
        "oom_kills": out.oom_kills,
        "peak_memory_mb": out.peak_memory_mb,
        "workdir_limit_exceeded": out.workdir_exceeded,
        "cpu_time_source": out.cpu_time_source,
    }


def tasks_of_uid(uid: int, *, environ_marker: bytes | None = None) -> int:
    """Tasks (processes + threads) whose real uid is ``uid`` (what RLIMIT_NPROC counts); with
    ``environ_marker``, only those of processes whose environment holds it (one run's)."""
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="utf-8", errors="replace") as fh:
                fields = dict(line.split(":", 1) for line in fh.read().splitlines() if ":" in line)
            if int(fields.get("Uid", "-1").split()[0]) != uid:
                continue
            if environ_marker is not None:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if environ_marker not in fh.read():
                        continue
            count += int(fields.get("Threads", "1").strip() or 1)
        except (OSError, ValueError, IndexError):
            continue
    return count


def count_tasks_of_uid(uid: int) -> int:
    """Tasks (processes + threads) whose real uid is ``uid``; what RLIMIT_NPROC counts."""
    return tasks_of_uid(uid)


