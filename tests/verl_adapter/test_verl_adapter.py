"""The verl adapter with verl's real objects (verl 0.9.1, CPU): the estimator through verl's own
``compute_advantage`` against verl's GRPO estimator, whole-group routing, ungraded rows (ours
and verl's timeout/error flags), the state across a resume, the named Ray actor, and the real
AutoResearch reward path (sandboxed execution, embedding world model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.trainer.ppo.reward import get_custom_reward_fn

from agents.adapters.verl import (
    WMRLHub,
    WMRLRewardManager,
    compute_score,
    resume_step_from_config,
    use_local_hub,
)
from agents.adapters.verl_core import DEFAULT_HUB_NAME
from wmrl_envs.core import CorrectionConfig

T = 6  # response tokens per row


@pytest.fixture(autouse=True)
def _no_local_hub():
    yield
    use_local_hub(None)


def batch(uids, scores, lengths=None):
    """verl's layout: the outcome score on the last response token, mask over the response."""
    b = len(uids)
    lengths = lengths or [T] * b
    tlr, mask = torch.zeros(b, T), torch.zeros(b, T)
    for i, (s, n) in enumerate(zip(scores, lengths)):
        mask[i, :n] = 1.0
        tlr[i, n - 1] = float(s)
    return DataProto.from_dict(tensors={"token_level_rewards": tlr, "response_mask": mask},
                               non_tensors={"uid": np.array(uids, dtype=object)})


def advantages(data, estimator, **cfg):
    """verl's compute_advantage called the way its trainer calls it (the flag from the config)."""
    config = AlgoConfig(adv_estimator=estimator, **cfg)
    out = compute_advantage(data, adv_estimator=estimator, config=config,
                            norm_adv_by_std_in_grpo=config.get("norm_adv_by_std_in_grpo", True))
    return out.batch["advantages"]


def run_step(hub, step, n_groups, g, rng, prefix="s"):
    """Route and submit n_groups groups of g rollouts (raw, real uniform); returns uids, scores, routes."""
    uids, scores, routes = [], [], {}
    for k in range(n_groups):
        u = f"{prefix}{step}-{k}"
        t = hub.route(u, step=step)
        routes[u] = (t["route"], t["rho"])
        for j in range(g):
            raw, real = float(rng.random()), float(rng.random())
            out = hub.submit(u, j, route=t["route"], raw=raw, real=real if t["route"] == "anchor" else None,
                             exec_seconds=0.1 if t["route"] == "anchor" else None, exec_cpu_seconds=0.1, length=T)
            uids.append(u)
            scores.append(out["score"])
    return uids, scores, routes


def test_plugin_registers_the_estimator_in_a_process_that_only_imports_verl():
    code = ("import verl\nfrom verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
            "f = get_adv_estimator_fn('wmrl_grpo')\nprint(f.__module__, f.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("agents.adapters.verl compute_wmrl_grpo_advantage")


def test_estimator_through_compute_advantage_is_grpo_on_world_model_rows_and_rho_times_it_on_anchors():
    hub = WMRLHub(4, 4, CorrectionConfig(anchor_fraction=0.5, min_pairs=4, refit_every=4, warmup_groups=1))
    use_local_hub(hub)
    rng = np.random.default_rng(0)
    seen_rho = []
    for step in (1, 2, 3):
        uids, scores, routes = run_step(hub, step, 4, 4, rng)
        ours = advantages(batch(uids, scores), "wmrl_grpo")
        grpo = advantages(batch(uids, scores), "grpo")
        assert ours.shape == grpo.shape == (16, T)
        for i, u in enumerate(uids):
            route, rho = routes[u]
            w = rho if route == "anchor" else 1.0
            torch.testing.assert_close(ours[i], grpo[i] * w, rtol=1e-5, atol=1e-6)
            if route == "anchor":
                seen_rho.append(rho)
    assert sum(r == "anchor" for r, _ in routes.values()) == 2  # half the groups of a step
    assert max(seen_rho) > 1.5  # rho left 1 after the one warm-up anchor group: the weight is applied
    # Dr.GRPO (no std division) is honoured through the algorithm config
    uids, scores, routes = run_step(hub, 4, 4, 4, rng)
    ours = advantages(batch(uids, scores), "wmrl_grpo", norm_adv_by_std_in_grpo=False)
    grpo = advantages(batch(uids, scores), "grpo", norm_adv_by_std_in_grpo=False)
    w = torch.tensor([routes[u][1] if routes[u][0] == "anchor" else 1.0 for u in uids])
    torch.testing.assert_close(ours, grpo * w.unsqueeze(1), rtol=1e-5, atol=1e-6)


def test_the_v1_trainers_path_gives_the_same_advantages_and_multi_output_rollouts_are_refused():
    """verl's v1 trainer calls compute_advantage_for_multi_trajectories with keys uid_session_index."""
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    hub = WMRLHub(3, 2, CorrectionConfig(anchor_fraction=0.5, warmup_groups=0))
    use_local_hub(hub)
    uids, scores, routes = run_step(hub, 1, 2, 3, np.random.default_rng(2))
    keys = [f"{u}_{j % 3}_0" for j, u in enumerate(uids)]

    def v1(est, data):
        return compute_advantage_for_multi_trajectories(data, keys, est, config=AlgoConfig(adv_estimator=est))

    ours = v1("wmrl_grpo", batch(uids, scores)).batch["advantages"]
    grpo = v1("grpo", batch(uids, scores)).batch["advantages"]
    w = torch.tensor([routes[u][1] if routes[u][0] == "anchor" else 1.0 for u in uids])
    torch.testing.assert_close(ours, grpo * w.unsqueeze(1), rtol=1e-5, atol=1e-6)
    # a multi-turn loop with one output per turn: more rows than rollouts in a group
    uids2, scores2, _ = run_step(hub, 2, 2, 3, np.random.default_rng(3))
    with pytest.raises(ValueError, match="several outputs per rollout"):
        advantages(batch(uids2 + uids2[:1], scores2 + [0.0]), "wmrl_grpo")


def test_kl_in_reward_is_refused():
    use_local_hub(WMRLHub(2, 1))
    with pytest.raises(ValueError, match="use_kl_in_reward"):
        advantages(batch(["a", "a"], [0.0, 1.0]), "wmrl_grpo", use_kl_in_reward=True)


def test_routing_is_whole_group_and_reproducible_in_any_arrival_order():
    def run(seed, order):
        hub = WMRLHub(3, 8, CorrectionConfig(anchor_fraction=0.25), seed=seed)
        got: dict[str, set] = {}
        for u, j in order:
            t = hub.route(u, step=int(u.split("-")[0]))
            hub.submit(u, j, route=t["route"], raw=0.5, real=0.5 if t["route"] == "anchor" else None)
            got.setdefault(u, set()).add(t["route"])
        return got, hub

    first_seen = [f"{s}-{k}" for s in (1, 2) for k in range(8)]
    order = [(u, j) for j in range(3) for u in first_seen]  # rollouts of different groups interleaved
    a, hub = run(0, order)
    assert all(len(r) == 1 for r in a.values())  # every rollout of a group has the group's route
    for s in (1, 2):
        assert sum(a[f"{s}-{k}"] == {"anchor"} for k in range(8)) == 2  # 0.25 x 8 per step
    b, _ = run(0, order)
    assert a == b
    # same first arrivals, rollouts in another order: the same routes
    c, _ = run(0, [(u, j) for u in first_seen for j in range(3)])
    assert a == c
    assert any(run(s, order)[0] != a for s in (1, 2, 3))  # the seed decides
    assert hub.stats()["open_groups"] == 0 and hub.stats()["anchor_groups"] == 4


def test_ungraded_rollouts_are_left_out_of_statistics_and_anchor_pairs():
    hub = WMRLHub(4, 1, CorrectionConfig(anchor_fraction=1.0, min_pairs=1, refit_every=1))
    use_local_hub(hub)
    t = hub.route("g", step=1)
    assert t["route"] == "anchor"
    reals = [0.9, None, 0.0, 0.3]  # rollout 1: the sandbox broke; rollout 2: the agent's code failed (a real 0)
    lengths = [6, 4, 5, 3]
    scores = []
    for j, (r, n) in enumerate(zip(reals, lengths)):
        out = hub.submit("g", j, route="anchor", raw=0.5, real=r, exec_cause=None if r is not None else "sandbox_unavailable",
                         exec_seconds=1.0, length=n)
        scores.append(out["score"])
    assert scores[1] == 0.0 and scores[2] == 0.0  # verl holds 0.0 for both
    assert hub.loop.corrector.debiaser.n_pairs == 3  # the ungraded rollout is no anchor pair
    adv = advantages(batch(["g"] * 4, scores, lengths), "wmrl_grpo")
    graded = torch.tensor([0.9, 0.0, 0.3])
    expect = (graded - graded.mean()) / (graded.std() + 1e-6) * t["rho"]
    torch.testing.assert_close(adv[[0, 2, 3], 0], expect, rtol=1e-5, atol=1e-6)
    assert adv[1].abs().sum() == 0
    assert hub.stats()["ungraded"] == {"sandbox_unavailable": 1}


def test_a_graded_zero_indistinguishable_from_an_ungraded_row_is_dropped_too():
    hub = WMRLHub(3, 1, CorrectionConfig(anchor_fraction=1.0))
    use_local_hub(hub)
    hub.route("g", step=1)
    for j, r in enumerate([0.0, None, 0.8]):
        hub.submit("g", j, route="anchor", raw=0.5, real=r, exec_cause=None if r is not None else "execution_error", length=T)
    plan = hub.advantage_plan(["g"] * 3, [0.0, 0.0, 0.8], [T, T, T])
    assert plan.graded == [False, False, True] and plan.n_ambiguous == 1
    assert hub.stats()["ambiguous_rows"] == 1


def _manager_for(n=2, timeout=5.0, local_dir="/tmp/wmrl-test-unused"):
    return _manager(None, n=n, timeout=timeout, local_dir=local_dir)


def _manager(tmp_path, *, n=2, timeout=5.0, local_dir=None):
    """A WMRLRewardManager on the test scorer (one per process and settings; a timed-out call's
    thread keeps the scorer until it returns, hence a time-out above the scorer's 1 s sleep
    except where the time-out is what is tested)."""
    from wmrl_envs.world_models.smollm2 import load_smollm2_tokenizer

    cfg = OmegaConf.create({
        "reward": {"timeout": timeout, "max_concurrent": 4,
                   "custom_reward_function": {"path": "pkg://agents.adapters.verl", "name": "compute_score",
                                              "reward_kwargs": {"scorer": "wmrl_test_scorers:text_scorer"}}},
        "actor_rollout_ref": {"rollout": {"n": n}}, "data": {"train_batch_size": 1},
        "trainer": {"default_local_dir": str(local_dir or tmp_path), "resume_mode": "disable"}})
    tok = load_smollm2_tokenizer()
    return WMRLRewardManager(cfg, tok, get_custom_reward_fn(cfg)), tok


def rollout(tok, text, uid, session, split="train"):
    """One rollout as verl's agent loop hands it to a reward manager (v1 trainer: uid, session_id)."""
    prompt = torch.tensor(tok("Write something.")["input_ids"])
    resp = torch.tensor(tok(text)["input_ids"])
    ids = torch.cat([prompt, resp]).unsqueeze(0)
    td = {"prompts": prompt.unsqueeze(0), "responses": resp.unsqueeze(0), "input_ids": ids,
          "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(ids.shape[1]).unsqueeze(0)}
    nt = {"uid": np.array([uid], dtype=object), "session_id": np.array([session], dtype=object),
          "global_steps": np.array([1], dtype=object), "data_source": np.array(["text"], dtype=object),
          "reward_model": np.array([{"ground_truth": "t"}], dtype=object),
          "extra_info": np.array([{"split": split}], dtype=object)}
    return DataProto.from_dict(tensors=td, non_tensors=nt), len(resp)


def test_reward_manager_routes_scores_and_treats_verl_timeouts_and_errors_as_ungraded(tmp_path):
    hub = WMRLHub(3, 1, CorrectionConfig(anchor_fraction=1.0, min_pairs=1, refit_every=1), max_ungraded_share=None)
    use_local_hub(hub)
    mgr, tok = _manager(tmp_path, n=3, timeout=0.3)
    outs, lens = [], []
    for j, text in enumerate(["aaab", "BOOM", "SLOW aaaa"]):
        data, n = rollout(tok, text, "u1", j)
        outs.append(mgr.loop.run_until_complete(mgr.run_single(data)))
        lens.append(n)
    info = [o["reward_extra_info"] for o in outs]
    assert info[0]["wmrl_route"] == "anchor" and info[0]["wmrl_ungraded"] == 0.0
    assert outs[0]["reward_score"] == pytest.approx(3 / 4)  # the real score
    assert info[0]["wmrl_raw"] == pytest.approx(0.4)  # the world model scored the anchor rollout too
    assert [i["wmrl_cause"] for i in info[1:]] == ["verl_error", "verl_timeout"]
    assert [o["reward_score"] for o in outs[1:]] == [0.0, 0.0]
    assert all(set(i) == set(info[0]) for i in info)  # the same keys on every row
    assert hub.loop.corrector.debiaser.n_pairs == 1
    assert hub.stats()["ungraded"] == {"verl_timeout": 1, "verl_error": 1}
    plan = hub.advantage_plan(["u1"] * 3, [o["reward_score"] for o in outs], lens)
    assert plan.graded == [True, False, False]


def test_the_stop_rule_fires_in_the_trainer_through_the_estimator():
    from wmrl_envs.core import TooManyUngradedError

    hub = WMRLHub(2, 1, CorrectionConfig(anchor_fraction=1.0))  # stop at 50% ungraded executions
    use_local_hub(hub)
    hub.route("g", step=1)
    for j in range(2):
        hub.submit("g", j, route="anchor", raw=0.5, real=None, exec_cause="sandbox_unavailable", length=T)
    with pytest.raises(TooManyUngradedError, match="sandbox_unavailable"):
        advantages(batch(["g", "g"], [0.0, 0.0]), "wmrl_grpo")


def test_validation_rows_are_evaluation_and_update_nothing(tmp_path):
    hub = WMRLHub(2, 1, CorrectionConfig(anchor_fraction=0.0, min_anchor_groups=0))
    use_local_hub(hub)
    mgr, tok = _manager(tmp_path)
    data, _ = rollout(tok, "aa", "v1", 0, split="test")
    out = mgr.loop.run_until_complete(mgr.run_single(data))
    assert out["reward_extra_info"]["wmrl_route"] == "anchor"  # eval_route: real execution
    assert out["reward_score"] == 1.0
    assert hub.loop.router.n_groups_routed == 0 and hub.loop.corrector.debiaser.n_pairs == 0


def test_compute_score_without_the_wmrl_manager_says_how_to_configure_it():
    import asyncio

    with pytest.raises(ValueError, match="WMRLRewardManager"):
        asyncio.run(compute_score("d", "x", "t", {"split": "train"}))


def test_state_survives_save_and_load_and_a_resume_continues_the_same_run(tmp_path):
    cfg = CorrectionConfig(anchor_fraction=0.5, min_pairs=4, refit_every=4, warmup_groups=1)
    state_dir = tmp_path / "wmrl_state"
    a = WMRLHub(3, 4, cfg, seed=3, state_dir=state_dir)
    use_local_hub(a)
    rng = np.random.default_rng(1)
    for step in (1, 2):
        uids, scores, _ = run_step(a, step, 4, 3, rng)
        advantages(batch(uids, scores), "wmrl_grpo")
    (tmp_path / "global_step_2").mkdir()  # verl checkpointed step 2
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2")
    saved_rng = np.random.default_rng(7)
    uids3, scores3, routes3 = run_step(a, 3, 4, 3, saved_rng)
    adv_a = advantages(batch(uids3, scores3), "wmrl_grpo")
    lines = [json.loads(x) for x in (state_dir / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2, 3] and lines[-1]["anchor_groups"] == 6
    assert sorted(p.name for p in state_dir.glob("step_*.json")) == ["step_2.json", "step_3.json"]

    verl_cfg = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path), "resume_mode": "auto"}})
    assert resume_step_from_config(verl_cfg) == 2
    b = WMRLHub(3, 4, cfg, seed=3, state_dir=state_dir, resume_step=resume_step_from_config(verl_cfg))
    assert b.n_train_steps == 2
    use_local_hub(b)
    uids_b, scores_b, routes_b = run_step(b, 3, 4, 3, np.random.default_rng(7))
    adv_b = advantages(batch(uids_b, scores_b), "wmrl_grpo")
    assert routes_b == routes3 and scores_b == scores3
    torch.testing.assert_close(adv_a, adv_b)
    assert b.stats()["anchor_pairs"] == a.stats()["anchor_pairs"]
    steps = [json.loads(x)["step"] for x in (state_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]  # step 3 of the first run was dropped on resume, then trained again
    with pytest.raises(ValueError, match="no WMRL state for it"):
        WMRLHub(3, 4, cfg, state_dir=state_dir, resume_step=1)
    disabled = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path), "resume_mode": "disable"}})
    assert resume_step_from_config(disabled) is None
    with pytest.warns(UserWarning, match="moved to"):
        WMRLHub(3, 4, cfg, state_dir=state_dir)  # a fresh run in the same folder
    assert not state_dir.exists() and (tmp_path / "wmrl_state.previous" / "step_3.json").is_file()


def test_the_hub_is_one_named_ray_actor_shared_by_processes():
    import ray

    from agents.adapters.verl_core import call_hub, connect_hub, get_hub

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        kwargs = {"group_size": 2, "groups_per_step": 4, "correction": {"anchor_fraction": 0.5}, "seed": 0}

        @ray.remote(num_cpus=0)
        def worker(uid):  # another process: connects by name, routes and submits one rollout
            from agents.adapters.verl_core import call_hub, connect_hub

            h = connect_hub(DEFAULT_HUB_NAME, **kwargs)
            t = call_hub(h, "route", uid, 1)
            call_hub(h, "submit", uid, os.getpid(), route=t["route"], raw=0.5, real=0.5, length=T)
            return t["route"], os.getpid()

        remote = ray.get([worker.remote(f"g{k}") for k in range(4)])
        hub = connect_hub(DEFAULT_HUB_NAME, **kwargs)
        assert get_hub() is not None
        local = [call_hub(hub, "route", f"g{k}", 1)["route"] for k in range(4)]
        assert [r for r, _ in remote] == local and local.count("anchor") == 2
        assert all(pid != os.getpid() for _, pid in remote)
        assert call_hub(hub, "stats")["world_model_predictions"] == 4
        # the reward manager and the estimator reach the same actor (async calls, get_hub by name)
        mgr, tok = _manager_for(n=2)
        outs = [mgr.loop.run_until_complete(mgr.run_single(rollout(tok, t, "m", j)[0])) for j, t in enumerate(["aab", "a"])]
        uids = [f"g{k}" for k in range(4)] + ["m", "m"]
        data = batch(uids, [0.5, 0.5, 0.5, 0.5] + [o["reward_score"] for o in outs])
        adv = advantages(data, "wmrl_grpo")
        torch.testing.assert_close(adv[:4, 0], torch.full((4,), 0.5))  # one row per group: verl's (mean 0, std 1)
        m = torch.tensor([o["reward_score"] for o in outs])
        rho = [o["reward_extra_info"]["wmrl_rho"] if o["reward_extra_info"]["wmrl_route"] == "anchor" else 1.0 for o in outs]
        torch.testing.assert_close(adv[4:, 0], (m - m.mean()) / (m.std() + 1e-6) * rho[0])
        assert call_hub(hub, "stats")["train_steps"] == 1 and call_hub(hub, "stats")["open_groups"] == 0
    finally:
        ray.shutdown()


@pytest.mark.parametrize("useful, expected", [(True, 0.1), (False, 0.5)])
def test_adaptive_anchor_fraction_follows_the_world_model_quality(useful, expected):
    """anchor_fraction='auto' in reward_kwargs.correction: the advisor's f* moves the fraction
    from its start (0.3) to f_min for a world model that tracks execution, to f_max for one that
    does not (under SGD's step law, auto_step_law='sgd', where a useless world model calls for
    f_max; the default, Adam's law with the run's ρ, calls for about 0.09, below this f_min)."""
    hub = WMRLHub(4, 10, {"anchor_fraction": "auto", "auto_start_fraction": 0.3, "auto_min_groups": 4,
                          "auto_window": 8, "f_min": 0.1, "f_max": 0.5, "cost_ratio": 0.01,
                          "min_pairs": 4, "refit_every": 4, "warmup_groups": 1, "auto_step_law": "sgd"})
    rng = np.random.default_rng(0)
    fractions = []
    for step in range(1, 7):
        uids, scores = [], []
        for k in range(10):
            u = f"{step}-{k}"
            t = hub.route(u, step=step)
            for j in range(4):
                real = float(rng.random())
                raw = real + 0.02 * rng.standard_normal() if useful else float(rng.random())
                out = hub.submit(u, j, route=t["route"], raw=raw, real=real if t["route"] == "anchor" else None,
                                 exec_seconds=3.0 if t["route"] == "anchor" else None, exec_cpu_seconds=3.0,
                                 wm_seconds=0.02, wm_cpu_seconds=0.02, length=T)
                uids.append(u)
                scores.append(out["score"])
        hub.advantage_plan(uids, scores, [T] * len(uids))
        fractions.append(hub.loop.router.anchor_fraction)
    assert fractions[0] == 0.3 and fractions[-1] == pytest.approx(expected)
