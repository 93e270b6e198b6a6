"""The embodied (Reacher-v5) experiment and its task kit (agents.experiments.reacher): scripted
controller, BC, the progress world model and one tiny WMRL GRPO run through
AnchoredWorldModelWrapper's reward-mode group API."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco")
gym = pytest.importorskip("gymnasium")
try:
    gym.make("Reacher-v5").close()
except Exception as exc:  # pragma: no cover - gymnasium[mujoco] extras missing
    pytest.skip(f"Reacher-v5 unavailable: {exc}", allow_module_level=True)

from agents.experiments.embodied import EmbodiedConfig, make_wrapper, train_grpo  # noqa: E402
from agents.experiments.reacher import (  # noqa: E402
    GaussianMLPPolicy,
    ScriptedReacher,
    behaviour_cloning,
    collect_demonstrations,
    evaluate,
    make_envs,
    rollout,
)
from agents.grpo import GRPOPolicy  # noqa: E402
from wmrl_envs.core.config import CorrectionConfig  # noqa: E402
from wmrl_envs.world_models import Trajectory, WorldModelPrediction  # noqa: E402
from wmrl_envs.world_models.progress import ProgressWorldModel, frame_indices  # noqa: E402

torch.set_num_threads(1)

EVAL = [100_000 + i for i in range(16)]


@pytest.fixture(scope="module")
def envs():
    es = make_envs(16)
    yield es
    for e in es:
        e.close()


def test_scripted_controller_succeeds_on_most_states(envs):
    ctrl = ScriptedReacher()
    b = rollout(envs, lambda o: (ctrl.act(o), np.zeros(len(o), np.float32)), EVAL)
    assert b.success.mean() >= 0.9
    assert np.median(b.final_distance) < 0.005
    one = ctrl.act(b.observations[0, 0])  # single-state form
    assert one.shape == (2,) and np.all(np.abs(one) <= 1)


def test_bc_improves_over_random(envs):
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    demos = collect_demonstrations(envs, ScriptedReacher(), [200_000 + i for i in range(16)], noise_std=0.3, rng=rng)
    assert demos.observations.shape == (16 * 50, 10) and demos.actions.shape == (16 * 50, 2)
    random_pol = GaussianMLPPolicy()
    before = evaluate(random_pol, envs, EVAL)
    pol = GaussianMLPPolicy()
    losses = behaviour_cloning(pol, demos, epochs=150, seed=0)
    after = evaluate(pol, envs, EVAL)
    assert losses[-1] < losses[0]
    assert after["mean_final_distance"] < 0.7 * before["mean_final_distance"]
    assert after["success"] > before["success"]


def _toy_data(n=160, seed=0):
    """1-D episodes of 11 frames; success iff the state ends above 0.5; progress = state clipped."""
    rng = np.random.default_rng(seed)
    trajs, succ, prog = [], [], []
    for _ in range(n):
        xs = np.cumsum(rng.normal(0.05, 0.12, 11)).astype(np.float32).reshape(-1, 1)
        trajs.append(Trajectory(list(xs), [np.zeros(1, np.float32)] * 10, True))
        succ.append(float(xs[-1, 0] > 0.5))
        prog.append(np.clip(xs[:, 0], 0, 1))
    return trajs, np.array(succ), prog


def test_progress_model_fit_predict_save_load(tmp_path):
    assert frame_indices(50).tolist() == [0, 7, 14, 21, 29, 36, 43, 50]
    assert frame_indices(3, 8).tolist()[0] == 0 and frame_indices(3, 8).tolist()[-1] == 3
    trajs, succ, prog = _toy_data()
    wm = ProgressWorldModel(obs_dim=1, hidden=(32, 32), seed=0)
    with pytest.raises(RuntimeError):
        wm.predict([None], trajs[:1])
    wm.fit(trajs[:120], succ[:120], prog[:120], epochs=80)
    assert wm.history[-1] < wm.history[0]
    test = trajs[120:]
    preds = wm.predict([None] * len(test), test)
    assert all(isinstance(p, WorldModelPrediction) for p in preds)
    scores = np.array([p.score for p in preds])
    assert np.all((scores >= 0) & (scores <= 1))
    from sklearn.metrics import roc_auc_score

    assert roc_auc_score(succ[120:], scores) > 0.85
    assert len(preds[0].extras["progress"]) == 8
    # bad actions are ungraded, not errors
    bad = wm.predict([None, None], ["not a trajectory", Trajectory([], [], True)])
    assert [p.score for p in bad] == [None, None]
    # other score kinds
    wm.score = "progress_last"
    last = np.array([p.score for p in wm.predict([None] * 5, test[:5])])
    assert np.allclose(last, [p.extras["progress"][-1] for p in preds[:5]])
    wm.score = "success"
    # save / load round trip predicts identically
    path = tmp_path / "wm.pt"
    wm.save(path)
    wm2 = ProgressWorldModel.load(path)
    assert np.allclose([p.score for p in wm2.predict([None] * len(test), test)], scores)
    with pytest.raises(ValueError):
        ProgressWorldModel(obs_dim=1, score="nope")  # type: ignore[arg-type]


class SpyWM:
    """Records every batch it scores; scores by the final fingertip distance (closer = higher)."""

    def __init__(self):
        self.calls = []

    def predict(self, contexts, actions):
        self.calls.append(len(actions))
        return [WorldModelPrediction(score=float(-np.linalg.norm(np.asarray(a.observations[-1])[8:10]))) for a in actions]


def test_tiny_wmrl_grpo_through_wrapper(envs):
    cfg = EmbodiedConfig(steps=3, groups_per_step=4, group_size=4, eval_every=3,
                         correction=CorrectionConfig(anchor_fraction=0.25, min_pairs=4, refit_every=4, warmup_groups=1))
    rng = np.random.default_rng(1)
    torch.manual_seed(1)
    demos = collect_demonstrations(envs, ScriptedReacher(), [200_000 + i for i in range(8)], noise_std=0.3, rng=rng)
    pol = GaussianMLPPolicy()
    behaviour_cloning(pol, demos, epochs=20, seed=1)
    before = [p.detach().clone() for p in pol.parameters()]
    wm = SpyWM()
    wrapper = make_wrapper("wmrl", wm, cfg, seed=0)
    seen = []
    orig = wrapper.score_trajectories

    def spy(contexts, trajectories, real_returns, **kw):
        res = orig(contexts, trajectories, real_returns, **kw)
        seen.append((res, list(real_returns)))
        return res

    wrapper.score_trajectories = spy  # type: ignore[method-assign]
    out = train_grpo(pol, wrapper, envs, cfg, train_seeds=list(range(8)), eval_seeds=EVAL[:8],
                     step_states=[[0, 1, 2, 3], [4, 5, 6, 7], [0, 2, 4, 6]], generator=torch.Generator().manual_seed(0))
    assert len(seen) == 12 and wm.calls == [4] * 12  # one batched predict per group
    anchors = [(r, real) for r, real in seen if r.route == "anchor"]
    wm_groups = [(r, real) for r, real in seen if r.route == "world_model"]
    assert len(anchors) == 3 and len(wm_groups) == 9  # one anchor group per step of 4
    for r, real in anchors:  # anchors train on the real success
        assert r.rewards == real and r.correction.real_scores == real
    for r, _ in wm_groups:  # world-model groups never see the real success
        assert r.correction.real_scores == [None] * 4
        assert r.rewards == r.correction.calibrated_scores
        assert r.advantage_weight == 1.0
    raw, real = wrapper.loop.corrector.debiaser.pairs()
    assert len(raw) == 12 and sorted(real.tolist()) == sorted(x for _, rr in anchors for x in rr)
    assert out["real_labels"] == 12 and out["anchor_groups"] == 3
    assert [p["step"] for p in out["curve"]] == [0, 3]
    assert any(not torch.equal(a, b) for a, b in zip(before, pol.parameters()))
    # the policy is a GRPOPolicy; 4 iterations per step on the log-probs recorded at sampling
    assert isinstance(pol, GRPOPolicy) and cfg.grpo.num_iterations == 4
    assert all(r["rows"] > 0 and np.isfinite(r["loss"]) and 0.0 <= r["clip_fraction"] <= 1.0 for r in out["log"])
    assert [r["groups_used"] for r in out["log"]] == [4, 4, 4] and [r["ungraded_rows"] for r in out["log"]] == [0, 0, 0]
