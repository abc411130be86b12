"""Class 4, fit records (docs/security.md, "Fit records"; docs/fits.md, "Who sees a fit"). The secure answer: a
fit's record, events and previews are shown to its owner (the key or token that queued it), to an admin (within its
models), and, for a fit queued without credentials, to whoever may read its target; to anyone else the job does not
exist (404), its upload's hash finds nothing, `skip_existing` does not answer with it, and its cancel is a 404. A
preview of a restricted model's new pixels is cached privately."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from tests.fits import photo, png

BYTES = png(photo(40, 32, 4242))


@pytest.fixture(scope="module")
def staff_job(stack):
    """A key's fit into the restricted model it may read, finished, with previews."""
    r = httpx.post(
        f"{stack.open_url}/v1/fits",
        files={"file": ("staff-holiday.png", BYTES, "image/png")},
        data={"preset": "fourier-small", "size": "32", "steps": "40", "name": "secret"},
        headers=stack.auth("staff"),
        timeout=60,
    )
    assert r.status_code == 202, r.text
    rec = stack.finished(r.json()["id"])
    assert rec["state"] == "succeeded", rec
    return rec


def paths(job: dict) -> list[str]:
    base = f"/v1/fits/{job['id']}"
    return [base, f"{base}/events", f"{base}/previews/{job['preview_seq']}.png"]


@pytest.mark.parametrize("role", [None, "other", "fit", "limited"])
def test_another_caller_cannot_see_a_keys_fit(stack, staff_job, role):
    sha = hashlib.sha256(BYTES).hexdigest()
    for url in (stack.open_url, stack.key_url):
        closed = url == stack.key_url and role is None  # INR_FIT_ACCESS=key: no fit route without credentials
        listed = httpx.get(f"{url}/v1/fits", headers=stack.auth(role))
        assert listed.status_code == (401 if closed else 200)
        assert staff_job["id"] not in listed.text and "staff-holiday" not in listed.text
        found = httpx.get(f"{url}/v1/fits?sha256={sha}", headers=stack.auth(role))
        assert found.status_code == 401 if closed else found.json() == {"fits": []}
        for path in paths(staff_job):
            r = httpx.get(url + path, headers=stack.auth(role))
            assert r.status_code == (401 if closed else 404), (path, r.status_code)


@pytest.mark.parametrize("role", ["staff", "admin"])
def test_its_owner_and_an_admin_see_it_and_its_previews_are_private(stack, staff_job, role):
    assert staff_job["id"] in httpx.get(f"{stack.open_url}/v1/fits", headers=stack.auth(role)).text
    record, events, preview = (httpx.get(stack.open_url + p, headers=stack.auth(role)) for p in paths(staff_job))
    assert record.status_code == 200 and record.json()["source"]["owner"] == f"key:{stack.ids['staff']}"
    assert events.status_code == 200
    assert preview.status_code == 200 and preview.headers["cache-control"].startswith("private")


def test_skip_existing_never_answers_with_another_callers_job(stack, staff_job):
    r = httpx.post(
        f"{stack.open_url}/v1/fits",
        files={"file": ("same-bytes.png", BYTES, "image/png")},
        data={"preset": "fourier-small", "size": "32", "steps": "5", "skip_existing": "true"},
        timeout=60,
    )
    assert r.status_code == 202 and r.json()["id"] != staff_job["id"], r.text
    stack.finished(r.json()["id"])


def test_a_fit_key_cannot_cancel_another_keys_job(stack):
    r = stack.fit("records-cancel", role="fit", url=stack.key_url, steps=3000)
    assert r.status_code == 202, r.text
    job = r.json()["id"]
    try:
        refused = httpx.delete(f"{stack.key_url}/v1/fits/{job}", headers=stack.auth("other"))
        assert refused.status_code == 404, refused.text
        assert httpx.get(f"{stack.key_url}/v1/fits/{job}", headers=stack.auth("fit")).json()["state"] != "cancelled"
    finally:
        done = httpx.delete(f"{stack.key_url}/v1/fits/{job}", headers=stack.auth("fit"), timeout=60)
        assert done.status_code in (200, 202), done.text
        stack.finished(job)


def test_an_open_fit_of_a_public_model_is_seen_by_anyone_and_its_previews_are_public(stack):
    r = stack.fit("records-open")
    assert r.status_code == 202, r.text
    rec = stack.finished(r.json()["id"])
    assert httpx.get(f"{stack.open_url}/v1/fits/{rec['id']}", headers=stack.auth("other")).status_code == 200
    preview = httpx.get(f"{stack.open_url}/v1/fits/{rec['id']}/previews/{rec['preview_seq']}.png")
    assert preview.status_code == 200 and preview.headers["cache-control"].startswith("public")
