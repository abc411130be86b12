"""The viewer's "Fit your own image" panel in headless Chromium against the answers of the
real fits API that need a server of their own: a job retried after its worker died and failed after the
second death (real workers, SIGKILLed), an upload queued with no worker connected (a dropped file, its options
read back from the record), 429 with Retry-After and 413 — one real server (tests/servers.py) on a temp store
and a temp copy of the models, with INR_FIT_STALE_S=3, INR_FIT_MAX_RUNNING=1, INR_FIT_QUEUE_LIMIT=0 and
INR_FIT_MAX_UPLOAD_BYTES=2000, and no worker but the ones a test starts (tests/fits.py).

test_viewer_fit.py runs the rest against the real API and a connected worker: a job's whole history up to the
model in the viewer, a second version, Cancel from the keyboard, a reload mid-fit, a text file, and the 403.
"""

import io
import time

import httpx
import pytest
from PIL import Image

# Chromium, its flags and the module-scoped browser fixture are the viewer tests' (skips without Chromium).
from test_viewer import browser  # noqa: F401
from test_viewer_fit import FIT_TIMEOUT_MS, FitPage, fit_server, photo_png

from fitstore import PRESETS, FitStore
from tests.fits import Worker, photo, png, wait_for

STALE_S = 3
MAX_UPLOAD = 2000  # photo_png() is about 1 KB


@pytest.fixture(scope="module")
def panel_stack(model_repo, tmp_path_factory):
    root = tmp_path_factory.mktemp("panel-stack")
    srv = fit_server(
        model_repo,
        root,
        env={"INR_FIT_STALE_S": str(STALE_S), "INR_FIT_QUEUE_LIMIT": "0", "INR_FIT_MAX_UPLOAD_BYTES": str(MAX_UPLOAD)},
    )
    srv.root, srv.store = root, FitStore(srv.store_url, stale_s=STALE_S)
    yield srv
    srv.store.close()
    srv.stop()


@pytest.fixture
def workers(panel_stack):
    """Start workers with `workers.start()`; after the test they are stopped and whatever it left queued or
    running is cancelled, so that the next test finds the queue (of one) empty."""
    started = []

    class Workers:
        @staticmethod
        def start():
            started.append(
                Worker(
                    panel_stack.store_url,
                    panel_stack.models,
                    panel_stack.root / f"worker-{len(started)}.log",
                    stale_s=STALE_S,
                )
            )
            return started[-1]

    yield Workers
    for w in started:
        w.stop()
    for r in panel_stack.store.list():
        if r["state"] in ("queued", "running"):
            httpx.delete(f"{panel_stack.url}/v1/fits/{r['id']}", timeout=30)


def wait_for_no_workers(store, timeout=30):
    """A worker stopped or killed by an earlier test keeps its seat until its heartbeat is STALE_S old."""
    deadline = time.monotonic() + timeout
    while store.workers():
        assert time.monotonic() < deadline, store.workers()
        time.sleep(0.2)


def job_id(p):
    return p.job_url().rsplit("/", 1)[-1]


def test_a_retried_then_failed_fit_restarts_the_plot_and_shows_why(browser, panel_stack, workers):  # noqa: F811
    """A worker SIGKILLed mid-fit: the next worker reaps the job (`retrying`, attempt 2) and fits it again; killed
    again, the third worker fails it. The panel starts its plot and bar again and shows the record's reason."""
    store = panel_stack.store
    p = FitPage(browser, panel_stack.url + "/")
    try:
        p.upload("long.png", photo_png(), preset="fourier-small", size=32, steps=20000, name="panel-retried")
        p.wait_state("queued")
        job = job_id(p)
        for attempt in (1, 2):
            worker = workers.start()
            wait_for(
                store,
                job,
                lambda r: r["state"] == "running" and r["attempt"] == attempt and r["step"] > 0,
                what=f"attempt {attempt} running",
            )
            # After the retry (its message said), a point is the second attempt's: the retry cleared the plot.
            retried = "messages.some(m => m.startsWith('retrying: worker '))" if attempt == 2 else "true"
            p.page.wait_for_function(
                f"{retried} && document.querySelector('.fit-plot').dataset.points >= 1", timeout=FIT_TIMEOUT_MS
            )
            assert p.state() == "running"
            if attempt == 2:
                # The plot and the bar went back to nothing, then up again.
                for seen in (p.page.evaluate("plotPoints"), [v for v, _ in p.page.evaluate("barValues")]):
                    reset = max(i for i, v in enumerate(seen) if v == 0)
                    assert any(v > 0 for v in seen[:reset]) and seen[-1] > 0, seen
            worker.kill()
        workers.start()
        p.wait_state("failed", "ready", "error", "cancelled", timeout=FIT_TIMEOUT_MS)
        record = store.get(job)
        assert (record["state"], record["attempt"]) == ("failed", 2), record
        assert p.state() == "failed", p.message()
        assert "already retried once" in record["error"] and record["error"] in p.message()
        assert "error" in p.page.locator(".fit-message").get_attribute("class")
        assert p.page.locator(".fit-zoom").is_hidden() and p.page.locator("#fit-start").is_enabled()
        assert not (panel_stack.models / "panel-retried").exists()
        assert p.errors == []
    finally:
        p.close()


def test_a_dropped_file_is_queued_with_its_options_and_the_no_worker_note(browser, panel_stack, workers):  # noqa: F811
    store = panel_stack.store
    wait_for_no_workers(store)
    p = FitPage(browser, panel_stack.url + "/")
    try:
        dt = p.page.evaluate_handle(
            """bytes => {
            const dt = new DataTransfer();
            dt.items.add(new File([new Uint8Array(bytes)], 'dropped.png', {type: 'image/png'}));
            return dt;
        }""",
            list(photo_png()),
        )
        p.page.dispatch_event("#fit .drop", "dragenter", {"dataTransfer": dt})
        assert "dragover" in p.page.locator("#fit").get_attribute("class")
        p.page.dispatch_event("#fit .drop", "drop", {"dataTransfer": dt})
        assert "dragover" not in p.page.locator("#fit").get_attribute("class")
        assert "dropped.png" in p.page.locator(".drop-name").inner_text()
        p.page.select_option("#fit-preset", "sinekan")
        p.page.fill("#fit-name", "my-drop")
        p.page.locator("#fit-start").focus()
        p.page.keyboard.press("Enter")
        p.page.wait_for_function("document.querySelector('.fit-message').textContent.includes('no worker')")
        assert "no worker is connected" in p.message()
        assert p.state() == "queued" and p.page.locator(".fit-cancel").is_visible()

        record = httpx.get(panel_stack.url + p.job_url(), timeout=30).json()
        assert (record["state"], record["name"], record["workers"]) == ("queued", "my-drop", 0)
        assert record["note"] in p.message()
        # The sizes and steps left empty are the API's defaults.
        assert record["options"] == {
            "preset": "sinekan",
            "size": 256,
            "steps": int(PRESETS["sinekan"]["steps"]),
            "protocol": "full",
            "seed": 0,
            "block": 2048,  # INR_FIT_BLOCK_SIZE: a larger upload is fitted in blocks
            "overlap": 32,
            "blocks": "auto",  # in blocks only when no worker can hold it as one model
        }
        assert "--store sqlite:///" in record["note"] and "--models " in record["note"]  # the command, no placeholders
        assert record["source"]["filename"] == "dropped.png"
        assert (record["source"]["width"], record["source"]["height"]) == photo().size
        stored = Image.open(io.BytesIO(store.image(record["id"]))).convert("RGB")
        assert stored.tobytes() == photo().tobytes()
        assert p.errors == []
    finally:
        p.close()


def refused(p, data):
    """Upload through the panel; it must end in the error state with the form usable and no job shown."""
    p.upload("cat.png", data, preset="fourier-small")
    p.wait_state("error")
    assert "error" in p.page.locator(".fit-message").get_attribute("class")
    assert p.page.locator(".fit-job").is_hidden() and p.page.locator("#fit-start").is_enabled()
    # Chromium logs "Failed to load resource: 4xx" as a console error; only page errors count here.
    assert not [e for e in p.errors if "Failed to load resource" not in e]
    return p.message()


def test_over_the_queue_limit_the_panel_shows_the_429(browser, panel_stack, workers):  # noqa: F811
    """INR_FIT_MAX_RUNNING=1 + INR_FIT_QUEUE_LIMIT=0 and no worker: the first upload queues, the second is 429."""
    api = httpx.Client(base_url=panel_stack.url, timeout=30)
    try:
        first = api.post("/v1/fits", files={"file": ("first.png", photo_png(), "image/png")})
        assert first.status_code == 202, first.text
        full = api.post("/v1/fits", files={"file": ("cat.png", photo_png(), "image/png")})
        assert full.status_code == 429 and int(full.headers["Retry-After"]) >= 1, full.text
        p = FitPage(browser, panel_stack.url + "/")
        try:
            shown = refused(p, photo_png())
            assert full.json()["error"] in shown and "retry after" in shown
        finally:
            p.close()
        assert [r["id"] for r in api.get("/v1/fits").json()["fits"] if r["state"] in ("queued", "running")] == [
            first.json()["id"]
        ]
    finally:
        api.close()


def test_an_upload_over_the_byte_limit_gets_the_413_in_the_panel(browser, panel_stack, workers):  # noqa: F811
    big = png(photo(160, 120, seed=2))
    assert len(big) > MAX_UPLOAD
    expected = httpx.post(f"{panel_stack.url}/v1/fits", files={"file": ("cat.png", big, "image/png")}, timeout=30)
    assert expected.status_code == 413
    before = len(panel_stack.store.list())
    p = FitPage(browser, panel_stack.url + "/")
    try:
        shown = refused(p, big)
        assert expected.json()["error"] in shown and "INR_FIT_MAX_UPLOAD_BYTES" in shown
    finally:
        p.close()
    assert len(panel_stack.store.list()) == before
