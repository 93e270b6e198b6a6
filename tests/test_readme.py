"""The README's example runs as written and does what it says."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs():
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has no python example"
    ns: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), ns)
    env = ns["env"]
    assert env.router.n_groups_routed == 100
    assert env.router.realised_fraction == 0.1  # one anchor group per block of 10
    assert env.corrector.debiaser.n_pairs == 80


def test_readme_opens_with_the_two_commands():
    lines = [ln for ln in README.read_text().splitlines() if ln.startswith("bash scripts/setup.sh")]
    assert len(lines) == 2
    assert "wmrl train" in lines[0] and "pytest" in lines[1]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "bash scripts/setup.sh" in ci and ".venv/bin/python -m pytest" in ci
    # the verl adapter's tests run in their own environment, in both (docs/verl.md)
    assert ".venv-verl/bin/python -m pytest tests/verl_adapter" in lines[1]
    assert ".venv-verl/bin/python -m pytest" in ci and "tests/verl_adapter" in ci
