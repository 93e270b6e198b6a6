"""benchmarks/vla_real_shapes.py at toy sizes (``--shape tiny``): the script that measures the
VLA protocol's real-shape models runs end to end and writes what it prints, so it cannot rot.
Its real-shape figures come from running it without ``--shape tiny`` (see the issue notes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "vla_real_shapes.py"


def test_tiny_shape_run_writes_every_figure(tmp_path):
    out = tmp_path / "figures.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--shape", "tiny", "--device", "cpu", "--threads", "1", "--repeats", "1",
         "--group-size", "2", "--frames", "3", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    fig = json.loads(out.read_text())
    assert fig["shape"] == "tiny" and fig["device"] == "cpu" and fig["group_size"] == 2
    pol, rbm = fig["policy"], fig["robometer"]
    assert pol["policy_steps_per_s"] == 2 * pol["group_steps_per_s"] > 0
    assert pol["act_group"]["wall_s"]["median"] > 0 and pol["peak_mb"] > 0
    assert rbm["frames"] == 3 and rbm["s_per_trajectory_batch1"] > 0 and rbm["s_per_trajectory_batched"] > 0
    assert "policy steps/s" in proc.stdout and "per trajectory" in proc.stdout
