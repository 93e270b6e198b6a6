"""benchmarks/headline_diagnosis.py: the steps whose anchor group counted toward ρ's warm-up, and
the share of groups whose G programs are the same (collapse within groups)."""

from __future__ import annotations

import copy

import pytest
import torch

from agents.grammar.policy import GrammarPolicy
from benchmarks.headline_diagnosis import collapsed_share, counted_anchor_groups
from wmrl_envs.core.denoise import InverseVarianceDenoiser


def test_counted_groups_are_the_steps_where_the_denoiser_counted_one():
    # a real denoiser fed groups with and without real variance: its logged s̄² changes exactly at
    # the groups that counted, and counted_anchor_groups finds those steps
    den = InverseVarianceDenoiser(warmup_groups=64)
    groups = [([0.2, 0.8], [0.0, 1.0]), ([0.5, 0.5], [0.7, 0.7]), ([0.1, 0.9], [0.3, 0.6]),
              ([0.4, 0.4], [0.2, 0.2]), ([0.3, 0.6], [0.9, 0.1])]
    records = [{"step": 1, "disagreement_ema": None}]  # before the debiaser's first fit
    for step, (cal, real) in enumerate(groups, start=2):
        den.update(cal, real)
        records.append({"step": step, "disagreement_ema": None if den.n_scored_groups == 0 else den.ema})
    assert den.n_scored_groups == 3 and den.n_skipped == 2
    assert counted_anchor_groups(records) == {"counted": [2, 4, 6], "maybe": [], "before": [1]}
    assert den.rho == 1.0  # 3 of 64: the warm-up has not ended


def test_a_counted_group_that_leaves_s2_at_one_is_a_maybe():
    """Review of session 8: a counted group with equal calibrated scores has s² = 1 exactly, so once
    s̄² is 1.0 it does not move: such steps are reported as a range, not as skipped."""
    den = InverseVarianceDenoiser(warmup_groups=64)
    records = []
    for step in range(1, 5):  # a constant world model: calibrated scores all 0.42
        den.update([0.42] * 4, [0.1 * step, 0.5, 0.9, 0.3])
        records.append({"step": step, "disagreement_ema": den.ema})
    den.update([0.42] * 4, [0.6] * 4)  # equal real scores: skipped
    records.append({"step": 5, "disagreement_ema": den.ema})
    assert den.n_scored_groups == 4 and all(r["disagreement_ema"] == 1.0 for r in records)
    assert counted_anchor_groups(records) == {"counted": [1], "maybe": [2, 3, 4, 5], "before": []}


def test_counted_groups_none_before_the_first_fit():
    assert counted_anchor_groups([{"step": 1, "disagreement_ema": None}, {"step": 2, "disagreement_ema": None}]) == {
        "counted": [], "maybe": [], "before": [1, 2]}


def test_collapsed_share_of_a_fresh_and_a_collapsed_policy():
    tasks = ["house-prices", "land-cover"]
    fresh = GrammarPolicy(seed=0)
    share, distinct = collapsed_share(fresh.state_dict(), 0, tasks, group_size=4, draws=8)
    assert share < 0.1 and distinct > 3.5  # the prior spreads over many programs
    # every slot's bias pushed to one option: the policy writes one program per task
    state = copy.deepcopy(fresh.state_dict())
    for k, v in state.items():
        if k.startswith("weight_"):
            state[k] = torch.zeros_like(v)
        elif k.startswith("bias_"):  # the prior's favourite valid option of each slot, at +-50
            valid = getattr(fresh, k.replace("bias_", "valid_"))
            top = torch.nn.functional.one_hot(v.masked_fill(~valid, float("-inf")).argmax(-1), v.shape[-1]).bool()
            state[k] = torch.where(top, torch.tensor(50.0), torch.tensor(-50.0))
    share, distinct = collapsed_share(state, 0, tasks, group_size=4, draws=8)
    assert share == 1.0 and distinct == 1.0


def test_collapsed_share_refuses_an_empty_sample():
    with pytest.raises(ValueError, match="draws >= 1"):
        collapsed_share(GrammarPolicy(seed=0).state_dict(), 0, ["house-prices"], group_size=4, draws=0)


def test_collapse_at_equal_steps_reads_the_last_evaluated_step_at_or_before_k():
    from benchmarks.headline_diagnosis import collapse_at_steps

    def run(*pts):
        return {"collapse": [{"step": s, "collapsed_share": c} for s, c in pts]}

    out = {"methods": {"a": [run((0, 0.0), (8, 0.1), (25, 0.3)), run((0, 0.0), (12, 0.5))],
                       "b": [run((0, 0.0), (5, 0.2))]}}
    eq = collapse_at_steps(out, steps=(10, 30))
    assert eq["a"][10] == (0.05, 2)  # step 8 (0.1) and step 0 (0.0): both runs lasted >= 8 steps
    assert eq["a"][30] == (0.3, 1)  # the second run ended at step 12 < 24: left out
    assert eq["b"] == {10: None, 30: None}  # a 5-step run says nothing about step 10


def test_equal_score_share_is_the_share_of_equal_subsets():
    import itertools

    from benchmarks.headline_diagnosis import equal_score_share

    scores = [0.5, 0.5, 0.5, 0.9, 0.9, 0.5, 0.1, 0.5]
    subsets = list(itertools.combinations(scores, 4))
    brute = sum(len(set(s)) == 1 for s in subsets) / len(subsets)
    assert equal_score_share(scores, 4) == pytest.approx(brute) == pytest.approx(5 / 70)  # C(5,4) of C(8,4)
    assert equal_score_share([0.3] * 8, 4) == 1.0 and equal_score_share([0.1, 0.2, 0.3, 0.4], 4) == 0.0
    assert equal_score_share([0.3, 0.3, 0.3], 4) is None  # fewer draws than a group
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        equal_score_share([0.3, 0.3], 1)


def test_mean_over_steps_interpolates_between_evaluated_steps():
    from benchmarks.headline_diagnosis import mean_over_steps

    assert mean_over_steps([(0, 0.0), (10, 1.0)], 11) == pytest.approx(0.5)
    assert mean_over_steps([(0, 0.2), (2, 0.4)], 6) == pytest.approx((0.2 + 0.3 + 0.4 * 4) / 6)  # flat past the last point
    assert mean_over_steps([], 5) is None and mean_over_steps([(0, 0.1)], 0) is None


def test_no_spread_share_finds_every_draw_the_bench_evaluation_cached(monkeypatch):
    """Review of session 9: the re-sampling is checked against the bench's own evaluation, not a
    copy of its sampling code: evaluate_snapshot (its executions replaced by a fake grade) fills
    the cache, and no_spread_share then finds every one of its draws there."""
    from types import SimpleNamespace

    import wmrl_envs.envs.autoresearch.env as ar_env
    from agents.experiments.bench_agents import GrammarBenchAgent
    from agents.experiments.bench_run import evaluate_snapshot
    from benchmarks.headline_diagnosis import no_spread_share
    from wmrl_envs.envs.autoresearch.tasks import list_tasks

    def fake_run(task, program, sandbox):  # every program of a task scores the same
        return (SimpleNamespace(score=0.5, status="valid", position=0.5, timed_out=False),)

    monkeypatch.setattr(ar_env, "evaluate", fake_run)
    tasks, seed, draws = list_tasks("heldout")[:3], 2, 8
    agent = GrammarBenchAgent(seed)
    snap = agent.snapshot()
    cache: dict = {}
    res = evaluate_snapshot(agent, snap, tasks, 1, None, 1, eval_seed=1_000_003 + seed, cache=cache, draws=draws)
    assert res["executed"] == len(cache) > 0
    share, missing = no_spread_share(snap, seed, tasks, cache, draws, 4, 1_000_003 + seed)
    assert (share, missing) == (1.0, 0)


def test_step_to_target_interpolates_like_compute_to_target():
    from benchmarks.headline_diagnosis import step_to_target

    assert step_to_target([0, 4, 8], [30.0, 50.0, 70.0], 60.0) == pytest.approx(6.0)
    assert step_to_target([0, 4, 8], [30.0, 50.0, 70.0], 20.0) == 0.0  # the initial policy already there
    assert step_to_target([0, 4, 8], [30.0, 50.0, 55.0], 60.0) is None  # never reached


def test_no_spread_share_rescores_the_evaluation_draws_from_the_cache():
    """The draws are the bench evaluation's (same agent, same evaluation seed): a cache filled from
    them is hit, and the share follows the cached scores."""
    from types import SimpleNamespace

    from agents.experiments.bench_agents import GrammarBenchAgent
    from benchmarks.headline_diagnosis import no_spread_share

    tasks, seed, draws = ["house-prices", "land-cover"], 3, 8
    agent = GrammarBenchAgent(seed)
    snap = agent.snapshot()
    agent.reseed(1_000_003 + seed)
    actions, _ = agent.sample(tasks, draws)  # what evaluate_snapshot sampled
    # task 0: every program scores the same; task 1: every distinct program its own score
    cache = {(tasks[0], p): SimpleNamespace(score=0.7) for p in actions[0]}
    cache.update({(tasks[1], p): SimpleNamespace(score=0.1 + 0.01 * i) for i, p in enumerate(dict.fromkeys(actions[1]))})
    share, missing = no_spread_share(snap, seed, tasks, cache, draws, 4, 1_000_003 + seed)
    assert missing == 0
    distinct1 = len(set(actions[1]))
    assert distinct1 == draws  # the fresh prior's draws differ
    assert share == pytest.approx((1.0 + 0.0) / 2)
    # a draw the cache lacks (ungraded or timed out) is counted and left out
    del cache[(tasks[1], actions[1][0])]
    share, missing = no_spread_share(snap, seed, tasks, cache, draws, 4, 1_000_003 + seed)
    assert missing == 1 and share == pytest.approx(0.5)
    # another evaluation seed samples other programs: they miss the cache
    _, missing = no_spread_share(snap, seed, tasks, cache, draws, 4, 7)
    assert missing > draws
