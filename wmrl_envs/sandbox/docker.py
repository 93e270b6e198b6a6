"""Docker backend, through the ``docker`` Python SDK (``pip install 'wmrl[docker]'``).

Contents:
    * :class:`DockerSandbox` -- backend ``"docker"``.

No registry is used: the image is a near-empty root filesystem (mount points, symlinks
``/bin``/``/lib*`` -> ``/usr``, a minimal ``/etc/passwd``) built in memory and loaded with
``docker import``; the host's ``/usr`` and Python installation are bind-mounted read-only at
run time. The daemon must therefore run on this machine (bind mounts name host paths).
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from .base import ExecutionResult, Sandbox, SandboxInfrastructureError, SandboxLimits, SandboxUnavailableError
from .bubblewrap import WORKSPACE, is_under, isolation_settings, python_prefixes
from .jobdirs import FolderWatch, is_bounded
from .process import DEFAULT_NOFILE, base_env, chown_tree, exit_and_signal, prepare_workdir, sanitize_workdir, tail_text

__all__ = ["DockerSandbox"]

IMAGE_REPOSITORY = "wmrl-sandbox"
_HOST_ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime")
_HOW_TO_START = (
    "start the daemon (`systemctl start docker`, or `apt-get install -y docker.io && dockerd &`), "
    "check DOCKER_HOST and that this user may use /var/run/docker.sock (group 'docker'), or choose "
    "backend 'bubblewrap' (apt-get install -y bubblewrap)"
)


def _import_docker():
    try:
        import docker  # noqa: PLC0415  (lazy: optional dependency)
    except ImportError as exc:
        raise SandboxUnavailableError(
            "the docker Python SDK is not installed: `pip install 'docker>=7'` "
            "(or `pip install 'wmrl[docker]'`), or choose backend 'bubblewrap'."
        ) from exc
    return docker


def _rootfs_tar(uid: int, gid: int) -> bytes:
    """A tiny root filesystem: mount points, /usr-merge symlinks, /etc/passwd and /etc/group."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, 0
            tar.addfile(info)

        def add_file(name: str, text: str) -> None:
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))

        for d in ("usr", "proc", "dev", "sys", "etc", WORKSPACE.strip("/")):
            add_dir(d)
        add_dir("tmp", 0o1777)
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = "/" + top
            if os.path.islink(host):
                info = tarfile.TarInfo(top)
                info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, os.readlink(host), 0o777, 0
                tar.addfile(info)
            elif os.path.isdir(host):
                add_dir(top)
        add_file(
            "etc/passwd",
            "root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"sandbox:x:{uid}:{gid}:sandbox:/tmp:/usr/sbin/nologin\n",
        )
        add_file("etc/group", f"root:x:0:\nsandbox:x:{gid}:\n")
    return buf.getvalue()


class DockerSandbox(Sandbox):
    """Runs each program in a fresh Docker container from a locally built, registry-free image.

    Isolation:
        * **filesystem**: read-only root filesystem that is nearly empty; the host's ``/usr``
          and Python installation (``sys.prefix``, ``sys.base_prefix``; same paths) plus
          ``extra_ro_binds`` are bind-mounted read-only; the job folder is bind-mounted
          read-write at ``/workspace`` (the cwd); ``/tmp`` is a ``tmp_size_mb``-MiB tmpfs and
          ``/dev/shm`` is ``tmp_size_mb`` MiB. Nothing else of the host is visible;
        * **network**: ``network_mode="none"`` (loopback only);
        * **processes/privileges**: own pid/IPC/UTS namespaces, user ``uid:gid`` (65534 =
          nobody), all capabilities dropped, ``no-new-privileges``, default seccomp profile;
        * **environment**: clean (``HOME=/tmp``, BLAS thread counts 1, plus ``env``).

    Limits:
        * ``memory_mb``: the container's cgroup memory limit in MiB (``mem_limit``; no swap:
          ``memswap_limit`` equal), for all its processes together -- exceeding it gets the
          program OOM-killed, ``extras["oom_killed"]`` -- and ``RLIMIT_DATA`` of the same size
          per process (most large allocations raise ``MemoryError`` first);
        * ``max_processes``: the container's cgroup ``pids.max`` (``pids_limit``; per
          container, unlike ``RLIMIT_NPROC``);
        * ``workdir_size_mb`` / ``workdir_max_files``: kernel-enforced when the job folder is a
          :class:`~wmrl_envs.sandbox.jobdirs.JobFolder` tmpfs, else a watchdog kills the
          container when the folder exceeds them (``extras["workdir_limit_exceeded"]``);
        * ``cpu_time_s``: ``RLIMIT_CPU`` in seconds (rounded up); ``file_size_mb``:
          ``RLIMIT_FSIZE`` in MiB per file; open files: 256;
        * ``wall_time_s``: seconds, then the container is killed;
        * ``tmp_size_mb``: MiB of ``/tmp`` and of ``/dev/shm`` (each).

    Hidden paths: ``hidden_paths`` under a bound folder are covered with an empty read-only
    tmpfs (folders) or ``/dev/null`` (files); by default this project's own installed files
    (:func:`~wmrl_envs.sandbox.base.default_hidden_paths`).

    Failures of Docker itself (daemon gone, container not created or started, API errors
    mid-run) raise :class:`~wmrl_envs.sandbox.base.SandboxInfrastructureError`.

    Not isolated / not limited: the kernel is shared; CPU share is not limited unless
    ``cpus`` is given. Output is read
    from the container log (json-file, last ~1 MiB kept by Docker, 64 KiB per stream returned).
    Per-run overhead is container create/start/remove (roughly 0.3-1 s).

    CPU-seconds: ``ExecutionResult.cpu_time_s`` is ``None``. Docker removes the container's
    cgroup when it exits, and ``stats`` of a running container costs a sampling round-trip per
    call, so the container's usage is not read; callers that charge execution CPU (the
    AutoResearch env, the wrappers) then fall back to the CPU they measure on the host, which
    does not include the container's.

    Args:
        limits: default limits (see :class:`~wmrl_envs.sandbox.base.SandboxLimits`).
        python: interpreter to run (default ``sys.executable``).
        uid: uid the program runs as in the container (and owner of the job folder).
        gid: gid, likewise.
        extra_ro_binds: further host paths made visible read-only at the same path.
        cpus: optional CPU share (e.g. ``1.0``) enforced by the cgroup.
        client: an existing ``docker.DockerClient`` (default: ``docker.from_env()``).
        hidden_paths: absolute host paths made unreadable inside (``None``: the default above).

    Raises:
        SandboxUnavailableError: SDK missing, daemon unreachable, or image import failed.
    """

    name = "docker"
    isolates = True

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        cpus: float | None = None,
        client: Any = None,
        python: str | None = None,
        uid: int = 65534,
        gid: int = 65534,
        extra_ro_binds: Iterable[str | os.PathLike] = (),
        hidden_paths: Iterable[str | os.PathLike] | None = None,
    ) -> None:
        super().__init__(limits)
        self._docker = _import_docker()
        self.python, self.uid, self.gid, self.extra_ro_binds, self.hidden_paths = isolation_settings(
            python, uid, gid, extra_ro_binds, hidden_paths)
        self.cpus = cpus
        self._own_client = client is None
        try:
            self.client = client or self._docker.from_env(timeout=120)
            self.client.ping()
        except Exception as exc:  # DockerException, requests errors, socket errors
            raise SandboxUnavailableError(f"Docker daemon unreachable ({exc}): {_HOW_TO_START}.") from exc
        self._binds = self._plan_binds()
        self.image = self._ensure_image()

    @classmethod
    def is_available(cls) -> bool:
        """Whether the SDK is installed and a Docker daemon answers (quick ping)."""
        try:
            docker = _import_docker()
            client = docker.from_env(timeout=5)
        except Exception:
            return False
        try:
            return bool(client.ping())
        except Exception:
            return False
        finally:
            client.close()

    # ------------------------------------------------------------------ image and mounts
    def _plan_binds(self) -> list[tuple[str, str]]:
        pairs: list[tuple[str, str]] = [("/usr", "/usr")]
        for p in [*python_prefixes(self.python), *self.extra_ro_binds]:
            if not p or not os.path.exists(p):
                continue
            real = os.path.realpath(p)
            for dest in dict.fromkeys([os.path.abspath(p), real]):
                if dest in ("/", "/tmp", "/proc", "/dev", "/etc", WORKSPACE) or is_under(dest, WORKSPACE):
                    raise SandboxUnavailableError(f"cannot bind {p!r} at reserved path {dest!r}")
                if any(is_under(dest, r) for r in ("/proc", "/dev", "/sys", "/etc")):
                    continue
                if any(is_under(dest, d0) and real == os.path.realpath(s0 + dest[len(d0):]) for s0, d0 in pairs):
                    continue
                pairs.append((real, dest))
        pairs += [(f, f) for f in _HOST_ETC_FILES if os.path.exists(f)]
        return pairs

    def _hidden_targets(self) -> list[tuple[str, bool]]:
        """(container path, is_dir) of hidden paths that lie under a bound folder."""
        bound = [d for _, d in self._binds]
        out: dict[str, bool] = {}
        for h in self.hidden_paths:
            for dest in dict.fromkeys([h, os.path.realpath(h)]):
                if os.path.lexists(dest) and any(is_under(dest, b) for b in bound):
                    out[dest] = os.path.isdir(dest) and not os.path.islink(dest)
        return sorted(out.items())

    def _ensure_image(self) -> str:
        docker = self._docker
        data = _rootfs_tar(self.uid, self.gid)
        tag = hashlib.sha256(data).hexdigest()[:12]
        ref = f"{IMAGE_REPOSITORY}:{tag}"
        try:
            self.client.images.get(ref)
            return ref
        except docker.errors.ImageNotFound:
            pass
        except Exception as exc:
            raise SandboxUnavailableError(f"Docker daemon error: {exc}") from exc
        try:
            self.client.api.import_image_from_data(data, repository=IMAGE_REPOSITORY, tag=tag)
            self.client.images.get(ref)
        except Exception as exc:
            raise SandboxUnavailableError(f"could not import the sandbox image {ref}: {exc}") from exc
        return ref

    # ------------------------------------------------------------------ running
    def _run(self, source: str, workdir: str | Path, limits: SandboxLimits, env: Mapping[str, str] | None,
             filename: str) -> ExecutionResult:
        docker = self._docker
        from requests.exceptions import RequestException  # docker depends on requests

        lim = limits
        path = prepare_workdir(workdir, source, filename)
        if os.geteuid() == 0:
            chown_tree(path, self.uid, self.gid)
        else:  # the container user must be able to write; best effort for non-root callers
            os.chmod(path, 0o777)
        mib = 1024 * 1024
        cpu = max(1, int(-(-float(lim.cpu_time_s) // 1)))
        mem = int(lim.memory_mb) * mib
        fsize = int(lim.file_size_mb) * mib
        Ulimit, Mount, LogConfig = docker.types.Ulimit, docker.types.Mount, docker.types.LogConfig
        mounts = [Mount(target=d, source=s, type="bind", read_only=True) for s, d in self._binds]
        tmpfs = {"/tmp": f"rw,nosuid,nodev,size={int(lim.tmp_size_mb)}m,mode=1777"}
        for dest, is_dir in self._hidden_targets():
            if is_dir:
                tmpfs[dest] = "ro,nosuid,nodev,size=4k,mode=000"
            else:
                mounts.append(Mount(target=dest, source="/dev/null", type="bind", read_only=True))
        mounts.append(Mount(target=WORKSPACE, source=str(path), type="bind", read_only=False))
        kwargs: dict[str, Any] = dict(
            command=[self.python, filename],
            working_dir=WORKSPACE,
            user=f"{self.uid}:{self.gid}",
            environment=base_env("/tmp", "/tmp", env),
            hostname="sandbox",
            network_mode="none",
            read_only=True,
            tmpfs=tmpfs,
            shm_size=f"{int(lim.tmp_size_mb)}m",
            mounts=mounts,
            mem_limit=mem,
            memswap_limit=mem,
            pids_limit=int(lim.max_processes),
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            ulimits=[
                Ulimit(name="cpu", soft=cpu, hard=cpu + 1),
                Ulimit(name="fsize", soft=fsize, hard=fsize),
                Ulimit(name="data", soft=mem, hard=mem),
                Ulimit(name="nofile", soft=DEFAULT_NOFILE, hard=DEFAULT_NOFILE),
                Ulimit(name="core", soft=0, hard=0),
            ],
            log_config=LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"}),
            labels={"wmrl.sandbox": "1"},
            stdin_open=False,
            detach=True,
        )
        if self.cpus:
            kwargs["nano_cpus"] = int(self.cpus * 1e9)
        start = time.monotonic()
        container = None
        watch: FolderWatch | None = None
        timed_out = False
        try:
            try:
                container = self.client.containers.create(self.image, **kwargs)
                container.start()
            except Exception as exc:
                raise SandboxInfrastructureError(f"could not start a sandbox container: {exc}") from exc
            if not is_bounded(path, lim):
                def kill_container(c=container) -> None:
                    try:
                        c.kill()
                    except Exception:
                        pass  # it ended meanwhile
                watch = FolderWatch(path, lim, kill_container)
                watch.start()
            remaining = max(0.01, lim.wall_time_s - (time.monotonic() - start))
            try:
                status = container.wait(timeout=remaining)
            except RequestException:
                timed_out = True
                try:
                    container.kill()
                except docker.errors.APIError:
                    pass  # it ended meanwhile
                status = container.wait(timeout=60)
            wall = time.monotonic() - start
            rc = int(status.get("StatusCode", -1))
            stdout = tail_text(container.logs(stdout=True, stderr=False))
            stderr = tail_text(container.logs(stdout=False, stderr=True))
            container.reload()
            oom = bool(container.attrs.get("State", {}).get("OOMKilled", False))
        except SandboxUnavailableError:
            raise
        except (docker.errors.DockerException, RequestException) as exc:
            raise SandboxInfrastructureError(f"Docker failed during the run: {exc}") from exc
        finally:
            if watch is not None:
                watch.stop()
            if container is not None:
                try:
                    container.remove(force=True)
                except Exception:
                    pass
        removed = sanitize_workdir(path)
        # 128 + N: killed by signal N (time-out kill, OOM, SIGXCPU, ...)
        exit_code, sig = exit_and_signal(rc, timed_out, negative_is_signal=False, shell_codes=True)
        return ExecutionResult(
            exit_code=exit_code,
            stdout=stdout,
            stderr=stderr,
            wall_time_s=wall,
            timed_out=timed_out,
            signal=sig,
            backend=self.name,
            cpu_time_s=None,  # not measured: see the class docstring
            extras={
                "uid": self.uid,
                "gid": self.gid,
                "raw_exit_code": rc,
                "oom_killed": oom,
                "image": self.image,
                "removed_special_files": removed,
                "cgroup": True,
                "cpu_time_source": None,
                "workdir_limit_exceeded": watch.exceeded if watch is not None else "",
            },
        )

    def close(self) -> None:
        """Close the Docker client if this sandbox created it. Safe to call twice."""
        client, self.client = getattr(self, "client", None), None
        if client is not None and self._own_client:
            try:
                client.close()
            except Exception:
                pass
