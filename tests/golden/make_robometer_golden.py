"""Write the Robometer golden files with the AUTHORS' code, not ours.

What it runs (nothing from wmrl is imported), from robometer/robometer at commit
``c7f38e266e1c00ec1203f4f8dbfa64de36590a0c``:

- ``robometer/data/datasets/helpers.py`` ``linspace_subsample_frames``: which frames of an
  episode the model sees;
- ``robometer/data/collators/rbm_heads.py`` ``RBMBatchCollator._process_progress_batch`` (the
  inference-time progress query, multi-image with per-frame progress tokens, as the released
  checkpoint's config): the conversation it builds (prompt text, order of images and progress
  tokens), the arguments it gives the chat template and the processor, and the frames after
  ``qwen_vl_utils.process_vision_info`` (qwen-vl-utils 0.0.14, the authors' pin): their sizes
  and pixels;
- ``robometer/models/heads.py`` ``PredictionHeadsMixin`` (10 discrete progress bins, the success
  head) with ``robometer/models/utils.py`` ``convert_bins_to_continuous`` and the success
  probability as ``robometer/evals/eval_server.py`` l.588-590 computes it (``sigmoid``), on
  fixed hidden states.

The processor is a recorder (no Qwen3-VL tokenizer can be downloaded here): the golden files
hold what the authors' code *passes* to it, and, given Qwen3-VL-4B-Instruct's
``chat_template.json`` (``--chat-template``), the text that template renders from it. ``torchvision`` is imported by
``qwen_vl_utils`` for videos only; when it cannot be imported (no CPU build matching this torch was
reachable here) an empty stand-in module takes its place, which the image path never touches.
The authors' logger (``robometer/utils/logger.py``, which needs wandb) is replaced by the
standard ``logging`` logger.

Run it in its own environment (a virtualenv with ``torch numpy pillow pydantic rich av
qwen-vl-utils==0.0.14 transformers>=4.57,<4.58``, the authors' pins) with the repository checked
out at the commit above::

    python tests/golden/make_robometer_golden.py --robometer robometer --out tests/golden/robometer \\
        --chat-template Qwen3-VL-4B-Instruct/chat_template.json

``tests/envs/libero/test_robometer_golden.py`` compares wmrl's Robometer pieces with these files.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import platform
import sys
import types
from pathlib import Path

import numpy as np
import torch

COMMIT = "c7f38e266e1c00ec1203f4f8dbfa64de36590a0c"
INSTRUCTION = "Put both the alphabet soup and the tomato sauce in the basket"
FRAME_SIZES = [(128, 128), (100, 150), (17, 33), (20, 300), (224, 224), (480, 640)]
"""(H, W) of the frames whose resizing is recorded (LIBERO renders 128/224 px squares)."""


def pattern_frame(h: int, w: int) -> np.ndarray:
    """A deterministic uint8 (h, w, 3) test image (the tests rebuild it from its size).

    Each query holds it, its vertical flip and its horizontal flip (3 frames)."""
    y, x, c = np.meshgrid(np.arange(h), np.arange(w), np.arange(3), indexing="ij")
    return ((x * 7 + y * 13 + c * 50 + (x * y) % 17) % 256).astype(np.uint8)


class Recorder:
    """Stands in for the Qwen3-VL processor: records what the collator passes to it."""

    class _ImageProcessor:
        patch_size = 16  # Qwen3-VL

    def __init__(self) -> None:
        self.image_processor = self._ImageProcessor()
        self.chat_calls: list = []
        self.calls: list = []

    def apply_chat_template(self, conversation, **kwargs):
        self.chat_calls.append((conversation, kwargs))
        return "<chat text>"

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        return {}


def _packages(root: Path) -> None:
    """Import the authors' modules without their package __init__ files (which pull in training
    code) and with the standard logger in place of theirs."""
    for name in ("robometer", "robometer.data", "robometer.data.datasets", "robometer.data.collators",
                 "robometer.models", "robometer.utils"):
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(root / name.replace(".", "/"))]
        sys.modules[name] = pkg
    logger_mod = types.ModuleType("robometer.utils.logger")
    logger_mod.get_logger = lambda *a, **k: logging.getLogger("robometer")
    sys.modules["robometer.utils.logger"] = logger_mod
    from transformers import AutoProcessor, AutoTokenizer  # noqa: F401  (before any stand-in below)

    try:
        import torchvision  # noqa: F401
    except Exception:  # qwen_vl_utils needs it for videos only
        for name in ("torchvision", "torchvision.io", "torchvision.transforms"):
            sys.modules[name] = types.ModuleType(name)
        sys.modules["torchvision"].__version__ = "0.0"
        sys.modules["torchvision"].io = sys.modules["torchvision.io"]
        sys.modules["torchvision"].transforms = sys.modules["torchvision.transforms"]
        sys.modules["torchvision.transforms"].InterpolationMode = types.SimpleNamespace(BICUBIC=3, BILINEAR=2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--robometer", type=Path, required=True, help="checkout of robometer/robometer")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--chat-template", type=Path, default=None,
                   help="chat_template.json of Qwen/Qwen3-VL-4B-Instruct (Robometer-4B's base): the query is "
                        "also rendered with it (query.json 'rendered')")
    args = p.parse_args()
    _packages(args.robometer.resolve())
    helpers = importlib.import_module("robometer.data.datasets.helpers")
    heads_mod = importlib.import_module("robometer.models.heads")
    utils = importlib.import_module("robometer.models.utils")
    collator_mod = importlib.import_module("robometer.data.collators.rbm_heads")
    types_mod = importlib.import_module("robometer.data.dataset_types")
    args.out.mkdir(parents=True, exist_ok=True)

    # --- frame sampling
    frames = {}
    for n in (1, 2, 3, 8, 16):
        for total in range(1, 41):
            _, idx = helpers.linspace_subsample_frames(np.arange(total), n)
            frames[f"{total},{n}"] = [int(i) for i in idx]

    # --- the progress query of the collator (inference, multi-image, per-frame progress tokens)
    coll = object.__new__(collator_mod.RBMBatchCollator)
    rec = Recorder()
    coll.processor, coll.base_model_id, coll.max_length = rec, "Qwen/Qwen3-VL-4B-Instruct", 1024
    coll.use_multi_image, coll.use_per_frame_progress_token = True, True
    coll.shuffle_progress_frames, coll.inference = False, True
    # one query per frame size, each of 3 frames (the frame and two flipped copies)
    videos = [np.stack([pattern_frame(h, w), pattern_frame(h, w)[::-1], pattern_frame(h, w)[:, ::-1]]) for h, w in FRAME_SIZES]
    samples = [types_mod.ProgressSample(trajectory=types_mod.Trajectory(frames=v, frames_shape=v.shape, task=INSTRUCTION))
               for v in videos]
    coll._process_progress_batch(samples)
    assert len(rec.chat_calls) == len(FRAME_SIZES)
    conversation, chat_kwargs = rec.chat_calls[0]
    call, = rec.calls
    content = []
    for item in conversation[0]["content"]:
        item = dict(item)
        if item.get("type") == "image":
            item["image"] = f"<frame {len(content)}>"
        content.append(item)
    processed = [np.asarray(im) for im in call["images"]]
    query = {
        "role": conversation[0]["role"],
        "content": [c if c.get("type") != "image" else {"type": "image"} for c in content],
        "chat_template_kwargs": chat_kwargs,
        "processor_kwargs": {k: v for k, v in call.items() if k not in ("images", "text")},
        "processed_sizes": [list(a.shape[:2]) for a in processed],  # 3 per query, queries in FRAME_SIZES order
    }

    if args.chat_template is not None:  # the conversation as the real template renders it
        from transformers.utils.chat_template_utils import render_jinja_template

        template = json.loads(args.chat_template.read_text())["chat_template"]
        kwargs = {k: v for k, v in chat_kwargs.items() if k != "tokenize"}
        rendered, _ = render_jinja_template(conversations=[conversation], chat_template=template, **kwargs)
        query["rendered"] = rendered[0]
        query["chat_template"] = "Qwen/Qwen3-VL-4B-Instruct chat_template.json (sha256 " + __import__(
            "hashlib").sha256(args.chat_template.read_bytes()).hexdigest()[:16] + ")"

    # --- heads: 10 progress bins, success logit
    torch.manual_seed(0)

    class Heads(heads_mod.PredictionHeadsMixin):
        pass

    cfg = types.SimpleNamespace(progress_loss_type="discrete", progress_discrete_bins=10)
    heads = Heads(hidden_dim=32, model_config=cfg, dropout=0.1).eval()
    hidden = torch.randn(24, 32)
    with torch.no_grad():
        progress_logits = heads.progress_head(hidden)
        progress = utils.convert_bins_to_continuous(progress_logits)
        success = torch.sigmoid(heads.success_head(hidden).squeeze(-1))
    torch.save({k: v for k, v in heads.state_dict().items()}, args.out / "heads.pt")

    np.savez_compressed(
        args.out / "golden.npz",
        **{f"processed_{i}": processed[i] for i in range(9)},  # the frames of the first three queries
        hidden=hidden.numpy(), progress_logits=progress_logits.numpy(), progress=progress.numpy(),
        success=success.numpy(),
    )
    (args.out / "frames.json").write_text(json.dumps(frames) + "\n")
    (args.out / "query.json").write_text(json.dumps(query, indent=1) + "\n")
    meta = {
        "written_by": "tests/golden/make_robometer_golden.py",
        "robometer_commit": COMMIT,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "transformers": importlib.import_module("transformers").__version__,
        "qwen_vl_utils": importlib.metadata.version("qwen-vl-utils"),
        "instruction": INSTRUCTION,
        "frame_sizes": FRAME_SIZES,
        "frames": "one 3-frame query per frame size: pattern_frame(h, w), its vertical and its horizontal flip; processed_i = frame i (3 per query) after process_vision_info",
    }
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    import importlib.metadata

    main()
