"""Default backend: `bubblewrap <https://github.com/containers/bubblewrap>`_ (``bwrap``).

Contents:
    * :class:`BubblewrapSandbox` -- backend ``"bubblewrap"``.

Install the tool with ``apt-get install -y bubblewrap`` (``setpriv``, used as root, comes with
util-linux).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import ClassVar, Iterable, Mapping

from .base import (
    ExecutionResult,
    Sandbox,
    SandboxInfrastructureError,
    SandboxLimits,
    SandboxUnavailableError,
    default_hidden_paths,
)
from .process import (StartedPipe, base_env, chown_tree, execution_result, limit_extras, make_preexec, new_cgroup,
                      prepare_workdir, rlimit_table, run_job, warn_if_no_cgroup)

__all__ = ["BubblewrapSandbox"]

_MIB = 1024 * 1024
#: Where the job folder appears inside the sandbox.
WORKSPACE = "/workspace"
_RESERVED = ("/", "/proc", "/dev", "/tmp", "/etc", WORKSPACE)
_HOST_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime")


#: Tasks bwrap itself adds to the sandbox's cgroup (the outer bwrap and its pid-1 reaper).
_BWRAP_TASKS = 2


def hidden_list(hidden_paths: Iterable[str | os.PathLike] | None) -> list[str]:
    """Absolute hidden paths; ``None`` means :func:`~wmrl_envs.sandbox.base.default_hidden_paths`."""
    paths = default_hidden_paths() if hidden_paths is None else [os.fspath(p) for p in hidden_paths]
    out = []
    for p in paths:
        if not os.path.isabs(os.path.expanduser(p)):
            raise ValueError(f"hidden path {p!r} must be absolute (the same path on the host and inside)")
        out.append(os.path.abspath(os.path.expanduser(p)))
    return list(dict.fromkeys(out))


def isolation_settings(python: str | None, uid: int, gid: int, extra_ro_binds: Iterable[str | os.PathLike],
                       hidden_paths: Iterable[str | os.PathLike] | None) -> tuple[str, int, int, list[str], list[str]]:
    """An isolating backend's settings (bubblewrap, Docker), normalised: ``(python, uid, gid,
    extra_ro_binds, hidden_paths)`` with absolute paths (``python``: default ``sys.executable``;
    ``hidden_paths``: :func:`hidden_list`).

    Raises:
        ValueError: a relative hidden path.
    """
    return (os.path.abspath(python or sys.executable), int(uid), int(gid),
            [os.path.abspath(os.fspath(p)) for p in extra_ro_binds], hidden_list(hidden_paths))


def is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def python_prefixes(python: str) -> list[str]:
    """Folders the interpreter needs: venv prefix and base installation."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        dirs = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    else:
        code = (
            "import sys, json; "
            "print(json.dumps([sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]))"
        )
        try:
            out = subprocess.run(
                [python, "-c", code], capture_output=True, text=True, timeout=60, check=True, env={}
            ).stdout
            dirs = json.loads(out)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            raise SandboxUnavailableError(f"cannot query interpreter {python!r}: {exc}") from exc
    real_exe_dir = os.path.dirname(os.path.realpath(python))
    return [*dirs, real_exe_dir, os.path.dirname(os.path.abspath(python))]


class BubblewrapSandbox(Sandbox):
    """Runs each program in a fresh bubblewrap sandbox (Linux namespaces), as an unprivileged uid.

    Isolation (as root, the measured-good configuration):
        * **filesystem**: a new mount namespace on an empty root holding only ``/usr``, the
          Python installation (venv ``sys.prefix`` and ``sys.base_prefix``, same paths) and
          ``extra_ro_binds`` -- all read-only --, a private ``/proc`` and minimal ``/dev``, a
          synthetic ``/etc`` (``passwd``/``group``/``hostname`` copied in from memory, plus the
          host's loader cache and timezone), a fresh ``tmp_size_mb``-MiB tmpfs on ``/tmp`` and
          on ``/dev/shm``, and the job folder read-write at ``/workspace`` (the cwd). Home
          folders, the host ``/tmp``, the project tree and hidden labels are simply absent;
        * **hidden paths**: each of ``hidden_paths`` that a bind would expose is covered by an
          empty read-only mode-0000 tmpfs (folders) or an empty unreadable file (files). The
          default (:func:`~wmrl_envs.sandbox.base.default_hidden_paths`) hides this project's
          installed files -- ``wmrl_envs`` and ``agents`` of a regular install, the editable
          install's ``.pth`` and finder files (so ``import wmrl_envs`` fails inside and the
          checkout's path is not readable from them), the ``.dist-info`` folder;
        * **host paths**: the mount plan reaches bwrap through a memfd (``--args FD``), so
          ``/proc/1/cmdline`` holds only ``bwrap --args N -- setpriv ... python -c BOOT
          solution.py``; a :class:`~wmrl_envs.sandbox.jobdirs.JobFolder` job folder is its own
          tmpfs, so ``/proc/self/mountinfo`` shows ``/workspace`` without a host path (a plain
          folder passed as ``workdir`` still shows its host path there); the cgroup namespace
          hides the host's cgroup path. What remains visible: the interpreter's prefixes
          (bound at their host paths, e.g. a venv inside the checkout: ``/work/main/.venv``),
          and the paths of the hidden mount points themselves;
        * **network**: a new network namespace with only loopback (host loopback services and
          the outside are unreachable);
        * **processes**: new pid, IPC, UTS and cgroup namespaces; the program is started
          through ``setpriv`` as real uid/gid ``uid``/``gid`` (65534 = nobody) with no
          capabilities (empty bounding set), no supplementary groups and ``no_new_privs``.
          When bwrap dies, everything in the sandbox is SIGKILLed (``--die-with-parent``), and
          bwrap dies with the host process (``PR_SET_PDEATHSIG``);
        * **environment**: clean (``HOME=/tmp``, BLAS thread counts 1, plus ``env``).

    Limits, with a cgroup (root; cgroup v1 or v2, see :mod:`~wmrl_envs.sandbox.cgroup`) -- the
    whole process tree, bwrap included, joins one fresh cgroup before bwrap starts:
        * ``memory_mb``: memory of **all processes together**, in MiB, without swap (the
          kernel OOM-kills beyond it: ``extras["oom_killed"]``, ``extras["peak_memory_mb"]``);
          pages the program writes to its tmpfs ``/tmp``, ``/dev/shm`` and tmpfs job folder
          count too. Each process also has ``RLIMIT_AS`` = ``memory_mb`` (one oversized
          allocation raises ``MemoryError`` instead of an OOM kill);
        * ``max_processes``: tasks (processes *and* threads) of this sandbox (``pids.max`` =
          ``max_processes`` + 2 for bwrap's own two processes); concurrent sandboxes of the
          same uid do not share it; ``RLIMIT_NPROC`` is not set;
        * ``cpu_time_s``: ``RLIMIT_CPU`` in seconds (rounded up; SIGXCPU, SIGKILL 1 s later);
        * ``file_size_mb``: ``RLIMIT_FSIZE`` in MiB, per file;
        * ``workdir_size_mb`` / ``workdir_max_files``: total size and entries of the job
          folder -- kernel-enforced for a :class:`~wmrl_envs.sandbox.jobdirs.JobFolder` tmpfs
          (``ENOSPC`` in the program); for a plain folder a watchdog SIGKILLs the run when it
          exceeds them (``extras["workdir_limit_exceeded"]``);
        * ``wall_time_s``: seconds, then the whole cgroup and bwrap's process group are
          SIGKILLed; clean-up (cgroup removal, one ``umount`` of a tmpfs job folder) takes
          well under a second after that;
        * ``tmp_size_mb``: size in MiB of ``/tmp`` and (separately) of ``/dev/shm``;
        * open files: 256.

    Without a usable cgroup (not root, read-only cgroupfs; a
    :class:`~wmrl_envs.sandbox.base.WeakLimitsWarning` says so once): ``memory_mb`` is only the
    per-process ``RLIMIT_AS`` (a program with N processes may hold N x ``memory_mb``), and
    ``max_processes`` is ``RLIMIT_NPROC``, which counts every task of the sandbox uid **on the
    whole host** (concurrent sandboxes of one ``uid`` share it: give them distinct ``uid``
    values). Without root, bwrap also falls back to an unprivileged user namespace
    (``--unshare-user --uid``), where the program keeps the caller's host uid, and job folders
    cannot be tmpfs mounts.

    CPU-seconds (``ExecutionResult.cpu_time_s``): the cgroup's usage, the whole process tree
    (bwrap's own processes and ``setsid`` escapees included); with cgroup v1 it needs the
    ``cpuacct`` hierarchy. Without a cgroup, ``None``: bwrap's outer process exits on its init's
    report without reaping it, so the rusage of the process we wait for holds none of the
    program's CPU.

    Failures of the sandbox itself -- bwrap's set-up, ``setpriv`` or the interpreter failing
    before the program's first line (a one-byte handshake on a pipe tells them apart from
    anything the program prints), the cgroup not creatable or joinable -- raise
    :class:`~wmrl_envs.sandbox.base.SandboxInfrastructureError`; they are never returned as
    the program's result.

    Not isolated / not limited: the kernel is shared (no seccomp filter; the program may create
    unprivileged user namespaces); ``/usr``, the Python installation and ``/proc``'s system-wide
    files (``/proc/meminfo``, ``/proc/cpuinfo``) are readable; CPU *share* is not limited (only
    CPU time).

    After each run, symlinks, FIFOs, sockets and device nodes the program left in the job folder
    are deleted (``extras["removed_special_files"]``), so a grader reading ``submission.csv``
    cannot be pointed at a file outside the folder.

    Args:
        limits: default limits (see :class:`~wmrl_envs.sandbox.base.SandboxLimits`).
        python: interpreter to run inside (default ``sys.executable``; its installation is
            bound read-only at the same paths).
        uid: host uid the program runs as (root mode) / appears as (user-namespace mode).
        gid: host gid, likewise.
        extra_ro_binds: further host folders/files made visible read-only at the same path.
        bwrap: path of the ``bwrap`` binary (default: found on ``PATH``).
        hidden_paths: absolute host paths made unreadable inside (``None``: the default above;
            a list replaces it -- add ``*default_hidden_paths()`` to keep it).

    Raises:
        SandboxUnavailableError: bwrap/setpriv missing, or a probe run failed here.
        ValueError: a relative hidden path.
    """

    name = "bubblewrap"
    isolates = True

    _probe_cache: ClassVar[dict[tuple, tuple[bool, str]]] = {}
    _probe_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        python: str | None = None,
        uid: int = 65534,
        gid: int = 65534,
        extra_ro_binds: Iterable[str | os.PathLike] = (),
        bwrap: str | None = None,
        hidden_paths: Iterable[str | os.PathLike] | None = None,
    ) -> None:
        super().__init__(limits)
        self.python, self.uid, self.gid, self.extra_ro_binds, self.hidden_paths = isolation_settings(
            python, uid, gid, extra_ro_binds, hidden_paths)
        self.bwrap = bwrap or shutil.which("bwrap")
        self.setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        self.as_root = os.geteuid() == 0
        if not self.bwrap:
            raise SandboxUnavailableError(
                "bubblewrap is not installed: run `apt-get install -y bubblewrap` "
                "(or choose backend 'docker')."
            )
        if self.as_root and not os.access(self.setpriv, os.X_OK):
            raise SandboxUnavailableError(
                "setpriv (util-linux) is missing: run `apt-get install -y util-linux`."
            )
        self._binds = self._interpreter_binds()
        #: Whether runs get a whole-sandbox cgroup here (else per-process rlimits; warned once).
        self.whole_sandbox_bounds: bool = warn_if_no_cgroup(self.name)
        ok, why = self._probe()
        if not ok:
            raise SandboxUnavailableError(f"bubblewrap does not work here: {why}")

    # ------------------------------------------------------------------ availability
    @classmethod
    def is_available(cls, python: str | None = None) -> bool:
        """Whether bubblewrap runs here (probed once per interpreter, then cached)."""
        try:
            sb = cls(python=python)
        except SandboxUnavailableError:
            return False
        sb.close()
        return True

    def _probe(self) -> tuple[bool, str]:
        key = (
            self.bwrap, self.python, self.as_root, self.uid, self.gid, tuple(self.extra_ro_binds),
            tuple(self.hidden_paths),
        )
        with self._probe_lock:
            if key in self._probe_cache:
                return self._probe_cache[key]
            expected = sys.prefix if self.python == os.path.abspath(sys.executable) else None
            code = "import sys, os; print(sys.prefix); print(os.getuid())"
            with tempfile.TemporaryDirectory(prefix="wmrl-bwrap-probe-") as tmp:
                try:
                    res = self.run_python(
                        code,
                        tmp,
                        limits=SandboxLimits(wall_time_s=30, cpu_time_s=30, memory_mb=1024),
                        filename="probe.py",
                    )
                except (OSError, SandboxUnavailableError) as exc:
                    result = (False, f"cannot start bwrap: {exc}")
                else:
                    lines = res.stdout.split()
                    if not res.ok:
                        result = (False, f"probe exited {res.exit_code}: {res.stderr.strip()[-2000:]}")
                    elif expected is not None and (not lines or lines[0] != expected):
                        result = (False, f"interpreter inside has sys.prefix={lines[:1]}, expected {expected}")
                    elif self.as_root and (len(lines) < 2 or lines[1] != str(self.uid)):
                        result = (False, f"program did not run as uid {self.uid}: {lines}")
                    else:
                        result = (True, "")
            self._probe_cache[key] = result
            return result

    # ------------------------------------------------------------------ mount plan
    def _interpreter_binds(self) -> list[tuple[str, str]]:
        """(host source, sandbox destination) pairs, read-only, deduplicated."""
        wanted: list[str] = [*python_prefixes(self.python), *self.extra_ro_binds]
        pairs: set[tuple[str, str]] = set()
        for p in wanted:
            if not p or not os.path.exists(p):
                continue
            absp = os.path.abspath(p)
            real = os.path.realpath(p)
            for dest in {absp, real}:
                if dest in _RESERVED or is_under(dest, WORKSPACE):
                    raise SandboxUnavailableError(f"cannot bind {p!r} at reserved path {dest!r}")
                if any(is_under(dest, r) for r in ("/proc", "/dev", "/etc")):
                    continue
                pairs.add((real, dest))
        # /usr is bound wholesale; drop binds that an enclosing bind already provides.
        base = [("/usr", "/usr")] + sorted(pairs, key=lambda sd: (sd[1].count("/"), sd[1]))
        kept: list[tuple[str, str]] = []
        for src, dest in base:
            covered = False
            for s0, d0 in kept:
                if is_under(dest, d0) and src == os.path.realpath(s0 + dest[len(d0):]):
                    covered = True
                    break
            if not covered:
                kept.append((src, dest))
        return kept[1:]

    def _etc_files(self) -> dict[str, bytes]:
        """Content of the sandbox's synthetic ``/etc`` files (copied in through memfds, so no
        host path of theirs appears in the sandbox's mount table)."""
        users = {0: "root", self.uid: "sandbox"}
        groups = {0: "root", self.gid: "sandbox"}
        passwd = "".join(f"{n}:x:{u}:{self.gid if u else 0}:{n}:/tmp:/usr/sbin/nologin\n" for u, n in users.items())
        group = "".join(f"{n}:x:{g}:\n" for g, n in groups.items())
        return {"/etc/passwd": passwd.encode(), "/etc/group": group.encode(), "/etc/hostname": b"sandbox\n"}

    def _hidden_targets(self) -> list[tuple[str, bool]]:
        """(sandbox path, is_dir) of the hidden paths that a bind would otherwise expose."""
        bound = ["/usr", *(d for _, d in self._binds), *(f for f in _HOST_ETC_FILES if os.path.exists(f))]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.isdir(top) and not os.path.islink(top):
                bound.append(top)
        out: dict[str, bool] = {}
        for h in self.hidden_paths:
            for dest in dict.fromkeys([h, os.path.realpath(h)]):
                if not os.path.lexists(dest) or not any(is_under(dest, b) for b in bound):
                    continue
                out[dest] = os.path.isdir(dest) and not os.path.islink(dest)
        return sorted(out.items(), key=lambda kv: (kv[0].count("/"), kv[0]))

    def _argv(self, workdir: Path, limits: SandboxLimits, filename: str, started_w: int) -> tuple[list[str], list[int]]:
        """The bwrap command line and the file descriptors it reads.

        Returns:
            ``(argv, fds)``: ``argv`` is ``bwrap --args FD -- setpriv ... python -c BOOT
            filename`` (the mount plan travels through a memfd, so no host path of the job
            folder or of the plan is in bwrap's own ``/proc/1/cmdline``); ``fds`` are the
            memfds to pass (and close afterwards).
        """
        fds: list[int] = []

        def memfd(data: bytes) -> int:
            fd = os.memfd_create("wmrl-bwrap", 0)
            os.write(fd, data)
            os.lseek(fd, 0, os.SEEK_SET)
            fds.append(fd)
            return fd

        tmp_bytes = str(max(1, int(limits.tmp_size_mb)) * _MIB)
        plan = [
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "sandbox",
        ]
        if not self.as_root:
            plan += [
                "--unshare-user",
                "--uid", str(self.uid),
                "--gid", str(self.gid),
                "--disable-userns",
                "--cap-drop", "ALL",
            ]
        plan += ["--ro-bind", "/usr", "/usr"]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                plan += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                plan += ["--ro-bind", top, top]
        plan += [
            "--proc", "/proc",
            "--dev", "/dev",
            "--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/tmp",
            "--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/dev/shm",
        ]
        etc_files = self._etc_files()
        etc_binds = [(f, f) for f in _HOST_ETC_FILES if os.path.exists(f)]
        # Folders bwrap would create on the way to a bind point get mode 0700: pre-create them
        # world-traversable, or the unprivileged uid could not reach the interpreter.
        dests = [d for _, d in self._binds] + [d for _, d in etc_binds] + list(etc_files)
        # (The sandbox's own tmpfs on /tmp is ours to fill: a venv under the host's /tmp, e.g. a
        # CI checkout there, needs its parents created there too.)
        mounted = ["/usr", "/proc", "/dev", *dests]
        parents: set[str] = set()
        for d in dests:
            parent = os.path.dirname(d)
            while parent not in ("/", "", "/tmp"):
                if any(is_under(parent, m) for m in mounted):
                    break
                parents.add(parent)
                parent = os.path.dirname(parent)
        for parent in sorted(parents, key=lambda p: (p.count("/"), p)):
            plan += ["--perms", "0755", "--dir", parent]
        for src, dest in [*self._binds, *etc_binds]:
            plan += ["--ro-bind", src, dest]
        for dest, data in etc_files.items():
            plan += ["--perms", "0644", "--file", str(memfd(data)), dest]
        for dest, is_dir in self._hidden_targets():
            if is_dir:  # an empty, read-only, mode-0000 tmpfs over it
                plan += ["--perms", "0000", "--size", "4096", "--tmpfs", dest, "--remount-ro", dest]
            else:  # an empty, unreadable file over it
                plan += ["--perms", "0000", "--ro-bind-data", str(memfd(b"")), dest]
        plan += ["--bind", str(workdir), WORKSPACE, "--chdir", WORKSPACE]
        args_fd = memfd(b"".join(a.encode() + b"\0" for a in plan))
        argv = [self.bwrap, "--args", str(args_fd), "--"]
        if self.as_root:
            argv += [
                self.setpriv,
                "--reuid", str(self.uid),
                "--regid", str(self.gid),
                "--clear-groups",
                "--no-new-privs",
                "--bounding-set", "-all",
                "--inh-caps", "-all",
                "--",
            ]
        argv += [self.python, "-c", StartedPipe.bootstrap_for(started_w), filename]
        return argv, fds

    # ------------------------------------------------------------------ running
    def _run(self, source: str, workdir: str | Path, limits: SandboxLimits, env: Mapping[str, str] | None,
             filename: str) -> ExecutionResult:
        lim = limits
        path = prepare_workdir(workdir, source, filename)
        if self.as_root:
            chown_tree(path, self.uid, self.gid)
        # The whole tree (bwrap's two processes included) joins one cgroup before bwrap runs;
        # without one, RLIMIT_NPROC (per host uid, ignored by bwrap/setpriv as root, applied
        # once setpriv drops to uid) is the only process bound.
        cgroup = new_cgroup(lim, extra_pids=_BWRAP_TASKS)
        started = StartedPipe()
        out, removed = run_job(lambda: self._argv(path, lim, filename, started.w), cwd="/",
                               env=base_env("/tmp", "/tmp", env), limits=lim, workdir=path, cgroup=cgroup,
                               preexec_fn=make_preexec(rlimit_table(lim, nproc=None if cgroup else int(lim.max_processes)),
                                                       cgroup), started=started)
        if not out.started:
            # bwrap's set-up, setpriv or the interpreter's start failed: the program never ran.
            why = out.stderr.strip()[-2000:] or f"exit status {out.returncode}"
            if out.timed_out:
                why = f"not started within wall_time_s={lim.wall_time_s} s; {why}"
            raise SandboxInfrastructureError(f"the bubblewrap sandbox did not start the program: {why}")
        # Without a cgroup the rusage is bwrap's own: its outer process exits on its init's
        # report without reaping it, so none of the program's CPU is in it. Not measured then.
        cpu_time_s = out.cpu_time_s if out.cpu_time_source == "cgroup" else None
        extras = {
            "uid": self.uid,
            "gid": self.gid,
            "raw_exit_code": out.returncode,
            "output_truncated": out.truncated,
            "removed_special_files": removed,
            "user_namespace": not self.as_root,
            **limit_extras(out, cgroup is not None),
            "cpu_time_source": "cgroup" if cpu_time_s is not None else None,
        }
        # bwrap reports a signalled child as 128 + signal; a negative code: bwrap itself was killed
        return execution_result(out, self.name, cpu_time_s=cpu_time_s, extras=extras, shell_codes=True)

    def close(self) -> None:
        """Nothing to release (each run's files are memfds, closed after it). Safe to call twice."""
