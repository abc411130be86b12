"""The viewer at `/` on a SIREN made elsewhere (issue 56: tests/modelrepo/foreign_nets.py, config.pbtxt alone), in
headless Chromium against the real server: it is listed, opens at its declared aspect and draws the network's pixels,
and OpenSeadragon loads its IIIF tiles."""

import numpy as np
import pytest
import torch

# Chromium, its flags and the module-scoped browser fixture are the viewer tests' (skips without Chromium).
from test_viewer import Page, browser  # noqa: F401

from tests.modelrepo import foreign_nets as F
from tests.servers import Server

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def siren_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("foreign-viewer")
    F.write_model(repo, "siren", F.siren_onnx(), F.SIREN_CONFIG)
    srv = Server(repo)
    with srv.running():
        yield srv


def test_the_viewer_opens_a_siren_made_elsewhere_at_its_aspect(browser, siren_server):  # noqa: F811
    p = Page(browser, siren_server.url + "/?model=siren")
    try:
        p.page.wait_for_selector("#panel dd")
        assert p.page.locator("#model option").all_text_contents() == ["siren"]
        assert "40×24" in p.page.locator("#panel").inner_text()
        p.sharp(1)
        stats = p.canvas("""(() => {
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let opaque = 0, lo = 255, hi = 0;
            for (let i = 0; i < d.length; i += 4) {
                if (d[i + 3] === 255) { opaque++; lo = Math.min(lo, d[i]); hi = Math.max(hi, d[i]); }
            }
            return {opaque: opaque / (d.length / 4), lo, hi};
        })()""")
        # the network's red channel on its own grid, as 8-bit pixels: the canvas shows the same range of values
        v = F.ort_values(F.siren_onnx(), F.siren_grid(40, 24))[:, 0]
        red = np.rint(np.clip((v + 1) / 2, 0, 1) * 255)
        assert stats["opaque"] > 0.3 and abs(stats["lo"] - red.min()) <= 3 and abs(stats["hi"] - red.max()) <= 3, stats
        assert p.errors == [] and not p.failed
    finally:
        p.close()


def test_openseadragon_loads_the_sirens_iiif_tiles(browser, siren_server):  # noqa: F811
    p = Page(browser, siren_server.url + "/iiif.html?model=siren")
    tiles = []
    p.page.on(
        "response", lambda r: tiles.append(r.status) if "/iiif/3/siren/" in r.url and "default" in r.url else None
    )
    try:
        p.page.wait_for_function(
            "window.iiifViewer && iiifViewer.world.getItemCount() === 1"
            " && iiifViewer.world.getItemAt(0).getFullyLoaded()"
        )
        assert tiles and set(tiles) == {200} and p.errors == []
    finally:
        p.close()
