"""The anchor floor per window of steps (``AnchorRouter(anchor_window=...)``, issue 11 item 3).

``min_anchor_groups`` holds per window of ``anchor_window`` consecutive steps: with few groups
per step a small anchor fraction stays the realised one. Window 1 is the per-step floor of
before, draw for draw: it is compared with the earlier routing algorithm, written out below.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import tyro

from wmrl_envs.core import AnchorRouter, CorrectionConfig, CorrectionLoop


def _per_step_floor_router(fraction: float, min_anchor_groups: int, seed: int):
    """The routing of ``AnchorRouter`` before windows existed: stochastic rounding, then a floor
    of ``min_anchor_groups`` on every step, then the free-slot cap (same generator calls)."""
    rng = np.random.default_rng(seed)

    def route(n: int, free_slots: int | None = None) -> list[str]:
        expected = fraction * n
        k = int(np.floor(expected))
        if rng.random() < expected - k:
            k += 1
        if fraction > 0:
            k = max(k, min(min_anchor_groups, n))
        if free_slots is not None:
            k = min(k, free_slots)
        k = min(k, n)
        chosen = set(rng.choice(n, size=k, replace=False).tolist()) if k else set()
        return ["anchor" if i in chosen else "world_model" for i in range(n)]

    return route, rng


def _windows(routes_per_step: list[list[str]], window: int) -> list[int]:
    counts = [r.count("anchor") for r in routes_per_step]
    return [sum(counts[i:i + window]) for i in range(0, len(counts), window)]


@pytest.mark.parametrize("fraction, min_groups, seed", [(0.1, 1, 0), (0.05, 1, 3), (0.3, 2, 7), (0.25, 0, 11)])
def test_window_one_routes_exactly_as_the_per_step_floor(fraction, min_groups, seed):
    new = AnchorRouter(fraction, min_anchor_groups=min_groups, seed=seed, anchor_window=1)
    old, old_rng = _per_step_floor_router(fraction, min_groups, seed)
    sizes = np.random.default_rng(100 + seed).integers(1, 11, size=300)
    for step, n in enumerate(sizes.tolist()):
        free = (step % 5) if step % 7 == 0 else None  # sometimes capped by free slots
        assert new.route_step(n, free_slots=free) == old(n, free_slots=free), step
    assert new._rng.bit_generator.state == old_rng.bit_generator.state  # same draws, none extra
    # the default is window 1, and CorrectionConfig builds the same router
    a, b = AnchorRouter(fraction, min_groups, seed), CorrectionConfig(
        anchor_fraction=fraction, min_anchor_groups=min_groups).build_router(seed)
    assert [a.route_step(4) for _ in range(50)] == [b.route_step(4) for _ in range(50)]


@pytest.mark.parametrize("window", [1, 5])
def test_ten_groups_per_step_at_f_0_1_realise_0_1_with_either_window(window):
    router = AnchorRouter(0.1, min_anchor_groups=1, seed=0, anchor_window=window)
    steps = [router.route_step(10) for _ in range(200)]
    # f * n = 1 anchor group per step: the floor never adds any, with either window
    assert router.realised_fraction == pytest.approx(0.1, abs=1e-12)
    assert router.n_anchor_groups == 200 and min(_windows(steps, window)) >= 1


def test_four_groups_per_step_a_window_of_ten_restores_the_configured_fraction():
    per_step = AnchorRouter(0.1, seed=0, anchor_window=1)
    for _ in range(200):
        per_step.route_step(4)
    assert per_step.realised_fraction == pytest.approx(0.25)  # the floor of 1 per step dominates

    router = AnchorRouter(0.1, seed=0, anchor_window=10)
    steps = [router.route_step(4) for _ in range(200)]
    assert min(_windows(steps, 10)) >= 1
    # per step: Bernoulli(0.4) anchor groups; per window of 10 steps the floor adds one only when
    # all ten drew none, probability 0.6**10
    expected = (10 * 0.4 + 0.6 ** 10) / 40
    sd = math.sqrt(20 * 10 * 0.4 * 0.6) / 800  # of the realised fraction over 20 windows
    assert abs(router.realised_fraction - expected) < 4 * sd


def test_two_groups_per_step_at_f_0_05_with_a_window_of_ten():
    router = AnchorRouter(0.05, min_anchor_groups=1, seed=0, anchor_window=10)
    steps = [router.route_step(2) for _ in range(100)]
    per_window = _windows(steps, 10)
    assert len(per_window) == 10 and min(per_window) >= 1
    assert 0.05 <= router.realised_fraction <= 0.1
    # the floor acts on a window's last step only, and only for a window that had no anchor yet
    for w in range(10):
        window_steps = steps[10 * w:10 * w + 10]
        if sum(s.count("anchor") for s in window_steps[:-1]) == 0:
            assert window_steps[-1].count("anchor") == 1
    # with the floor per step the same schedule realises one anchor group per step: 0.5
    per_step = AnchorRouter(0.05, min_anchor_groups=1, seed=0)
    for _ in range(100):
        per_step.route_step(2)
    assert per_step.realised_fraction == 0.5


def test_floor_of_two_per_window_fills_the_missing_groups_on_the_last_step():
    router = AnchorRouter(0.01, min_anchor_groups=2, seed=4, anchor_window=3)
    steps = [router.route_step(5) for _ in range(30)]
    assert all(c >= 2 for c in _windows(steps, 3))
    # the free-slot cap still wins over the floor
    capped = AnchorRouter(0.01, min_anchor_groups=2, seed=4, anchor_window=1)
    assert capped.route_step(5, free_slots=1).count("anchor") == 1
    # anchor_fraction 0: no floor at all
    none = AnchorRouter(0.0, min_anchor_groups=2, anchor_window=3)
    assert sum(none.route_step(5).count("anchor") for _ in range(9)) == 0


def test_state_round_trip_mid_window_continues_identically():
    a = AnchorRouter(0.05, seed=9, anchor_window=10)
    for _ in range(13):  # 3 steps into the second window
        a.route_step(2)
    state = json.loads(json.dumps(a.state_dict()))
    assert state["anchor_window"] == 10 and state["window_anchor_groups"] == a.window_anchor_groups
    b = AnchorRouter(0.5, seed=0, anchor_window=1)
    with pytest.warns(UserWarning, match="anchor_fraction: configured 0.5, saved 0.05, anchor_window: configured 1, saved 10"):
        b.load_state_dict(state)
    assert (b.anchor_window, b.window_anchor_groups, b.n_steps) == (10, a.window_anchor_groups, 13)
    assert [a.route_step(2) for _ in range(40)] == [b.route_step(2) for _ in range(40)]
    assert b.realised_fraction == a.realised_fraction


def test_a_state_without_a_window_loads_as_window_one():
    a = AnchorRouter(0.1, seed=2)
    for _ in range(5):
        a.route_step(4)
    old_state = {k: v for k, v in a.state_dict().items() if k not in ("anchor_window", "window_anchor_groups")}
    b = AnchorRouter(0.1, seed=0, anchor_window=7)
    with pytest.warns(UserWarning, match=r"\(anchor_window: configured 7, saved 1\)"):
        b.load_state_dict(old_state)
    assert b.anchor_window == 1
    assert [a.route_step(4) for _ in range(20)] == [b.route_step(4) for _ in range(20)]


@pytest.mark.parametrize("window", [0, -1, 1.5, True, "2"])
def test_bad_window_is_refused(window):
    with pytest.raises(ValueError, match="anchor_window must be an integer number of steps >= 1"):
        AnchorRouter(0.1, anchor_window=window)
    with pytest.raises(ValueError, match="CorrectionConfig.anchor_window must be an integer number of steps >= 1"):
        CorrectionConfig(anchor_window=window)
    router = AnchorRouter(0.1, seed=1, anchor_window=4)
    before = router.state_dict()
    with pytest.raises(ValueError, match="anchor_window"):
        router.load_state_dict({**before, "anchor_window": window, "n_steps": 99})
    assert router.state_dict() == before  # nothing changed


def test_config_builds_the_window_and_the_loop_reads_it_back():
    cfg = CorrectionConfig(anchor_fraction=0.05, anchor_window=np.int64(10))
    router = cfg.build_router(seed=3)
    assert (router.anchor_window, router.min_anchor_groups, router.seed) == (10, 1, 3)
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=0.05), world_model=object.__new__(_WM))
    assert loop.config.anchor_window == 1
    with pytest.warns(UserWarning, match=r"CorrectionLoop.load_state_dict: .*\(anchor_window: configured 1, saved 10\)"):
        loop.load_state_dict({**loop.state_dict(), "router": router.state_dict()})
    assert loop.router.anchor_window == 10 and loop.config.anchor_window == 10


class _WM:
    def predict(self, contexts, actions):  # pragma: no cover - never called here
        raise AssertionError


def test_anchor_window_flag_through_tyro():
    from agents.train.config import PRESETS, TrainConfig

    cfg = tyro.cli(TrainConfig, default=PRESETS["tiny"], args=["--anchor-window", "10"])
    assert cfg.correction.anchor_window == 10
    assert TrainConfig().correction.anchor_window == 1


def test_sb3_sub_env_routers_take_the_window_of_the_correction_config():
    pytest.importorskip("stable_baselines3")
    from agents.adapters.sb3 import make_anchored_vec_env
    from wmrl_envs.envs.guess import GuessEnv, guess_score
    from wmrl_envs.world_models.synthetic import SyntheticWorldModel

    cfg = CorrectionConfig(anchor_fraction=0.05, anchor_window=10)
    venv = make_anchored_vec_env(GuessEnv, SyntheticWorldModel(guess_score), n_envs=2, correction=cfg,
                                 group_size=2, monitor=False)
    routers = [e.loop.router for e in venv.venv.envs]
    assert [r.anchor_window for r in routers] == [10, 10]
    assert all(e.loop.config.anchor_window == 10 for e in venv.venv.envs)


def test_router_load_names_the_settings_it_replaces_and_is_silent_when_equal():
    import warnings

    saved = AnchorRouter(0.25, min_anchor_groups=2, seed=4, anchor_window=1)
    saved.route_step(4)
    state = json.loads(json.dumps(saved.state_dict()))
    same = AnchorRouter(0.25, min_anchor_groups=2, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same.load_state_dict(state)  # same settings (another seed): silent
    other = AnchorRouter(0.05, min_anchor_groups=2, seed=0, anchor_window=10)
    with pytest.warns(UserWarning) as record:
        other.load_state_dict(state)
    assert len(record) == 1
    msg = str(record[0].message)
    assert "anchor_fraction: configured 0.05, saved 0.25" in msg and "anchor_window: configured 10, saved 1" in msg
    assert "min_anchor_groups" not in msg and "saved values are used" in msg
    assert (other.anchor_fraction, other.anchor_window, other.min_anchor_groups) == (0.25, 1, 2)
    quiet = AnchorRouter(0.05, seed=0, anchor_window=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet.load_state_dict(state, warn=False)  # the loop's call: it warns once for all settings
    assert quiet.anchor_fraction == 0.25


# ---------------------------------------------------------------- AnchorRouter: fraction, floor, arguments, state
@pytest.mark.parametrize("fraction,n_groups", [(0.1, 8), (0.1, 10), (0.25, 16), (0.5, 4), (0.3, 7)])
def test_router_fraction_and_minimum(fraction, n_groups):
    router = AnchorRouter(anchor_fraction=fraction, seed=1)
    counts = []
    for _ in range(2000):
        routes = router.route_step(n_groups)
        assert len(routes) == n_groups
        k = routes.count("anchor")
        assert k >= 1  # at least one anchor group per step
        counts.append(k)
    expected = max(fraction, 1.0 / n_groups) if fraction * n_groups < 1 else fraction
    assert router.realised_fraction == pytest.approx(expected, abs=0.02)
    assert router.n_anchor_groups == sum(counts)


def test_router_zero_fraction_has_no_anchors_and_cap():
    assert AnchorRouter(0.0).route_step(8).count("anchor") == 0
    assert AnchorRouter(1.0).route_step(8).count("anchor") == 8
    assert AnchorRouter(1.0).route_step(8, free_slots=3).count("anchor") == 3
    assert AnchorRouter(0.1).route_step(8, free_slots=0).count("anchor") == 0


@pytest.mark.parametrize("kwargs", [{"anchor_fraction": -0.1}, {"anchor_fraction": 1.5}, {"min_anchor_groups": -1}])
def test_router_rejects_bad_args(kwargs):
    with pytest.raises(ValueError):
        AnchorRouter(**kwargs)


def test_router_state_roundtrip():
    a = AnchorRouter(0.3, seed=5)
    for _ in range(7):
        a.route_step(5)
    b = AnchorRouter(0.9, seed=0)
    with pytest.warns(UserWarning, match="anchor_fraction: configured 0.9, saved 0.3"):
        b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert [a.route_step(5) for _ in range(10)] == [b.route_step(5) for _ in range(10)]
    assert a.realised_fraction == b.realised_fraction
