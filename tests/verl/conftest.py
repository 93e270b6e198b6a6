"""Tests of the verl adapter: they run in .venv-verl (verl 0.9.1 pins transformers<5.11), which
scripts/setup.sh builds; the README's test command runs them there. In an environment without
verl they are not collected (the main suite runs in .venv)."""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("verl") is not None else ["test_*.py"]
