"""Write the MiniVLA action-tokenizer golden files with the AUTHORS' code, not ours.

What it runs (nothing from wmrl is imported):

- ``prismatic/vla/action_tokenizer.py`` of Stanford-ILIAD/openvla-mini (commit
  ``0822b36227b5a771be4eb2680e34c559734c8fdc``): ``ActionTokenizer`` (256 uniform bins) and
  ``VQActionTokenizer`` (MiniVLA's VQ action chunks);
- ``prismatic/models/backbones/llm/prompting/`` of the same repository: ``QwenPromptBuilder``
  (MiniVLA's Qwen2.5 models) and ``PurePromptBuilder`` (OpenVLA), fed the user turn that
  ``prismatic/models/vlas/openvla.py`` ``predict_action`` builds (l.53-55);
- ``vqvae/`` and the vendored ``vector_quantize_pytorch/`` of jayLEE0301/vq_bet_official (commit
  ``09d4851288ca5deaaa1ab367a208e520f8ee9a84``), the VQ-VAE that ``VQActionTokenizer`` loads.

It trains a tiny VQ-VAE (the authors' ``VqVae.vqvae_update``, as ``vla-scripts/pretrain_vq.py``
does) on smooth synthetic action chunks, saves it in the authors' folder layout
(``config.json`` + ``checkpoints/model.pt`` = ``VqVae.state_dict()``), loads it back through the
authors' ``VQActionTokenizer`` and records what their code returns on fixed inputs:

- ``bins_*``: actions → token ids → actions of the 256-bin ``ActionTokenizer``;
- ``prompts.json``: the prompt text of both builders for the ten ``libero_10`` instructions;
- ``vq_*``: action chunks → token ids (``VQActionTokenizer.__call__``), token ids → the first
  action (``decode_token_ids_to_actions``, what their LIBERO evaluation executes) and → the whole
  decoded chunk (``VqVae.draw_code_forward`` + ``get_action_from_latent``).

The authors' tokenizers return text (``tokenizer.decode(ids)``); the stand-in tokenizer below
returns the ids it is given, so the golden files hold the ids before any text round trip (a
real Qwen2 tokenizer maps those ids to its ``<|extra_N|>`` tokens and back).

Run it in its own environment (a virtualenv with only ``torch einops numpy rich`` and
``transformers==4.40.1``, openvla-mini's pin: its import needs ``tokenization_qwen2_fast``)
with the two repositories checked out at the commits above::

    python tests/golden/make_minivla_golden.py --vq-bet vq_bet_official \\
        --openvla-mini openvla-mini --out tests/golden/minivla

``tests/agents/vla/test_minivla_golden.py`` compares wmrl's tokenizers with these files.
"""

from __future__ import annotations

import argparse
import importlib.util as _ilu
import importlib
import json
import platform
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import torch

VOCAB = 151_665  # len() of MiniVLA's Qwen2.5 tokenizer with its extra tokens ("extra" action tokenizers)
VQ_CONFIG = {  # the keys vla-scripts/pretrain_vq.py writes, tiny sizes
    "input_dim_w": 7,
    "input_dim_h": 4,  # future_action_horizon 3 + 1
    "n_latent_dims": 16,
    "vqvae_n_embed": 8,
    "vqvae_groups": 3,
    "eval": False,
    "device": "cpu",
    "load_dir": None,
    "encoder_loss_multiplier": 1.0,
    "act_scale": 2.0,  # not 1: the scaling is compared too
}


_spec = _ilu.spec_from_file_location("libero10", Path(__file__).with_name("libero10.py"))
_libero10 = _ilu.module_from_spec(_spec)
_spec.loader.exec_module(_libero10)
# the ten libero_10 instructions, the last in capitals: predict_action lower-cases
LIBERO_10_INSTRUCTIONS = [*_libero10.LIBERO_10_INSTRUCTIONS[:-1], _libero10.LIBERO_10_INSTRUCTIONS[-1].title()]


class IdTokenizer:
    """Stand-in for the LLM tokenizer: ``decode`` returns the ids (the authors only need
    ``vocab_size`` and ``decode``/``batch_decode`` from it)."""

    vocab_size = VOCAB

    def decode(self, ids):
        return [int(i) for i in ids]

    def batch_decode(self, rows):
        return [[int(i) for i in r] for r in rows]


def _import_action_tokenizer(openvla_mini: Path):
    """Import prismatic.vla.action_tokenizer without running prismatic/__init__.py (which loads
    every model backbone)."""
    for name, sub in (("prismatic", "prismatic"), ("prismatic.vla", "prismatic/vla"),
                      ("prismatic.models", "prismatic/models"), ("prismatic.models.backbones", "prismatic/models/backbones"),
                      ("prismatic.models.backbones.llm", "prismatic/models/backbones/llm")):
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(openvla_mini / sub)]
        sys.modules[name] = pkg
    return importlib.import_module("prismatic.vla.action_tokenizer")


def _chunks(rng: np.random.Generator, n: int, h: int, w: int) -> np.ndarray:
    """Smooth action chunks in [-1, 1]: a random start plus small random-walk steps."""
    start = rng.uniform(-0.8, 0.8, size=(n, 1, w))
    steps = rng.normal(0.0, 0.05, size=(n, h, w)).cumsum(axis=1)
    return np.clip(start + steps, -1.0, 1.0).astype(np.float32)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vq-bet", type=Path, required=True, help="checkout of jayLEE0301/vq_bet_official")
    p.add_argument("--openvla-mini", type=Path, required=True, help="checkout of Stanford-ILIAD/openvla-mini")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--train-steps", type=int, default=300)
    args = p.parse_args()

    sys.path.insert(0, str(args.vq_bet.resolve()))
    from vqvae.vqvae import VqVae

    at = _import_action_tokenizer(args.openvla_mini.resolve())
    prompting = importlib.import_module("prismatic.models.backbones.llm.prompting")
    qwen = importlib.import_module("prismatic.models.backbones.llm.prompting.qwen_prompter")
    prompts = {"qwen": [], "pure": []}
    for instruction in LIBERO_10_INSTRUCTIONS:
        for key, builder in (("qwen", qwen.QwenPromptBuilder("openvla")), ("pure", prompting.PurePromptBuilder("openvla"))):
            builder.add_turn(role="human", message=f"What action should the robot take to {instruction.lower()}?")
            prompts[key].append(builder.get_prompt())
    torch.manual_seed(0)
    rng = np.random.default_rng(0)

    # --- 256 bins: edge values, values beyond the range, random values
    edges = np.linspace(-1.0, 1.0, 256)
    bins_actions = np.concatenate(
        [
            edges[:252].reshape(36, 7),
            np.array([[-1.5, -1.0, -0.0, 0.0, 1.0, 1.5, 0.999]]),
            rng.uniform(-1.2, 1.2, size=(64, 7)),
        ]
    )
    bin_tok = at.ActionTokenizer(IdTokenizer(), bins=256, min_action=-1, max_action=1)
    bins_ids = np.array(bin_tok(bins_actions), dtype=np.int64)
    bins_decoded = bin_tok.decode_token_ids_to_actions(bins_ids)
    all_ids = np.arange(VOCAB - 300, VOCAB, dtype=np.int64)  # also ids below the action range
    bins_all_decoded = bin_tok.decode_token_ids_to_actions(all_ids)

    # --- VQ: train a tiny VQ-VAE with the authors' update, save it in their layout
    h, w = VQ_CONFIG["input_dim_h"], VQ_CONFIG["input_dim_w"]
    vq = VqVae(**VQ_CONFIG)
    for _ in range(args.train_steps):
        vq.vqvae_update(torch.from_numpy(_chunks(rng, 256, h, w)))
    folder = args.out / "vq"
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(VQ_CONFIG, indent=4))
    torch.save(vq.state_dict(), folder / "checkpoints" / "model.pt")

    # load it back through the authors' tokenizer
    vq_tok = at.VQActionTokenizer(IdTokenizer(), vq_vae_path=str(folder), device="cpu")
    vq_chunks = _chunks(rng, 48, h, w)
    vq_ids = np.array([vq_tok(c) for c in vq_chunks], dtype=np.int64)  # (48, groups)
    vq_first = vq_tok.decode_token_ids_to_actions(vq_ids).detach().numpy()  # (48, 7): step 0 of each chunk
    vq_single = vq_tok.decode_token_ids_to_actions(vq_ids[0]).detach().numpy()  # (7,)
    codes = torch.from_numpy(np.clip(VOCAB - 1 - vq_ids, 0, vq_tok.n_bins - 1))
    vq_decoded = vq_tok.vq_vae.get_action_from_latent(vq_tok.vq_vae.draw_code_forward(codes)).detach().numpy()
    # every code combination's first step too (ids out of range are clipped by the authors)
    grid = np.stack(np.meshgrid(*[np.arange(vq_tok.n_bins)] * VQ_CONFIG["vqvae_groups"], indexing="ij"), -1)
    grid_ids = (VOCAB - 1 - grid.reshape(-1, VQ_CONFIG["vqvae_groups"])).astype(np.int64)
    grid_first = vq_tok.decode_token_ids_to_actions(grid_ids).detach().numpy()

    args.out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        args.out / "golden.npz",
        vocab=np.int64(VOCAB),
        bins_actions=bins_actions,
        bins_ids=bins_ids,
        bins_decoded=bins_decoded,
        bins_all_ids=all_ids,
        bins_all_decoded=bins_all_decoded,
        vq_chunks=vq_chunks,
        vq_ids=vq_ids,
        vq_first=vq_first,
        vq_single=vq_single,
        vq_decoded=vq_decoded,
        vq_grid_ids=grid_ids,
        vq_grid_first=grid_first,
    )
    (args.out / "prompts.json").write_text(json.dumps({"instructions": LIBERO_10_INSTRUCTIONS, **prompts}, indent=1) + "\n")
    meta = {
        "written_by": "tests/golden/make_minivla_golden.py",
        "openvla_mini_commit": "0822b36227b5a771be4eb2680e34c559734c8fdc",
        "vq_bet_official_commit": "09d4851288ca5deaaa1ab367a208e520f8ee9a84",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "transformers": importlib.import_module("transformers").__version__,
        "einops": importlib.import_module("einops").__version__,
        "note": "openvla-mini pins torch 2.2.0; no CPU wheel of it was reachable here, torch above was used",
        "vocab": VOCAB,
        "vq_config": VQ_CONFIG,
        "distinct_vq_id_rows": int(len(np.unique(vq_ids, axis=0))),
    }
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
