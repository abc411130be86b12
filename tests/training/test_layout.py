"""`training/` has no import cycle: every `import` and `from … import` of a training module, at the top of a
file or inside a function, read with `ast` (a lazy import inside a function closes a circle just as well)."""

from __future__ import annotations

from tests.layout import find_cycle
from tests.layout import import_graph as graph_of


def import_graph() -> dict[str, set[str]]:
    return graph_of("training")


def test_training_has_no_import_cycle():
    graph = import_graph()
    assert "training.worker.job" in graph and "training.encodings.grid" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_rooms_import_downwards():
    """Encodings and models know nothing of fitting, export, the CLI or the worker; fitting knows no CLI."""
    graph = import_graph()
    low = [m for m in graph if m.startswith(("training.encodings", "training.image_models", "training.sinekan"))]
    high = ("training.fit_image", "training.export", "training.cli", "training.worker", "training.sweep")
    for m in low:
        assert not {d for d in graph[m] if d.startswith(high)}, m
    assert not {d for d in graph["training.fit_image"] if d.startswith(("training.cli", "training.worker"))}


def code_words(path) -> tuple[set[str], set[str]]:
    """(the words of a module's identifiers, split at `_` and `.`; its string constants other than docstrings,
    split at non-letters): what the code names, its comments and docstrings left out."""
    import ast
    import re

    tree = ast.parse(path.read_text())
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    names, strings = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            strings.update(re.split(r"[^A-Za-z0-9]+", node.value))
            continue
        found = {
            ast.Name: "id",
            ast.Attribute: "attr",
            ast.alias: "name",
            ast.ImportFrom: "module",
            ast.FunctionDef: "name",
            ast.ClassDef: "name",
            ast.arg: "arg",
            ast.keyword: "arg",
        }
        text = getattr(node, found.get(type(node), ""), None) if type(node) in found else None
        if text:
            names.update(re.split(r"[^A-Za-z0-9]+|_", text))
    return names, strings


def test_fitting_and_export_name_no_encoding():
    """fit_image.py and export.py call the hooks of whatever encoding the config names (training/encodings/base.py):
    no encoding's name, nor a module of one, in their code. (`none` is left out of the identifiers: torch's
    `set_to_none` is not the encoding.)"""
    from tests.layout import ROOT
    from training.encodings import ENCODINGS

    modules = {p.stem.split("_")[0] for p in (ROOT / "training" / "encodings").glob("*.py")} - {"", "base", "config"}
    assert {"fourier", "grid"} <= modules
    for name in ("fit_image.py", "export.py"):
        names, strings = code_words(ROOT / "training" / name)
        assert not (names & (set(ENCODINGS) - {"none"} | modules)), name
        assert not (strings & (set(ENCODINGS) | modules)), name
