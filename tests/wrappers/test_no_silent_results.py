"""Bad input a user's own env or settings give gets an error or a warning, never a silent result
(issue 38, item 2): a NaN reward from the env, an env whose ``step`` raises, ``group_size=1``,
``anchor_fraction=0`` and a resume with another ``group_size``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.core import CorrectionConfig, CorrectionLoop, TooManyUngradedError
from wmrl_envs.core.ungraded import EXECUTION_ERROR, EXECUTION_INVALID
from wmrl_envs.envs.guess import GuessEnv, guess_score
from wmrl_envs.world_models.base import WorldModelPrediction

A = np.array([0.5], dtype=np.float32)


class EchoWM:
    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=guess_score(c, a)) for c, a in zip(contexts, actions)]


class NanRewardEnv(GuessEnv):
    def step(self, action):
        obs, _r, term, trunc, info = super().step(action)
        return obs, float("nan"), term, trunc, info


class RaisingEnv(GuessEnv):
    """``step`` raises on the calls numbered in ``fail_on`` (0-based)."""

    def __init__(self, fail_on) -> None:
        super().__init__()
        self.fail_on, self.calls = set(fail_on), 0

    def step(self, action):
        k, self.calls = self.calls, self.calls + 1
        if k in self.fail_on:
            raise ConnectionError("the remote job's server went away")
        return super().step(action)


def _episode(w):
    w.reset(options={"target": 0.5})
    return w.step(A)


def test_a_nan_reward_from_the_env_is_a_named_cause_that_stops_the_run():
    w = AnchoredWorldModelWrapper(NanRewardEnv(), EchoWM(), correction=CorrectionConfig(anchor_fraction=1.0),
                                  group_size=2, groups_per_step=1)
    *_, info = _episode(w)
    assert info["wmrl"]["graded"] is False and info["wmrl"]["ungraded_cause"] == EXECUTION_INVALID
    with pytest.raises(TooManyUngradedError, match=EXECUTION_INVALID):
        _episode(w)  # the group closes: 2 of 2 rollouts ungraded >= 50%
    assert w.loop.ledger.ungraded_counts() == {EXECUTION_INVALID: 2}


def test_a_step_that_raises_closes_its_group_as_ungraded_and_re_raises():
    env = RaisingEnv(fail_on={1, 3})  # the 2nd episode of the 1st group, the 2nd episode of the 2nd
    w = AnchoredWorldModelWrapper(env, EchoWM(), correction=CorrectionConfig(anchor_fraction=1.0), group_size=3,
                                  groups_per_step=1, max_ungraded_share=None)
    _episode(w)
    with pytest.raises(ConnectionError, match="went away"):
        _episode(w)
    st = w.loop.stats()
    assert st["groups_open"] == 0 and st["groups_closed"] == 1
    assert w.loop.ledger.ungraded_counts() == {EXECUTION_ERROR: 2}  # the failed episode and the one never run
    assert w.last_group.rewards[0] == pytest.approx(1.0) and w.last_group.rewards[1:] == [None, None]
    assert w.loop.ledger.count("execution") == 2  # the raising call was an execution too
    # the next reset starts a new group
    *_, info = _episode(w)
    assert info["wmrl"]["group_id"] == 1
    with pytest.raises(ConnectionError):
        _episode(w)
    assert w.loop.stats()["groups_open"] == 0 and w.loop.ledger.ungraded_counts() == {EXECUTION_ERROR: 4}


def test_a_step_that_raises_feeds_the_stop_rule():
    w = AnchoredWorldModelWrapper(RaisingEnv(fail_on={0}), EchoWM(), correction=CorrectionConfig(anchor_fraction=1.0),
                                  group_size=2, groups_per_step=1)
    with pytest.raises(TooManyUngradedError, match=EXECUTION_ERROR) as exc:
        _episode(w)
    assert isinstance(exc.value.__context__, ConnectionError)  # the env's own error travels with it


def test_reward_mode_step_that_raises_closes_its_group():
    w = AnchoredWorldModelWrapper(RaisingEnv(fail_on={0}), EchoWM(), correction=CorrectionConfig(anchor_fraction=0.5),
                                  group_size=2, groups_per_step=2, mode="reward", max_ungraded_share=None)
    with pytest.raises(ConnectionError):
        _episode(w)
    assert w.loop.stats()["groups_open"] == 0
    assert w.loop.ledger.ungraded_counts() == {EXECUTION_ERROR: 2}


@pytest.mark.parametrize("g", [1, 0, 2.5, True])
def test_group_size_below_two_is_refused(g):
    with pytest.raises(ValueError, match="group_size must be an integer >= 2.*advantage 0"):
        AnchoredWorldModelWrapper(GuessEnv(), EchoWM(), group_size=g)


def test_anchor_fraction_zero_warns_with_its_consequence():
    with pytest.warns(UserWarning, match="every training group goes to the world model.*no debiasing.*rho stays 1"):
        CorrectionLoop(CorrectionConfig(anchor_fraction=0.0), world_model=EchoWM())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CorrectionLoop(CorrectionConfig(anchor_fraction=0.1), world_model=EchoWM())


def test_resuming_with_another_group_size_warns():
    w = AnchoredWorldModelWrapper(GuessEnv(), EchoWM(), correction=CorrectionConfig(anchor_fraction=1.0), group_size=2)
    for _ in range(2):
        _episode(w)
    state = w.state_dict()
    assert state["group_size"] == 2
    same = AnchoredWorldModelWrapper(GuessEnv(), EchoWM(), correction=CorrectionConfig(anchor_fraction=1.0), group_size=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same.load_state_dict(state)
    other = AnchoredWorldModelWrapper(GuessEnv(), EchoWM(), correction=CorrectionConfig(anchor_fraction=1.0), group_size=4)
    with pytest.warns(UserWarning, match="resuming with group_size=4 from a state saved with group_size=2"):
        other.load_state_dict(state)


def test_the_vector_wrapper_names_a_nan_reward_alike():
    from wmrl_envs.wrappers import AnchoredWorldModelVectorWrapper, make_vector_env

    venv = make_vector_env(NanRewardEnv, 2)
    env = AnchoredWorldModelVectorWrapper(venv, EchoWM(), correction=CorrectionConfig(anchor_fraction=1.0), group_size=2,
                                          task_fn=lambda k, n: (None, {"target": 0.5}), max_ungraded_share=None)
    env.reset(seed=0)
    env.step(np.full((2, 1), 0.5, np.float32))
    venv.close()
    assert env.loop.ledger.ungraded_counts() == {EXECUTION_INVALID: 2}


def test_score_group_counts_a_step_that_raises_per_rollout_and_closes_the_group():
    """score_group: the failed rollout is ungraded (execution_error), the others keep their scores, the
    group closes; counted, not re-raised (as on the Ray pool), and a dead env meets the stop rule."""
    w = AnchoredWorldModelWrapper(RaisingEnv(fail_on={1}), EchoWM(), correction=CorrectionConfig(anchor_fraction=1.0),
                                  group_size=3, max_ungraded_share=None)
    out = w.score_group([A, A, A], options={"target": 0.5})
    assert out.rewards == [1.0, None, 1.0] and out.infos[1]["wmrl"]["ungraded_cause"] == EXECUTION_ERROR
    assert w.loop.stats()["groups_open"] == 0 and w.loop.ledger.count("execution") == 3
    assert w.loop.ledger.ungraded_counts() == {EXECUTION_ERROR: 1}
    dead = AnchoredWorldModelWrapper(RaisingEnv(fail_on=range(100)), EchoWM(),
                                     correction=CorrectionConfig(anchor_fraction=1.0), group_size=2, groups_per_step=1)
    with pytest.raises(TooManyUngradedError, match="went away"):
        dead.score_group([A, A], options={"target": 0.5})
    assert dead.loop.stats()["groups_open"] == 0
