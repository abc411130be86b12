"""/v1/fits over HTTP on the real server and the real job store (docs/fits.md), without a
worker: uploads are checked before anything is queued, queued jobs are listed, streamed and cancelled.
The conversions of the upload are checked on the PNG the store holds."""

from __future__ import annotations

import io
import struct
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from fitstore import PRESETS
from tests.servers import png_bytes
from tests.service.api.fitserver import MAX_BODY, MAX_BYTES, MAX_FILE_PIXELS, api, fit_server, store, stored, upload  # noqa: F401
from training.worker.job import fit_args


def noise_png(side: int) -> bytes:
    return png_bytes(Image.fromarray(np.random.default_rng(0).integers(0, 256, (side, side, 3), np.uint8)))


def test_an_upload_is_queued_with_its_record_links_and_a_note_without_workers(api, store):
    r = upload(api, png_bytes(Image.new("RGB", (40, 30), (10, 200, 30))), "My Photo!.png", steps=7)
    assert r.status_code == 202, r.text
    rec = r.json()
    assert r.headers["location"] == rec["links"]["self"] == f"/v1/fits/{rec['id']}"
    assert rec["state"] == "queued" and rec["name"] == "My-Photo"
    # the default preset is the grid, at the upload's native size (no cap)
    assert rec["options"] == {
        "preset": "grid",
        "size": None,
        "steps": 7,
        "protocol": "full",
        "seed": 0,
        "block": 2048,
        "overlap": 32,
        "blocks": "auto",  # one model unless a worker cannot hold one (docs/fits.md, "One model or blocks")
    }
    assert rec["source"]["width"] == 40 and rec["source"]["height"] == 30 and rec["source"]["frames"] == 1
    assert rec["links"]["events"] == f"/v1/fits/{rec['id']}/events"
    assert rec["workers"] == 0 and "no worker is connected" in rec["note"]
    got = api.get(rec["links"]["self"]).json()
    assert got["id"] == rec["id"] and got["state"] == "queued" and "note" in got
    assert api.get("/v1/fits").json()["fits"][0]["id"] == rec["id"]
    assert stored(store, rec["id"]).getpixel((5, 5)) == (10, 200, 30)
    defaults = upload(api, png_bytes(Image.new("RGB", (8, 8))), preset="fourier-small").json()["options"]
    assert defaults["steps"] == PRESETS["fourier-small"]["steps"] and defaults["size"] == 256


def test_blocks_are_auto_unless_the_job_asks_for_them(api):
    """`blocks`: auto by default (the worker decides from its memory), always when asked for by name or by a
    block_size of the job's own; a size cap fits the upload whole, so a block_size beside it asks for nothing."""
    small = png_bytes(Image.new("RGB", (8, 8)))
    asked = {
        "auto": {},
        "always": {"blocks": "always"},
        "ALWAYS": {"blocks": "ALWAYS", "block_size": 64},
        "by size": {"block_size": 64},
        "capped": {"block_size": 64, "size": 32},
        "auto, with a block size": {"blocks": "auto", "block_size": 64},
    }
    got = {}
    for k, fields in asked.items():
        rec = upload(api, small, **fields).json()
        got[k] = rec["options"]
        assert api.delete(rec["links"]["self"]).status_code == 200  # cancelled: the queue limit is 4
    assert {k: o["blocks"] for k, o in got.items()} == {
        "auto": "auto",
        "always": "always",
        "ALWAYS": "always",
        "by size": "always",
        "capped": "auto",
        "auto, with a block size": "auto",
    }
    assert got["by size"]["block"] == 64 and got["by size"]["overlap"] == 16


def test_a_target_is_in_the_record_as_given_and_goes_to_fit_image(api):
    """target_bytes or target_psnr: in the job's options only when given, and passed to fit-image's own flags."""
    small = png_bytes(Image.new("RGB", (8, 8)))
    for fields, expected in (
        ({"target_bytes": "250000"}, {"target_bytes": 250000}),
        ({"target_psnr": "41.5"}, {"target_psnr": 41.5}),
        ({"rd_lambda": "0.001"}, {"rd_lambda": 0.001}),
    ):
        rec = upload(api, small, **fields).json()
        assert {k: rec["options"][k] for k in expected} == expected
        assert not {"target_bytes", "target_psnr", "rd_lambda"} - set(expected) & set(rec["options"])
        args = fit_args(rec["options"], Path("photo.png"), "cpu")
        assert (args.target_bytes, args.target_psnr) == (expected.get("target_bytes"), expected.get("target_psnr"))
        assert args.grid_rd_lambda == expected.get("rd_lambda", 0.0)
        assert api.delete(rec["links"]["self"]).status_code == 200


def test_a_derived_name_is_unique_against_the_repository_and_active_jobs(api):
    img = png_bytes(Image.new("RGB", (8, 8)))
    assert upload(api, img, "astronaut.png").json()["name"] == "astronaut-2"  # the folder exists
    assert upload(api, img, "astronaut.png").json()["name"] == "astronaut-3"  # astronaut-2 is queued
    assert upload(api, img, "../...png").json()["name"] == "image"
    assert upload(api, img, "astronaut.png", name="astronaut").json()["name"] == "astronaut"  # next version


def test_every_fit_route_needs_the_fit_key(fit_server, api, store):
    job = upload(api, png_bytes(Image.new("RGB", (8, 8)))).json()["id"]
    before = len(store.list())
    for method, path in (
        ("POST", "/v1/fits"),
        ("GET", "/v1/fits"),
        ("GET", f"/v1/fits/{job}"),
        ("GET", f"/v1/fits/{job}/events"),
        ("GET", f"/v1/fits/{job}/previews/1.png"),
        ("DELETE", f"/v1/fits/{job}"),
    ):
        for headers in ({}, {"fit-key": "wrong"}):
            r = httpx.request(
                method,
                fit_server.url + path,
                headers=headers,
                timeout=10,
                files={"file": ("a.png", png_bytes(Image.new("RGB", (8, 8))))} if method == "POST" else None,
            )
            assert r.status_code == 403, (method, path)
            assert "'fit' API is restricted" in r.json()["error"] and "fit-key" in r.json()["error"]
    assert len(store.list()) == before and store.get(job)["state"] == "queued"
    assert httpx.get(fit_server.url + "/v1/models", timeout=10).status_code == 200  # other groups stay open


def truncated_png() -> bytes:
    data = noise_png(64)
    return data[: len(data) // 2]


def bomb() -> bytes:
    """A 15000×15000 bilevel PNG: a few tens of KB on disk, 225 megapixels decoded."""
    return png_bytes(Image.new("1", (15000, 15000)))


def tiff_bomb() -> bytes:
    """A TIFF of 40 bytes whose header declares 100000×100000 RGB pixels in one (missing) strip."""
    entries = [(256, 4, 100000), (257, 4, 100000), (258, 3, 8), (259, 3, 1), (262, 3, 2), (273, 4, 8), (277, 3, 3)]
    entries += [(278, 4, 100000), (279, 4, 30_000_000_000 % 2**32)]
    ifd = struct.pack("<H", len(entries)) + b"".join(struct.pack("<HHII", t, k, 1, v) for t, k, v in entries)
    return b"II*\x00" + struct.pack("<I", 8) + ifd + b"\x00" * 4


def gif_bytes(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("P", (width, height)).save(buf, "GIF")
    return buf.getvalue()


BAD = [  # (file, fields, status, words in the error)
    (lambda: b"this is not an image", {}, 400, ["not an image"]),
    (truncated_png, {}, 400, ["truncated"]),
    (lambda: b"", {}, 400, ["empty"]),
    (bomb, {}, 413, ["15000×15000 pixels", f"limit of {MAX_FILE_PIXELS} (INR_FIT_MAX_UPLOAD_PIXELS)"]),
    (lambda: tiff_bomb(), {}, 413, ["100000×100000 pixels", "INR_FIT_MAX_UPLOAD_PIXELS"]),
    # a GIF is decoded whole: INR_MAX_UPLOAD_PIXELS holds for it (a JPEG, PNG or TIFF this size is kept as a file)
    (lambda: gif_bytes(1100, 1000), {}, 413, ["INR_MAX_UPLOAD_PIXELS", "only a JPEG, PNG or TIFF may have more"]),
    (lambda: noise_png(330), {}, 413, [f"limit of {MAX_BYTES}", "INR_FIT_MAX_UPLOAD_BYTES"]),  # the route
    (lambda: noise_png(450), {}, 413, [f"INR_FIT_MAX_UPLOAD_BYTES={MAX_BYTES} plus"]),  # the body limit
    (None, {"steps": 0}, 422, ["steps", "1 … 20000", "INR_FIT_MAX_STEPS"]),
    (None, {"steps": 10**9}, 422, ["steps", "INR_FIT_MAX_STEPS"]),
    (None, {"steps": "many"}, 422, ["steps must be a whole number"]),
    (None, {"size": 0}, 422, ["size", "16 … 512", "INR_FIT_MAX_SIZE"]),
    (None, {"size": 513}, 422, ["INR_FIT_MAX_SIZE"]),
    (None, {"seed": -1}, 422, ["seed"]),
    (None, {"preset": "huge"}, 422, ["preset 'huge' is unknown", "grid, fourier, fourier-small, sinekan"]),
    (None, {"protocol": "half"}, 422, ["protocol"]),
    (None, {"name": "a/b"}, 422, ["path separator"]),
    (None, {"name": "a..b"}, 422, ["'..'"]),
    (None, {"name": "a\x00b"}, 422, ["NUL"]),
    (None, {"name": "n" * 2000}, 422, ["2000 characters", "64"]),
    (None, {"name": "-x"}, 422, ["must match"]),
    (None, {"name": "digits"}, 409, ["'digits' is a digits model"]),
    (None, {"colour": "red"}, 422, ["unexpected form field 'colour'"]),
    (None, {"blocks": "sometimes"}, 422, ["blocks 'sometimes' is unknown", "auto, always"]),
    (None, {"blocks": "always", "size": 64}, 422, ["blocks=always", "size", "drop one of them"]),
    (None, {"block_size": 8}, 422, ["block_size", "16 …", "INR_FIT_BLOCK_SIZE"]),
    (None, {"target_bytes": 100}, 422, ["target_bytes", "1024 …"]),
    (None, {"target_bytes": "2MB"}, 422, ["target_bytes must be a whole number"]),
    (None, {"target_psnr": "nan"}, 422, ["target_psnr must be more than 0 and at most 100"]),
    (None, {"target_psnr": "inf"}, 422, ["target_psnr"]),
    (None, {"target_psnr": 0}, 422, ["target_psnr"]),
    (None, {"target_psnr": "loud"}, 422, ["target_psnr must be a number"]),
    (None, {"target_bytes": 10**6, "target_psnr": 40}, 422, ["give one target, not both"]),
    (None, {"target_psnr": 40, "preset": "fourier"}, 422, ["preset 'fourier' takes no target_bytes"]),
    (None, {"target_bytes": 10**6, "blocks": "always"}, 422, ["target_bytes is for one model", "target_psnr"]),
    (None, {"rd_lambda": "0"}, 422, ["rd_lambda must be more than 0 and at most 1"]),
    (None, {"rd_lambda": "1e-9"}, 422, ["rd_lambda must be in 1e-07 … 1, got 1e-09"]),
    (None, {"rd_lambda": "nan"}, 422, ["rd_lambda must be more than 0"]),
    (None, {"rd_lambda": "sharp"}, 422, ["rd_lambda must be a number"]),
    (None, {"rd_lambda": "0.001", "target_psnr": 40}, 422, ["rd_lambda sets the quality itself"]),
    (None, {"rd_lambda": "0.001", "preset": "fourier"}, 422, ["preset 'fourier' takes no rd_lambda"]),
]


@pytest.mark.parametrize(
    "make, fields, status, words",
    BAD,
    ids=[
        "not-an-image",
        "truncated",
        "zero-bytes",
        "bomb",
        "tiff-bomb",
        "gif-over-pixels",
        "over-bytes",
        "over-body",
        "steps-0",
        "steps-1e9",
        "steps-text",
        "size-0",
        "size-over",
        "seed",
        "preset",
        "protocol",
        "name-slash",
        "name-dotdot",
        "name-nul",
        "name-2000",
        "name-pattern",
        "name-digits",
        "unknown-field",
        "blocks-unknown",
        "blocks-with-size",
        "block-size-small",
        "target-bytes-small",
        "target-bytes-text",
        "target-psnr-nan",
        "target-psnr-inf",
        "target-psnr-0",
        "target-psnr-text",
        "targets-both",
        "target-fourier",
        "target-bytes-blocks",
        "rd-lambda-0",
        "rd-lambda-small",
        "rd-lambda-nan",
        "rd-lambda-text",
        "rd-lambda-with-target",
        "rd-lambda-fourier",
    ],
)
def test_bad_input_gets_a_4xx_naming_the_problem_and_queues_nothing(
    api, store, fit_server, make, fields, status, words
):
    before, folders = len(store.list()), sorted(p.name for p in fit_server.repo.iterdir())
    data = make() if make else png_bytes(Image.new("RGB", (8, 8)))
    r = upload(api, data, **fields)
    assert r.status_code == status, r.text
    for word in words:
        assert word in r.json()["error"]
    assert len(store.list()) == before
    assert sorted(p.name for p in fit_server.repo.iterdir()) == folders
    assert not list(fit_server.uploads.iterdir()), "a refused upload leaves no file behind"
    assert api.get("/health/ready").status_code == 200


def test_an_upload_has_its_own_body_limit_above_the_service_wide_one(api):
    big = noise_png(250)
    assert MAX_BODY < len(big) < MAX_BYTES
    assert upload(api, big).status_code == 202
    r = api.post(
        "/v1/models/astronaut/query", content=b" " * (MAX_BODY + 1), headers={"content-type": "application/json"}
    )
    assert r.status_code == 413 and "INR_MAX_BODY_BYTES" in r.json()["error"]


def test_a_missing_file_or_a_non_form_body_is_refused(api, store):
    before = len(store.list())
    r = api.post("/v1/fits", json={"file": "x"})
    assert r.status_code == 415 and "multipart/form-data" in r.json()["error"]
    r = api.post("/v1/fits", files={"name": (None, "x")})
    assert r.status_code == 400 and "no 'file'" in r.json()["error"]
    assert len(store.list()) == before


def test_over_the_queue_limit_is_429_with_retry_after(api, store):
    img = png_bytes(Image.new("RGB", (8, 8)))
    ids = [upload(api, img).json()["id"] for _ in range(4)]  # INR_FIT_MAX_RUNNING 1 + INR_FIT_QUEUE_LIMIT 3
    before = len(store.list())
    r = upload(api, img)
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert "INR_FIT_QUEUE_LIMIT" in r.json()["error"] and "INR_FIT_MAX_RUNNING" in r.json()["error"]
    assert len(store.list()) == before
    assert api.delete(f"/v1/fits/{ids[0]}").status_code == 200
    assert upload(api, img).status_code == 202  # a cancelled job frees its place


def test_unknown_jobs_are_404(api):
    for method, path in (
        ("GET", "/v1/fits/nosuchjob"),
        ("GET", "/v1/fits/nosuchjob/events"),
        ("DELETE", "/v1/fits/nosuchjob"),
        ("GET", "/v1/fits/nosuchjob/previews/1.png"),
    ):
        r = api.request(method, path)
        assert r.status_code == 404 and "nosuchjob" in r.json()["error"], (method, path)


def test_cancel_a_queued_job_then_delete_again_is_409(api, store):
    job = upload(api, png_bytes(Image.new("RGB", (8, 8)))).json()["id"]
    r = api.delete(f"/v1/fits/{job}")
    assert r.status_code == 200 and r.json()["state"] == "cancelled" and "note" not in r.json()
    r = api.delete(f"/v1/fits/{job}")
    assert r.status_code == 409 and "cancelled" in r.json()["error"]
    assert store.get(job)["state"] == "cancelled"
    assert api.get(f"/v1/fits/{job}/previews/1.png").status_code == 404


def test_cancel_of_a_running_job_is_202_until_its_worker_stops(api, store):
    """This test plays the worker through the store's worker side (claim, heartbeat, finish): a worker
    that does not reach its next progress check within the API's 5 s wait."""
    job = upload(api, png_bytes(Image.new("RGB", (8, 8)))).json()["id"]
    seat = store.register_worker("test-worker", {"host": "test", "pid": 0, "job": job})
    try:
        running = store.claim(job, 1, "test-worker")
        assert running["state"] == "running"
        rec = api.get(f"/v1/fits/{job}").json()
        assert rec["state"] == "running" and rec["workers"] == 1 and "note" not in rec
        r = api.delete(f"/v1/fits/{job}")
        assert r.status_code == 202 and r.json()["state"] == "running" and r.json()["cancel_requested"]
        assert store.cancel_requested(job) and api.get(f"/v1/fits/{job}").json()["cancel_requested"]
        store.finish(store.get(job), "cancelled", error=None)  # the worker's next check
        assert api.get(f"/v1/fits/{job}").json()["state"] == "cancelled"
        assert api.delete(f"/v1/fits/{job}").status_code == 409
    finally:
        store.unregister_worker(seat, "test-worker")


def parse_sse(text: str) -> list[dict]:
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith((":", "retry")))
        if fields:
            events.append(fields)
    return events


def test_sse_on_a_finished_job_sends_the_history_then_closes_and_resumes(api):
    job = upload(api, png_bytes(Image.new("RGB", (8, 8)))).json()["id"]
    api.delete(f"/v1/fits/{job}")
    r = api.get(f"/v1/fits/{job}/events", timeout=5)  # returns: the stream closed
    assert r.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(r.text)
    assert [e["event"] for e in events] == ["queued", "cancelled"]
    assert [int(e["id"]) for e in events] == [1, 2]
    resumed = parse_sse(api.get(f"/v1/fits/{job}/events", headers={"Last-Event-ID": "1"}, timeout=5).text)
    assert [e["event"] for e in resumed] == ["cancelled"]
    query = parse_sse(api.get(f"/v1/fits/{job}/events?last_event_id=1", timeout=5).text)
    assert [e["event"] for e in query] == ["cancelled"]
    assert api.get(f"/v1/fits/{job}/events", headers={"Last-Event-ID": "x"}).status_code == 422


def test_sse_follows_a_live_job_until_its_final_event(api):
    job = upload(api, png_bytes(Image.new("RGB", (8, 8)))).json()["id"]
    seen, first = [], threading.Event()

    def follow():
        with api.stream("GET", f"/v1/fits/{job}/events", timeout=10) as r:
            for line in r.iter_lines():
                if line.startswith("event: "):
                    seen.append(line[7:])
                    first.set()

    reader = threading.Thread(target=follow)
    reader.start()
    assert first.wait(5) and seen == ["queued"]
    assert api.delete(f"/v1/fits/{job}").status_code == 200
    reader.join(5)
    assert not reader.is_alive() and seen == ["queued", "cancelled"]
