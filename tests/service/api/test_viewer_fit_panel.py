"""The viewer's "Fit your own image" panel (issue 22 item 5) in headless Chromium against every answer the fits
API can give, from Playwright routes over the session's plain server (which serves the page and `astronaut`):
a job's whole event history, a retry, a failure, Cancel, a reload mid-fit, a dropped file, 429 with Retry-After,
403 and 413. test_viewer_fit.py runs the panel end to end against the real API and a real worker.
"""
import io
import json

import pytest
from PIL import Image

# Chromium, its flags and the module-scoped browser fixture are the viewer tests' (skips without Chromium).
from test_viewer import browser  # noqa: F401
from test_viewer_fit import FitPage, photo_png


JOB = "f00d00000001"
LINKS = {"self": f"/v1/fits/{JOB}", "events": f"/v1/fits/{JOB}/events"}


def record(state, **more):
    return {"id": JOB, "state": state, "name": "astronaut", "version": None, "steps": 40, "step": 0,
            "options": {"preset": "fourier-small", "size": 32, "steps": 40, "protocol": "paper", "seed": 0},
            "links": LINKS, "workers": 1, **more}


def sse(*events, retry_ms=60_000):
    out = [f"retry: {retry_ms}\n\n"]
    for seq, (kind, data) in enumerate(events, 1):
        out.append(f"id: {seq}\nevent: {kind}\ndata: {json.dumps(data)}\n\n")
    return "".join(out)


def progress(step, psnr, preview=False):
    d = {"step": step, "steps": 40, "loss": 0.01, "psnr": psnr, "elapsed_s": step / 10, "eta_s": (40 - step) / 10}
    if preview:
        d["preview"] = f"/v1/fits/{JOB}/previews/{step}.png"
    return ("progress", d)


def mock_fits(page, post, events, final, deletes=None, posts=None):
    """Route the fits API: POST answers `post` (status, headers, body) and appends its body to `posts`, the
    events URL answers `events`, GET of the job answers `final`, DELETE appends to `deletes` and answers the
    cancelled record."""
    png = io.BytesIO()
    Image.new("RGB", (64, 64), (90, 140, 220)).save(png, "PNG")

    def handle(route):
        r = route.request
        if r.url.endswith("/v1/fits") and r.method == "POST":
            status, headers, body = post
            if posts is not None:
                posts.append(r.post_data_buffer)
            route.fulfill(status=status, headers=headers, content_type="application/json", body=json.dumps(body))
        elif r.url.endswith("/events"):
            route.fulfill(status=200, content_type="text/event-stream", body=events)
        elif "/previews/" in r.url:
            route.fulfill(status=200, content_type="image/png", body=png.getvalue())
        elif r.method == "DELETE":
            deletes.append(r.url)
            route.fulfill(status=200, content_type="application/json", body=json.dumps(record("cancelled")))
        else:
            route.fulfill(status=200, content_type="application/json", body=json.dumps(final))

    page.route("**/v1/fits**", handle)


def test_the_panel_plots_each_progress_event_and_opens_the_finished_model(browser, server):  # noqa: F811
    p = FitPage(browser, server.url + "/")
    try:
        events = sse(("queued", {}), ("started", {}), progress(10, 14.5), progress(20, 19.25, True),
                     progress(30, 22.0), progress(40, 24.5, True), ("succeeded", {}))
        done = record("succeeded", version=1, step=40, psnr=24.5, metrics={"train_psnr": 24.5, "test_psnr": 21.25},
                      links={**LINKS, "iiif": "/iiif/3/astronaut/info.json", "viewer": "/?model=astronaut"})
        mock_fits(p.page, (202, {}, record("queued")), events, done)
        p.upload("cat.png", photo_png(), preset="fourier-small", steps=40)
        p.wait_state("ready", "error")
        assert p.state() == "ready", p.message()
        assert p.page.locator(".fit-plot").get_attribute("data-points") == "4"
        assert p.page.locator(".fit-plot circle").count() == 4
        assert "24.50 dB at step 40 of 40" in p.page.locator(".fit-plot").get_attribute("aria-label")
        values = [v for v, m in p.page.evaluate("barValues") if m == 40]
        assert values == sorted(values) and sorted(set(values) - {0}) == [10, 20, 30, 40]
        assert p.page.locator(".fit-preview img").get_attribute("src").endswith("/previews/40.png")
        p.page.wait_for_function("document.querySelector('.fit-preview img').dataset.loaded >= 1")
        assert p.page.locator(".fit-zoom").get_attribute("href") == "iiif.html?id=astronaut"
        assert p.page.locator("#model").input_value() == "astronaut"
        assert p.page.url.endswith("/?model=astronaut")
        assert "astronaut version 1 is in the viewer" in p.message()
        assert "train PSNR 24.50 dB" in p.message() and "test PSNR 21.25 dB" in p.message()
        assert p.page.locator("#fit-start").is_enabled() and p.page.locator(".fit-cancel").is_hidden()
        assert p.errors == []
    finally:
        p.close()


def test_cancel_deletes_the_job_and_the_panel_says_nothing_was_written(browser, server):  # noqa: F811
    p = FitPage(browser, server.url + "/")
    deletes = []
    try:
        mock_fits(p.page, (202, {}, record("queued")), sse(("started", {}), progress(5, 12.0)),
                  record("cancelled"), deletes)
        p.upload("cat.png", photo_png())
        p.page.wait_for_function("document.querySelector('.fit-plot').dataset.points === '1'")
        assert p.page.locator("#fit-start").is_disabled()
        p.page.locator(".fit-cancel").focus()
        p.page.keyboard.press("Enter")             # the button works from the keyboard
        p.wait_state("cancelled")
        assert deletes == [f"{server.url}/v1/fits/{JOB}"]
        assert "nothing was written" in p.message()
        assert p.page.locator("#fit-start").is_enabled()
        assert p.errors == []
    finally:
        p.close()


def test_a_failed_fit_shows_the_records_reason(browser, server):  # noqa: F811
    p = FitPage(browser, server.url + "/")
    reason = "the fit ran past its deadline of 900 s (INR_FIT_DEADLINE_S)"
    try:
        mock_fits(p.page, (202, {}, record("queued")),
                  sse(("started", {}), progress(5, 12.0), progress(10, 14.0),
                      ("retrying", {"reason": "worker host:12:ab stopped"}),
                      ("started", {}), progress(5, 12.5), ("failed", {"error": reason})),
                  record("failed", error=reason))
        p.upload("cat.png", photo_png())
        p.wait_state("failed")
        assert reason in p.message() and "error" in p.page.locator(".fit-message").get_attribute("class")
        assert p.page.locator(".fit-plot").get_attribute("data-points") == "1"   # the retry started a new curve
        assert "12.50 dB at step 5" in p.page.locator(".fit-plot").get_attribute("aria-label")
        assert p.page.locator(".fit-zoom").is_hidden() and p.page.locator("#fit-start").is_enabled()
        assert p.errors == []
    finally:
        p.close()


@pytest.mark.parametrize("status, headers, error, shown", [
    (429, {"Retry-After": "7"}, "too many fits: 4 queued or running", "(try again in 7 s)"),
    (403, {}, "This API is restricted, expecting header 'fit-key'", "this page does not have"),
    (413, {}, "the upload is 30000000 bytes, over INR_FIT_MAX_UPLOAD_BYTES (20971520)", ""),
])
def test_an_api_refusal_is_shown_in_the_panel(browser, server, status, headers, error, shown):  # noqa: F811
    p = FitPage(browser, server.url + "/")
    try:
        mock_fits(p.page, (status, headers, {"error": error}), "", {})
        p.upload("cat.png", photo_png())
        p.wait_state("error")
        assert error in p.message() and shown in p.message()
        assert p.page.locator(".fit-job").is_hidden() and p.page.locator("#fit-start").is_enabled()
        assert not [e for e in p.errors if "Failed to load resource" not in e]
    finally:
        p.close()


def test_a_dropped_file_is_uploaded_with_the_chosen_options(browser, server):  # noqa: F811
    p = FitPage(browser, server.url + "/")
    posts = []
    try:
        mock_fits(p.page, (202, {}, record("queued")), sse(("queued", {"note": "no worker is connected"})),
                  record("queued"), posts=posts)
        dt = p.page.evaluate_handle("""bytes => {
            const dt = new DataTransfer();
            dt.items.add(new File([new Uint8Array(bytes)], 'dropped.png', {type: 'image/png'}));
            return dt;
        }""", list(photo_png()))
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
        body = posts[0]
        assert b'filename="dropped.png"' in body and photo_png() in body
        assert b'name="preset"\r\n\r\nsinekan' in body and b'name="name"\r\n\r\nmy-drop' in body
        assert b'name="steps"' not in body and b'name="size"' not in body   # empty: the API's defaults
        assert p.state() == "queued" and p.page.locator(".fit-cancel").is_visible()
    finally:
        p.close()


def test_a_reload_follows_the_running_job_again(browser, server):  # noqa: F811
    p = FitPage(browser, server.url + "/")
    try:
        mock_fits(p.page, (202, {}, record("queued")), sse(("started", {}), progress(5, 12.0), progress(10, 15.0)),
                  record("running", step=10))
        p.upload("cat.png", photo_png())
        p.page.wait_for_function("document.querySelector('.fit-plot').dataset.points === '2'")
        p.page.reload()
        p.page.wait_for_function("document.querySelector('.fit-plot').dataset.points === '2'")
        assert p.state() == "running" and p.page.locator(".fit-cancel").is_visible()
        assert p.page.locator("#fit-progress").evaluate("b => [b.value, b.max]") == [10, 40]
        assert p.errors == []
    finally:
        p.close()
