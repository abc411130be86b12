"""A camera photo, start to finish, as a user meets it (issue 46), in headless Chromium against the real server (poll
mode, a 128 MiB memory budget) and a real worker: a photo larger than 2048 px on a side dropped into the fit panel
(few steps), the curve and the ETA moving while it fits, the result opened in the viewer and in deep zoom down to
past its native pixels. Twice: fitted as one model (a worker that can hold it), and in blocks (a worker whose
memory cannot). Both roads must look the same: every request the pages made answered 2xx, every number shown a
number (PSNR over all pixels, SSIM), the plot's x axis the bar's steps, the panel within its edges with a long file
name, and the worker's log a line per job and piece.

The same journey runs on a photo of your own at the preset's own steps (issue 46's 12 MP camera photo):
`INR_JOURNEY_PHOTO=photo.jpg INR_JOURNEY_STEPS= .venv/bin/python -m pytest tests/service/api/test_viewer_journey.py`
(an empty INR_JOURNEY_STEPS leaves the panel's default; INR_JOURNEY_TIMEOUT_S bounds each fit, 240 s unless set)."""

from __future__ import annotations

import io
import os
import re
import time

import httpx
import numpy as np
import pytest
from PIL import Image

# Chromium, its flags and the module-scoped browser fixture are the viewer tests' (skips without Chromium).
from test_viewer import browser  # noqa: F401
from test_viewer_fit import FIT_TIMEOUT_MS, FitPage, fit_server

from tests.fits import Worker
from tests.servers import ROOT

W, H = 2400, 1600  # a camera photo's shape, past 2048 on its long side; small enough to fit in a test
OWN = os.environ.get("INR_JOURNEY_PHOTO")  # a photo of your own instead (see above)
STEPS = int(os.environ["INR_JOURNEY_STEPS"] or 0) if "INR_JOURNEY_STEPS" in os.environ else 12  # 0: the default
TIMEOUT_S = float(os.environ.get("INR_JOURNEY_TIMEOUT_S", FIT_TIMEOUT_MS / 1000))
NAME = "a-walk-in-the-meadow-on-the-first-warm-evening-of-the-year-with-the-seed-heads-against-the-low-sun.jpg"
NUMBER = re.compile(r"^\d+\.\d{2} dB over all pixels")


@pytest.fixture(scope="module")
def stack(model_repo, tmp_path_factory):
    root = tmp_path_factory.mktemp("journey")
    srv = fit_server(model_repo, root, "--memory-budget", "128MiB")
    try:
        yield srv, root
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def photo() -> bytes:
    """The bundled photo (CC0) cut and enlarged to W × H, with a little grain: a JPEG as a camera writes one."""
    if OWN:
        return open(OWN, "rb").read()
    img = Image.open(ROOT / "data" / "photos" / "dandelion.jpg").convert("RGB").crop((300, 100, 1500, 900))
    rgb = np.asarray(img.resize((W, H), Image.LANCZOS), np.int16)
    rgb = rgb + np.random.default_rng(46).integers(-3, 4, rgb.shape)
    buf = io.BytesIO()
    Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


class Journey(FitPage):
    """The fit panel's page, every response it got kept (`answers`: URL and status)."""

    def __init__(self, browser, url):  # noqa: F811
        self.answers: list[tuple[str, int]] = []
        super().__init__(browser, url)
        self.page.on("response", lambda r: self.answers.append((r.url, r.status)))
        # a request that got no answer, save those the page gave up itself (a stream it closed, a render a newer view
        # superseded: net::ERR_ABORTED)
        self.page.on(
            "requestfailed", lambda r: None if "ABORTED" in (r.failure or "") else self.answers.append((r.url, 0))
        )

    def sample(self) -> dict:
        return self.page.evaluate("""(() => {
            const plot = document.querySelector('.fit-plot'), bar = document.querySelector('#fit-progress');
            return {state: document.querySelector('#fit').dataset.state, points: Number(plot.dataset.points || 0),
                    label: plot.getAttribute('aria-label'), eta: document.querySelector('.fit-eta').textContent,
                    value: bar.value, max: bar.max, pieces: document.querySelector('#fit').dataset.pieces || null};
        })()""")

    def overflow(self) -> list[str]:
        """The fit panel's descendants whose box passes its right edge."""
        return self.page.evaluate("""(() => {
            const fit = document.querySelector('#fit'), edge = fit.getBoundingClientRect().right + 0.5;
            const out = [...fit.querySelectorAll('*')].filter((e) => e.getClientRects().length
                && e.getBoundingClientRect().right > edge).map((e) => e.tagName + '.' + e.className);
            if (fit.scrollWidth > fit.clientWidth) out.push(`#fit scrolls: ${fit.scrollWidth} > ${fit.clientWidth}`);
            return out;
        })()""")


def follow(p: Journey, url: str) -> tuple[list[dict], list[tuple[float, float | None]]]:
    """The panel every half second until the fit ends, and each ETA the job's record gave while it ran beside the
    seconds that were really left then."""
    samples, etas, end = [], [], None
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        samples.append(p.sample())
        if samples[-1]["state"] in ("ready", "failed", "error", "cancelled"):
            break
        job = p.job_url()
        rec = httpx.get(url + job, timeout=30).json() if job else {}
        if rec.get("state") == "running":
            etas.append((time.monotonic(), rec.get("eta_s")))
        elif rec.get("state") == "succeeded" and end is None:
            end = time.monotonic()
        time.sleep(0.5)
    end = end or time.monotonic()
    return samples, [(end - t, eta) for t, eta in etas]


def journey(browser, stack, photo, worker_args, steps):  # noqa: F811
    srv, root = stack
    log = root / f"worker{len(list(root.glob('worker*.log')))}.log"
    worker = Worker(srv.store_url, srv.models, log, *worker_args)
    p = Journey(browser, srv.url + "/")
    try:
        p.upload(NAME, photo, mime="image/jpeg", **({"steps": steps} if steps else {}))
        p.wait_state("queued", "running")
        assert p.overflow() == [], "a long file name or the inputs pass the panel's edge"
        samples, etas = follow(p, srv.url)
        assert samples[-1]["state"] == "ready", (p.message(), samples[-1])
        record = httpx.get(f"{srv.url}/v1/fits", timeout=30).json()["fits"][0]
        assert record["state"] == "succeeded"

        # the curve and the ETA moved while it ran, and the plot's x axis is the bar's steps
        running = [s for s in samples if s["state"] == "running"]
        points = [s["points"] for s in running]
        assert len(set(points)) >= 3 and points == sorted(points), points
        assert len({s["eta"] for s in running if "left" in s["eta"]}) >= 3, [s["eta"] for s in running]
        last = re.search(r"at step (\d+) of (\d+)", samples[-1]["label"])
        assert last and int(last[2]) == samples[-1]["max"] == record["steps"], (samples[-1], record["steps"])
        # the ETA within 2× of the time that was really left, over the middle of the fit
        middle = [(left, eta) for left, eta in etas[len(etas) // 4 : 3 * len(etas) // 4] if eta is not None]
        ratios = sorted(eta / left for left, eta in middle if left > 0)
        assert ratios and 0.5 <= ratios[len(ratios) // 2] <= 2, middle

        # every number shown is a number: the record, the panel, the model panel
        m = record["metrics"]
        assert record["psnr"] == m["full_psnr"] and m["full_psnr"] > 25 and 0 < m["ssim"] <= 1, record
        message = p.message()
        assert f"PSNR {m['full_psnr']:.2f} dB over all pixels" in message and f"SSIM {m['ssim']:.4f}" in message
        rows = dict(
            zip(
                p.page.locator("#panel dt").all_inner_texts(),
                p.page.locator("#panel dd").all_inner_texts(),
            )
        )
        assert NUMBER.match(rows["PSNR"]) and re.fullmatch(r"0\.\d{4}|1\.0000", rows["SSIM"]), rows
        shown = p.page.locator("aside").inner_text()
        assert not re.search(r"NaN|undefined|null|Infinity| – |^–$", shown, re.M), shown
        p.page.wait_for_function("document.querySelector('#panel figure img').naturalWidth > 0")
        p.page.wait_for_function("document.querySelector('#view').dataset.state === 'sharp'", timeout=FIT_TIMEOUT_MS)
        assert p.canvas_std() > 5
        assert p.overflow() == []

        # deep zoom: the panel's link, from the whole image to past its native pixels
        p.page.click(".fit-zoom")
        p.page.wait_for_function(
            "window.iiifViewer && iiifViewer.world.getItemCount() === 1 && iiifViewer.world.getItemAt(0)"
            ".getFullyLoaded()",
            timeout=FIT_TIMEOUT_MS,
        )
        for zoom in (1, 4):  # screen pixels per image pixel
            seen = len(p.answers)
            p.page.evaluate(
                f"(() => {{ const v = iiifViewer.viewport, t = iiifViewer.world.getItemAt(0);"
                f"v.zoomTo(t.imageToViewportZoom({zoom}), null, true); v.applyConstraints(true); }})()"
            )
            for _ in range(600):  # the tiles of the new level are asked for at the next frame
                if any("/iiif/3/" in u for u, _ in p.answers[seen:]):
                    break
                p.page.wait_for_timeout(100)
            assert any("/iiif/3/" in u for u, _ in p.answers[seen:]), f"zoom {zoom}: no tile asked for"
            p.page.wait_for_function("iiifViewer.world.getItemAt(0).getFullyLoaded()", timeout=FIT_TIMEOUT_MS)

        refused = [(u, s) for u, s in p.answers if not (200 <= s < 300 or s == 304)]  # 304: its cached copy holds
        assert refused == [], refused
        assert p.errors == [], p.errors
        return record, samples, log.read_text()
    finally:
        p.close()
        worker.stop()


@pytest.mark.serial
def test_a_photo_past_2048_px_as_one_model(browser, stack, photo):  # noqa: F811
    record, samples, log = journey(browser, stack, photo, (), steps=STEPS)
    assert "children" not in record and all(s["pieces"] is None for s in samples)
    job, (w, h) = record["id"], Image.open(io.BytesIO(photo)).size
    assert re.search(rf"fit {job}: {w}×{h} .* preset grid, {record['steps']} steps", log), log
    assert re.search(rf"fit {job}: .* version 1 done in [\d.]+ s: PSNR [\d.]+ dB over all pixels, SSIM", log), log


@pytest.mark.serial
def test_a_photo_past_2048_px_in_blocks(browser, stack, photo):  # noqa: F811
    # a worker of 860 MiB holds one model of 2.2 MP only: the photo goes in 2 × 2 blocks and an overview
    record, samples, log = journey(browser, stack, photo, ("--memory", "860MiB"), steps=STEPS)
    n = len(record["children"])
    assert (OWN or n == 5) and n >= 3 and record["metrics"]["full_psnr_is"].startswith("a lower bound")
    assert any(s["pieces"] for s in samples), "the panel showed no pieces"
    job = record["id"]
    for k in range(n):
        assert re.search(rf"fit {job}-p{k}: piece \S+ of fit {job}", log), f"no start of piece {k}: {log}"
        assert re.search(rf"fit {job}-p{k}: piece \S+ done in [\d.]+ s: PSNR", log), f"no end of piece {k}: {log}"
    assert re.search(rf"fit {job}: .* done in [\d.]+ s from {n} pieces: PSNR", log), log
