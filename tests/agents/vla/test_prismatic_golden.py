"""wmrl's Prismatic loader against what the authors' own code computes on the same run folder.

``tests/golden/prismatic`` was written by ``tests/golden/make_prismatic_golden.py``, which builds a
toy-width MiniVLA (``prism-qwen25-extra-dinosiglip-224px+0_5b``: DINOv2 + SigLIP towers from timm,
fused-GELU-MLP projector, Qwen2 LM with 256 extra tokens) with openvla-mini's code, saves it in
their run layout, loads it back with their ``load_vla`` and records pixels, prompt ids, logits and
``predict_action``'s greedy actions (no wmrl import; ``meta.json`` names the versions). Here the
same folder is loaded with :func:`agents.vla.load.load_prismatic_vla` (transformers' DINOv2 /
SigLIP / Qwen2, no timm) and driven through :class:`agents.vla.policy.VLAPolicy` as GRPO does.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from agents.vla.action_tokenizer import load_action_stats, unnormalize_actions
from agents.vla.load import (
    VLAWeightsNotFoundError,
    load_prismatic_vla,
    load_vla,
    prismatic_action_vocab_size,
    prismatic_tokenizer,
    prismatic_vq_folder,
)
from agents.vla.prismatic import PRISMATIC_BASE_VLMS, PrismaticFormatError
from agents.vla.policy import MINIVLA_QWEN_PROMPT, VLAPolicy, VLASamples

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "prismatic"
META = json.loads((GOLDEN / "meta.json").read_text())
HEADS = {"dino": META["tiny"]["dino"]["num_heads"], "siglip": META["tiny"]["siglip"]["num_heads"],
         "llm": META["tiny"]["llm"]["num_attention_heads"]}


@pytest.fixture(scope="module")
def golden():
    return dict(np.load(GOLDEN / "golden.npz", allow_pickle=True))


@pytest.fixture(scope="module")
def prompts():
    return json.loads((GOLDEN / "prompts.json").read_text())


@pytest.fixture(scope="module")
def loaded():
    torch.manual_seed(0)
    return load_prismatic_vla(GOLDEN / "run", tokenizer=GOLDEN / "tokenizer", heads=HEADS)


@pytest.fixture(scope="module")
def policy():
    """A GRPO policy (LoRA on the LM) on its own copy of the model."""
    model, processor = load_prismatic_vla(GOLDEN / "run", tokenizer=GOLDEN / "tokenizer", heads=HEADS)
    return VLAPolicy(model, processor, prompt_template=MINIVLA_QWEN_PROMPT)


def _observations(golden, prompts):
    """The golden's 4 cases, image-major: (256 px, instr 0), (256 px, instr 1), (128 px, ...)."""
    return [{"agentview_image": golden[f"images_{size}"], "instruction": instr}
            for size in (256, 128) for instr in prompts["instructions"]]


def test_run_facts(loaded):
    model, processor = loaded
    assert len(processor.tokenizer) == META["len_tokenizer"] == 525
    assert model.config.action_tokenizer == "extra_action_tokenizer"
    assert model.config.action_vocab_size == 525  # the 256 <|extra_i|> ids end the vocabulary
    assert processor.tokenizer.convert_tokens_to_ids("<|extra_0|>") == 525 - 256
    assert model.get_output_embeddings().weight.shape[0] == META["llm_vocab_rows"] == 576
    assert (model.config.num_patches, model.config.image_size) == (256, 224)
    assert model.config.checkpoint.endswith(Path(META["checkpoint"]).name)


def test_pixels_match_the_authors_transforms(loaded, golden):
    _, processor = loaded
    for i, size in enumerate((256, 128)):
        pv = processor.pixel_values(golden[f"images_{size}"]).numpy()
        np.testing.assert_allclose(pv[:3], golden["pixel_dino"][i], atol=1e-6)
        np.testing.assert_allclose(pv[3:], golden["pixel_siglip"][i], atol=1e-6)


def test_prompts_and_ids_match(loaded, golden, prompts):
    _, processor = loaded
    for k, obs in enumerate(_observations(golden, prompts)):
        text = MINIVLA_QWEN_PROMPT.format(instruction=obs["instruction"].lower())
        assert text == prompts["prompts"][k]
        enc = processor(images=[obs["agentview_image"]], text=[text])
        mask = enc["image_mask"][0].bool()
        assert int(mask.sum()) == 256 and bool(mask[1:257].all())  # patches right after the first token
        assert enc["input_ids"][0][~mask].tolist() == prompts["input_ids"][k]


def test_prompt_logits_match(loaded, golden, prompts):
    model, processor = loaded
    for k, obs in enumerate(_observations(golden, prompts)):
        enc = processor(images=[obs["agentview_image"]], text=[prompts["prompts"][k]])
        with torch.no_grad():
            logits = model(**enc).logits[0, -1].numpy()
        np.testing.assert_allclose(logits, golden["prompt_logits"][k], rtol=1e-5, atol=1e-4)


def test_grpo_logprobs_match_the_authors_teacher_forced_logits(policy, golden, prompts):
    """A left-padded batch of the 4 cases (two prompt lengths), scored through the key/value cache
    as GRPO scores sampled actions, against the authors' one-pass, unpadded logits."""
    assert (policy.action_tokenizer.token_begin, policy.action_tokenizer.token_end) == (525 - 256, 525)
    obs = _observations(golden, prompts)
    fixed = torch.as_tensor(golden["fixed_action_ids"], dtype=torch.long)
    samples = VLASamples(
        prompts=[policy.build_prompt(o) for o in obs], images=[[o["agentview_image"]] for o in obs],
        obs_index=torch.arange(4), tokens=fixed[None].repeat(4, 1), logprobs=torch.zeros(4, 7),
        actions=np.zeros((4, 1, 7), np.float32), group_size=1, chunk=1)
    with torch.no_grad():
        lp, _, _ = policy.grpo_logprobs(samples)
    forced = torch.as_tensor(golden["forced_logits"])  # (4, 7, V): logits predicting each fixed id
    ref = torch.log_softmax(forced[..., 525 - 256 : 525].double(), -1)
    ref = ref.gather(-1, (fixed - (525 - 256))[None, :, None].expand(4, 7, 1)).squeeze(-1)
    np.testing.assert_allclose(lp.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


def test_greedy_actions_match_predict_action(policy, golden, prompts):
    samples = policy.sample(_observations(golden, prompts), greedy=True)
    np.testing.assert_array_equal(samples.tokens.numpy(), np.stack(golden["greedy_ids"]))
    stats = load_action_stats(policy.model.get_base_model(), "libero_10")  # libero_10_no_noops, as the authors' eval picks
    actions = unnormalize_actions(samples.actions[:, 0], stats["q01"], stats["q99"], stats["mask"])
    np.testing.assert_allclose(actions, golden["greedy_actions"], atol=1e-5)


def test_load_vla_reads_a_prismatic_run_with_its_tokenizer_folder(tmp_path, golden, prompts, monkeypatch):
    import agents.vla.prismatic as prismatic

    run = tmp_path / "minivla-run"
    shutil.copytree(GOLDEN / "run", run)
    # a hub id that is in no cache (Qwen/Qwen2.5-0.5B may be cached on a user's machine)
    monkeypatch.setitem(prismatic.QWEN25_CONFIGS, "qwen25-0_5b",
                        dict(prismatic.QWEN25_CONFIGS["qwen25-0_5b"], hub_id="wmrl-test/no-such-tokenizer"))
    with pytest.raises(VLAWeightsNotFoundError, match="hf download wmrl-test/no-such-tokenizer") as e:
        load_vla(run, prismatic={"heads": HEADS})  # no RUN/tokenizer, the hub id not in the HF cache
    assert str(run / "tokenizer") in str(e.value)
    shutil.copytree(GOLDEN / "tokenizer", run / "tokenizer")
    # an older step beside the newest: the highest step is loaded
    newest = next((run / "checkpoints").glob("step-*.pt"))
    state = torch.load(newest, weights_only=True)
    state["model"]["projector"]["projector.0.bias"] += 1.0
    torch.save(state, run / "checkpoints" / "step-000002-epoch-00-loss=0.5000.pt")
    model, processor = load_vla(run, prismatic={"heads": HEADS})
    assert model.config.checkpoint == str(newest)
    samples = VLAPolicy(model, processor, prompt_template=MINIVLA_QWEN_PROMPT).sample(
        _observations(golden, prompts)[:1], greedy=True)
    np.testing.assert_array_equal(samples.tokens.numpy()[0], golden["greedy_ids"][0])
    older, _ = load_prismatic_vla(run, heads=HEADS, checkpoint="step-000002-epoch-00-loss=0.5000.pt")
    assert not torch.equal(older.projector[0].bias, model.projector[0].bias)


def _run_copy(tmp_path, edit_config=None):
    run = tmp_path / "run"
    shutil.copytree(GOLDEN / "run", run)
    if edit_config is not None:
        cfg = json.loads((run / "config.json").read_text())
        edit_config(cfg)
        (run / "config.json").write_text(json.dumps(cfg))
    return run


def _base_vlm_folder(tmp_path, **model):
    """A VLM run folder (config.json with a "model" entry) to point vla.base_vlm at."""
    folder = tmp_path / "base-vlm"
    folder.mkdir(exist_ok=True)
    base = dict(PRISMATIC_BASE_VLMS["prism-qwen25-extra-dinosiglip-224px+0_5b"], model_id="my-vlm", **model)
    (folder / "config.json").write_text(json.dumps({"model": base}))
    return str(folder)


@pytest.mark.parametrize("edit, match", [
    (lambda c, t: c.pop("vla"), "lacks the 'vla' entry"),
    (lambda c, t: c["vla"].update(base_vlm="prism-dinosiglip-224px+7b"), "base VLM 'prism-dinosiglip-224px\\+7b'"),
    (lambda c, t: c["vla"].update(base_vlm=_base_vlm_folder(t, image_resize_strategy="letterbox")),
     "image_resize_strategy 'letterbox'"),
    (lambda c, t: c["vla"].update(base_vlm=_base_vlm_folder(t, vision_backbone_id="siglip-vit-so400m")),
     "vision backbone 'siglip-vit-so400m'"),
    (lambda c, t: c["vla"].update(base_vlm=_base_vlm_folder(t, llm_backbone_id="qwen25-7b-pure")), "pass llm_config"),
    (lambda c, t: c["vla"].update(use_wrist_image=True), "several images per step"),
])
def test_unsupported_runs_are_refused_with_the_reason(tmp_path, edit, match):
    with pytest.raises(PrismaticFormatError, match=match):
        load_prismatic_vla(_run_copy(tmp_path, lambda c: edit(c, tmp_path)), tokenizer=GOLDEN / "tokenizer", heads=HEADS)


def test_a_base_vlm_folder_is_read_like_the_authors(tmp_path):
    """vla.base_vlm may be a VLM run folder: its config.json's model entry is used."""
    run = _run_copy(tmp_path, lambda c: c["vla"].update(base_vlm=_base_vlm_folder(tmp_path)))
    model, _ = load_prismatic_vla(run, tokenizer=GOLDEN / "tokenizer", heads=HEADS)
    assert model.config.llm_backbone_id == "qwen25-0_5b-extra" and model.config.action_vocab_size == 525


def test_bad_checkpoints_are_refused_with_the_reason(tmp_path):
    run = _run_copy(tmp_path)
    with pytest.raises(FileNotFoundError, match="step-999"):
        load_prismatic_vla(run, tokenizer=GOLDEN / "tokenizer", heads=HEADS, checkpoint="step-999.pt")
    ckpt = next((run / "checkpoints").glob("step-*.pt"))
    state = torch.load(ckpt, weights_only=True)
    del state["model"]["vision_backbone"]
    torch.save(state, ckpt)
    with pytest.raises(PrismaticFormatError, match="no vision_backbone weights"):
        load_prismatic_vla(run, tokenizer=GOLDEN / "tokenizer", heads=HEADS)
    with pytest.raises(ValueError, match="heads takes the keys"):
        load_prismatic_vla(run, tokenizer=GOLDEN / "tokenizer", heads={"vision": 2})
    for f in (run / "checkpoints").glob("*.pt"):
        f.unlink()
    with pytest.raises(FileNotFoundError, match="checkpoints/step-"):
        load_prismatic_vla(run, tokenizer=GOLDEN / "tokenizer", heads=HEADS)


def test_vq_folder_of_a_run(tmp_path):
    assert prismatic_vq_folder(tmp_path, "extra_action_tokenizer") is None
    assert prismatic_vq_folder(tmp_path, "libero_vq_extra_action_tokenizer") is None
    vq = tmp_path / "vq" / "pretrain_vq+mx-libero_90+fach-7+ng-7+nemb-128+nlatent-512"
    vq.mkdir(parents=True)
    (vq / "config.json").write_text("{}")
    assert prismatic_vq_folder(tmp_path, "libero_vq_extra_action_tokenizer") == vq


@pytest.mark.skipif(not os.environ.get("WMRL_QWEN25_TOKENIZER"),
                    reason="set WMRL_QWEN25_TOKENIZER to a Qwen2.5 tokenizer folder (vocab.json, merges.txt, tokenizer_config.json)")
def test_real_qwen25_prompt_ids_match_the_authors():
    """With the real Qwen2.5 vocabulary: MiniVLA's prompt ids and action ids as the authors' code gives them."""
    real = json.loads((GOLDEN / "real_qwen_tokenizer.json").read_text())
    tok = prismatic_tokenizer(os.environ["WMRL_QWEN25_TOKENIZER"], "qwen25-0_5b-extra")
    assert (tok.vocab_size, len(tok)) == (real["vocab_size"], real["len"]) == (151643, 151921)
    assert tok.convert_tokens_to_ids(["<|extra_0|>", "<|extra_255|>"]) == real["extra_ids"]
    assert prismatic_action_vocab_size(tok, "extra_action_tokenizer") == 151921
    assert prismatic_action_vocab_size(tok, "action_tokenizer") == 151643
    for instr, ids in zip(real["instructions"], real["input_ids"]):
        assert tok(MINIVLA_QWEN_PROMPT.format(instruction=instr)).input_ids == ids


def test_minivla_shapes_build_the_published_architecture():
    """MINIVLA_SHAPES (the benchmark's model) builds, on the meta device, MiniVLA's towers and LM."""
    from agents.vla.prismatic import MINIVLA_SHAPES, build_prismatic_vla

    with torch.device("meta"):
        model = build_prismatic_vla(MINIVLA_SHAPES)
    assert MINIVLA_SHAPES.num_patches == 256
    assert len(model.dino.encoder.layer) == 23 and len(model.siglip.encoder.layers) == 26  # last blocks unused
    assert model.projector[0].in_features == 1024 + 1152 and model.projector[-1].out_features == 896
    lm = model.language_model.config
    assert (lm.hidden_size // lm.num_attention_heads, lm.num_key_value_heads) == (64, 2)  # Qwen2.5-0.5B
    assert model.get_output_embeddings().weight.shape == (151936, 896)  # >= 151 921 tokens with the extras
    n = sum(p.numel() for p in model.language_model.parameters())
    assert n == 494_032_768  # Qwen2.5-0.5B's published parameter count (tied head counted once)


def test_a_tokenizer_that_would_shift_the_action_ids_is_refused(tmp_path, monkeypatch):
    """Tokens added after the 256 extras, or a different base vocabulary (e.g. Qwen3's, 4 tokens
    longer), would move every action bin: refused, whatever the tokenizer's class."""
    import agents.vla.prismatic as prismatic
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    generic = PreTrainedTokenizerFast.from_pretrained(str(GOLDEN / "tokenizer"))  # not a Qwen2 class
    model, _ = load_prismatic_vla(GOLDEN / "run", tokenizer=generic, heads=HEADS)
    assert model.config.action_vocab_size == 525  # the extras, not the byte vocabulary
    tok = AutoTokenizer.from_pretrained(str(GOLDEN / "tokenizer"))
    prismatic_tokenizer(GOLDEN / "tokenizer", "qwen25-0_5b-extra")
    tok.add_tokens([f"<|extra_{i}|>" for i in range(256)])
    tok.add_tokens(["<think>", "</think>"])
    with pytest.raises(PrismaticFormatError, match="tokens were added after them"):
        prismatic_action_vocab_size(tok, "extra_action_tokenizer")
    # Qwen2.5-0.5B's table says how long its tokenizer is; here, as if the toy were that checkpoint
    monkeypatch.setitem(prismatic.QWEN25_CONFIGS, "qwen25-0_5b", dict(
        prismatic.QWEN25_CONFIGS["qwen25-0_5b"], vocab_rows=576, tokenizer_len=269))
    longer = AutoTokenizer.from_pretrained(str(GOLDEN / "tokenizer"))
    longer.add_tokens(["<think>", "</think>"])  # before the extras, which the loader then appends
    with pytest.raises(PrismaticFormatError, match="action ids would be shifted"):
        load_prismatic_vla(GOLDEN / "run", tokenizer=longer, heads=HEADS)


def test_damaged_checkpoints_and_wrong_heads_get_the_reason(tmp_path):
    run = _run_copy(tmp_path)
    ckpt = next((run / "checkpoints").glob("step-*.pt"))
    good = torch.load(ckpt, weights_only=True)
    kw = dict(tokenizer=GOLDEN / "tokenizer", heads=HEADS)
    for content in (b"", ckpt.read_bytes()[:1000]):
        ckpt.write_bytes(content)
        with pytest.raises(PrismaticFormatError, match="cannot read checkpoint.*download or copy it again"):
            load_prismatic_vla(run, **kw)
    for part, key in (("vision_backbone", "dino_featurizer.blocks.1.attn.qkv.weight"),
                      ("vision_backbone", "siglip_featurizer.blocks.0.mlp.fc1.weight"),
                      ("projector", "projector.0.bias"),
                      ("llm_backbone", "llm.model.layers.0.mlp.gate_proj.weight")):
        state = {"model": {k: dict(v) for k, v in good["model"].items()}}
        del state["model"][part][key]
        torch.save(state, ckpt)
        with pytest.raises(PrismaticFormatError, match="lacks|do not fit"):
            load_prismatic_vla(run, **kw)
    torch.save(good, ckpt)
    with pytest.raises(PrismaticFormatError, match="not divisible by heads\\['llm'\\] = 5"):
        load_prismatic_vla(run, tokenizer=GOLDEN / "tokenizer", heads={**HEADS, "llm": 5})
    with pytest.raises(PrismaticFormatError, match="not divisible by heads\\['llm'\\] = 14"):
        load_prismatic_vla(run, tokenizer=GOLDEN / "tokenizer")  # MiniVLA's 14 heads on the toy's width 64
    with pytest.raises(ValueError, match="positive integers"):
        load_prismatic_vla(run, tokenizer=GOLDEN / "tokenizer", heads={**HEADS, "llm": 0})
    with pytest.raises(FileNotFoundError, match="is a folder"):
        load_prismatic_vla(run, checkpoint=run / "checkpoints", **kw)


def test_a_linear_projector_is_rebuilt(tmp_path):
    """The authors' ``linear`` projector is one nn.Linear (keys ``projector.weight`` / ``.bias``)."""
    run = _run_copy(tmp_path, lambda c: c["vla"].update(
        base_vlm=_base_vlm_folder(tmp_path, arch_specifier="no-align+linear")))
    ckpt = next((run / "checkpoints").glob("step-*.pt"))
    state = torch.load(ckpt, weights_only=True)
    w, b = torch.randn(64, 80), torch.randn(64)
    state["model"]["projector"] = {"projector.weight": w, "projector.bias": b}
    torch.save(state, ckpt)
    model, _ = load_prismatic_vla(run, tokenizer=GOLDEN / "tokenizer", heads=HEADS)
    assert len(model.projector) == 1
    assert torch.equal(model.projector[0].weight, w) and torch.equal(model.projector[0].bias, b)


def test_bad_inputs_are_refused(loaded, golden, policy):
    model, processor = loaded
    im = golden["images_128"]
    for bad in (im.astype(np.float32), np.zeros((0, 0, 3), np.uint8), im[..., :1]):
        with pytest.raises(ValueError, match="uint8 \\(H, W, 3\\)"):
            processor(images=[bad], text=["a prompt"])
    with pytest.raises(ValueError, match="one image per prompt, got none"):
        processor(text=["a prompt"])
    with pytest.raises(ValueError, match=r"images per prompt \[2\]"):
        processor(images=[[im, im]], text=["a prompt"])
    enc = processor(images=[im], text=["a prompt"])
    with pytest.raises(ValueError, match="pixel_values must be \\(B, 6, 224, 224\\)"):
        model(**{**enc, "pixel_values": enc["pixel_values"][..., :112, :112]})
    with pytest.raises(ValueError, match="no pixel_values"):
        model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], image_mask=enc["image_mask"])
    with pytest.raises(ValueError, match="2 images for 1 prompts"):
        model(**{**enc, "pixel_values": enc["pixel_values"].repeat(2, 1, 1, 1)})
    with pytest.raises(ValueError, match="at least one prompt"):
        processor(images=[], text=[])
    for instruction in (None, "", "   "):
        with pytest.raises(ValueError, match="non-empty string"):
            policy.sample([{"agentview_image": im, "instruction": instruction}])


def test_a_vq_run_is_never_decoded_as_bins(tmp_path):
    """A run whose config names a VQ action tokenizer: VLAPolicy without a VQ tokenizer refuses it."""
    run = _run_copy(tmp_path, lambda c: c["vla"].update(action_tokenizer="libero_vq_extra_action_tokenizer"))
    model, processor = load_prismatic_vla(run, tokenizer=GOLDEN / "tokenizer", heads=HEADS)
    assert model.config.action_vocab_size == 525
    with pytest.raises(ValueError, match="VQ action tokens.*VQActionTokenizer"):
        VLAPolicy(model, processor, prompt_template=MINIVLA_QWEN_PROMPT)
    with pytest.raises(ValueError, match="load_vla's own arguments"):
        load_vla(run, prismatic={"heads": HEADS, "dtype": torch.float16})
