"""SkyRL adapter: WMRLTextEnv around skyrl-gym's own GSM8K and multi-turn GSM8K environments.

The envs are driven the way SkyRL's ``SkyRLGymGenerator.agent_loop`` drives them (skyrl-train
itself needs vLLM and a GPU and is not installed here): one ``skyrl_gym.make(env_class,
env_config, extras=deepcopy(row extras))`` per sample, made prompt-major before the first
``await``, then ``init``, ``step`` until ``done``, ``get_metrics`` and ``close``, all samples of
a batch concurrently on an ``asyncio`` loop with the env calls in a thread pool (SkyRL's
``env_executor``), so the samples of different groups interleave.
"""

from __future__ import annotations

import asyncio
import copy
import math
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym")

from skyrl_gym.envs.gsm8k import utils as gsm8k_utils  # noqa: E402
from skyrl_gym.envs.gsm8k.env import GSM8kEnv  # noqa: E402
from skyrl_gym.envs.gsm8k.multi_turn_env import GSM8kMultiTurnEnv  # noqa: E402
from skyrl_gym.envs.registration import deregister  # noqa: E402
from skyrl_gym.metrics import aggregate_for_environment  # noqa: E402

from agents.adapters.skyrl import WMRLSkyRLHub, register_wmrl_env  # noqa: E402
from wmrl_envs.core import CorrectionConfig  # noqa: E402
from wmrl_envs.world_models import WorldModelPrediction  # noqa: E402

ANSWERS = ["18", "3", "70000", "540", "20", "64", "260", "160"]


def rows(n: int = 8) -> list[dict[str, Any]]:
    """GSM8K-shaped rows as SkyRL's dataset gives them: prompt + extras (reward_spec, extra_info)."""
    return [{"prompt": [{"role": "user", "content": f"Question {i}: compute it. End with '#### ANSWER'."}],
             "extras": {"reward_spec": {"method": "rule", "ground_truth": ANSWERS[i % len(ANSWERS)]},
                        "extra_info": {"split": "train", "index": i}}} for i in range(n)]


def completion(row: int, rep: int, turn: int = 0) -> str:
    """The policy: rollouts 0 and 2 answer right, 1 is well formatted but wrong, 3 unformatted."""
    truth = ANSWERS[row % len(ANSWERS)]
    return [f"so #### {truth}", "so #### 1", f"#### {truth}" if turn else "I think 7", "no idea"][rep % 4]


def wm_raw(text: str, row: int) -> float:
    """The world model's raw score of ``text`` for ``row`` (see :class:`CountingWM`)."""
    real = gsm8k_utils.compute_score(text, ANSWERS[row % len(ANSWERS)], format_score=0.5)
    return 0.8 if real == 1.0 else 0.3 if real == 0.5 else 0.1


class CountingWM:
    """World model: 0.8 for a right answer, 0.3 for a formatted wrong one, 0.1 otherwise (a biased
    grader of GSM8K's own rule); ``None`` for the text ``"UNSCORABLE"``."""

    def __init__(self) -> None:
        self.contexts: list[Any] = []
        self.actions: list[str] = []

    def predict(self, contexts, actions):
        out = []
        for c, a in zip(contexts, actions):
            self.contexts.append(c)
            self.actions.append(a)
            i = int(c[0]["content"].split(":")[0].split()[1])  # "Question i: ..."
            score = None if a == "UNSCORABLE" else wm_raw(a, i)
            out.append(WorldModelPrediction(score=score, observation="try again: end with '#### ANSWER'",
                                            terminated=score == 0.8))
        return out


@pytest.fixture
def env_id():
    name = f"wmrl_test_{uuid.uuid4().hex[:8]}"
    yield name
    for n in (name, name + "_eval"):
        if n in skyrl_gym.registry:
            deregister(n)


@pytest.fixture
def spy_steps(monkeypatch):
    """Every real ``step`` of skyrl-gym's GSM8K envs: (env class name, action)."""
    calls: list[tuple[str, str]] = []
    for cls in (GSM8kEnv, GSM8kMultiTurnEnv):
        orig = cls.step

        def step(self, action, _orig=orig, _name=cls.__name__):
            calls.append((_name, action))
            return _orig(self, action)

        monkeypatch.setattr(cls, "step", step)
    return calls


def generate(env_class: str, batch: list[dict[str, Any]], n_samples: int,
             policy: Callable[[int, int, int], str] = completion, max_turns: int = 1) -> list[dict[str, Any]]:
    """SkyRLGymGenerator.generate / agent_loop, without the LLM (``policy`` writes the text)."""

    async def agent_loop(env, prompt, row, rep, executor):
        loop = asyncio.get_running_loop()
        chat, meta = await loop.run_in_executor(executor, env.init, copy.deepcopy(prompt))
        rewards, observations = [], []
        for turn in range(max_turns):
            out = await loop.run_in_executor(executor, env.step, policy(row, rep, turn))
            assert out["reward"] is not None  # what SkyRL's generator asserts
            rewards.append(out["reward"])
            observations.append(out["observations"])
            if out["done"]:
                break
        metrics = env.get_metrics()
        await loop.run_in_executor(executor, env.close)
        return {"row": row, "rep": rep, "env": env, "rewards": rewards, "observations": observations,
                "metrics": metrics, "init_meta": meta}

    async def run():
        with ThreadPoolExecutor(4) as executor:
            tasks = []
            for i, r in enumerate(batch):  # prompt-major, as prepare_generator_input lays them out
                for rep in range(n_samples):
                    extras = copy.deepcopy(r["extras"])
                    extras["max_turns"] = max_turns  # what agent_loop adds
                    env = skyrl_gym.make(env_class, env_config={}, extras=extras)
                    tasks.append(agent_loop(env, r["prompt"], i, rep, executor))
            return await asyncio.gather(*tasks)

    return asyncio.run(run())


# ---------------------------------------------------------------------------------- GSM8K, one turn
def test_gsm8k_groups_are_routed_whole_and_anchor_pairs_reach_the_loop(env_id, spy_steps):
    wm = CountingWM()
    hub = register_wmrl_env(env_id, "gsm8k", wm, group_size=4, groups_per_step=8, seed=3,
                            correction=CorrectionConfig(anchor_fraction=0.25, min_pairs=1000))
    out = generate(env_id, rows(8), 4)
    by_row: dict[int, list[dict]] = {}
    for o in out:
        by_row.setdefault(o["row"], []).append(o)
    routes = {}
    for i, samples in by_row.items():
        envs = [s["env"] for s in samples]
        assert len({(e.route, e.group_id) for e in envs}) == 1  # the whole group, one route
        routes[i] = envs[0].route
        truth = ANSWERS[i]
        for s in samples:
            text = completion(i, s["rep"])
            real = gsm8k_utils.compute_score(text, truth)
            if s["env"].route == "anchor":
                assert s["rewards"] == [real] and s["env"].real_steps == 1
            else:  # f̂ = identity before min_pairs: the world model's raw score
                assert s["rewards"] == [wm_raw(text, i)] and s["env"].real_steps == 0
            assert s["metrics"]["wmrl_anchor"] == float(s["env"].route == "anchor")
    assert sorted(routes.values()).count("anchor") == 2  # 0.25 x 8 groups, one step
    # world-model routes never called the real env's step; anchors called it once per sample
    anchor_rows = [i for i, r in routes.items() if r == "anchor"]
    assert sorted(a for _, a in spy_steps) == sorted(completion(i, k) for i in anchor_rows for k in range(4))
    assert hub.loop.ledger.count("execution") == 8
    assert hub.loop.ledger.count("world_model") == 32  # every sample scored while training
    # the 8 anchor pairs (r̂, r) reached the debiaser, and the groups closed
    raw, real = hub.loop.corrector.debiaser.pairs()
    expected = sorted((wm_raw(completion(i, k), i), float(gsm8k_utils.compute_score(completion(i, k), ANSWERS[i])))
                      for i in anchor_rows for k in range(4))
    assert sorted(zip(map(float, raw), map(float, real))) == expected
    st = hub.stats()
    assert st["groups"] == 8 and st["anchor_groups"] == 2 and st["open_groups"] == 0 and st["anchor_pairs"] == 8
    # SkyRL's own metric aggregation finds the registered class
    agg = aggregate_for_environment(env_id, [o["metrics"] for o in out])
    assert agg["wmrl_anchor"] == 0.25 and agg["wmrl_ungraded"] == 0.0


def test_same_seed_same_routes_and_equal_rows_make_two_groups(env_id):
    def routes_of(seed: int, name: str) -> list[tuple[int, str]]:
        register_wmrl_env(name, "gsm8k", CountingWM(), group_size=3, groups_per_step=8, seed=seed,
                          correction=CorrectionConfig(anchor_fraction=0.5))
        out = generate(name, rows(8), 3)
        return sorted({(o["row"], o["env"].route) for o in out})

    a = routes_of(11, env_id)
    b = routes_of(11, env_id + "_b")
    deregister(env_id + "_b")
    deregister(env_id + "_b_eval")
    assert a == b and [r for _, r in a].count("anchor") == 4 and len(a) == 8
    # two rows with equal extras in one batch: two groups of 3, each whole
    name = env_id + "_dup"
    hub = register_wmrl_env(name, "gsm8k", CountingWM(), group_size=3, groups_per_step=2, seed=0,
                            correction=CorrectionConfig(anchor_fraction=0.5))
    batch = rows(1) * 2
    out = generate(name, batch, 3)
    deregister(name)
    deregister(name + "_eval")
    gids = [[o["env"].group_id for o in out if o["row"] == r] for r in (0, 1)]
    assert gids == [[0, 0, 0], [1, 1, 1]]
    assert hub.stats()["groups"] == 2 and hub.stats()["open_groups"] == 0


def test_group_key_column_names_the_group(env_id):
    hub = register_wmrl_env(env_id, "gsm8k", CountingWM(), group_size=2, groups_per_step=2,
                            correction=CorrectionConfig(anchor_fraction=0.5))
    batch = rows(2)
    for i, r in enumerate(batch):
        r["extras"]["wmrl_group"] = f"uid-{i}"
    envs = [skyrl_gym.make(env_id, env_config={}, extras=copy.deepcopy(batch[i]["extras"])) for i in (0, 1, 0, 1)]
    assert [e.group_id for e in envs] == [0, 1, 0, 1]  # interleaved arrivals, grouped by the column
    assert hub.stats()["groups"] == 2


# ---------------------------------------------------------------------------------- multi-turn
def test_multi_turn_anchor_turns_are_real_and_world_model_turns_never_step(env_id, spy_steps):
    wm = CountingWM()
    hub = register_wmrl_env(env_id, "gsm8k_multi_turn", wm, group_size=4, groups_per_step=2, seed=1,
                            correction=CorrectionConfig(anchor_fraction=0.5, min_pairs=1000))
    out = generate(env_id, rows(2), 4, max_turns=3)
    routes = {o["row"]: o["env"].route for o in out}
    assert sorted(routes.values()) == ["anchor", "world_model"]
    for o in out:
        i, rep, env = o["row"], o["rep"], o["env"]
        texts = [completion(i, rep, t) for t in range(len(o["rewards"]))]
        if env.route == "anchor":
            # the inner env's own turn rewards and observations, unchanged (episode_score="sum")
            ref = GSM8kMultiTurnEnv(extras={"reward_spec": {"ground_truth": ANSWERS[i]}, "max_turns": 3})
            ref.init([])
            ref_out = [ref.step(t) for t in texts]
            assert o["rewards"] == [r["reward"] for r in ref_out]
            assert o["observations"] == [r["observations"] for r in ref_out]
            assert ref_out[-1]["done"]
        else:
            # world-model turns: its observation, its end (terminated or max_turns), rewards that sum to f̂(Σ r̂)
            raws = [wm_raw(t, i) for t in texts]
            ends_at = next((k + 1 for k, r in enumerate(raws) if r == 0.8), 3)
            assert len(o["rewards"]) == ends_at and env.real_steps == 0
            assert math.isclose(sum(o["rewards"]), sum(raws), abs_tol=1e-12)
            assert all(obs == [{"role": "user", "content": "try again: end with '#### ANSWER'"}]
                       for obs in o["observations"][:-1]) and o["observations"][-1] == []
    anchor_row = next(i for i, r in routes.items() if r == "anchor")
    assert {a for _, a in spy_steps} <= {completion(anchor_row, k, t) for k in range(4) for t in range(3)}
    assert all(name == "GSM8kMultiTurnEnv" for name, _ in spy_steps)
    # the world model saw the chat so far: the prompt, then each earlier turn and observation
    second_turn_ctx = [c for c, a in zip(wm.contexts, wm.actions) if len(c) == 3]
    assert second_turn_ctx and all(c[1]["role"] == "assistant" and c[2]["role"] == "user" for c in second_turn_ctx)
    assert hub.stats()["anchor_pairs"] == 4 and hub.stats()["open_groups"] == 0


# ------------------------------------------------------------ multi-turn: one rule on both routes (issue 38)
MULTI_TURNS = 3


def multi_turn_policy(row: int, rep: int, turn: int) -> str:
    """Rollout 0 answers right at once; 1 is formatted but wrong, then right (the issue's 0.067 + 1.0);
    2 is formatted but wrong on every turn; 3 never formats."""
    truth = ANSWERS[row % len(ANSWERS)]
    return [f"#### {truth}", "#### 1" if turn == 0 else f"#### {truth}", "#### 1", "no idea"][rep % 4]


def gsm8k_turn_score(context, action) -> WorldModelPrediction:
    """A perfect world model of skyrl-gym's multi-turn GSM8K, as a plain function: the turn's own score
    (the env's turn reward) and the env's end on a right answer."""
    i = int(context[0]["content"].split(":")[0].split()[1])
    s = gsm8k_utils.compute_score(solution_str=action, ground_truth=ANSWERS[i % len(ANSWERS)], method="strict",
                                  format_score=0.2 / MULTI_TURNS, score=1.0)
    return WorldModelPrediction(score=s, terminated=s == 1.0)


def gsm8k_next_message(inner, action, turn):
    """What GSM8kMultiTurnEnv sends after ``turn`` turns (it depends on the turn only): its own message."""
    inner.turns = turn
    return inner._make_observation()


def real_episode(row: int, rep: int) -> list[dict[str, Any]]:
    ref = GSM8kMultiTurnEnv(extras={"reward_spec": {"ground_truth": ANSWERS[row]}, "max_turns": MULTI_TURNS})
    ref.init([])
    out = []
    for t in range(MULTI_TURNS):
        out.append(ref.step(multi_turn_policy(row, rep, t)))
        if out[-1]["done"]:
            return out
    return out


def test_multi_turn_world_model_episodes_follow_the_real_env_turn_for_turn(env_id, spy_steps):
    """skyrl-gym's gsm8k_multi_turn, 3 turns: with a world model that predicts each turn's score and the
    env's end, and the env's next message, a world-model episode gets the same observations, ends on the
    same turn and scores the same turn rewards (same sum) as the real env: one rule on both routes."""
    hub = register_wmrl_env(env_id, "gsm8k_multi_turn", gsm8k_turn_score, group_size=4, groups_per_step=4, seed=0,
                            correction=CorrectionConfig(anchor_fraction=0.5, min_pairs=1000),
                            next_observation=gsm8k_next_message)
    out = generate(env_id, rows(4), 4, policy=multi_turn_policy, max_turns=MULTI_TURNS)
    real_steps = list(spy_steps)  # (the reference episodes below step GSM8kMultiTurnEnv too)
    routes = sorted({(o["env"].group_id, o["env"].route) for o in out})
    assert [r for _, r in routes].count("anchor") == 2 and [r for _, r in routes].count("world_model") == 2
    for o in out:
        ref = real_episode(o["row"], o["rep"])
        assert o["observations"] == [r["observations"] for r in ref]  # the real env's next messages, [] at the end
        assert o["rewards"] == pytest.approx([r["reward"] for r in ref], abs=1e-12)  # same turns, same rewards
        assert len(o["rewards"]) == [1, 2, 3, 3][o["rep"]]  # a predicted right answer ends the episode
    rep1 = next(o for o in out if o["rep"] == 1 and o["env"].route == "world_model")
    assert rep1["rewards"] == pytest.approx([0.2 / 3, 1.0])  # not 0.9 + 0.9 + 0.9
    # world-model turns never executed: the real steps are the anchor episodes' turns, one each
    assert sorted(a for _, a in real_steps) == sorted(multi_turn_policy(o["row"], o["rep"], t) for o in out
                                                      if o["env"].route == "anchor" for t in range(len(o["rewards"])))
    assert all(o["env"].real_steps == 0 for o in out if o["env"].route == "world_model")
    # anchor groups: the world model's episode score by the same rule equals the real one (perfect model)
    for _, corr in hub.closed_groups:
        if corr.route == "anchor":
            assert corr.raw_scores == pytest.approx(corr.real_scores, abs=1e-12)
    assert len(hub.closed_groups) == 4 and hub.stats()["open_groups"] == 0


def test_multi_turn_world_model_turn_without_a_predicted_observation_gets_the_stand_in(env_id):
    """A world model that returns only a score (a float): the turns that do not end the episode send the
    last message the env sent again (the prompt's question), never an empty observation."""
    seen = []

    def world_model(context, action):  # a float: no observation, no end
        seen.append(copy.deepcopy(context))
        return 0.9 if "####" in action else 0.1

    hub = register_wmrl_env(env_id, "gsm8k_multi_turn", world_model, group_size=4, groups_per_step=1, seed=0,
                            correction=CorrectionConfig(anchor_fraction=0.0, min_anchor_groups=0, min_pairs=1000))
    batch = rows(1)
    out = generate(env_id, batch, 4, policy=multi_turn_policy, max_turns=MULTI_TURNS)
    question = batch[0]["prompt"][-1]
    for o in out:
        assert o["env"].route == "world_model" and len(o["rewards"]) == MULTI_TURNS  # nothing ends it early
        assert o["observations"] == [[question], [question], []]
        # per-turn scores summed (episode_score="sum"): 3 formatted turns score 0.9 + 0.9 + 0.9
        expected = 0.9 * 3 if o["rep"] != 3 else 0.1 * 3
        assert sum(o["rewards"]) == pytest.approx(expected)
    # the world model's context on turn 3: prompt, answer, stand-in, answer, stand-in
    assert any(len(c) == 5 and c[2] == question and c[4] == question for c in seen)
    assert hub.stats()["open_groups"] == 0


# ---------------------------------------------------------------------------------- ungraded
class FlakyGSM8K(GSM8kEnv):
    """skyrl-gym's GSM8K whose grader fails (NaN reward, ``graded=False``) on the text ``"FAIL"``."""

    def step(self, action):
        if action == "FAIL":
            return {"observations": [], "reward": float("nan"), "done": True,
                    "metadata": {"graded": False, "ungraded_cause": "grader_crashed"}}
        return super().step(action)


def test_ungraded_episodes_are_kept_apart_from_zero(env_id):
    def policy(row, rep, turn):
        return ["FAIL", "UNSCORABLE", f"#### {ANSWERS[row]}", "#### 1"][rep]

    hub = register_wmrl_env(env_id, lambda env_config, extras: FlakyGSM8K(env_config, extras), CountingWM(),
                            group_size=4, groups_per_step=2, seed=0, ungraded_reward=-1.0, max_ungraded_share=None,
                            correction=CorrectionConfig(anchor_fraction=0.5, min_pairs=1000))
    out = generate(env_id, rows(2), 4, policy=policy)
    for o in out:
        env, rep = o["env"], o["rep"]
        ungraded = (rep == 0 and env.route == "anchor") or (rep == 1 and env.route == "world_model")
        assert o["metrics"]["wmrl_ungraded"] == float(ungraded)
        if ungraded:
            assert o["rewards"] == [-1.0]  # ungraded_reward, not a score of 0
    raw, real = hub.loop.corrector.debiaser.pairs()
    # anchor pairs: the graded, world-model-scored samples only (not "FAIL", not "UNSCORABLE")
    assert sorted(map(float, real)) == [0.0, 1.0]
    counts = hub.loop.ledger.ungraded_counts()
    assert counts.get("grader_crashed") == 1 and counts.get("world_model_ungraded", 0) >= 1
    anchor_corr = next(c for _, c in hub.closed_groups if c.route == "anchor")
    assert anchor_corr.rewards.count(None) == 1 and anchor_corr.ungraded_causes.count("grader_crashed") == 1
    # the step's metadata names the cause
    fail = next(o for o in out if o["rep"] == 0 and o["env"].route == "anchor")
    assert fail["metrics"]["wmrl_ungraded"] == 1.0 and fail["env"].ungraded


# ---------------------------------------------------------------------------------- evaluation, ρ, errors
def test_eval_twin_runs_real_execution_and_updates_nothing(env_id, spy_steps):
    hub = register_wmrl_env(env_id, "gsm8k", CountingWM(), group_size=2, groups_per_step=2,
                            correction=CorrectionConfig(anchor_fraction=0.5))
    out = generate(env_id + "_eval", rows(3), 1)  # SkyRL's eval_n_samples_per_prompt defaults to 1
    assert all(o["env"].route == "anchor" and o["env"].group_id is None for o in out)
    assert [o["rewards"] for o in out] == [[1.0]] * 3  # real scores (rollout 0 answers right)
    assert len(spy_steps) == 3 and hub.stats()["groups"] == 0 and hub.stats()["anchor_pairs"] == 0
    assert hub.stats()["open_groups"] == 0 and hub.loop.ledger.count("world_model") == 0
    assert hub.loop.ledger.count("execution") == 3


def test_rho_in_rewards_scales_anchor_rewards_by_the_tickets_rho(env_id):
    hub = register_wmrl_env(env_id, "gsm8k", CountingWM(), group_size=2, groups_per_step=1,
                            correction=CorrectionConfig(anchor_fraction=1.0, warmup_groups=1), rho_in_rewards=True)
    hub.loop.corrector.denoiser.load_state_dict(
        {**hub.loop.corrector.denoiser.state_dict(), "ema": 0.75, "c": 2.0, "n_scored_groups": 5})
    rho = hub.loop.rho
    assert rho > 1.0
    out = generate(env_id, rows(1), 2)
    assert [o["rewards"] for o in out] == [[1.0 * rho], [0.0]]


def test_register_errors(env_id):
    with pytest.raises(skyrl_gym.error.Error, match="No registered env"):
        register_wmrl_env(env_id, "no_such_env", CountingWM(), group_size=2)
    with pytest.raises(ValueError, match="group_size"):
        WMRLSkyRLHub(CountingWM(), group_size=0)
    with pytest.raises(TypeError, match="predict"):
        WMRLSkyRLHub(42, group_size=2)


def test_a_world_model_that_learns_is_taught_with_one_turn_anchor_groups(env_id):
    class LearningWM(CountingWM):
        def __init__(self):
            super().__init__()
            self.observed: list[tuple[list, list, list]] = []

        def observe(self, contexts, actions, real_scores, group_id=None):
            self.observed.append((list(contexts), list(actions), list(real_scores)))
            return False

    wm = LearningWM()
    register_wmrl_env(env_id, "gsm8k", wm, group_size=4, groups_per_step=1,
                      correction=CorrectionConfig(anchor_fraction=1.0))
    batch = rows(1)
    generate(env_id, batch, 4)
    assert len(wm.observed) == 1
    contexts, actions, real = wm.observed[0]
    assert sorted(actions) == sorted(completion(0, k) for k in range(4))
    assert all(c == batch[0]["prompt"] for c in contexts)  # the chat the model answered
    assert sorted(real) == sorted(float(gsm8k_utils.compute_score(completion(0, k), ANSWERS[0])) for k in range(4))


def test_the_pages_examples_print_what_it_says():
    """docs/skyrl.md's two runnable examples (one-turn GSM8K; multi-turn GSM8K on both routes)."""
    import contextlib
    import io
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[3] / "docs" / "skyrl.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```(.*?)(?=```|\Z)", page, re.S)
    assert len(blocks) == 2
    for code, prose in blocks:
        ns: dict = {"__name__": "skyrl_doc"}
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, "docs/skyrl.md", "exec"), ns)  # noqa: S102 - the page's own example
        finally:
            for n in ("wmrl_gsm8k_demo", "wmrl_gsm8k_mt_demo"):
                for name in (n, n + "_eval"):
                    if name in skyrl_gym.registry:
                        deregister(name)
        claimed = re.search(r"This prints `([^`]*)`", prose).group(1)
        assert out.getvalue().strip() == claimed


def test_flush_closes_a_group_whose_samples_never_all_ended(env_id):
    hub = register_wmrl_env(env_id, "gsm8k", CountingWM(), group_size=4, groups_per_step=1,
                            correction=CorrectionConfig(anchor_fraction=1.0))
    row = rows(1)[0]
    envs = [skyrl_gym.make(env_id, env_config={}, extras=copy.deepcopy(row["extras"])) for _ in range(4)]
    for k, env in enumerate(envs[:3]):  # the 4th sample never runs (its agent loop failed)
        env.init(row["prompt"])
        env.step(completion(0, k))
        env.close()
    assert hub.stats()["open_groups"] == 1 and hub.stats()["anchor_pairs"] == 0
    assert hub.flush() == 1
    st = hub.stats()
    assert st["open_groups"] == 0 and st["anchor_pairs"] == 3 and st["real_executions"] == 3
    assert hub.closed_groups[-1][1].real_scores == [1.0, 0.0, 0.0]


class PaidGSM8K(GSM8kEnv):
    """skyrl-gym's GSM8K graded by a paid API that reports each call's price (0.01 per character of the text)."""

    def step(self, action):
        out = super().step(action)
        out["metadata"] = {**(out.get("metadata") or {}), "execution_cost": 0.01 * len(action)}
        return out


def test_per_call_charges_the_price_the_env_reports_in_its_metadata(env_id):
    hub = register_wmrl_env(env_id, lambda env_config, extras: PaidGSM8K(env_config, extras), CountingWM(),
                            group_size=4, groups_per_step=2, seed=0,
                            correction=CorrectionConfig(anchor_fraction=1.0, cost_basis="per_call",
                                                        cost_prices={"execution": 1.0, "world_model": 0.0},
                                                        cost_unit="USD"))
    out = generate(env_id, rows(2), 4)
    texts = [completion(o["row"], o["rep"]) for o in out]
    ledger = hub.loop.ledger
    assert ledger.count("execution") == 8
    assert ledger.cost("execution") == pytest.approx(sum(0.01 * len(t) for t in texts))  # not 8 x the declared 1.0
