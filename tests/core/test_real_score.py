"""One rule for a real step's score (issue 37, item 8): ``core.group.real_score`` and the
per-episode wrappers' step score grade every type the same way, and what is not a number raises
a ``TypeError`` that names it."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from wmrl_envs.core.group import STEP_SCORE_KEY, real_score
from wmrl_envs.core.ungraded import EXECUTION_UNGRADED, SANDBOX_UNAVAILABLE, execution_cause
from wmrl_envs.wrappers.common import EpisodeTally


@pytest.mark.parametrize(("value", "expected"), [
    (0.3, 0.3), (1, 1.0), (np.float32(0.5), 0.5), (np.int64(2), 2.0), (Fraction(1, 4), 0.25), (-0.0, 0.0),
    (None, None), (float("nan"), None), (float("inf"), None), (np.float64("-inf"), None),
])
def test_a_number_is_its_float_and_none_or_non_finite_is_ungraded(value, expected):
    from wmrl_envs.core.ungraded import score_number

    assert score_number(value) == expected
    # the same through real_score, as the reward and as the step score
    assert real_score(value, {})[0] == expected
    assert real_score(0.9, {STEP_SCORE_KEY: value})[0] == (0.9 if value is None else expected)


@pytest.mark.parametrize("value", [True, False, np.bool_(True), "0.7", np.array([0.5]), object()])
def test_what_is_not_a_number_raises_naming_the_value_wherever_it_comes_from(value):
    # before: True -> ungraded but np.bool_(True) -> 1.0; "0.7" -> 0.7
    with pytest.raises(TypeError, match="must be a real number"):
        real_score(value, {})
    with pytest.raises(TypeError, match=r"info\['step_score'\] must be a real number"):
        real_score(0.5, {STEP_SCORE_KEY: value})
    with pytest.raises(TypeError, match="the reward must be a real number"):
        execution_cause(value, {})
    with pytest.raises(TypeError, match=r"info\['step_score'\]"):  # the per-episode wrappers' tally
        EpisodeTally().add_real_step(0.5, None, None, {}, {STEP_SCORE_KEY: value})


def test_the_step_score_is_the_score_whatever_the_reward():
    # before: 0.3 with reward None -> ungraded (the reward was checked although it is not the score)
    assert real_score(None, {STEP_SCORE_KEY: 0.3}) == (0.3, None, None)
    assert real_score(float("nan"), {STEP_SCORE_KEY: 0.3}) == (0.3, None, None)
    assert real_score(0.3, {STEP_SCORE_KEY: float("nan")})[:2] == (None, EXECUTION_UNGRADED)


def test_a_step_marked_ungraded_stays_ungraded_with_its_cause_and_message():
    info = {"graded": False, "ungraded_cause": SANDBOX_UNAVAILABLE, "message": "no sandbox", STEP_SCORE_KEY: 0.4}
    assert real_score(0.4, info) == (None, SANDBOX_UNAVAILABLE, "no sandbox")
    assert real_score(None, {"message": "timed out"}) == (None, EXECUTION_UNGRADED, "timed out")
