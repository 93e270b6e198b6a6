"""CorrectionLoop (wmrl_envs.core.loop, core.group): ρ at routing, closing, ungraded causes, evaluation, tickets, state round trips and loading a state saved with other settings, input checks, score_group and stats()."""

from __future__ import annotations

import json

import numpy as np
import pytest

from wmrl_envs.core import CorrectionConfig, CorrectionLoop
from wmrl_envs.world_models.base import WorldModelPrediction

class _EchoWM:
    """Scores an action with its own value (no env)."""

    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=float(a)) for a in actions]


def _varying_anchor_close(loop, ticket, offset=0.0):
    # real scores vary, the world model is off by a per-rollout amount: s² is defined
    return loop.close_group(ticket, [0.1 + offset, 0.9, 0.5, 0.2], [0.0, 1.0, 1.0, 0.0])


def _primed_loop():
    """A loop whose debiaser has fitted its one map, the identity on [0, 1] (ρ's warm-up counts
    only groups calibrated by a fitted map)."""
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0, min_pairs=4, refit_every=10_000, warmup_groups=1),
                          world_model=_EchoWM())
    loop.close_group(loop.open_group(), [0.0, 0.3, 0.6, 1.0], [0.0, 0.3, 0.6, 1.0])
    assert loop.corrector.debiaser.fitted and loop.corrector.denoiser.n_uncalibrated == 1 and loop.rho == 1.0
    return loop


def test_loop_rho_at_routing_even_when_a_later_group_closes_first():
    loop = _primed_loop()
    first, second = loop.open_group(), loop.open_group()
    assert (first.group_id, second.group_id) == (1, 2) and first.route == second.route == "anchor"
    assert first.rho == second.rho == 1.0
    late = _varying_anchor_close(loop, second)  # the later group's anchors arrive first
    assert late.group_id == 2 and late.advantage_weight == 1.0 and late.disagreement is not None
    assert loop.rho == 2.0  # warm-up of one group: calibrated at rho_target
    early = _varying_anchor_close(loop, first, offset=0.05)
    assert early.group_id == 1
    assert early.advantage_weight == 1.0  # the ρ of its routing, not the 2.0 known at its close
    assert loop.n_groups_started == loop.n_groups_closed == 3
    assert loop.corrector.debiaser.n_seen == 12 and loop.corrector.denoiser.n_scored_groups == 2
    third = loop.open_group()
    assert third.rho == loop.rho > 2.0  # the first group's disagreement moved the EMA on
    assert _varying_anchor_close(loop, third).advantage_weight == third.rho


def test_loop_close_with_rho_at_close_and_world_model_groups():
    loop = _primed_loop()
    a, b = loop.open_group(), loop.open_group()
    _varying_anchor_close(loop, b)
    assert _varying_anchor_close(loop, a, 0.05).advantage_weight == 1.0
    c = loop.open_group()
    d = loop.open_group()
    _varying_anchor_close(loop, c)
    rho_before_d = loop.rho  # ρ at d's close, before d's own update (not d.rho, the one at routing)
    assert rho_before_d != d.rho
    assert loop.close_group(d, [0.1, 0.9, 0.5, 0.2], [0.0, 1.0, 1.0, 0.0], rho_from="close").advantage_weight == rho_before_d
    wm = loop.open_group(route="world_model")
    out = loop.close_group(wm, [0.3, None, 0.7, 0.1], wm_causes=[None, "world_model_timeout", None, None])
    assert out.advantage_weight == 1.0 and out.rewards == [0.3, None, 0.7, 0.1]
    assert out.ungraded_causes == [None, "world_model_timeout", None, None]
    assert loop.ledger.count("ungraded:world_model_timeout") == 1


def test_loop_ungraded_causes_per_rollout_on_anchors():
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0), world_model=_EchoWM(), max_ungraded_share=None)
    t = loop.open_group()
    out = loop.close_group(t, [None, 0.5, 0.4], [1.0, None, 0.0], wm_causes=["world_model_error", None, None],
                           exec_causes=[None, "sandbox_unavailable", None])
    assert out.rewards == [1.0, None, 0.0]
    assert out.ungraded_causes == [None, "sandbox_unavailable", None]
    # the failed world-model score of row 0 leaves only the anchor pair out
    assert loop.ledger.ungraded_counts() == {"sandbox_unavailable": 1, "world_model_error": 1}
    assert loop.corrector.debiaser.n_seen == 1


def test_loop_set_anchor_fraction_takes_effect_at_the_next_drawn_step():
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.0), world_model=_EchoWM(), groups_per_step=4)
    assert loop.plan_step() == ["world_model"] * 4
    loop.set_anchor_fraction(1.0)
    assert [loop.open_group().route for _ in range(4)] == ["world_model"] * 4  # planned before the change
    assert [loop.open_group().route for _ in range(4)] == ["anchor"] * 4  # the next block is drawn at 1.0
    assert loop.plan_step(2) == ["anchor", "anchor"]
    assert loop.router.anchor_fraction == 1.0
    with pytest.raises(ValueError, match=r"anchor_fraction must be a number in \[0, 1\]"):
        loop.set_anchor_fraction(1.5)
    no_wm = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0))
    with pytest.raises(ValueError, match="without a world model"):
        no_wm.set_anchor_fraction(0.5)
    with pytest.raises(ValueError, match="no world model"):
        no_wm.open_group(route="world_model")


def test_loop_evaluation_freezes_and_uses_eval_route():
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5), world_model=_EchoWM(), eval_route="world_model")
    loop.training = False
    t = loop.open_group()
    assert t.route == "world_model" and not t.training and loop.router.n_groups_routed == 0
    assert loop.eval_ticket().group_id is None
    loop.close_group(loop.open_group(route="anchor"), [0.1, 0.9], [0.0, 1.0])
    assert loop.corrector.debiaser.n_seen == 0 and loop.ungraded.n_rollouts == 0


def test_loop_state_round_trip_and_version_check(tmp_path):
    cfg = CorrectionConfig(anchor_fraction=0.5, min_pairs=2, refit_every=2, warmup_groups=1)
    loop = CorrectionLoop(cfg, world_model=_EchoWM(), seed=3)
    for _ in range(5):
        t = loop.open_group()
        loop.close_group(t, [0.2, 0.8, 0.4], [0.0, 1.0, 1.0] if t.route == "anchor" else None)
    loop.count_episodes(15)
    path = tmp_path / "loop.json"
    loop.save(path)
    state = json.loads(path.read_text())
    assert state["version"] == CorrectionLoop.STATE_VERSION == 1
    other = CorrectionLoop(cfg, world_model=_EchoWM(), seed=99)
    other.load(path)
    assert other.state_dict() == loop.state_dict()
    assert [other.open_group().route for _ in range(6)] == [loop.open_group().route for _ in range(6)]
    for bad in ({**state, "version": 99}, {k: v for k, v in state.items() if k != "version"}):
        with pytest.raises(ValueError, match="correction state version"):
            other.load_state_dict(bad)


def test_loop_mutations_from_many_threads_add_up():
    from concurrent.futures import ThreadPoolExecutor

    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5, min_pairs=4, refit_every=4), world_model=_EchoWM())

    def work(k):
        t = loop.open_group()
        preds = loop.predict([None] * 3, [0.1 * (k % 10), 0.5, 0.9])
        loop.count_episodes(3)
        return loop.close_group(t, [p.score for p in preds], [0.0, 0.5, 1.0] if t.route == "anchor" else None)

    with ThreadPoolExecutor(max_workers=4) as pool:
        outs = list(pool.map(work, range(40)))
    assert sorted(o.group_id for o in outs) == list(range(40))
    n_anchor = sum(o.route == "anchor" for o in outs)
    assert loop.n_groups_started == loop.n_groups_closed == 40 and loop.n_episodes == 120
    assert loop.ledger.count("world_model") == 120 and loop.corrector.debiaser.n_seen == 3 * n_anchor
    assert loop.corrector.groups_corrected == {"anchor": n_anchor, "world_model": 40 - n_anchor}


# ---------------------------------------------------------------- loop: tickets, state, input checks
def _anchor_loop(**kw):
    return CorrectionLoop(CorrectionConfig(anchor_fraction=1.0, min_pairs=4, refit_every=4, warmup_groups=1),
                          world_model=_EchoWM(), **kw)


RAW, REAL = [0.1, 0.4, 0.6, 0.9], [0.0, 0.5, 0.5, 1.0]


def test_close_group_follows_the_tickets_training_flag_not_the_loops():
    loop = _anchor_loop()
    train_ticket = loop.open_group("anchor")
    loop.training = False
    corr = loop.close_group(train_ticket, RAW, REAL)  # result arriving after its step, in evaluation
    assert loop.corrector.debiaser.n_seen == 4 and loop.corrector.denoiser.n_uncalibrated == 1  # before the first fit
    assert corr.disagreement is not None and corr.advantage_weight == 1.0
    assert loop.training is False and loop.corrector.debiaser.training is False  # flag restored
    assert loop.corrector.denoiser.training is False
    loop.training = True
    loop.close_group(loop.eval_ticket(), RAW, REAL)  # evaluation ticket closed while training
    assert loop.corrector.debiaser.n_seen == 4 and loop.corrector.denoiser.n_uncalibrated == 1
    assert loop.corrector.calibration_error()["n"] == 4


def test_a_ticket_closes_once_and_not_after_a_load():
    from wmrl_envs.core.loop import GroupTicket

    loop = _anchor_loop()
    t = loop.open_group("anchor")
    loop.close_group(t, RAW, REAL)
    with pytest.raises(ValueError, match="group 0 is not open"):
        loop.close_group(t, RAW, REAL)
    with pytest.raises(ValueError, match="group 7 is not open"):
        loop.close_group(GroupTicket(7, "anchor", 1.0, True), RAW, REAL)
    assert loop.corrector.debiaser.n_seen == 4 and loop.n_groups_closed == 1
    with pytest.raises(TypeError, match="GroupTicket"):
        loop.close_group({"group_id": 1}, RAW, REAL)
    stale = loop.open_group("anchor")
    state = loop.state_dict()
    loop.load_state_dict(state)
    with pytest.raises(ValueError, match="group 1 is not open"):
        loop.close_group(stale, RAW, REAL)
    fresh = loop.open_group("anchor")
    assert fresh.group_id == 2
    loop.close_group(fresh, RAW, REAL)
    assert loop.corrector.debiaser.n_seen == 8 and loop.n_groups_closed == 2


def test_a_ticket_from_before_a_load_cannot_close_the_group_that_reuses_its_id():
    """Issue 25, finding 6: a load resets the group counter, so a new group gets the id of a
    ticket opened before the load; that old ticket must be refused, the new one must close."""
    loop = _anchor_loop()
    loop.close_group(loop.open_group("anchor"), RAW, REAL)
    state = loop.state_dict()  # saved at a group boundary: the next id is 1
    stale = loop.open_group("anchor")
    loop.load_state_dict(state)
    fresh = loop.open_group("anchor")
    assert stale.group_id == fresh.group_id == 1
    with pytest.raises(ValueError, match="group 1 is not open: its ticket was opened before a load_state_dict"):
        loop.close_group(stale, RAW, REAL)
    assert loop.n_groups_closed == 1 and loop.corrector.debiaser.n_seen == 4  # nothing updated
    loop.close_group(fresh, RAW, REAL)  # the ticket of the current epoch closes
    assert loop.n_groups_closed == 2 and loop.corrector.debiaser.n_seen == 8
    # a load of the loop's own state (a resume in place) also invalidates the open tickets
    again = loop.open_group("anchor")
    loop.load_state_dict(loop.state_dict())
    with pytest.raises(ValueError, match="before a load_state_dict"):
        loop.close_group(again, RAW, REAL)
    # a ticket of another loop with an id that is open here is refused too
    other, mine = _anchor_loop(), _anchor_loop()
    theirs, own = other.open_group("anchor"), mine.open_group("anchor")
    assert theirs.group_id == own.group_id == 0
    with pytest.raises(ValueError, match="group 0 is not open: its ticket comes from another loop"):
        mine.close_group(theirs, RAW, REAL)
    mine.close_group(own, RAW, REAL)
    other.close_group(theirs, RAW, REAL)
    assert mine.n_groups_closed == other.n_groups_closed == 1


def test_load_state_dict_validates_first_and_changes_nothing_on_error():
    loop = _anchor_loop()
    loop.close_group(loop.open_group("anchor"), RAW, REAL)
    good = json.loads(json.dumps(loop.state_dict()))
    other = _anchor_loop(seed=9)
    before = json.dumps(other.state_dict())
    bad = [
        ({k: v for k, v in good.items() if k != "ungraded"}, "lacks the keys \\['ungraded'\\]"),
        ({**good, "version": 1.0}, "version 1.0 is not supported"),
        ({**good, "version": True}, "version True is not supported"),
        ({k: v for k, v in good.items() if k != "version"}, "version None"),
        ([("version", 1)], "must be a dict"),
        ({**good, "ungraded": None}, "malformed"),
        ({**good, "n_episodes": "many"}, "malformed"),
    ]
    for state, msg in bad:
        with pytest.raises(ValueError, match=msg):
            other.load_state_dict(state)
        assert json.dumps(other.state_dict()) == before
    other.load_state_dict(good)
    assert other.state_dict() == good


def test_loop_input_checks():
    loop = _anchor_loop()
    for n in (0, -1, 2.7, True):
        with pytest.raises(ValueError, match="groups_in_step must be an integer >= 1"):
            loop.plan_step(n)
    assert loop.plan_step(np.int64(2)) == ["anchor", "anchor"] and loop.plan_step() == ["anchor"]
    with pytest.raises(ValueError, match="groups_per_step must be an integer >= 1"):
        _anchor_loop(groups_per_step=2.7)
    t = loop.open_group("anchor")
    with pytest.raises(ValueError, match="wm_causes has 2 entries but raw has 4"):
        loop.close_group(t, RAW, REAL, wm_causes=[None, None])
    with pytest.raises(ValueError, match="exec_causes has 5 entries but raw has 4"):
        loop.close_group(t, RAW, REAL, exec_causes=[None] * 5)
    with pytest.raises(ValueError, match="rho_from must be 'routing' or 'close'"):
        loop.close_group(t, RAW, REAL, rho_from="bogus")
    assert loop.n_groups_closed == 0 and loop.corrector.debiaser.n_seen == 0
    loop.close_group(t, RAW, REAL)  # still open after the refused calls
    wm_loop = CorrectionLoop(CorrectionConfig(), world_model=_EchoWM())
    for f in (True, "0.5", None, 1.5):
        with pytest.raises(ValueError, match="anchor_fraction must be a number in \\[0, 1\\]"):
            wm_loop.set_anchor_fraction(f)
    wm_loop.set_anchor_fraction(np.float64(0.5))
    assert wm_loop.router.anchor_fraction == 0.5
    with pytest.raises(TypeError, match="config must be a CorrectionConfig"):
        CorrectionLoop({"anchor_fraction": 0.5}, world_model=_EchoWM())


def test_loop_config_reports_the_settings_in_use():
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5), world_model=_EchoWM())
    loop.set_anchor_fraction(0.25)
    assert loop.config == CorrectionConfig(anchor_fraction=0.25)
    own = CorrectionLoop(world_model=_EchoWM(),
                         corrector=CorrectionConfig(min_pairs=7, rho_mode="parameter_free").build_corrector(),
                         router=CorrectionConfig(anchor_fraction=0.2).build_router(1))
    assert own.config == CorrectionConfig(anchor_fraction=0.2, min_pairs=7, rho_mode="parameter_free")
    with pytest.warns(UserWarning, match="anchor_fraction: configured 0.25, saved 0.2"):
        loop.load_state_dict(own.state_dict())
    assert loop.config == CorrectionConfig(anchor_fraction=0.2, min_pairs=7, rho_mode="parameter_free")


# ---------------------------------------------------------------- loading a state with other settings
def _saved_wrapper_state(tmp_path, correction, groups_per_step=4):
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.envs.guess import GuessEnv, guess_score
    from wmrl_envs.world_models.synthetic import SyntheticWorldModel

    w = AnchoredWorldModelWrapper(GuessEnv(), SyntheticWorldModel(guess_score), correction=correction,
                                  group_size=2, groups_per_step=groups_per_step, seed=1)
    for k in range(6):
        w.score_group([np.array([0.1 * k], dtype=np.float32), np.array([0.9], dtype=np.float32)],
                      options={"target": 0.5})
    path = tmp_path / "wmrl_state.json"
    w.save(path)
    return w, path


def _fresh_wrapper(correction, groups_per_step=4):
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.envs.guess import GuessEnv, guess_score
    from wmrl_envs.world_models.synthetic import SyntheticWorldModel

    return AnchoredWorldModelWrapper(GuessEnv(), SyntheticWorldModel(guess_score), correction=correction,
                                     group_size=2, groups_per_step=groups_per_step, seed=7)


def test_loading_a_state_saved_with_other_settings_warns_once_and_uses_the_saved_ones(tmp_path):
    import warnings

    saved_cfg = CorrectionConfig(anchor_fraction=0.25, anchor_window=1, min_pairs=8, refit_every=4)
    src, path = _saved_wrapper_state(tmp_path, saved_cfg)
    w = _fresh_wrapper(CorrectionConfig(anchor_fraction=0.05, anchor_window=10, min_pairs=8, refit_every=4,
                                        rho_mode="parameter_free"), groups_per_step=20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w.load(path)
    assert len(caught) == 1 and caught[0].category is UserWarning
    msg = str(caught[0].message)
    assert "saved values are used" in msg
    for piece in ("anchor_fraction: configured 0.05, saved 0.25", "anchor_window: configured 10, saved 1",
                  "rho_mode: configured 'parameter_free', saved 'calibrated'",
                  "groups_per_step: configured 20, saved 4"):
        assert piece in msg
    for same in ("min_anchor_groups", "min_pairs", "refit_every", "half_life", "debias:"):
        assert same not in msg  # equal settings are not listed
    # the saved settings are the ones in use, and the run continues the saved one
    assert w.loop.config == saved_cfg and w.loop.groups_per_step == 4
    assert w.loop.corrector.denoiser.mode == "calibrated"
    assert [w.loop.next_route() for _ in range(12)] == [src.loop.next_route() for _ in range(12)]


def test_loading_a_state_saved_with_the_same_settings_is_silent(tmp_path):
    import warnings

    cfg = CorrectionConfig(anchor_fraction=0.25, anchor_window=3, min_pairs=8, refit_every=4)
    _, path = _saved_wrapper_state(tmp_path, cfg)
    w = _fresh_wrapper(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w.load(path)  # a resume with the run's own settings: no warning
    assert w.loop.config == cfg


def test_loop_debiaser_and_denoiser_settings_are_named_and_a_failed_load_does_not_warn():
    import warnings

    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5, buffer_size=300, half_life=16.0, denoise=False),
                          world_model=_EchoWM())
    state = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5), world_model=_EchoWM()).state_dict()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="malformed"):
            loop.load_state_dict({**state, "n_episodes": "many"})
        assert caught == []  # nothing was loaded, nothing replaced
    with pytest.warns(UserWarning) as record:
        loop.load_state_dict(state)
    assert len(record) == 1
    msg = str(record[0].message)
    assert msg.startswith("CorrectionLoop.load_state_dict")
    for piece in ("denoise: configured False, saved True", "buffer_size: configured 300, saved 5000",
                  "half_life: configured 16.0, saved 64.0"):
        assert piece in msg
    assert "anchor_fraction" not in msg and loop.config == CorrectionConfig(anchor_fraction=0.5)


def test_loop_score_group_predicts_routes_executes_anchors_only_and_closes():
    """CorrectionLoop.score_group: the one group call sequence (predict, route, execute, close)."""
    from wmrl_envs.core import AnchorExecution

    class WM:
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=float(a) / 10) for a in actions]

    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5), world_model=WM(), seed=0)
    called = []

    def execute(ticket):
        called.append(ticket.group_id)
        return AnchorExecution(real=[1.0, None, 0.0], causes=[None, "execution_error", None],
                               infos=[{}, {"error": "boom"}, {}], record=[(0.5, 0.25)] * 3)

    anchor = loop.score_group([7] * 3, [1, 2, 3], execute, route="anchor")
    assert called == [0] and anchor.route == "anchor" and anchor.group_id == 0
    assert anchor.rewards == [1.0, None, 0.0]
    assert anchor.correction.raw_scores == [0.1, 0.2, 0.3]
    assert anchor.infos[1]["wmrl"]["ungraded_cause"] == "execution_error"
    assert loop.ledger.count("execution") == 3 and loop.ledger.cpu_seconds("execution") == pytest.approx(0.75)
    wm = loop.score_group([7] * 3, [1, 2, 3], execute, route="world_model")
    assert called == [0] and wm.route == "world_model" and wm.observations == [7, 7, 7]
    assert loop.n_episodes == 6 and loop.n_groups_closed == 2
    with pytest.raises(ValueError, match="anchor group"):
        loop.score_group([7] * 3, [1, 2, 3], route="anchor")
    with pytest.raises(ValueError, match="contexts"):
        loop.score_group([7] * 2, [1, 2, 3], execute)


def test_loop_stats_reports_what_a_trainer_logs():
    class WM:
        def predict(self, contexts, actions):
            return [WorldModelPrediction(score=float(a)) for a in actions]

    from wmrl_envs.core import AnchorExecution

    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.5), world_model=WM(), seed=3)
    for k in range(6):
        loop.score_group([0] * 2, [k, k + 1], lambda t: AnchorExecution(real=[0.0, 1.0], record=[(0.1, 0.1)] * 2))
    s = loop.stats()
    json.dumps(s)
    assert s["groups_closed"] == s["groups_started"] == 6 and s["groups_open"] == 0 and s["episodes"] == 12
    assert s["anchor_groups_routed"] == loop.router.n_anchor_groups >= 1
    assert s["executions"] == 2 * s["anchor_groups_routed"] and s["world_model_predictions"] == 12
    assert s["anchor_pairs"] == loop.corrector.debiaser.n_pairs == 2 * s["anchor_groups_routed"]
    assert s["rho"] == loop.rho and s["adaptive"] is None and s["ungraded_rollouts"] == 0
