"""Skip by content hash over HTTP (docs/fits.md): the record keeps the sha256 of the uploaded bytes, `skip_existing`
answers the job queued, running or succeeded with the same bytes (200, even when the queue is full), without it an
upload is queued as before, and `GET /v1/fits?sha256=` finds the jobs by their bytes. Real server, real store."""

from __future__ import annotations

import hashlib

import numpy as np
from PIL import Image

from tests.servers import png_bytes
from tests.service.api.fitserver import api, fit_server, store, upload  # noqa: F401


def image(seed: int) -> bytes:
    return png_bytes(Image.fromarray(np.random.default_rng(seed).integers(0, 256, (12, 16, 3), np.uint8)))


def test_the_same_bytes_with_skip_existing_answer_the_first_job_and_without_it_queue_another(api, store):
    data = image(1)
    sha = hashlib.sha256(data).hexdigest()
    first = upload(api, data, "dup.png")
    assert first.status_code == 202, first.text
    job = first.json()
    assert job["source"]["sha256"] == sha and store.get(job["id"])["source"]["sha256"] == sha
    before = len(store.list())
    again = upload(api, data, "renamed.png", skip_existing="true", steps=5)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == job["id"] and again.json()["state"] == "queued"
    assert again.headers["location"] == f"/v1/fits/{job['id']}" and len(store.list()) == before
    plain = upload(api, data, "dup.png")  # without the option: as before, a new job
    assert plain.status_code == 202 and plain.json()["id"] != job["id"] and plain.json()["name"] == "dup-2"
    found = api.get("/v1/fits", params={"sha256": sha.upper()})
    assert found.status_code == 200 and [r["id"] for r in found.json()["fits"]] == [plain.json()["id"], job["id"]]
    assert all("links" in r for r in found.json()["fits"])
    assert api.get("/v1/fits", params={"sha256": hashlib.sha256(b"x").hexdigest()}).json() == {"fits": []}
    for r in (job, plain.json()):
        assert api.delete(f"/v1/fits/{r['id']}").status_code == 200
    fresh = upload(api, data, "dup.png", skip_existing="1")  # cancelled jobs do not count
    assert fresh.status_code == 202 and fresh.json()["id"] not in (job["id"], plain.json()["id"])


def test_skip_existing_is_answered_when_the_queue_is_full_and_other_bytes_get_429(api):
    data = image(2)
    ids = [upload(api, data).json()["id"]] + [upload(api, image(10 + i)).json()["id"] for i in range(3)]
    assert len(set(ids)) == 4  # INR_FIT_MAX_RUNNING 1 + INR_FIT_QUEUE_LIMIT 3: full
    same = upload(api, data, skip_existing="true")
    assert same.status_code == 200 and same.json()["id"] == ids[0]
    other = upload(api, image(3), skip_existing="true")
    assert other.status_code == 429 and int(other.headers["retry-after"]) >= 1


def test_a_bad_skip_existing_or_sha256_is_422_naming_it(api, store):
    before = len(store.list())
    r = upload(api, image(4), skip_existing="maybe")
    assert r.status_code == 422 and "skip_existing must be true or false" in r.json()["error"]
    assert len(store.list()) == before
    r = api.get("/v1/fits", params={"sha256": "abc"})
    assert r.status_code == 422 and "sha256" in r.json()["error"]
    r = api.get("/v1/fits", params={"sha256": "a" * 64 + "\n"})
    assert r.status_code == 422 and "sha256" in r.json()["error"]
