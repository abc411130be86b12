"""The viewer's "Fit your own image" panel in headless Chromium (Debian's /usr/bin/chromium
via Playwright).

End to end: the real server (poll mode) and a real `python -m training worker` subprocess on a temp store and
a temp copy of the models: upload a PNG through the file input, watch the progress bar, previews and PSNR plot
follow the job's Server-Sent Events, and see the new model selected and rendered in the viewer, with a
deep-zoom link and the record's train and test PSNR; a second fit into the same name opens its next version;
Cancel, pressed from the keyboard, stops a running fit and nothing is written; a reload mid-fit follows the
job again. A text file gets the API's own error text in the panel, and so does the 403 of a restricted `fit`
group.

test_viewer_fit_panel.py runs the answers that need a server of their own (a retry then a failure, no worker,
429, 413) on fit_server() below, with real workers where a job must run.
"""

import json
import shutil
import time

import httpx
import pytest

# Chromium, its flags and the module-scoped browser fixture are the viewer tests' (skips without Chromium).
from test_viewer import browser  # noqa: F401

from tests.fits import Worker, photo, png
from tests.servers import Server

TIMEOUT_MS = 60_000
FIT_TIMEOUT_MS = 240_000  # upload → fit → the poll loads it → the viewer renders it, on 2 shared cores


def photo_png() -> bytes:
    """A small photo-like PNG (tests/fits.py's: gradients and discs, 48×40)."""
    return png()


def fit_server(model_repo, root, *args: str, env: dict | None = None) -> Server:
    """The real server in poll mode (1 s) on a temp SQLite store and a temp copy of the models (the image and
    digits models, without the broken folders) under `root`; `.models` and `.store_url` name them. Skips
    where the server has no /v1/fits."""
    models = root / "models"
    for name in ("astronaut", "digits"):
        shutil.copytree(model_repo / name, models / name)
    store = f"sqlite:///{root / 'fits.sqlite'}"
    srv = Server(
        models,
        "--model-control-mode",
        "poll",
        "--repository-poll-secs",
        "1",
        *args,
        env={"INR_FIT_STORE": store, "INR_FIT_MAX_RUNNING": "1", **(env or {})},
    )
    srv.wait_ready()
    srv.models, srv.store_url = models, store
    if httpx.get(f"{srv.url}/v1/fits", timeout=30).status_code == 404:
        srv.stop()
        pytest.skip("this server has no /v1/fits yet (issue 22's API, branch fits-api)")
    return srv


@pytest.fixture(scope="module")
def fit_stack(model_repo, tmp_path_factory):
    """fit_server and a real `python -m training worker` (tests/fits.py) on its store and models."""
    root = tmp_path_factory.mktemp("fit-stack")
    srv = fit_server(model_repo, root)
    worker = None
    try:
        worker = Worker(srv.store_url, srv.models, root / "worker.log")
        yield srv
    finally:
        if worker is not None:
            worker.stop()
        srv.stop()


class FitPage:
    def __init__(self, browser, url):  # noqa: F811
        self.context = browser.new_context(viewport={"width": 1100, "height": 900})
        self.page = self.context.new_page()
        self.page.set_default_timeout(TIMEOUT_MS)
        self.errors, self.renders = [], []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on(
            "request",
            lambda r: self.renders.append(r.url) if r.method == "POST" and r.url.endswith("/render") else None,
        )
        self.page.goto(url)
        self.page.wait_for_function(
            "document.querySelector('#model option') || document.querySelector('#view-message').textContent"
        )
        assert self.page.locator("#model option").count(), self.page.locator("#view-message").inner_text()
        self.watch()

    def watch(self):
        """Record every value the progress bar takes (barValues), every message the panel says (messages) and
        how many points its plot has after each change (plotPoints)."""
        self.page.evaluate("""(() => {
            const bar = document.querySelector('#fit-progress'), message = document.querySelector('.fit-message');
            const plot = document.querySelector('.fit-plot');
            window.barValues = [];
            window.messages = [];
            window.plotPoints = [];
            new MutationObserver(() => plotPoints.push(Number(plot.dataset.points)))
                .observe(plot, {attributes: true, attributeFilter: ['data-points']});
            new MutationObserver(() => barValues.push([bar.value, bar.max]))
                .observe(bar, {attributes: true, attributeFilter: ['value', 'max']});
            new MutationObserver(() => messages.push(message.textContent))
                .observe(message, {childList: true, characterData: true, subtree: true});
        })()""")

    def job_url(self):
        """The job the panel follows (the link it keeps for a reload)."""
        return self.page.evaluate("sessionStorage.getItem('inr-fit-job')")

    def state(self):
        return self.page.locator("#fit").get_attribute("data-state")

    def wait_state(self, *states, timeout=TIMEOUT_MS):
        self.page.wait_for_function(
            f"{json.dumps(states)}.includes(document.querySelector('#fit').dataset.state)", timeout=timeout
        )

    def message(self):
        return self.page.locator(".fit-message").inner_text()

    def upload(self, filename, data, mime="image/png", **options):
        self.page.set_input_files("#fit-file", files=[{"name": filename, "mimeType": mime, "buffer": data}])
        for key, value in options.items():
            if key == "preset":
                self.page.select_option("#fit-preset", value)
            else:
                self.page.fill(f"#fit-{key}", str(value))
        self.page.click("#fit-start")

    def canvas_std(self):
        return self.page.evaluate("""(() => {
            const c = document.querySelector('#view');
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0, s = 0, s2 = 0;
            for (let i = 0; i < d.length; i += 4) if (d[i + 3] === 255) { n++; s += d[i]; s2 += d[i] * d[i]; }
            return n ? Math.sqrt(s2 / n - (s / n) ** 2) : 0;
        })()""")

    def close(self):
        self.context.close()


# ---- end to end: the real API and a real worker ---------------------------------------------------------------


def test_an_uploaded_image_is_fitted_live_and_opens_in_the_viewer_and_deep_zoom(browser, fit_stack):  # noqa: F811
    p = FitPage(browser, fit_stack.url + "/")
    try:
        p.upload("my photo.png", photo_png(), preset="fourier-small", size=32, steps=60, name="panel-photo")
        p.wait_state("queued", "running")
        p.page.wait_for_function("document.querySelector('#fit-progress').value > 0", timeout=FIT_TIMEOUT_MS)
        p.wait_state("ready", "failed", "error", "cancelled", timeout=FIT_TIMEOUT_MS)
        assert p.state() == "ready", p.message()

        values = p.page.evaluate("barValues")
        steps = [v for v, m in values if m == 60]
        assert steps == sorted(steps) and steps[-1] == 60, values
        assert any(0 < v < 60 for v in steps), f"the bar went straight to the end: {values}"
        plot = p.page.locator(".fit-plot")
        points = int(plot.get_attribute("data-points"))
        assert points >= 2 and p.page.locator(".fit-plot circle").count() == points
        assert p.page.locator(".fit-plot polyline").count() == 1
        assert "at step 60 of 60" in plot.get_attribute("aria-label"), plot.get_attribute("aria-label")
        assert "/previews/" in p.page.locator(".fit-preview img").get_attribute("src")
        assert int(p.page.locator(".fit-preview img").get_attribute("data-loaded") or 0) >= 1
        assert p.page.evaluate("document.querySelector('.fit-preview img').naturalWidth") > 0
        job = httpx.get(f"{fit_stack.url}/v1/fits", timeout=30).json()["fits"][0]  # newest first
        assert job["state"] == "succeeded" and job["name"] == "panel-photo"
        m = job["metrics"]
        assert "panel-photo version 1 is in the viewer" in p.message()
        assert f"PSNR {m['full_psnr']:.2f} dB over all pixels" in p.message()  # one road: blocks say the same
        assert "test_psnr" not in m and "test PSNR" not in p.message()  # protocol full: every pixel trained on
        assert p.page.locator("#fit-start").is_enabled() and p.page.locator(".fit-cancel").is_hidden()

        # The new model is the viewer's: picked, described, rendered sharp through its own render route.
        assert p.page.locator("#model").input_value() == "panel-photo"
        assert "panel-photo" in p.page.locator("#model option").all_text_contents()
        p.page.wait_for_function("document.querySelector('#view').dataset.state === 'sharp'", timeout=FIT_TIMEOUT_MS)
        assert any("/v1/models/panel-photo/render" in u for u in p.renders)
        assert p.canvas_std() > 5
        assert "panel-photo" in p.page.locator("#panel").inner_text()

        for link in (p.page.locator(".fit-zoom"), p.page.locator("#iiif-link")):
            assert link.is_visible() and link.get_attribute("href") == "iiif.html?id=panel-photo"
        info = httpx.get(f"{fit_stack.url}/iiif/3/panel-photo/info.json", timeout=30)
        assert info.status_code == 200
        assert p.errors == []

        # The job's record links to the viewer with the model picked (the page's URL says the same now).
        assert p.page.url.endswith(job["links"]["viewer"].lstrip("/"))
        p.page.goto(fit_stack.url + job["links"]["viewer"])
        p.page.wait_for_selector("#panel dd")
        assert p.page.locator("#model").input_value() == "panel-photo"
        p.page.goto(f"{fit_stack.url}/iiif.html?id=panel-photo")
        p.page.wait_for_function(
            "['open', 'failed'].includes(document.querySelector('#osd').dataset.state)", timeout=FIT_TIMEOUT_MS
        )
        assert p.page.locator("#osd").get_attribute("data-state") == "open", p.page.locator("#message").inner_text()
        assert p.errors == []
    finally:
        p.close()


def test_a_second_fit_into_the_same_name_opens_its_next_version(browser, fit_stack):  # noqa: F811
    """The panel waits for the new version, not just the name (panel-photo is version 1 from the test above,
    or is fitted here first when this test runs alone)."""

    def version():
        r = httpx.get(f"{fit_stack.url}/v1/models/panel-photo", timeout=30)
        return r.json()["version"] if r.status_code == 200 else 0

    p = FitPage(browser, fit_stack.url + "/?model=panel-photo")
    try:
        for _ in range(2 if version() == 0 else 1):
            before = version()
            p.upload("again.png", png(photo(seed=1)), preset="fourier-small", size=32, steps=30, name="panel-photo")
            p.wait_state("ready", "failed", "error", "cancelled", timeout=FIT_TIMEOUT_MS)
            assert p.state() == "ready", p.message()
            assert f"panel-photo version {before + 1} is in the viewer" in p.message()
            assert version() == before + 1
        assert p.page.locator("#model").input_value() == "panel-photo"
        p.page.wait_for_function("document.querySelector('#view').dataset.state === 'sharp'", timeout=FIT_TIMEOUT_MS)
        assert "again.png" in p.page.locator("#panel").inner_text()  # the model panel describes the new fit
        assert p.errors == []
    finally:
        p.close()


def test_a_text_file_gets_the_apis_error_in_the_panel_and_nothing_is_queued(browser, fit_stack):  # noqa: F811
    body = b"these are my notes, not an image\n"
    expected = httpx.post(f"{fit_stack.url}/v1/fits", files={"file": ("notes.txt", body, "text/plain")}, timeout=30)
    assert expected.status_code == 400
    p = FitPage(browser, fit_stack.url + "/")
    try:
        p.upload("notes.txt", body, mime="text/plain", preset="fourier-small")
        p.wait_state("error")
        assert expected.json()["error"] in p.message()
        assert "error" in p.page.locator(".fit-message").get_attribute("class")
        assert p.page.locator(".fit-job").is_hidden()
        assert p.page.locator("#fit-start").is_enabled()  # the form is usable again
        jobs = httpx.get(f"{fit_stack.url}/v1/fits", timeout=30).json()["fits"]
        assert all(j.get("source", {}).get("filename") != "notes.txt" for j in jobs)
    finally:
        p.close()
    # The console error above would be Chromium's "Failed to load resource: 400"; only page errors count here.
    assert not [e for e in p.errors if "Failed to load resource" not in e]


def tree(folder):
    return sorted(str(f.relative_to(folder)) for f in folder.rglob("*"))


def test_cancel_from_the_keyboard_stops_the_running_fit_and_nothing_is_written(browser, fit_stack):  # noqa: F811
    before = tree(fit_stack.models)
    p = FitPage(browser, fit_stack.url + "/")
    try:
        p.upload("long.png", photo_png(), preset="fourier-small", size=32, steps=20000, name="panel-cancelled")
        # the ETA shows (from the second progress event on) and counts down between events
        p.page.wait_for_function(
            "document.querySelector('.fit-eta').textContent.includes(' left')", timeout=FIT_TIMEOUT_MS
        )
        assert p.page.locator("#fit-start").is_disabled()
        p.page.locator(".fit-cancel").focus()
        p.page.keyboard.press("Enter")  # the button works from the keyboard
        p.wait_state("cancelled", "failed", "error", "ready", timeout=FIT_TIMEOUT_MS)
        assert p.state() == "cancelled", p.message()
        assert "nothing was written" in p.message()
        eta = p.page.locator(".fit-eta").inner_text()
        assert " left" not in eta, eta  # a cancelled fit has no time left to show (issue 58)
        assert p.page.locator("#fit-start").is_enabled() and p.page.locator(".fit-cancel").is_hidden()
        assert p.page.locator("#fit-progress").evaluate("b => b.value") < 20000
        job = httpx.get(f"{fit_stack.url}/v1/fits", timeout=30).json()["fits"][0]
        assert (job["name"], job["state"]) == ("panel-cancelled", "cancelled")
        time.sleep(1.5)  # a poll of the repository (1 s) would list a late write
        assert tree(fit_stack.models) == before
        assert p.page.locator(".fit-eta").inner_text() == eta  # and nothing counts on
        assert "panel-cancelled" not in p.page.locator("#model option").all_text_contents()
        assert p.errors == []
    finally:
        p.close()


def test_a_reload_mid_fit_follows_the_running_job_again(browser, fit_stack):  # noqa: F811
    p = FitPage(browser, fit_stack.url + "/")
    job = None
    try:
        p.upload("long.png", photo_png(), preset="fourier-small", size=32, steps=20000, name="panel-reloaded")
        p.page.wait_for_function("document.querySelector('.fit-plot').dataset.points >= 2", timeout=TIMEOUT_MS)
        job = p.job_url()
        step = p.page.locator("#fit-progress").evaluate("b => b.value")
        p.page.reload()
        p.watch()
        p.page.wait_for_function(f"document.querySelector('#fit-progress').value > {step}", timeout=TIMEOUT_MS)
        assert p.state() == "running" and p.page.locator(".fit-cancel").is_visible()
        assert p.page.locator("#fit-start").is_disabled()
        assert p.job_url() == job
        assert int(p.page.locator(".fit-plot").get_attribute("data-points")) >= 2  # the whole curve so far
        assert p.page.locator("#fit-progress").evaluate("b => b.max") == 20000
        record = httpx.get(fit_stack.url + job, timeout=30).json()
        assert record["state"] == "running" and record["name"] == "panel-reloaded"
        assert p.errors == []
    finally:
        if job is not None:
            httpx.delete(fit_stack.url + job, timeout=30)
        p.close()


def test_with_the_fit_group_restricted_the_panel_shows_the_403(browser, model_repo, tmp_path):  # noqa: F811
    """The page cannot know the group's key: the panel shows the API's 403 text and queues nothing."""
    srv = Server(
        model_repo,
        "--http-restricted-api",
        "fit:fit-key=s3cret",
        env={"INR_FIT_STORE": f"sqlite:///{tmp_path / 'fits.sqlite'}"},
    )
    srv.wait_ready()
    p = None
    try:
        refused = httpx.post(f"{srv.url}/v1/fits", files={"file": ("cat.png", photo_png(), "image/png")}, timeout=30)
        assert refused.status_code == 403
        p = FitPage(browser, srv.url + "/")
        p.upload("cat.png", photo_png(), preset="fourier-small")
        p.wait_state("error")
        assert refused.json()["error"] in p.message() and "this page does not have" in p.message()
        assert p.page.locator(".fit-job").is_hidden() and p.page.locator("#fit-start").is_enabled()
        assert not [e for e in p.errors if "Failed to load resource" not in e]
        listed = httpx.get(f"{srv.url}/v1/fits", headers={"fit-key": "s3cret"}, timeout=30).json()["fits"]
        assert listed == []
    finally:
        if p is not None:
            p.close()
        srv.stop()
