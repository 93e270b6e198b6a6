"""Experiment tracking as the ecosystem does it: ``--report-to none|tensorboard|wandb``.

The same convention as transformers' and TRL's ``report_to``: the main job's per-step metrics
(the lines of ``metrics.jsonl``: rewards, world-model and real scores, the GRPO update's loss,
KL and entropy, ρ, the realised anchor fraction, the calibration statistics, the cost ledger's
seconds and CPU-seconds per source, ungraded counts) go to TensorBoard
(``RUN_DIR/tensorboard``, through ``torch.utils.tensorboard``) or to Weights & Biases (a run in
``$WANDB_PROJECT``, default ``wmrl``, whose id is kept in ``RUN_DIR/wandb_run_id`` so that
``--resume`` continues the same run), and the calibration plot at the end. ``metrics.jsonl`` stays the record of truth; a tracker
only mirrors its numbers. The method behind the metrics: ``docs/method.md``.
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path
from typing import Any, Mapping

__all__ = ["REPORT_TO", "Tracker", "check_report_to", "scalars"]

REPORT_TO = ("none", "tensorboard", "wandb")
"""Accepted ``--report-to`` values."""

_PACKAGE = {"tensorboard": "tensorboard", "wandb": "wandb"}


def check_report_to(report_to: str) -> None:
    """Refuse an unknown tracker, or one whose package is not installed, before anything runs.

    Raises:
        ValueError: the value is not one of :data:`REPORT_TO`, or its package is missing (the
            message gives the ``pip install`` line).
    """
    if report_to not in REPORT_TO:
        raise ValueError(f"report_to must be one of {', '.join(REPORT_TO)}, got {report_to!r}")
    pkg = _PACKAGE.get(report_to)
    if pkg is not None and importlib.util.find_spec(pkg) is None:
        raise ValueError(f"--report-to {report_to} needs the {pkg} package: .venv/bin/pip install {pkg} "
                         "(or pass --report-to none)")


def scalars(record: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The finite numbers of a (nested) metrics record, keyed ``"a/b/c"``.

    Booleans, strings, lists and ``None`` are left out (a tracker plots scalars); nested dicts
    (the ledger, the ungraded counts by cause) are flattened with ``/``.

    Args:
        record: one line of ``metrics.jsonl`` (or any mapping).
        prefix: prepended to every key.

    Returns:
        ``{key: float}``.

    Example:
        >>> scalars({"rho": 2.0, "ledger": {"execution": {"cpu_seconds": 1.5, "count": 4}}, "ok": True, "x": None})
        {'rho': 2.0, 'ledger/execution/cpu_seconds': 1.5, 'ledger/execution/count': 4.0}
    """
    out: dict[str, float] = {}
    for k, v in record.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(scalars(v, prefix=f"{key}/"))
        elif isinstance(v, bool) or v is None:
            continue
        elif isinstance(v, (int, float)) and math.isfinite(float(v)):
            out[key] = float(v)
        elif hasattr(v, "item") and getattr(v, "ndim", 1) == 0:  # numpy / torch scalars
            f = float(v.item())
            if math.isfinite(f):
                out[key] = f
    return out


class Tracker:
    """Mirrors per-step metrics to TensorBoard or W&B (or nowhere).

    Args:
        report_to: one of :data:`REPORT_TO`.
        run_dir: the run folder (TensorBoard writes ``run_dir/tensorboard``; W&B keeps its run id
            in ``run_dir/wandb_run_id`` and its files under ``run_dir``).
        config: the run's configuration (W&B's run config; TensorBoard gets it as text).
        resume: continue the run's earlier tracking (same W&B run; TensorBoard appends).

    Raises:
        ValueError: as :func:`check_report_to`.
    """

    def __init__(self, report_to: str, run_dir: str | Path, config: Mapping[str, Any] | None = None,
                 *, resume: bool = False) -> None:
        check_report_to(report_to)
        self.report_to = report_to
        self.run_dir = Path(run_dir)
        self._writer: Any = None
        self._wandb: Any = None
        if report_to == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))
            if config is not None and not resume:
                import json

                self._writer.add_text("config", "```\n" + json.dumps(dict(config), indent=1, default=str) + "\n```", 0)
        elif report_to == "wandb":
            import wandb

            id_file = self.run_dir / "wandb_run_id"
            run_id = id_file.read_text().strip() if resume and id_file.exists() else None
            self._wandb = wandb.init(project=os.environ.get("WANDB_PROJECT", "wmrl"), dir=str(self.run_dir),
                                     name=self.run_dir.name, config=dict(config or {}), id=run_id,
                                     resume="allow" if run_id else None)
            id_file.write_text(str(self._wandb.id))

    def log(self, record: Mapping[str, Any], step: int, prefix: str = "train/") -> dict[str, float]:
        """Send the record's scalars (:func:`scalars`) at ``step``; returns what was sent."""
        values = scalars(record, prefix=prefix)
        values.pop(f"{prefix}step", None)
        if self._writer is not None:
            for k, v in values.items():
                self._writer.add_scalar(k, v, step)
            self._writer.flush()
        elif self._wandb is not None:
            self._wandb.log(values, step=step)
        return values

    def log_image(self, tag: str, png: str | Path, step: int) -> None:
        """Send a PNG written by the run (the calibration plot) at ``step``.

        Raises:
            FileNotFoundError: ``png`` does not exist.
        """
        png = Path(png)
        if not png.is_file():
            raise FileNotFoundError(f"{png}: no such image")
        if self._writer is not None:
            import matplotlib.image as mpimg

            self._writer.add_image(tag, mpimg.imread(str(png))[..., :3], step, dataformats="HWC")
            self._writer.flush()
        elif self._wandb is not None:
            import wandb

            self._wandb.log({tag: wandb.Image(str(png))}, step=step)

    def close(self) -> None:
        """Flush and close the tracker (idempotent)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
