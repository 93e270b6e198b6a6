"""Failures of the machinery leave rollouts ungraded (issue 9, item 6), not the agent's 0.

Fakes isolate one piece each: a world model that raises, hangs or returns NaN, a sandbox that
raises. One test runs the real AutoResearchEnv behind the real wrapper with a sandbox that
breaks, and checks that the rollouts are ungraded and the stop rule fires.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest

from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.core import CorrectionConfig, CostLedger, TooManyUngradedError, UngradedMonitor
from wmrl_envs.core.ungraded import (
    EXECUTION_INVALID,
    EXECUTION_UNGRADED,
    SANDBOX_UNAVAILABLE,
    UNSCORABLE,
    WORLD_MODEL_ERROR,
    WORLD_MODEL_INVALID,
    WORLD_MODEL_TIMEOUT,
    WORLD_MODEL_UNGRADED,
    execution_cause,
    is_infrastructure,
)
from wmrl_envs.envs.guess import GuessEnv, guess_score
from wmrl_envs.world_models.base import WorldModelPrediction

A = np.array([0.5], dtype=np.float32)


class EchoWM:
    """Predicts the real GuessEnv score; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def predict(self, contexts, actions):
        self.calls += 1
        return [WorldModelPrediction(score=guess_score(c, a)) for c, a in zip(contexts, actions)]


class RaisingWM:
    def __init__(self) -> None:
        self.calls = 0

    def predict(self, contexts, actions):
        self.calls += 1
        raise RuntimeError("CUDA error: device-side assert triggered")


class HangingWM:
    """``predict`` blocks until ``release`` is set (a hung inference server)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def predict(self, contexts, actions):
        self.calls += 1
        self.release.wait()
        return [WorldModelPrediction(score=0.5) for _ in actions]


class ScriptedWM:
    """Returns the next scores of a script, one per call (multi-turn tests)."""

    def __init__(self, scores) -> None:
        self.scores = list(scores)

    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=self.scores.pop(0)) for _ in actions]


# ---------------------------------------------------------------------- the causes
@pytest.mark.parametrize(
    ("reward", "info", "cause"),
    [
        (0.1, {}, None),  # the agent's runtime error: graded
        (0.0, {"graded": True}, None),
        (0.0, {"graded": False, "ungraded_cause": SANDBOX_UNAVAILABLE}, SANDBOX_UNAVAILABLE),
        (0.0, {"graded": False}, EXECUTION_UNGRADED),
        (None, {}, EXECUTION_UNGRADED),
        (float("nan"), {}, EXECUTION_INVALID),  # an env bug: named (issue 38)
        (float("inf"), {}, EXECUTION_INVALID),
        (float("nan"), {"ungraded_cause": SANDBOX_UNAVAILABLE}, SANDBOX_UNAVAILABLE),
        (float("nan"), {"graded": False}, EXECUTION_UNGRADED),  # the env said so: counted only
    ],
)
def test_execution_cause(reward, info, cause):
    assert execution_cause(reward, info) == cause


def test_a_reward_that_is_not_a_number_raises_naming_it():
    """Not a number at all (a string, a bool) is an error in the env, not an ungraded rollout (issue 37, item 8)."""
    with pytest.raises(TypeError, match="0.5x"):
        execution_cause("0.5x", {})


@pytest.mark.parametrize(
    ("cause", "infra"),
    [(None, False), (UNSCORABLE, False), (WORLD_MODEL_UNGRADED, False), (EXECUTION_UNGRADED, False),
     (SANDBOX_UNAVAILABLE, True), (EXECUTION_INVALID, True), (WORLD_MODEL_ERROR, True), (WORLD_MODEL_TIMEOUT, True), ("worker_lost", True)],
)
def test_which_causes_count_toward_the_stop_rule(cause, infra):
    assert is_infrastructure(cause) is infra


# ---------------------------------------------------------------------- the stop rule
@pytest.mark.parametrize(
    ("max_share", "groups", "stops_at"),
    [
        # 2 groups of 2 per step: 2 named failures of 4 rollouts reach 50%
        (0.5, [[None, SANDBOX_UNAVAILABLE], [SANDBOX_UNAVAILABLE, None]], 1),
        (0.5, [[SANDBOX_UNAVAILABLE, SANDBOX_UNAVAILABLE]], 0),
        (0.75, [[SANDBOX_UNAVAILABLE, SANDBOX_UNAVAILABLE], [None, None]], None),
        # un-scorable inputs are counted but never stop the run
        (0.5, [[UNSCORABLE, UNSCORABLE], [UNSCORABLE, UNSCORABLE]], None),
        # the step closes after 2 groups: one failure per step never reaches 50%
        (0.5, [[WORLD_MODEL_ERROR, None], [None, None], [WORLD_MODEL_ERROR, None], [None, None]], None),
        (None, [[SANDBOX_UNAVAILABLE, SANDBOX_UNAVAILABLE]] * 3, None),
    ],
)
def test_monitor_stop_rule(max_share, groups, stops_at):
    ledger = CostLedger()
    mon = UngradedMonitor(max_share, groups_per_step=2, ledger=ledger)
    stopped = None
    for k, causes in enumerate(groups):
        try:
            mon.record_group(causes)
        except TooManyUngradedError as e:
            stopped = k
            assert e.n_rollouts == 4 and e.share >= max_share and e.max_share == max_share
            break
    assert stopped == stops_at
    n_failed = sum(c is not None for g in groups[: (stopped + 1 if stopped is not None else None)] for c in g)
    assert sum(ledger.ungraded_counts().values()) == n_failed


def test_monitor_plan_resizes_the_step_and_evaluation_never_stops():
    mon = UngradedMonitor(0.5, groups_per_step=1)
    mon.plan(4)  # 4 groups of 2 = 8 rollouts: 3 failures are 37.5%
    for causes in ([SANDBOX_UNAVAILABLE, None], [SANDBOX_UNAVAILABLE, None], [SANDBOX_UNAVAILABLE, None]):
        mon.record_group(causes)
    with pytest.raises(TooManyUngradedError) as e:
        mon.record_group([SANDBOX_UNAVAILABLE, None])
    assert (e.value.n_ungraded, e.value.n_rollouts, e.value.causes) == (4, 8, {SANDBOX_UNAVAILABLE: 4})
    ev = UngradedMonitor(0.5)
    for _ in range(3):
        ev.record_group([SANDBOX_UNAVAILABLE] * 2, training=False)
    assert ev.causes == {SANDBOX_UNAVAILABLE: 6} and ev.n_rollouts == 0


@pytest.mark.parametrize("bad", [0.0, 1.5, -0.1, "0.5"])
def test_bad_max_ungraded_share(bad):
    with pytest.raises(ValueError, match="max_ungraded_share"):
        AnchoredWorldModelWrapper(GuessEnv(), EchoWM(), correction=CorrectionConfig(anchor_fraction=0.5), group_size=2, max_ungraded_share=bad)


@pytest.mark.parametrize("bad", [0, -1.0, "10"])
def test_bad_world_model_timeout(bad):
    with pytest.raises(ValueError, match="world_model_timeout_s"):
        AnchoredWorldModelWrapper(GuessEnv(), EchoWM(), correction=CorrectionConfig(anchor_fraction=0.5), group_size=2, world_model_timeout_s=bad)


# ---------------------------------------------------------------------- world-model failures
def test_world_model_that_raises_leaves_the_group_ungraded_counts_and_warns(caplog):
    w = AnchoredWorldModelWrapper(GuessEnv(), RaisingWM(), correction=CorrectionConfig(anchor_fraction=0.0), group_size=2, groups_per_step=4)
    with caplog.at_level(logging.WARNING):
        out = w.score_group([A, A], options={"target": 0.5})
    assert out.route == "world_model" and out.rewards == [None, None]
    assert [i["wmrl"]["ungraded_cause"] for i in out.infos] == [WORLD_MODEL_ERROR] * 2
    assert [i["wmrl"]["graded"] for i in out.infos] == [False, False]
    assert w.loop.ledger.ungraded_counts() == {WORLD_MODEL_ERROR: 2}
    assert w.loop.ledger.count("world_model") == 2  # the failed call's time is accounted
    assert w.loop.ungraded.stats()["ungraded_by_cause"] == {WORLD_MODEL_ERROR: 2}
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("CUDA error" in r.getMessage() for r in warned)


def test_world_model_failure_on_an_anchor_group_keeps_the_real_reward_but_no_pair():
    w = AnchoredWorldModelWrapper(GuessEnv(), RaisingWM(), correction=CorrectionConfig(anchor_fraction=1.0, min_pairs=2), group_size=2)
    out = w.score_group([A, np.array([0.25], np.float32)], options={"target": 0.5})
    assert out.route == "anchor" and out.rewards == [1.0, 0.75]
    assert out.correction.raw_scores == [None, None]
    assert w.loop.corrector.debiaser.n_pairs == 0 and w.loop.corrector.calibration_error()["n"] == 0
    assert w.loop.ledger.ungraded_counts() == {WORLD_MODEL_ERROR: 2}  # failed scores, counted
    assert w.loop.ungraded.n_ungraded == 0  # no rollout lost its reward: no step to stop


def test_stop_rule_counts_a_whole_step():
    w = AnchoredWorldModelWrapper(GuessEnv(), RaisingWM(), correction=CorrectionConfig(anchor_fraction=0.0), group_size=2, groups_per_step=3)
    w.plan_step(3)  # 6 rollouts: 2 failures are 33%, 4 are 67%
    w.score_group([A, A], options={"target": 0.5})
    with pytest.raises(TooManyUngradedError, match="world_model_error") as e:
        w.score_group([A, A], options={"target": 0.5})
    assert (e.value.n_ungraded, e.value.n_rollouts, e.value.causes) == (4, 6, {WORLD_MODEL_ERROR: 4})
    assert "CUDA error" in str(e.value)
    off = AnchoredWorldModelWrapper(GuessEnv(), RaisingWM(), correction=CorrectionConfig(anchor_fraction=0.0), group_size=2, groups_per_step=1,
                                    max_ungraded_share=None)
    for _ in range(3):
        assert off.score_group([A, A], options={"target": 0.5}).rewards == [None, None]
    assert off.loop.ungraded.n_ungraded == 6


def test_hung_world_model_times_out_and_later_calls_wait_for_it():
    wm = HangingWM()
    w = AnchoredWorldModelWrapper(GuessEnv(), wm, correction=CorrectionConfig(anchor_fraction=0.0), group_size=2, groups_per_step=10,
                                  world_model_timeout_s=0.2)
    try:
        out = w.score_group([A, A], options={"target": 0.5})
        assert out.rewards == [None, None]
        assert [i["wmrl"]["ungraded_cause"] for i in out.infos] == [WORLD_MODEL_TIMEOUT] * 2
        # the hung call still holds the model: the next call does not run beside it
        out2 = w.score_group([A, A], options={"target": 0.5})
        assert out2.rewards == [None, None] and wm.calls == 1
    finally:
        wm.release.set()
    w.loop.world_model_timeout_s = 60.0  # generous: this call returns at once
    for _ in range(100):  # wait until the released thread let go of the model
        out3 = w.score_group([A, A], options={"target": 0.5})
        if out3.rewards[0] is not None:
            break
    assert out3.rewards == [0.5, 0.5] and w.loop.ledger.ungraded_counts()[WORLD_MODEL_TIMEOUT] >= 4


@pytest.mark.parametrize("how", ["max", "last", "sum"])
@pytest.mark.parametrize("scores", [[0.5, float("nan")], [float("nan"), 0.5], [None, 0.5], [0.5, float("-inf")]])
def test_aggregation_of_a_non_finite_turn_is_ungraded_in_any_order(scores, how):
    from wmrl_envs.wrappers.common import aggregate_episode_score

    assert aggregate_episode_score(scores, how) is None


@pytest.mark.parametrize(("scores", "how", "expected"), [([0.2, 0.5], "max", 0.5), ([0.5, 0.2], "max", 0.5),
                                                          ([0.2, 0.5], "last", 0.5), ([0.2, 0.5], "sum", 0.7)])
def test_aggregation_of_finite_turns(scores, how, expected):
    from wmrl_envs.wrappers.common import aggregate_episode_score

    assert aggregate_episode_score(scores, how) == pytest.approx(expected)


@pytest.mark.parametrize("scores", [[0.5, float("nan")], [float("nan"), 0.5], [float("inf"), 0.5]])
def test_non_finite_world_model_score_is_ungraded_in_any_turn(scores):
    """Item 11: a NaN never enters the per-turn scores; max-over-turns is order-independent."""
    w = AnchoredWorldModelWrapper(GuessEnv(), ScriptedWM(scores * 2), correction=CorrectionConfig(anchor_fraction=0.0), group_size=2,
                                  episode_steps=2, groups_per_step=1, max_ungraded_share=None)
    for _ in range(2):  # the group's two episodes
        w.reset(options={"target": 0.5})
        _, r1, term1, _, i1 = w.step(A)
        _, r2, term2, _, i2 = w.step(A)
        assert (term1, term2) == (False, True)
        assert (r1, r2) == (0.0, 0.0)
        assert i2["wmrl"]["graded"] is False and i2["wmrl"]["raw_score"] is None
        assert i2["wmrl"]["ungraded_cause"] == WORLD_MODEL_INVALID
    assert w.loop.ledger.ungraded_counts() == {WORLD_MODEL_INVALID: 2}


def test_nan_scores_never_reach_the_anchor_pairs():
    class NanWM:
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=float("nan")), WorldModelPrediction(score=0.5)]

    w = AnchoredWorldModelWrapper(GuessEnv(), NanWM(), correction=CorrectionConfig(anchor_fraction=1.0), group_size=2)
    out = w.score_group([A, A], options={"target": 0.5})
    assert out.correction.raw_scores == [None, 0.5] and out.rewards == [1.0, 1.0]
    assert w.loop.corrector.debiaser.n_pairs == 1
    assert w.loop.ledger.ungraded_counts() == {WORLD_MODEL_INVALID: 1}


def test_unscorable_inputs_are_counted_silently(caplog):
    class NoFrames:
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=None, ungraded_cause=UNSCORABLE) for _ in actions]

    w = AnchoredWorldModelWrapper(GuessEnv(), NoFrames(), correction=CorrectionConfig(anchor_fraction=0.0), group_size=2, groups_per_step=1)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):  # every rollout of every step: never stops
            assert w.score_group([A, A], options={"target": 0.5}).rewards == [None, None]
    assert w.loop.ledger.ungraded_counts() == {UNSCORABLE: 6}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# ---------------------------------------------------------------------- item 10
def test_score_group_skips_the_world_model_in_evaluation():
    wm = EchoWM()
    w = AnchoredWorldModelWrapper(GuessEnv(), wm, correction=CorrectionConfig(anchor_fraction=0.5), group_size=2)
    w.training = False
    out = w.score_group([A, A], options={"target": 0.5})
    assert out.route == "anchor" and out.rewards == [1.0, 1.0] and wm.calls == 0
    assert w.loop.ledger.count("world_model") == 0
    # the per-episode API agrees
    w.reset(options={"target": 0.5})
    w.step(A)
    assert wm.calls == 0
    # evaluation on the world-model route, or with eval_with_world_model, does call it
    assert w.score_group([A, A], options={"target": 0.5}, route="world_model").rewards == [1.0, 1.0]
    assert wm.calls == 1
    w2 = AnchoredWorldModelWrapper(GuessEnv(), wm, correction=CorrectionConfig(anchor_fraction=0.5), group_size=2, eval_with_world_model=True)
    w2.training = False
    assert w2.score_group([A, A], options={"target": 0.5}).correction.raw_scores == [1.0, 1.0]
    assert wm.calls == 2


def test_score_trajectories_skips_the_world_model_in_evaluation():
    from wmrl_envs.world_models.base import Trajectory

    class CountingRewardModel:
        calls = 0

        def predict(self, contexts, actions):
            self.calls += 1
            return [WorldModelPrediction(score=0.3) for _ in actions]

    wm = CountingRewardModel()
    w = AnchoredWorldModelWrapper(GuessEnv(), wm, correction=CorrectionConfig(anchor_fraction=0.5), group_size=2, mode="reward")
    w.training = False
    out = w.score_trajectories([A, A], [Trajectory([A, A], [A], True)] * 2, [1.0, 0.0])
    assert out.route == "anchor" and out.rewards == [1.0, 0.0] and wm.calls == 0
    out = w.score_trajectories([A, A], [Trajectory([A, A], [A], True)] * 2, [1.0, 0.0], route="world_model")
    assert out.rewards == [0.3, 0.3] and wm.calls == 1


# ---------------------------------------------------------------------- sandbox failures (fake)
class BrokenEnv(GuessEnv):
    """A GuessEnv whose real step raises SandboxUnavailableError on the listed calls."""

    def __init__(self, broken_calls) -> None:
        super().__init__()
        self.broken_calls = set(broken_calls)
        self.calls = 0

    def step(self, action):
        from wmrl_envs.sandbox.base import SandboxUnavailableError

        self.calls += 1
        if self.calls in self.broken_calls:
            raise SandboxUnavailableError("Docker daemon unreachable")
        return super().step(action)


def test_a_step_that_raises_sandbox_unavailable_is_ungraded_not_a_crash():
    w = AnchoredWorldModelWrapper(BrokenEnv({1}), EchoWM(), correction=CorrectionConfig(anchor_fraction=1.0), group_size=2,
                                  groups_per_step=4, max_ungraded_share=None)
    out = w.score_group([A, A], options={"target": 0.5})
    assert out.rewards == [None, 1.0]
    assert out.infos[0]["wmrl"]["ungraded_cause"] == SANDBOX_UNAVAILABLE
    assert w.loop.corrector.debiaser.n_pairs == 1  # only the graded rollout is a pair
    assert w.loop.ledger.ungraded_counts() == {SANDBOX_UNAVAILABLE: 1}
    # per-episode API: the episode ends ungraded, reward 0.0
    w.reset(options={"target": 0.5})
    w.env.broken_calls.add(w.env.calls + 1)
    _, r, term, _, info = w.step(A)
    assert (r, term, info["wmrl"]["graded"], info["wmrl"]["ungraded_cause"]) == (0.0, True, False, SANDBOX_UNAVAILABLE)


def test_a_dead_sandbox_stops_the_run_although_anchors_are_a_minority_of_the_step():
    """1 anchor group of 4: all its executions fail (25% of the step's rollouts, 100% of its
    real executions) -> stop at once, not world-model-only training with warnings."""
    w = AnchoredWorldModelWrapper(BrokenEnv(range(1, 100)), EchoWM(), correction=CorrectionConfig(anchor_fraction=0.25), group_size=2,
                                  groups_per_step=4)
    routes = w.plan_step(4)
    assert routes.count("anchor") == 1
    with pytest.raises(TooManyUngradedError, match="real executions") as e:
        for r in routes:
            w.score_group([A, A], options={"target": 0.5}, route=None)
            if r == "anchor":
                break
    assert (e.value.scope, e.value.n_ungraded, e.value.n_rollouts) == ("real executions", 2, 2)
    assert e.value.causes == {SANDBOX_UNAVAILABLE: 2} and "Docker daemon unreachable" in str(e.value)
    # one flaky execution of a group of 4 (25% of the executions) does not stop it
    w2 = AnchoredWorldModelWrapper(BrokenEnv({2}), EchoWM(), correction=CorrectionConfig(anchor_fraction=1.0), group_size=4, groups_per_step=1)
    assert w2.score_group([A] * 4, options={"target": 0.5}).rewards == [1.0, None, 1.0, 1.0]


def _close(loop, ticket, n_failed: int, g: int):
    """Close ``ticket`` with its first ``n_failed`` rollouts ungraded by the machinery (a dead
    sandbox on anchors, a world model that raised on world-model groups)."""
    failed = [True] * n_failed + [False] * (g - n_failed)
    if ticket.route == "anchor":
        return loop.close_group(ticket, [0.5] * g, [None if f else 0.5 for f in failed],
                                exec_causes=[SANDBOX_UNAVAILABLE if f else None for f in failed])
    return loop.close_group(ticket, [None if f else 0.5 for f in failed],
                            wm_causes=[WORLD_MODEL_ERROR if f else None for f in failed])


@pytest.mark.parametrize("planned_by", ["plan_step", "open_group"])
def test_the_real_execution_share_extrapolates_to_the_executions_the_step_plans(planned_by):
    """Issue 25, finding 8: 4 failed of the first 8 executions of a step that plans 24 (3 anchor
    groups of 8) are 17% of the step's executions, not 50%: go on. A step whose executions
    genuinely fail still stops, on either share."""
    from wmrl_envs.core import CorrectionConfig, CorrectionLoop

    g = 8
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.25), world_model=EchoWM(), groups_per_step=12)
    if planned_by == "plan_step":
        loop.plan_step(12)
    tickets = [loop.open_group() for _ in range(12)]  # without plan_step the first open draws the step
    anchors = [t for t in tickets if t.route == "anchor"]
    assert len(anchors) == 3 and len({t.step for t in tickets}) == 1
    _close(loop, anchors[0], 4, g)  # 4 of the 24 planned executions
    assert loop.ungraded.n_ungraded == 4
    with pytest.raises(TooManyUngradedError, match="real executions") as e:
        _close(loop, anchors[1], g, g)  # 12 of 24: a dead sandbox
    assert (e.value.scope, e.value.n_ungraded, e.value.n_rollouts) == ("real executions", 12, 24)
    # the share of all rollouts: 6 whole world-model groups of the 12 planned (48 of 96) stop
    loop.plan_step(12)
    wm = [t for t in (loop.open_group() for _ in range(12)) if t.route == "world_model"]
    for t in wm[:5]:
        _close(loop, t, g, g)
    with pytest.raises(TooManyUngradedError, match="rollouts of this training step") as e:
        _close(loop, wm[5], g, g)
    assert (e.value.scope, e.value.n_ungraded, e.value.n_rollouts) == ("rollouts", 48, 96)


def test_a_late_anchor_counts_in_the_step_that_planned_it():
    """An anchor group closed after the next step began (a Ray anchor still running) counts
    toward its own step's stop rule, not the step that happens to be current."""
    from wmrl_envs.core import CorrectionConfig, CorrectionLoop

    g = 4
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5), world_model=EchoWM(), groups_per_step=4)
    loop.plan_step(4)
    step_a = [loop.open_group() for _ in range(4)]
    a1, a2 = [t for t in step_a if t.route == "anchor"]
    for t in step_a:
        if t is not a2:
            _close(loop, t, 0, g)  # a2 is still running when the next step starts
    loop.plan_step(4)
    step_b = [loop.open_group() for _ in range(4)]
    b1, b2 = [t for t in step_b if t.route == "anchor"]
    assert a2.step != b1.step
    for t in step_b:
        if t.route == "world_model":
            _close(loop, t, 0, g)
    _close(loop, b1, 2, g)  # 2 of step B's 8 executions
    _close(loop, a2, 2, g)  # late: 2 of step A's 8, not 4 of step B's
    assert loop.ungraded.n_ungraded == 4
    with pytest.raises(TooManyUngradedError, match="real executions") as e:
        _close(loop, b2, g, g)
    assert (e.value.n_ungraded, e.value.n_rollouts, e.value.causes) == (6, 8, {SANDBOX_UNAVAILABLE: 6})


def test_groups_whose_routes_are_given_back_leave_the_stop_rules_step():
    """The vector wrapper abandons unstarted groups on a full reset and gives their routes back:
    the groups opened again with them are the same step, not the start of the next one."""
    from wmrl_envs.core import CorrectionConfig, CorrectionLoop

    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.0), world_model=EchoWM(), groups_per_step=2)
    loop.plan_step(2)
    abandoned = [loop.open_group(), loop.open_group()]
    loop.requeue_routes([t.route for t in abandoned])
    again = [loop.open_group(), loop.open_group()]
    assert {t.step for t in again} == {abandoned[0].step}
    _close(loop, again[0], 1, 2)  # 1 of the step's 4 rollouts
    with pytest.raises(TooManyUngradedError) as e:
        _close(loop, again[1], 1, 2)
    assert (e.value.n_ungraded, e.value.n_rollouts) == (2, 4)


def test_a_load_restores_the_monitors_step_size():
    """Issue 25, finding 9: the monitor's default step (``groups_per_step``, the step the share
    is of) is part of its state; a load also ends a step planned before it."""
    import json

    from wmrl_envs.core import CorrectionConfig, CorrectionLoop

    state = json.loads(json.dumps(UngradedMonitor(0.5, groups_per_step=4).state_dict()))
    back = UngradedMonitor(0.5, groups_per_step=1)
    back.plan(2)
    back.load_state_dict(state)
    assert back.groups_per_step == 4
    for _ in range(3):
        back.record_group([SANDBOX_UNAVAILABLE, None])  # 3 of the 8 rollouts of 4 groups
    with pytest.raises(TooManyUngradedError) as e:
        back.record_group([SANDBOX_UNAVAILABLE, None])
    assert (e.value.n_ungraded, e.value.n_rollouts) == (4, 8)
    old = {k: v for k, v in state.items() if k != "groups_per_step"}  # saved by the previous version
    kept = UngradedMonitor(0.5, groups_per_step=3)
    kept.load_state_dict(old)
    assert kept.groups_per_step == 3
    # through the loop: the loaded groups_per_step is the monitor's step too
    saved = CorrectionLoop(CorrectionConfig(anchor_fraction=0.0), world_model=EchoWM(), groups_per_step=4)
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.0), world_model=EchoWM(), groups_per_step=1)
    with pytest.warns(UserWarning, match="groups_per_step"):
        loop.load_state_dict(json.loads(json.dumps(saved.state_dict())))
    assert loop.groups_per_step == loop.ungraded.groups_per_step == 4
    for _ in range(3):
        _close(loop, loop.open_group(), 1, 2)  # 1 of 2 failed: 3 of the step's 8 so far
    with pytest.raises(TooManyUngradedError) as e:
        _close(loop, loop.open_group(), 1, 2)
    assert (e.value.n_ungraded, e.value.n_rollouts) == (4, 8)


def test_state_dict_keeps_the_ungraded_counts():
    w = AnchoredWorldModelWrapper(GuessEnv(), RaisingWM(), correction=CorrectionConfig(anchor_fraction=0.0), group_size=2, max_ungraded_share=None)
    w.score_group([A, A], options={"target": 0.5})
    state = w.state_dict()
    w2 = AnchoredWorldModelWrapper(GuessEnv(), RaisingWM(), correction=CorrectionConfig(anchor_fraction=0.0), group_size=2)
    w2.load_state_dict(state)
    assert w2.loop.ungraded.stats() == w.loop.ungraded.stats() and w2.loop.ledger.ungraded_counts() == {WORLD_MODEL_ERROR: 2}


def test_world_model_idle_reports_a_call_that_is_still_running():
    from wmrl_envs.core import world_model_idle

    wm = HangingWM()
    w = AnchoredWorldModelWrapper(GuessEnv(), wm, correction=CorrectionConfig(anchor_fraction=0.0), group_size=2, groups_per_step=10,
                                  world_model_timeout_s=0.1)
    assert world_model_idle(wm, 0.0)
    try:
        assert w.score_group([A, A], options={"target": 0.5}).rewards == [None, None]
        assert world_model_idle(wm, 0.0) is False  # the hung call holds the model
    finally:
        wm.release.set()
    assert world_model_idle(wm, 60.0)  # returns as soon as the released call finished


def test_ctrl_c_during_a_timed_world_model_call_lets_the_call_end_before_it_unwinds():
    """An interrupt that unwound while the call's daemon thread still computed would let the
    interpreter exit under it (in torch: "terminate called without an active exception", an abort
    instead of a KeyboardInterrupt); the call is given its deadline's remainder to end first."""
    import os
    import signal
    import time

    from wmrl_envs.core.world_model_call import _call_with_deadline

    class SlowWM:
        finished = False

        def predict(self, contexts, actions):
            time.sleep(0.5)
            SlowWM.finished = True
            return [WorldModelPrediction(score=0.5) for _ in actions]

    handler = signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job may ignore SIGINT
    try:
        threading.Timer(0.1, os.kill, args=(os.getpid(), signal.SIGINT)).start()  # Ctrl-C
        with pytest.raises(KeyboardInterrupt):
            _call_with_deadline(SlowWM(), [None], [A], timeout_s=30.0)
    finally:
        signal.signal(signal.SIGINT, handler)
    assert SlowWM.finished  # before the fix the interrupt unwound at 0.1 s, the call still running
