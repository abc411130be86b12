"""The viewer's fit panel with an image larger than the block size (docs/fits.md, "Giant images"), in headless
Chromium against the real server (INR_FIT_BLOCK_SIZE=48) and a real worker with too little memory for one model of
the upload (INR_FIT_WORKER_MEMORY): the bar follows the upload's bytes to 100 %, then the job is split and the panel
shows its pieces as they are done, and the blocked model opens in the viewer. A file over INR_MAX_UPLOAD_PIXELS (set
low) goes the kept-file way: the worker reads it by region."""

import io
import json

import numpy as np
import pytest
from PIL import Image

# Chromium, its flags and the module-scoped browser fixture are the viewer tests' (skips without Chromium).
from test_viewer import browser  # noqa: F401
from test_viewer_fit import FIT_TIMEOUT_MS, FitPage, fit_server

from tests.fits import Worker, photo
from training.worker.memory import one_model_peak

BLOCK = 48


@pytest.fixture(scope="module")
def blocks_stack(model_repo, tmp_path_factory):
    root = tmp_path_factory.mktemp("blocks-panel")
    env = {"INR_FIT_BLOCK_SIZE": str(BLOCK), "INR_MAX_UPLOAD_PIXELS": "4000", "INR_FIT_UPLOADS": str(root / "up")}
    srv = fit_server(model_repo, root, env=env)
    worker = None
    try:
        # a worker whose memory holds one model of 8,000 pixels at most: the 8,064 of the upload go in blocks
        small = {"INR_FIT_UPLOADS": str(root / "up"), "INR_FIT_WORKER_MEMORY": str(one_model_peak(8000))}
        worker = Worker(srv.store_url, srv.models, root / "worker.log", env=small)
        yield srv
    finally:
        if worker is not None:
            worker.stop()
        srv.stop()


def noisy_png(width: int, height: int) -> bytes:
    """tests/fits.py's photo with a little noise: a PNG of some hundred KB, so the upload takes some events."""
    rgb = np.asarray(photo(width, height, seed=7), np.int16)
    rgb = rgb + np.random.default_rng(0).integers(-6, 7, rgb.shape)
    buf = io.BytesIO()
    Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(buf, "PNG", compress_level=0)
    return buf.getvalue()


def test_the_panel_shows_the_upload_then_the_pieces_and_opens_the_blocked_model(browser, blocks_stack):  # noqa: F811
    data = noisy_png(112, 72)  # 3 × 2 blocks of at most 48, and an overview
    p = FitPage(browser, blocks_stack.url + "/")
    try:
        p.page.evaluate("""(() => {
            const fit = document.querySelector('#fit');
            window.uploaded = [];
            window.pieces = [];
            new MutationObserver(() => {
                if (fit.dataset.uploaded) uploaded.push(Number(fit.dataset.uploaded));
                if (fit.dataset.pieces) pieces.push(fit.dataset.pieces);
            }).observe(fit, {attributes: true, attributeFilter: ['data-uploaded', 'data-pieces']});
        })()""")
        p.upload("wide.png", data, steps=40, name="panel-blocks")
        p.wait_state("ready", "failed", "error", "cancelled", timeout=FIT_TIMEOUT_MS)
        assert p.state() == "ready", p.message()
        uploaded = p.page.evaluate("uploaded")
        assert uploaded and uploaded[-1] == 100 and uploaded == sorted(uploaded), uploaded
        bar = p.page.evaluate("barValues")
        assert [len(data) < m < len(data) + 2048 for _, m in bar[:1]] == [True], "the bar's first max: the body"
        messages = p.page.evaluate("messages")
        assert any("6 blocks and an overview" in m for m in messages), messages
        pieces = p.page.evaluate("pieces")
        assert pieces[0] == "0/7" and all(x.endswith("/7") for x in pieces), pieces
        assert "panel-blocks version 1 is in the viewer" in p.message()
        assert p.page.locator("#model").input_value() == "panel-blocks"
        assert (blocks_stack.models / "panel-blocks" / "1" / "blocks").is_dir()
        # the model panel: every file's parameters and bytes (not the overview's alone), beside the upload's bytes
        meta = json.loads((blocks_stack.models / "panel-blocks" / "1" / "metadata.json").read_text())
        assert meta["source"]["bytes"] == len(data) and meta["whole"]["files"] == 7
        assert meta["whole"]["parameters"] > meta["architecture"]["parameters"]
        p.page.wait_for_function("[...document.querySelectorAll('#panel dt')].some(d => d.textContent === 'File')")
        rows = dict(zip(p.page.locator("#panel dt").all_inner_texts(), p.page.locator("#panel dd").all_inner_texts()))
        assert f"{meta['whole']['parameters']:,} parameters in 7 files" in rows["Architecture"], rows
        assert rows["File"].endswith(
            f"the uploaded file {len(data) / 1e3:.1f} kB: {meta['whole']['bytes'] / len(data):.2f}×"
        )
        assert p.errors == []
    finally:
        p.close()
