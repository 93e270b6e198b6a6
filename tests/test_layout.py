"""The generic world-model package knows no environment (issue 10, "rooms that show the architecture").

``wmrl_envs.world_models`` holds the protocol and the env-agnostic world models; the world
models that know one environment live beside it (the LLM judge and the embedding world model in
``wmrl_envs.envs.autoresearch``, Robometer in ``wmrl_envs.envs.libero``). Checked twice: on
the source (no import of ``wmrl_envs.envs`` in any module) and at run time (importing the
package and every module in a fresh interpreter loads no env module).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "wmrl_envs" / "world_models"
MODULES = sorted(
    "wmrl_envs.world_models" + ("" if p.stem == "__init__" else f".{p.stem}") for p in PACKAGE.glob("*.py")
)
ENV_MODULES = (
    "wmrl_envs.envs.autoresearch.env",
    "wmrl_envs.envs.autoresearch.llm_judge",
    "wmrl_envs.envs.autoresearch.embedding_world_model",
    "wmrl_envs.envs.libero.robometer",
)


def _imported_modules(tree: ast.Module, package: str) -> list[str]:
    """Absolute names of every module ``tree`` imports (relative imports resolved against ``package``)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            names += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return names


def test_world_models_source_imports_no_env():
    assert len(MODULES) >= 6, MODULES  # __init__, base, progress, smollm2, synthetic, vllm_backend
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for name in _imported_modules(tree, "wmrl_envs.world_models"):
            if name == "wmrl_envs.envs" or name.startswith("wmrl_envs.envs."):
                offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert not offenders, "wmrl_envs.world_models imports an environment:\n" + "\n".join(offenders)


def test_importing_world_models_loads_no_env_module():
    script = f"""
import importlib, json, sys
import wmrl_envs  # the top package may register envs: only what world_models adds counts
before = set(sys.modules)
for name in {MODULES!r}:
    importlib.import_module(name)
added = sorted(m for m in set(sys.modules) - before if m.startswith("wmrl_envs.envs"))
loaded = sorted(m for m in {ENV_MODULES!r} if m in sys.modules)
print(json.dumps({{"added": added, "loaded": loaded, "imported": sorted(m for m in sys.modules if m.startswith("wmrl_envs.world_models"))}}))
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(MODULES) <= set(result["imported"])
    assert result["added"] == [], f"importing wmrl_envs.world_models loaded env modules {result['added']}"
    assert result["loaded"] == [], f"env world models were imported: {result['loaded']}"


# ---- tests laid out like the packages (issue 26, item 6) -----------------------------------------

_TEST_ONLY_FOLDERS = {"golden", "verl_adapter", "__pycache__"}


def test_every_test_folder_mirrors_a_package_folder():
    """``tests/<a>/<b>/test_x.py`` tests ``wmrl_envs/<a>/<b>/`` or ``agents/<b>/`` (``tests/agents/...``),
    so that the test of a module is found from its path; only the cross-cutting checks sit at the top."""
    tests = ROOT / "tests"
    stray = []
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir()):
        rel = folder.relative_to(tests)
        if _TEST_ONLY_FOLDERS & set(rel.parts):
            continue
        home = ROOT / rel if rel.parts[0] == "agents" else ROOT / "wmrl_envs" / rel
        if not home.is_dir():
            stray.append(f"tests/{rel} (no {home.relative_to(ROOT)})")
    assert not stray, f"test folders without a package folder of the same path: {stray}"
    top = sorted(p.name for p in tests.glob("test_*.py"))
    assert top == ["test_architecture.py", "test_layout.py", "test_readme.py", "test_text_envs_doc.py"], (
        f"only the cross-cutting checks belong at tests/'s top; move the others beside their package: {top}")
