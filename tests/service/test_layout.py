"""`service/` is layered: each module imports only from the layers its own may use, at the top of a file or
inside a function, and nothing imports in a circle (docs/architecture.md, "Layers").

    ground    settings, errors, metrics/, auth/, geometry/    shared types; imports only itself
    engine    engine/    inference: repository, runtimes, batching, the dataplane       ground
    render    render/    renders and tiles, on the engine's runtimes                    ground, engine
    fits      fits/      the API's side of fits over HTTP (the job store)               ground
    api       api/       the protocols: v1, V2, gRPC, IIIF, /metrics                    all of the above
    server    server/    ASGI layers around any app: drain, guards, metrics, traces     ground
    app       app.py, __main__.py: puts it all together                             everything
"""

from __future__ import annotations

from tests.layout import ROOT, find_cycle, import_graph, top_level_imports

USES = {
    "ground": set(),
    "engine": {"ground"},
    "render": {"ground", "engine"},
    "fits": {"ground"},
    "api": {"ground", "engine", "render", "fits"},
    "server": {"ground"},
    "app": {"ground", "engine", "render", "fits", "api", "server"},
}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "ground"  # the package's __init__
    room = parts[1]
    if room in ("engine", "render", "fits", "api", "server"):
        return room
    if room in ("app", "__main__"):
        return "app"
    return "ground"


def violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if layer_of(dep) != layer_of(module) and layer_of(dep) not in USES[layer_of(module)]:
                out.append(f"{module} ({layer_of(module)}) imports {dep} ({layer_of(dep)})")
    return out


def test_service_imports_only_from_the_layers_below():
    graph = import_graph("service")
    assert "service.engine.dataplane" in graph and "service.server.hotpath" in graph
    assert violations(graph) == []


def test_service_has_no_import_cycle():
    cycle = find_cycle(import_graph("service"))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_layer_check_finds_an_upward_import():
    graph = {
        "service.engine.runtime": {"service.render.core"},
        "service.render.core": {"service.engine.runtime"},
        "service.server.hotpath": {"service.api.v1.query"},
        "service.settings": {"service.server.restricted"},
    }
    assert violations(graph) == [
        "service.engine.runtime (engine) imports service.render.core (render)",
        "service.server.hotpath (server) imports service.api.v1.query (api)",
        "service.settings (ground) imports service.server.restricted (server)",
    ]


def test_nothing_in_service_imports_torch_or_training():
    for path in sorted((ROOT / "service").rglob("*.py")):
        assert not top_level_imports(path) & {"torch", "training", "torchvision"}, path


def test_service_keeps_its_modules_in_its_packages():
    """At most 8 modules at the top of `service/` (issue 58): a helper goes into the package it serves."""
    top = sorted(p.name for p in (ROOT / "service").glob("*.py"))
    assert len(top) <= 8, top
