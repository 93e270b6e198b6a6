"""wmrl's Robometer input and output details against golden files written by the authors' code.

``tests/golden/robometer`` was written by ``tests/golden/make_robometer_golden.py``, which runs
robometer/robometer's own functions (commit in ``meta.json``) in their own environment, no wmrl
import: ``linspace_subsample_frames``, ``RBMBatchCollator._process_progress_batch`` with
``qwen_vl_utils.process_vision_info`` (what the processor receives), ``PredictionHeadsMixin`` with
``convert_bins_to_continuous`` and the success sigmoid. One test per detail; each fails on a
mismatch in that detail.

The chat text is checked against Qwen3-VL-4B-Instruct's own template rendering the collator's
conversation. Not covered (no Qwen3-VL tokenizer is reachable here): the token ids, which come
from the checkpoint's own tokenizer, and the backbone's forward (``transformers.Qwen3VLModel``
itself).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from wmrl_envs.envs.libero.robometer import (
    PROG_TOKEN,
    PROGRESS_PROMPT,
    RobometerHeadConfig,
    build_tiny_robometer,
    uniform_frame_indices,
)
from wmrl_envs.envs.libero.robometer.processor import CHAT_TEMPLATE_KWARGS

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "robometer"
sys.path.insert(0, str(GOLDEN.parent))
from make_robometer_golden import FRAME_SIZES, INSTRUCTION, pattern_frame  # noqa: E402  (numpy only)

sys.path.pop(0)
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def golden():
    return dict(np.load(GOLDEN / "golden.npz"))


@pytest.fixture(scope="module")
def query():
    return json.loads((GOLDEN / "query.json").read_text())


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_robometer(seed=0, hidden_size=32)


def test_frame_indices_match_linspace_subsample_frames():
    """The frames the model sees: Robometer's linspace_subsample_frames (rint, halves to even),
    every frame once when the episode is not longer than the frames asked for."""
    from wmrl_envs.envs.libero.robometer import RobometerWorldModel

    ref = json.loads((GOLDEN / "frames.json").read_text())
    wm = object.__new__(RobometerWorldModel)  # _select reads only these settings
    mismatches = []
    for key, expected in ref.items():
        total, n = map(int, key.split(","))
        wm.reward, wm.n_frames = "reference", n
        if wm._select(total) != expected:
            mismatches.append((total, n, wm._select(total), expected))
        if total >= n and uniform_frame_indices(total, n).tolist() != expected:
            mismatches.append(("uniform_frame_indices", total, n))
    assert not mismatches, mismatches[:5]
    assert any(v != sorted(set(v)) or len(v) < 8 for v in ref.values())  # the file has short episodes too


def test_prompt_text_matches_the_collator(query):
    assert query["content"][0] == {"type": "text", "text": PROGRESS_PROMPT.format(task=INSTRUCTION)}


def test_frames_and_progress_tokens_in_the_collators_order(tiny, query):
    """Multi-image query: prompt, then each frame followed by <|prog_token|> (3 frames)."""
    _, processor = tiny
    assert processor.messages(INSTRUCTION, 3) == [{"role": query["role"], "content": query["content"]}]
    assert query["content"][2] == {"type": "text", "text": PROG_TOKEN}


def test_chat_template_arguments_match_the_collator(query):
    authors = dict(query["chat_template_kwargs"])
    assert authors.pop("fps") == 1  # a video setting; images are unaffected
    assert CHAT_TEMPLATE_KWARGS == authors


def test_processor_is_called_without_resizing(tiny, query):
    """The collator resizes frames in process_vision_info and tells the processor not to; so
    does RobometerProcessor when it calls its image processor."""
    assert query["processor_kwargs"]["do_resize"] is False
    _, processor = tiny
    real, calls = processor.image_processor, []

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    processor.image_processor = recording
    try:
        processor([(INSTRUCTION, [pattern_frame(100, 150)] * 2)])
    finally:
        processor.image_processor = real
    assert calls and all(c.get("do_resize") is False for c in calls)


def test_frame_sizes_match_process_vision_info(tiny, query):
    _, processor = tiny
    assert processor.factor == 32  # Qwen3-VL: patch 16, merge 2, as the golden run
    ours = [list(processor.resized_size(h, w)) for h, w in FRAME_SIZES for _ in range(3)]
    assert ours == query["processed_sizes"]


def test_resized_pixels_match_process_vision_info(tiny, golden):
    _, processor = tiny
    for i in range(9):
        h, w = FRAME_SIZES[i // 3]
        frame = pattern_frame(h, w)
        frame = [frame, frame[::-1], frame[:, ::-1]][i % 3]
        ours = np.asarray(processor._pil(np.ascontiguousarray(frame)))
        np.testing.assert_array_equal(ours, golden[f"processed_{i}"], err_msg=f"frame {i} ({h}x{w})")


def test_heads_layout_progress_bins_and_success_match_the_authors(tiny, golden):
    model, _ = tiny
    assert model.head_config.progress_bins == 10
    state = torch.load(GOLDEN / "heads.pt", map_location="cpu", weights_only=True)
    ours = {k: v for k, v in model.state_dict().items() if k.split(".")[0] in ("progress_head", "success_head", "preference_head")}
    assert {k: tuple(v.shape) for k, v in ours.items()} == {k: tuple(v.shape) for k, v in state.items()}
    model.load_state_dict(state, strict=False)
    model.eval()
    with torch.no_grad():
        hidden = torch.from_numpy(golden["hidden"])
        np.testing.assert_allclose(model.progress_head(hidden).numpy(), golden["progress_logits"], atol=1e-6)
        progress, success = model.read_heads(hidden)
    np.testing.assert_allclose(progress.numpy(), golden["progress"], atol=1e-6)
    np.testing.assert_allclose(success.numpy(), golden["success"], atol=1e-6)


def test_continuous_progress_head_ends_in_a_sigmoid():
    """PredictionHeadsMixin without discrete bins: one output and a Sigmoid (heads.py)."""
    model, _ = build_tiny_robometer(seed=0, hidden_size=32, progress_bins=None)
    assert isinstance(model.progress_head[-1], torch.nn.Sigmoid) and model.progress_head[-2].out_features == 1
    assert RobometerHeadConfig(progress_bins=None).progress_bins is None


def test_text_without_a_template_is_what_qwen3_vl_renders(tiny, query):
    """A checkpoint folder without a chat template: the user turn written out equals what
    Qwen3-VL-4B-Instruct's own template renders from the collator's conversation."""
    _, processor = tiny
    assert processor.chat_template is None
    assert processor.text(INSTRUCTION, 3) == query["rendered"]
