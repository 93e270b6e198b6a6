"""The package's seams, checked on the source (AST), so that the layout stays as documented.

* no module of ``wmrl_envs`` or ``agents`` reads or writes another wmrl module's private
  members (a name with one leading underscore defined in a different module): plumbing uses
  public APIs only (issue 10, "one group step");
* no module imports a private name from another wmrl module;
* the method's order of operations lives in ``wmrl_envs/core`` (the wrappers do not build their
  own router, debiaser or denoiser).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("wmrl_envs", "agents")


def _modules() -> dict[str, ast.Module]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            out[str(p.relative_to(ROOT))] = ast.parse(p.read_text(encoding="utf-8"))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_private_names(tree: ast.Module) -> set[str]:
    """Private names a module defines: module-level names, class members, ``self._x`` attributes."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _private(node.name):
            names.add(node.name)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr)
              and _is_self(node.value)):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and _private(node.id):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _private(node.target.id):
            names.add(node.target.id)
    return names


def _is_self(value: ast.expr) -> bool:
    if isinstance(value, ast.Name) and value.id in ("self", "cls"):
        return True
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"


def test_no_module_touches_another_modules_private_members() -> None:
    mods = _modules()
    defined = {path: _defined_private_names(tree) for path, tree in mods.items()}
    violations = []
    for path, tree in mods.items():
        others = set().union(*(d for p, d in defined.items() if p != path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr) and not _is_self(node.value):
                if node.attr in others and node.attr not in defined[path]:
                    violations.append(f"{path}:{node.lineno}: {ast.unparse(node)[:60]}")
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(PACKAGES)):
                for alias in node.names:
                    if _private(alias.name):
                        violations.append(f"{path}:{node.lineno}: imports private {alias.name} from {node.module}")
    assert not violations, "private members used across modules:\n" + "\n".join(violations)


def test_wrappers_build_no_correction_objects_of_their_own() -> None:
    """Router, debiaser and denoiser are built in ``wmrl_envs/core`` only (via the correction
    config / loop); a wrapper that built its own would be a second copy of the method."""
    mods = _modules()
    built = []
    for path, tree in mods.items():
        if not path.startswith("wmrl_envs/wrappers/") and not path.startswith("wmrl_envs/distributed/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                "AnchorRouter", "IsotonicDebiaser", "InverseVarianceDenoiser", "UngradedMonitor",
            ):
                built.append(f"{path}:{node.lineno}: {node.func.id}(...)")
    assert not built, "\n".join(built)
