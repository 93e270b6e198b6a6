"""One method's run and the held-out evaluation (``agents.experiments.bench_run``): the evaluated
steps and their refinement, ρ's mode reaching the denoiser, why a run stopped, and the evaluation's
cache and draws. Fake, instant components (``bench_fakes``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agents.experiments.bench_config import BenchConfig
from agents.experiments.methods import METHODS

from bench_fakes import FakeEnv, FakeWM, FakeAgent, grading_best_of_k

__all__: list[str] = []

def test_coarse_eval_steps_and_refinement_step():
    from agents.experiments.bench_run import coarse_eval_steps, refinement_step

    assert coarse_eval_steps(12, 5) == [0, 3, 6, 9, 12]
    assert coarse_eval_steps(2, 5) == [0, 1, 2]
    assert coarse_eval_steps(0, 3) == [0]
    with pytest.raises(ValueError):
        coarse_eval_steps(4, 1)
    # first crossing of 30 lies between steps 4 and 8: bisect there
    assert refinement_step([0, 4, 8, 12], [10.0, 20.0, 40.0, 25.0], 30.0) == 6
    # unordered input is sorted first
    assert refinement_step([8, 0, 4], [40.0, 10.0, 20.0], 30.0) == 6
    assert refinement_step([0, 1, 8], [10.0, 35.0, 40.0], 30.0) is None  # adjacent snapshots: nothing to refine
    assert refinement_step([0, 4], [10.0, 20.0], 30.0) is None  # never crosses
    assert refinement_step([0, 4], [35.0, 20.0], 30.0) is None  # already above at the start


def test_rho_mode_reaches_the_denoiser():
    from agents.experiments.bench_run import run_method

    seen = {}
    for mode in ("calibrated", "parameter_free"):
        # min_pairs 4: the first anchor group fits the map, so the next one counts for ρ's warm-up
        correction = replace(BenchConfig().correction, anchor_fraction=0.34, min_pairs=4, warmup_groups=1, rho_mode=mode)
        cfg = BenchConfig(steps=3, groups_per_step=3, group_size=4, correction=correction)
        run = run_method(METHODS["wmrl"], 0, cfg, FakeAgent, FakeEnv, FakeWM(), ["t1"], max_steps=3)
        seen[mode] = [r.rho for r in run.records]
    # parameter-free: ρ = 1 + s̄² (c = 1) stays near 1 for a good world model; calibrated starts at rho_target
    # (step 1's anchor group, before the first fit, is on the raw scale and does not count)
    assert seen["calibrated"][0] == 1.0 and seen["calibrated"][1] == pytest.approx(2.0)
    assert all(1.0 <= r < 1.6 for r in seen["parameter_free"])


def test_run_method_records_why_it_stopped():
    """A cheap method stops at real GRPO's compute or at its step cap, and says which: the headline
    tells a seed that ran out of budget from one that ran out of steps."""
    from agents.experiments.bench_run import run_method

    cfg = BenchConfig(groups_per_step=5, group_size=4, correction=replace(BenchConfig().correction, anchor_fraction=0.2))
    kw = dict(make_agent=FakeAgent, make_env=FakeEnv, world_model=FakeWM(), train_tasks=["t1"])
    # one anchor group of 4 rollouts per step = 80 declared CPU-s: a 200 CPU-s budget binds at step 3
    run = run_method(METHODS["wmrl"], 0, cfg, kw["make_agent"], kw["make_env"], kw["world_model"], kw["train_tasks"],
                     max_steps=10, compute_budget_s=200.0)
    assert (len(run.records), run.stopped) == (3, "compute budget")
    run = run_method(METHODS["wmrl"], 0, cfg, kw["make_agent"], kw["make_env"], kw["world_model"], kw["train_tasks"],
                     max_steps=2, compute_budget_s=200.0)
    assert (len(run.records), run.stopped) == (2, "step cap")
    run = run_method(METHODS["real"], 0, cfg, kw["make_agent"], kw["make_env"], None, kw["train_tasks"], max_steps=2)
    assert run.stopped == "step cap" and run.records[-1].cpu_seconds["execution"] == 2 * 20 * 20.0
    # a checkpoint that says stop ends training after that step: "target"
    run = run_method(METHODS["wmrl"], 0, cfg, kw["make_agent"], kw["make_env"], kw["world_model"], kw["train_tasks"],
                     max_steps=10, compute_budget_s=200.0, checkpoint=lambda r: len(r.records) == 2)
    assert (len(run.records), run.stopped, len(run.snapshots)) == (2, "target", 3)


def test_evaluate_snapshot_cache_draws_and_what_is_never_cached(monkeypatch):
    """Held-out evaluation executes each (task, program) once per run, never caches an ungraded
    outcome or a time-out, estimates avg@k from all its draws, and without a cache executes all."""
    from types import SimpleNamespace

    import agents.experiments.bench_run as bench
    import wmrl_envs.envs.autoresearch.env as ar_env
    from wmrl_envs.envs.autoresearch.tasks import list_tasks
    from wmrl_envs.sandbox.base import SandboxUnavailableError

    task = list_tasks("heldout")[0]
    executed = []

    def fake_run(t, code, sandbox):
        executed.append(code)
        if code == "broken":
            raise SandboxUnavailableError("no sandbox")
        pos = float(code.split()[1])
        return SimpleNamespace(status="valid", position=pos, score=pos, timed_out=code.startswith("slow")), None

    monkeypatch.setattr(ar_env, "evaluate", fake_run)

    class Agent:
        def __init__(self, codes):
            self.codes = codes

        def restore(self, snap):
            pass

        def reseed(self, seed):
            pass

        def sample(self, tasks, n):
            return [self.codes[:n] for _ in tasks], None

    codes = ["p 0.2", "p 0.8", "p 0.2", "slow 0.5"]
    cache: dict = {}
    r1 = bench.evaluate_snapshot(Agent(codes), None, [task], 2, None, parallel=1, cache=cache, draws=4)
    assert r1["per_task"][task] == pytest.approx(100 * grading_best_of_k([0.2, 0.8, 0.2, 0.5], 2))
    assert len(executed) == 3 and (r1["executed"], r1["cached"]) == (3, 1)  # the repeated draw once
    r2 = bench.evaluate_snapshot(Agent(codes), None, [task], 2, None, parallel=1, cache=cache, draws=4)
    assert executed[3:] == ["slow 0.5"] and r2["overall"] == r1["overall"]  # only the time-out again
    executed.clear()
    bench.evaluate_snapshot(Agent(codes), None, [task], 2, None, parallel=1, cache=None, draws=4)
    assert len(executed) == 4  # no cache: every trajectory
    executed.clear()
    broken = ["broken", "p 0.4"]
    cache = {}
    bench.evaluate_snapshot(Agent(broken), None, [task], 1, None, parallel=1, cache=cache, draws=2, max_ungraded_share=None)
    bench.evaluate_snapshot(Agent(broken), None, [task], 1, None, parallel=1, cache=cache, draws=2, max_ungraded_share=None)
    assert executed.count("broken") == 2 and executed.count("p 0.4") == 1  # the ungraded one is retried
    with pytest.raises(ValueError, match="draws must be >= k"):
        bench.evaluate_snapshot(Agent(codes), None, [task], 2, None, draws=1)


def test_every_method_and_seed_pays_its_world_models_embeddings_cold(monkeypatch):
    """Issue 35, item 2: the shared sentence encoder's cache is emptied before each run_method, so the
    second of two identical runs embeds (and is charged for) as many texts as the first; before,
    it took every embedding from the first run's cache and paid almost nothing."""
    import numpy as np

    from agents.experiments.bench_run import run_method
    from wmrl_envs.envs.autoresearch.sentence_encoder import SentenceEncoder
    from wmrl_envs.world_models.base import WorldModelPrediction

    class TinyEncoder(SentenceEncoder):
        def __init__(self):  # no model: a deterministic 2-d embedding per text
            import threading
            self._cache, self._lock, self.n_encoded, self.n_cache_hits, self.batch_size, self.dim = {}, threading.Lock(), 0, 0, 64, 2

        def _forward(self, texts):
            return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)

    enc = TinyEncoder()
    monkeypatch.setitem(SentenceEncoder._shared, "tiny", enc)

    class EmbeddingWM:
        def predict(self, contexts, actions):
            e = SentenceEncoder.shared("tiny").encode([str(a) for a in actions])
            return [WorldModelPrediction(score=float(x[0]) / 10) for x in e]

    cfg = BenchConfig(groups_per_step=5, group_size=4, correction=replace(BenchConfig().correction, anchor_fraction=0.2))
    encoded = []
    for _ in range(2):
        run_method(METHODS["wm_only"], 0, cfg, FakeAgent, FakeEnv, EmbeddingWM(), ["t1"], max_steps=3)
        encoded.append(enc.n_encoded - sum(encoded))
    assert encoded[0] > 0 and encoded[1] == encoded[0]
