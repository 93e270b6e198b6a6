"""Tests of AnchoredWorldModelWrapper on the Guess env with a synthetic world model.

The real score is known (``1 - |a - t|``) and the world model applies a known monotone,
non-affine bias (``x ** 3``) plus Gaussian noise, so the corrections' effect can be checked
against exact numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.envs.guess import GuessEnv, guess_score
from wmrl_envs.world_models.synthetic import SyntheticWorldModel
from wmrl_envs.core import CorrectionConfig


def make(group_size=4, noise=0.03, seed=0, correction=CorrectionConfig(anchor_fraction=0.5), **kw):
    env = GuessEnv()
    wm = SyntheticWorldModel(guess_score, bias=lambda x: x**3, noise_std=noise, seed=seed)
    wrapped = AnchoredWorldModelWrapper(env, wm, group_size=group_size, seed=seed, correction=correction, **kw)
    return env, wm, wrapped


def random_group(rng, g):
    target = float(rng.random())
    actions = [rng.random(1).astype(np.float32) for _ in range(g)]
    return target, actions


def test_calibration_beats_raw_and_rho_rises_with_noise():
    env, wm, w = make(
        correction=CorrectionConfig(anchor_fraction=0.5, min_pairs=100, refit_every=32, warmup_groups=16, half_life=8),
        group_size=8,
        )
    rng = np.random.default_rng(1)
    rhos, warmed = [], []
    for _ in range(120):
        t, acts = random_group(rng, 8)
        out = w.score_group(acts, options={"target": t})
        rhos.append(out.advantage_weight if out.route == "anchor" else w.loop.rho)
        warmed.append(w.loop.corrector.denoiser.warmed_up)
    # rho is exactly 1 before the warm-up of 16 anchor groups completes
    first_warm = warmed.index(True)
    assert all(r == 1.0 for r in rhos[: first_warm + 1])
    assert w.loop.corrector.debiaser.fitted
    # fresh pairs: calibrated error well below raw error
    raw, real = [], []
    for _ in range(400):
        t = float(rng.random()); a = rng.random(1).astype(np.float32)
        raw.append(wm.predict([np.array([t])], [a])[0].score)
        real.append(guess_score(np.array([t]), a))
    raw, real = np.array(raw), np.array(real)
    cal = np.array(w.loop.corrector.calibrate(list(raw)))
    raw_mae, cal_mae = np.mean(np.abs(raw - real)), np.mean(np.abs(cal - real))
    assert raw_mae > 0.15
    assert cal_mae < 0.4 * raw_mae, (raw_mae, cal_mae)
    rho_before = w.loop.rho
    assert 1.0 < rho_before < 2.5  # calibrated to rho_target=2 at warm-up, small noise since
    # degrade the world model mid-run: rho must rise on its own
    wm.noise_std = 0.5
    for _ in range(80):
        t, acts = random_group(rng, 8)
        w.score_group(acts, options={"target": t})
    assert w.loop.rho > rho_before + 0.5
    assert w.loop.rho > 2.0


def test_world_model_groups_never_step_inner_env_and_routes_are_shared():
    env, wm, w = make(correction=CorrectionConfig(anchor_fraction=0.25), group_size=3)
    # the synthetic world model's k-th prediction is clip(0.75³ + N_k(0, 0.03²)): its noise stream
    noise = np.random.default_rng(0).normal(0.0, 0.03, size=3 * 40)
    routes_by_group: dict[int, set] = {}
    anchor_episodes = 0
    for ep in range(3 * 40):
        obs, info = w.reset(options={"target": 0.5} if ep % 3 == 0 else None)
        gid, route = info["wmrl"]["group_id"], info["wmrl"]["route"]
        before, k = env.n_steps, wm.n_calls
        obs, r, term, trunc, info = w.step(np.array([0.25], dtype=np.float32))
        assert term
        assert wm.n_calls == k + 1  # one prediction per episode, on either route
        assert info["wmrl"]["route"] == route and info["wmrl"]["group_id"] == gid
        routes_by_group.setdefault(gid, set()).add(route)
        if route == "world_model":
            assert env.n_steps == before  # inner step never called
            assert not w.loop.corrector.debiaser.fitted  # 30 anchor pairs < min_pairs 200: identity map
            assert r == pytest.approx(float(np.clip(0.75**3 + noise[k], 0.0, 1.0)), abs=1e-12)  # the raw WM score
            assert info["wmrl"]["raw_score"] == pytest.approx(r, abs=1e-12)
            assert info["wmrl"]["real_score"] is None
        else:
            anchor_episodes += 1
            assert env.n_steps == before + 1
            assert r == pytest.approx(0.75)
            assert info["wmrl"]["real_score"] == pytest.approx(0.75)
    assert len(routes_by_group) == 40
    assert all(len(v) == 1 for v in routes_by_group.values())  # whole groups share their route
    assert env.n_steps == anchor_episodes == w.loop.ledger.count("execution")
    # groups_per_step defaults to ceil(1/f) = 4 -> exactly one anchor per block of 4 groups
    assert w.loop.router.realised_fraction == pytest.approx(0.25)


def test_realised_fraction_with_steps_of_groups():
    _, _, w = make(correction=CorrectionConfig(anchor_fraction=0.1), group_size=2, groups_per_step=8)
    rng = np.random.default_rng(0)
    anchors_per_step = []
    for step in range(150):
        routes = []
        for _ in range(8):
            t, acts = random_group(rng, 2)
            routes.append(w.score_group(acts, options={"target": t}).route)
        anchors_per_step.append(routes.count("anchor"))
    assert min(anchors_per_step) >= 1
    # 0.1 * 8 = 0.8 < 1 so the minimum of one per step dominates: realised 1/8
    assert w.loop.router.realised_fraction == pytest.approx(1 / 8)
    _, _, w2 = make(correction=CorrectionConfig(anchor_fraction=0.1), group_size=2, groups_per_step=40)
    for _ in range(40 * 30):
        t, acts = random_group(rng, 2)
        w2.score_group(acts, options={"target": t})
    assert w2.loop.router.realised_fraction == pytest.approx(0.1, abs=0.015)


def test_group_reset_arguments_are_reused_and_other_ones_start_a_new_group():
    _, _, w = make(group_size=3)
    w.reset(seed=1, options={"target": 0.2})
    w.step(np.array([0.1], dtype=np.float32))
    obs, info = w.reset()  # omitted -> the group's arguments are reused
    assert obs[0] == pytest.approx(0.2) and info["wmrl"]["episode_in_group"] == 1
    w.step(np.array([0.1], dtype=np.float32))
    with pytest.warns(UserWarning, match="abandoned after 2 of its 3 episodes"):
        obs, info = w.reset(options={"target": 0.9})  # other arguments mid-group: a new group
    assert obs[0] == pytest.approx(0.9) and (info["wmrl"]["group_id"], info["wmrl"]["episode_in_group"]) == (1, 0)


def test_reset_before_episode_end_abandons_it_and_step_without_episode_raises():
    """Resetting before an episode ends abandons it (the reset docstring's contract, as in
    Gymnasium): it neither counts toward its group nor costs a prediction or an execution."""
    env, wm, w = make(correction=CorrectionConfig(anchor_fraction=1.0), group_size=2)  # every group is an anchor group
    act = np.array([0.1], dtype=np.float32)
    with pytest.raises(RuntimeError, match="call reset"):
        w.step(act)  # no episode yet
    _, info = w.reset(options={"target": 0.9})
    assert (info["wmrl"]["group_id"], info["wmrl"]["episode_in_group"], w.loop.n_episodes) == (0, 0, 1)
    # the group's first episode is abandoned: the group restarts, with the new arguments
    obs, info = w.reset(options={"target": 0.3})
    assert (info["wmrl"]["group_id"], info["wmrl"]["episode_in_group"], w.loop.n_episodes) == (0, 0, 1)
    assert obs[0] == pytest.approx(0.3) and (env.n_steps, wm.n_calls) == (0, 0)
    _, r, term, _, _ = w.step(act)
    assert term and r == pytest.approx(0.8) and (env.n_steps, wm.n_calls) == (1, 1)
    with pytest.raises(RuntimeError, match="call reset"):
        w.step(act)  # after the episode ended
    # the second episode is abandoned: still episode 1 of group 0, same task
    _, info = w.reset()
    assert (info["wmrl"]["group_id"], info["wmrl"]["episode_in_group"], w.loop.n_episodes) == (0, 1, 2)
    obs, info = w.reset()
    assert (info["wmrl"]["group_id"], info["wmrl"]["episode_in_group"], w.loop.n_episodes) == (0, 1, 2)
    assert obs[0] == pytest.approx(0.3)
    assert w.loop.corrector.debiaser.n_seen == 0  # the group is not complete: nothing corrected yet
    _, r, term, _, _ = w.step(np.array([0.5], dtype=np.float32))
    assert term and r == pytest.approx(0.8)
    # exactly two completed episodes, two executions, two predictions, two anchor pairs
    assert (env.n_steps, wm.n_calls, w.loop.corrector.debiaser.n_seen) == (2, 2, 2)
    _, info = w.reset()
    assert (info["wmrl"]["group_id"], info["wmrl"]["episode_in_group"]) == (1, 0)  # a new group


def test_reset_with_other_arguments_abandons_the_running_episode_and_its_group():
    env, wm, w = make(correction=CorrectionConfig(anchor_fraction=1.0), group_size=2)
    w.reset(options={"target": 0.3})
    w.step(np.array([0.1], dtype=np.float32))
    w.reset()  # episode 1 of group 0 is running
    with pytest.warns(UserWarning, match="group 0 was abandoned after 1 of its 2 episodes"):
        w.reset(options={"target": 0.5})  # a new task: group 0 is dropped, group 1 starts
    assert w.loop.n_episodes == 1 and w.n_groups_abandoned == 1
    w.step(np.array([0.5], dtype=np.float32))
    w.reset()
    w.step(np.array([0.5], dtype=np.float32))
    # only group 1 completed and was credited
    assert w.loop.corrector.groups_corrected["anchor"] == 1 and w.loop.corrector.debiaser.n_seen == 2
    assert w.last_group.group_id == 1 and w.last_group.real_scores == pytest.approx([1.0, 1.0])


def test_state_roundtrip_continues_identically(tmp_path):
    def run(w, wm, rng, n):
        out = []
        for _ in range(n):
            t, acts = random_group(rng, 4)
            g = w.score_group(acts, options={"target": t})
            out.append((g.route, g.rewards, g.advantage_weight))
        return out

    kw = dict(group_size=4, correction=CorrectionConfig(anchor_fraction=0.3, min_pairs=20, refit_every=8,
                                                        warmup_groups=3, half_life=4))
    _, wm_a, a = make(noise=0.1, **kw)
    rng = np.random.default_rng(3)
    run(a, wm_a, rng, 30)
    a.save(tmp_path / "wmrl_state.json")
    wm_state = wm_a.state_dict()
    rng_state = rng.bit_generator.state
    cont_a = run(a, wm_a, rng, 40)
    # a fresh process: new objects, load the saved state, continue
    _, wm_b, b = make(noise=0.1, **kw)
    b.load(tmp_path / "wmrl_state.json")
    wm_b.load_state_dict(wm_state)
    rng_b = np.random.default_rng(); rng_b.bit_generator.state = rng_state
    cont_b = run(b, wm_b, rng_b, 40)
    assert cont_a == cont_b
    assert a.loop.corrector.stats() == b.loop.corrector.stats()
    assert a.loop.ledger.count("execution") == b.loop.ledger.count("execution")


def test_training_flag_freezes_corrections():
    _, _, w = make(correction=CorrectionConfig(anchor_fraction=1.0))
    w.training = False
    w.score_group([np.array([0.1], dtype=np.float32)] * 3, options={"target": 0.5})
    assert w.loop.corrector.debiaser.n_pairs == 0 and w.loop.corrector.denoiser.n_scored_groups == 0
    w.training = True
    w.score_group([np.array([0.1], dtype=np.float32), np.array([0.9], dtype=np.float32)], options={"target": 0.5})
    assert w.loop.corrector.debiaser.n_pairs == 2


def test_ungraded_world_model_rows_are_none_not_zero():
    env = GuessEnv()
    wm = SyntheticWorldModel(guess_score, ungraded_prob=1.0)
    w = AnchoredWorldModelWrapper(env, wm, correction=CorrectionConfig(anchor_fraction=0.0), group_size=2)
    out = w.score_group([np.array([0.5], dtype=np.float32)] * 2, options={"target": 0.5})
    assert out.route == "world_model" and out.rewards == [None, None]
    obs, info = w.reset(options={"target": 0.5})
    _, r, _, _, info = w.step(np.array([0.5], dtype=np.float32))
    assert r == 0.0 and info["wmrl"]["graded"] is False


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"correction": CorrectionConfig(anchor_fraction=0.1), "world_model": None}, "world_model=None"),
        ({"group_size": 0}, "group_size"),
        ({"mode": "rewards"}, "mode"),
        ({"episode_score": "mean"}, "episode_score"),
        ({"world_model": object()}, "predict"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = {"world_model": SyntheticWorldModel(guess_score), "correction": CorrectionConfig(anchor_fraction=0.5),
            "group_size": 2}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        AnchoredWorldModelWrapper(GuessEnv(), **args)


def test_real_only_without_world_model():
    env = GuessEnv()
    w = AnchoredWorldModelWrapper(env, None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=2)
    out = w.score_group([np.array([0.5], dtype=np.float32)] * 2, options={"target": 0.25})
    assert out.route == "anchor" and out.rewards == [0.75, 0.75] and env.n_steps == 2
    assert w.loop.ledger.count("world_model") == 0 and w.loop.ledger.count("execution") == 2


@pytest.mark.parametrize("group_size,eval_route", [(2, "anchor"), (3, "anchor"), (3, "world_model")])
def test_check_env_on_wrapped_in_evaluation_mode(group_size, eval_route):
    check_env(GuessEnv())
    _, _, w = make(correction=CorrectionConfig(anchor_fraction=0.5), group_size=group_size, noise=0.0, eval_route=eval_route)
    w.training = False  # frozen: deterministic, as check_env requires
    check_env(w, skip_render_check=True)
    assert w.loop.corrector.debiaser.n_pairs == 0 and w.loop.n_groups_started == 0


def test_evaluation_mode_then_training_resumes_groups():
    env, _, w = make(correction=CorrectionConfig(anchor_fraction=0.5), group_size=2, eval_route="anchor")
    w.training = False
    obs, info = w.reset(options={"target": 0.5})
    assert info["wmrl"]["route"] == "anchor" and info["wmrl"]["group_id"] is None
    _, r, *_ , info = w.step(np.array([0.5], dtype=np.float32))
    assert r == pytest.approx(1.0) and info["wmrl"]["real_score"] == pytest.approx(1.0)
    assert info["wmrl"]["raw_score"] is None  # eval pays only for execution by default
    w.training = True
    _, info = w.reset(options={"target": 0.5})
    assert info["wmrl"]["group_id"] == 0


def test_plan_step_caps_anchors_by_free_slots():
    _, _, w = make(correction=CorrectionConfig(anchor_fraction=1.0), group_size=2, groups_per_step=4)
    assert w.plan_step(4, free_slots=1).count("anchor") == 1
    rng = np.random.default_rng(0)
    routes = [w.score_group(random_group(rng, 2)[1], options={"target": 0.5}).route for _ in range(4)]
    assert routes.count("anchor") == 1
    assert w.loop.router.realised_fraction == pytest.approx(0.25)


def test_world_model_contract_errors_consume_nothing():
    class Floats:
        def predict(self, contexts, actions):
            return [0.5 for _ in actions]

    class Short:
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=0.5)]

    from wmrl_envs.world_models.base import WorldModelPrediction

    for wm, exc, match in ((Floats(), TypeError, "WorldModelPrediction"), (Short(), RuntimeError, "one per action")):
        w = AnchoredWorldModelWrapper(GuessEnv(), wm, correction=CorrectionConfig(anchor_fraction=0.5), group_size=2)
        with pytest.raises(exc, match=match):
            w.score_group([np.array([0.5], dtype=np.float32)] * 2, options={"target": 0.5})
        assert w.loop.n_groups_started == 0 and w.loop.router.n_groups_routed == 0 and w.loop.ledger.count("world_model") == 0


@pytest.mark.parametrize("fraction", [float("nan"), -0.5, "0.1"])
def test_bad_anchor_fraction(fraction):
    with pytest.raises(ValueError, match="anchor_fraction"):
        AnchoredWorldModelWrapper(GuessEnv(), SyntheticWorldModel(guess_score), correction=CorrectionConfig(anchor_fraction=fraction))


def test_parallel_anchor_execution_matches_sequential():
    wm = SyntheticWorldModel(guess_score)
    seq = AnchoredWorldModelWrapper(GuessEnv(), wm, correction=CorrectionConfig(anchor_fraction=1.0), group_size=6)
    extra = [GuessEnv()]
    par = AnchoredWorldModelWrapper(GuessEnv(), wm, correction=CorrectionConfig(anchor_fraction=1.0), group_size=6,
                                    execution_envs=extra)
    acts = [np.array([x], dtype=np.float32) for x in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)]
    a = seq.score_group(acts, options={"target": 0.5})
    b = par.score_group(acts, options={"target": 0.5})
    assert a.rewards == b.rewards == pytest.approx([0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    assert extra[0].n_steps == 3 and par.env.unwrapped.n_steps == 3
    assert par.loop.ledger.count("execution") == 6


# ---------------------------------------------------------------- each rollout's own random stream
class NoisyTaskEnv(GuessEnv):
    """A third-party-style env: the task (target) is drawn at reset from ``np_random``, the outcome
    noise in ``step`` from ``np_random`` too (score = ``1 - |a - t| + N(0, 0.1²)``)."""

    def step(self, action):
        obs, score, term, trunc, info = super().step(action)
        noisy = score + 0.1 * float(self.np_random.normal())
        return obs, noisy, term, trunc, {**info, "score": noisy}


def _noisy_wrapper(**kw):
    from wmrl_envs.world_models import WorldModelPrediction

    class Echo:
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=float(np.asarray(a).reshape(-1)[0])) for a in actions]

    return AnchoredWorldModelWrapper(NoisyTaskEnv(), Echo(), correction=CorrectionConfig(anchor_fraction=1.0), group_size=4, **kw)


@pytest.mark.parametrize("how", ["seed", "begin_group", "execution_envs"])
def test_score_group_gives_each_rollout_its_own_stream_of_a_seeded_group(how):
    """Finding 12: identical actions of one seeded group share the task but not the outcome noise;
    the same group seed reproduces the same G outcomes (whichever env executes a rollout)."""
    actions = [np.array([0.5], np.float32)] * 4

    def run():
        w = _noisy_wrapper(execution_envs=[NoisyTaskEnv()] if how == "execution_envs" else ())
        if how == "begin_group":
            w.begin_group(seed=11)
            out = w.score_group(actions)
        else:
            out = w.score_group(actions, seed=11)
        return out

    a, b = run(), run()
    targets = {float(o[0]) for o in a.observations}
    assert len(targets) == 1  # one task: the group's seed drew the same target for every rollout
    assert len(set(a.rewards)) == 4  # four outcome-noise draws, not one draw copied four times
    assert np.std(a.rewards) > 0.02
    assert a.rewards == b.rewards  # reproducible from the group's seed
    ref = _noisy_wrapper().score_group(actions, seed=11)  # streams are the rollout's, not the env's
    assert a.rewards == ref.rewards


def test_per_episode_groups_give_each_episode_its_own_stream():
    """Finding 12, per-episode API: the G episodes of a group reset with one seed get one task and
    G streams; the next group with the same seed repeats them."""
    w = _noisy_wrapper()
    obs0, rewards = [], []
    for _ in range(8):  # two groups, both seeded 5
        obs, _ = w.reset(seed=5)
        obs0.append(float(obs[0]))
        rewards.append(w.step(np.array([0.5], np.float32))[1])
    assert len(set(obs0)) == 1
    assert len(set(rewards[:4])) == 4
    assert rewards[:4] == rewards[4:]
    # evaluation (no groups): a seeded reset is plain Gymnasium, equal seeds give equal results
    w.training = False
    ev = []
    for _ in range(2):
        w.reset(seed=5)
        ev.append(w.step(np.array([0.5], np.float32))[1])
    assert ev[0] == ev[1]


class _StepScoreEnv:
    """One step; the reward is an improvement (0.5), the step's own score is in info["step_score"]."""

    def __new__(cls, step_score=0.75):
        import gymnasium as gym

        class Env(gym.Env):
            observation_space = gym.spaces.Discrete(2)
            action_space = gym.spaces.Discrete(2)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                return 0, {}

            def step(self, action):
                return 1, 0.5, True, False, {"step_score": step_score}

        return Env()


class _ConstWM:
    def predict(self, contexts, actions):
        from wmrl_envs.world_models import WorldModelPrediction

        return [WorldModelPrediction(score=0.1) for _ in actions]


@pytest.mark.parametrize("step_score, real, cause", [(0.75, 0.75, None), (float("nan"), None, "execution_ungraded")])
def test_score_group_and_the_ray_worker_score_a_step_by_its_step_score_like_the_per_episode_path(step_score, real, cause):
    """Issue 25 leftover: every path takes info["step_score"] as the real score where the env gives one
    (score_group and the Ray pool used the reward, 0.5, while the per-episode path used 0.75)."""
    w = AnchoredWorldModelWrapper(_StepScoreEnv(step_score), _ConstWM(), correction=CorrectionConfig(anchor_fraction=1.0), group_size=2)
    out = w.score_group([0, 1], seed=0, route="anchor")
    assert out.correction.real_scores == [real, real]
    assert [i["wmrl"]["ungraded_cause"] for i in out.infos] == [cause, cause]
    ep = AnchoredWorldModelWrapper(_StepScoreEnv(step_score), _ConstWM(), correction=CorrectionConfig(anchor_fraction=1.0), group_size=2)
    ep.reset(seed=0)
    *_, info = ep.step(0)
    assert info["wmrl"]["real_score"] == real

    from wmrl_envs.distributed.ray_pool import ExecutionWorker

    res = ExecutionWorker(lambda: _StepScoreEnv(step_score), 0).execute(1, 0, None)
    assert res["reward"] == real and res["cause"] == cause
