"""Write a tiny Prismatic-format MiniVLA run folder and what the AUTHORS' code computes with it.

Nothing from wmrl is imported. What runs is openvla-mini (Stanford-ILIAD, commit
``0822b36227b5a771be4eb2680e34c559734c8fdc``) as its users run it:

1. ``get_vision_backbone_and_transform`` / ``get_llm_backbone_and_tokenizer`` /
   ``PrismaticVLM`` (``prismatic/models/materialize.py``) build MiniVLA's model
   ``prism-qwen25-extra-dinosiglip-224px+0_5b``: the fused DINOv2 + SigLIP backbone
   (``dinosiglip_vit.py``, timm), the ``no-align+fused-gelu-mlp`` projector and the Qwen2.5 LM
   with 256 extra tokens (``qwen25.py``) — at toy width (below); the weights are saved the way
   their training strategy saves them (``checkpoints/step-*.pt`` = ``{"model": {"vision_backbone",
   "projector", "llm_backbone"}}``) next to a ``config.json`` as ``vla-scripts/train.py`` writes it
   (the training config, with the VLA experiment ``prism-qwen25-dinosiglip-224px+0_5b+mx-libero-90``
   under ``"vla"``) and a ``dataset_statistics.json``;
2. ``prismatic.models.load.load_vla`` loads that folder back (their loading path, config and
   statistics included), and on fixed images and instructions this script records: the token ids
   of the prompt, the pixel tensors of both image transforms, the logits at the end of the prompt
   and along a fixed action-token sequence (teacher forcing), and ``OpenVLA.predict_action``'s
   greedy action token ids and un-normalised actions;
3. with ``--qwen-tokenizer DIR`` (a Qwen2.5 tokenizer: ``vocab.json`` + ``merges.txt`` +
   ``tokenizer_config.json``), the token ids their code gives the MiniVLA prompts of the ten
   ``libero_10`` instructions with the real Qwen2.5 vocabulary (``real_qwen_tokenizer.json``).

Toy sizes, because weights cannot be downloaded here and the golden files are committed: timm's
``vit_large_patch14_reg4_dinov2.lvd142m`` and ``vit_so400m_patch14_siglip_224`` are created
with ``pretrained=False`` and the overrides in ``TINY`` (the authors create them with
``pretrained=True``); the Qwen2.5 LM is built from the config ``TINY["llm"]`` (the authors read
Qwen2.5-0.5B's config from the hub; they *also* build the LM from a config and then load the
checkpoint, ``base_llm.py`` l.134-140, since ``load_vla`` runs in inference mode); the tokenizer
is a Qwen2 tokenizer over the 256 byte symbols (merges only for the four words
``PrismaticVLM`` needs as single tokens) with Qwen's three chat tokens, saved
to ``tokenizer/`` (the authors load ``Qwen/Qwen2.5-0.5B``'s). Every weight is then redrawn so that each part of the
model moves the output (vision: O(1) activations; LM and projector: std 0.3), and the action-token
rows of the output layer are scaled by 8 so that greedy decoding picks action tokens (checked).

Environment: a virtualenv with ``torch`` (2.13 CPU; openvla-mini pins 2.2.0, no CPU wheel of it
was reachable), ``transformers==4.40.1``, ``timm==0.9.10`` (their pins), ``torchvision`` (only
its pure-Python ``transforms`` are used; the CPU-only machine had only a CUDA build, whose
operator registrations were disabled), ``draccus==0.8.0``, ``einops``, ``rich``,
``jsonlines``, ``json-numpy``::

    python tests/golden/make_prismatic_golden.py --openvla-mini openvla-mini \\
        --qwen-tokenizer qwen25-tokenizer --out tests/golden/prismatic

``tests/agents/vla/test_prismatic_golden.py`` loads the folder with wmrl and compares.
"""

from __future__ import annotations

import argparse
import importlib.util as _ilu
import dataclasses
import importlib
import json
import os
import platform
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import torch

BASE_VLM = "prism-qwen25-extra-dinosiglip-224px+0_5b"
VLA_ID = "prism-qwen25-dinosiglip-224px+0_5b+mx-libero-90"  # MiniVLA (bins) on LIBERO-90, prismatic/conf/vla.py
UNNORM_KEY = "libero_10_no_noops"
TINY = {
    "dino": {"depth": 3, "embed_dim": 32, "num_heads": 2},
    "siglip": {"depth": 3, "embed_dim": 48, "num_heads": 2},
    "llm": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "use_sliding_window": False,
    },
}
INSTRUCTIONS = [
    "put both the alphabet soup and the tomato sauce in the basket",
    "Turn On The Stove And Put The Moka Pot On It",  # predict_action lower-cases
]
_spec = _ilu.spec_from_file_location("libero10", Path(__file__).with_name("libero10.py"))
_libero10 = _ilu.module_from_spec(_spec)
_spec.loader.exec_module(_libero10)
LIBERO_10_INSTRUCTIONS = _libero10.LIBERO_10_INSTRUCTIONS


def _stub_packages(root: Path) -> None:
    """Make ``prismatic`` and ``prismatic.vla`` importable without their ``__init__`` (which pull
    in the training data pipeline, TensorFlow)."""
    for name, sub in (("prismatic", "prismatic"), ("prismatic.vla", "prismatic/vla")):
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(root / sub)]
        sys.modules[name] = pkg


def _tiny_tokenizer(folder: Path):
    """A Qwen2 tokenizer over the 256 byte-level symbols, no merges, with Qwen's chat tokens."""
    from transformers import Qwen2TokenizerFast
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {ch: i for i, ch in enumerate(sorted(bytes_to_unicode().values()))}
    merges = []
    for word in ("True", "False", "Yes", "No"):  # PrismaticVLM.__init__ asserts each is one token
        for k in range(2, len(word) + 1):
            merges.append(f"{word[: k - 1]} {word[k - 1]}")
            vocab.setdefault(word[:k], len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    tok = Qwen2TokenizerFast(
        vocab_file=str(folder / "vocab.json"),
        merges_file=str(folder / "merges.txt"),
        unk_token=None,
        bos_token=None,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.save_pretrained(str(folder))
    return tok


def _images() -> np.ndarray:
    """Two fixed uint8 images: 256 px (the size openvla-mini's LIBERO evaluation renders) and 128 px."""
    rng = np.random.default_rng(7)
    out = []
    for size in (256, 128):
        y, x = np.mgrid[0:size, 0:size] / size
        base = np.stack([x, y, 0.5 * (x + y)], -1) * 200 + rng.normal(0, 20, (size, size, 3))
        out.append(np.clip(base, 0, 255).astype(np.uint8))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--openvla-mini", type=Path, required=True)
    ap.add_argument("--qwen-tokenizer", type=Path, default=None)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    root = args.openvla_mini.resolve()
    os.environ.setdefault("PRISMATIC_DATA_ROOT", "/nonexistent")  # read when prismatic.conf is imported; unused
    sys.path.insert(0, str(root))
    _stub_packages(root)
    torch.manual_seed(0)
    torch.set_num_threads(1)

    import timm
    import transformers

    out = args.out
    if out.exists():
        shutil.rmtree(out)
    tok_dir = out / "tokenizer"
    tiny_tok = _tiny_tokenizer(tok_dir)

    # --- toy sizes (see the module docstring): timm without download, the LM's config, the tokenizer
    real_create = timm.create_model

    def create_model(name, pretrained=False, **kw):
        which = "dino" if "dinov2" in name else "siglip"
        return real_create(name, pretrained=False, **kw, **TINY[which])

    timm.create_model = create_model
    base_llm = importlib.import_module("prismatic.models.backbones.llm.base_llm")

    class _Config:
        @staticmethod
        def from_pretrained(path, **kw):
            assert path == "Qwen/Qwen2.5-0.5B", path
            return transformers.Qwen2Config(vocab_size=len(tiny_tok), **TINY["llm"])

    class _Tokenizer:
        @staticmethod
        def from_pretrained(path, **kw):
            assert path == "Qwen/Qwen2.5-0.5B", path
            return transformers.AutoTokenizer.from_pretrained(str(tok_dir), **kw)

    base_llm.AutoConfig = _Config
    base_llm.AutoTokenizer = _Tokenizer

    from prismatic.conf import ModelConfig
    from prismatic.models.load import load_vla
    from prismatic.models.materialize import get_llm_backbone_and_tokenizer, get_vision_backbone_and_transform
    from prismatic.models.vlms import PrismaticVLM

    # --- 1. build the model with their code and save a run folder in their layout
    cfg = ModelConfig.get_choice_class(BASE_VLM)()
    vision, _ = get_vision_backbone_and_transform(cfg.vision_backbone_id, cfg.image_resize_strategy, 1)
    llm, tokenizer = get_llm_backbone_and_tokenizer(cfg.llm_backbone_id, llm_max_length=cfg.llm_max_length, inference_mode=True)
    vlm = PrismaticVLM(cfg.model_id, vision, llm, arch_specifier=cfg.arch_specifier)
    n_tok = len(tokenizer)  # "extra_action_tokenizer": action ids end at len(tokenizer)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(1)
        for p in list(vlm.llm_backbone.parameters()) + list(vlm.projector.parameters()):
            if p.dim() == 2:  # std 0.3, not HF's 0.02: with 0.02 or 0.1 every greedy id is the same
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
        # every vision parameter random and O(1) (timm's init has LayerScale 1e-5 and 0.02-std
        # weights, under which a wrong mapping of a block would hardly change the output)
        for name, p in vlm.vision_backbone.named_parameters():
            if p.dim() >= 2 and "pos_embed" not in name and "token" not in name:
                p.copy_(torch.randn(p.shape, generator=gen) / np.sqrt(p[0].numel()))
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            else:  # norm weights, LayerScale gammas, position embeddings, class/register tokens
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.5 if p.dim() == 1 else torch.randn(p.shape, generator=gen) * 0.5)
        head = vlm.llm_backbone.llm.get_output_embeddings().weight
        head[n_tok - 257 : n_tok] *= 8.0
    run = out / "run"
    (run / "checkpoints").mkdir(parents=True)
    torch.save(
        {"model": {k: getattr(vlm, k).state_dict() for k in ("vision_backbone", "projector", "llm_backbone")}},
        run / "checkpoints" / "step-000010-epoch-00-loss=0.1000.pt",
    )
    # config.json as vla-scripts/train.py writes it (l.141-144: draccus.dump of its TrainConfig to
    # config.yaml, then to JSON): the VLA experiment config under "vla", no "model" entry
    from prismatic.conf import VLAConfig

    vla_cfg = dataclasses.asdict(VLAConfig.get_choice_class(VLA_ID)())
    vla_cfg = {"type": VLA_ID, **{k: (str(v) if isinstance(v, Path) else v) for k, v in vla_cfg.items()}}
    assert vla_cfg["base_vlm"] == BASE_VLM and vla_cfg["action_tokenizer"] == "extra_action_tokenizer"
    train_cfg = {"vla": vla_cfg, "data_root_dir": "datasets/open-x-embodiment", "run_root_dir": "runs",
                 "pretrained_checkpoint": None, "is_resume": True, "resume_step": None, "resume_epoch": None,
                 "run_id": VLA_ID, "run_id_note": None, "save_interval": 2500, "image_aug": False, "seed": 7,
                 "hf_token": ".hf_token", "trackers": ["jsonl", "wandb"], "wandb_project": "prismatic",
                 "wandb_entity": None}
    (run / "config.json").write_text(json.dumps(train_cfg, indent=2))
    rng = np.random.default_rng(3)
    q01 = np.round(rng.uniform(-0.9, -0.1, 7), 4)
    q99 = np.round(rng.uniform(0.1, 0.9, 7), 4)
    q01[6], q99[6] = 0.0, 1.0
    stats = {UNNORM_KEY: {"action": {"q01": q01.tolist(), "q99": q99.tolist(),
                                     "mask": [True] * 6 + [False],
                                     "mean": [0.0] * 7, "std": [1.0] * 7, "min": (q01 - 0.1).tolist(),
                                     "max": (q99 + 0.1).tolist()},
                          "num_transitions": 100, "num_trajectories": 2}}
    (run / "dataset_statistics.json").write_text(json.dumps(stats, indent=2))

    # --- 2. load it back with their loader and record what their model computes
    vla = load_vla(str(run / "checkpoints" / "step-000010-epoch-00-loss=0.1000.pt"))
    vla.eval()
    image_transform = vla.vision_backbone.get_image_transform()
    from PIL import Image

    images = _images()
    recorded_ids = []
    real_decode = vla.action_tokenizer.decode_token_ids_to_actions

    def decode(ids):
        recorded_ids.append(np.asarray(ids).copy())
        return real_decode(ids)

    vla.action_tokenizer.decode_token_ids_to_actions = decode
    fixed_actions = np.arange(n_tok - 7, n_tok)[::-1] - 3 * np.arange(7)  # 7 action ids, distinct
    res = {"input_ids": [], "pixel_dino": [], "pixel_siglip": [], "prompt_logits": [], "forced_logits": [],
           "greedy_ids": [], "greedy_actions": []}
    prompts = []
    for im in images:
        pil = Image.fromarray(im)
        pv = image_transform(pil)
        res["pixel_dino"].append(pv["dino"].numpy())
        res["pixel_siglip"].append(pv["siglip"].numpy())
        for instr in INSTRUCTIONS:
            pb = vla.get_prompt_builder()
            pb.add_turn(role="human", message=f"What action should the robot take to {instr.lower()}?")
            prompt = pb.get_prompt()
            prompts.append(prompt)
            ids = vla.llm_backbone.tokenizer(prompt, truncation=True, return_tensors="pt").input_ids
            res["input_ids"].append(ids[0].numpy())
            pvb = {k: v[None] for k, v in pv.items()}
            with torch.no_grad():
                logits = vla(input_ids=ids, pixel_values=pvb).logits
                res["prompt_logits"].append(logits[0, -1].numpy())
                forced = torch.cat([ids, torch.as_tensor(fixed_actions)[None]], 1)
                logits = vla(input_ids=forced, pixel_values=pvb).logits
                res["forced_logits"].append(logits[0, -8:-1].numpy())  # predicts each of the 7 action ids
            act = vla.predict_action(pil, instr, unnorm_key=UNNORM_KEY, do_sample=False)
            res["greedy_ids"].append(recorded_ids[-1])
            res["greedy_actions"].append(np.asarray(act))
    greedy = np.stack(res["greedy_ids"])
    assert ((greedy >= n_tok - 256) & (greedy < n_tok)).all(), f"greedy ids outside the action range: {greedy}"
    np.savez_compressed(
        out / "golden.npz",
        images_256=images[0], images_128=images[1], fixed_action_ids=fixed_actions,
        **{k: (np.stack(v) if k not in ("input_ids",) else np.array(v, dtype=object)) for k, v in res.items()
           if k != "input_ids"},
    )
    (out / "prompts.json").write_text(json.dumps(
        {"instructions": INSTRUCTIONS, "prompts": prompts, "input_ids": [r.tolist() for r in res["input_ids"]]},
        indent=1))

    # --- 3. token ids of the real Qwen2.5 vocabulary, as their LLM backbone sets the tokenizer up
    real = None
    if args.qwen_tokenizer is not None:
        qt = transformers.AutoTokenizer.from_pretrained(str(args.qwen_tokenizer), model_max_length=32768,
                                                        padding_side="right")
        qt.add_tokens([f"<|extra_{i}|>" for i in range(256)])  # qwen25.py l.54-57
        qwen_prompter = importlib.import_module("prismatic.models.backbones.llm.prompting.qwen_prompter")
        rows = []
        for instr in LIBERO_10_INSTRUCTIONS:
            pb = qwen_prompter.QwenPromptBuilder("openvla")
            pb.add_turn(role="human", message=f"What action should the robot take to {instr.lower()}?")
            rows.append(qt(pb.get_prompt(), truncation=True).input_ids)
        real = {"vocab_size": qt.vocab_size, "len": len(qt), "class": type(qt).__name__,
                "instructions": LIBERO_10_INSTRUCTIONS, "input_ids": rows,
                "extra_ids": qt.convert_tokens_to_ids(["<|extra_0|>", "<|extra_255|>"])}
        (out / "real_qwen_tokenizer.json").write_text(json.dumps(real))

    meta = {
        "written_by": "tests/golden/make_prismatic_golden.py",
        "openvla_mini_commit": "0822b36227b5a771be4eb2680e34c559734c8fdc",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "timm": timm.__version__,
        "torchvision": importlib.import_module("torchvision").__version__,
        "note": "openvla-mini pins torch 2.2.0; no CPU wheel of it was reachable here, torch above was used",
        "base_vlm": BASE_VLM,
        "unnorm_key": UNNORM_KEY,
        "tiny": TINY,
        "len_tokenizer": n_tok,
        "llm_vocab_rows": int(vlm.llm_backbone.llm.get_input_embeddings().weight.shape[0]),
        "checkpoint": "run/checkpoints/step-000010-epoch-00-loss=0.1000.pt",
        "real_qwen_tokenizer": None if real is None else str(args.qwen_tokenizer.name),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    print(json.dumps(meta, indent=2))
    print("greedy ids", greedy.tolist())


if __name__ == "__main__":
    main()
