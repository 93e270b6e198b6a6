"""The wrapper on the real AutoResearch env with the real bubblewrap sandbox.

World-model groups must never reach the sandbox; anchor groups execute every rollout; the
wrapped env passes ``check_env`` in evaluation mode.
"""

from __future__ import annotations

import pytest
from gymnasium.utils.env_checker import check_env

from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
from wmrl_envs.envs.autoresearch.observation import next_observation
from wmrl_envs.envs.autoresearch.tasks import get_task
from wmrl_envs.envs.autoresearch.secret import sandbox_hidden_paths
from wmrl_envs.sandbox import SandboxLimits, available_backends, make_sandbox
from wmrl_envs.world_models.base import WorldModelPrediction
from wmrl_envs.core import CorrectionConfig

import os
import shutil

pytestmark = pytest.mark.skipif(
    not (os.environ.get("CI") or shutil.which("bwrap")),
    reason="needs bubblewrap (apt-get install bubblewrap); where bwrap is installed a broken sandbox fails",
)


class CountingSandbox:
    """Wraps a real sandbox and counts its executions."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0
        self.name, self.isolates, self.limits = inner.name, inner.isolates, inner.limits
        self.hidden_paths = inner.hidden_paths

    def run_python(self, *a, **kw):
        self.calls += 1
        return self.inner.run_python(*a, **kw)

    def close(self):
        self.inner.close()


class ConstantJudge:
    """A stand-in world model: predicts "valid, mid" for a random-forest model line."""

    def predict(self, contexts, actions):
        out = []
        for ctx, code in zip(contexts, actions):
            valid = "model = RandomForest" in str(code)
            fb = "predicted: runs" if valid else "predicted: error"
            out.append(WorldModelPrediction(score=0.725 if valid else 0.1, status="valid" if valid else "runtime_err",
                                            feedback=fb, observation=next_observation(ctx, fb)))
        return out


@pytest.fixture(scope="module")
def sandbox():
    sb = CountingSandbox(make_sandbox("bubblewrap", SandboxLimits(wall_time_s=60, cpu_time_s=60),
                                      hidden_paths=sandbox_hidden_paths()))
    yield sb
    sb.close()


def test_world_model_groups_never_execute_and_anchors_execute_all(sandbox):
    env = AutoResearchEnv(tasks=["house-prices"], sandbox=sandbox)
    w = AnchoredWorldModelWrapper(env, ConstantJudge(), correction=CorrectionConfig(anchor_fraction=0.5), group_size=3, groups_per_step=2)
    spec = get_task("house-prices")
    actions = [
        spec.starter_code_with("model = RandomForestRegressor(n_estimators=5, random_state=0)"),
        spec.starter_code_with("model = Ridge(alpha=1.0)"),
        spec.starter_code_with("model = NoSuchModel()"),
    ]
    routes = []
    for _ in range(2):
        before = sandbox.calls
        g = w.score_group(actions, options={"task_id": "house-prices"})
        routes.append(g.route)
        if g.route == "world_model":
            assert sandbox.calls == before
            assert g.rewards == pytest.approx([0.725, 0.1, 0.1])
            assert all(o["feedback"].startswith("predicted") for o in g.observations)
        else:
            assert sandbox.calls == before + 3
            statuses = [i["status"] for i in g.infos]
            assert statuses == ["valid", "valid", "runtime_err"]
            assert g.rewards[2] == pytest.approx(0.1)
            assert all(0.5 <= r <= 1.0 for r in g.rewards[:2])
            assert g.infos[0]["wmrl"]["raw_score"] == pytest.approx(0.725)
            assert g.infos[0]["wmrl"]["real_score"] == pytest.approx(g.rewards[0])
    assert sorted(routes) == ["anchor", "world_model"]  # 1 anchor per block of 2 groups
    assert w.loop.corrector.debiaser.n_pairs == 3
    env.close()


def test_check_env_on_wrapped_autoresearch(sandbox):
    env = AutoResearchEnv(tasks=["house-prices"], sandbox=sandbox)
    check_env(env, skip_render_check=True)
    w = AnchoredWorldModelWrapper(env, ConstantJudge(), correction=CorrectionConfig(anchor_fraction=0.5), group_size=2, eval_route="world_model")
    w.training = False
    check_env(w, skip_render_check=True)
    env.close()
