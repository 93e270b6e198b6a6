"""AnchoredWorldModelVectorWrapper: the WMRL wrapper over Gymnasium vector envs.

Sub-envs [k*G, (k+1)*G) form lane k; the lane's n-th episodes form one group (round n), routed
as a whole by the loop's AnchorRouter. These tests check real values: routes shared by the
members of a group, exactly one anchor per block of groups, world-model episodes
never reaching the inner step (outcome mode, counted inside the sub-env processes for
AsyncVectorEnv), pairs fed to the debiaser, success withheld in reward mode, ρ in the infos,
and equality with the serial score_group path.
"""

from __future__ import annotations

from collections import defaultdict
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from toy_envs import Reach1D
from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.core import CorrectionConfig
from wmrl_envs.envs.guess import GuessEnv, guess_score
from wmrl_envs.world_models import Trajectory, WorldModelPrediction
from wmrl_envs.world_models.synthetic import SyntheticWorldModel
from wmrl_envs.wrappers import AnchoredWorldModelVectorWrapper, RoutedSubEnv, make_vector_env

torch.set_num_threads(1)

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


class TwoStepGuess(gym.Env):
    """Guess a target in two steps; the score (paid at step 2) is 1 - |a2 - target|.

    Counts its own ``step`` calls (``n_steps``) — inside the sub-env's process.
    """

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Box(0.0, 1.0, (1,), np.float32)
        self.n_steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target = float((options or {}).get("target", self.np_random.random()))
        self.t = 0
        return np.array([self.target], np.float32), {}

    def step(self, action):
        self.n_steps += 1
        self.t += 1
        a = float(np.asarray(action).reshape(-1)[0])
        done = self.t >= 2
        reward = 1.0 - abs(a - self.target) if done else 0.0
        return np.array([self.target], np.float32), reward, done, False, {"score": reward}


def present(d, key, i):
    """Gymnasium's dict-of-arrays convention: ``key`` is set for sub-env ``i``."""
    return key in d and bool(d["_" + key][i])


def two_step_score(ctx, action):
    return 1.0 - abs(float(np.asarray(action).reshape(-1)[0]) - float(np.asarray(ctx).reshape(-1)[0]))


def task_fn(k, n):
    return None, {"target": round((0.13 * k + 0.29 * n) % 1.0, 4)}


def make_outcome(venv, group_size, **kw):
    wm = SyntheticWorldModel(two_step_score, bias=lambda x: x**3, noise_std=0.05, seed=0)
    kw.setdefault("correction", CorrectionConfig(anchor_fraction=0.5, min_pairs=8, refit_every=4, warmup_groups=2))
    env = AnchoredWorldModelVectorWrapper(
        venv, wm, group_size=group_size, groups_per_step=venv.num_envs // group_size,
        task_fn=task_fn, **kw,
    )
    return env, wm


def rollout(env, steps, seed=1):
    """Random actions for ``steps`` vector steps; resets masked sub-envs in DISABLED mode."""
    rng = np.random.default_rng(seed)
    n = env.num_envs
    obs, info = env.reset(seed=0)
    log = [("reset", obs, None, None, None, info)]
    for _ in range(steps):
        actions = rng.random((n, 1)).astype(np.float32)
        obs, rew, term, trunc, info = env.step(actions)
        log.append(("step", obs, rew, term, trunc, info))
        done = term | trunc
        if env.autoreset_mode == AutoresetMode.DISABLED and done.any():
            obs, info = env.reset(options={"reset_mask": done})
            log.append(("reset", obs, None, None, None, info))
    return log


def check_outcome_log(env, log, inner_steps, episode_len):
    """Assertions shared by every autoreset mode / vectorization."""
    n, g = env.num_envs, env.group_size
    routes = defaultdict(set)  # (lane, round) -> routes seen on any member
    stepped_gens = defaultdict(set)
    anchor_steps = np.zeros(n, int)
    wm_steps = np.zeros(n, int)
    n_done_anchor, n_done_wm = np.zeros(n, int), np.zeros(n, int)
    complete = []
    for kind, obs, rew, term, trunc, info in log:
        w = info["wmrl"]
        assert w["_route"].all() and w["_rho"].all() and w["_advantage_weight"].all()
        if kind != "step":
            continue
        started = w["episode_start"]
        for i in range(n):
            key = (int(w["lane"][i]), int(w["round"][i]))
            assert key[0] == i // g and int(w["episode_in_group"][i]) == i % g
            routes[key].add(w["route"][i])
            if started[i]:
                continue  # next-step autoreset: this step reset the sub-env
            stepped_gens[key].add(i)
            if w["route"][i] == "anchor":
                anchor_steps[i] += 1
                assert w["advantage_weight"][i] >= 1.0
            else:
                wm_steps[i] += 1
                assert w["advantage_weight"][i] == 1.0
            if term[i] or trunc[i]:
                assert present(w, "graded", i) and w["graded"][i]
                if w["route"][i] == "anchor":
                    n_done_anchor[i] += 1
                    assert present(w, "real_score", i) and rew[i] == pytest.approx(w["real_score"][i])
                else:
                    n_done_wm[i] += 1
                    assert not present(w, "real_score", i)
                    # the world-model episode is paid the calibrated world-model score
                    assert rew[i] == pytest.approx(w["calibrated_score"][i])
            elif w["route"][i] == "world_model":
                assert rew[i] == 0.0
            if w["group_complete"][i]:
                complete.append((key, w["route"][i]))
    # every member of a group shares its route
    assert routes and all(len(r) == 1 for r in routes.values())
    # world-model episodes never reached the inner step: the env's own counters (in the
    # sub-env processes for AsyncVectorEnv) equal the anchor steps, sub-env by sub-env
    assert inner_steps.tolist() == anchor_steps.tolist()
    assert wm_steps.sum() > 0 and anchor_steps.sum() > 0
    # (only a sub-env's last episode may be unfinished)
    assert (n_done_anchor == anchor_steps // episode_len).all() and (n_done_wm == wm_steps // episode_len).all()
    # routing counts: groups_per_step = number of groups and f = 0.5 -> exactly one anchor
    # among the K groups of the same round (they start together: one block)
    by_gen = defaultdict(list)
    for (k, gen), r in routes.items():
        by_gen[gen].append(next(iter(r)))
    full = [gen for gen, rs in by_gen.items() if len(rs) == env.n_lanes]
    assert full and all(by_gen[gen].count("anchor") == env.n_lanes // 2 for gen in full)
    assert env.loop.router.n_groups_routed == env.loop.n_groups_started == env.n_groups_completed + env.n_groups_open
    # corrections: one close_group per completed group, pairs from every anchor episode
    assert env.loop.corrector.groups_corrected["anchor"] == sum(r == "anchor" for _, r in complete)
    assert env.loop.corrector.groups_corrected["world_model"] == sum(r == "world_model" for _, r in complete)
    assert env.loop.corrector.debiaser.n_seen == g * env.loop.corrector.groups_corrected["anchor"]
    assert env.loop.ledger.count("execution") == anchor_steps.sum()
    # ρ: after the warm-up (2 anchor groups) it leaves 1 and anchors carry it
    assert env.loop.corrector.denoiser.warmed_up
    weights = [float(info["wmrl"]["advantage_weight"][i]) for kind, *_r, info in log if kind == "step"
               for i in range(n) if info["wmrl"]["route"][i] == "anchor"]
    assert max(weights) > 1.0
    return complete


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_outcome_mode_sync_all_autoreset_modes(mode):
    g, k = 2, 2
    venv = make_vector_env(TwoStepGuess, g * k, autoreset_mode=mode, episode_steps=2)
    env, wm = make_outcome(venv, g, episode_steps=2)
    log = rollout(env, 40)
    inner = np.array(venv.get_attr("n_steps"))
    complete = check_outcome_log(env, log, inner, episode_len=2)
    assert len(complete) >= 8
    # the RoutedSubEnv's own counters agree with the env's
    assert list(venv.get_attr("inner_step_calls")) == inner.tolist()
    assert sum(venv.get_attr("skipped_steps")) > 0
    # one batched predict per vector step that stepped a sub-env (all sub-envs, both routes)
    assert env.loop.ledger.count("world_model") == wm.n_calls
    env.close()


def test_outcome_mode_async_counts_inner_steps_in_subprocesses():
    g, k = 2, 2
    venv = make_vector_env(TwoStepGuess, g * k, vectorization="async", autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        env, _ = make_outcome(venv, g, episode_steps=2)
        log = rollout(env, 30)
        inner = np.array(venv.get_attr("n_steps"))  # read from the worker processes
        check_outcome_log(env, log, inner, episode_len=2)
        assert env.n_plan_updates > 0  # routes reached the workers through set_attr
    finally:
        venv.close()


def test_group_members_start_from_the_group_task():
    venv = make_vector_env(GuessEnv, 4, autoreset_mode=AutoresetMode.NEXT_STEP)
    env, _ = make_outcome(venv, 2)
    obs, info = env.reset()
    for _ in range(7):
        w = info["wmrl"]
        for i in range(4):
            expected = task_fn(int(w["lane"][i]), int(w["round"][i]))[1]["target"]
            if w["_episode_start"][i] and (w["episode_start"][i] or _ == 0):
                assert obs[i, 0] == pytest.approx(expected, abs=1e-6)
        obs, _r, _t, _u, info = env.step(np.full((4, 1), 0.5, np.float32))
    env.close()


def test_vector_twin_equals_serial_score_group():
    """Sync + next-step autoreset on one-step episodes reproduces score_group exactly, ρ ≠ 1 included."""
    g, k, gens = 4, 2, 6
    kw = dict(correction=CorrectionConfig(anchor_fraction=0.5, min_pairs=8, refit_every=4, warmup_groups=2), seed=3)

    def wm():
        return SyntheticWorldModel(guess_score, bias=lambda x: x**3, noise_std=0.05, seed=0)

    rng = np.random.default_rng(5)
    actions = rng.random((gens, k * g, 1)).astype(np.float32)
    serial = AnchoredWorldModelWrapper(GuessEnv(), wm(), group_size=g, **kw)
    serial_out = []
    for n in range(gens):
        for kk in range(k):
            out = serial.score_group(list(actions[n, kk * g : (kk + 1) * g]), options=task_fn(kk, n)[1])
            serial_out.append((out.route, [round(r, 9) for r in out.rewards], out.advantage_weight))

    venv = make_vector_env(GuessEnv, k * g, autoreset_mode=AutoresetMode.NEXT_STEP)
    vec = AnchoredWorldModelVectorWrapper(venv, wm(), group_size=g, task_fn=task_fn, **kw)
    vec.reset()
    vec_out = []
    for n in range(gens):
        _o, rew, term, _t, info = vec.step(actions[n])
        assert term.all()
        for kk in range(k):
            sl = slice(kk * g, (kk + 1) * g)
            weights = {float(x) for x in info["wmrl"]["advantage_weight"][sl]}
            assert len(weights) == 1  # one weight per group
            vec_out.append((info["wmrl"]["route"][kk * g], [round(float(r), 9) for r in rew[sl]], weights.pop()))
        vec.step(actions[n])  # next-step autoreset: the reset step
    assert vec_out == serial_out
    # the comparison covers anchor groups weighted by a ρ other than 1 (after the 2-group warm-up)
    anchor_weights = [wt for route, _, wt in serial_out if route == "anchor"]
    assert sum(wt != 1.0 for wt in anchor_weights) >= 2, anchor_weights
    assert vec.loop.corrector.denoiser.state_dict() == serial.loop.corrector.denoiser.state_dict()
    assert vec.loop.rho == serial.loop.rho != 1.0
    assert vec.loop.corrector.debiaser.n_seen == serial.loop.corrector.debiaser.n_seen > 0
    assert vec.loop.corrector.debiaser.n_fits == serial.loop.corrector.debiaser.n_fits > 0
    assert vec.loop.corrector.calibration_error() == serial.loop.corrector.calibration_error()
    assert vec.loop.router.realised_fraction == serial.loop.router.realised_fraction
    assert vec.loop.ledger.count("execution") == serial.loop.ledger.count("execution")
    assert vec.loop.ledger.count("world_model") == serial.loop.ledger.count("world_model")
    vec.close()


# ---------------------------------------------------------------------- reward mode
class ProgressWM:
    """Reward model on whole trajectories: 1 − |x_T − 0.5|; logs its batch sizes."""

    def __init__(self):
        self.batches = []

    def predict(self, contexts, actions):
        assert all(isinstance(t, Trajectory) and t.done for t in actions)
        assert all(len(t.observations) == len(t.actions) + 1 for t in actions)
        self.batches.append(len(actions))
        return [WorldModelPrediction(score=1.0 - abs(float(t.observations[-1][0]) - 0.5)) for t in actions]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_reward_mode_withholds_success_and_pays_world_model(mode):
    g, k = 2, 2
    venv = make_vector_env(partial(Reach1D, max_steps=8), g * k, autoreset_mode=mode)
    wm = ProgressWM()
    env = AnchoredWorldModelVectorWrapper(
        venv, wm, correction=CorrectionConfig(anchor_fraction=0.5, min_pairs=4, refit_every=2, warmup_groups=1), group_size=g, groups_per_step=k, mode="reward",
        task_fn=lambda kk, n: (None, {"start": -0.5 + 0.1 * kk}),
        )
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=0)
    stepped = np.zeros(4, int)
    routes = defaultdict(set)
    ends_per_step, wm_success_seen, anchor_success_seen = [], 0, 0
    wm_returns, anchor_returns = defaultdict(float), defaultdict(float)
    for _ in range(60):
        obs, rew, term, trunc, info = env.step(rng.uniform(0.2, 1.0, (4, 1)).astype(np.float32))
        w = info["wmrl"]
        src = info.get("final_info", info) if mode == AutoresetMode.SAME_STEP else info
        done = term | trunc
        ends_per_step.append(int((done & ~w["episode_start"]).sum()))
        for i in range(4):
            if w["episode_start"][i]:
                continue
            stepped[i] += 1
            key = (i // g, int(w["round"][i]))
            routes[key].add(w["route"][i])
            has_success = present(src if done[i] else info, "success", i)
            if w["route"][i] == "world_model":
                assert not has_success  # withheld, also in final_info
                wm_returns[(i, key)] += rew[i]
                if not done[i]:
                    assert rew[i] == 0.0
                else:
                    assert rew[i] == pytest.approx(w["calibrated_score"][i]) and not present(w, "real_score", i)
            else:
                assert has_success
                anchor_success_seen += 1
                anchor_returns[(i, key)] += rew[i]
                if done[i]:
                    assert anchor_returns[(i, key)] == pytest.approx(w["real_score"][i])
        if mode == AutoresetMode.DISABLED and done.any():
            obs, info = env.reset(options={"reset_mask": done})
    # every sub-env stepped its dynamics on both routes
    assert np.array(venv.get_attr("n_steps")).tolist() == stepped.tolist()
    assert all(len(r) == 1 for r in routes.values())
    assert {next(iter(r)) for r in routes.values()} == {"anchor", "world_model"}
    assert anchor_success_seen > 0 and len(wm_returns) > 0
    # one batched predict per step with finished episodes, covering all of them
    assert wm.batches == [e for e in ends_per_step if e > 0] and max(wm.batches) > 1
    assert env.loop.corrector.debiaser.n_seen == g * env.loop.corrector.groups_corrected["anchor"] > 0
    assert env.loop.ledger.count("execution") == stepped.sum()
    env.close()


# ---------------------------------------------------------------------- resets and errors
def test_full_reset_abandons_the_group_and_requeues_its_route():
    venv = make_vector_env(TwoStepGuess, 4, autoreset_mode=AutoresetMode.NEXT_STEP, episode_steps=2)
    env, _ = make_outcome(venv, 2, episode_steps=2)
    _o, info = env.reset()
    first = info["wmrl"]["route"].tolist()
    env.step(np.full((4, 1), 0.5, np.float32))  # mid-episode
    _o, info = env.reset()
    assert info["wmrl"]["route"].tolist() == first  # unused routes are given back, in order
    assert info["wmrl"]["round"].tolist() == [1, 1, 1, 1]
    assert env.loop.router.n_groups_routed == 2 and env.n_groups_abandoned == 2
    assert env.loop.corrector.groups_corrected == {"anchor": 0, "world_model": 0}


def test_invalid_configurations_raise():
    venv = make_vector_env(GuessEnv, 3)
    with pytest.raises(ValueError, match="multiple of group_size"):
        AnchoredWorldModelVectorWrapper(venv, None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=2)
    plain = SyncVectorEnv([GuessEnv] * 2)
    with pytest.raises(ValueError, match="RoutedSubEnv"):
        AnchoredWorldModelVectorWrapper(plain, None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=2)
    env = AnchoredWorldModelVectorWrapper(make_vector_env(GuessEnv, 2), None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=2)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros((2, 1), np.float32))
    assert isinstance(RoutedSubEnv(GuessEnv()).reset(options={"target": 0.5})[0], np.ndarray)


def test_disabled_mode_requires_masked_reset():
    venv = make_vector_env(GuessEnv, 2, autoreset_mode=AutoresetMode.DISABLED)
    env = AnchoredWorldModelVectorWrapper(venv, None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=2)
    env.reset(seed=0)
    env.step(np.zeros((2, 1), np.float32))
    with pytest.raises(RuntimeError, match="reset_mask"):
        env.step(np.zeros((2, 1), np.float32))


def test_reward_mode_on_plain_async_vector_env():
    """Reward mode needs no RoutedSubEnv (without task_fn); reset(seed=int) seeds by group."""
    from gymnasium.vector import AsyncVectorEnv

    class ConstWM:
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=0.5) for _ in actions]

    venv = AsyncVectorEnv([GuessEnv] * 4, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        env = AnchoredWorldModelVectorWrapper(venv, ConstWM(), correction=CorrectionConfig(anchor_fraction=0.5), group_size=2, mode="reward")
        obs, _ = env.reset(seed=3)
        assert obs[0, 0] == obs[1, 0] and obs[2, 0] == obs[3, 0] and obs[0, 0] != obs[2, 0]
        for _ in range(4):
            obs, rew, term, _t, info = env.step(np.full((4, 1), 0.3, np.float32))
            w = info["wmrl"]
            wm_rows = w["route"] == "world_model"
            assert term.all() and np.allclose(rew[wm_rows], 0.5)
            assert not present(w, "real_score", int(np.flatnonzero(wm_rows)[0]))
        assert env.loop.ledger.count("execution") == 16  # every sub-env stepped (vector step wall-clock)
    finally:
        venv.close()


# ---------------------------------------------------------------- each rollout's own random stream
class NoisyGuess(GuessEnv):
    """Target drawn at reset from ``np_random`` (the task), outcome noise drawn in ``step`` from
    ``np_random`` (score = ``1 - |a - t| + N(0, 0.1²)``)."""

    def step(self, action):
        obs, score, term, trunc, info = super().step(action)
        return obs, score + 0.1 * float(self.np_random.normal()), term, trunc, info


def _lanes_of(rew, g):
    return [list(rew[k * g:(k + 1) * g]) for k in range(len(rew) // g)]


@pytest.mark.parametrize("mode", ["outcome", "reward"])
def test_members_of_a_seeded_lane_share_the_task_not_the_stream(mode):
    """Finding 12, vector wrapper: reset(seed=s) gives lane k the task of seed s + k and each of
    its G members its own outcome-noise stream; an autoreset with task_fn's seed too; the same
    seeds reproduce the same outcomes. Reward mode also on plain sub-envs (no RoutedSubEnv)."""
    g = 4

    def run(task_fn=None, routed=True):
        venv = make_vector_env(NoisyGuess, 2 * g) if routed else SyncVectorEnv([NoisyGuess] * (2 * g))
        env = AnchoredWorldModelVectorWrapper(venv, None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=g, mode=mode, task_fn=task_fn)
        obs, _ = env.reset(seed=3)
        out = [(obs[:, 0].copy(), env.step(np.full((2 * g, 1), 0.5, np.float32))[1])]
        if task_fn is not None:  # next-step autoreset with the round's seed, then a step
            obs = env.step(np.full((2 * g, 1), 0.5, np.float32))[0]
            out.append((obs[:, 0].copy(), env.step(np.full((2 * g, 1), 0.5, np.float32))[1]))
        venv.close()
        return out

    variants = [dict(routed=True), dict(routed=True, task_fn=lambda k, n: (100 + n, None))]
    if mode == "reward":
        variants.append(dict(routed=False))
    for kw in variants:
        first = run(**kw)
        for obs, rew in first:
            for lane_obs, lane_rew in zip(_lanes_of(obs, g), _lanes_of(rew, g)):
                assert len(set(lane_obs)) == 1, kw  # one task per group
                assert len(set(lane_rew)) == g, kw  # G outcome-noise draws
        assert first[0][0][0] != first[0][0][g]  # lanes: seeds 3 and 4, different tasks
        again = run(**kw)
        for (o1, r1), (o2, r2) in zip(first, again):
            assert np.array_equal(o1, o2) and np.array_equal(r1, r2), kw


@pytest.mark.parametrize("seed", [0, 1])
def test_the_first_wave_of_lanes_counts_at_its_prior_cost_so_the_budget_holds(seed):
    """8 reward-mode lanes of 4 rollouts x 4 steps open their groups before any group closed: each
    open group counts at its prior cost (G x the TimeLimit's 4 steps), so the run stops within its
    budget plus one group (before: nothing was known, every lane ran and 128 executions went
    through for a budget of 100)."""
    from benchmarks.execution_budget import NoisyTarget, RandomWM
    from wmrl_envs.core import CorrectionConfig
    from wmrl_envs.core.adaptive import ExecutionBudgetSpent

    g, lanes, turns, budget = 4, 8, 4, 100
    venv = make_vector_env(lambda: gym.wrappers.TimeLimit(NoisyTarget(), turns), g * lanes)
    with pytest.warns(UserWarning, match="experimental"):
        w = AnchoredWorldModelVectorWrapper(
            venv, RandomWM(0), group_size=g, mode="reward", groups_per_step=2, seed=seed,
            task_fn=lambda lane, rnd: (100 * lane + rnd, None),
            correction=CorrectionConfig(anchor_fraction="auto", cost_ratio=0.05, min_pairs=16,
                                        execution_budget=budget, on_budget_spent="stop"))
    rng = np.random.default_rng(seed)
    with pytest.raises(ExecutionBudgetSpent, match="more in flight"):
        w.reset(seed=seed)
        for _ in range(200):
            w.step(rng.uniform(-1, 1, (g * lanes, 1)).astype(np.float32))
    assert w.loop.ledger.count("execution") <= budget + g * turns


def test_abandoned_groups_leave_the_loop_counted_by_cause():
    """Review of issue 37, item 2: the groups the vector wrapper abandons (a sub-env reset mid-episode,
    a full reset mid-group, close()) stayed open in the loop: stats()["groups_open"] kept them, and
    an execution budget counted them in flight for ever. Now they are dropped from the loop (as the
    per-episode wrapper's abandon_group) and counted by cause; their ended episodes leave the count."""
    venv = make_vector_env(TwoStepGuess, 4, autoreset_mode=AutoresetMode.NEXT_STEP, episode_steps=2)
    env, _ = make_outcome(venv, 2, episode_steps=2)
    a = np.full((4, 1), 0.5, np.float32)
    env.reset()
    env.step(a)  # every episode mid-way (2 steps an episode)
    env.reset(options={"reset_mask": np.array([True, False, False, False])})  # lane 0's group is abandoned
    st = env.loop.stats()
    assert st["groups_abandoned"] == {"reset": 1} and env.n_groups_abandoned == 0  # its 2nd member still runs
    assert st["groups_open"] == env.loop.n_groups_started - st["groups_closed"] - 1 == 2  # lane 0's next, lane 1's
    env.step(a)  # lane 1's group closes; lane 0's abandoned one retires
    assert env.n_groups_abandoned == 1 and env.loop.stats()["groups_open"] == env.n_groups_open
    env.step(a)
    env.reset()  # mid-group again: lane 0's rounds 1 (one episode ended) and 2, lane 1's round 1
    st = env.loop.stats()
    assert st["groups_abandoned"] == {"reset": 4} and st["groups_open"] == env.n_groups_open == 2
    assert st["episodes"] == 2  # lane 1's closed group; the abandoned groups' ended episodes left the count
    env.close()
    st = env.loop.stats()
    assert st["groups_open"] == 0 and st["groups_abandoned"] == {"reset": 4, "closed": 2}
