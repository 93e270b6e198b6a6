"""Checkpoints of a ``wmrl train`` run: ``RUN_DIR/checkpoint/`` holds ``weights.pt`` (LoRA weights,
optimiser, torch RNG states) and ``state.json`` (step, the wrapper's routing/correction state
including every anchor pair and, with ``--world-model learned-*``, the learned world model's stored
anchor rollouts and counters under ``wrapper.world_model`` (its head is refitted on them at
load), numpy RNG, counters); written atomically (``checkpoint.tmp`` renamed).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from agents.train.build import Components
from wmrl_envs.utils import write_json_atomic

__all__ = ["json_default", "checkpoint_folder", "save_checkpoint", "load_checkpoint", "resume_state"]


def json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.bool_):
        return bool(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


_JUDGE_COUNTERS = ("n_generate_calls", "n_model_calls", "n_precheck", "seconds", "tokens_generated")


def save_checkpoint(run_dir: Path, c: Components, step: int, rng: np.random.Generator, extra: dict[str, Any]) -> None:
    import torch

    tmp = run_dir / "checkpoint.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    torch.save(
        {
            "adapter": c.policy.adapter_state_dict(),
            "optimizer": c.optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        },
        tmp / "weights.pt",
    )
    state = {
        "step": step,
        "wrapper": c.wrapper.state_dict(),
        "numpy_rng": rng.bit_generator.state,
        "policy_sample_calls": c.policy.n_sample_calls,
        "judge": {k: getattr(c.judge, k) for k in _JUDGE_COUNTERS if hasattr(c.judge, k)},
        **extra,
    }
    write_json_atomic(tmp / "state.json", state, indent=2, default=json_default)
    final = run_dir / "checkpoint"
    old = run_dir / "checkpoint.old"
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        final.rename(old)
    tmp.rename(final)
    if old.exists():
        shutil.rmtree(old)


def checkpoint_folder(run_dir: Path) -> Path | None:
    """The folder of ``run_dir``'s last checkpoint: ``checkpoint/``, or ``checkpoint.old/`` when
    the run was killed between :func:`save_checkpoint`'s two renames; ``None`` without one."""
    for name in ("checkpoint", "checkpoint.old"):
        if (Path(run_dir) / name / "state.json").exists():
            return Path(run_dir) / name
    return None


def load_checkpoint(run_dir: Path, c: Components, rng: np.random.Generator) -> dict[str, Any]:
    import torch

    folder = run_dir / "checkpoint"
    if not folder.exists() and (run_dir / "checkpoint.old").exists():
        folder = run_dir / "checkpoint.old"  # killed between the two renames
    if not (folder / "state.json").exists():
        raise FileNotFoundError(
            f"{run_dir} has no checkpoint to resume from (expected {folder}/state.json); "
            "start a new run without --resume"
        )
    w = torch.load(folder / "weights.pt", weights_only=False, map_location=c.policy.device)
    c.policy.load_adapter_state_dict(w["adapter"])
    c.optimizer.load_state_dict(w["optimizer"])
    torch.set_rng_state(w["torch_rng"].cpu())
    if w.get("cuda_rng") is not None and torch.cuda.is_available() and len(w["cuda_rng"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([t.cpu() for t in w["cuda_rng"]])
    state = json.loads((folder / "state.json").read_text())
    c.wrapper.load_state_dict(state["wrapper"])
    rng.bit_generator.state = state["numpy_rng"]
    c.policy.n_sample_calls = int(state["policy_sample_calls"])
    for k, v in state.get("judge", {}).items():
        setattr(c.judge, k, v)  # counters; the generation seed advances with n_generate_calls
    return state


def resume_state(run_dir: Path, c: Components, rng: np.random.Generator, metrics_path: Path) -> tuple[int, dict, float]:
    """Load the last checkpoint into ``c`` and ``rng``; drop the metrics lines of steps after it
    (the killed step is redone). Returns ``(first step to run, eval_before, wall seconds so far)``."""
    state = load_checkpoint(run_dir, c, rng)
    start_step = int(state["step"]) + 1
    if state.get("anchors_in_flight"):
        logging.getLogger(__name__).warning(
            "resuming %s: %d anchor groups were still executing on the Ray pool at the checkpoint; their "
            "executions are lost (routed and world-model scored, never paired or trained)", run_dir,
            state["anchors_in_flight"])
    if metrics_path.exists():
        kept = []
        for ln in metrics_path.read_text().splitlines():
            try:
                if json.loads(ln).get("step", -1) < start_step:
                    kept.append(ln)
            except json.JSONDecodeError:  # a line torn by the kill: that step is redone
                continue
        metrics_path.write_text("".join(ln + "\n" for ln in kept))
    return start_step, state["eval_before"], float(state.get("wall_s", 0.0))
