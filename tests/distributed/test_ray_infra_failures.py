"""Ray executions: a hung execution times out, a lost worker, a broken sandbox — ungraded, replaced, counted.

A module-scoped 2-CPU local Ray instance (skipped without ray). The env is ``GuessEnv`` with
reset options that make one rollout misbehave: ``hang`` sleeps far past the pool's per-call
time-out, ``die`` kills the worker process, ``sandbox`` raises ``SandboxUnavailableError``.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.core import TooManyUngradedError
from wmrl_envs.core.ungraded import EXECUTION_TIMEOUT, SANDBOX_UNAVAILABLE, WORKER_LOST
from wmrl_envs.envs.guess import GuessEnv, guess_score
from wmrl_envs.world_models.synthetic import SyntheticWorldModel

ray = pytest.importorskip("ray", exc_type=ImportError)

from wmrl_envs.distributed import AsyncAnchoredScorer, RayExecutionPool  # noqa: E402
from wmrl_envs.core import CorrectionConfig

A = np.array([0.5], np.float32)


class MisbehavingGuessEnv(GuessEnv):
    """GuessEnv; the action's value picks a failure: 0.9 hangs, 0.8 kills the worker, 0.7 breaks the sandbox."""

    def step(self, action):
        from wmrl_envs.sandbox.base import SandboxUnavailableError

        a = round(float(np.asarray(action).reshape(-1)[0]), 3)
        if a == 0.9:
            time.sleep(600)
        if a == 0.8:
            os._exit(1)
        if a == 0.7:
            raise SandboxUnavailableError("could not start a sandbox container")
        return super().step(action)


@pytest.fixture(scope="module")
def pool():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    import sys

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
    p = RayExecutionPool(MisbehavingGuessEnv, num_workers=2, num_cpus_per_worker=0.5)
    yield p
    p.close()
    if started_here:
        ray.shutdown()


def test_hung_execution_times_out_is_cancelled_and_its_worker_replaced(pool):
    pool.execution_timeout_s = 3.0
    try:
        res = pool.execute_group([np.array([0.9], np.float32), A], options={"target": 0.5}).result(timeout=120)
    finally:
        pool.execution_timeout_s = None  # the checks below must not depend on how loaded the machine is
    assert res.causes[0] == EXECUTION_TIMEOUT and res.rewards[0] is None
    assert res.rewards[1] == 1.0 and res.causes[1] is None
    assert pool.n_replaced_workers >= 1
    ok = pool.execute_group([A, A], options={"target": 0.5}).result(timeout=120)
    assert ok.rewards == [1.0, 1.0] and ok.causes == [None, None]


def test_lost_worker_and_broken_sandbox_are_ungraded_with_their_causes(pool):
    n = pool.n_replaced_workers
    res = pool.execute_group([np.array([0.8], np.float32), np.array([0.7], np.float32)],
                             options={"target": 0.5}).result(timeout=120)
    assert res.rewards == [None, None]
    assert res.causes == [WORKER_LOST, SANDBOX_UNAVAILABLE]
    assert "could not start" in res.errors[1]
    assert pool.n_replaced_workers == n + 1
    ok = pool.execute_group([A, A], options={"target": 0.5}).result(timeout=120)
    assert ok.rewards == [1.0, 1.0]


def test_async_scorer_counts_ray_failures_and_applies_the_stop_rule(pool):
    wm = SyntheticWorldModel(guess_score)
    w = AnchoredWorldModelWrapper(GuessEnv(), wm, correction=CorrectionConfig(anchor_fraction=1.0), group_size=2, groups_per_step=2,
                                  max_ungraded_share=0.75)
    scorer = AsyncAnchoredScorer(w, pool)
    w.plan_step(2)
    scorer.submit([np.array([0.7], np.float32), A], options={"target": 0.5})
    (out,) = scorer.collect(timeout=120)
    assert out.rewards == [None, 1.0]
    assert [i["wmrl"]["ungraded_cause"] for i in out.infos] == [SANDBOX_UNAVAILABLE, None]
    assert w.loop.corrector.debiaser.n_pairs == 1 and w.loop.ledger.ungraded_counts() == {SANDBOX_UNAVAILABLE: 1}
    scorer.submit([np.array([0.7], np.float32)] * 2, options={"target": 0.5})
    with pytest.raises(TooManyUngradedError) as e:  # 3 of the step's 4 rollouts
        scorer.collect(timeout=120)
    assert e.value.causes == {SANDBOX_UNAVAILABLE: 3}


def test_async_scorer_skips_the_world_model_in_evaluation(pool):
    class Counting(SyntheticWorldModel):
        calls = 0

        def predict(self, contexts, actions):
            self.calls += 1
            return super().predict(contexts, actions)

    wm = Counting(guess_score)
    w = AnchoredWorldModelWrapper(GuessEnv(), wm, correction=CorrectionConfig(anchor_fraction=0.5), group_size=2)
    w.training = False
    scorer = AsyncAnchoredScorer(w, pool)
    scorer.submit([A, A], options={"target": 0.5})
    (out,) = scorer.collect(timeout=120)
    assert out.route == "anchor" and out.rewards == [1.0, 1.0] and wm.calls == 0
