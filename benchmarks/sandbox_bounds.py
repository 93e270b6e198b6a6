"""Measure the sandbox's whole-sandbox bounds (issue 9, items 2-4).

Prints, for the bubblewrap backend (and Docker with ``--docker``):
    * memory held by a solution that starts 4 children of 200 MiB each under ``memory_mb=256``:
      children that held their block, the cgroup's peak (MiB), the largest sum of the
      resident sizes of the sandbox's processes (MiB; shared pages count once per process)
      and the drop of the host's ``MemAvailable`` (MiB; other load on the machine adds noise;
      both sampled every 10 ms);
    * the largest job folder a program can create (MiB; 1 MiB files until an error or a kill);
    * seconds for one AutoResearch step whose program fills its job folder with empty files
      (program seconds, whole-step seconds, files created), with the default file bound and
      with ``workdir_max_files=200_001``.

Usage: ``python benchmarks/sandbox_bounds.py [--docker]`` (root; ~1 minute).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import warnings

from wmrl_envs.sandbox import BubblewrapSandbox, DockerSandbox, JobFolder, SandboxLimits

FOUR = r"""
import os, signal, time
kids = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        b = bytearray(200 << 20)
        for j in range(0, len(b), 4096):
            b[j] = 1
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
st = [os.waitpid(k, 0)[1] for k in kids]
print("held", sum(os.WIFEXITED(s) and os.WEXITSTATUS(s) == 0 for s in st))
"""

BIG = r"""
n = 0
try:
    while n < 100_000:
        with open(f"b{n}", "wb") as fh:
            fh.write(b"x" * (1 << 20))
        n += 1
except OSError as e:
    print("error", e.errno)
print("files", n)
"""

SMALL = r"""
import os, time
t0 = time.monotonic()
i = 0
try:
    while True:
        os.makedirs(f"d{i // 1000}", exist_ok=True)
        open(f"d{i // 1000}/f{i}", "w").close()
        i += 1
except OSError:
    pass
print("files", i, "seconds", round(time.monotonic() - t0, 2))
"""


def _mem_available_mb() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable"):
                return int(line.split()[1]) // 1024
    return 0


def _rss_of_marked_mb(marker: bytes) -> int:
    """Sum of VmRSS (MiB) of the host processes whose environment holds ``marker``."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if marker not in fh.read():
                    continue
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total // 1024


def measure(sb) -> None:
    print(f"== backend {sb.name}")
    marker = f"wmrl-bounds-{os.getpid()}-{time.monotonic_ns()}"
    base = _mem_available_mb()
    low, rss = [base], [0]
    stop = threading.Event()

    def monitor() -> None:
        while not stop.is_set():
            low.append(_mem_available_mb())
            rss.append(_rss_of_marked_mb(marker.encode()))
            time.sleep(0.01)

    t = threading.Thread(target=monitor)
    t.start()
    with tempfile.TemporaryDirectory() as d:
        lim = SandboxLimits(wall_time_s=60, cpu_time_s=60, memory_mb=256)
        r = sb.run_python(FOUR, d, limits=lim, env={"WMRL_BOUNDS_MARKER": marker})
    stop.set()
    t.join()
    print(
        f"4 x 200 MiB under memory_mb=256: {r.stdout.strip() or 'parent killed'}; oom_killed="
        f"{r.extras.get('oom_killed')} cgroup peak={r.extras.get('peak_memory_mb')} MiB; summed RSS "
        f"max {max(rss)} MiB; host MemAvailable drop {base - min(low)} MiB"
    )
    lim = SandboxLimits(wall_time_s=60, cpu_time_s=60)
    with JobFolder(None, lim) as job:
        r = sb.run_python(BIG, job.path, limits=lim)
        size = sum(os.path.getsize(job.path / f) for f in os.listdir(job.path)) / 2**20
    print(f"largest job folder (JobFolder, bounded={job.bounded}): {size:.0f} MiB; {r.stdout.split()}")
    with tempfile.TemporaryDirectory() as d:
        r = sb.run_python(BIG, d, limits=lim)
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) / 2**20
    print(f"largest job folder (plain folder, watchdog): {size:.0f} MiB; killed for {r.extras.get('workdir_limit_exceeded')!r}")

    from wmrl_envs.envs.autoresearch.env import evaluate

    for max_files in (SandboxLimits().workdir_max_files, 200_001):
        lim = SandboxLimits(wall_time_s=120, cpu_time_s=120, workdir_max_files=max_files)
        with tempfile.TemporaryDirectory() as root:
            t0 = time.monotonic()
            g, _ = evaluate("house-prices", SMALL, sb, workdir_root=root, limits=lim)
            step = time.monotonic() - t0
        print(f"small-files step (workdir_max_files={max_files}): program {g.stdout_tail.strip()}; whole step {step:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docker", action="store_true", help="also measure the Docker backend")
    args = ap.parse_args()
    warnings.simplefilter("default")
    measure(BubblewrapSandbox(SandboxLimits()))
    if args.docker:
        sb = DockerSandbox(SandboxLimits())
        measure(sb)
        sb.close()


if __name__ == "__main__":
    main()
