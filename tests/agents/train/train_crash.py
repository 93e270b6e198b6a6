"""Helpers of the end-to-end ``wmrl train`` tests (imported as ``train_crash``: pytest puts each
test folder on ``sys.path``): a run killed right after its first checkpoint, and strict JSON."""

from __future__ import annotations

__all__ = ["no_nan", "train_killed_after_step_0"]


def no_nan(name: str):
    """``json.loads(..., parse_constant=no_nan)``: fails on NaN / Infinity (not strict JSON)."""
    raise AssertionError(f"summary.json holds {name}: not strict JSON (write null)")


def train_killed_after_step_0(monkeypatch, argv):
    """Runs ``wmrl`` with ``argv`` (a ``train`` command) and kills it with ``KeyboardInterrupt``
    right after step 0's checkpoint is written (``save_checkpoint`` patched for the run, then
    restored), as a crash would; fails unless the run is killed there."""
    import agents.train.checkpoint as checkpoint
    from agents.cli import main

    original_save = checkpoint.save_checkpoint

    def crashing_save(run_dir, c, step, rng, extra):
        original_save(run_dir, c, step, rng, extra)
        if step == 0:
            raise KeyboardInterrupt("simulated kill after step 0's checkpoint")

    monkeypatch.setattr(checkpoint, "save_checkpoint", crashing_save)
    assert main(argv) == 130  # interrupted: the CLI says how to resume
    monkeypatch.setattr(checkpoint, "save_checkpoint", original_save)
