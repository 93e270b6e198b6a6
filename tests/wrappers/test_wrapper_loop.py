"""The wrappers on their CorrectionLoop: one loop shared by several wrappers, begin_group (one
inner-env reset per group), ``correction=`` / ``loop=`` arguments, the vector twin on a loop."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.core import CorrectionConfig, CorrectionLoop
from wmrl_envs.envs.guess import GuessEnv, guess_score
from wmrl_envs.world_models.synthetic import SyntheticWorldModel
from wmrl_envs.wrappers import AnchoredWorldModelVectorWrapper, make_vector_env

G = 4
CFG = CorrectionConfig(anchor_fraction=0.5, min_pairs=8, refit_every=4, warmup_groups=2)


class CountingGuess(GuessEnv):
    """GuessEnv that counts its resets."""

    def __init__(self):
        super().__init__()
        self.n_resets = 0

    def reset(self, *, seed=None, options=None):
        self.n_resets += 1
        return super().reset(seed=seed, options=options)


def wm(seed=0):
    return SyntheticWorldModel(guess_score, bias=lambda x: x**3, noise_std=0.05, seed=seed)


def data(n, seed=7):
    rng = np.random.default_rng(seed)
    return [(float(rng.random()), [rng.random(1).astype(np.float32) for _ in range(G)]) for _ in range(n)]


def summary(rollouts):
    return [(r.group_id, r.route, r.rewards, r.advantage_weight, r.correction.calibrated_scores) for r in rollouts]


def test_one_loop_shared_by_two_wrappers_adds_up_like_one_wrapper():
    groups = data(12)
    single = AnchoredWorldModelWrapper(GuessEnv(), wm(), group_size=G, correction=CFG, seed=3)
    expected = [single.score_group(acts, options={"target": t}) for t, acts in groups]

    loop = CorrectionLoop(CFG, world_model=wm(), seed=3)
    a = AnchoredWorldModelWrapper(GuessEnv(), None, group_size=G, loop=loop)
    b = AnchoredWorldModelWrapper(GuessEnv(), loop.world_model, group_size=G, loop=loop)
    got = [(a if k % 2 == 0 else b).score_group(acts, options={"target": t}) for k, (t, acts) in enumerate(groups)]
    assert summary(got) == summary(expected)
    assert a.loop.router is b.loop.router is loop.router and a.loop.corrector is b.loop.corrector and a.loop.ledger is b.loop.ledger
    assert a.loop.n_groups_started == b.loop.n_groups_started == loop.n_groups_started == 12
    assert a.loop.n_episodes == loop.n_episodes == 12 * G
    n_anchor = sum(r.route == "anchor" for r in got)
    assert loop.corrector.debiaser.n_seen == n_anchor * G == single.loop.corrector.debiaser.n_seen
    assert loop.ledger.count("execution") == n_anchor * G and loop.ledger.count("world_model") == 12 * G
    assert a.loop.rho == b.loop.rho == single.loop.rho
    assert a.state_dict() == b.state_dict() == {**loop.state_dict(), "group_size": G}


@pytest.mark.parametrize("vector", [False, True])
def test_loose_correction_keywords_raise_with_their_correction_config_spelling(vector):
    """The correction settings come one way (issue 26, item 3): a former keyword argument is a
    TypeError whose message is the CorrectionConfig (or CorrectionLoop) spelling to write."""
    make = ((lambda **kw: AnchoredWorldModelVectorWrapper(make_vector_env(GuessEnv, 2), wm(), group_size=2, **kw))
            if vector else (lambda **kw: AnchoredWorldModelWrapper(GuessEnv(), wm(), group_size=2, **kw)))
    with pytest.raises(TypeError, match=r"anchor_fraction=0\.1 -> correction=CorrectionConfig\(anchor_fraction=0\.1\)"):
        make(anchor_fraction=0.1)
    with pytest.raises(TypeError, match=r"min_anchor_groups=0 -> correction=CorrectionConfig\(min_anchor_groups=0\)"):
        make(min_anchor_groups=0)
    with pytest.raises(TypeError, match=r"debiaser_kwargs=.* -> correction=CorrectionConfig\(\*\*\{'min_pairs': 2\}\)"):
        make(debiaser_kwargs={"min_pairs": 2})
    with pytest.raises(TypeError, match=r"denoiser_kwargs=.*rho_mode"):
        make(denoiser_kwargs={"mode": "parameter_free"})
    with pytest.raises(TypeError, match=r"corrector=.* -> loop=CorrectionLoop\("):
        make(corrector=CFG.build_corrector())
    with pytest.raises(TypeError, match="group_sise: not an argument"):
        make(group_sise=2)
    # every CorrectionConfig field passed to the wrapper gets its spelling, a near-miss a suggestion
    for field, value in (("min_pairs", 8), ("warmup_groups", 2), ("execution_budget", 100), ("anchor_window", 10)):
        with pytest.raises(TypeError, match=rf"{field}={value} -> correction=CorrectionConfig\({field}={value}\)"):
            make(**{field: value})
    with pytest.raises(TypeError, match=r"unexpected keyword arguments:\n  anchor_fracton: not an argument of "
                                        r"\w+ \(did you mean anchor_fraction\?\)"):
        make(anchor_fracton=0.1)
    with pytest.raises(TypeError, match="correction must be a CorrectionConfig"):
        make(correction={"anchor_fraction": 0.1})
    # the loop's state is read on the loop: the views the wrappers once forwarded say so
    w = make(correction=CFG)
    assert w.loop.rho == 1.0 and w.training is True
    with pytest.raises(AttributeError, match=r"wrapper\.loop\.router"):
        w.router  # noqa: B018
    with pytest.raises(AttributeError, match=r'wrapper\.loop\.ledger\.count\("execution"\)'):
        w.inner_step_calls  # noqa: B018
    # the spelling it gives builds the same wrapper: equal groups score alike
    groups = data(8)
    by_config = AnchoredWorldModelWrapper(GuessEnv(), wm(), group_size=G, seed=1, correction=CFG)
    same = AnchoredWorldModelWrapper(GuessEnv(), wm(), group_size=G, seed=1, correction=CorrectionConfig(
        anchor_fraction=0.5, min_pairs=8, refit_every=4, warmup_groups=2))
    assert summary([same.score_group(x, options={"target": t}) for t, x in groups]) == summary(
        [by_config.score_group(x, options={"target": t}) for t, x in groups])


def test_wrapper_rejects_conflicting_correction_arguments():
    loop = CorrectionLoop(CFG, world_model=wm())
    with pytest.raises(TypeError, match="debiaser_kwargs"):
        AnchoredWorldModelWrapper(GuessEnv(), wm(), correction=CFG, debiaser_kwargs={"min_pairs": 2})
    with pytest.raises(ValueError, match="pass loop= alone"):
        AnchoredWorldModelWrapper(GuessEnv(), None, loop=loop, correction=CFG)
    with pytest.raises(ValueError, match="world_model differs"):
        AnchoredWorldModelWrapper(GuessEnv(), wm(), loop=loop)


@pytest.mark.parametrize("route", ["anchor", "world_model"])
def test_begin_group_resets_the_inner_env_once_per_group(route):
    acts = [np.array([x], np.float32) for x in (0.1, 0.4, 0.6, 0.9)]
    plain_env = CountingGuess()
    plain = AnchoredWorldModelWrapper(plain_env, wm(), group_size=G, correction=CFG)
    ref = plain.score_group(acts, options={"target": 0.3}, route=route)

    env = CountingGuess()
    w = AnchoredWorldModelWrapper(env, wm(), group_size=G, correction=CFG)
    obs, info = w.begin_group(options={"target": 0.3})
    assert env.n_resets == 1 and float(obs[0]) == pytest.approx(0.3) and isinstance(info, dict)
    out = w.score_group(acts, route=route)
    # the group's task context came from begin_group: rollout 0 steps the env as it left it
    assert env.n_resets == (G if route == "anchor" else 1)
    assert plain_env.n_resets == env.n_resets  # score_group with options resets once itself
    assert summary([out]) == summary([ref])
    if route == "anchor":
        assert out.rewards == pytest.approx([1 - abs(x - 0.3) for x in (0.1, 0.4, 0.6, 0.9)], abs=1e-6)
    # the context is used once: the next score_group with arguments resets again
    w.score_group(acts, options={"target": 0.8}, route=route)
    assert env.n_resets == (2 * G if route == "anchor" else 2)


@pytest.mark.parametrize("route", ["anchor", "world_model"])
def test_groups_begun_before_scoring_reset_only_to_execute(route):
    """A GRPO step begins every group (its prompt) before scoring any: with context=, a
    world-model group never resets the inner env, an anchor group resets once for rollout 0."""
    acts = [np.array([x], np.float32) for x in (0.1, 0.4, 0.6, 0.9)]
    targets = (0.3, 0.8)
    plain = AnchoredWorldModelWrapper(CountingGuess(), wm(), group_size=G, correction=CFG)
    refs = [plain.score_group(acts, options={"target": t}, route=route) for t in targets]

    env = CountingGuess()
    w = AnchoredWorldModelWrapper(env, wm(), group_size=G, correction=CFG)
    contexts = [w.begin_group(options={"target": t})[0] for t in targets]
    assert env.n_resets == 2
    outs = [w.score_group(acts, options={"target": t}, context=c, route=route) for t, c in zip(targets, contexts)]
    assert env.n_resets == 2 + (2 * G if route == "anchor" else 0)
    assert summary(outs) == summary(refs)
    if route == "anchor":  # each group executed on its own task, not on the last one begun
        for t, out in zip(targets, outs):
            assert out.rewards == pytest.approx([1 - abs(x - t) for x in (0.1, 0.4, 0.6, 0.9)], abs=1e-6)


def test_begin_group_is_dropped_by_explicit_arguments_and_by_reset():
    env = CountingGuess()
    w = AnchoredWorldModelWrapper(env, wm(), group_size=2, correction=CFG)
    acts = [np.array([0.5], np.float32)] * 2
    w.begin_group(options={"target": 0.1})
    out = w.score_group(acts, options={"target": 0.9}, route="anchor")
    assert out.rewards == pytest.approx([0.6, 0.6], abs=1e-6) and env.n_resets == 3
    w.begin_group(options={"target": 0.1})
    w.reset(options={"target": 0.9})
    with pytest.raises(RuntimeError, match="per-episode group is in progress"):
        w.begin_group(options={"target": 0.1})
    with pytest.raises(ValueError, match="outcome mode"):
        AnchoredWorldModelWrapper(GuessEnv(), wm(), mode="reward", correction=CFG).begin_group()


def test_vector_wrapper_on_a_shared_loop_and_record_constructor_args():
    loop = CorrectionLoop(CFG, world_model=wm(), seed=2)
    venv = make_vector_env(GuessEnv, 2 * G)
    vec = AnchoredWorldModelVectorWrapper(venv, None, group_size=G, loop=loop)
    per_episode = AnchoredWorldModelWrapper(GuessEnv(), None, group_size=G, loop=loop)
    assert isinstance(vec, gym.utils.RecordConstructorArgs) and vec.n_lanes == 2
    vec.reset(seed=0)
    assert loop.n_groups_started == 2  # one group per lane
    out = per_episode.score_group([np.array([0.5], np.float32)] * G, options={"target": 0.5})
    assert out.group_id == 2
    obs, rew, term, trunc, info = vec.step(np.full((2 * G, 1), 0.5, np.float32))
    assert info["wmrl"]["lane"].tolist() == [0] * G + [1] * G and info["wmrl"]["round"].tolist() == [0] * (2 * G)
    assert info["wmrl"]["group_id"].tolist() == [0] * G + [1] * G
    assert vec.n_groups_completed == 2 and loop.n_groups_closed == 3
    assert loop.n_groups_started == 5 and vec.n_groups_open == 2  # the next round is routed at once
    assert loop.n_episodes == 2 * G + G


def test_wrapper_set_anchor_fraction_takes_effect_at_the_next_planned_step():
    w = AnchoredWorldModelWrapper(GuessEnv(), wm(), group_size=2, correction=CorrectionConfig(anchor_fraction=0.0),
                                  groups_per_step=3)
    acts = [np.array([0.5], np.float32)] * 2
    assert w.plan_step() == ["world_model"] * 3
    w.loop.set_anchor_fraction(1.0)
    routes = [w.score_group(acts, options={"target": 0.5}).route for _ in range(3)]
    assert routes == ["world_model"] * 3  # the step planned before the change keeps its routes
    assert w.plan_step() == ["anchor"] * 3
    assert [w.score_group(acts, options={"target": 0.5}).route for _ in range(3)] == ["anchor"] * 3
    assert w.loop.ledger.count("execution") == w.loop.ledger.count("execution") == 6


def test_context_without_its_reset_arguments_is_refused_not_executed_on_another_task():
    """score_group(context=...) without seed/options used to execute an anchor group on a task
    drawn by a bare reset, pairing the world model's scores of one task with real scores of another."""
    env = CountingGuess()
    w = AnchoredWorldModelWrapper(env, wm(), group_size=2, correction=CFG)
    acts = [np.array([0.5], np.float32)] * 2
    ctx_a, _ = w.begin_group(options={"target": 0.1})
    ctx_b, _ = w.begin_group(options={"target": 0.9})
    with pytest.raises(ValueError, match="seed=/options= that begin_group"):
        w.score_group(acts, context=ctx_a, route="anchor")
    assert w.loop.corrector.debiaser.n_pairs == 0 and w.loop.n_groups_started == 0
    # the latest begun context needs no arguments: its task is known
    ctx_c, _ = w.begin_group(options={"target": 0.3})
    out = w.score_group(acts, context=ctx_c, route="anchor")
    assert out.rewards == pytest.approx([0.8, 0.8], abs=1e-6)


def test_anchor_group_without_reset_arguments_warns_once():
    w = AnchoredWorldModelWrapper(GuessEnv(), wm(), group_size=2, correction=CFG)
    acts = [np.array([0.5], np.float32)] * 2
    with pytest.warns(UserWarning, match="without reset arguments"):
        w.score_group(acts, route="anchor")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w.score_group(acts, route="anchor")  # once per wrapper
        w.score_group(acts, options={"target": 0.2}, route="anchor")


def test_the_auto_fraction_warning_points_at_the_line_that_built_the_wrapper():
    """anchor_fraction='auto' warns that it is experimental, at the user's line that built the
    wrapper or the loop (it pointed into wmrl_envs/wrappers/common.py for a wrapper)."""
    auto = CorrectionConfig(anchor_fraction="auto", min_pairs=8, warmup_groups=2)
    builders = {
        "wrapper": lambda: AnchoredWorldModelWrapper(GuessEnv(), wm(), group_size=G, correction=auto),
        "vector wrapper": lambda: AnchoredWorldModelVectorWrapper(
            make_vector_env(GuessEnv, G), wm(), group_size=G, correction=auto),
        "loop": lambda: CorrectionLoop(auto, world_model=wm()),
    }
    for what, build in builders.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            line = build.__code__.co_firstlineno
            build()
        experimental = [w for w in caught if "is experimental" in str(w.message)]
        assert len(experimental) == 1, (what, [str(w.message) for w in caught])
        assert (experimental[0].filename, experimental[0].lineno) == (__file__, line), what


def test_loops_of_wrappers_in_async_worker_processes_can_be_read():
    """get_attr("loop") on per-episode wrappers in the worker processes of an AsyncVectorEnv sends
    each loop back pickled: it failed with "cannot pickle '_thread.RLock' object" (and killed the
    worker). Now each comes back as an independent copy with its own lock, its stats those of
    the worker's loop; pickle and deepcopy give the same stats and state."""
    import copy
    import pickle

    from gymnasium.vector import AsyncVectorEnv, AutoresetMode

    from wmrl_envs.envs.known_truth import KnownTruthEnv, KnownTruthWorldModel

    def make():
        env = KnownTruthEnv(n_tasks=2, n_actions=8)
        return AnchoredWorldModelWrapper(env, KnownTruthWorldModel(env), group_size=G, correction=CFG, seed=1)

    venv = AsyncVectorEnv([make, make], autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        venv.reset(seed=0)
        for _ in range(3 * G):  # one-step episodes: 3 groups per sub-env
            venv.step(np.array([1, 2]))
        loops = venv.get_attr("loop")
        assert [type(lp).__name__ for lp in loops] == ["CorrectionLoop", "CorrectionLoop"]
        stats = [lp.stats() for lp in loops]
        # 12 episodes ended (3 groups closed) and the 13th, autoreset, opened the 4th group
        assert [(s["episodes"], s["groups_started"], s["groups_closed"]) for s in stats] == [(3 * G + 1, 4, 3)] * 2
        assert [s["world_model_predictions"] for s in stats] == [3 * G] * 2  # a prediction per rollout
        assert [s["executions"] for s in stats] == [G * s["anchor_groups"] for s in stats] == [4, 4]  # closed anchor groups
        assert venv.call("plan_step") is not None  # the workers survived the transfer
    finally:
        venv.close()

    here = make()
    for _ in range(2 * G):
        here.reset()
        here.step(3)
    for twin in (pickle.loads(pickle.dumps(here.loop)), copy.deepcopy(here.loop)):
        assert twin.stats() == here.loop.stats() and twin.state_dict() == here.loop.state_dict()
        assert twin._lock is not here.loop._lock
        twin.plan_step()  # the copy's lock works; the original does not see what the copy records
        assert twin.stats()["steps"] == here.loop.stats()["steps"] + 1
