"""The vector wrapper and the SB3 adapter under the ungraded-rollout contract (issue 9, item 6)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wmrl_envs.core import TooManyUngradedError
from wmrl_envs.core.ungraded import EXECUTION_ERROR, SANDBOX_UNAVAILABLE, WORLD_MODEL_ERROR, WORLD_MODEL_INVALID
from wmrl_envs.envs.guess import GuessEnv, guess_score
from wmrl_envs.world_models.base import WorldModelPrediction
from wmrl_envs.wrappers import AnchoredWorldModelVectorWrapper, make_vector_env
from wmrl_envs.core import CorrectionConfig
from test_no_silent_results import RaisingEnv  # GuessEnv whose step raises on chosen calls (pytest puts this folder on sys.path)

torch.set_num_threads(1)


class RaisingWM:
    def predict(self, contexts, actions):
        raise RuntimeError("inference server gone")


class EchoWM:
    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=guess_score(c, a)) for c, a in zip(contexts, actions)]


class BrokenSandboxGuessEnv(GuessEnv):
    """Reports a sandbox failure the way AutoResearchEnv does (graded False, named cause)."""

    def step(self, action):
        obs, _, term, trunc, info = super().step(action)
        return obs, 0.0, term, trunc, {"graded": False, "ungraded_cause": SANDBOX_UNAVAILABLE, "message": "bwrap died"}


def _actions(n):
    return np.full((n, 1), 0.5, np.float32)


def test_vector_world_model_failure_is_ungraded_with_its_cause_and_stops_the_run():
    venv = make_vector_env(GuessEnv, 4)
    w = AnchoredWorldModelVectorWrapper(venv, RaisingWM(), correction=CorrectionConfig(anchor_fraction=0.0), group_size=2, groups_per_step=2)
    w.reset(seed=0)
    with pytest.raises(TooManyUngradedError) as e:  # 2 groups of 2: all 4 fail
        w.step(_actions(4))
    assert (e.value.n_ungraded, e.value.n_rollouts, e.value.causes) == (2, 4, {WORLD_MODEL_ERROR: 2})
    assert "inference server gone" in str(e.value)
    venv.close()
    venv = make_vector_env(GuessEnv, 4)
    w = AnchoredWorldModelVectorWrapper(venv, RaisingWM(), correction=CorrectionConfig(anchor_fraction=0.0), group_size=2, groups_per_step=2,
                                        max_ungraded_share=None)
    w.reset(seed=0)
    _, rew, _, _, info = w.step(_actions(4))
    assert rew.tolist() == [0.0] * 4 and info["wmrl"]["graded"].tolist() == [False] * 4
    assert info["wmrl"]["ungraded_cause"].tolist() == [WORLD_MODEL_ERROR] * 4
    assert w.loop.ledger.ungraded_counts() == {WORLD_MODEL_ERROR: 4} and w.loop.ungraded.n_ungraded == 4
    venv.close()


def test_vector_sandbox_failure_on_anchors_keeps_it_out_of_the_pairs():
    venv = make_vector_env(BrokenSandboxGuessEnv, 2)
    w = AnchoredWorldModelVectorWrapper(venv, EchoWM(), correction=CorrectionConfig(anchor_fraction=1.0), group_size=2, groups_per_step=4,
                                        max_ungraded_share=None)
    w.reset(seed=0)
    _, _, _, _, info = w.step(_actions(2))
    assert info["wmrl"]["graded"].tolist() == [False, False]
    assert info["wmrl"]["ungraded_cause"].tolist() == [SANDBOX_UNAVAILABLE] * 2
    assert w.loop.corrector.debiaser.n_pairs == 0 and w.loop.ledger.ungraded_counts() == {SANDBOX_UNAVAILABLE: 2}
    venv.close()


def test_vector_nan_score_is_invalid_not_a_score():
    class NanWM:
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=float("nan")) for _ in actions]

    venv = make_vector_env(GuessEnv, 2)
    w = AnchoredWorldModelVectorWrapper(venv, NanWM(), correction=CorrectionConfig(anchor_fraction=0.0), group_size=2, max_ungraded_share=None)
    w.reset(seed=0)
    _, rew, _, _, info = w.step(_actions(2))
    assert rew.tolist() == [0.0, 0.0] and info["wmrl"]["ungraded_cause"].tolist() == [WORLD_MODEL_INVALID] * 2
    venv.close()


def test_sb3_callback_gives_ungraded_steps_no_weight():
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO

    from agents.adapters.sb3 import AnchorWeightCallback, make_anchored_vec_env

    venv = make_anchored_vec_env(GuessEnv, RaisingWM(), n_envs=2, correction=CorrectionConfig(anchor_fraction=0.0), group_size=2,
                                 max_ungraded_share=None)
    model = PPO("MlpPolicy", venv, n_steps=16, batch_size=32, n_epochs=1, seed=0)
    cb = AnchorWeightCallback()
    model.learn(32, callback=cb)
    assert cb.last_weights is not None and (cb.last_weights == 0.0).all()
    assert cb.n_ungraded_steps == 32
    st = venv.stats()
    assert st["ungraded_rollouts"] == 32 and st["ungraded_by_cause"] == {WORLD_MODEL_ERROR: 32}


def _raising_venv(fail_on):
    """4 sub-envs (2 lanes of 2); sub-env 1 raises on its calls in ``fail_on``."""
    fns = [lambda: GuessEnv(), lambda: RaisingEnv(fail_on), lambda: GuessEnv(), lambda: GuessEnv()]
    from gymnasium.vector import SyncVectorEnv
    from wmrl_envs.wrappers import RoutedSubEnv

    return SyncVectorEnv([lambda f=f: RoutedSubEnv(f()) for f in fns])


def test_vector_step_that_raises_closes_the_open_groups_as_ungraded_and_re_raises():
    """Review of issue 37, item 2: the per-episode wrapper closes its group as ungraded when the env's
    step raises (issue 38); in the vector wrapper the exception went through and left every open
    group open in the loop. Now, as in the per-episode wrapper: the step is charged, each open group
    is closed with its unfinished rollouts ungraded (execution_error), the error is re-raised, and a
    reset starts new groups."""
    w = AnchoredWorldModelVectorWrapper(_raising_venv({1}), EchoWM(), correction=CorrectionConfig(anchor_fraction=1.0),
                                        group_size=2, groups_per_step=2, max_ungraded_share=None)
    w.reset(seed=0)
    w.step(_actions(4))  # round 0 of both lanes closes
    w.step(_actions(4))  # next-step autoreset: the sub-envs reset into round 1
    with pytest.raises(ConnectionError, match="went away"):
        w.step(_actions(4))
    st = w.loop.stats()
    assert st["groups_open"] == 0 and st["groups_closed"] == 4 and w.n_groups_open == 0
    assert w.loop.ledger.ungraded_counts() == {EXECUTION_ERROR: 4}  # both round-1 groups, 2 rollouts each
    assert w.loop.ledger.count("execution") == 8  # the failed vector step was 4 executions too
    assert w.loop.adaptive is None and w.loop.corrector.groups_corrected["anchor"] == 4
    with pytest.raises(RuntimeError, match="reset"):
        w.step(_actions(4))
    w.reset(seed=1)
    _, rew, _, _, info = w.step(_actions(4))
    assert info["wmrl"]["graded"].tolist() == [True] * 4 and info["wmrl"]["round"].tolist() == [2, 2, 2, 2]
    assert w.loop.stats()["groups_open"] == 2 == w.n_groups_open  # round 3 opened for the next episodes


def test_vector_step_that_raises_feeds_the_stop_rule():
    w = AnchoredWorldModelVectorWrapper(_raising_venv({0}), EchoWM(), correction=CorrectionConfig(anchor_fraction=1.0),
                                        group_size=2, groups_per_step=2)
    w.reset(seed=0)
    with pytest.raises(TooManyUngradedError, match=EXECUTION_ERROR) as e:
        w.step(_actions(4))
    assert isinstance(e.value.__cause__, ConnectionError)  # the env's own error travels with it
    assert w.loop.stats()["groups_open"] == 0
