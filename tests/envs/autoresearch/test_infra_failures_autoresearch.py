"""AutoResearch: a sandbox that breaks leaves rollouts ungraded; the agent's own failures stay graded.

The env, the grader and the wrapper are the real ones; the sandbox is the real one (bubblewrap
when it works here, else the subprocess backend) behind a thin proxy that raises
``SandboxUnavailableError`` on chosen executions, as a dead Docker daemon or a sandbox that
cannot start does.
"""

from __future__ import annotations

import warnings

import pytest

from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.core import TooManyUngradedError
from wmrl_envs.core.ungraded import SANDBOX_UNAVAILABLE
from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
from wmrl_envs.envs.autoresearch.tasks import get_task
from wmrl_envs.sandbox.base import Sandbox, SandboxLimits, SandboxUnavailableError
from wmrl_envs.world_models.base import WorldModelPrediction
from wmrl_envs.core import CorrectionConfig

TASK = "house-prices"  # the cheapest task to execute
LIMITS = SandboxLimits(wall_time_s=60.0, cpu_time_s=60.0, memory_mb=2048)


@pytest.fixture(scope="module")
def real_sandbox():
    try:
        from wmrl_envs.sandbox.bubblewrap import BubblewrapSandbox

        box: Sandbox = BubblewrapSandbox(LIMITS)
    except SandboxUnavailableError:
        from wmrl_envs.sandbox.subprocess import SubprocessSandbox

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            box = SubprocessSandbox(LIMITS)
    yield box
    box.close()


class BreakingSandbox(Sandbox):
    """Runs on ``inner`` except on the executions numbered in ``broken`` (1-based), which raise."""

    name = "breaking"

    def __init__(self, inner: Sandbox | None, broken) -> None:
        super().__init__(LIMITS)
        self.inner = inner
        self.broken = set(broken)
        self.calls = 0

    def run_python(self, source, workdir, *, limits=None, env=None, filename="solution.py"):
        self.calls += 1
        if self.inner is None or self.calls in self.broken:
            raise SandboxUnavailableError("Docker daemon error: connection refused (the daemon died)")
        return self.inner.run_python(source, workdir, limits=limits, env=env, filename=filename)


class ConstantWM:
    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=0.5, status="valid") for _ in actions]


def test_env_step_with_a_broken_sandbox_is_ungraded_and_ends_the_episode(tmp_path):
    box = BreakingSandbox(None, ())
    env = AutoResearchEnv(tasks=[TASK], sandbox=box, max_turns=3, workdir_root=str(tmp_path))
    env.reset(options={"task_id": TASK})
    obs, reward, terminated, truncated, info = env.step(get_task(TASK).starter_code)
    assert box.calls == 1
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["graded"] is False and info["status"] == "ungraded" and info["score"] is None
    assert info["ungraded_cause"] == SANDBOX_UNAVAILABLE and "daemon died" in info["message"]
    assert obs["feedback"].startswith("[grader] status: ungraded |") and "\n" not in obs["feedback"]
    assert obs["turn"] == 1
    assert list((tmp_path / "jobs").iterdir()) == []  # the job folder is cleaned up
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("print(1)")
    env.close()


@pytest.mark.parametrize(
    ("source", "limits", "status", "score"),
    [
        ("raise ValueError('my bug')\n", LIMITS, "runtime_err", 0.1),
        ("import time\ntime.sleep(30)\n", SandboxLimits(wall_time_s=1.0, cpu_time_s=1.0, memory_mb=2048), None, None),
    ],
)
def test_the_agents_own_failures_stay_graded(real_sandbox, tmp_path, source, limits, status, score):
    env = AutoResearchEnv(tasks=[TASK], sandbox=real_sandbox, limits=limits, workdir_root=str(tmp_path))
    env.reset(options={"task_id": TASK})
    _, reward, _, _, info = env.step(source)
    assert info["graded"] is True and info["executed"] is True
    assert "ungraded_cause" not in info
    if status is not None:
        assert (info["status"], reward) == (status, score)
    else:  # its own time-out: a real, low score on the scale, not ungraded
        assert info["status"] in ("runtime_err", "ran_no_sub") and reward in (0.1, 0.2)
    env.close()


def test_broken_sandbox_through_the_wrapper_ungraded_rollouts_then_the_stop_rule(real_sandbox, tmp_path, caplog):
    box = BreakingSandbox(real_sandbox, broken={1, 3, 4})
    env = AutoResearchEnv(tasks=[TASK], sandbox=box, workdir_root=str(tmp_path))
    w = AnchoredWorldModelWrapper(env, ConstantWM(), correction=CorrectionConfig(anchor_fraction=1.0, min_pairs=2), group_size=2, groups_per_step=2,
                                  max_ungraded_share=0.75)
    w.plan_step(2)  # one step of 2 groups x 2 rollouts
    starter = get_task(TASK).starter_code
    out = w.score_group([starter, starter], options={"task_id": TASK})
    assert out.route == "anchor"
    assert out.rewards[0] is None and out.rewards[1] is not None and out.rewards[1] >= 0.5  # the starter is valid
    assert [i["wmrl"]["ungraded_cause"] for i in out.infos] == [SANDBOX_UNAVAILABLE, None]
    assert out.infos[0]["status"] == "ungraded"
    assert w.loop.corrector.debiaser.n_pairs == 1  # the ungraded rollout is no anchor pair
    assert w.loop.ledger.ungraded_counts() == {SANDBOX_UNAVAILABLE: 1}
    assert any("sandbox_unavailable" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    with pytest.raises(TooManyUngradedError) as e:  # 3 of the step's 4 rollouts: 75%
        w.score_group([starter, starter], options={"task_id": TASK})
    assert (e.value.n_ungraded, e.value.n_rollouts, e.value.causes) == (3, 4, {SANDBOX_UNAVAILABLE: 3})
    assert "daemon died" in str(e.value)
    assert w.loop.corrector.debiaser.n_pairs == 1 and box.calls == 4
    env.close()
