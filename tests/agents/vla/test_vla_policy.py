"""VLAPolicy (and its ActionTokenizer, agents.vla.action_tokenizer) on a tiny randomly initialised LLaVA (SigLIP + Qwen2), built offline.

Fast (a few seconds): tokenizer round trip and edges, action sampling restricted to the action
ids, log-probs consistent with sampling and with a plain full forward, the frozen reference,
a GRPO step that only moves LoRA weights in the advantage's direction, adapter round trip,
checkpoint loading and its errors.
"""

from __future__ import annotations

import doctest
import json

import numpy as np
import pytest
import torch

import agents.vla.policy as vla_mod
from agents.vla.action_tokenizer import ActionTokenizer, unnormalize_actions
from agents.grpo import GRPOPolicy, GRPOUpdateConfig, grpo_step, grpo_update
from agents.vla.prismatic import PrismaticFormatError
from agents.vla.load import VLAWeightsNotFoundError, build_tiny_vla, load_vla
from agents.vla.policy import OPENVLA_PROMPT, VLAPolicy, VLASamples

torch.set_num_threads(1)

N_VOCAB = 516  # tiny tokenizer: 256 bytes + <s> </s> <pad> <image> + 256 <|extra_i|>


# ---------------------------------------------------------------------------------- tokenizer
def test_tokenizer_round_trip_within_half_a_bin():
    tok = ActionTokenizer(vocab_size=32000)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, size=(500, 7))
    ids = tok.encode(a)
    assert ids.dtype == np.int64 and ids.shape == (500, 7)
    assert ids.min() >= 32000 - 256 and ids.max() <= 31999
    back = tok.decode(ids)
    assert back.dtype == np.float32 and back.shape == a.shape
    assert np.abs(back - a).max() <= tok.bin_width / 2 + 1e-6
    # re-encoding a decoded action gives the same ids (bin centres lie inside their bins)
    np.testing.assert_array_equal(tok.encode(back), ids)
    # larger values get smaller ids (OpenVLA: token = vocab_size - digitize)
    ids1 = tok.encode(np.linspace(-1, 1, 7))
    assert (np.diff(ids1) < 0).all()


def test_tokenizer_bin_edges_and_clipping():
    tok = ActionTokenizer(vocab_size=1000, n_bins=256)
    w = tok.bin_width
    assert w == pytest.approx(2 / 255)
    e = tok.edges
    # a value on edge k (0-based) digitises to k + 1 -> id vocab - (k + 1); just below it to k
    for k in (1, 50, 128, 254):
        v = np.full(7, e[k])
        assert (tok.encode(v) == 1000 - (k + 1)).all()
        assert (tok.encode(np.nextafter(v, -np.inf)) == 1000 - k).all()
    # the extremes decode to the outermost bin centres
    lo, hi = tok.encode(np.full(7, -1.0)), tok.encode(np.full(7, 1.0))
    assert (lo == 999).all() and (hi == 1000 - 256).all()
    np.testing.assert_allclose(tok.decode(lo), -1 + w / 2, atol=1e-6)
    np.testing.assert_allclose(tok.decode(hi), 1 - w / 2, atol=1e-6)
    # the first id (vocab - n_bins, reachable only by value == high) shares the last interval
    np.testing.assert_array_equal(tok.decode(np.full(7, 1000 - 256)), tok.decode(np.full(7, 1000 - 255)))
    # clipping
    np.testing.assert_array_equal(tok.encode(np.full(7, 5.0)), hi)
    np.testing.assert_array_equal(tok.encode(np.full(7, -3.0)), lo)
    assert tok.token_begin == 1000 - 256 and tok.token_end == 1000


def test_tokenizer_chunks_and_errors():
    tok = ActionTokenizer(vocab_size=600)
    rng = np.random.default_rng(1)
    chunk = rng.uniform(-1, 1, size=(2, 3, 7))
    ids = tok.encode_chunk(chunk)
    assert ids.shape == (2, 21)
    np.testing.assert_array_equal(ids[1, 7:14], tok.encode(chunk[1, 1]))
    back = tok.decode_chunk(ids)
    assert back.shape == (2, 3, 7)
    assert np.abs(back - chunk).max() <= tok.bin_width / 2 + 1e-6
    assert tok.decode(torch.as_tensor(ids[0, :7])).shape == (7,)  # tensors accepted
    with pytest.raises(ValueError, match=r"\(\.\.\., 7\)"):
        tok.encode(np.zeros(6))
    with pytest.raises(ValueError, match="NaN"):
        tok.encode(np.full(7, np.nan))
    with pytest.raises(ValueError, match="outside the action range"):
        tok.decode(np.full(7, 10))
    with pytest.raises(ValueError, match="integers"):
        tok.decode(np.zeros(7))
    with pytest.raises(ValueError, match="chunk"):
        tok.decode_chunk(np.full(20, 599))
    with pytest.raises(ValueError, match="chunk"):
        tok.encode_chunk(np.zeros(7))
    with pytest.raises(ValueError):
        ActionTokenizer(vocab_size=100)  # fewer ids than bins
    with pytest.raises(ValueError):
        ActionTokenizer(vocab_size=1000, low=1.0, high=-1.0)


def test_tokenizer_doctest_and_unnormalize():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner()
    for t in finder.find(ActionTokenizer, "ActionTokenizer", globs={"ActionTokenizer": ActionTokenizer, "np": np}):
        runner.run(t)
    assert runner.failures == 0 and runner.tries >= 3
    out = unnormalize_actions([[-1.0, 0.0, 1.0]], q01=[0.0, -2.0, 10.0], q99=[1.0, 2.0, 20.0], mask=[True, True, False])
    np.testing.assert_allclose(out, [[0.0, 0.0, 1.0]])
    assert out.dtype == np.float32


# ---------------------------------------------------------------------------------- tiny VLA
def make_policy(model_seed: int = 0, *, perturb: bool = True, **kw) -> VLAPolicy:
    model, proc = build_tiny_vla(seed=model_seed)
    kw.setdefault("image_keys", ("agentview_image", "wrist_image"))
    pol = VLAPolicy(model, proc, **kw)
    if perturb:  # LoRA B starts at 0; make the adapters change the policy
        g = torch.Generator().manual_seed(123)
        with torch.no_grad():
            for n, p in pol.model.named_parameters():
                if "lora_B" in n:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return pol


def make_obs(i: int, rng: np.random.Generator) -> dict:
    return {
        "agentview_image": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8),
        "wrist_image": rng.integers(0, 256, (48, 40, 3), dtype=np.uint8),
        "proprio": rng.normal(size=8).astype(np.float32),
        "instruction": "put the black bowl on the plate" + " and wait" * i,  # different prompt lengths
    }


@pytest.fixture(scope="module")
def observations():
    rng = np.random.default_rng(0)
    return [make_obs(i, rng) for i in range(3)]


def naive_logprobs(pol: VLAPolicy, samples: VLASamples, row: int) -> torch.Tensor:
    """Plain full forward of one row (prompt + its tokens, no cache, no padding)."""
    o = int(samples.obs_index[row])
    inp = pol._encode([samples.prompts[o]], [samples.images[o]])
    toks = samples.tokens[row][None]
    ids = torch.cat([inp["input_ids"], toks], 1)
    attn = torch.ones_like(ids)
    with torch.no_grad():
        logits = pol.model(input_ids=ids, attention_mask=attn, pixel_values=inp["pixel_values"]).logits
    p = inp["input_ids"].shape[1]
    at = pol.action_tokenizer
    sl = logits[0, p - 1 : -1, at.token_begin : at.token_end].float() / pol.temperature
    return torch.log_softmax(sl, -1).gather(-1, (toks[0] - at.token_begin)[:, None]).squeeze(-1)


def test_prompt_and_forward_shapes(observations):
    pol = make_policy()
    prompt = pol.build_prompt(observations[0])
    assert prompt == "<image><image>" + OPENVLA_PROMPT.format(instruction="put the black bowl on the plate")
    assert pol.action_tokenizer.token_begin == N_VOCAB - 256 and pol.action_tokenizer.token_end == N_VOCAB
    prompts = [pol.build_prompt(o) for o in observations]
    inp = pol._encode(prompts, [pol._images(o) for o in observations])
    b, p = inp["input_ids"].shape
    assert b == 3 and inp["attention_mask"].shape == (3, p)
    assert inp["pixel_values"].shape == (6, 3, 32, 32)  # 2 images per observation, resized
    assert (inp["attention_mask"][:, -1] == 1).all() and (inp["attention_mask"][0, 0] == 0)  # left padding
    # 16 image tokens per image (32 px / 8 px patches, squared)
    n_img = (inp["input_ids"] == pol.processor.image_token_id).sum(1)
    assert n_img.tolist() == [32, 32, 32]
    with torch.no_grad():
        out = pol.model(**inp)
    assert out.logits.shape == (3, p, N_VOCAB)
    assert torch.isfinite(out.logits).all()


def test_act_samples_only_action_tokens(observations):
    pol = make_policy(chunk=2, seed=5)
    s = pol.sample(observations, group_size=4)
    assert len(s) == 12 and s.tokens.shape == (12, 14) and s.tokens.dtype == torch.long
    assert s.obs_index.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert ((s.tokens >= N_VOCAB - 256) & (s.tokens < N_VOCAB)).all()
    assert s.actions.shape == (12, 2, 7) and s.actions.dtype == np.float32
    assert (np.abs(s.actions) <= 1.0).all()
    np.testing.assert_array_equal(s.actions, pol.action_tokenizer.decode_chunk(s.tokens.numpy()))
    assert s.logprobs.shape == (12, 14) and (s.logprobs <= 0).all() and torch.isfinite(s.logprobs).all()
    assert len(torch.unique(s.tokens, dim=0)) > 1  # sampling, not argmax
    # reproducible from the seed; next call draws new samples
    s2 = make_policy(chunk=2, seed=5).sample(observations, group_size=4)
    assert torch.equal(s.tokens, s2.tokens)
    assert not torch.equal(pol.sample(observations, group_size=4).tokens, s.tokens)
    # greedy: every row of a group takes the argmax
    g = pol.sample(observations[:1], group_size=3, greedy=True)
    assert (g.tokens == g.tokens[0]).all()
    with pytest.raises(ValueError):
        pol.sample([])
    bad = dict(observations[0], agentview_image=np.zeros((8, 8, 3), np.float32))
    with pytest.raises(ValueError, match="uint8"):
        pol.sample([bad])
    with pytest.raises(KeyError, match="wrist_image"):
        pol.sample([{k: v for k, v in observations[0].items() if k != "wrist_image"}])


def test_act_with_minivla_vq_tokenizer(observations):
    """MiniVLA's VQ tokens (the authors' tiny VQ of tests/golden/minivla): 3 tokens per sample
    among the last 8 ids, decoded to a 4-step chunk of which ``chunk`` steps are kept; the
    log-probabilities cover those 3 tokens."""
    from pathlib import Path

    from agents.vla.action_tokenizer import VQActionTokenizer

    vq = VQActionTokenizer(N_VOCAB, Path(__file__).resolve().parents[2] / "golden" / "minivla" / "vq")
    pol = make_policy(action_tokenizer=vq, seed=2)
    s = pol.sample(observations, group_size=4)
    assert pol.tokens_per_sample == 3 and s.tokens.shape == (12, 3)
    assert ((s.tokens >= N_VOCAB - 8) & (s.tokens < N_VOCAB)).all()
    assert s.actions.shape == (12, 1, 7)
    np.testing.assert_array_equal(s.actions[:, 0], vq.decode_chunk(s.tokens.numpy())[:, 0])
    lp, _, ent = pol.grpo_logprobs(s, with_entropy=True)
    torch.testing.assert_close(lp.detach(), s.logprobs, atol=1e-4, rtol=0)
    assert (ent <= np.log(8) + 1e-4).all()
    whole = make_policy(action_tokenizer=vq, chunk=4, seed=2).sample(observations[:1], group_size=2)
    assert whole.actions.shape == (2, 4, 7)
    with pytest.raises(ValueError, match="1..4 actions"):
        make_policy(action_tokenizer=vq, chunk=5)


def test_logprobs_match_sampling_and_full_forward(observations):
    pol = make_policy(temperature=0.7, seed=1)
    s = pol.sample(observations, group_size=3)
    lp, mask, ent = pol.grpo_logprobs(s, with_entropy=True)
    assert lp.shape == mask.shape == ent.shape == (9, 7)
    assert lp.requires_grad and (mask == 1).all()
    torch.testing.assert_close(lp.detach(), s.logprobs, atol=1e-4, rtol=0)
    # a subset, out of order and spanning observations, scores the same
    rows = [7, 0, 4, 5]
    sub, _, _ = pol.grpo_logprobs(s, rows)
    torch.testing.assert_close(sub.detach(), s.logprobs[rows], atol=1e-4, rtol=0)
    for r in (0, 8):
        torch.testing.assert_close(lp[r].detach(), naive_logprobs(pol, s, r), atol=1e-4, rtol=0)
    assert (ent > 0).all() and (ent <= np.log(256) + 1e-4).all()
    # the reference is the base model (adapters disabled) and differs from the adapted policy
    ref, _, _ = pol.grpo_logprobs(s, [0, 8], reference=True)
    assert not ref.requires_grad
    with pol.model.disable_adapter():
        base0 = naive_logprobs(pol, s, 0)
    torch.testing.assert_close(ref[0], base0, atol=1e-4, rtol=0)
    assert (ref - lp[[0, 8]].detach()).abs().max() > 1e-3
    with pytest.raises(IndexError):
        pol.grpo_logprobs(s, [9])


def test_concat_samples(observations):
    pol = make_policy()
    a = pol.sample(observations[:2], group_size=2)
    b = pol.sample(observations[2:], group_size=3)
    c = VLASamples.concat([a, b])
    assert len(c) == 7 and c.obs_index.tolist() == [0, 0, 1, 1, 2, 2, 2] and c.group_size == 0
    lp, _, _ = pol.grpo_logprobs(c)
    torch.testing.assert_close(lp.detach(), torch.cat([a.logprobs, b.logprobs]), atol=1e-4, rtol=0)


def test_grpo_step_changes_only_lora_and_follows_advantage(observations):
    pol = make_policy(2, seed=2)
    s = pol.sample(observations[:2], group_size=4)
    base_before = {n: p.detach().clone() for n, p in pol.model.named_parameters() if not p.requires_grad}
    lora_before = pol.adapter_state_dict()
    with torch.no_grad():
        lp0 = pol.grpo_logprobs(s)[0].sum(1)
    opt = torch.optim.Adam(pol.trainable_parameters(), lr=5e-3)
    assert isinstance(pol, GRPOPolicy)
    # group 0: row 0 succeeded; group 1: row 6 succeeded (row 5 ungraded)
    cfg = GRPOUpdateConfig(kl_coef=0.04, micro_batch_size=3)
    stats = grpo_update(pol, opt, s, [[1.0, 0.0, 0.0, 0.0], [0.0, None, 1.0, 0.0]], [1.0, 2.0], config=cfg)
    assert stats["n_groups_used"] == 2 and stats["n_ungraded"] == 1 and stats["n_rows"] == 7
    assert stats["grad_norm"] > 0 and np.isfinite(stats["loss"])
    with torch.no_grad():
        lp1 = pol.grpo_logprobs(s)[0].sum(1)
    assert lp1[0] > lp0[0] and lp1[6] > lp0[6]  # positively advantaged samples become more likely
    from agents.grpo import build_advantages

    batch = build_advantages([[1.0, 0.0, 0.0, 0.0], [0.0, None, 1.0, 0.0]], [1.0, 2.0])
    gain = (torch.as_tensor(batch.advantages, dtype=torch.float32) * (lp1 - lp0)[batch.row_index]).sum()
    assert gain > 0  # the advantage-weighted log-likelihood (the surrogate) went up
    for n, p in pol.model.named_parameters():
        if not p.requires_grad:
            assert torch.equal(p, base_before[n]), n
    after = pol.adapter_state_dict()
    assert any(not torch.equal(after[n], lora_before[n]) for n in after)
    # explicit rows/advantages, sampling-time old log-probs, no KL
    st = grpo_step(pol, opt, s, [0, 1], [1.0, -1.0], config=GRPOUpdateConfig(), old_logprobs=s.logprobs[[0, 1]])
    assert st["n_rows"] == 2 and st["kl"] == 0.0
    with pytest.raises(ValueError, match="rewards cover"):
        grpo_update(pol, opt, s, [[1.0, 0.0]], None, config=cfg)
    with pytest.raises(ValueError):
        grpo_step(pol, opt, s, [0, 1], [1.0], config=cfg)


def test_lora_only_on_language_model():
    pol = make_policy(perturb=False)
    names = [n for n, p in pol.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n and "language_model" in n for n in names)
    assert not any("vision_tower" in n for n, _ in pol.model.named_modules() if "lora" in n)


def test_adapter_round_trip(observations, tmp_path):
    pol = make_policy(3)
    s = pol.sample(observations[:1], group_size=2)
    state = pol.adapter_state_dict()
    lp_a = pol.grpo_logprobs(s)[0].detach()
    fresh = make_policy(3, perturb=False)
    lp_fresh = fresh.grpo_logprobs(s)[0].detach()
    assert (lp_fresh - lp_a).abs().max() > 1e-3
    fresh.load_adapter_state_dict(state)
    torch.testing.assert_close(fresh.grpo_logprobs(s)[0].detach(), lp_a, atol=1e-5, rtol=0)
    with pytest.raises(KeyError, match="lacks parameter"):
        fresh.load_adapter_state_dict({k: v for i, (k, v) in enumerate(state.items()) if i})
    pol.save_adapter(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()


def test_load_vla_round_trip_and_missing_checkpoint(tmp_path, observations):
    model, proc = build_tiny_vla(seed=4)
    folder = tmp_path / "tiny-vla"
    model.save_pretrained(folder)
    proc.save_pretrained(folder)
    m2, p2 = load_vla(folder)
    for (n, a), b in zip(model.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(a, b), n
    pol = VLAPolicy(m2, p2)
    assert pol.sample(observations[:1]).actions.shape == (1, 1, 7)

    missing = tmp_path / "minivla-libero90"
    with pytest.raises(FileNotFoundError) as e:
        load_vla(missing)
    assert isinstance(e.value, VLAWeightsNotFoundError)
    assert str(missing) in str(e.value) and "download" in str(e.value)

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(VLAWeightsNotFoundError, match="config.json"):
        load_vla(empty)
    (empty / "config.json").write_text(json.dumps({"model_type": "llava"}))
    with pytest.raises(VLAWeightsNotFoundError, match="no weight files"):
        load_vla(empty)
    prism = tmp_path / "minivla-vq-libero90-prismatic"
    (prism / "checkpoints").mkdir(parents=True)
    (prism / "checkpoints" / "step-1.pt").write_bytes(b"")
    (prism / "config.json").write_text("{}")
    with pytest.raises(PrismaticFormatError, match="lacks the 'vla' entry"):  # goes to the Prismatic loader
        load_vla(prism)
    (prism / "config.json").write_text("{not json")
    with pytest.raises(PrismaticFormatError, match="is not valid JSON"):
        load_vla(prism)
    # a hub id that is not in the local cache: no download is attempted
    with pytest.raises(VLAWeightsNotFoundError, match="wmrl-test/no-such-vla"):
        load_vla("wmrl-test/no-such-vla")


def test_policy_validation():
    model, proc = build_tiny_vla()
    with pytest.raises(ValueError, match="chunk"):
        VLAPolicy(model, proc, chunk=0)
    with pytest.raises(ValueError, match="temperature"):
        VLAPolicy(model, proc, temperature=0.0)
    with pytest.raises(ValueError, match="image_keys"):
        VLAPolicy(model, proc, image_keys=())
    with pytest.raises(ValueError, match="outputs"):
        VLAPolicy(model, proc, action_vocab_size=N_VOCAB + 1)
    with pytest.raises(KeyError, match="front"):
        VLAPolicy(model, proc, image_keys=("front",)).sample([{"instruction": "x"}])
    assert vla_mod.LIBERO_IMAGE_KEYS == ("agentview_image", "wrist_image")


# ------------------------------------------------------------ checkpoint statistics → LIBERO actions
NORM_STATS = {  # the layout of an OpenVLA/MiniVLA checkpoint's norm_stats / dataset_statistics.json
    "libero_10_no_noops": {
        "action": {
            "q01": [-0.9, -0.8, -0.9, -0.1, -0.2, -0.3, 0.0],
            "q99": [0.9, 0.8, 0.9, 0.1, 0.2, 0.3, 1.0],
            "mask": [True, True, True, True, True, True, False],
        },
        "proprio": {"q01": [0.0] * 8, "q99": [1.0] * 8},
    },
    "bridge_orig": {"action": {"q01": [0.0] * 7, "q99": [1.0] * 7}},
}


def test_action_stats_key_choice_follows_the_authors_eval(tmp_path):
    """openvla-mini experiments/robot/libero/run_libero_eval.py l.105-117: the suite name, else
    suite + "_no_noops"; modeling_prismatic.py _check_unnorm_key: None takes the only dataset."""
    from agents.vla.action_tokenizer import load_action_stats

    st = load_action_stats(NORM_STATS, "libero_10")  # falls back to libero_10_no_noops
    np.testing.assert_allclose(st["q99"], NORM_STATS["libero_10_no_noops"]["action"]["q99"])
    assert st["mask"].tolist() == [True] * 6 + [False]
    assert load_action_stats(NORM_STATS, "bridge_orig")["mask"].all()  # no mask: all dimensions
    with pytest.raises(KeyError, match="several datasets"):
        load_action_stats(NORM_STATS, None)
    with pytest.raises(KeyError, match="libero_90.*bridge_orig"):
        load_action_stats(NORM_STATS, "libero_90")
    (tmp_path / "dataset_statistics.json").write_text(json.dumps(NORM_STATS))
    assert load_action_stats(tmp_path)["q01"][0] == -0.9
    cfg_only = tmp_path / "hf"
    cfg_only.mkdir()
    (cfg_only / "config.json").write_text(json.dumps({"norm_stats": NORM_STATS}))
    assert load_action_stats(cfg_only)["q01"][0] == -0.9
    with pytest.raises(FileNotFoundError, match="dataset_statistics.json"):
        load_action_stats(tmp_path / "nothing")


def test_libero_env_actions_follow_the_authors_eval():
    """Un-normalisation (prismatic/models/vlas/openvla.py l.98-105), then the gripper from [0, 1]
    to sign(2x - 1) (experiments/robot/robot_utils.py normalize_gripper_action l.98-115,
    binarize=True) and flipped (invert_gripper_action l.118-125; run_libero_eval.py l.245-251)."""
    from agents.vla.action_tokenizer import libero_env_actions, load_action_stats

    st = load_action_stats(NORM_STATS, "libero_10")
    a = np.array([[1.0, -1.0, 0.0, 0.5, -0.5, 0.0, 0.9], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1]])
    out = libero_env_actions(a[:, None, :], st)  # a (N, chunk, 7) batch keeps its shape
    assert out.shape == (2, 1, 7) and out.dtype == np.float32
    np.testing.assert_allclose(out[0, 0], [0.9, -0.8, 0.0, 0.05, -0.1, 0.0, -1.0], atol=1e-6)  # 0.9 = open → -1
    np.testing.assert_allclose(out[1, 0, -1], 1.0)  # 0.1 = closing → +1 (LIBERO: +1 = close)
    np.testing.assert_array_equal(libero_env_actions(a, None), a.astype(np.float32))  # tiny models: as they are
