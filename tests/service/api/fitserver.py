"""The fit server of the /v1/fits tests: the real service with the fit group restricted, over a copy of
the bundled models and its own SQLite job store, and the helpers that upload and read back."""

from __future__ import annotations

import io
import shutil

import httpx
import pytest
from PIL import Image

from fitstore import FitStore
from tests.servers import ROOT, Server

KEY = {"fit-key": "fit-s3cret"}
MAX_BYTES, MAX_PIXELS, MAX_BODY = 300_000, 1_000_000, 100_000  # an upload may be larger than other bodies
MAX_FILE_PIXELS = 4_000_000  # a JPEG, PNG or TIFF over MAX_PIXELS is kept as a file, up to this


@pytest.fixture(scope="module")
def fit_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("fit-models")
    for name in ("astronaut", "digits"):
        shutil.copytree(ROOT / "models" / name, repo / name)
    url = f"sqlite:///{tmp_path_factory.mktemp('fit-store') / 'fits.sqlite'}"
    uploads = tmp_path_factory.mktemp("fit-uploads")
    srv = Server(
        repo,
        "--http-restricted-api",
        f"fit:fit-key={KEY['fit-key']}",
        env={
            "INR_FIT_STORE": url,
            "INR_FIT_MAX_UPLOAD_BYTES": str(MAX_BYTES),
            "INR_MAX_UPLOAD_PIXELS": str(MAX_PIXELS),
            "INR_FIT_MAX_UPLOAD_PIXELS": str(MAX_FILE_PIXELS),
            "INR_FIT_UPLOADS": str(uploads),
            "INR_FIT_MAX_RUNNING": "1",
            "INR_FIT_QUEUE_LIMIT": "3",
            "INR_FIT_MAX_SIZE": "512",
            "INR_MAX_BODY_BYTES": str(MAX_BODY),
        },
    ).wait_ready()
    srv.repo, srv.store_url, srv.uploads = repo, url, uploads
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def store(fit_server):
    s = FitStore(fit_server.store_url)
    yield s
    s.close()


@pytest.fixture
def api(fit_server, store):
    """A client with the fit key; whatever a test left queued is cancelled after it."""
    with httpx.Client(base_url=fit_server.url, headers=KEY, timeout=30) as c:
        yield c
        for r in store.list():
            if r["state"] in ("queued", "running"):
                c.delete(f"/v1/fits/{r['id']}")


def upload(api, data: bytes, filename: str = "photo.png", **fields) -> httpx.Response:
    return api.post(
        "/v1/fits",
        files={"file": (filename, data, "application/octet-stream")},
        data={k: str(v) for k, v in fields.items()},
    )


def stored(store, job_id: str) -> Image.Image:
    img = Image.open(io.BytesIO(store.image(job_id)))
    assert img.format == "PNG" and img.mode == "RGB"
    return img
