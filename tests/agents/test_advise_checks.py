"""``wmrl advise``'s checks and re-advice (issue 39's review): the fitting-counted verdict end to end, the run folder's own
groups per step, ``--out-dir`` and ``--groups`` refused before the pilot, ``--from-advice``,
``--run-group-size``, the config recorded and errors that name flags (fake, instant components of
known correlation, as in test_advise.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.advise import AdviseConfig, main_advise, run_pilot
from agents.cli import main


# the fake, instant components of known correlation (pytest puts this folder on sys.path)
from test_advise import GaussianPolicy, KnownEnv, NoisyWM, gaussian_policy, known_env, noisy_wm  # noqa: E402,F401

PILOT = dict(env="test_advise:known_env", world_model="test_advise:noisy_wm", policy="test_advise:gaussian_policy",
             n_boot=100)


def test_the_verdict_hint_and_json_follow_the_fitting_counted_choice_and_re_advise_from_the_json(tmp_path):
    lines = []
    cfg = AdviseConfig(groups=16, group_size=4, out_dir=str(tmp_path / "a"), groups_per_step=10,
                       world_model_fit_executions=175, real_steps=10, **PILOT)
    a = main_advise(cfg, log=lines.append)
    saved = json.loads((tmp_path / "a" / "advice.json").read_text())
    # r ≈ 0.8: WMRL at 0.05 wins on training alone, but 175 executions (44% of real GRPO's compute to the
    # target) leave it below real execution on 1 group per step
    assert not a.use_wmrl and not saved["use_wmrl"] and saved["recommended_choice"]["kind"] == "real"
    assert saved["recommended_choice"]["groups_per_step"] == 1
    assert a.verdict.startswith("do not use WMRL: train on real execution with 1 group per step")
    assert not any("--anchor-window" in ln for ln in lines)  # no hint to realise a fraction not recommended
    assert saved["with_fitting"]["best_choice"] == saved["recommended_choice"]
    assert saved["with_fitting"]["share"] == pytest.approx(175 / 400, rel=0.02)
    # the same groups without the fitting (--world-model-fit-executions 0 given), no pilot: WMRL, and the hint
    lines.clear()
    b = main_advise(AdviseConfig(from_advice=str(tmp_path / "a" / "advice.json"), out_dir=str(tmp_path / "b"),
                                 n_boot=100, world_model_fit_executions=0), log=lines.append,
                    given={"world_model_fit_executions"})
    assert b.r == pytest.approx(a.r) and b.r_ci == pytest.approx(a.r_ci)  # the same groups, the same bootstrap
    assert b.use_wmrl and b.recommended_fraction == 0.05 and b.costs == a.costs
    assert any("train with --anchor-fraction 0.05 --anchor-window 2" in ln for ln in lines)  # its groups per step: 10
    again = json.loads((tmp_path / "b" / "advice.json").read_text())
    assert again["config"]["groups_per_step"] == 10 and "groups" not in again["config"]
    assert again["anchor_groups"]["advisor"]["groups"] == saved["anchor_groups"]["advisor"]["groups"]
    # another planned batch, and the planned run's G: the fitting's share halves at G = 8
    c = main_advise(AdviseConfig(from_advice=str(tmp_path / "a" / "advice.json"), out_dir=str(tmp_path / "c"),
                                 groups_per_step=10, world_model_fit_executions=175, real_steps=10, run_group_size=8,
                                 n_boot=100), log=lambda s: None)
    assert c.fitting_share == pytest.approx(a.fitting_share / 2)
    assert json.loads((tmp_path / "c" / "advice.json").read_text())["with_fitting"]["group_size"] == 8


def test_from_advice_without_groups_or_not_json_is_a_clear_error(tmp_path, capsys):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"verdict": "use WMRL at anchor fraction 0.050", "r": 0.8}))
    with pytest.raises(ValueError, match="holds no anchor groups"):
        main_advise(AdviseConfig(from_advice=str(old), out_dir=str(tmp_path / "o")))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["advise", "--from-advice", str(bad), "--out-dir", str(tmp_path / "o")]) == 2
    assert "is not JSON" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"costs": {}, "anchor_groups": {"advisor": {"groups": "x"}}}))
    assert main(["advise", "--from-advice", str(broken), "--out-dir", str(tmp_path / "o")]) == 2
    assert "malformed" in capsys.readouterr().err


def test_run_dir_prices_at_the_runs_own_groups_per_step_and_records_what_it_used(tmp_path):
    wrapper = run_pilot(KnownEnv(), NoisyWM(), GaussianPolicy(), groups=16, group_size=4, seed=0)
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "checkpoint" / "state.json").write_text(json.dumps({"wrapper": wrapper.state_dict()}))
    (run / "config.json").write_text(json.dumps({"groups_per_step": 16, "group_size": 4}))
    a = main_advise(AdviseConfig(run_dir=str(run), out_dir=str(tmp_path / "o"), n_boot=50), log=lambda s: None)
    assert [c["groups_per_step"] for c in a.choices if c["kind"] == "real"] == [16, 8, 4, 2, 1]
    assert not any("%" in c["words"] for c in a.choices)
    cfg = json.loads((tmp_path / "o" / "advice.json").read_text())["config"]
    assert cfg["groups_per_step"] == 16 and cfg["run_dir"] == str(run)
    assert not {"groups", "group_size", "env", "world_model", "policy"} & set(cfg)
    # a given --groups-per-step still wins
    b = main_advise(AdviseConfig(run_dir=str(run), out_dir=str(tmp_path / "o"), n_boot=0, groups_per_step=4),
                    log=lambda s: None)
    assert [c["groups_per_step"] for c in b.choices if c["kind"] == "real"] == [4, 2, 1]


def test_an_out_dir_that_is_a_file_is_refused_before_the_pilot(tmp_path, capsys):
    f = tmp_path / "a_file"
    f.write_text("x")
    for out in (f, f / "under"):  # the factory cannot be imported: the pilot has not started
        with pytest.raises(ValueError, match=r"--out-dir .*is a file, not a folder"):
            main_advise(AdviseConfig(out_dir=str(out), env="nowhere_xyz:f"))
    assert main(["advise", "--out-dir", str(f / "under"), "--env", "nowhere_xyz:f"]) == 2
    assert "--out-dir" in capsys.readouterr().err


def test_groups_below_min_groups_are_refused_before_the_pilot(tmp_path, capsys):
    with pytest.raises(ValueError, match="--groups 4 is below --min-groups 8"):
        main_advise(AdviseConfig(groups=4, env="nowhere_xyz:f", out_dir=str(tmp_path)))
    assert main(["advise", "--groups", "5", "--min-groups", "6", "--env", "nowhere_xyz:f", "--out-dir",
                 str(tmp_path)]) == 2
    assert "needs at least 6 usable pilot groups" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["advise", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "At least --min-groups (default 8)" in help_text
    assert "groups of --run-group-size rollouts" in help_text  # --real-steps says which G


def test_setting_errors_name_the_flags(tmp_path):
    with pytest.raises(ValueError, match=r"--f-min=2.0") as exc:
        main_advise(AdviseConfig(f_min=2.0, env="nowhere_xyz:f", out_dir=str(tmp_path)))
    assert "f_min" not in str(exc.value)
    with pytest.raises(ValueError, match="--n-boot must be an integer >= 0"):
        main_advise(AdviseConfig(n_boot=-1, env="nowhere_xyz:f", out_dir=str(tmp_path)))


# ---- the second review (issue 39b)
def _run_folder(tmp_path, name="run", config=True, **wrapper_changes):
    """A wmrl train run folder from a pilot's wrapper state (config.json optional)."""
    wrapper = run_pilot(KnownEnv(), NoisyWM(), GaussianPolicy(), groups=16, group_size=4, seed=0)
    run = tmp_path / name
    (run / "checkpoint").mkdir(parents=True)
    state = {**wrapper.state_dict(), **wrapper_changes}
    (run / "checkpoint" / "state.json").write_text(json.dumps({"wrapper": state}))
    if config:
        (run / "config.json").write_text(json.dumps({"groups_per_step": 16, "group_size": 4}))
    return run


def _same(a, b):
    """Two advice.json's equal but for the bookkeeping (source, config)."""
    drop = ("source", "config")
    return {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in b.items() if k not in drop}


def test_from_advice_without_flags_gives_the_same_advice_reusing_every_stored_setting(tmp_path):
    cfg = AdviseConfig(groups=16, group_size=4, out_dir=str(tmp_path / "a"), seed=3, f_min=0.02, f_max=0.6,
                       step_law="sgd", noise_batch_ratio=0.5, groups_per_step=10, world_model_fit_executions=175,
                       real_steps=10, run_group_size=8, **{**PILOT, "n_boot": 80})
    a = main_advise(cfg, log=lambda s: None)
    assert a.fitting_share == pytest.approx(175 / 800, rel=0.02)  # the planned run's G = 8, not the pilot's 4
    lines = []
    b = main_advise(AdviseConfig(from_advice=str(tmp_path / "a" / "advice.json"), out_dir=str(tmp_path / "b")),
                    log=lines.append, given=set())
    first, again = (json.loads((tmp_path / d / "advice.json").read_text()) for d in "ab")
    assert _same(first, again)  # field by field, the fitting-counted figures and the stored groups included
    assert b.fitting_share == a.fitting_share and again["with_fitting"]["group_size"] == 8
    assert again["config"]["seed"] == 3 and again["config"]["step_law"] == "sgd" and again["config"]["f_min"] == 0.02
    line = next(ln for ln in lines if "settings of" in ln)
    assert ("reused --seed 3, --n-boot 80, --f-min 0.02, --f-max 0.6, --min-groups 8, --step-law sgd, "
            "--noise-batch-ratio 0.5, --groups-per-step 10, --world-model-fit-executions 175, --real-steps 10, "
            "--run-group-size 8; overridden: none") in line
    # a given flag wins, and the line says so
    lines.clear()
    c = main_advise(AdviseConfig(from_advice=str(tmp_path / "a" / "advice.json"), out_dir=str(tmp_path / "c"),
                                 groups_per_step=4), log=lines.append, given={"groups_per_step"})
    assert [ch["groups_per_step"] for ch in c.choices if ch["kind"] == "real"] == [4, 2, 1]
    assert c.fitting_share == pytest.approx(a.fitting_share * 10 / 4)  # G = 8 still reused
    assert "overridden: --groups-per-step 4" in next(ln for ln in lines if "settings of" in ln)


def test_from_advice_reuses_the_b_a_run_folders_advice_used(tmp_path, monkeypatch):
    from wmrl_envs.core import CorrectionLoop

    run = _run_folder(tmp_path)
    plain = CorrectionLoop.advise

    def adaptive(self, costs=None, noise_batch_ratio=None, **kw):  # a run whose adaptive fraction measured b = 0.7
        return plain(self, costs, 0.7 if noise_batch_ratio is None else noise_batch_ratio, **kw)

    monkeypatch.setattr(CorrectionLoop, "advise", adaptive)
    a = main_advise(AdviseConfig(run_dir=str(run), out_dir=str(tmp_path / "a"), n_boot=50), log=lambda s: None)
    monkeypatch.setattr(CorrectionLoop, "advise", plain)
    saved = json.loads((tmp_path / "a" / "advice.json").read_text())
    assert a.noise_batch_ratio == 0.7 and saved["config"]["noise_batch_ratio"] == 0.7  # what was used, not the flag
    b = main_advise(AdviseConfig(from_advice=str(tmp_path / "a" / "advice.json"), out_dir=str(tmp_path / "b")),
                    log=lambda s: None, given=set())
    assert b.noise_batch_ratio == 0.7 and b.predicted_speedup == pytest.approx(a.predicted_speedup)
    # a file of the first review's version stored the flag (null) in its config: the top-level b is reused
    old = {**saved, "config": {**saved["config"], "noise_batch_ratio": None}}
    (tmp_path / "old.json").write_text(json.dumps(old))
    c = main_advise(AdviseConfig(from_advice=str(tmp_path / "old.json"), out_dir=str(tmp_path / "c")),
                    log=lambda s: None, given=set())
    assert c.noise_batch_ratio == 0.7
    d = main_advise(AdviseConfig(from_advice=str(tmp_path / "old.json"), out_dir=str(tmp_path / "d"),
                                 noise_batch_ratio=0.2), log=lambda s: None, given={"noise_batch_ratio"})
    assert d.noise_batch_ratio == 0.2  # a given flag still wins


def test_a_run_folder_without_config_json_prices_at_the_checkpoints_groups_per_step(tmp_path):
    run = _run_folder(tmp_path, config=False, groups_per_step=8)
    a = main_advise(AdviseConfig(run_dir=str(run), out_dir=str(tmp_path / "o"), n_boot=0), log=lambda s: None)
    assert [c["groups_per_step"] for c in a.choices if c["kind"] == "real"] == [8, 4, 2, 1]
    assert not any("%" in c["words"] for c in a.choices) and "pass --groups-per-step" not in a.verdict


def test_a_real_execution_arms_folder_is_named_as_such(tmp_path, capsys):
    run = _run_folder(tmp_path, name="real", world_model=None)
    state = json.loads((run / "checkpoint" / "state.json").read_text())
    state["wrapper"]["ledger"].pop("world_model", None)
    (run / "checkpoint" / "state.json").write_text(json.dumps(state))
    assert main(["advise", "--run-dir", str(run), "--out-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "is a real-execution run (no world model" in err and f"its parent, {tmp_path.resolve()}" in err
    assert "the ledger has no world-model prediction" not in err


def test_flags_that_would_do_nothing_are_refused_and_name_what_is_missing(tmp_path, capsys):
    a = main_advise(AdviseConfig(groups=16, group_size=4, out_dir=str(tmp_path / "a"), **PILOT), log=lambda s: None)
    assert a.n_groups == 16
    path = str(tmp_path / "a" / "advice.json")
    assert main(["advise", "--from-advice", path, "--cost-basis", "wall", "--out-dir", str(tmp_path / "o")]) == 2
    assert "--cost-basis has no effect with --from-advice: the costs are stored in" in capsys.readouterr().err
    assert main(["advise", "--real-steps", "10", "--groups", "8", "--out-dir", str(tmp_path / "o")]) == 2
    assert "it goes together with --world-model-fit-executions" in capsys.readouterr().err
    run = _run_folder(tmp_path)
    assert main(["advise", "--run-dir", str(run), "--world-model-fit-executions", "175",
                 "--out-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "give --real-steps (its steps to the target at your batch) too" in err and "--groups-per-step" not in err
    tampered = json.loads((tmp_path / "a" / "advice.json").read_text())
    tampered["config"]["groups_per_step"] = "ten"
    (tmp_path / "t.json").write_text(json.dumps(tampered))
    assert main(["advise", "--from-advice", str(tmp_path / "t.json"), "--out-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"--from-advice {tmp_path / 't.json'}: its config.groups_per_step is 'ten', not an integer >= 1" in err


def test_fitting_text_counts_one_step_and_the_plot_wraps_titles(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import matplotlib.figure

    from agents.advise import fitting_advice

    adv = SimpleNamespace(choices=({"kind": "real"},), fitting_share=0.5, choices_with_fitting=(), recommended_choice={})
    text = fitting_advice(adv, 1, 1, 1, 4)["text"]
    assert "(1 execution = 50% of real GRPO's compute to the target in 1 step of 1 group of 4 rollouts)" in text
    figs = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: figs.append(self))
    a = main_advise(AdviseConfig(groups=16, group_size=4, out_dir=str(tmp_path / "a"), groups_per_step=10,
                                 world_model_fit_executions=175, real_steps=10, **PILOT), log=lambda s: None)
    fig = figs[-1]
    assert len(a.verdict) > 110 and fig._suptitle.get_text().replace("\n", " ") == a.verdict  # whole, wrapped
    assert fig.axes[3].get_title() == "predicted speedup vs anchor fraction\n(training only: fitting not counted)"


def test_the_plotted_speedup_curve_follows_the_step_law(tmp_path, monkeypatch):
    # review 3, item 2: the figure drew Adam's law under --step-law sgd
    import matplotlib.figure

    figs = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: figs.append(self))
    for law in ("sgd", "adam"):
        a = main_advise(AdviseConfig(groups=16, group_size=4, out_dir=str(tmp_path / law), groups_per_step=10,
                                     noise_batch_ratio=4.0, step_law=law, **PILOT), log=lambda s: None)
        assert a.step_law == law
        x, y = figs[-1].axes[3].get_lines()[0].get_data()
        assert np.interp(a.recommended_fraction, x, y) == pytest.approx(a.predicted_speedup, rel=0.02)


def test_from_advice_errors_name_the_file_and_the_stored_field_that_is_bad(tmp_path, capsys):
    # review 3, item 6
    main_advise(AdviseConfig(groups=16, group_size=4, out_dir=str(tmp_path / "a"), groups_per_step=10,
                             **{**PILOT, "n_boot": 20}), log=lambda s: None)
    good = json.loads((tmp_path / "a" / "advice.json").read_text())

    def err(edit, name):
        d = json.loads(json.dumps(good))
        edit(d)
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(d))
        assert main(["advise", "--from-advice", str(p), "--out-dir", str(tmp_path / "o")]) == 2
        return " ".join(capsys.readouterr().err.split())

    for v in ("4", 0):
        text = err(lambda d, v=v: d["anchor_groups"].update(group_size=v), f"g{v}")
        assert f"g{v}.json: its anchor_groups.group_size is {v!r}, not an integer >= 1 or null" in text
    text = err(lambda d: d.update(noise_batch_ratio="x"), "nbr")
    assert "nbr.json: its noise_batch_ratio is 'x', not a number >= 0 or null" in text
    assert "config.noise_batch_ratio" not in text
    text = err(lambda d: d["anchor_groups"]["advisor"]["groups"][2][0].__setitem__(1, "0.5"), "wmstr")
    assert "wmstr.json: its anchor_groups.advisor.groups[2][0][1] (a world-model score) is '0.5', not a number or null" in text
    text = err(lambda d: d["anchor_groups"]["advisor"]["groups"][0][1].__setitem__(3, "1"), "realstr")
    assert "realstr.json: its anchor_groups.advisor.groups[0][1][3] (a real score) is '1', not a number or null" in text


def test_re_advice_keeps_the_pilots_source_reuses_no_idle_real_steps_and_caps_a_stored_n_boot(tmp_path, capsys):
    # review 3, item 9
    main_advise(AdviseConfig(groups=16, group_size=4, out_dir=str(tmp_path / "a"), groups_per_step=10,
                             **{**PILOT, "n_boot": 20}), log=lambda s: None)
    first = json.loads((tmp_path / "a" / "advice.json").read_text())
    assert first["source"].startswith("pilot of 16 groups x G = 4")
    prev = tmp_path / "a" / "advice.json"
    for d in "bc":
        main_advise(AdviseConfig(from_advice=str(prev), out_dir=str(tmp_path / d)), log=lambda s: None, given=set())
        prev = tmp_path / d / "advice.json"
    assert json.loads(prev.read_text())["source"] == f"{first['source']}; re-advised from {tmp_path / 'b' / 'advice.json'}"
    # a stored real_steps without a fitting does nothing: not shown as reused
    d = json.loads(json.dumps(first))
    d["config"]["real_steps"] = 10
    p = tmp_path / "rs.json"
    p.write_text(json.dumps(d))
    lines = []
    main_advise(AdviseConfig(from_advice=str(p), out_dir=str(tmp_path / "r")), log=lines.append, given=set())
    line = next(ln for ln in lines if "settings of" in ln)
    assert "--real-steps" not in line and "--world-model-fit-executions 0" in line
    # a stored n_boot of 10^12 would hang: refused
    d["config"]["n_boot"] = 10 ** 12
    p.write_text(json.dumps(d))
    assert main(["advise", "--from-advice", str(p), "--out-dir", str(tmp_path / "o")]) == 2
    assert "its config.n_boot is 1000000000000, not an integer from 0 to 100000" in " ".join(capsys.readouterr().err.split())


def test_pilot_only_flags_with_a_stored_source_and_a_huge_n_boot_are_refused_before_anything_runs(tmp_path, capsys):
    # noticed after issue 39's third review: both were taken silently (a CLI --n-boot of 10^12 hung)
    main_advise(AdviseConfig(groups=16, group_size=4, out_dir=str(tmp_path / "a"), groups_per_step=10,
                             **{**PILOT, "n_boot": 20}), log=lambda s: None)
    prev = str(tmp_path / "a" / "advice.json")
    assert main(["advise", "--from-advice", prev, "--group-size", "8", "--out-dir", str(tmp_path / "o")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--group-size sets the pilot, and --from-advice runs none" in err and "--run-group-size" in err
    assert main(["advise", "--run-dir", str(tmp_path), "--groups", "32", "--policy", "x:y",
                 "--out-dir", str(tmp_path / "o")]) == 2
    assert "--groups, --policy set the pilot, and --run-dir runs none" in " ".join(capsys.readouterr().err.split())
    assert main(["advise", "--from-advice", prev, "--n-boot", str(10 ** 12), "--out-dir", str(tmp_path / "o")]) == 2
    assert "--n-boot must be at most 100000" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing written
    # the stored settings still re-advise
    main_advise(AdviseConfig(from_advice=prev, out_dir=str(tmp_path / "b")), log=lambda s: None, given=set())
    assert (tmp_path / "b" / "advice.json").exists()
