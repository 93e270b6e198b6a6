"""Costs in the units a user pays (issue 38, item 1): CPU-seconds, wall-clock or a declared price
per call, chosen once (``CorrectionConfig.cost_basis``) and read alike by the ledger, γ (the
adaptive fraction's measured cost ratio), the advisor and the loop's stats.

The env stands in for a remote job: a little CPU and a wait (a sleep) per execution. Counted in
CPU-seconds the wait is invisible; counted in wall-clock it is the cost.
"""

from __future__ import annotations

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
