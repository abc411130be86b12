"""API keys' scopes and quotas with real requests (docs/access.md, "Keys"): a requests-a-second bucket answered with
429 and Retry-After; with INR_FIT_ACCESS=key, fits only for a key with the scope fit; concurrent fits, fits a day
and bytes stored per key, a flood of uploads past them leaving nothing behind; audit lines that name the key's id
and never its secret; keys revoked while the server runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from tests.fits import photo, png
from tests.servers import Server


def make_key(keys, *args: str) -> str:
    made = subprocess.run(
        [sys.executable, "-m", "service.auth", "keys", "create", "--keys", str(keys), "--name", "t", *args],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    return json.loads(made.stdout)["key"]


@pytest.fixture
def stack(tmp_path):
    (tmp_path / "models").mkdir()
    keys, uploads = tmp_path / "keys.json", tmp_path / "uploads"
    env = {
        "INR_FIT_STORE": f"sqlite:///{tmp_path / 'fits.sqlite'}",
        "INR_FIT_UPLOADS": str(uploads),
        "INR_FIT_QUEUE_LIMIT": "50",
        "INR_FIT_ACCESS": "key",
        "INR_ACCESS_KEYS": str(keys),
        "INR_MAX_UPLOAD_PIXELS": "100",  # every upload is kept as a file: the flood must leave none behind
    }
    srv = Server(tmp_path / "models", "--grpc-port", "0", env=env)
    srv.keys, srv.uploads = keys, uploads
    with srv.running():
        yield srv


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def fit(srv, key: str | None, seed: int = 0) -> httpx.Response:
    body = png(photo(40, 32, seed))
    return httpx.post(
        f"{srv.url}/v1/fits",
        files={"file": (f"p{seed}.png", body, "image/png")},
        data={"preset": "fourier-small", "steps": "5"},
        headers=bearer(key) if key else {},
        timeout=60,
    )


@pytest.mark.serial
def test_a_key_over_its_rate_gets_429_with_retry_after(stack):
    key = make_key(stack.keys, "--scope", "read", "--quota", "rps=2", "--quota", "burst=2")
    codes = [httpx.get(f"{stack.url}/v1/models", headers=bearer(key)).status_code for _ in range(6)]
    assert codes[:2] == [200, 200] and 429 in codes, codes
    r = httpx.get(f"{stack.url}/v1/models", headers=bearer(key))
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert "rps" in r.json()["error"] or "requests a second" in r.json()["error"]
    assert key.split("_")[2] not in r.text  # the key's id, never its secret
    time.sleep(1.1)
    assert httpx.get(f"{stack.url}/v1/models", headers=bearer(key)).status_code == 200
    assert httpx.get(f"{stack.url}/v1/models").status_code == 200  # others are not slowed


def test_fits_need_the_scope_fit(stack):
    assert fit(stack, None).status_code == 401
    reader = make_key(stack.keys, "--scope", "read")
    r = fit(stack, reader)
    assert r.status_code == 403 and "scope fit" in r.json()["error"]
    fitter = make_key(stack.keys, "--scope", "fit")
    r = fit(stack, fitter)
    assert r.status_code == 202, r.text
    job = r.json()["id"]
    assert httpx.delete(f"{stack.url}/v1/fits/{job}", headers=bearer(reader)).status_code == 403
    assert httpx.delete(f"{stack.url}/v1/fits/{job}", headers=bearer(fitter)).status_code == 200


def test_a_flood_of_uploads_past_the_quotas(stack):
    key = make_key(stack.keys, "--scope", "fit", "--quota", "fits_per_day=3")
    codes = [fit(stack, key, seed).status_code for seed in range(8)]
    assert codes.count(202) == 3 and codes.count(429) == 5, codes
    r = fit(stack, key, 99)
    assert "fits_per_day is 3" in r.json()["error"] and int(r.headers["retry-after"]) > 80_000
    kept = sorted(p.name for p in stack.uploads.iterdir())
    assert len(kept) == 3, kept  # the refused ones left nothing (the accepted jobs' files wait for a worker)
    busy = make_key(stack.keys, "--scope", "fit", "--quota", "concurrent_fits=1")
    assert [fit(stack, busy, s).status_code for s in (10, 11)] == [202, 429]
    one = len(png(photo(40, 32, 20)))
    small = make_key(stack.keys, "--scope", "fit", "--quota", f"bytes_stored={one + one // 2}")
    assert fit(stack, small, 20).status_code == 202
    r = fit(stack, small, 21)
    assert r.status_code == 429 and "bytes_stored" in r.json()["error"]


def test_the_audit_log_names_the_key_id_never_its_secret(stack):
    key = make_key(stack.keys, "--scope", "fit", "--quota", "concurrent_fits=1")
    kid, secret = key.split("_")[1], key.split("_")[2]
    assert fit(stack, key, 1).status_code == 202 and fit(stack, key, 2).status_code == 429
    stack.stop()
    said = stack.proc.stdout.read()
    assert "fit queued" in said and f"by=key:{kid}" in said and f"fit refused key={kid}" in said, said
    assert secret not in said and key not in said


def test_a_revoked_key_is_refused_at_once(stack):
    key = make_key(stack.keys, "--scope", "read")
    assert httpx.get(f"{stack.url}/v1/models", headers=bearer(key)).status_code == 200
    kid = key.split("_")[1]
    subprocess.run([sys.executable, "-m", "service.auth", "keys", "revoke", kid, "--keys", str(stack.keys)], check=True)
    r = httpx.get(f"{stack.url}/v1/models", headers=bearer(key))
    assert r.status_code == 401 and "not valid" in r.json()["error"]


def test_the_admin_api_makes_lists_and_revokes_keys(stack):
    root = make_key(stack.keys, "--scope", "admin")
    r = httpx.post(f"{stack.url}/v1/keys", json={"name": "app", "scopes": ["read"], "quotas": {"rps": 50}})
    assert r.status_code == 401
    reader = make_key(stack.keys, "--scope", "read")
    r = httpx.post(f"{stack.url}/v1/keys", json={"name": "app", "scopes": ["read"]}, headers=bearer(reader))
    assert r.status_code == 403 and "admin" in r.json()["error"]
    r = httpx.post(
        f"{stack.url}/v1/keys", json={"name": "app", "scopes": ["read"], "quotas": {"rps": 50}}, headers=bearer(root)
    )
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["quotas"] == {"rps": 50.0} and "sha256" not in made
    assert httpx.get(f"{stack.url}/v1/models", headers=bearer(made["key"])).status_code == 200
    listed = httpx.get(f"{stack.url}/v1/keys", headers=bearer(root)).json()["keys"]
    assert made["id"] in {k["id"] for k in listed} and made["key"] not in json.dumps(listed)
    for bad in ({"name": "x", "scopes": ["Bad Scope"]}, {"name": "x", "scopes": ["read"], "quotas": {"rps": -1}}):
        r = httpx.post(f"{stack.url}/v1/keys", json=bad, headers=bearer(root))
        assert r.status_code == 400, r.text
    assert httpx.delete(f"{stack.url}/v1/keys/{made['id']}", headers=bearer(root)).status_code == 200
    assert httpx.get(f"{stack.url}/v1/models", headers=bearer(made["key"])).status_code == 401
    assert httpx.delete(f"{stack.url}/v1/keys/000000000000", headers=bearer(root)).status_code == 404
    assert httpx.delete(f"{stack.url}/v1/keys/..%2F..", headers=bearer(root)).status_code in (404, 405, 422)


def test_a_broken_keys_file_refuses_every_key_and_the_server_stays_up(stack):
    key = make_key(stack.keys, "--scope", "read")
    stack.keys.write_text("{not json")
    r = httpx.get(f"{stack.url}/v1/models", headers=bearer(key))
    assert r.status_code == 401 and "not valid" in r.json()["error"]
    assert httpx.get(f"{stack.url}/v1/models").status_code == 200
    made = subprocess.run(
        [sys.executable, "-m", "service.auth", "keys", "list", "--keys", str(stack.keys)],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 2 and made.stderr.count("\n") == 1 and made.stderr.startswith("error:")
