"""Tests of the ``wmrl_envs.envs.libero.robometer`` package: the reference reward, frame selection, the
world model on a tiny randomly initialised Robometer (Qwen3-VL + heads), and loading errors.

No real Robometer weights are available here (they cannot be downloaded): the model tests use
:func:`build_tiny_robometer`, the same architecture at toy size, and check shapes, ranges,
determinism, batching, failure handling and the save/load round trip, not the scores' meaning.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

torch.set_num_threads(1)

from wmrl_envs.world_models import WorldModel  # noqa: E402
from wmrl_envs.world_models.base import Trajectory  # noqa: E402
from wmrl_envs.envs.libero.robometer import (  # noqa: E402
    PROG_TOKEN,
    SPECIAL_TOKENS,
    RobometerHeadConfig,
    RobometerProcessor,
    RobometerWeightsNotFoundError,
    RobometerWorldModel,
    build_tiny_robometer,
    load_checkpoint,
    robometer_reward,
    save_checkpoint,
    uniform_frame_indices,
)

INSTRUCTIONS = [
    "put both the alphabet soup and the tomato sauce in the basket",
    "turn on the stove",
    "pick up the book and place it in the back compartment of the caddy",
]


# ---------------------------------------------------------------------------- reference reward
@pytest.mark.parametrize(
    ("progress", "n_frames", "k", "expected"),
    [
        ([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], 8, 3, 0.5),  # (0.5+0.6+0.7)/3 - (0+0.1+0.2)/3
        ([0.2] * 8, 8, 3, 0.0),
        ([1.0, 1.0, 1.0, 0.5, 0.5, 0.0, 0.0, 0.0], 8, 3, -1.0),
        ([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3, 0.9], 8, 3, 0.4),
        ([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], 8, 1, 0.7),
        ([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], 8, 8, 0.0),  # both windows = everything
        ([0.1, 0.4, 0.8, 1.0], 4, 2, 0.65),
        ([0.3], 1, 1, 0.0),
    ],
)
def test_reward_on_hand_made_progress(progress, n_frames, k, expected):
    assert robometer_reward(progress, n_frames=n_frames, k=k) == pytest.approx(expected, abs=1e-12)


def test_reward_accepts_arrays_and_subsamples_dense_progress():
    dense = np.linspace(0.0, 1.0, 15)  # 15 frames: the 8 uniform ones are frames 0, 2, ..., 14
    assert robometer_reward(dense) == pytest.approx(robometer_reward(dense[::2]))
    assert robometer_reward(np.asarray([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], np.float32)) == pytest.approx(0.5)
    # fewer values than n_frames: frames are repeated, as in uniform_frame_indices
    assert robometer_reward([0.0, 1.0]) == pytest.approx(1.0)
    assert isinstance(robometer_reward([0.0] * 8), float)


@pytest.mark.parametrize(
    ("progress", "kwargs", "match"),
    [
        ([], {}, "empty"),
        (np.zeros(0), {}, "empty"),
        ([0.1, float("nan"), 0.3], {}, "NaN or infinite values at positions \\[1\\]"),
        ([0.1, float("inf")], {}, "NaN or infinite"),
        ([[0.1, 0.2], [0.3, 0.4]], {}, "1-d"),
        (["a", "b"], {}, "sequence of numbers"),
        ([0.1] * 8, {"k": 9}, "k=9 frames per end cannot exceed n_frames=8"),
        ([0.1] * 8, {"k": 0}, "k must be >= 1"),
        ([0.1] * 8, {"n_frames": 0}, "n_frames must be >= 1"),
        ([0.1] * 8, {"k": 2.0}, "k must be an int"),
        ([0.1] * 8, {"k": True}, "k must be an int"),
    ],
)
def test_reward_rejects_bad_input(progress, kwargs, match):
    with pytest.raises(ValueError, match=match):
        robometer_reward(progress, **kwargs)


@pytest.mark.parametrize(
    ("frames", "n", "expected"),
    [
        (15, 8, [0, 2, 4, 6, 8, 10, 12, 14]),
        (8, 8, [0, 1, 2, 3, 4, 5, 6, 7]),
        (1, 8, [0] * 8),
        (3, 8, [0, 0, 1, 1, 1, 1, 2, 2]),
        (2, 3, [0, 0, 1]),  # the middle position 0.5 rounds to even (np.rint, as Robometer's sampling)
        (6, 3, [0, 2, 5]),  # 2.5 -> 2
        (11, 3, [0, 5, 10]),
        (11, 1, [10]),
    ],
)
def test_uniform_frame_indices(frames, n, expected):
    idx = uniform_frame_indices(frames, n)
    assert idx.dtype == np.int64 and idx.shape == (n,)
    assert idx.tolist() == expected


def test_uniform_frame_indices_long_episode():
    idx = uniform_frame_indices(521, 8)  # LIBERO-Long: 520 steps -> 521 frames
    assert idx[0] == 0 and idx[-1] == 520
    assert np.all(np.diff(idx) > 0)
    assert np.all(np.abs(np.diff(idx) - 520 / 7) <= 1)


@pytest.mark.parametrize(("frames", "n", "match"), [(0, 8, "T_plus_1"), (5, 0, "n "), (5.0, 8, "must be an int")])
def test_uniform_frame_indices_errors(frames, n, match):
    with pytest.raises(ValueError, match=match):
        uniform_frame_indices(frames, n)


# ---------------------------------------------------------------------------- tiny model
def _trajectories(seed: int = 0) -> list[Trajectory]:
    """Three synthetic episodes of random images: 13 frames 64x64, 4 frames 96x64 float, 31 frames 64x64."""
    rng = np.random.default_rng(seed)

    def frames(n, shape, floats=False):
        if floats:
            return [rng.random(shape, dtype=np.float32) for _ in range(n)]
        return [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(n)]

    out = []
    for n, shape, floats in ((13, (64, 64, 3), False), (4, (96, 64, 3), True), (31, (64, 64, 3), False)):
        obs = [{"agentview_image": f, "proprio": np.zeros(8)} for f in frames(n, shape, floats)]
        out.append(Trajectory(observations=obs, actions=[np.zeros(7)] * (n - 1), done=True))
    return out


def _contexts() -> list[dict]:
    return [{"instruction": text} for text in INSTRUCTIONS]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_robometer(seed=0)


def test_world_model_protocol(tiny):
    wm = RobometerWorldModel(*tiny)
    assert isinstance(wm, WorldModel)


def test_predict_reference_shapes_and_ranges(tiny):
    wm = RobometerWorldModel(*tiny, batch_size=3)
    trajs = _trajectories()
    preds = wm.predict(_contexts(), trajs)
    assert len(preds) == 3
    for pred, traj in zip(preds, trajs):
        ex = pred.extras
        assert pred.model_called and "error" not in ex
        assert ex["reward_mode"] == "reference"
        seen = min(8, len(traj.observations))  # a 4-frame episode: every frame once, as Robometer's sampling
        assert len(ex["progress"]) == seen and len(ex["success_probs"]) == seen
        assert all(isinstance(p, float) and 0.0 <= p <= 1.0 for p in ex["progress"])
        assert all(0.0 <= p <= 1.0 for p in ex["success_probs"])
        assert ex["success_prob"] == ex["success_probs"][-1]
        n_obs = len(traj.observations)
        assert ex["frame_indices"] == (uniform_frame_indices(n_obs, 8).tolist() if n_obs > 8 else list(range(n_obs)))
        assert ex["n_observations"] == len(traj.observations)
        assert isinstance(pred.score, float) and -1.0 <= pred.score <= 1.0
        assert pred.score == pytest.approx(robometer_reward(ex["progress"]))
    assert wm.n_model_calls == 3 and wm.n_forward_calls == 1 and wm.frames_seen == 8 + 4 + 8
    assert wm.stats()["seconds"] > 0


def test_predict_is_deterministic(tiny):
    wm = RobometerWorldModel(*tiny, batch_size=3)
    first = wm.predict(_contexts(), _trajectories())
    second = wm.predict(_contexts(), _trajectories())
    assert [p.score for p in first] == [p.score for p in second]
    assert [p.extras["progress"] for p in first] == [p.extras["progress"] for p in second]
    rebuilt_wm = RobometerWorldModel(*build_tiny_robometer(seed=0), batch_size=3)
    rebuilt = rebuilt_wm.predict(_contexts(), _trajectories())
    assert [p.score for p in rebuilt] == pytest.approx([p.score for p in first], abs=1e-6)
    other = RobometerWorldModel(*build_tiny_robometer(seed=1), batch_size=3).predict(_contexts(), _trajectories())
    assert [p.extras["progress"] for p in other] != [p.extras["progress"] for p in first]


def test_batching_does_not_change_scores(tiny):
    model, processor = tiny
    # the batch really is padded: instructions and frame sizes differ in length
    enc = processor(
        [(INSTRUCTIONS[0], [np.zeros((64, 64, 3), np.uint8)]), (INSTRUCTIONS[1], [np.zeros((96, 64, 3), np.uint8)])]
    )
    assert (enc["attention_mask"] == 0).any()
    by_one = RobometerWorldModel(model, processor, batch_size=1).predict(_contexts(), _trajectories())
    by_three = RobometerWorldModel(model, processor, batch_size=3).predict(_contexts(), _trajectories())
    by_two = RobometerWorldModel(model, processor, batch_size=2).predict(_contexts(), _trajectories())
    for a, b, c in zip(by_one, by_three, by_two):
        assert np.allclose(a.extras["progress"], b.extras["progress"], atol=1e-5)
        assert np.allclose(a.extras["success_probs"], b.extras["success_probs"], atol=1e-5)
        assert np.allclose(a.extras["progress"], c.extras["progress"], atol=1e-5)
        assert a.score == pytest.approx(b.score, abs=1e-5)


def test_dense_reward(tiny):
    wm = RobometerWorldModel(*tiny, reward="dense", dense_stride=5)
    trajs = _trajectories()
    preds = wm.predict(_contexts(), trajs)
    assert preds[0].extras["frame_indices"] == [0, 5, 10, 12]  # the last frame is always seen
    assert preds[1].extras["frame_indices"] == [0, 3]
    assert preds[2].extras["frame_indices"] == [0, 5, 10, 15, 20, 25, 30]
    for pred in preds:
        assert len(pred.extras["progress"]) == len(pred.extras["frame_indices"])
        assert pred.score == pred.extras["progress"][-1]
        assert 0.0 <= pred.score <= 1.0
    every = RobometerWorldModel(*tiny, reward="dense").predict(_contexts()[:1], trajs[:1])[0]
    assert every.extras["frame_indices"] == list(range(13))
    capped = RobometerWorldModel(*tiny, reward="dense", max_dense_frames=4).predict(_contexts()[2:], trajs[2:])[0]
    assert capped.extras["frame_indices"] == [0, 10, 20, 30]


def test_bad_trajectories_are_ungraded_not_raised(tiny):
    wm = RobometerWorldModel(*tiny, batch_size=4)
    good = _trajectories()
    no_image = Trajectory([{"proprio": np.zeros(8)}] * 3, [0, 0], True)
    bad_frame = Trajectory([{"agentview_image": np.zeros((5,))}] * 2, [0], True)
    contexts = [_contexts()[0], _contexts()[0], {"task": "x"}, _contexts()[0], _contexts()[1], "turn on the stove"]
    actions = [Trajectory([], [], True), no_image, good[0], bad_frame, good[1], good[1]]
    preds = wm.predict(contexts, actions)
    assert [p.score is None for p in preds] == [True, True, True, True, False, False]
    assert "no frames" in preds[0].extras["error"]
    assert "'agentview_image'" in preds[1].extras["error"]
    assert "instruction" in preds[2].extras["error"]
    assert "(H, W, 3)" in preds[3].extras["error"]
    assert not any(p.model_called for p in preds[:4])
    assert preds[5].score == pytest.approx(preds[4].score)  # a plain string is the instruction
    assert wm.n_failed == 4
    with pytest.raises(ValueError, match="contexts"):
        wm.predict(contexts[:2], actions)


def test_model_failure_is_isolated(tiny, monkeypatch):
    wm = RobometerWorldModel(*tiny, batch_size=3)
    original = wm.score_frames

    def flaky(queries, **kwargs):
        if any(instruction == INSTRUCTIONS[1] for instruction, _ in queries):
            raise RuntimeError("boom")
        return original(queries, **kwargs)

    monkeypatch.setattr(wm, "score_frames", flaky)
    preds = wm.predict(_contexts(), _trajectories())
    assert [p.score is None for p in preds] == [False, True, False]  # the batch fails, then one by one
    assert preds[1].model_called and "boom" in preds[1].extras["error"]
    assert wm.n_failed == 1 and wm.n_model_calls == 2


@pytest.mark.parametrize(
    "head",
    [
        {"progress_bins": None},
        {"progress_bins": 5},
        {"use_per_frame_progress_token": False, "frame_pooling": "mean"},
        {"use_per_frame_progress_token": False, "frame_pooling": "attention"},
        {"use_per_frame_progress_token": False, "frame_pooling": "boundary"},
    ],
)
def test_head_variants(head):
    model, processor = build_tiny_robometer(seed=2, **head)
    preds = RobometerWorldModel(model, processor, batch_size=3).predict(_contexts(), _trajectories())
    for pred, traj in zip(preds, _trajectories()):
        assert len(pred.extras["progress"]) == min(8, len(traj.observations))
        assert all(0.0 <= p <= 1.0 for p in pred.extras["progress"])
        assert -1.0 <= pred.score <= 1.0


def test_processor_text_and_tokens(tiny):
    _, processor = tiny
    text = processor.text("open the drawer", 2)
    assert text.startswith("<|im_start|>user\nThe task for the robot is 'open the drawer'.")
    assert text.endswith(
        "Picture 1: <|vision_start|><|image_pad|><|vision_end|><|prog_token|>"
        "Picture 2: <|vision_start|><|image_pad|><|vision_end|><|prog_token|><|im_end|>\n"
    )
    _, templated = build_tiny_robometer(seed=0, with_chat_template=True)
    assert templated.text("open the drawer", 2) == text  # the Jinja path renders the same turn
    vocab = processor.tokenizer.get_vocab()
    assert all(t in vocab for t in SPECIAL_TOKENS)
    assert [vocab[t] for t in SPECIAL_TOKENS] == sorted(vocab[t] for t in SPECIAL_TOKENS)
    enc = processor([("open the drawer", [np.zeros((64, 64, 3), np.uint8)] * 3)])
    assert int((enc["input_ids"] == processor.prog_token_id).sum()) == 3
    assert enc["image_grid_thw"].tolist() == [[1, 4, 4]] * 3  # 64 px = 4 patches of 16
    assert int(enc["mm_token_type_ids"].sum()) == 3 * 4  # 2x2 merge: 4 visual tokens per frame
    assert processor.resized_size(128, 128) == (128, 128)  # LIBERO frames keep their size
    assert processor.resized_size(200, 100) == (192, 96)
    assert processor.resized_size(20, 20) == (64, 64)  # at least 4 visual tokens
    with pytest.raises(ValueError, match="at least one frame"):
        processor([("x", [])])
    with pytest.raises(TypeError, match="tokenizer"):
        RobometerProcessor.wrap(object())


def test_constructor_validation(tiny):
    with pytest.raises(ValueError, match="reward"):
        RobometerWorldModel(*tiny, reward="sparse")
    with pytest.raises(ValueError, match="k=9"):
        RobometerWorldModel(*tiny, k=9)
    with pytest.raises(ValueError, match="batch_size"):
        RobometerWorldModel(*tiny, batch_size=0)
    with pytest.raises(ValueError, match="progress_bins"):
        RobometerHeadConfig(progress_bins=1)
    with pytest.raises(ValueError, match="frame_pooling"):
        RobometerHeadConfig(frame_pooling="max")


# ---------------------------------------------------------------------------- loading
def test_missing_checkpoint_raises_clear_error(tmp_path):
    missing = tmp_path / "no-such-robometer"
    with pytest.raises(RobometerWeightsNotFoundError) as info:
        RobometerWorldModel.from_pretrained(missing)
    assert isinstance(info.value, FileNotFoundError)
    message = str(info.value)
    assert str(missing) in message and "does not exist" in message
    assert "Download the checkpoint on a machine with internet access" in message
    with pytest.raises(FileNotFoundError, match="hub"):
        RobometerWorldModel.from_pretrained("wmrl-test/no-such-robometer", local_files_only=True)
    file = tmp_path / "weights.safetensors"
    file.write_bytes(b"")
    with pytest.raises(RobometerWeightsNotFoundError, match="is a file"):
        RobometerWorldModel.from_pretrained(file)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RobometerWeightsNotFoundError, match=r"lacks config.json, \*.safetensors"):
        RobometerWorldModel.from_pretrained(empty)


def test_save_and_load_round_trip(tiny, tmp_path):
    wm = RobometerWorldModel(*tiny, batch_size=3)
    folder = wm.save_pretrained(tmp_path / "ckpt")
    assert json.loads((folder / "config.json").read_text())["model_type"] == "qwen3_vl"
    loaded = RobometerWorldModel.from_pretrained(folder, device="cpu", batch_size=2)
    assert loaded.model.head_config.progress_bins == 10
    assert loaded.model.head_config.use_per_frame_progress_token
    assert loaded.processor.prog_token_id == wm.processor.prog_token_id
    a = wm.predict(_contexts(), _trajectories())
    b = loaded.predict(_contexts(), _trajectories())
    for x, y in zip(a, b):
        assert np.allclose(x.extras["progress"], y.extras["progress"], atol=1e-6)
        assert x.score == pytest.approx(y.score, abs=1e-6)


def test_load_and_save_checkpoint_without_the_world_model(tiny, tmp_path):
    model, processor = tiny
    folder = save_checkpoint(model, processor, tmp_path / "ckpt")
    assert folder == tmp_path / "ckpt"
    assert {"config.json", "model.safetensors", "config.yaml"} <= {p.name for p in folder.iterdir()}
    loaded_model, loaded_processor = load_checkpoint(folder, device="cpu")
    assert isinstance(loaded_model, type(model)) and isinstance(loaded_processor, RobometerProcessor)
    assert not loaded_model.training and not any(p.requires_grad for p in loaded_model.parameters())
    assert loaded_model.dtype == torch.float32 and loaded_model.head_config.progress_bins == 10
    assert loaded_processor.prog_token_id == processor.prog_token_id
    for key, value in model.state_dict().items():
        assert torch.equal(loaded_model.state_dict()[key], value), key
    with pytest.raises(RobometerWeightsNotFoundError, match="does not exist"):
        load_checkpoint(tmp_path / "missing")


def test_load_rejects_folder_without_heads(tiny, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = RobometerWorldModel(*tiny).save_pretrained(tmp_path / "ckpt")
    state = load_file(str(folder / "model.safetensors"))
    save_file({k: v for k, v in state.items() if k.startswith("model.")}, str(folder / "model.safetensors"))
    with pytest.raises(RobometerWeightsNotFoundError, match="no Robometer head weights"):
        RobometerWorldModel.from_pretrained(folder)


def test_bfloat16_load(tiny, tmp_path):
    folder = RobometerWorldModel(*tiny).save_pretrained(tmp_path / "ckpt")
    wm = RobometerWorldModel.from_pretrained(folder, device="cpu", dtype=torch.bfloat16)
    assert wm.model.dtype == torch.bfloat16 and wm.model.progress_head[0].weight.dtype == torch.bfloat16
    pred = wm.predict(_contexts()[:1], _trajectories()[:1])[0]
    assert pred.score is not None and all(0.0 <= p <= 1.0 for p in pred.extras["progress"])


def test_head_config_from_yaml(tmp_path):
    path = Path(tmp_path) / "config.yaml"
    path.write_text(
        "model:\n  use_per_frame_progress_token: false\n  frame_pooling: attention\n"
        "  progress_loss_type: ${loss.progress_loss_type}\n"
        "loss:\n  progress_loss_type: discrete\n  progress_discrete_bins: 20\n"
    )
    cfg = RobometerHeadConfig.from_experiment_yaml(path)
    assert (cfg.progress_bins, cfg.use_per_frame_progress_token, cfg.frame_pooling) == (20, False, "attention")
    path.write_text("model:\n  progress_loss_type: l2\n")
    assert RobometerHeadConfig.from_experiment_yaml(path).progress_bins is None
    path.write_text("data:\n  use_multi_image: false\n")
    with pytest.raises(ValueError, match="video-mode"):
        RobometerHeadConfig.from_experiment_yaml(path)


def test_prog_token_is_last_of_added_tokens(tiny):
    _, processor = tiny
    assert SPECIAL_TOKENS[-1] == PROG_TOKEN
    assert processor.prog_token_id == len(processor.tokenizer) - 1
    assert math.isfinite(processor.factor) and processor.factor == 32


def test_world_model_docstring_example_runs():
    import doctest

    from wmrl_envs.envs.libero.robometer import world_model

    runner = doctest.DocTestRunner()
    for t in doctest.DocTestFinder().find(world_model.RobometerWorldModel, "RobometerWorldModel",
                                          globs=dict(vars(world_model))):
        runner.run(t)
    assert runner.failures == 0 and runner.tries >= 5
