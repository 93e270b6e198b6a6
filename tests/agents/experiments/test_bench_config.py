"""The benchmark's settings (``agents.experiments.bench_config``, ``.methods``, ``.bench_agents``):
the nested correction config and its flags, each method's correction, the grammar agent's common
random numbers, the world model's fitting cost, and the settings refused before anything trains.
"""

from __future__ import annotations

import pytest

from agents.experiments.bench_config import BenchConfig
from agents.experiments.methods import METHODS, method_correction

from bench_fakes import FakeEnv, _bench

__all__: list[str] = []

def test_bench_config_nests_one_correction_config_with_unprefixed_flags():
    import tyro

    from wmrl_envs.core.config import CorrectionConfig

    default = BenchConfig().correction
    assert default == CorrectionConfig(min_pairs=16, refit_every=8, warmup_groups=64, half_life=16.0)
    cfg = tyro.cli(BenchConfig, args=["--anchor-fraction", "0.25", "--min-pairs", "4", "--disagreement-floor", "0.02",
                                      "--num-iterations", "2"])
    assert (cfg.correction.anchor_fraction, cfg.correction.min_pairs, cfg.correction.disagreement_floor) == (0.25, 4, 0.02)
    assert cfg.correction.half_life == 16.0 and cfg.num_iterations == 2
    # each method puts its own route share, debias and denoise on top of the configured settings
    wmrl, real, wm_only = (method_correction(METHODS[m], cfg.correction) for m in ("wmrl", "real", "wm_only"))
    assert (wmrl.anchor_fraction, wmrl.min_anchor_groups, wmrl.debias, wmrl.denoise) == (0.25, 1, True, True)
    assert (real.anchor_fraction, real.debias, real.denoise) == (1.0, False, False)
    assert (wm_only.anchor_fraction, wm_only.min_anchor_groups) == (0.0, 0)
    assert wmrl.min_pairs == real.min_pairs == 4 and wmrl.disagreement_floor == 0.02
    built = wmrl.build_corrector()
    assert built.debiaser.min_pairs == 4 and built.denoiser.half_life == 16.0


def test_grammar_agent_reseed_gives_common_random_numbers():
    from agents.experiments.bench_agents import GrammarBenchAgent

    a = GrammarBenchAgent(seed=0)
    snap = a.snapshot()
    a.sample(["digits-shifted"], 8)  # advance the stream
    a.restore(snap)
    a.reseed(123)
    first, _ = a.sample(["digits-shifted"], 8)
    b = GrammarBenchAgent(seed=5)
    b.restore(snap)
    b.reseed(123)
    assert b.sample(["digits-shifted"], 8)[0] == first
    b.reseed(124)
    assert b.sample(["digits-shifted"], 8)[0] != first


def test_world_model_fitting_cost_is_the_logged_executions_cpu_seconds():
    from agents.experiments.bench_agents import world_model_fitting_cost
    from wmrl_envs.envs.autoresearch.embedding_world_model import load_execution_log

    records = load_execution_log(split="train")
    seconds, what, is_cpu = world_model_fitting_cost(BenchConfig(world_model="embedding"))
    assert is_cpu and seconds == pytest.approx(sum(r["cpu_s"] for r in records)) and seconds > 0
    assert f"{len(records)} logged executions" in what
    assert world_model_fitting_cost(BenchConfig(world_model="llm"))[0] == 0.0


@pytest.mark.parametrize("field,value", [("eval_draws", 0), ("target_gain", 1.5),
                                         ("refine_evals", -1), ("methods", ("real", "real")), ("group_size", 1)])
def test_bad_settings_are_refused_before_anything_trains(tmp_path, field, value):
    FakeEnv.steps = 0
    with pytest.raises(ValueError, match=field.replace("_", "-") if field != "methods" else "twice"):
        _bench(tmp_path, **{field: value})
    assert FakeEnv.steps == 0


def test_bench_refuses_early_what_would_waste_hours(tmp_path):
    from agents.experiments.bench_config import check_bench_config

    with pytest.raises(FileNotFoundError, match="--reuse-from .*no such file"):
        check_bench_config(BenchConfig(reuse_from=str(tmp_path / "missing.json")))
    with pytest.raises(ValueError, match="--resume --out-dir .*no such folder"):
        check_bench_config(BenchConfig(resume=True, out_dir=str(tmp_path / "typo")))
    check_bench_config(BenchConfig(resume=True, out_dir=str(tmp_path)))  # an existing folder is fine


def test_llm_settings_without_an_llm_are_refused():
    from agents.experiments.bench_config import check_bench_config

    with pytest.raises(ValueError, match="--device apply to the LLM agent"):
        check_bench_config(BenchConfig(device="tpu"))
    with pytest.raises(ValueError, match="device must be one of"):
        check_bench_config(BenchConfig(agent="llm", device="tpu"))
    check_bench_config(BenchConfig(agent="llm", device="cpu", dtype="float32"))
