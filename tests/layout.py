"""The import graph of the project's packages, read with `ast`: every `import` and `from … import` of one of our
modules, at the top of a file or inside a function (a lazy import inside a function closes a circle just as
well), for the layout tests (tests/test_layout.py, tests/service/test_layout.py, tests/training/test_layout.py)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("modelrepo", "fitstore", "telemetry", "commandline", "bigimage", "service", "training", "inr_client")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The modules of `modules` that `path` imports. `from pkg import name` counts pkg.name when that is a module,
    and pkg itself when a name is not (then pkg's __init__ is what provides it)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            subs = [f"{base}.{a.name}" for a in node.names]
            targets = subs + ([base] if any(s not in modules for s in subs) else [])
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def import_graph(*packages: str) -> dict[str, set[str]]:
    """{module: the modules it imports} over `packages` (default: all of ours); imports of modules outside them
    are left out."""
    files = sorted(f for p in packages or PACKAGES for f in (ROOT / p).rglob("*.py"))
    modules = {module_name(f) for f in files}
    return {module_name(f): imports_of(f, modules) for f in files}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def top_level_imports(path: Path) -> set[str]:
    """The top-level names of every module `path` imports, ours or not (`torch`, `service`, …)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found
