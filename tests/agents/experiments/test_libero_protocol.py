"""``wmrl libero`` (``agents.experiments.libero_protocol``): the paper's VLA protocol, its smoke
preset end to end on the real LIBERO simulator with tiny random models (the three methods, the
table, the plot, resuming finished cells and a cell in progress), and its settings checks."""

from __future__ import annotations

import dataclasses
import json

import pytest

from agents.experiments.libero_protocol import LIBERO_PRESETS, LiberoProtocolConfig, main_libero, results_table


def test_device_setting(monkeypatch):
    import torch

    from agents.experiments.libero_protocol import _device

    with pytest.raises(ValueError, match="device must be"):
        LiberoProtocolConfig(device="gpu")
    assert _device(LiberoProtocolConfig(device="cpu")) == ("cpu", torch.float32)
    assert _device(LiberoProtocolConfig(device="cuda:1")) == ("cuda:1", torch.bfloat16)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _device(LiberoProtocolConfig()) == ("cpu", torch.float32)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert _device(LiberoProtocolConfig()) == ("cuda", torch.bfloat16)


def test_settings_are_checked():
    with pytest.raises(ValueError, match="overlap"):
        LiberoProtocolConfig(train_states=(0, 16), eval_states=(16, 17))
    with pytest.raises(ValueError, match="methods"):
        LiberoProtocolConfig(methods=("grpo",))
    with pytest.raises(ValueError, match="tasks"):
        LiberoProtocolConfig(tasks=(10,))
    with pytest.raises(ValueError, match="render_size"):
        LiberoProtocolConfig(render_size=4)
    paper = LIBERO_PRESETS["default"]
    assert (paper.train_states, paper.eval_states, paper.group_size, paper.tasks) == (
        tuple(range(16)), tuple(range(16, 50)), 8, tuple(range(10)))
    # the authors' evaluation images: rendered at 256 px with multisampling, resized to 224
    assert (paper.image_size, paper.render_size, paper.multisample) == (224, 256, True)


def test_real_checkpoints_get_their_action_statistics_and_prompt(tmp_path):
    """A --vla checkpoint's actions are un-normalised with its own statistics; one without them
    is refused before any training (not run with normalised actions); MiniVLA's Qwen tokenizer
    gets the Qwen chat prompt."""
    from types import SimpleNamespace

    from agents.experiments.libero_protocol import _action_stats, _prompt_template
    from agents.vla.policy import MINIVLA_QWEN_PROMPT, OPENVLA_PROMPT

    stats = {"libero_10_no_noops": {"action": {"q01": [0.0] * 7, "q99": [2.0] * 7}}}
    cfg = LiberoProtocolConfig(vla=str(tmp_path))
    model = SimpleNamespace(config=SimpleNamespace(norm_stats=stats))
    assert _action_stats(cfg, model)["q99"].tolist() == [2.0] * 7
    (tmp_path / "dataset_statistics.json").write_text(json.dumps(stats))
    assert _action_stats(cfg, SimpleNamespace())["q99"].tolist() == [2.0] * 7  # from the folder
    with pytest.raises(ValueError, match="cannot un-normalise.*libero_90"):
        _action_stats(dataclasses.replace(cfg, unnorm_key="libero_90"), SimpleNamespace())
    assert _action_stats(LiberoProtocolConfig(), SimpleNamespace()) is None  # tiny random VLA

    class Qwen2TokenizerFast:  # the class name is what is looked at
        pass

    assert _prompt_template(SimpleNamespace(tokenizer=Qwen2TokenizerFast())) == MINIVLA_QWEN_PROMPT
    assert _prompt_template(SimpleNamespace(tokenizer=object())) == OPENVLA_PROMPT
    # a Prismatic run says its LM: MiniVLA's prompt whatever the tokenizer's class
    prismatic_run = SimpleNamespace(config=SimpleNamespace(llm_backbone_id="qwen25-0_5b-extra"))
    assert _prompt_template(SimpleNamespace(tokenizer=object()), prismatic_run) == MINIVLA_QWEN_PROMPT


def test_a_vq_checkpoint_gets_its_vq_tokenizer_and_is_never_read_as_bins(tmp_path):
    import shutil
    from pathlib import Path
    from types import SimpleNamespace

    from agents.vla.action_tokenizer import VQActionTokenizer
    from agents.experiments.libero_protocol import _action_tokenizer

    golden_vq = Path(__file__).resolve().parents[2] / "golden" / "minivla" / "vq"
    processor = SimpleNamespace(tokenizer=list(range(600)))  # len() = 600 action-vocabulary end
    model = SimpleNamespace(config=SimpleNamespace())
    assert _action_tokenizer(LiberoProtocolConfig(), model, processor) is None  # tiny VLA: bins
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"action_tokenizer": "libero_vq_extra_action_tokenizer"}))
    with pytest.raises(ValueError, match="VQ action tokens.*--vq"):
        _action_tokenizer(LiberoProtocolConfig(vla=str(ckpt)), model, processor)
    tok = _action_tokenizer(LiberoProtocolConfig(vla=str(ckpt), vq=str(golden_vq)), model, processor)
    assert isinstance(tok, VQActionTokenizer) and tok.token_end == 600
    shutil.copytree(golden_vq, ckpt / "vq")  # found in the checkpoint folder without --vq
    assert isinstance(_action_tokenizer(LiberoProtocolConfig(vla=str(ckpt)), model, processor), VQActionTokenizer)

    # a Prismatic run: its action tokenizer's name decides, its VQ folder is vq/<name>
    run = tmp_path / "prismatic-run"
    bins = SimpleNamespace(config=SimpleNamespace(action_tokenizer="extra_action_tokenizer", action_vocab_size=590))
    shutil.copytree(golden_vq, run / "vq")  # a stray VQ folder does not turn a bins run into VQ
    assert _action_tokenizer(LiberoProtocolConfig(vla=str(run)), bins, processor) is None
    with pytest.raises(ValueError, match="--vq was given.*binned"):
        _action_tokenizer(LiberoProtocolConfig(vla=str(run), vq=str(golden_vq)), bins, processor)
    vq_run = SimpleNamespace(config=SimpleNamespace(action_tokenizer="libero_vq_extra_action_tokenizer",
                                                    action_vocab_size=590))
    shutil.rmtree(run / "vq")
    with pytest.raises(ValueError, match="VQ action tokens.*--vq"):
        _action_tokenizer(LiberoProtocolConfig(vla=str(run)), vq_run, processor)
    shutil.copytree(golden_vq, run / "vq" / "pretrain_vq+mx-libero_90+fach-7+ng-7+nemb-128+nlatent-512")
    tok = _action_tokenizer(LiberoProtocolConfig(vla=str(run)), vq_run, processor)
    assert isinstance(tok, VQActionTokenizer) and tok.token_end == 590  # the run's action_vocab_size


def test_table_has_the_papers_layout_with_the_spread_over_seeds():
    cells = [{"method": "sparse", "seed": s, "success": {"0": [1.0, 0.0], "3": [v, v]}} for s, v in ((0, 0.0), (1, 1.0))]
    cells.append({"method": "wmrl", "seed": 0, "success": {"0": [1.0, 1.0], "3": [0.0, 1.0]}})
    table = results_table(cells, ("sparse", "robometer", "wmrl"), (0, 3)).splitlines()
    assert table[0] == "| method | task 0 | task 3 | average |"
    assert table[2] == "| sparse (n=2) | 50.0 ± 0.0 | 50.0 ± 70.7 | 50.0 ± 35.4 |"
    assert table[3] == "| wmrl (n=1) | 100.0 | 50.0 | 75.0 |"  # no robometer row: it did not run
    assert len(table) == 4


@pytest.mark.slow
def test_quick_preset_runs_the_three_methods_on_the_real_simulator_and_resumes(tmp_path):
    pytest.importorskip("libero.libero", reason="LIBERO not installed (pip install -e '.[libero]')")
    cfg = dataclasses.replace(LIBERO_PRESETS["quick"], out=str(tmp_path))
    res = main_libero(cfg)
    cells = {c["method"]: c for c in res["cells"]}
    assert list(cells) == ["sparse", "robometer", "wmrl"]
    groups = cfg.steps * cfg.groups_per_step
    for c in cells.values():
        assert c["groups"] == groups and len(c["history"]) == cfg.steps
        assert set(c["success"]) == {"0"} and len(c["success"]["0"]) == len(cfg.eval_states)
        assert all(x in (0.0, 1.0) for x in c["success"]["0"])
    assert cells["sparse"]["anchor_groups"] == groups and cells["sparse"]["world_model_calls"] == 0
    assert cells["robometer"]["anchor_groups"] == 0
    assert cells["robometer"]["world_model_calls"] == groups * cfg.group_size  # one score per episode
    assert 0 < cells["wmrl"]["anchor_groups"] < groups  # anchors and world-model groups
    assert cells["wmrl"]["world_model_calls"] == groups * cfg.group_size  # the world model scores every group
    table = (tmp_path / "table.md").read_text().splitlines()
    assert table[0] == "| method | task 0 | average |" and len(table) == 5
    assert (tmp_path / "success.png").stat().st_size > 1000

    # finished cells are kept: a second run trains and evaluates nothing
    again = main_libero(cfg)
    assert again["cells"] == json.loads((tmp_path / "results.json").read_text())["cells"]
    assert [c["history"] for c in again["cells"]] == [c["history"] for c in res["cells"]]
    # a cell in progress resumes from its checkpoint: drop the finished wmrl cell, keep its checkpoint
    saved = json.loads((tmp_path / "results.json").read_text())
    saved["cells"] = [c for c in saved["cells"] if c["method"] != "wmrl"]
    (tmp_path / "results.json").write_text(json.dumps(saved))
    resumed = {c["method"]: c for c in main_libero(cfg)["cells"]}
    assert resumed["wmrl"]["history"] == cells["wmrl"]["history"]  # no step trained again
    with pytest.raises(ValueError, match="other settings"):
        main_libero(dataclasses.replace(cfg, max_steps=7))


@pytest.mark.slow
def test_quick_preset_trains_a_prismatic_minivla_run_on_the_real_simulator(tmp_path, monkeypatch):
    """``wmrl libero --vla RUN`` with a MiniVLA run in the authors' Prismatic format (the toy-width
    golden run of tests/agents/vla/test_prismatic_golden.py, its tokenizer copied to RUN/tokenizer): loaded
    through load_vla, MiniVLA's prompt and the run's action statistics, GRPO steps on LIBERO."""
    import shutil
    from pathlib import Path

    import agents.vla.load as vla_load
    import agents.vla.prismatic as prismatic

    pytest.importorskip("libero.libero", reason="LIBERO not installed (pip install -e '.[libero]')")
    golden = Path(__file__).resolve().parents[2] / "golden" / "prismatic"
    tiny = json.loads((golden / "meta.json").read_text())["tiny"]
    # the toy run's head counts (MiniVLA's are 16/16/14; a checkpoint does not store them)
    monkeypatch.setitem(vla_load._VISION_HEADS, "dinosiglip-vit-so-224px",
                        {"dino": tiny["dino"]["num_heads"], "siglip": tiny["siglip"]["num_heads"]})
    monkeypatch.setitem(prismatic.QWEN25_CONFIGS, "qwen25-0_5b", dict(
        prismatic.QWEN25_CONFIGS["qwen25-0_5b"], num_attention_heads=tiny["llm"]["num_attention_heads"]))
    run = tmp_path / "minivla-run"
    shutil.copytree(golden / "run", run)
    shutil.copytree(golden / "tokenizer", run / "tokenizer")
    cfg = dataclasses.replace(LIBERO_PRESETS["quick"], out=str(tmp_path / "out"), methods=("wmrl",), vla=str(run),
                              render_size=64, multisample=True)  # rendered larger and resized, as the authors
    res = main_libero(cfg)
    (cell,) = res["cells"]
    groups = cfg.steps * cfg.groups_per_step
    assert cell["groups"] == groups and len(cell["history"]) == cfg.steps
    assert 0 < cell["anchor_groups"] < groups
    assert len(cell["success"]["0"]) == len(cfg.eval_states)
