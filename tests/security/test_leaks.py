"""Class 8, the smaller leaks (docs/security.md): what /metrics tells an anonymous scraper, what a refused manifest
tells, quotas that a burst of parallel fits slips past, a model name with a newline, a credential percent-encoded in a
URL, and what an anonymous fit may cost the workers."""

from __future__ import annotations

import concurrent.futures
import io

import httpx
from PIL import Image

from bench.serving import Server as Service
from service.auth.keys import KeyStore
from service.auth.tokens import Signer
from tests.fits import photo, png
from tests.security.stack import SECRET
from tests.service.engine.test_residency import copy_model


def test_metrics_name_a_restricted_model_only_to_who_may_read_it(stack):
    httpx.get(f"{stack.open_url}/v1/models/open/render?width=8")
    for _ in range(3):
        httpx.get(f"{stack.open_url}/v1/models/secret/render?width=8")  # refused: 401
        httpx.get(f"{stack.open_url}/v1/models/secret/render?width=8", headers=stack.auth("staff"))
    anonymous = httpx.get(f"{stack.open_url}/metrics").text
    assert 'model="open"' in anonymous and "secret" not in anonymous and "thumb" not in anonymous
    admin = httpx.get(f"{stack.open_url}/metrics", headers=stack.auth("admin")).text
    assert 'model="secret"' in admin
    refused = [ln for ln in admin.splitlines() if 'model="secret"' in ln and 'code="401"' in ln]
    assert not refused, refused  # a refused request is counted without the model it named


def test_a_refused_manifest_tells_nothing_but_the_auth_services(stack):
    r = httpx.get(f"{stack.open_url}/iiif/3/secret/manifest.json")
    assert r.status_code == 401
    doc = r.json()
    assert [c["label"] for c in doc["items"]] == [{"en": ["secret"]}] or [c["label"] for c in doc["items"]] == [
        {"none": ["secret"]}
    ]
    for word in ("summary", "metadata", "thumbnail", "PSNR", "astronaut", "version 1", "Parameters"):
        assert word not in r.text, word
    body = doc["items"][0]["items"][0]["items"][0]["body"]
    assert body["service"][1]["type"] == "AuthProbeService2"
    full = httpx.get(f"{stack.open_url}/iiif/3/secret/manifest.json", headers=stack.auth("staff"))
    assert "PSNR" in full.text and "summary" in full.text  # the control: a reader gets it all


def test_parallel_fits_cannot_slip_past_a_keys_quotas(stack):
    key, record = KeyStore(stack.keys_path).create("burst", ["fit"], quotas={"concurrent_fits": 1, "fits_per_day": 1})

    def one(i: int) -> httpx.Response:
        return httpx.post(
            f"{stack.key_url}/v1/fits",
            files={"file": (f"burst{i}.png", png(photo(40, 32, 900 + i)), "image/png")},
            data={"preset": "fourier-small", "size": "32", "steps": "3000"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=120,
        )

    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        answers = list(pool.map(one, range(5)))
    codes = sorted(r.status_code for r in answers)
    assert codes == [202, 429, 429, 429, 429], [(r.status_code, r.text[:200]) for r in answers]
    job = next(r.json()["id"] for r in answers if r.status_code == 202)
    httpx.delete(f"{stack.key_url}/v1/fits/{job}", headers={"Authorization": f"Bearer {key}"}, timeout=60)
    stack.finished(job)


def test_a_name_with_a_newline_is_refused_and_makes_no_folder(stack):
    for name in ("x\n", "x\r\n", "ok\n../y"):
        r = httpx.post(
            f"{stack.open_url}/v1/fits",
            files={"file": ("n.png", png(), "image/png")},
            data={"preset": "fourier-small", "steps": "5", "name": name},
        )
        assert r.status_code == 422, (name, r.text)
    assert not [p for p in stack.repo.iterdir() if "\n" in p.name or "\r" in p.name]


def test_a_percent_encoded_credential_is_refused_and_never_logged(model_repo, tmp_path):
    copy_model(model_repo / "astronaut", tmp_path / "m")
    s = Service(
        tmp_path, "leaks", {"INR_ACCESS_SECRET": SECRET}, args=("--grpc-port", "0"), log_level="info", capture=True
    )
    good = Signer(SECRET.encode()).issue("t", ["read"], 60)[0]
    try:
        s.wait()
        for name in ("access%5Ftoken", "ACCESS_TOKEN", "%61ccess_token", "to%6Ben"):
            r = httpx.get(f"{s.url}/v1/models/m?{name}={good}")
            assert r.status_code == 401 and good not in r.text, (name, r.status_code)
    finally:
        s.stop()
    said = s.proc.stdout.read()
    assert good[:40] not in said and said.count("=REDACTED") >= 4, said[-2000:]


def white_png(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(buf, "PNG", optimize=True)
    return buf.getvalue()


def test_an_anonymous_fit_is_bounded_in_pixels_a_keys_is_not(stack):
    """A few KB that declare a large white image would buy minutes of worker time: without credentials a fit may fit
    at most INR_FIT_ANONYMOUS_MAX_PIXELS (1 MP in this stack); `size` brings it within; a key is held to the
    upload limits only."""
    body = white_png(2000, 2000)
    assert len(body) < 50_000

    def fit(role=None, **data):
        return httpx.post(
            f"{stack.open_url}/v1/fits",
            files={"file": ("white.png", body, "image/png")},
            data={"preset": "fourier-small", "steps": "3000", "size": "2000", **data},
            headers=stack.auth(role),
            timeout=60,
        )

    refused = fit(size="2000")
    assert refused.status_code == 413 and "INR_FIT_ANONYMOUS_MAX_PIXELS" in refused.json()["error"], refused.text
    for r in (fit(size="500"), fit("admin")):
        assert r.status_code == 202, r.text
        httpx.delete(f"{stack.open_url}/v1/fits/{r.json()['id']}", headers=stack.auth("admin"), timeout=60)
        stack.finished(r.json()["id"])
