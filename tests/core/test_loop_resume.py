"""A resumed CorrectionLoop repeats the uninterrupted run group for group, whatever the world model
(core.loop_state): a frozen world model with a random stream has its state saved too; one without
``state_dict`` makes saving warn."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from wmrl_envs.core import CorrectionConfig, CorrectionLoop
from wmrl_envs.core.group import AnchorExecution
from wmrl_envs.envs.autoresearch.embedding_world_model import DegradedWorldModel
from wmrl_envs.envs.known_truth import BreakingWorldModel, KnownTruthEnv, KnownTruthWorldModel, WorldModelError
from wmrl_envs.world_models.synthetic import SyntheticWorldModel
from wmrl_envs.world_models.base import WorldModelPrediction

G, N_GROUPS, RESUME_AT = 4, 240, 120
ENV = KnownTruthEnv(n_tasks=4, n_actions=24, outcome_noise_std=0.0)


def _loop(world_model) -> CorrectionLoop:
    return CorrectionLoop(CorrectionConfig(anchor_fraction=0.25, min_pairs=16, refit_every=8, warmup_groups=4),
                          world_model=world_model, seed=3)


def _groups(loop: CorrectionLoop, start: int, stop: int) -> list[tuple]:
    """Score groups ``start..stop-1``; each group's task, actions and real scores come from its own
    index (the same whether the run was resumed or not)."""
    out = []
    for k in range(start, stop):
        rng = np.random.default_rng(1000 + k)
        task = k % ENV.n_tasks
        actions = [int(a) for a in rng.integers(0, ENV.n_actions, G)]
        real = [float(np.clip(ENV.mu[task, a] + rng.normal(0, 0.1), 0, 1)) for a in actions]
        res = loop.score_group([task] * G, actions, lambda t: AnchorExecution(real=real))
        out.append((res.route, [round(r, 12) for r in res.rewards], round(res.advantage_weight, 12),
                    [round(x, 12) for x in res.correction.raw_scores]))
    return out


@pytest.mark.parametrize("make_wm", [
    lambda: KnownTruthWorldModel(ENV, WorldModelError(noise_std=0.15), seed=7),
    lambda: SyntheticWorldModel(lambda c, a: float(ENV.mu[c, a]), noise_std=0.15, seed=7),
    # breaks at prediction 600 (group 150 of 240): after the resume point, so the count must be restored too
    lambda: BreakingWorldModel(ENV, WorldModelError(noise_std=0.15), WorldModelError(noise_std=0.3, information=0.3),
                               break_after=600, seed=7),
    lambda: DegradedWorldModel(KnownTruthWorldModel(ENV, WorldModelError(noise_std=0.1), seed=7), information=0.5,
                               seed=3, noise_pool=[]),
], ids=["known_truth", "synthetic", "breaking", "degraded"])
def test_a_resumed_run_repeats_the_uninterrupted_one_with_a_stochastic_frozen_world_model(make_wm):
    """Issue 37.3: the loop saved the world model's state only if it learned; resuming a run with a
    noisy KnownTruthWorldModel at group 120 of 240 drew new noise, and 119 of the next 120 groups
    differed from the uninterrupted run (final ρ 1.9951 vs 1.9477). Review of issue 37: the same for
    BreakingWorldModel and DegradedWorldModel (random streams, a prediction count), which had no
    state_dict."""
    whole = _loop(make_wm())
    expected = _groups(whole, 0, N_GROUPS)
    first = _loop(make_wm())
    assert _groups(first, 0, RESUME_AT) == expected[:RESUME_AT]
    state = json.loads(json.dumps(first.state_dict()))  # through JSON, as save/load does
    resumed = _loop(make_wm())
    resumed.load_state_dict(state)
    assert _groups(resumed, RESUME_AT, N_GROUPS) == expected[RESUME_AT:]
    assert resumed.rho == whole.rho and resumed.stats()["anchor_pairs"] == whole.stats()["anchor_pairs"]


class _Stateless:
    def predict(self, contexts, actions):
        return [WorldModelPrediction(score=0.5) for _ in actions]


def test_saving_warns_once_for_a_world_model_without_state_dict_and_loads_silently():
    loop = _loop(_Stateless())
    with pytest.warns(UserWarning, match=r"_Stateless\) has no state_dict\(\)/load_state_dict\(\)"):
        state = loop.state_dict()
    assert state["world_model"] is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loop.state_dict()  # once per loop
        _loop(_Stateless()).load_state_dict(json.loads(json.dumps(state)))
        _loop(None).state_dict()  # no world model: nothing to save, nothing to warn about


def test_a_world_model_state_without_a_world_model_to_take_it_warns_and_an_old_key_loads():
    saved = _loop(KnownTruthWorldModel(ENV, WorldModelError(noise_std=0.15), seed=7))
    _groups(saved, 0, 8)
    state = json.loads(json.dumps(saved.state_dict()))
    with pytest.warns(UserWarning, match="has no load_state_dict: the saved state is ignored"):
        _loop(_Stateless()).load_state_dict(state)
    # a state saved before issue 37 kept a learning world model's state under "learned_world_model"
    old = {k: v for k, v in state.items() if k != "world_model"}
    old["learned_world_model"] = state["world_model"]
    wm = KnownTruthWorldModel(ENV, WorldModelError(noise_std=0.15), seed=0)
    _loop(wm).load_state_dict(old)
    assert wm.state_dict() == state["world_model"]
