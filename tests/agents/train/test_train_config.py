"""`wmrl train`'s configuration (fast, no model): the nested correction config, its unprefixed
flags, config.json round trips, `wmrl presets`, the GRPO step's settings and the evaluation
wrapper."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
import tyro

from agents.train.config import PRESETS, TrainConfig, load_config
from wmrl_envs.core import CorrectionConfig


def test_train_config_nests_one_correction_config():
    # ρ's warm-up: 3 anchor groups after the debiaser's first fit, so ρ acts in the 8-step run (issue 36, item 3;
    # the reference 32 groups of G = 8 left it at 1 throughout)
    assert TrainConfig().correction == CorrectionConfig(anchor_fraction=0.25, min_pairs=16, refit_every=8, warmup_groups=3,
                                                        debias_map="auto")
    tiny = PRESETS["tiny"].correction
    assert (tiny.min_pairs, tiny.refit_every, tiny.warmup_groups, tiny.anchor_fraction) == (2, 2, 1, 0.1)
    assert TrainConfig().num_iterations == 1 and TrainConfig().clip_eps == 0.2
    assert (TrainConfig().group_size, TrainConfig().groups_per_step, TrainConfig().steps) == (8, 4, 8)


def test_correction_flags_keep_their_names_on_top_of_a_preset():
    args = ["--anchor-fraction", "0.3", "--min-pairs", "5", "--no-debias", "--rho-mode", "parameter_free",
            "--disagreement-floor", "0.05", "--num-iterations", "3", "--steps", "4"]
    cfg = tyro.cli(TrainConfig, default=PRESETS["tiny"], args=args)
    c = cfg.correction
    assert (c.anchor_fraction, c.min_pairs, c.debias, c.rho_mode, c.disagreement_floor) == (0.3, 5, False, "parameter_free", 0.05)
    assert c.refit_every == 2 and c.warmup_groups == 1  # the rest of the preset's correction stays
    assert (cfg.num_iterations, cfg.steps, cfg.preset) == (3, 4, "tiny")


def test_config_json_round_trip_and_unknown_keys(tmp_path):
    from agents.train.checkpoint import json_default
    from wmrl_envs.utils import write_json_atomic

    cfg = dataclasses.replace(PRESETS["tiny"], correction=dataclasses.replace(PRESETS["tiny"].correction, min_pairs=7))
    write_json_atomic(tmp_path / "config.json", dataclasses.asdict(cfg), indent=2, default=json_default)
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["correction"]["min_pairs"] == 7 and "min_pairs" not in data  # nested, not flat
    assert load_config(tmp_path) == cfg
    data["correction"]["nope"] = 1
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"correction\.nope"):
        load_config(tmp_path)
    data["correction"].pop("nope")
    data["correction"]["min_pairs"] = 0  # validated again when read
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="min_pairs"):
        load_config(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_config(tmp_path / "missing")


@pytest.mark.parametrize("args", [["--anchor-fraction", "2"], ["--min-pairs", "0"], ["--rho-target", "9"],
                                  ["--disagreement-floor", "-1"], ["--num-iterations", "0"], ["--no-such-flag"],
                                  ["--clip-eps", "-1"], ["--clip-eps", "0"], ["--kl-coef", "-1"],
                                  ["--max-grad-norm", "0"], ["--entropy-coef", "-1"], ["--dual-clip", "1"],
                                  ["--lora-r", "0"]])
def test_bad_settings_fail_with_status_2_and_no_run_folder(tmp_path, args, capsys):
    from agents.cli import main

    run = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--run-dir", str(run), *args]) == 2
    err = capsys.readouterr().err
    assert "error:" in err
    if args[0] == "--lora-r":  # checked before the model loads, and the flag is named (PEFT's own error named neither)
        assert "--lora-r" in err
    assert not run.exists()


def test_presets_prints_the_nested_correction(capsys):
    from agents.cli import main

    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "'correction': {'anchor_fraction': 0.1" in out and "'disagreement_floor'" in out


def test_update_config_follows_the_train_config():
    from agents.train.config import update_config

    u = update_config(dataclasses.replace(TrainConfig(), num_iterations=2, clip_eps=0.1, scale_advantages=False))
    assert (u.num_iterations, u.clip_eps, u.kl_coef, u.entropy_coef, u.max_grad_norm) == (2, 0.1, 0.04, 0.002, 1.0)
    assert u.micro_batch_per_group and not u.scale and u.drop_zero_advantage


def test_dual_clip_flag_reaches_the_grpo_step(monkeypatch):
    """``wmrl train --dual-clip C`` sets GRPOUpdateConfig.dual_clip (default 3; 0 or None: off)."""
    import agents.train.loop as loop
    from agents.cli import main
    from agents.train.config import update_config

    assert update_config(TrainConfig()).dual_clip == 3.0
    assert update_config(dataclasses.replace(TrainConfig(), dual_clip=5.0)).dual_clip == 5.0
    assert update_config(dataclasses.replace(TrainConfig(), dual_clip=0)).dual_clip is None
    assert update_config(dataclasses.replace(TrainConfig(), dual_clip=None)).dual_clip is None
    seen = []
    monkeypatch.setattr(loop, "build_components", lambda cfg: seen.append(cfg) or exec("raise KeyboardInterrupt"))
    for flag, want in (("0", None), ("None", None), ("7.5", 7.5)):
        assert main(["train", "--preset", "tiny", "--quiet", "--dual-clip", flag]) == 130  # interrupted
        assert update_config(seen[-1]).dual_clip == want


def test_evaluation_wrapper_is_frozen_real_execution_with_its_own_ledger():
    import gymnasium as gym

    from agents.train.evaluation import evaluation_wrapper

    env = gym.make("wmrl/Guess-v0")
    w = evaluation_wrapper(env, dataclasses.replace(TrainConfig(), eval_k=3, max_ungraded_share=0.25))
    assert w.training is False and w.loop.world_model is None and w.loop.ungraded.max_share == 0.25
    out = w.score_group([[0.2], [0.5], [0.9]], options={"target": 0.5})
    assert out.route == "anchor" and all(r is not None for r in out.rewards)
    assert w.loop.ledger.count("execution") == 3  # its own ledger: training's is never charged
    assert w.loop.corrector.debiaser.n_pairs == 0 and w.loop.corrector.stats()["anchor_pairs"] == 0  # nothing learned


def test_resume_revalidates_the_saved_settings(tmp_path):
    """A config.json with a bad GRPO setting is refused by load_config (before any model loads)."""
    from agents.train.checkpoint import json_default
    from wmrl_envs.utils import write_json_atomic

    bad = dataclasses.asdict(dataclasses.replace(PRESETS["tiny"], clip_eps=-1.0))
    write_json_atomic(tmp_path / "config.json", bad, indent=2, default=json_default)
    with pytest.raises(ValueError, match="clip_eps"):
        load_config(tmp_path)


def test_the_presets_show_the_board_low_line_with_the_relative_reward_and_an_older_run_folder_keeps_its_own(tmp_path):
    """Issue 36: the main job's presets show the task board's weakest entry and train on the
    relative reward; run folders written before the settings existed keep the starter's line and
    the benchmark's reward (so --resume does not change the prompt or the reward)."""
    from agents.train.checkpoint import json_default
    from agents.train.config import validate
    from wmrl_envs.utils import write_json_atomic

    for cfg in PRESETS.values():
        assert (cfg.baseline, cfg.reward) == ("board-low", "relative")
    with pytest.raises(ValueError, match="baseline must be 'board-low', 'starter' or 'boosting', got 'xgboost'"):
        validate(dataclasses.replace(TrainConfig(), baseline="xgboost"))
    with pytest.raises(ValueError, match="reward must be 'relative' or 'leaderboard'"):
        validate(dataclasses.replace(TrainConfig(), reward="position"))
    old = dataclasses.asdict(TrainConfig())
    del old["baseline"], old["reward"]
    write_json_atomic(tmp_path / "config.json", old, indent=2, default=json_default)
    assert (load_config(tmp_path).baseline, load_config(tmp_path).reward) == ("starter", "leaderboard")


def test_summary_shows_the_flat_map_groups():
    """summary.md names the world-model groups corrected while the fitted map was flat (the
    corrector's ``flat_map_groups``; issue 25)."""
    from agents.train.summary import summary_markdown

    ev = {"k": 2, "overall": 10.0, "mean_score": 0.3, "ungraded": {}}
    s = {
        "rollouts": 16, "sandbox_backend": "bubblewrap", "real_executions": 4, "world_model_predictions": 16,
        "world_model_calls": {}, "anchor_groups": 1, "groups": 4, "realised_anchor_fraction": 0.25,
        "configured_anchor_fraction": 0.1, "seconds": dict.fromkeys(("execution", "world_model", "generation", "update"), 1.0),
        "seconds_per_execution": 1.0, "seconds_per_world_model_prediction": 0.1, "rho": 1.0, "anchor_pairs": 3,
        "debiaser_fitted": True, "flat_map_groups": 2, "calibration_mae_raw": 0.1, "calibration_mae_calibrated": 0.1,
        "heldout_before": ev, "heldout_after": ev, "wall_clock_s": 5.0,
    }
    assert "| world-model groups corrected with a flat map | 2 |" in summary_markdown(s)


def test_the_default_run_realises_its_configured_fraction_and_gives_the_advisor_its_groups():
    """Issue 28: with 4 groups per step the one-anchor floor made a configured 0.1 realise 0.25, and
    7 steps left the advisor 7 of the 8 anchor groups it needs for a verdict."""
    from wmrl_envs.core import ANCHOR, AnchorAdvisor

    cfg = TrainConfig()
    router = cfg.correction.build_router(seed=cfg.seed)
    routes = [r for _ in range(cfg.steps) for r in router.route_step(cfg.groups_per_step)]
    n_anchor = sum(r == ANCHOR for r in routes)
    assert n_anchor / len(routes) == cfg.correction.anchor_fraction
    assert n_anchor >= AnchorAdvisor().min_groups


def test_the_learned_world_models_take_the_static_check_and_an_older_run_folder_keeps_its_head_alone(tmp_path):
    """Issue 36: a learned world model decides certain failures with the host's static check
    (``--no-static-check`` turns it off); a run folder from before it resumes without it."""
    from agents.train.build import build_world_model
    from agents.train.checkpoint import json_default
    from wmrl_envs.envs.autoresearch.static_check import static_check_score
    from wmrl_envs.utils import write_json_atomic

    assert all(cfg.static_check for cfg in PRESETS.values())
    assert tyro.cli(TrainConfig, args=["--no-static-check"], default=TrainConfig()).static_check is False
    wm = build_world_model(TrainConfig(world_model="learned-encoder"), None, None)
    assert wm.precheck is static_check_score
    assert build_world_model(TrainConfig(world_model="learned-encoder", static_check=False), None, None).precheck is None
    old = dataclasses.asdict(TrainConfig())
    del old["static_check"]
    write_json_atomic(tmp_path / "config.json", old, indent=2, default=json_default)
    assert load_config(tmp_path).static_check is False


def test_resume_refuses_a_run_dir_or_preset_and_names_a_missing_folder(tmp_path, capsys):
    """Review of session 7: `--resume RUN --run-dir X` dropped --run-dir without a word, and a
    missing folder was reported as 'config.json is missing'."""
    from agents.cli import main

    (tmp_path / "run").mkdir()
    assert main(["train", "--resume", str(tmp_path / "run"), "--run-dir", str(tmp_path / "x")]) == 2
    assert "takes no --run-dir" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path / "run"), "--preset", "tiny"]) == 2
    assert "takes no --preset" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path / "nothing")]) == 2
    assert "no such run folder" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "nothing").exists()


def test_sigterm_stops_a_run_as_ctrl_c_does(monkeypatch, capsys, tmp_path):
    """A run started in the background (`nohup ... &`) ignores SIGINT (review of session 7):
    `kill PID` (SIGTERM) interrupts it as Ctrl-C does, with the resume hint, and the handler
    before the run is restored after it."""
    import os
    import signal

    import agents.train.loop as loop
    from agents.cli import main

    def build_then_terminated(cfg):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises KeyboardInterrupt here
        raise AssertionError("SIGTERM did not interrupt the run")

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(loop, "build_components", build_then_terminated)
    assert main(["train", "--preset", "tiny", "--quiet", "--run-dir", str(tmp_path / "run")]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) == before
