"""Costs in the units a user pays (issue 38, item 1): CPU-seconds, wall-clock or a declared price
per call, chosen once (``CorrectionConfig.cost_basis``) and read alike by the ledger, γ (the
adaptive fraction's measured cost ratio), the advisor and the loop's stats.

The env stands in for a remote job: a little CPU and a wait (a sleep) per execution. Counted in
CPU-seconds the wait is invisible; counted in wall-clock it is the cost.
"""

from __future__ import annotations

import json
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.core import CorrectionConfig, CorrectionLoop, CostLedger
from wmrl_envs.core.advisor import CostRates
from wmrl_envs.world_models.base import WorldModelPrediction

WAIT_S = 0.02  # the remote job's queue, per execution


def RemoteJobEnv():
    """The benchmark's remote-job env with no CPU of its own: each step waits ``WAIT_S``; score 1 - |a - 0.3|."""
    from benchmarks.remote_job_costs import RemoteJobEnv as Env

    return Env(cpu_s=0.0, wait_s=WAIT_S)


class NoisyWM:
    """The real score plus noise (a useful, imperfect world model); no wait."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=1.0 - abs(float(a[0]) - 0.3) + 0.1 * self.rng.normal()) for a in actions]


def _run(config: CorrectionConfig, groups: int = 12, g: int = 4) -> AnchoredWorldModelWrapper:
    env = AnchoredWorldModelWrapper(RemoteJobEnv(), NoisyWM(), correction=config, group_size=g)
    rng = np.random.default_rng(1)
    for _ in range(groups * g):
        env.reset()
        env.step(rng.uniform(0, 1, 1).astype(np.float32))
    return env


def test_wall_clock_basis_counts_the_wait_in_the_ledger_gamma_and_the_advisor():
    env = _run(CorrectionConfig(anchor_fraction=1.0, cost_basis="wall"))
    ledger = env.loop.ledger
    n = ledger.count("execution")
    assert n == 48
    assert ledger.cost_unit == "wall-clock s"
    assert ledger.cost("execution") / n >= WAIT_S  # the wait is counted
    assert ledger.cpu_seconds("execution") / n < WAIT_S / 2  # what CPU-seconds would have charged
    rates = CostRates.from_ledger(ledger)
    assert rates.unit == "wall-clock s" and rates.execution_s >= WAIT_S
    cpu_rates = CostRates.from_ledger(ledger, cpu=True)  # the old reading, still available
    assert cpu_rates.unit == "CPU-s" and cpu_rates.execution_s < WAIT_S / 2
    assert rates.gamma < cpu_rates.gamma  # executions look dearer: γ falls
    advice = env.loop.advise()
    assert advice.costs.unit == "wall-clock s" and advice.costs.execution_s >= WAIT_S
    stats = env.loop.stats()
    assert stats["cost_unit"] == "wall-clock s" and stats["execution_cost"] >= n * WAIT_S
    assert env.loop.config.cost_basis == "wall"


def test_wall_clock_basis_sets_the_adaptive_fractions_gamma():
    cfg = CorrectionConfig(anchor_fraction="auto", auto_start_fraction=0.5, f_max=0.5, auto_min_groups=2,
                           cost_basis="wall")
    with pytest.warns(UserWarning, match="experimental"):
        env = _run(cfg, groups=24)
    a = env.loop.adaptive
    assert a is not None and a.gamma is not None
    cpu_gamma = CostRates.from_ledger(env.loop.ledger, cpu=True).gamma
    print(f"gamma wall {a.gamma:.4g}, in CPU-s it would be {cpu_gamma:.4g}")
    # the wait makes an execution far dearer than a world-model call; in CPU-s it is not
    assert a.gamma < 0.1 < cpu_gamma


def test_cpu_stays_the_default():
    assert CorrectionConfig().cost_basis == "cpu"
    loop = CorrectionLoop(CorrectionConfig())
    assert loop.ledger.cost_basis == "cpu" and loop.ledger.cost_unit == "CPU-s"
    loop.ledger.add("execution", 2.0, 4, cpu_seconds=0.5)
    assert loop.ledger.cost("execution") == 0.5


def test_per_call_prices():
    cfg = CorrectionConfig(anchor_fraction=1.0, cost_basis="per_call",
                           cost_prices={"execution": 0.02, "world_model": 0.0005}, cost_unit="USD")
    env = _run(cfg, groups=4)
    ledger = env.loop.ledger
    assert ledger.cost("execution") == pytest.approx(0.02 * 16)
    rates = CostRates.from_ledger(ledger)
    assert rates.unit == "USD"
    assert rates.execution_s == pytest.approx(0.02) and rates.world_model_s == pytest.approx(0.0005)
    assert rates.gamma == pytest.approx(0.025)
    assert ledger.to_dict()["execution"]["cost"] == pytest.approx(0.32)


def test_per_call_errors_name_what_is_missing():
    with pytest.raises(ValueError, match="cost_prices"):
        CorrectionConfig(cost_basis="per_call")
    with pytest.raises(ValueError, match="'execution'"):
        CorrectionConfig(cost_basis="per_call", cost_prices={"world_model": 0.1})
    with pytest.raises(ValueError, match="per_call"):
        CorrectionConfig(cost_prices={"execution": 1.0})
    with pytest.raises(ValueError, match="cost_basis"):
        CostLedger("gpu")
    ledger = CostLedger("per_call", prices={"execution": 1.0})
    ledger.add("world_model", 0.1, 3)
    with pytest.raises(ValueError, match="'world_model' has 3 events and no declared price"):
        ledger.cost("world_model")


def test_the_basis_is_read_not_saved():
    """A ledger saved in one basis loads its measurements into another's."""
    a = CostLedger("wall")
    a.add("execution", 3.0, 2, cpu_seconds=0.2)
    b = CostLedger()
    b.load_state_dict(a.state_dict())
    assert b.cost("execution") == pytest.approx(0.2) and a.cost("execution") == pytest.approx(3.0)


# ---------------------------------------------------------------------- a price reported per execution


class PaidAPIEnv(gym.Env):
    """A paid API whose price varies per call: it reports each call's price in ``info["execution_cost"]``
    (``0.01 + 0.02 * a``), except for actions below ``unpriced_below`` (price unknown: no key), and
    ``bad`` in place of the price when set."""

    observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = spaces.Box(0.0, 1.0, (1,), np.float32)

    def __init__(self, unpriced_below: float = -1.0, bad=None) -> None:
        self.unpriced_below, self.bad = unpriced_below, bad

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        a = float(action[0])
        info = {} if a < self.unpriced_below else {"execution_cost": 0.01 + 0.02 * a}
        if self.bad is not None:
            info["execution_cost"] = self.bad
        return np.zeros(1, np.float32), 1.0 - abs(a - 0.3), True, False, info


PAID = dict(cost_basis="per_call", cost_prices={"execution": 0.5, "world_model": 0.0005}, cost_unit="USD")


def test_per_call_charges_the_price_each_execution_reports_per_episode():
    env = AnchoredWorldModelWrapper(PaidAPIEnv(), NoisyWM(), group_size=4,
                                    correction=CorrectionConfig(anchor_fraction=1.0, **PAID))
    actions = np.linspace(0.0, 1.0, 12)
    for a in actions:
        env.reset()
        env.step(np.array([a], np.float32))
    ledger = env.loop.ledger
    expected = float(np.sum(0.01 + 0.02 * actions))  # 0.24: not 12 x the declared 0.5
    assert ledger.count("execution") == 12 and ledger.reported("execution") == (12, pytest.approx(expected))
    assert ledger.cost("execution") == pytest.approx(expected)
    assert CostRates.from_ledger(ledger).execution_s == pytest.approx(expected / 12)  # γ reads it
    assert env.loop.stats()["execution_cost"] == pytest.approx(expected)
    assert env.loop.advise().costs.execution_s == pytest.approx(expected / 12)


def test_per_call_reported_prices_through_score_group_and_the_declared_price_for_the_rest():
    env = AnchoredWorldModelWrapper(PaidAPIEnv(unpriced_below=0.5), NoisyWM(), group_size=4,
                                    correction=CorrectionConfig(anchor_fraction=1.0, **PAID))
    actions = [np.array([a], np.float32) for a in (0.1, 0.4, 0.6, 1.0)]
    env.score_group(actions, seed=0)
    ledger = env.loop.ledger
    # 0.6 and 1.0 reported 0.022 and 0.03; 0.1 and 0.4 reported nothing: the declared 0.5 each
    assert ledger.reported("execution") == (2, pytest.approx(0.052))
    assert ledger.cost("execution") == pytest.approx(0.052 + 2 * 0.5)


def test_a_reported_price_is_kept_but_read_under_per_call_only():
    env = AnchoredWorldModelWrapper(PaidAPIEnv(), NoisyWM(), group_size=2,
                                    correction=CorrectionConfig(anchor_fraction=1.0, cost_basis="wall"))
    env.score_group([np.array([0.5], np.float32)] * 2, seed=0)
    ledger = env.loop.ledger
    assert ledger.reported("execution") == (2, pytest.approx(0.04))
    assert ledger.cost("execution") == pytest.approx(ledger.seconds("execution"))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.01, "0.02", True])
def test_an_invalid_reported_price_is_a_clear_error(bad):
    env = AnchoredWorldModelWrapper(PaidAPIEnv(bad=bad), NoisyWM(), group_size=2,
                                    correction=CorrectionConfig(anchor_fraction=1.0, **PAID))
    env.reset()
    with pytest.raises(ValueError, match=r"info\['execution_cost'\] must be a finite number >= 0 \(this execution's "
                                         r"price, in the run's cost_unit\), got .*leave the key out to have the "
                                         r"declared cost_prices\['execution'\] charged"):
        env.step(np.array([0.5], np.float32))


def test_reported_prices_in_the_ledger_state_merge_and_summary():
    a = CostLedger("per_call", prices={"execution": 1.0}, unit="USD")
    a.add("execution", 2.0, 1, cpu_seconds=0.1, cost=0.25)
    a.add("execution", 2.0, 2, cpu_seconds=0.1)
    assert a.cost("execution") == pytest.approx(2.25)
    assert a.to_dict()["execution"]["reported_count"] == 1 and a.to_dict()["execution"]["reported_cost"] == 0.25
    b = CostLedger("per_call", prices={"execution": 1.0}, unit="USD")
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.reported("execution") == (1, 0.25) and b.cost("execution") == pytest.approx(2.25)
    b.merge(a)
    assert b.reported("execution") == (2, 0.5) and b.cost("execution") == pytest.approx(4.5)
    # a ledger whose events reported nothing saves what it saved before
    c = CostLedger()
    c.add("execution", 1.0, 1, cpu_seconds=0.5)
    assert c.state_dict() == {"execution": {"count": 1, "seconds": 1.0, "cpu_seconds": 0.5, "cpu_unmeasured": 0}}
    with pytest.raises(ValueError, match="the reported cost of 'execution' must be a finite number >= 0, got -1"):
        c.add("execution", 1.0, 1, cost=-1)
    with pytest.raises(ValueError, match="reported_count must be an integer in \\[0, count\\], got 3"):
        c.load_state_dict({"execution": {"count": 2, "seconds": 1.0, "reported_count": 3, "reported_cost": 1.0}})


def test_the_ray_worker_charges_a_reported_price_and_fails_an_invalid_one():
    from wmrl_envs.distributed.ray_pool import ExecutionWorker, GroupExecution

    worker = ExecutionWorker(PaidAPIEnv, 0)
    out = worker.execute(np.array([0.5], np.float32), 0, None)
    assert out["info"]["execution_cost"] == pytest.approx(0.02) and out["cause"] is None
    assert worker.ledger.reported("execution") == (1, pytest.approx(0.02))
    res = GroupExecution(rewards=[0.8, None], observations=[None, None], infos=[out["info"], {}], seconds=[0.1, 0.1],
                         workers=[0, 0], errors=[None, None])
    assert res.reported_costs() == [pytest.approx(0.02), None]
    bad = ExecutionWorker(lambda: PaidAPIEnv(bad=-1.0), 1).execute(np.array([0.5], np.float32), 0, None)
    assert bad["reward"] is None and bad["cause"] == "execution_error" and "execution_cost" in bad["error"]


def test_the_vector_wrapper_charges_the_price_each_sub_env_reports():
    """Routed sub-envs (make_vector_env) and plain ones: each execution is charged the price its
    sub-env reported in info["execution_cost"], the declared price where it reported none."""
    import gymnasium as gym

    from wmrl_envs.wrappers import AnchoredWorldModelVectorWrapper, make_vector_env

    for venv_inner, mode in ((make_vector_env(lambda: PaidAPIEnv(unpriced_below=0.5), 2), "outcome"),
                             (gym.vector.SyncVectorEnv([lambda: PaidAPIEnv(unpriced_below=0.5)] * 2), "reward")):
        venv = AnchoredWorldModelVectorWrapper(venv_inner, NoisyWM(), group_size=2, mode=mode,
                                               correction=CorrectionConfig(anchor_fraction=1.0, **PAID))
        venv.reset(seed=0)
        # one-step episodes, next-step autoreset: steps 1 and 3 execute, steps 2 and 4 reset the lanes
        actions = [(0.2, 0.8), (0.0, 0.0), (0.6, 1.0), (0.0, 0.0)]
        for a in actions:
            venv.step(np.array(a, np.float32).reshape(2, 1))
        ledger = venv.loop.ledger
        reported = [0.01 + 0.02 * x for x in (0.8, 0.6, 1.0)]  # 0.2 is below unpriced_below: no price
        assert ledger.count("execution") == 4
        assert ledger.reported("execution") == (3, pytest.approx(sum(reported)))
        # per_call: the reported prices, and the declared 0.5 for the execution that reported none
        assert ledger.cost("execution") == pytest.approx(sum(reported) + 0.5)
