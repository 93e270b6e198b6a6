"""``wmrl advise``: the pilot on fake, instant components of known correlation and cost (through
the real wrapper and loop), the factories, the outputs, and one real pilot on AutoResearch."""

from __future__ import annotations

import io
import json
import math

import gymnasium as gym
import numpy as np
import pytest

from agents.advise import AdviseConfig, load_factory, main_advise, run_pilot
from wmrl_envs.world_models.base import WorldModelPrediction


class KnownEnv(gym.Env):
    """Action = a number as text; its real score is that number; each execution declares 2 CPU-s."""

    observation_space = gym.spaces.Discrete(1)
    action_space = gym.spaces.Text(32)
    executed = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {"task": int(self.np_random.integers(0, 5))}

    def step(self, action):
        KnownEnv.executed += 1
        return 0, float(action), True, False, {"execution_cpu_s": 2.0}


class NoisyWM:
    """Predicts the real score plus independent noise; declares 0.01 CPU-s per prediction."""

    declared_cpu_s_per_prediction = 0.01

    def __init__(self, noise=0.75, seed=12345):  # not the policy's stream (its noise would copy the actions')
        self.noise, self.rng = noise, np.random.default_rng(seed)

    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=float(a) + self.noise * float(self.rng.normal())) for a in actions]

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class GaussianPolicy:
    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)

    def sample(self, observation, info, group_size):
        return [f"{info['task'] + self.rng.normal():.6f}" for _ in range(group_size)]


def known_env():
    return KnownEnv()


def noisy_wm():
    return NoisyWM()


def gaussian_policy():
    return GaussianPolicy()


def test_pilot_measures_the_within_group_correlation_and_the_costs():
    KnownEnv.executed = 0
    wrapper = run_pilot(KnownEnv(), NoisyWM(noise=0.75), GaussianPolicy(), groups=300, group_size=4, seed=1)
    assert KnownEnv.executed == 1200  # every rollout of every group executed once
    assert len(wrapper.loop.advisor) == 300
    advice = wrapper.loop.advise()
    # corr(x + 0.75 e, x) within groups (x ~ N(0, 1) around the task mean) = 1 / sqrt(1 + 0.5625) = 0.8
    assert advice.r == pytest.approx(0.8, abs=0.03)
    assert advice.r_ci[0] < 0.8 < advice.r_ci[1]
    assert advice.costs.execution_s == 2.0 and advice.costs.world_model_s == pytest.approx(0.01)
    gamma = advice.costs.gamma  # + generation, measured (tiny)
    assert 0.005 <= gamma < 0.01
    # r² = 0.64 > γ (1 − r²): without a noise scale f* = 0 and the floor (0.05) is recommended
    assert advice.f_star == 0.0 and advice.recommended_fraction == 0.05
    assert advice.use_wmrl and advice.noise_batch_ratio is None
    lo, hi = advice.predicted_speedup_range
    c = advice.costs  # the far-above-the-noise-scale end is the cost ratio per step at f = 0.05
    assert lo == pytest.approx(advice.predicted_speedup)
    assert hi == pytest.approx((c.other_s + c.execution_s) / (c.other_s + c.world_model_s + 0.05 * c.execution_s))


def test_pilot_refuses_a_wrong_number_of_actions_and_tiny_pilots():
    class Short(GaussianPolicy):
        def sample(self, observation, info, group_size):
            return super().sample(observation, info, group_size)[:-1]

    with pytest.raises(ValueError, match="3 actions for a group of 4"):
        run_pilot(KnownEnv(), NoisyWM(), Short(), groups=2, group_size=4)
    with pytest.raises(ValueError, match="groups >= 2"):
        run_pilot(KnownEnv(), NoisyWM(), GaussianPolicy(), groups=1)


def test_main_advise_with_factories_writes_json_and_plot(tmp_path):
    cfg = AdviseConfig(groups=40, group_size=4, env=f"{__name__}:known_env", world_model=f"{__name__}:noisy_wm",
                       policy=f"{__name__}:gaussian_policy", n_boot=100, out_dir=str(tmp_path))
    lines = []
    advice = main_advise(cfg, log=lines.append)
    saved = json.loads((tmp_path / "advice.json").read_text())
    assert saved["recommended_fraction"] == pytest.approx(advice.recommended_fraction)
    assert saved["verdict"] == advice.verdict and "pilot of 40 groups" in saved["source"]
    assert (tmp_path / "advice.png").stat().st_size > 10_000
    assert any("verdict" in line for line in lines)


@pytest.mark.parametrize("spec, message", [
    ("no_colon", "module:function"),
    ("not_a_module_xyz:f", "cannot import"),
    ("json:not_there", "no callable"),
    ("learned-policy", "--run-dir RUN_DIR"),
])
def test_load_factory_errors(spec, message):
    with pytest.raises(ValueError, match=message):
        load_factory(spec)


def test_a_factory_in_the_users_working_folder_is_found_and_a_missing_one_says_how_to_fix(tmp_path, monkeypatch):
    """`wmrl advise --env my_pkg.factories:make_env` from the user's project folder (issue 29: the
    console script did not put the working folder on the import path)."""
    import sys

    pkg = tmp_path / "my_wmrl_user_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "factories.py").write_text("def make_env():\n    return 'the env'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert load_factory("my_wmrl_user_pkg.factories:make_env")() == "the env"
    with pytest.raises(ValueError, match=r"cannot import 'no_such_pkg_xyz.f'.*PYTHONPATH=/path/to/folder"):
        load_factory("no_such_pkg_xyz.f:make")


def test_advise_from_a_folder_without_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        main_advise(AdviseConfig(run_dir=str(tmp_path), out_dir=str(tmp_path / "o")))


def test_real_pilot_on_autoresearch(tmp_path):
    """The built-in setup end to end: the grammar agent's programs executed in the bubblewrap
    sandbox and scored by the embedding world model; costs measured in CPU-seconds."""
    from agents.cli import main

    assert main(["advise", "--groups", "3", "--group-size", "2", "--n-boot", "50", "--min-groups", "2",
                 "--out-dir", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "advice.json").read_text())
    assert saved["n_pairs"] <= 6 and saved["costs"]["unit"] == "CPU-s"
    assert saved["costs"]["execution_s"] > 0.3  # a sandboxed Python importing scikit-learn
    assert 0 < saved["costs"]["world_model_s"] < saved["costs"]["execution_s"]
    assert (tmp_path / "advice.png").exists()


def test_bad_factories_and_run_folders_say_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="--policy factory returned a KnownEnv without a sample"):
        main_advise(AdviseConfig(groups=2, min_groups=2, env=f"{__name__}:known_env", world_model=f"{__name__}:noisy_wm",
                                 policy=f"{__name__}:known_env_policy", out_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="--groups >= 2"):
        main_advise(AdviseConfig(groups=1, env="nowhere_xyz:f", out_dir=str(tmp_path)))  # refused before any factory
    (tmp_path / "run" / "checkpoint").mkdir(parents=True)
    (tmp_path / "run" / "checkpoint" / "state.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a wmrl train checkpoint"):
        main_advise(AdviseConfig(run_dir=str(tmp_path / "run"), out_dir=str(tmp_path / "o")))


def known_env_policy():
    return KnownEnv()  # an env given as the policy: it has no sample()


def test_advice_json_is_strict_json(tmp_path):
    cfg = AdviseConfig(groups=2, group_size=2, env=f"{__name__}:known_env", world_model=f"{__name__}:noisy_wm",
                       policy=f"{__name__}:gaussian_policy", n_boot=0, out_dir=str(tmp_path), min_groups=2)
    main_advise(cfg, log=lambda s: None)  # 2 groups, no bootstrap: NaN figures
    text = (tmp_path / "advice.json").read_text()
    assert "NaN" not in text and json.loads(text)["r_ci"] == [None, None]


def test_the_advice_says_which_anchor_window_realises_the_fraction():
    from agents.advise import anchor_window_hint

    assert anchor_window_hint(0.05, 10).startswith("f = 0.05 at 10 groups per step is 1 anchor group every 2 steps")
    assert "--anchor-window 2" in anchor_window_hint(0.05, 10) and "realises 0.1" in anchor_window_hint(0.05, 10)
    assert "--anchor-window 3" in anchor_window_hint(0.1, 4)  # 0.4 per step: one every 3 steps (0.083)
    assert anchor_window_hint(0.1, 10).endswith("train with --anchor-fraction 0.1")  # one per step: no window
    assert "--anchor-window" not in anchor_window_hint(0.25, 8)


def test_bad_groups_per_step_is_refused_before_the_pilot(tmp_path):
    from agents.advise import AdviseConfig, main_advise

    with pytest.raises(ValueError, match="--groups-per-step must be an integer >= 1"):
        main_advise(AdviseConfig(groups_per_step=0, out_dir=str(tmp_path)))


def test_a_missing_run_folder_is_named_as_missing(tmp_path):
    from agents.advise import advice_from_run

    with pytest.raises(FileNotFoundError, match="no such folder"):
        advice_from_run(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="has no checkpoint"):
        advice_from_run(tmp_path)


class NoisyOutcomeEnv(KnownEnv):
    """KnownEnv whose real score adds outcome noise drawn in ``step`` from ``np_random``:
    ``float(action) + 0.75 · N(0, 1)``."""

    def step(self, action):
        obs, score, term, trunc, info = super().step(action)
        return obs, score + 0.75 * float(self.np_random.normal()), term, trunc, info


def test_pilot_r_keeps_the_outcome_noise_of_a_seeded_group():
    """Finding 12: the pilot seeds every group; each rollout must still draw its own outcome noise.
    A world model that predicts the action's expected score exactly, under outcome noise of std
    0.75 around actions of within-group std 1, has r = 1 / sqrt(1 + 0.75²) = 0.8 (it read 1.0:
    one noise draw shared by the group cancels within it)."""
    wrapper = run_pilot(NoisyOutcomeEnv(), NoisyWM(noise=0.0), GaussianPolicy(), groups=300, group_size=4, seed=1)
    wrapper.loop.advisor.n_boot = 100  # the CI's resamples (the default 1000 takes ~20 s here)
    advice = wrapper.loop.advise()
    assert advice.r == pytest.approx(0.8, abs=0.04)
    assert advice.r_ci[1] < 0.9


class AntiWM(NoisyWM):
    """Predicts minus the real score plus noise: anti-correlated within and between groups."""

    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=-float(a) + 0.5 * float(self.rng.normal())) for a in actions]


def anti_wm():
    return AntiWM()


def test_main_advise_says_an_anti_correlated_world_model_carries_no_signal(tmp_path):
    # issue 25, finding 3: the cross-fitted map of an anti-correlated world model is flat; the
    # advice must say "do not use WMRL", not "not enough anchor groups yet"
    cfg = AdviseConfig(groups=16, group_size=4, env=f"{__name__}:known_env", world_model=f"{__name__}:anti_wm",
                       policy=f"{__name__}:gaussian_policy", n_boot=50, out_dir=str(tmp_path))
    lines = []
    advice = main_advise(cfg, log=lines.append)
    assert advice.r == 0.0 and not advice.use_wmrl
    assert "no usable signal" in advice.verdict and "not enough" not in advice.verdict
    assert json.loads((tmp_path / "advice.json").read_text())["r"] == 0.0


def test_run_pilot_docstring_names_the_advice_wmrl_advise_gives(tmp_path):
    # issue 25, finding 9: run_pilot's docstring pointed to wrapper.loop.advise(), which correlates the
    # raw scores (the pilot's loop does not debias); wmrl advise calibrates out of sample
    from wmrl_envs.core import CostRates
    from wmrl_envs.core.adaptive import AdaptiveAnchorFraction

    doc = run_pilot.__doc__
    assert 'calibrate="crossfit"' in doc and "raw" in doc
    assert "debiaser's current map" not in AdaptiveAnchorFraction.__doc__ and "crossfit" in AdaptiveAnchorFraction.__doc__
    cfg = AdviseConfig(groups=16, group_size=4, env=f"{__name__}:known_env", world_model=f"{__name__}:noisy_wm",
                       policy=f"{__name__}:gaussian_policy", n_boot=0, out_dir=str(tmp_path))
    advice = main_advise(cfg, log=lambda s: None)
    wrapper = run_pilot(KnownEnv(), NoisyWM(), GaussianPolicy(), groups=16, group_size=4, seed=0)
    wrapper.loop.advisor.load_state_dict({**wrapper.loop.advisor.state_dict(), "n_boot": 0})
    documented = wrapper.loop.advisor.advise(CostRates.from_ledger(wrapper.loop.ledger), calibrate="crossfit")
    assert documented.r == pytest.approx(advice.r)
    assert wrapper.loop.advise().r != pytest.approx(advice.r)  # the raw-score advice differs


def test_a_long_pilot_measures_r_without_weighting_anchors():
    """The pilot only measures (it debiases nothing and trains nothing): ρ's denoiser stays off,
    so a pilot longer than ρ's warm-up does not warn that ρ is measured on raw scores."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wrapper = run_pilot(KnownEnv(), NoisyWM(noise=0.75), GaussianPolicy(), groups=48, group_size=4, seed=1)
    assert wrapper.loop.corrector.denoise is False and wrapper.loop.rho == 1.0


def test_pilot_progress_is_shown_when_stderr_is_not_a_terminal(tmp_path, capsys):
    """In a log file or CI (stderr not a TTY) the pilot's progress bar drew nothing: a pilot whose
    groups take minutes looked hung. It now writes plain lines to stderr: the first and the last
    group always, and one at most every ``min_interval_s`` in between."""
    cfg = AdviseConfig(groups=5, group_size=3, env=f"{__name__}:known_env", world_model=f"{__name__}:noisy_wm",
                       policy=f"{__name__}:gaussian_policy", n_boot=20, out_dir=str(tmp_path), min_groups=5)
    main_advise(cfg, log=lambda s: None)
    err = capsys.readouterr().err.splitlines()
    progress = [ln for ln in err if ln.startswith("[advise] pilot group")]
    assert progress[0].startswith("[advise] pilot group 1/5 done") and progress[-1].startswith("[advise] pilot group 5/5 done")
    assert len(progress) <= 5
    from agents.advise import pilot_progress

    with pilot_progress(4, min_interval_s=0.0) as step:  # every group when the interval allows it
        for n in range(1, 5):
            step(n)
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(" done")[0] for ln in lines] == [f"[advise] pilot group {n}/4" for n in range(1, 5)]
    assert all(ln.endswith(" s elapsed)") for ln in lines)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term = Terminal()
    with pilot_progress(4, stream=term, min_interval_s=0.0) as step:  # a terminal: the bar, no lines
        for n in range(1, 5):
            step(n)
    assert "pilot groups (real execution + world model)" in term.getvalue() and "[advise]" not in term.getvalue()


class WaitingEnv(KnownEnv):
    """Each execution waits 10 ms (a remote job) and declares 2 CPU-s (KnownEnv's)."""

    def step(self, action):
        import time

        time.sleep(0.01)
        return super().step(action)


def test_pilot_with_wall_clock_costs_counts_the_wait():
    """Issue 38, item 1: ``wmrl advise --cost-basis wall`` prices an execution by its wall-clock."""
    from wmrl_envs.core import CostRates

    wall = run_pilot(WaitingEnv(), NoisyWM(), GaussianPolicy(), groups=4, group_size=2, seed=0, cost_basis="wall")
    rates = CostRates.from_ledger(wall.loop.ledger)
    assert rates.unit == "wall-clock s" and 0.01 <= rates.execution_s < 1.0
    assert CostRates.from_ledger(wall.loop.ledger, cpu=True).execution_s == pytest.approx(2.0)  # the declared CPU-s
    assert AdviseConfig(cost_basis="wall").cost_basis == "wall"


def test_wmrl_advise_counts_the_world_models_fitting_when_told_it(tmp_path):
    cfg = AdviseConfig(groups=12, group_size=4, env=f"{__name__}:known_env", world_model=f"{__name__}:noisy_wm",
                       policy=f"{__name__}:gaussian_policy", n_boot=50, out_dir=str(tmp_path), groups_per_step=10,
                       world_model_fit_executions=200, real_steps=10)
    lines = []
    advice = main_advise(cfg, log=lines.append)
    saved = json.loads((tmp_path / "advice.json").read_text())["with_fitting"]
    assert saved["share"] == pytest.approx(200 / 400, rel=0.01)  # KnownEnv's generation and update cost nothing
    plain = {c["words"]: c["predicted_speedup"] for c in advice.choices}
    for c in saved["choices"]:
        if c["kind"] != "real":
            assert 1 / c["predicted_speedup"] == pytest.approx(1 / plain[c["words"]] + saved["share"])
    assert any("counting the world model's fitting (200 executions" in line for line in lines)


def test_a_fitting_cost_without_real_steps_is_refused_before_the_pilot(tmp_path):
    with pytest.raises(ValueError, match="--real-steps"):
        main_advise(AdviseConfig(world_model_fit_executions=175, groups_per_step=10, env="nowhere_xyz:f",
                                 out_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="--world-model-fit-executions must be"):
        main_advise(AdviseConfig(world_model_fit_executions=-1, env="nowhere_xyz:f", out_dir=str(tmp_path)))
