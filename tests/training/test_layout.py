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
