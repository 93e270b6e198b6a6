"""Stable-Baselines3 adapter: anchored DummyVecEnv under PPO, ρ on advantages, saved corrections.

Everything runs on ``wmrl/Guess-v0`` (one-step episodes, real score ``1 − |a − t|``) with a
synthetic world model of known bias, so every count can be checked exactly.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("stable_baselines3")

from stable_baselines3 import PPO, SAC  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback, CallbackList  # noqa: E402
from stable_baselines3.common.env_checker import check_env  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

from agents.adapters.sb3 import AnchoredVecEnv, AnchorWeightCallback, make_anchored_vec_env  # noqa: E402
from wmrl_envs import AnchoredWorldModelWrapper, InverseVarianceDenoiser, IsotonicDebiaser, WMRLCorrector  # noqa: E402
from wmrl_envs.core import CorrectionConfig  # noqa: E402
from wmrl_envs.envs.guess import GuessEnv, guess_score  # noqa: E402
from wmrl_envs.world_models.synthetic import SyntheticWorldModel  # noqa: E402

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _sb3_logs_in_tmp_path(tmp_path, monkeypatch):
    """SB3's default logger makes an ``SB3-<date>`` folder in the system temporary folder on
    every ``learn()``; keep them in the test's own folder."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
RHO_25 = {"ema": 0.75, "c": 2.0, "n_scored_groups": 5}  # ρ = 1 + c·s̄² = 2.5 from the first group on


def make_venv(n_envs: int = 2, seed: int = 0, corrector: WMRLCorrector | None = None, **kw) -> AnchoredVecEnv:
    wm = SyntheticWorldModel(guess_score, bias=lambda s: s**3, noise_std=0.02, seed=seed)
    if corrector is None:
        corrector = WMRLCorrector(IsotonicDebiaser(min_pairs=8, refit_every=8), InverseVarianceDenoiser(warmup_groups=2))
    args = dict(correction=CorrectionConfig(anchor_fraction=0.25), group_size=4)
    args.update(kw)
    return make_anchored_vec_env(GuessEnv, wm, n_envs=n_envs, seed=seed, corrector=corrector, **args)


class Tally(BaseCallback):
    """Counts routes of every step from the infos, and snapshots the rollout buffer at rollout end."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = {"anchor": 0, "world_model": 0}
        self.snapshots: list[dict[str, np.ndarray]] = []
        self._w: np.ndarray | None = None

    def _on_rollout_start(self) -> None:
        buf = self.model.rollout_buffer
        self._w = np.ones((buf.buffer_size, buf.n_envs), dtype=np.float32)
        self._anchor = np.zeros((buf.buffer_size, buf.n_envs), dtype=bool)

    def _on_step(self) -> bool:
        pos = self.model.rollout_buffer.pos
        for i, info in enumerate(self.locals["infos"]):
            wm = info["wmrl"]
            self.steps[wm["route"]] += 1
            if wm["route"] == "anchor":
                self._w[pos, i] = wm["advantage_weight"]
                self._anchor[pos, i] = True
        return True

    def _on_rollout_end(self) -> None:
        buf = self.model.rollout_buffer
        self.snapshots.append({
            "advantages": buf.advantages.copy(), "returns": buf.returns.copy(), "values": buf.values.copy(),
            "rewards": buf.rewards.copy(), "weights": self._w.copy(), "anchor": self._anchor.copy(),
        })


# ---------------------------------------------------------------------------------- check_env
@pytest.mark.parametrize("eval_route", ["anchor", "world_model"])
def test_sb3_check_env_passes_in_evaluation_mode(eval_route):
    env = AnchoredWorldModelWrapper(GuessEnv(), SyntheticWorldModel(guess_score), correction=CorrectionConfig(anchor_fraction=0.5), group_size=2,
                                    eval_route=eval_route)
    env.training = False
    check_env(env, warn=True)


def test_vec_env_training_flag_reaches_every_sub_env_and_the_shared_corrector():
    venv = make_venv(n_envs=3)
    correctors = [lp.corrector for lp in venv.venv.get_attr("loop")]
    assert len({id(c) for c in correctors}) == 1  # one corrector shared by all sub-envs
    assert len({id(r) for r in [lp.router for lp in venv.venv.get_attr("loop")]}) == 3  # each sub-env routes with its own seed
    venv.training = False
    assert venv.training is False and venv.venv.get_attr("training") == [False] * 3
    assert correctors[0].debiaser.training is False and correctors[0].denoiser.training is False
    venv.training = True
    assert venv.training is True


def test_anchored_vec_env_rejects_plain_sub_envs_and_bad_arguments():
    with pytest.raises(ValueError, match="AnchoredWorldModelWrapper"):
        AnchoredVecEnv(DummyVecEnv([GuessEnv]))
    with pytest.raises(ValueError, match="n_envs"):
        make_anchored_vec_env(GuessEnv, SyntheticWorldModel(guess_score), n_envs=0)
    with pytest.raises(TypeError, match=r"debiaser_kwargs=.* -> correction=CorrectionConfig"):
        make_anchored_vec_env(GuessEnv, SyntheticWorldModel(guess_score), corrector=WMRLCorrector(),
                              debiaser_kwargs={"min_pairs": 2})
    with pytest.raises(TypeError, match=r"anchor_fraction=0\.25 -> correction=CorrectionConfig\(anchor_fraction=0\.25\)"):
        make_anchored_vec_env(GuessEnv, SyntheticWorldModel(guess_score), anchor_fraction=0.25)


# ---------------------------------------------------------------------------------- PPO
def test_ppo_trains_with_routing_counts_and_calibration_pairs():
    venv = make_venv(n_envs=2, correction=CorrectionConfig(anchor_fraction=0.25), group_size=4)
    tally = Tally()
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=2, seed=0, device="cpu")
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(384, callback=CallbackList([tally, AnchorWeightCallback()]))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters()))
    assert model.num_timesteps == 384
    stats = venv.stats()
    # every training step is one world-model prediction; only anchor steps ran the real env
    assert stats["ledger"]["world_model"]["count"] == 384 == sum(tally.steps.values())
    assert stats["ledger"]["execution"]["count"] == tally.steps["anchor"] == stats["real_steps"]
    # routes are drawn per block of 1/f = 4 groups with exactly one anchor group each
    for router in [lp.router for lp in venv.venv.get_attr("loop")]:
        assert router.n_anchor_groups == router.n_steps and router.n_groups_routed == 4 * router.n_steps
    assert stats["realised_anchor_fraction"] == 0.25
    assert tally.steps["anchor"] >= 4 * 20  # >= 20 anchor groups of 4 episodes
    # pairs are recorded when an anchor group completes: 4 per completed anchor group
    corrector = [lp.corrector for lp in venv.venv.get_attr("loop")][0]
    assert corrector.debiaser.n_pairs == 4 * corrector.groups_corrected["anchor"] == stats["anchor_pairs"]
    assert corrector.debiaser.fitted and corrector.denoiser.warmed_up
    err = corrector.calibration_error()
    assert err["calibrated_mae"] < err["raw_mae"]  # the isotonic map undoes the cubic bias


@pytest.mark.parametrize("normalize_advantage", [False, True])
def test_anchor_weight_callback_multiplies_gae_advantages_of_anchor_steps(normalize_advantage):
    """After the callback: advantages = ρ × SB3's GAE advantages on anchor steps, unchanged elsewhere."""
    denoiser = InverseVarianceDenoiser(warmup_groups=1)
    denoiser.load_state_dict({**denoiser.state_dict(), **RHO_25})
    corrector = WMRLCorrector(IsotonicDebiaser(min_pairs=8, refit_every=8), denoiser)
    venv = make_venv(n_envs=2, corrector=corrector, correction=CorrectionConfig(anchor_fraction=0.5), group_size=2)
    before, after = Tally(), Tally()
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu",
                normalize_advantage=normalize_advantage)
    model.learn(64, callback=CallbackList([before, AnchorWeightCallback(), after]))
    b, a = before.snapshots[0], after.snapshots[0]
    anchor = b["anchor"]
    assert anchor.any() and (~anchor).any()
    # one-step episodes: GAE reduces to r − V(s) (SB3's own computation, checked independently)
    np.testing.assert_allclose(b["advantages"], b["rewards"] - b["values"], atol=1e-6)
    assert (b["weights"][anchor] > 1.0).all() and (b["weights"][~anchor] == 1.0).all()
    assert np.isclose(b["weights"][anchor].max(), 2.5)  # ρ as loaded, before any update
    np.testing.assert_array_equal(a["advantages"][anchor], (b["advantages"] * b["weights"])[anchor])
    np.testing.assert_array_equal(a["advantages"][~anchor], b["advantages"][~anchor])
    np.testing.assert_array_equal(a["returns"], b["returns"])  # the critic's targets stay unweighted


def test_anchor_weight_callback_needs_an_on_policy_rollout_buffer():
    venv = make_venv(n_envs=1)
    model = SAC("MlpPolicy", venv, learning_starts=0, buffer_size=100, seed=0, device="cpu")
    with pytest.raises(TypeError, match="RolloutBuffer"):
        model.learn(1, callback=AnchorWeightCallback())


# ---------------------------------------------------------------------------------- save / load
def test_save_and_load_round_trip_the_correction_state_beside_the_model(tmp_path):
    venv = make_venv(n_envs=2)
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(256, callback=AnchorWeightCallback())
    model.save(tmp_path / "ppo.zip")
    venv.save(tmp_path / "wmrl_state.json")
    saved = json.loads((tmp_path / "wmrl_state.json").read_text())
    assert saved["num_envs"] == 2 and len(saved["envs"]) == 2

    loaded = AnchoredVecEnv.load(tmp_path / "wmrl_state.json", make_venv(n_envs=2).venv)  # a plain VecEnv: wrapped
    assert json.dumps(loaded.state_dicts()) == json.dumps(venv.state_dicts())  # exact, pairs and RNG states included
    old_c, new_c = [lp.corrector for lp in venv.venv.get_attr("loop")][0], [lp.corrector for lp in loaded.venv.get_attr("loop")][0]
    assert new_c is [lp.corrector for lp in loaded.venv.get_attr("loop")][1]  # still shared after loading
    grid = np.linspace(0.0, 1.0, 21).tolist()
    assert new_c.calibrate(grid) == old_c.calibrate(grid) and new_c.rho == old_c.rho
    assert new_c.calibration_error() == old_c.calibration_error()
    for r_old, r_new in zip([lp.router for lp in venv.venv.get_attr("loop")], [lp.router for lp in loaded.venv.get_attr("loop")]):
        assert r_new.route_step(16) == r_old.route_step(16)  # the generators continue identically

    # evaluation on the reloaded pair: frozen corrections, real execution only
    loaded.training = False
    frozen = json.dumps(new_c.state_dict())
    ppo = PPO.load(tmp_path / "ppo.zip", env=loaded, device="cpu")
    mean, _ = evaluate_policy(ppo, loaded, n_eval_episodes=6, deterministic=True)
    assert 0.0 <= mean <= 1.0
    assert json.dumps(new_c.state_dict()) == frozen
    assert loaded.stats()["ledger"]["world_model"]["count"] == saved["envs"][0]["ledger"]["world_model"]["count"]

    in_place = make_venv(n_envs=2)
    assert AnchoredVecEnv.load(tmp_path / "wmrl_state.json", in_place) is in_place
    with pytest.raises(ValueError, match="sub-envs"):
        AnchoredVecEnv.load(tmp_path / "wmrl_state.json", make_venv(n_envs=3))
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(ValueError, match="not a state file"):
        AnchoredVecEnv.load(tmp_path / "other.json", make_venv(n_envs=2))


# ---------------------------------------------------------------------------------- example
def test_example_runs_with_a_tiny_budget(tmp_path):
    spec = importlib.util.spec_from_file_location("sb3_ppo", ROOT / "examples" / "sb3_ppo.py")
    ex = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = ex  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(ex)
    from wmrl_envs.core import CorrectionConfig

    correction = CorrectionConfig(anchor_fraction=0.25, min_pairs=8, refit_every=8, warmup_groups=2)
    out = ex.main(ex.Args(total_timesteps=512, n_envs=2, n_steps=64, group_size=4, correction=correction,
                          eval_episodes=4, output_dir=str(tmp_path)))
    assert (tmp_path / "ppo.zip").is_file() and (tmp_path / "wmrl_state.json").is_file()
    assert out["anchor_groups"] > 0 and out["anchor_pairs"] > 0 and out["n_correctors"] == 1
    assert 0.0 <= out["eval_mean_real_score"] <= 1.0


def test_adaptive_anchor_fraction_reaches_every_sub_env_with_its_settings():
    from wmrl_envs.core import CorrectionConfig

    cfg = CorrectionConfig(anchor_fraction="auto", auto_start_fraction=0.3, f_min=0.05, f_max=0.6, cost_ratio=0.01,
                           min_pairs=8, refit_every=8, warmup_groups=2)
    venv = make_anchored_vec_env(GuessEnv, SyntheticWorldModel(guess_score, noise_std=0.02, seed=0), n_envs=2,
                                 correction=cfg, group_size=4)
    loops = venv.get_attr("loop")
    for loop in loops:
        assert loop.config.anchor_fraction == "auto"
        assert (loop.adaptive.f_min, loop.adaptive.f_max, loop.adaptive.cost_ratio) == (0.05, 0.6, 0.01)
        assert loop.router.anchor_fraction == 0.3
    venv.reset()
    for _ in range(40):
        venv.step(np.array([venv.action_space.sample() for _ in range(2)]))
    assert all(len(loop.adaptive.history) > 0 for loop in venv.get_attr("loop"))
    venv.close()
