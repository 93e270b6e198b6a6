"""The package's seams, checked on the source (AST), so that the layout stays as documented.

* no module of ``wmrl_envs`` or ``agents`` reads or writes another wmrl module's private
  members (a name with one leading underscore defined in a different module): plumbing uses
  public APIs only (issue 10, "one group step");
* no module imports a private name from another wmrl module;
* the method's order of operations lives in ``wmrl_envs/core`` (the wrappers do not build their
  own router, debiaser or denoiser);
* no import cycle runs through ``wmrl_envs/envs``, ``wmrl_envs/sandbox`` or
  ``wmrl_envs/world_models`` (imports inside functions count), and the world models import
  nothing from the correction core, the wrappers or the envs (issue 26).
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


def _import_graph(package: str = "wmrl_envs") -> dict[str, set[str]]:
    """``module -> modules of package it imports`` (at any depth of the file; a module's own
    package ``__init__`` left out, as Python imports it anyway)."""
    trees = {}
    for p in sorted((ROOT / package).rglob("*.py")):
        parts = p.relative_to(ROOT).with_suffix("").parts
        trees[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = (p.name == "__init__.py", ast.parse(
            p.read_text(encoding="utf-8")))
    graph: dict[str, set[str]] = {}
    for mod, (is_pkg, tree) in trees.items():
        package = mod if is_pkg else mod.rpartition(".")[0]
        out = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            out.update(n for n in names if n in trees and n != mod and n != package)
        graph[mod] = out
    return graph


def _cycles(graph: dict[str, set[str]], prefix: str | tuple[str, ...]) -> list[str]:
    """Every import cycle through a module whose name starts with ``prefix`` (depth-first from each
    such module: a path back to it is a cycle), as ``a -> b -> a``."""
    cycles = []
    for start in (m for m in graph if m.startswith(prefix)):
        path, stack, seen = [start], [iter(sorted(graph[start]))], {start}
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop(), path.pop()
            elif nxt == start:
                cycles.append(" -> ".join(path + [start]))
                break
            elif nxt not in seen:
                seen.add(nxt), path.append(nxt), stack.append(iter(sorted(graph[nxt])))
    return cycles


def test_no_import_cycle_in_wmrl_envs() -> None:
    """No cycle anywhere in the library, lazy imports and ``TYPE_CHECKING`` imports included (issue
    26: the advisor re-exported the adaptive fraction, which imports the advisor; the Ray pool
    re-exported the scorer, which imports the pool)."""
    graph = _import_graph()
    cycles = _cycles(graph, "wmrl_envs")
    assert not cycles, "import cycles (move the shared piece below both):\n" + "\n".join(cycles)


def test_world_models_import_no_correction_core_wrapper_or_env() -> None:
    graph = _import_graph()
    bad = [f"{m} imports {t}" for m, ts in graph.items() if m.startswith("wmrl_envs.world_models")
           for t in sorted(ts) if t.startswith(("wmrl_envs.core", "wmrl_envs.wrappers", "wmrl_envs.distributed",
                                                "wmrl_envs.envs"))]
    assert not bad, "world models sit below the correction core:\n" + "\n".join(bad)


def test_no_import_cycle_in_agents() -> None:
    """``agents/`` is a set of rooms without import cycles, lazy imports included (issue 26: the
    VLA policy and its Prismatic loader imported each other)."""
    graph = _import_graph("agents")
    cycles = _cycles(graph, "agents")
    assert not cycles, "import cycles in agents/ (move the shared piece below both):\n" + "\n".join(cycles)
