"""RayExecutionPool and AsyncAnchoredScorer on a local 2-CPU Ray cluster (skipped without ray).

One module-scoped cluster and pool (Ray starts slowly). The env is a test-local ``GuessEnv``
subclass whose step takes a fixed time (a test fixture that makes the measured seconds known,
not a cost model: the shipped env never sleeps), so that its score is known, behind a gate:
while the test holds it, a step waits, so "returns before completion" and "runs in
parallel" are checked by what is in flight, never by wall-clock thresholds.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time

import numpy as np
import pytest
import torch

from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.envs.guess import GuessEnv, guess_score
from wmrl_envs.world_models.synthetic import SyntheticWorldModel

ray = pytest.importorskip("ray", exc_type=ImportError)  # also a broken install

from wmrl_envs.distributed import AsyncAnchoredScorer, RayExecutionPool  # noqa: E402
from wmrl_envs.core import CorrectionConfig

torch.set_num_threads(1)

STEP_SECONDS = 0.15
G = 4


def gated_guess_env_fn(gate_dir: str, step_seconds: float = STEP_SECONDS):
    """Factory of GuessEnvs whose ``step`` first leaves a ``started-*`` file in ``gate_dir``,
    then waits while ``gate_dir/hold`` exists (at most 120 s, a hang guard). A closure, so
    that Ray ships it to the workers by value."""

    def make():
        class GatedGuessEnv(GuessEnv):
            def step(self, action):
                fd, _ = tempfile.mkstemp(prefix="started-", dir=gate_dir)
                os.close(fd)
                deadline = time.monotonic() + 120.0
                while os.path.exists(os.path.join(gate_dir, "hold")) and time.monotonic() < deadline:
                    time.sleep(0.005)
                time.sleep(step_seconds)  # fixture: a step of known duration (GuessEnv itself is instant)
                return super().step(action)

        return GatedGuessEnv()

    return make


class Gate:
    """The test's side of the gate: hold executions in flight, count the steps that started."""

    def __init__(self, folder):
        self.folder = folder

    @contextlib.contextmanager
    def held(self):
        hold = self.folder / "hold"
        hold.touch()
        try:
            yield self
        finally:
            hold.unlink()

    def started(self) -> int:
        return len(list(self.folder.glob("started-*")))

    def wait_started(self, n: int, timeout: float = 60.0) -> int:
        """Block until at least ``n`` steps have started (a hang guard, not a measurement)."""
        deadline = time.monotonic() + timeout
        while self.started() < n and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.started()


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    return Gate(tmp_path_factory.mktemp("gate"))


@pytest.fixture(scope="module")
def pool(gate):
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    p = RayExecutionPool(gated_guess_env_fn(str(gate.folder)), num_workers=2)
    yield p
    p.close()
    if started_here:
        ray.shutdown()


def make_wrapper(seed=0):
    wm = SyntheticWorldModel(guess_score, bias=lambda x: x**3, noise_std=0.05, seed=0)
    return AnchoredWorldModelWrapper(
        GuessEnv(), wm, correction=CorrectionConfig(anchor_fraction=0.5, min_pairs=8, refit_every=4, warmup_groups=2), group_size=G, seed=seed,
        )


def groups(n, seed=7):
    rng = np.random.default_rng(seed)
    return [
        (float(rng.random()), [rng.random(1).astype(np.float32) for _ in range(G)]) for _ in range(n)
    ]


def test_async_scorer_equals_serial_score_group_and_ledgers_add_up(pool, gate):
    data = groups(10)
    serial = make_wrapper()
    expected = [serial.score_group(acts, options={"target": t}) for t, acts in data]

    w = make_wrapper()
    scorer = AsyncAnchoredScorer(w, pool)  # ordered: corrections in submission order
    before = pool.ledger.to_dict().get("execution", {"count": 0, "seconds": 0.0})
    with gate.held():  # no execution can finish: submit() must return without waiting for them
        pending = [scorer.submit(acts, options={"target": t}) for t, acts in data]
        n_anchor = sum(p.route == "anchor" for p in pending)
        assert n_anchor >= 3
        assert not any(p.ready for p in pending if p.route == "anchor")
        early = scorer.poll()  # ordered: only the world-model groups ahead of the first anchor group
        first_anchor = next(i for i, p in enumerate(pending) if p.route == "anchor")
        assert [r.group_id for r in early] == [p.group_id for p in pending[:first_anchor]]
        assert scorer.n_pending == len(data) - first_anchor
    got = early + scorer.collect(timeout=60)
    assert scorer.n_pending == 0 and len(got) == len(expected)
    for a, b in zip(got, expected):
        assert (a.group_id, a.route) == (b.group_id, b.route)
        assert a.rewards == pytest.approx(b.rewards)
        assert a.advantage_weight == b.advantage_weight
        assert a.correction.calibrated_scores == pytest.approx(b.correction.calibrated_scores)
        assert a.correction.disagreement == b.correction.disagreement
        assert [i["wmrl"]["route"] for i in a.infos] == [a.route] * G
    assert w.loop.corrector.debiaser.n_seen == serial.loop.corrector.debiaser.n_seen == n_anchor * G
    assert w.loop.corrector.calibration_error() == serial.loop.corrector.calibration_error()
    assert w.loop.rho == serial.loop.rho and w.loop.router.realised_fraction == serial.loop.router.realised_fraction
    # cost ledger: one execution per anchor rollout, seconds measured in the workers
    assert w.loop.ledger.count("execution") == serial.loop.ledger.count("execution") == n_anchor * G
    assert w.loop.ledger.count("world_model") == serial.loop.ledger.count("world_model") == len(data) * G
    per_rollout = sum(a.execution_seconds for a in got)
    assert w.loop.ledger.seconds("execution") == pytest.approx(per_rollout)
    assert per_rollout >= n_anchor * G * STEP_SECONDS
    after = pool.ledger.to_dict()["execution"]
    assert after["count"] - before["count"] == n_anchor * G
    assert after["seconds"] - before["seconds"] == pytest.approx(per_rollout)
    merged = pool.worker_ledger()  # the actors' own ledgers, merged
    assert merged.count("execution") == pool.ledger.count("execution")
    assert merged.seconds("execution") == pytest.approx(pool.ledger.seconds("execution"))


def test_execute_group_returns_before_completion_and_runs_in_parallel(pool, gate):
    acts = [np.array([a], np.float32) for a in (0.1, 0.3, 0.6, 0.9)]
    n0 = gate.started()
    with gate.held():
        fut = pool.execute_group(acts, options={"target": 0.5})
        assert not fut.done()  # returned while no execution could finish
        # two steps are in flight at once (one per worker), and no more: each actor runs one at a time
        assert gate.wait_started(n0 + 2) == n0 + 2
        with pytest.raises(TimeoutError):
            fut.result(timeout=0.05)
        assert gate.started() == n0 + 2 and not fut.done()
    res = fut.result(timeout=30)
    assert fut.done() and gate.started() == n0 + 4
    assert res.rewards == pytest.approx([0.6, 0.8, 0.9, 0.6], abs=1e-6)  # equals the serial 1 - |a - t|
    assert sorted(set(res.workers)) == [0, 1] and res.errors == [None] * 4
    assert all(s >= STEP_SECONDS for s in res.seconds)


def test_unordered_scorer_returns_world_model_groups_while_anchors_run(pool, gate):
    w = make_wrapper(seed=1)
    scorer = AsyncAnchoredScorer(w, pool, ordered=False)
    with gate.held():  # the anchor group cannot finish before the world-model group is returned
        anchor = scorer.submit([np.array([0.5], np.float32)] * G, options={"target": 0.2}, route="anchor")
        wm = scorer.submit([np.array([0.5], np.float32)] * G, options={"target": 0.2}, route="world_model")
        first = scorer.poll()
        assert [r.group_id for r in first] == [wm.group_id] and not anchor.ready
    rest = scorer.collect(timeout=30)
    assert [r.group_id for r in rest] == [anchor.group_id]
    assert rest[0].rewards == pytest.approx([0.7] * G, abs=1e-6)
    assert w.loop.corrector.groups_corrected == {"anchor": 1, "world_model": 1}


def test_failed_execution_is_ungraded_and_the_pool_survives(pool):
    fut = pool.execute_group([np.array([0.5], np.float32)] * 2, options={"target": 2.0})  # reset raises
    res = fut.result(timeout=30)
    assert res.rewards == [None, None] and all("ValueError" in e for e in res.errors)
    ok = pool.execute_group([np.array([0.5], np.float32)], options={"target": 0.5}).result(timeout=30)
    assert ok.rewards == [1.0]


def test_worker_executions_of_a_seeded_group_draw_the_rollouts_own_streams():
    """Finding 12 on Ray: a worker's ``reset(seed)`` + ``step`` of rollout i gives the group's task
    and rollout i's own outcome noise: the same G outcomes as ``score_group`` (no cluster needed:
    the actor class is called in-process)."""
    from wmrl_envs.distributed.ray_pool import ExecutionWorker

    class NoisyGuess(GuessEnv):
        def step(self, action):
            obs, score, term, trunc, info = super().step(action)
            return obs, score + 0.1 * float(self.np_random.normal()), term, trunc, info

    a = np.array([0.5], np.float32)
    worker = ExecutionWorker(NoisyGuess, 0)
    outs = [worker.execute(a, 11, None, i) for i in range(G)]
    rewards = [o["reward"] for o in outs]
    assert len({float(o["observation"][0]) for o in outs}) == 1 and len(set(rewards)) == G
    serial = AnchoredWorldModelWrapper(NoisyGuess(), None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=G)
    assert serial.score_group([a] * G, seed=11).rewards == rewards
