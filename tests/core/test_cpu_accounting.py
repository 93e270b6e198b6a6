"""CPU-second accounting: every cost source is charged in CPU-seconds beside wall-clock.

What is checked (``docs/method.md``, "Cost accounting"):

* the sandboxes report the CPU-seconds of the whole sandboxed process tree
  (``ExecutionResult.cpu_time_s``) on programs whose CPU time is known: a busy parent and a
  busy forked child (about 1.2 CPU-s), a sleeper (about 0 CPU-s, 0.5 s wall); from the cgroup,
  which also sees a ``setsid`` escapee, and from ``os.wait4``'s rusage without one; a program
  that moves itself out of its cgroup (possible as root under the subprocess backend only) is
  not counted from then on;
* the AutoResearch env puts it in ``info["execution_cpu_s"]``;
* the wrappers (per-episode, group, threaded group, vector, Ray worker) charge the envs'
  declared ``execution_cpu_s`` exactly, the measured CPU when an env reports none, and count an
  env's ``None`` as unmeasured;
* world models: a declared ``declared_cpu_s_per_prediction`` is charged ``n ×`` that; else the
  measured CPU of the call, its own: a busy sibling thread is not charged to it, a thread it
  starts is;
* the ledger: CPU-seconds through ``add``/``timed``/``merge``, its state round trip, and an old
  state without CPU-seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from wmrl_envs.core import (
    EXECUTION,
    EXECUTION_CPU_KEY,
    WORLD_MODEL_SOURCE,
    CostLedger,
    Stopwatch,
    execution_cpu_seconds,
    predict_checked,
)
from wmrl_envs.sandbox.base import ExecutionResult, Sandbox, SandboxLimits
from wmrl_envs.sandbox.cgroup import CgroupSupport, ExecutionCgroup, _detect, cgroup_support
from wmrl_envs.world_models.base import WorldModelPrediction
from wmrl_envs.wrappers import AnchoredWorldModelWrapper
from wmrl_envs.core import CorrectionConfig

__all__: list[str] = []

LIMITS = SandboxLimits(wall_time_s=60.0, cpu_time_s=30.0, memory_mb=1024)

#: The parent and a forked child each burn 0.6 CPU-s; the parent waits for the child.
BUSY_PARENT_AND_CHILD = """
import os, time
pid = os.fork()
while time.process_time() < 0.6:
    pass
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print("done", flush=True)
"""

SLEEPER = "import time\ntime.sleep(0.5)\nprint('slept', flush=True)\n"

#: A grandchild that left the process group with setsid burns 0.6 CPU-s; nobody waits for it.
SETSID_ESCAPEE = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while time.process_time() < 0.6:
            pass
        open("escapee-done", "w").close()
        os._exit(0)
    os._exit(0)
t0 = time.monotonic()
while not os.path.exists("escapee-done") and time.monotonic() - t0 < 30:
    time.sleep(0.02)
"""


def _burn(cpu_s: float) -> None:
    """Use ``cpu_s`` CPU-seconds of this thread."""
    t_end = time.thread_time() + cpu_s
    while time.thread_time() < t_end:
        pass


# ------------------------------------------------------------------------------- sandboxes


def _backend(name: str) -> Sandbox:
    if name == "bubblewrap":
        from wmrl_envs.sandbox.bubblewrap import BubblewrapSandbox

        if not BubblewrapSandbox.is_available():
            pytest.skip("bubblewrap is not usable here (apt-get install -y bubblewrap)")
        return BubblewrapSandbox(LIMITS)
    from wmrl_envs.sandbox.subprocess import SubprocessSandbox

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # UnsafeSandboxWarning: trusted test programs only
        return SubprocessSandbox(LIMITS)


@pytest.mark.parametrize("backend", ["bubblewrap", "subprocess"])
def test_sandbox_cpu_time_of_a_busy_tree_and_of_a_sleeper(backend: str, tmp_path: Path) -> None:
    sb = _backend(backend)
    (tmp_path / "busy").mkdir()
    (tmp_path / "sleep").mkdir()
    busy = sb.run_python(BUSY_PARENT_AND_CHILD, tmp_path / "busy")
    assert busy.ok and busy.stdout.strip() == "done", busy.stderr
    assert busy.cpu_time_s is not None and 1.1 <= busy.cpu_time_s <= 2.5  # 2 x 0.6 + interpreter start-up
    sleeper = sb.run_python(SLEEPER, tmp_path / "sleep")
    assert sleeper.ok and sleeper.wall_time_s >= 0.5
    assert sleeper.cpu_time_s is not None and sleeper.cpu_time_s < 0.3
    source = "cgroup" if cgroup_support().available else "rusage"
    assert busy.extras["cpu_time_source"] == sleeper.extras["cpu_time_source"] == source


def _no_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    import wmrl_envs.sandbox.process as process

    monkeypatch.setattr(process, "cgroup_support", lambda: CgroupSupport(0, (), "disabled by the test"))


def test_subprocess_without_cgroup_reports_the_wait4_rusage_which_misses_setsid_escapees(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_cgroup(monkeypatch)
    sb = _backend("subprocess")
    for d in ("busy", "escape"):
        (tmp_path / d).mkdir()
    busy = sb.run_python(BUSY_PARENT_AND_CHILD, tmp_path / "busy")
    assert busy.ok and not busy.extras["cgroup"] and busy.extras["cpu_time_source"] == "rusage"
    assert 1.1 <= busy.cpu_time_s <= 2.5  # the child was waited for: its CPU is in the rusage
    escape = sb.run_python(SETSID_ESCAPEE, tmp_path / "escape")
    assert escape.ok and (tmp_path / "escape" / "escapee-done").exists()
    assert escape.cpu_time_s < 0.3  # the escapee's 0.6 s is not seen (the documented limit)


def test_bubblewrap_without_cgroup_reports_no_cpu_time(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """bwrap's outer process exits without reaping its init: its rusage would read ~0, so the
    backend says "not measured" (``None``) rather than a wrong number."""
    _no_cgroup(monkeypatch)
    sb = _backend("bubblewrap")
    res = sb.run_python(BUSY_PARENT_AND_CHILD, tmp_path)
    assert res.ok and not res.extras["cgroup"]
    assert res.cpu_time_s is None and res.extras["cpu_time_source"] is None


@pytest.mark.parametrize("backend", ["bubblewrap", "subprocess"])
def test_cgroup_cpu_time_includes_a_setsid_escapee(backend: str, tmp_path: Path) -> None:
    if not cgroup_support().available:
        pytest.skip(f"no usable cgroup here: {cgroup_support().reason}")
    if cgroup_support().version == 1 and len(cgroup_support().parents) < 3:
        pytest.skip("cgroup v1 without a writable cpuacct hierarchy")
    res = _backend(backend).run_python(SETSID_ESCAPEE, tmp_path)
    assert res.ok and (tmp_path / "escapee-done").exists()
    assert res.extras["cpu_time_source"] == "cgroup" and 0.48 <= res.cpu_time_s <= 2.0  # 0.6 s less 20% (load)


#: The program writes its pid into the root groups' ``cgroup.procs`` (v1 cpuacct, pids, memory;
#: v2 unified), then burns 0.6 CPU-s and prints how many groups it moved to.
LEAVE_CGROUP = """
import os, time
moved = 0
for f in ("/sys/fs/cgroup/cpuacct/cgroup.procs", "/sys/fs/cgroup/pids/cgroup.procs",
          "/sys/fs/cgroup/memory/cgroup.procs", "/sys/fs/cgroup/cgroup.procs"):
    try:
        with open(f, "w") as fh:
            fh.write(str(os.getpid()))
        moved += 1
    except OSError:
        pass
while time.process_time() < 0.6:
    pass
print(moved, flush=True)
"""


@pytest.mark.parametrize("backend", ["bubblewrap", "subprocess"])
def test_a_program_that_leaves_its_cgroup(backend: str, tmp_path: Path) -> None:
    """Bubblewrap: the program cannot leave (uid 65534, no ``/sys``), its CPU is counted. The
    subprocess backend as root: it can, and its CPU from then on is not counted (the documented
    limit of ``ExecutionResult.cpu_time_s``: that backend isolates nothing)."""
    support = cgroup_support()
    if not support.available:
        pytest.skip(f"no usable cgroup here: {support.reason}")
    if support.version == 1 and len(support.parents) < 3:
        pytest.skip("cgroup v1 without a writable cpuacct hierarchy")
    if backend == "subprocess" and os.geteuid() != 0:
        pytest.skip("only a root program can move itself to a root-owned cgroup")
    res = _backend(backend).run_python(LEAVE_CGROUP, tmp_path)
    assert res.ok, res.stderr
    assert res.extras["cpu_time_source"] == "cgroup"
    if backend == "bubblewrap":
        assert res.stdout.strip() == "0"
        assert 0.48 <= res.cpu_time_s <= 2.0  # cgroup vs process_time: within 20% under load
    else:
        assert int(res.stdout) >= 1  # it left the execution cgroup
        assert res.cpu_time_s < 0.3  # its 0.6 CPU-s after leaving are not counted


def test_cgroup_v1_uses_the_cpuacct_hierarchy_and_v2_cpu_stat(tmp_path: Path) -> None:
    mem, pids, cpu = tmp_path / "memory", tmp_path / "pids", tmp_path / "cpuacct"
    for d in (mem, pids, cpu):
        d.mkdir()
    mi, cg = tmp_path / "mountinfo", tmp_path / "cgroup"
    mi.write_text(
        f"35 31 0:32 / {mem} rw - cgroup cgroup rw,memory\n"
        f"39 31 0:36 / {pids} rw - cgroup cgroup rw,pids\n"
        f"33 31 0:30 / {cpu} rw - cgroup cgroup rw,cpu,cpuacct\n"
    )
    cg.write_text("8:pids:/\n4:memory:/\n2:cpu,cpuacct:/\n")
    support = _detect(str(mi), str(cg))
    assert support == CgroupSupport(1, (str(mem), str(pids), str(cpu)))
    ex = ExecutionCgroup(memory_mb=64, max_pids=5, support=support)
    assert ex.cpu_folder == ex.folders[2] and Path(ex.cpu_folder).parent == cpu
    assert ex.cpu_seconds() is None  # nothing to read yet
    Path(ex.cpu_folder, "cpuacct.usage").write_text("1234567890\n")
    assert ex.cpu_seconds() == pytest.approx(1.23456789)
    # without a cpuacct hierarchy: memory and pids only, no CPU-seconds from the cgroup
    cg.write_text("8:pids:/\n4:memory:/\n")
    assert _detect(str(mi), str(cg)) == CgroupSupport(1, (str(mem), str(pids)))

    root = tmp_path / "unified"
    root.mkdir()
    (root / "cgroup.controllers").write_text("memory pids\n")
    (root / "cgroup.subtree_control").write_text("memory pids\n")
    v2 = ExecutionCgroup(memory_mb=64, max_pids=5, support=CgroupSupport(2, (str(root),)))
    Path(v2.cpu_folder, "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    assert v2.cpu_folder == v2.folders[0] and v2.cpu_seconds() == 2.5


def test_real_cgroup_keeps_its_cpu_seconds_after_removal() -> None:
    support = cgroup_support()
    if not support.available or (support.version == 1 and len(support.parents) < 3):
        pytest.skip("no usable cgroup with CPU accounting here")
    ex = ExecutionCgroup(memory_mb=256, max_pids=8)
    code = "import time\nwhile time.process_time() < 0.4:\n    pass\n"
    subprocess.run([sys.executable, "-c", code], preexec_fn=ex.join, check=True, timeout=60)
    # The cgroup's cpu.stat and the child's own process_time() are two accountings of the same
    # work; they usually differ by a few milliseconds (CI once read 0.3997 s), but a fresh-clone CI
    # run on a loaded machine read 0.372 s right after the child exited (cause not established: a
    # statistics flush that lags, or CPU the child spent before joining). The figure is re-read for
    # up to 3 s, and 10% below the child's own count is accepted.
    deadline = time.monotonic() + 3.0
    before = ex.cpu_seconds()
    while (before is None or before < 0.38) and time.monotonic() < deadline:
        time.sleep(0.1)
        before = ex.cpu_seconds()
    assert before is not None and 0.36 <= before <= 1.5
    assert ex.remove() and not any(os.path.exists(f) for f in ex.folders)
    assert ex.cpu_seconds() == before


# ------------------------------------------------------------------------------- AutoResearch env


class _FixedCpuSandbox(Sandbox):
    """Runs nothing: writes no submission and reports a fixed ``cpu_time_s``."""

    name = "fixed-cpu"
    isolates = False

    def __init__(self, cpu_time_s: float | None) -> None:
        super().__init__(LIMITS)
        self.cpu_time_s = cpu_time_s

    def run_python(self, source, workdir, *, limits=None, env=None, filename="solution.py"):
        return ExecutionResult(0, "", "", 0.01, backend=self.name, cpu_time_s=self.cpu_time_s)


def test_autoresearch_info_carries_the_sandboxed_trees_cpu_seconds(tmp_path: Path) -> None:
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv

    busy = "import time\nwhile time.process_time() < 0.5:\n    pass\nprint('no submission')\n"
    env = AutoResearchEnv(tasks=["house-prices"], sandbox=_backend("subprocess"), limits=LIMITS,
                          workdir_root=str(tmp_path))
    env.reset(seed=0)
    _, _, _, _, info = env.step(busy)
    assert info["status"] == "ran_no_sub" and env.last_grade is not None
    sandbox_cpu = env.last_grade.cpu_time_s
    # the kernel's count for the tree and the child's own process_time() differ under load: a
    # loaded CI machine measured 0.472 for a loop that stopped at 0.5, so the bound allows 20%
    assert 0.4 <= sandbox_cpu <= 1.5
    # the tree's CPU plus the host thread's share of the step (public files, grading)
    assert sandbox_cpu <= info[EXECUTION_CPU_KEY] <= sandbox_cpu + 1.0
    env.reset(seed=0)
    _, _, _, _, info = env.step("def f(:\n")  # decided on the host: no execution
    assert info["status"] == "syntax_err" and info[EXECUTION_CPU_KEY] == 0.0  # nothing executed
    env.close()

    fixed = AutoResearchEnv(tasks=["house-prices"], sandbox=_FixedCpuSandbox(2.0), workdir_root=str(tmp_path))
    fixed.reset(seed=0)
    assert 2.0 <= fixed.step("print(1)\n")[4][EXECUTION_CPU_KEY] < 2.5
    unmeasured = AutoResearchEnv(tasks=["house-prices"], sandbox=_FixedCpuSandbox(None), workdir_root=str(tmp_path))
    unmeasured.reset(seed=0)
    assert unmeasured.step("print(1)\n")[4][EXECUTION_CPU_KEY] is None


def test_the_boosting_baseline_is_an_execution_that_costs_real_fitting(tmp_path: Path) -> None:
    """``wmrl train``'s default shows gradient boosting as the script's current model (issue 28):
    its execution is valid and costs its fit on top of the interpreter's start-up, against a
    starter whose linear fit is negligible (measured here: 6.6 vs 1.7 CPU-s on land-cover)."""
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.tasks import get_task

    task = get_task("land-cover")  # 6 classes: boosting fits a tree per class and iteration
    cpu = {}
    for baseline in ("starter", "boosting"):
        env = AutoResearchEnv(tasks=[task.task_id], sandbox=_backend("subprocess"), limits=LIMITS,
                              workdir_root=str(tmp_path))
        env.reset(seed=0)
        info = env.step(task.starter_code_with(task.baseline_model_line(baseline)))[4]
        env.close()
        assert info["status"] == "valid", (baseline, info)
        cpu[baseline] = info[EXECUTION_CPU_KEY]
    assert cpu["boosting"] >= 2.0 * cpu["starter"] and cpu["boosting"] - cpu["starter"] >= 1.5, cpu


# ------------------------------------------------------------------------------- wrappers


class DeclaredCostEnv(gym.Env):
    """One-step env that declares ``cpu_s`` CPU-seconds per execution (``None``: not measured;
    ``"omit"``: no key, and it burns ``burn_s`` CPU-seconds instead)."""

    def __init__(self, cpu_s: Any = 2.5, burn_s: float = 0.0) -> None:
        self.observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Box(0.0, 1.0, (1,), np.float32)
        self.cpu_s, self.burn_s = cpu_s, burn_s
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.steps += 1
        info: dict[str, Any] = {}
        if self.cpu_s == "omit":
            _burn(self.burn_s)
        else:
            info[EXECUTION_CPU_KEY] = self.cpu_s
        return np.zeros(1, np.float32), float(np.asarray(action).ravel()[0]), True, False, info


class ConstantWorldModel:
    """Scores every action 0.5; optionally declares its CPU cost or burns CPU per call."""

    def __init__(self, declared: Any = None, burn_s: float = 0.0) -> None:
        if declared is not None:
            self.declared_cpu_s_per_prediction = declared
        self.burn_s = burn_s
        self.calls = 0

    def predict(self, contexts, actions):
        self.calls += 1
        _burn(self.burn_s)
        return [WorldModelPrediction(score=0.5) for _ in actions]


def _real_wrapper(env: gym.Env, **kw: Any) -> AnchoredWorldModelWrapper:
    return AnchoredWorldModelWrapper(env, None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=2, **kw)


def _episodes(w: AnchoredWorldModelWrapper, n: int) -> None:
    for k in range(n):
        w.reset(seed=k // w.group_size)  # the episodes of a group share one task
        w.step(np.array([0.25 * (k % 4)], np.float32))


def test_per_episode_wrapper_charges_the_envs_declared_cpu_exactly() -> None:
    w = _real_wrapper(DeclaredCostEnv(2.5))
    _episodes(w, 6)
    assert w.loop.ledger.count(EXECUTION) == 6
    assert w.loop.ledger.cpu_seconds(EXECUTION) == 6 * 2.5 and w.loop.ledger.cpu_unmeasured(EXECUTION) == 0
    assert w.loop.ledger.seconds(EXECUTION) < 6 * 2.5  # the declared cost is charged, not waited for


def test_group_apis_charge_declared_cpu_exactly_also_on_threads() -> None:
    acts = [np.array([a], np.float32) for a in (0.1, 0.4, 0.7, 0.9)]
    serial = AnchoredWorldModelWrapper(DeclaredCostEnv(2.5), None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=4)
    threaded = AnchoredWorldModelWrapper(DeclaredCostEnv(2.5), None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=4,
                                         execution_envs=[DeclaredCostEnv(2.5)])
    for w in (serial, threaded):
        for k in range(3):
            w.score_group(acts, seed=k)
        assert w.loop.ledger.count(EXECUTION) == 12 and w.loop.ledger.cpu_seconds(EXECUTION) == 12 * 2.5


def test_an_env_without_the_key_is_charged_the_measured_cpu_and_none_counts_as_unmeasured() -> None:
    burner = _real_wrapper(DeclaredCostEnv("omit", burn_s=0.15))
    _episodes(burner, 4)
    assert burner.loop.ledger.cpu_unmeasured(EXECUTION) == 0
    assert 4 * 0.15 <= burner.loop.ledger.cpu_seconds(EXECUTION) <= 4 * 0.15 + 0.5
    unknown = _real_wrapper(DeclaredCostEnv(None))
    _episodes(unknown, 4)
    assert unknown.loop.ledger.count(EXECUTION) == unknown.loop.ledger.cpu_unmeasured(EXECUTION) == 4
    assert unknown.loop.ledger.cpu_seconds(EXECUTION) == 0.0
    bad = _real_wrapper(DeclaredCostEnv(-1.0))
    bad.reset(seed=0)
    with pytest.raises(ValueError, match="execution_cpu_s"):
        bad.step(np.array([0.5], np.float32))


def test_threaded_group_without_the_key_is_charged_the_groups_cpu_once() -> None:
    """Four rollouts burning 0.1 CPU-s each on two threads: about 0.4 CPU-s in all, not the
    sum of per-rollout process-CPU differences (each would include the other thread's)."""
    acts = [np.array([0.5], np.float32)] * 4
    w = AnchoredWorldModelWrapper(DeclaredCostEnv("omit", burn_s=0.1), None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=4,
                                  execution_envs=[DeclaredCostEnv("omit", burn_s=0.1)])
    w.score_group(acts, seed=0)
    assert 0.4 <= w.loop.ledger.cpu_seconds(EXECUTION) <= 0.4 + 0.3


@pytest.mark.parametrize(("vectorization", "autoreset"), [("sync", "NextStep"), ("sync", "SameStep"), ("async", "SameStep")])
def test_vector_wrapper_charges_declared_cpu_exactly(vectorization: str, autoreset: str) -> None:
    from gymnasium.vector import AutoresetMode

    from wmrl_envs.wrappers import AnchoredWorldModelVectorWrapper
    from wmrl_envs.wrappers.routed_sub_env import make_vector_env

    mode = AutoresetMode(autoreset)
    venv = make_vector_env(lambda: DeclaredCostEnv(2.5), 4, vectorization=vectorization, autoreset_mode=mode)
    w = AnchoredWorldModelVectorWrapper(venv, None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=2, seed=0)
    w.reset(seed=0)
    n_steps = 3
    for _ in range(n_steps):
        _, _, _, _, infos = w.step(np.full((4, 1), 0.5, np.float32))
        assert "wmrl_exec_cpu_seconds" not in infos  # moved into the ledger
        if mode == AutoresetMode.NEXT_STEP:
            w.step(np.full((4, 1), 0.5, np.float32))  # the reset step: no execution
    assert w.loop.ledger.count(EXECUTION) == 4 * n_steps
    assert w.loop.ledger.cpu_seconds(EXECUTION) == 4 * n_steps * 2.5 and w.loop.ledger.cpu_unmeasured(EXECUTION) == 0
    w.close()


def test_ray_worker_reports_the_envs_cpu_and_failed_rollouts_are_unmeasured() -> None:
    from wmrl_envs.distributed.ray_pool import ExecutionWorker, GroupExecution, _cpu_list, _failed

    worker = ExecutionWorker(lambda: DeclaredCostEnv(2.5), 0)  # the actor's body, without Ray
    outs = [worker.execute(np.array([0.5], np.float32), k, None) for k in range(3)]
    assert [o["cpu_seconds"] for o in outs] == [2.5] * 3
    assert worker.ledger.cpu_seconds(EXECUTION) == 7.5
    assert _failed(0, "execution_timeout", "late")["cpu_seconds"] is None
    res = GroupExecution([0.5, None], [None, None], [{}, {}], [0.1, 0.0], [0, 1], [None, "late"], cpu_seconds=[2.5, None])
    assert _cpu_list(res) == [2.5, None]
    old = GroupExecution([0.5], [None], [{}], [0.1], [0], [None])  # built without cpu_seconds
    assert _cpu_list(old) == [None]


# ------------------------------------------------------------------------------- world models


def test_declared_world_model_cost_is_charged_per_prediction() -> None:
    wm = ConstantWorldModel(declared=0.01)
    w = AnchoredWorldModelWrapper(DeclaredCostEnv(2.5), wm, correction=CorrectionConfig(anchor_fraction=0.25), group_size=4, seed=0)
    acts = [np.array([0.5], np.float32)] * 4
    for k in range(5):
        w.score_group(acts, seed=k)
    n = w.loop.ledger.count(WORLD_MODEL_SOURCE)
    assert n == 20 and wm.calls == 5  # training: the world model scores every group
    assert w.loop.ledger.cpu_seconds(WORLD_MODEL_SOURCE) == pytest.approx(0.01 * n, abs=1e-12)
    assert w.loop.ledger.cpu_seconds(EXECUTION) == 2.5 * w.loop.ledger.count(EXECUTION)


def test_measured_world_model_cpu_and_a_bad_declared_cost() -> None:
    ledger = CostLedger()
    predict_checked(ConstantWorldModel(burn_s=0.2), [0, 0, 0], [1, 2, 3], ledger)
    assert ledger.count(WORLD_MODEL_SOURCE) == 3 and 0.2 <= ledger.cpu_seconds(WORLD_MODEL_SOURCE) <= 0.5
    predict_checked(ConstantWorldModel(burn_s=0.2), [0], [1], ledger, timeout_s=30.0)  # in its own thread
    assert 0.4 <= ledger.cpu_seconds(WORLD_MODEL_SOURCE) <= 0.9
    for bad in (-0.5, float("nan"), "0.01", True):
        wm = ConstantWorldModel(declared=bad)
        with pytest.raises(ValueError, match="declared_cpu_s_per_prediction"):
            predict_checked(wm, [0], [1], CostLedger())
        assert wm.calls == 0  # refused before the call



class ThreadedWorldModel(ConstantWorldModel):
    """Computes in a thread of its own that it starts and joins in ``predict``."""

    def predict(self, contexts, actions):
        worker = threading.Thread(target=_burn, args=(self.burn_s,))
        worker.start()
        worker.join()
        return [WorldModelPrediction(score=0.5) for _ in actions]


def test_a_busy_sibling_thread_is_not_charged_to_the_world_model() -> None:
    """Issue 25, finding 9: a world-model call is charged its own CPU, not that of other threads
    of the process (threads sharing one loop), whether the call runs in the caller's thread or
    in a thread of its own (with a time-out); a thread the world model starts is its own."""
    stop = threading.Event()

    def spin() -> None:  # another user of the process, busy for the whole call
        while not stop.is_set():
            pass

    sibling = threading.Thread(target=spin, daemon=True)
    sibling.start()
    try:
        for wm, timeout in ((ConstantWorldModel(burn_s=0.1), None), (ConstantWorldModel(burn_s=0.1), 30.0),
                            (ThreadedWorldModel(burn_s=0.1), None)):
            ledger = CostLedger()
            t0 = time.perf_counter()
            predict_checked(wm, [0], [1], ledger, timeout_s=timeout)
            wall = time.perf_counter() - t0
            assert wall > 0.15  # the sibling did share the call's time (the GIL alternates)
            # the call's own 0.1 CPU-s (process CPU charged about twice that before the fix)
            assert 0.1 <= ledger.cpu_seconds(WORLD_MODEL_SOURCE) <= 0.15, (type(wm).__name__, timeout)
    finally:
        stop.set()
        sibling.join()


# ------------------------------------------------------------------------------- ledger


def test_ledger_cpu_seconds_add_merge_and_state_round_trip() -> None:
    led = CostLedger()
    led.add(EXECUTION, 3.0, 2, cpu_seconds=1.5)
    led.add(EXECUTION, 1.0, 1)  # CPU not measured
    led.add("ungraded:execution_error", 0.0, 1, cpu_seconds=0.0)
    assert (led.count(EXECUTION), led.seconds(EXECUTION), led.cpu_seconds(EXECUTION)) == (3, 4.0, 1.5)
    assert led.cpu_unmeasured(EXECUTION) == 1 and led.cpu_unmeasured("ungraded:execution_error") == 0
    other = CostLedger()
    other.add(EXECUTION, 0.5, 1, cpu_seconds=0.25)
    other.add(WORLD_MODEL_SOURCE, 0.1, 4)
    led.merge(other)
    assert led.cpu_seconds(EXECUTION) == 1.75 and led.count(EXECUTION) == 4
    assert led.cpu_unmeasured(WORLD_MODEL_SOURCE) == 4
    assert led.to_dict()[EXECUTION] == {"count": 4, "seconds": 4.5, "cpu_seconds": 1.75, "cpu_unmeasured": 1,
                                        "cost": 1.75, "cost_unit": "CPU-s"}
    assert led.state_dict()[EXECUTION] == {"count": 4, "seconds": 4.5, "cpu_seconds": 1.75, "cpu_unmeasured": 1}
    back = CostLedger()
    back.load_state_dict(json.loads(json.dumps(led.state_dict())))
    assert back.to_dict() == led.to_dict()
    for bad in (dict(cpu_seconds=-1.0), dict(cpu_seconds=float("nan")), dict(seconds=float("inf")), dict(count=1.5)):
        with pytest.raises(ValueError):
            led.add("x", **{"seconds": 0.0, "count": 1, **bad})
    assert "x" not in led.sources


def test_ledger_loads_an_old_state_without_cpu_seconds_as_unmeasured() -> None:
    old = {"execution": {"count": 12, "seconds": 30.5}, "world_model": {"count": 96, "seconds": 4.0}}
    led = CostLedger()
    led.load_state_dict(old)
    assert led.count(EXECUTION) == 12 and led.seconds(EXECUTION) == 30.5
    assert led.cpu_seconds(EXECUTION) == 0.0 and led.cpu_unmeasured(EXECUTION) == 12
    led.add(EXECUTION, 2.0, 1, cpu_seconds=1.0)  # the resumed run measures from here on
    assert (led.count(EXECUTION), led.cpu_seconds(EXECUTION), led.cpu_unmeasured(EXECUTION)) == (13, 1.0, 12)
    with pytest.raises(ValueError, match="count"):
        led.load_state_dict({"execution": {"seconds": 1.0}})
    with pytest.raises(ValueError, match="cpu_unmeasured"):
        led.load_state_dict({"execution": {"count": 1, "seconds": 1.0, "cpu_seconds": 0.0, "cpu_unmeasured": 2}})
    assert led.count(EXECUTION) == 13  # a bad state changes nothing


def test_correction_loop_resumes_an_old_state_without_cpu_seconds() -> None:
    w = _real_wrapper(DeclaredCostEnv(2.5))
    _episodes(w, 2)
    state = json.loads(json.dumps(w.loop.state_dict()))
    for entry in state["ledger"].values():  # as saved before CPU-seconds were kept
        entry.pop("cpu_seconds")
        entry.pop("cpu_unmeasured")
    resumed = _real_wrapper(DeclaredCostEnv(2.5))
    resumed.loop.load_state_dict(state)
    assert resumed.loop.ledger.count(EXECUTION) == 2 and resumed.loop.ledger.cpu_unmeasured(EXECUTION) == 2
    _episodes(resumed, 2)
    assert resumed.loop.ledger.cpu_seconds(EXECUTION) == 2 * 2.5 and resumed.loop.ledger.count(EXECUTION) == 4


def test_timed_and_stopwatch_measure_this_process_and_its_waited_children() -> None:
    led = CostLedger()
    with led.timed("generation"):
        _burn(0.2)
    with led.timed("update"):
        time.sleep(0.2)
    with led.timed("execution"):  # a child process waited for: RUSAGE_CHILDREN
        subprocess.run([sys.executable, "-c", "import time\nwhile time.process_time() < 0.3:\n    pass\n"], check=True)
    assert 0.2 <= led.cpu_seconds("generation") <= 0.5
    assert led.seconds("update") >= 0.2 and led.cpu_seconds("update") < 0.1
    assert 0.3 <= led.cpu_seconds("execution") <= 1.0
    sw = Stopwatch()
    _burn(0.1)
    wall, cpu = sw.read()
    # process CPU counts every thread of the process (a test process may have idle helper
    # threads that wake up), so it may pass wall-clock by a hair: allow clock granularity
    assert cpu >= 0.1 and wall >= 0.1 and cpu <= wall + 0.05


def test_execution_cpu_seconds_picks_the_envs_value_over_the_measured_one() -> None:
    assert execution_cpu_seconds({EXECUTION_CPU_KEY: 2.5}, 0.1) == 2.5
    assert execution_cpu_seconds({EXECUTION_CPU_KEY: np.float32(0.5)}, 0.1) == 0.5
    assert execution_cpu_seconds({}, 0.1) == 0.1 and execution_cpu_seconds(None, 0.1) == 0.1
    assert execution_cpu_seconds({EXECUTION_CPU_KEY: None}, 0.1) is None
    for bad in (-1.0, float("nan"), "2.5", True):
        with pytest.raises(ValueError, match="execution_cpu_s"):
            execution_cpu_seconds({EXECUTION_CPU_KEY: bad}, 0.1)
