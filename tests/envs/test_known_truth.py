"""KnownTruthEnv (wmrl/KnownTruth-v0), its configurable world model and the within-group correlation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from scipy import stats

import wmrl_envs  # noqa: F401  (registers the ids)
from wmrl_envs.envs.known_truth import (
    WORLD_MODEL_ERRORS,
    BreakingWorldModel,
    KnownTruthEnv,
    KnownTruthWorldModel,
    WorldModelError,
    clipped_normal_mean,
    measured_correlation,
    within_group_correlation,
)
from wmrl_envs.core import CorrectionConfig


def test_check_env_passes_and_id_is_registered():
    env = gym.make("wmrl/KnownTruth-v0", n_tasks=3, n_actions=10)
    check_env(env.unwrapped, skip_render_check=True)
    assert isinstance(env.unwrapped, KnownTruthEnv) and env.unwrapped.n_actions == 10


def test_table_structure_and_declared_cost_in_info():
    env = KnownTruthEnv(n_tasks=4, n_actions=24, execution_cost_s=2.5)
    mu, failing = env.mu, env.failing
    assert failing.sum(axis=1).tolist() == [9] * 4  # round(0.375 * 24)
    assert (mu[failing] == 0).all()
    assert ((mu >= 0.75) & (mu <= 0.95)).sum(axis=1).tolist() == [3] * 4  # round(0.125 * 24) good actions
    task = 2
    env.reset(seed=0, options={"task": task})
    fail_action = int(np.flatnonzero(failing[task])[0])
    _, r, term, trunc, info = env.step(fail_action)
    assert (r, term, trunc, info["failed"], info["execution_cpu_s"]) == (0.0, True, False, True, 2.5)


def test_exact_truth_matches_empirical_mean_of_executions():
    env = KnownTruthEnv(n_tasks=2, n_actions=12, outcome_noise_std=0.3)  # large noise: clipping matters
    rng = np.random.default_rng(0)
    n = 200_000
    for t, a in [(0, 0), (0, 5), (1, 3), (1, 11)]:
        emp = env.sample_outcomes(np.full(n, t), np.full(n, a), rng).mean()
        assert emp == pytest.approx(env.true_score(t, a), abs=3 * 0.3 / np.sqrt(n) + 1e-4)
    # the clipped mean is not the latent mu for a mediocre action near the edge of [0, 1]
    assert clipped_normal_mean(0.05, 0.3) == pytest.approx(np.mean(np.clip(rng.normal(0.05, 0.3, n), 0, 1)), abs=3e-3)
    assert clipped_normal_mean(0.05, 0.3) > 0.12
    # steps give the same distribution as the vectorised sampler
    env.reset(seed=1, options={"task": 1})
    steps = [env.step(3)[1] for _ in range(4000)]
    assert np.mean(steps) == pytest.approx(env.true_score(1, 3), abs=0.02)


def test_expected_score_is_exact_policy_value():
    env = KnownTruthEnv(n_tasks=3, n_actions=6, outcome_noise_std=0.0)
    e = env.expected_table
    probs = np.zeros((3, 6))
    probs[[0, 1, 2], e.argmax(axis=1)] = 1.0
    assert env.expected_score(probs) == pytest.approx(e.max(axis=1).mean())
    assert env.expected_score(np.full(6, 1 / 6)) == pytest.approx(e.mean())
    assert env.expected_score(probs, tasks=[1]) == pytest.approx(e[1].max())
    with pytest.raises(ValueError, match="summing to 1"):
        env.expected_score(np.full(6, 0.5))


def test_zero_error_correlation_is_one_without_outcome_noise_and_less_with_it():
    clean = measured_correlation(KnownTruthEnv(outcome_noise_std=0.0), WorldModelError(), n_groups=128, seed=0)
    assert clean.pearson == pytest.approx(1.0) and clean.spearman == pytest.approx(1.0) and clean.n_used == 128
    noisy = measured_correlation(KnownTruthEnv(outcome_noise_std=0.15), WorldModelError(), n_groups=128, seed=0)
    assert 0.8 < noisy.pearson < 0.99


def test_noise_level_lowers_correlation_monotonically():
    env = KnownTruthEnv(outcome_noise_std=0.0)
    got = [measured_correlation(env, WorldModelError(noise_std=s), n_groups=400, seed=3).pearson
           for s in (0.05, 0.15, 0.3, 0.6)]
    assert got == sorted(got, reverse=True)
    assert got[0] > 0.95 and got[-1] < 0.6


def test_monotone_distortion_keeps_spearman_and_lowers_pearson():
    env = KnownTruthEnv(outcome_noise_std=0.0)
    c = measured_correlation(env, WorldModelError(squash=12.0), n_groups=256, seed=0)
    assert c.spearman == pytest.approx(1.0)
    assert c.pearson < 0.97
    wm = KnownTruthWorldModel(env, WorldModelError(squash=12.0))
    order = np.argsort(env.expected_table[0])
    assert (np.diff(wm.mean_prediction[0][order]) >= -1e-12).all()  # monotone in the truth


def test_blind_spots_predict_high_scores_for_failing_actions():
    env = KnownTruthEnv(n_tasks=4, n_actions=24)
    wm = KnownTruthWorldModel(env, WorldModelError(blind_spot_share=0.9), seed=0)
    failing = env.failing
    assert wm.blind_spots.sum(axis=1).tolist() == [8] * 4  # round(0.9 * 9) per task
    assert not (wm.blind_spots & ~failing).any()
    t, a = np.nonzero(wm.blind_spots)
    assert np.allclose(wm.predict_scores(t, a), 0.9)
    t2, a2 = np.nonzero(failing & ~wm.blind_spots)
    assert np.allclose(wm.predict_scores(t2, a2), 0.0)
    preds = wm.predict([np.int64(t[0])], [np.int64(a[0])])
    assert preds[0].score == pytest.approx(0.9)


def test_per_action_bias_is_fixed_across_calls():
    env = KnownTruthEnv()
    wm = KnownTruthWorldModel(env, WorldModelError(bias_std=0.2), seed=5)
    t, a = np.array([0, 1, 2]), np.array([4, 4, 4])
    first = wm.predict_scores(t, a)
    assert np.array_equal(first, wm.predict_scores(t, a))  # no per-call noise: the offsets stay
    assert 0.1 < wm.offsets.std() < 0.3
    assert wm.n_predictions == 6 and wm.declared_cpu_s_per_prediction == 0.01


def test_breaking_world_model_switches_after_exactly_n_predictions():
    env = KnownTruthEnv(outcome_noise_std=0.0)
    wm = BreakingWorldModel(env, WorldModelError(), WorldModelError(information=0.0), break_after=5)
    t, a = np.zeros(3, dtype=int), np.array([0, 1, 2])
    truth = env.expected_table[0, :3]
    assert np.allclose(wm.predict_scores(t, a), truth) and not wm.broken
    straddle = wm.predict_scores(t, a)  # predictions 4, 5 before, 6 after
    assert np.allclose(straddle[:2], truth[:2]) and straddle[2] == pytest.approx(0.5)
    assert wm.broken and wm.n_predictions == 6
    assert [p.score for p in wm.predict([0, 0], [0, 1])] == pytest.approx([0.5, 0.5])


@pytest.mark.parametrize("kwargs, field", [
    ({"noise_std": -0.1}, "noise_std"),
    ({"information": 1.5}, "information"),
    ({"blind_spot_share": float("nan")}, "blind_spot_share"),
    ({"declared_cpu_s_per_prediction": -1}, "declared_cpu_s_per_prediction"),
    ({"squash": True}, "squash"),
])
def test_bad_world_model_error_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"WorldModelError.{field}"):
        WorldModelError(**kwargs)


@pytest.mark.parametrize("kwargs, field", [
    ({"n_actions": 1}, "n_actions"),
    ({"outcome_noise_std": -1.0}, "outcome_noise_std"),
    ({"execution_cost_s": float("inf")}, "execution_cost_s"),
    ({"failing_share": 0.95}, "failing_share"),
])
def test_bad_env_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"KnownTruthEnv.{field}"):
        KnownTruthEnv(**kwargs)


def test_bad_inputs():
    env = KnownTruthEnv()
    with pytest.raises(ValueError, match="break_after"):
        BreakingWorldModel(env, WorldModelError(), WorldModelError(), break_after=-1)
    with pytest.raises(ValueError, match="declared_cpu_s_per_prediction"):
        BreakingWorldModel(env, WorldModelError(), WorldModelError(declared_cpu_s_per_prediction=1.0), break_after=1)
    with pytest.raises(TypeError, match="KnownTruthEnv"):
        KnownTruthWorldModel(gym.make("wmrl/Guess-v0"))
    with pytest.raises(ValueError, match="group_size"):
        measured_correlation(env, WorldModelError(), group_size=1)
    with pytest.raises(ValueError, match="task"):
        env.reset(options={"task": 99})
    with pytest.raises(ValueError, match="shape"):
        within_group_correlation(np.zeros((2, 3)), np.zeros((3, 2)))


def test_within_group_correlation_skips_constant_groups():
    p = np.array([[0.1, 0.2, 0.3], [0.5, 0.5, 0.5], [0.3, 0.2, 0.1]])
    r = np.array([[0.0, 0.5, 1.0], [0.1, 0.2, 0.3], [0.0, 0.1, 0.3]])
    c = within_group_correlation(p, r)
    assert (c.n_groups, c.n_used) == (3, 2)
    assert c.spearman == pytest.approx(0.0)  # +1 and -1
    assert c.pearson == pytest.approx((1.0 + np.corrcoef(p[2], r[2])[0, 1]) / 2)
    # the vectorised means equal scipy's per-group values
    rng = np.random.default_rng(0)
    p, r = rng.random((50, 8)), rng.random((50, 8))
    r[:, :3] = 0.0  # ties, as failing actions give
    c = within_group_correlation(p, r)
    assert c.pearson == pytest.approx(np.mean([stats.pearsonr(a, b)[0] for a, b in zip(p, r)]))
    assert c.spearman == pytest.approx(np.mean([stats.spearmanr(a, b)[0] for a, b in zip(p, r)]))


def test_presets_cover_the_axes():
    assert {"perfect", "monotone", "mild_noise", "heavy_noise", "bias", "blind_spots", "useless"} <= set(WORLD_MODEL_ERRORS)
    env = KnownTruthEnv()
    useless = measured_correlation(env, WORLD_MODEL_ERRORS["useless"], n_groups=400, seed=1)
    perfect = measured_correlation(env, WORLD_MODEL_ERRORS["perfect"], n_groups=400, seed=1)
    assert abs(useless.pearson) < 0.1 and perfect.pearson > 0.9


@pytest.mark.parametrize("bad", [2.9, np.array([3, 5]), np.array([3]), "1", True, -1, 24, float("nan"), None, 1.5 + 0j])
def test_step_rejects_an_action_that_is_not_an_integer_scalar_in_range(bad):
    env = KnownTruthEnv(n_tasks=2, n_actions=24)
    env.reset(seed=0, options={"task": 0})
    with pytest.raises(ValueError, match=r"action must be an integer in \[0, 24\)"):
        env.step(bad)
    assert env.n_steps == 0  # nothing was executed


@pytest.mark.parametrize("bad", [1.7, "1", np.array([1, 0]), False, 2, -1])
def test_reset_rejects_a_task_that_is_not_an_integer_scalar_in_range(bad):
    env = KnownTruthEnv(n_tasks=2, n_actions=8)
    with pytest.raises(ValueError, match=r"task must be an integer in \[0, 2\)"):
        env.reset(options={"task": bad})


@pytest.mark.parametrize("ok", [3, np.int64(3), np.int32(3), np.array(3), 3.0, np.float64(3.0)])
def test_integer_valued_scalars_are_accepted(ok):
    env = KnownTruthEnv(n_tasks=2, n_actions=8, outcome_noise_std=0.0)
    obs, _ = env.reset(options={"task": np.array(1) if isinstance(ok, np.ndarray) else 1})
    assert int(obs) == 1
    _, r, *_ = env.step(ok)
    assert r == env.true_score(1, 3)
    assert env.true_score(np.int64(1), ok) == env.true_score(1, 3)


def test_world_models_reject_non_integer_contexts_and_actions():
    env = KnownTruthEnv(n_tasks=2, n_actions=8)
    for wm in (KnownTruthWorldModel(env, WorldModelError()),
               BreakingWorldModel(env, WorldModelError(), WorldModelError(), break_after=1)):
        assert len(wm.predict([np.int64(1), 0], [3, np.array(2)])) == 2
        with pytest.raises(ValueError, match="action must be an integer"):
            wm.predict([0], [2.9])
        with pytest.raises(ValueError, match=r"context \(task id\) must be an integer"):
            wm.predict([np.array([1, 0])], [2])


def test_seeded_groups_keep_the_outcome_noise_in_every_api():
    """Finding 12: KnownTruth-v0 advertises outcome noise; a seeded group of G identical actions
    through score_group, the per-episode wrapper and the vector wrapper gets G different outcomes
    of one task (it got the same draw G times), reproducibly, with the env's noise spread."""
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.wrappers import AnchoredWorldModelVectorWrapper, make_vector_env

    g, task = 8, 0
    base = KnownTruthEnv()
    mid = int(np.flatnonzero(~base.failing[task] & (base.mu[task] < 0.6))[0])  # a mediocre action: no clipping
    opts = {"task": task}

    def by_score_group():
        w = AnchoredWorldModelWrapper(gym.make("wmrl/KnownTruth-v0"), None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=g)
        return w.score_group([mid] * g, seed=0, options=opts).rewards

    def by_episodes():
        w = AnchoredWorldModelWrapper(gym.make("wmrl/KnownTruth-v0"), None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=g)
        out = []
        for _ in range(g):
            w.reset(seed=0, options=opts)
            out.append(w.step(mid)[1])
        return out

    def by_vector():
        venv = make_vector_env(lambda: gym.make("wmrl/KnownTruth-v0"), g)
        env = AnchoredWorldModelVectorWrapper(venv, None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=g)
        env.reset(seed=0, options=opts)
        rew = env.step(np.full(g, mid))[1]
        venv.close()
        return [float(x) for x in rew]

    for fn in (by_score_group, by_episodes, by_vector):
        rewards = fn()
        assert len(set(rewards)) == g, fn.__name__
        assert 0.03 < np.std(rewards, ddof=1) < 0.25, fn.__name__  # outcome_noise_std = 0.1
        assert abs(np.mean(rewards) - base.mu[task, mid]) < 0.15, fn.__name__
        assert fn() == rewards, fn.__name__  # same group seed, same G streams


def test_advise_pilot_on_known_truth_reads_the_true_r():
    """Finding 12: ``wmrl advise``'s pilot seeds every group. On KnownTruth with outcome noise 0.3 and
    a perfect world model the within-group r (fresh noise per rollout) is 0.80; a 200-group
    pilot read 0.91 when the G rollouts of a group shared one noise draw."""
    from agents.advise import run_pilot
    from wmrl_envs.core.advisor import pooled_within_group_correlation

    env = KnownTruthEnv(outcome_noise_std=0.3)
    wm = KnownTruthWorldModel(env, WORLD_MODEL_ERRORS["perfect"], seed=0)
    rng = np.random.default_rng(99)
    tasks = np.repeat(rng.integers(env.n_tasks, size=(20000, 1)), 4, axis=1)
    actions = rng.integers(env.n_actions, size=(20000, 4))
    true_r, _ = pooled_within_group_correlation(list(wm.predict_scores(tasks, actions)),
                                                list(env.sample_outcomes(tasks, actions, rng)))
    assert 0.78 < true_r < 0.83

    class Uniform:
        def __init__(self):
            self.rng = np.random.default_rng(5)

        def sample(self, observation, info, group_size):
            return [int(a) for a in self.rng.integers(env.n_actions, size=group_size)]

    wrapper = run_pilot(env, wm, Uniform(), groups=200, group_size=4, seed=0)
    wrapper.loop.advisor.n_boot = 50
    assert wrapper.loop.advise().r == pytest.approx(true_r, abs=0.04)
