"""The packages meet only through what they share (docs/architecture.md, "Packages"): `service/` and
`training/` never import each other, the shared packages import neither, the client needs no server or
trainer, and no module of ours imports another in a circle."""

from __future__ import annotations

from tests.layout import PACKAGES, ROOT, find_cycle, import_graph, top_level_imports

# what each package may import of ours, besides itself
ALLOWED = {
    "modelrepo": set(),  # the model repository contract
    "commandline": set(),  # the command lines' conventions
    "telemetry": set(),  # traces and logs
    "fitstore": set(),  # the fit job store
    "bigimage": set(),  # giant images, a region at a time
    "inr_client": {"commandline"},
    "service": {"modelrepo", "fitstore", "telemetry", "commandline", "bigimage"},
    "training": {"modelrepo", "fitstore", "telemetry", "commandline", "bigimage"},
}


def test_every_package_is_listed():
    assert set(ALLOWED) == set(PACKAGES)


def test_packages_import_only_what_they_share():
    for package, allowed in ALLOWED.items():
        others = set(PACKAGES) - allowed - {package}
        for path in sorted((ROOT / package).rglob("*.py")):
            assert not top_level_imports(path) & others, (
                f"{path.relative_to(ROOT)} imports {top_level_imports(path) & others}"
            )


def test_no_module_of_ours_imports_in_a_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_shared_packages_need_no_torch():
    for package in ("modelrepo", "commandline", "telemetry", "fitstore", "bigimage"):
        for path in sorted((ROOT / package).rglob("*.py")):
            assert "torch" not in top_level_imports(path), path
