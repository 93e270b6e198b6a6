"""Gymnasium's own ``check_env`` on the wrapped env while training, in both modes (issue 38, item 4).

``check_env`` resets with ``seed=123``/``456`` and ``options={}`` in the middle of a group and
rebuilds the env from ``env.spec.make()``. The wrapper handles both as Gymnasium expects: a reset
with other arguments mid-group abandons the partial group (not counted, nothing credited, nothing
left open in the loop, a warning) and starts a new one; the spec records the world model (and a
shared loop), so ``spec.make()`` rebuilds the wrapper. Checked on two of this library's envs and on
a stock Gymnasium env (Pendulum-v1), outcome and reward mode.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import wmrl_envs  # noqa: F401  (registers wmrl/Guess-v0, wmrl/KnownTruth-v0)
from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.core import CorrectionConfig, CorrectionLoop
from wmrl_envs.envs.guess import GuessEnv
from wmrl_envs.world_models import WorldModelPrediction


class FirstActionWM:
    """Outcome mode: the score of an action is |a[0]| (any Box action)."""

    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=abs(float(np.asarray(a).reshape(-1)[0]))) for a in actions]


class LengthWM:
    """Reward mode: a trajectory's score is its number of actions."""

    def predict(self, contexts, trajectories):
        return [WorldModelPrediction(score=float(len(t.actions))) for t in trajectories]


CASES = [
    ("wmrl/Guess-v0", "outcome"),
    ("wmrl/KnownTruth-v0", "outcome"),
    ("wmrl/KnownTruth-v0", "reward"),
    ("Pendulum-v1", "outcome"),
    ("Pendulum-v1", "reward"),
]


@pytest.mark.parametrize("env_id,mode", CASES)
def test_check_env_passes_while_training_and_spec_make_rebuilds_the_wrapper(env_id, mode):
    wm = FirstActionWM() if mode == "outcome" else LengthWM()
    w = AnchoredWorldModelWrapper(gym.make(env_id), wm, group_size=4, mode=mode,
                                  correction=CorrectionConfig(anchor_fraction=0.5))
    assert w.training
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the abandoned group's warning (tested below)
        check_env(w, skip_render_check=True)  # Pendulum's render check needs pygame
    # one-step episodes: check_env's seeded reset after an ended episode abandoned that group;
    # Pendulum's episodes never end within check_env, so its resets only abandon episodes
    one_step = env_id != "Pendulum-v1" or mode == "outcome"
    assert w.n_groups_abandoned == int(one_step)
    stats = w.loop.stats()
    assert stats["groups_open"] == 1  # only the group check_env left running
    assert w.loop.n_groups_closed == 0 and w.loop.corrector.debiaser.n_seen == 0  # nothing credited
    assert len(w.loop.advisor) == 0
    rebuilt = w.spec.make()
    inner = rebuilt
    while not isinstance(inner, AnchoredWorldModelWrapper):
        inner = inner.env
    assert inner.loop.world_model is wm and inner.loop is not w.loop
    assert (inner.group_size, inner.mode, inner.loop.config.anchor_fraction) == (4, mode, 0.5)
    rebuilt.close()


def test_spec_says_nondeterministic_while_training_only():
    w = AnchoredWorldModelWrapper(gym.make("wmrl/Guess-v0"), FirstActionWM(), group_size=2,
                                  correction=CorrectionConfig(anchor_fraction=0.5))
    assert w.spec.nondeterministic is True
    w.training = False
    assert w.spec.nondeterministic is False
    check_env(w, skip_render_check=True)  # frozen: step determinism checked too


def test_spec_make_rebuilds_on_a_shared_loop():
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5), world_model=FirstActionWM())
    w = AnchoredWorldModelWrapper(gym.make("wmrl/Guess-v0"), None, group_size=2, loop=loop)
    rebuilt = w.spec.make()
    assert rebuilt.loop is loop and rebuilt.group_size == 2


def guess(group_size=3, fraction=1.0):
    env = GuessEnv()
    return env, AnchoredWorldModelWrapper(env, FirstActionWM(), group_size=group_size,
                                          correction=CorrectionConfig(anchor_fraction=fraction, min_pairs=1000))


def test_reset_with_other_arguments_mid_group_abandons_it_uncounted_and_warned():
    env, w = guess(group_size=3)  # every group is an anchor group
    a = np.array([0.1], np.float32)
    w.reset(seed=1, options={"target": 0.2})
    w.step(a)
    w.reset()  # episode 1 of group 0, running
    with pytest.warns(UserWarning, match=r"group 0 was abandoned after 1 of its 3 episodes"):
        obs, info = w.reset(options={"target": 0.9})
    assert obs[0] == pytest.approx(0.9)  # the new arguments start a new group
    assert (info["wmrl"]["group_id"], info["wmrl"]["episode_in_group"]) == (1, 0)
    assert w.n_groups_abandoned == 1 and w.loop.n_episodes == 1  # the abandoned episodes are not counted
    assert w.loop.stats()["groups_open"] == 1  # group 1 only: group 0 left nothing open
    assert env.n_steps == 1 and w.loop.ledger.count("execution") == 1  # what it executed stays charged
    for _ in range(3):
        w.step(a)
        w.reset()
    # group 1 closed with its 3 episodes; group 0's episode was never credited
    assert w.loop.corrector.groups_corrected["anchor"] == 1 and w.loop.corrector.debiaser.n_seen == 3
    assert w.loop.n_groups_closed == 1 and len(w.loop.advisor) == 1
    assert w.last_group.group_id == 1 and w.last_group.real_scores == pytest.approx([0.2] * 3)


def test_repeating_or_omitting_the_group_arguments_continues_it():
    _, w = guess(group_size=2)
    a = np.array([0.5], np.float32)
    w.reset(seed=3, options={"target": 0.2})
    w.step(a)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no abandonment
        _, info = w.reset(seed=3, options={"target": 0.2})
    assert (info["wmrl"]["group_id"], info["wmrl"]["episode_in_group"]) == (0, 1)
    w.step(a)
    assert w.loop.n_groups_closed == 1 and w.n_groups_abandoned == 0


def test_abandonment_warning_is_thinned_to_powers_of_two():
    _, w = guess(group_size=2, fraction=0.5)
    a = np.array([0.5], np.float32)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for t in range(6):  # a new task at every reset: each group is abandoned after 1 episode
            w.reset(options={"target": 0.1 * (t + 1)})
            w.step(a)
    said = [str(r.message) for r in rec if "abandoned" in str(r.message)]
    assert w.n_groups_abandoned == 5
    assert [s.split(" group(s) abandoned")[0].rsplit("(", 1)[1] for s in said] == ["1", "2", "4"]
    assert w.loop.stats()["groups_open"] == 1 and w.loop.n_groups_closed == 0


def test_abandon_group_forgets_it_in_the_stop_rules_step():
    _, w = guess(group_size=2, fraction=0.5)  # steps of 2 groups
    w.reset(options={"target": 0.3})
    w.step(np.array([0.5], np.float32))
    step = w.loop.ungraded._steps[w._ticket.step]
    opened = step.opened
    assert opened == 1
    with pytest.warns(UserWarning, match="abandoned"):
        w.reset(options={"target": 0.6})
    assert step.opened == opened  # one forgotten (group 0), one opened (group 1)
    assert w.loop.abandon_group(w._ticket) is True and w.loop.abandon_group(w._ticket) is False
    assert step.opened == opened - 1 and w.loop.stats()["groups_open"] == 0


def test_abandon_group_forgets_it_in_the_step_it_was_opened_in():
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5), world_model=FirstActionWM(), groups_per_step=2)
    t = loop.open_group()
    loop.plan_step(2)  # a new step begins before the group is dropped
    steps = loop.ungraded._steps
    assert (steps[t.step].opened, steps[max(steps)].opened) == (1, 0)
    assert loop.abandon_group(t)
    assert t.step not in steps or steps[t.step].opened == 0
    assert steps[max(steps)].opened == 0 and loop.stats()["groups_open"] == 0
    assert not loop.abandon_group(loop.eval_ticket())  # an evaluation ticket has nothing open


def test_options_holding_arrays_are_compared_by_value():
    _, w = guess(group_size=2, fraction=0.5)
    w.reset(options={"target": np.float64(0.4), "extra": np.array([1.0, 2.0])})
    w.step(np.array([0.5], np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # equal options (a new but equal array): the group goes on
        _, info = w.reset(options={"target": np.float64(0.4), "extra": np.array([1.0, 2.0])})
    assert info["wmrl"]["episode_in_group"] == 1
    w.step(np.array([0.5], np.float32))
    w.reset(options={"target": np.float64(0.4), "extra": np.array([1.0, 2.0])})  # group 1
    w.step(np.array([0.5], np.float32))
    with pytest.warns(UserWarning, match="abandoned"):
        _, info = w.reset(options={"target": np.float64(0.4), "extra": np.array([1.0, 3.0])})
    assert (info["wmrl"]["group_id"], info["wmrl"]["episode_in_group"]) == (2, 0)
