"""wmrl's MiniVLA action tokenizers and prompts against golden files written by the authors' own code.

``tests/golden/minivla`` was written by ``tests/golden/make_minivla_golden.py``, which runs
openvla-mini's ``prismatic/vla/action_tokenizer.py`` (``ActionTokenizer``, ``VQActionTokenizer``),
its prompt builders (``QwenPromptBuilder``, ``PurePromptBuilder``) and VQ-BeT's ``VqVae`` in their own environment (no wmrl import); ``meta.json`` names the
commits. The VQ folder there is in the authors' layout (``config.json`` + ``checkpoints/model.pt``)
and was saved by their ``VqVae.state_dict()``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from agents.vla.action_tokenizer import ActionTokenizer, VQActionTokenizer

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "minivla"


@pytest.fixture(scope="module")
def golden():
    return dict(np.load(GOLDEN / "golden.npz"))


@pytest.fixture(scope="module")
def vq(golden):
    return VQActionTokenizer(int(golden["vocab"]), GOLDEN / "vq")


def test_bins_encode_matches_the_authors(golden):
    tok = ActionTokenizer(int(golden["vocab"]))
    np.testing.assert_array_equal(tok.encode(golden["bins_actions"]), golden["bins_ids"])


def test_bins_decode_matches_the_authors(golden):
    tok = ActionTokenizer(int(golden["vocab"]))
    np.testing.assert_allclose(tok.decode(golden["bins_ids"]), golden["bins_decoded"], atol=1e-7)
    # ids of the action range only: the authors clip ids below it to the last bin, wmrl refuses them
    ids, ref = golden["bins_all_ids"], golden["bins_all_decoded"]
    inside = ids >= tok.token_begin
    np.testing.assert_allclose(tok.decode(ids[inside].reshape(-1, 1).repeat(7, 1))[:, 0], ref[inside], atol=1e-7)
    with pytest.raises(ValueError, match="outside the action range"):
        tok.decode(ids[~inside][:7])


def test_vq_reads_the_authors_folder(vq):
    cfg = json.loads((GOLDEN / "vq" / "config.json").read_text())
    assert (vq.horizon, vq.action_dim, vq.groups, vq.n_bins) == (
        cfg["input_dim_h"],
        cfg["input_dim_w"],
        cfg["vqvae_groups"],
        cfg["vqvae_n_embed"],
    )
    assert (vq.token_begin, vq.token_end) == (vq.vocab_size - vq.n_bins, vq.vocab_size)
    assert vq.n_tokens(1) == vq.n_tokens(vq.horizon) == vq.groups


def test_vq_encode_matches_the_authors(vq, golden):
    ids = vq.encode_chunk(golden["vq_chunks"])
    np.testing.assert_array_equal(ids, golden["vq_ids"])
    assert len(np.unique(ids, axis=0)) > 10  # the golden inputs exercise many codes, not one


def test_vq_decode_matches_the_authors(vq, golden):
    chunks = vq.decode_chunk(golden["vq_ids"])
    assert chunks.shape == (len(golden["vq_ids"]), vq.horizon, vq.action_dim) and chunks.dtype == np.float32
    np.testing.assert_allclose(chunks, golden["vq_decoded"], atol=1e-5)
    # the authors' decode_token_ids_to_actions returns step 0 of the chunk
    np.testing.assert_allclose(chunks[:, 0], golden["vq_first"], atol=1e-5)
    np.testing.assert_allclose(vq.decode_chunk(golden["vq_ids"][0])[0], golden["vq_single"], atol=1e-5)
    # every code combination
    np.testing.assert_allclose(vq.decode_chunk(golden["vq_grid_ids"])[:, 0], golden["vq_grid_first"], atol=1e-5)


def test_vq_round_trip_of_codes_through_a_trained_vq(vq, golden):
    """codes → actions → codes on the authors' trained tiny VQ: exact for most code rows of the
    data it was trained on (the format does not promise it for every row; see the class)."""
    ids = golden["vq_ids"]
    again = vq.encode_chunk(vq.decode_chunk(ids))
    assert (again == ids).all(axis=1).mean() >= 0.5


def test_vq_bad_input_says_what_is_wrong(vq, tmp_path):
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 4, 7\)"):
        vq.encode_chunk(np.zeros((3, 7)))
    with pytest.raises(ValueError, match="NaN"):
        vq.encode_chunk(np.full((4, 7), np.nan))
    with pytest.raises(ValueError, match="outside the action range"):
        vq.decode_chunk(np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="1..4 actions"):
        vq.n_tokens(5)
    with pytest.raises(FileNotFoundError, match="checkpoints/model.pt"):
        VQActionTokenizer(1000, tmp_path)
    bad = tmp_path / "vq"
    shutil.copytree(GOLDEN / "vq", bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["input_dim_h"] = 5
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="does not match"):
        VQActionTokenizer(1000, bad)


def test_vq_loads_without_pickled_code(golden):
    # the checkpoint holds only tensors and plain containers: torch's safe loader reads it
    state = torch.load(GOLDEN / "vq" / "checkpoints" / "model.pt", map_location="cpu", weights_only=True)
    assert set(state) == {"encoder", "decoder", "optimizer", "vq_embedding"}


@pytest.mark.parametrize(("template_name", "key"), [("MINIVLA_QWEN_PROMPT", "qwen"), ("OPENVLA_PROMPT", "pure")])
def test_prompt_text_matches_the_authors_prompt_builders(template_name, key):
    """MiniVLA's QwenPromptBuilder / OpenVLA's PurePromptBuilder fed predict_action's user turn
    (openvla.py l.53-55, instruction lower-cased), for the ten libero_10 instructions."""
    import agents.vla.policy as vla

    ref = json.loads((GOLDEN / "prompts.json").read_text())
    policy = object.__new__(vla.VLAPolicy)  # build_prompt reads only these two attributes
    policy.prompt_template, policy.image_placeholder = getattr(vla, template_name), None
    ours = [policy.build_prompt({"instruction": text}) for text in ref["instructions"]]
    assert ours == ref[key]
