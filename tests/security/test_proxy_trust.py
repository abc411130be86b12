"""Attacks on what the service believes about who is calling and how: the trusted proxy's user and scopes headers,
the forwarded scheme and host, a browser's stale session cookie, and the per-key request quota over gRPC.

Each test states the secure answer; each failed on the main of issue 54. The servers are the real service on free
ports over the suite's repository (tests/security/stack.py), started here with the settings each attack needs.
"""

from __future__ import annotations

import subprocess
import sys

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tg
from tritonclient.utils import InferenceServerException

from service.auth.keys import KeyStore
from tests.security.stack import SECRET
from tests.servers import Server

TILE = "/iiif/3/{}/full/max/0/default.png"
NOT_HERE = "192.0.2.10"  # TEST-NET-1 (RFC 5737): named as the proxy, never sent anything


@pytest.fixture(scope="module")
def keys(stack, tmp_path_factory):
    """A keys file of this module's own: an admin, a `staff` reader, and a key with `rps=1`."""
    path = tmp_path_factory.mktemp("proxy-keys") / "keys.json"
    ks = KeyStore(path)
    made = {
        role: ks.create(role, scopes, None, quotas)[0]
        for role, scopes, quotas in (
            ("admin", ["admin"], {}),
            ("staff", ["staff"], {}),
            ("slow", ["read"], {"rps": 1.0}),
        )
    }
    return path, made


def serve(stack, keys, **env) -> Server:
    return Server(stack.repo, env={"INR_ACCESS_SECRET": SECRET, "INR_ACCESS_KEYS": str(keys[0]), **env})


def test_a_proxy_user_without_a_scopes_header_has_no_scopes(stack, keys):
    """Secure answer: with INR_ACCESS_TRUSTED_HEADER and no scopes header configured, no header gives scopes: the
    user the proxy names reads public models only and cannot mint keys (main read a built-in `x-inr-no-scopes`
    that any client could send: `admin` read restricted models and POST /v1/keys made an unlimited admin key)."""
    srv = serve(stack, keys, INR_ACCESS_TRUSTED_HEADER="X-Remote-User", INR_FORWARDED_ALLOW_IPS="127.0.0.1")
    with srv.running():
        claim = {"X-Remote-User": "alice", "X-Inr-No-Scopes": "admin"}
        assert httpx.get(srv.url + TILE.format("secret"), headers=claim).status_code == 403
        r = httpx.post(f"{srv.url}/v1/keys", json={"name": "mine", "scopes": ["admin"]}, headers=claim)
        assert r.status_code == 403, r.text
        assert httpx.get(srv.url + TILE.format("open"), headers=claim).status_code == 200


def test_user_and_scopes_headers_hold_only_from_the_proxys_addresses(stack, keys):
    """Secure answer: the user and scopes headers are believed only from INR_FORWARDED_ALLOW_IPS; from any other
    peer they are removed before anything reads them, so the request is anonymous (main believed them from
    anyone who could reach the port)."""
    env = {"INR_ACCESS_TRUSTED_HEADER": "X-Remote-User", "INR_ACCESS_TRUSTED_SCOPES_HEADER": "X-Remote-Scopes"}
    claim = {"X-Remote-User": "mallory", "X-Remote-Scopes": "admin staff"}
    with serve(stack, keys, **env, INR_FORWARDED_ALLOW_IPS=NOT_HERE).running() as srv:
        assert httpx.get(srv.url + TILE.format("secret"), headers=claim).status_code == 401
        r = httpx.post(f"{srv.url}/v1/keys", json={"name": "mine", "scopes": ["admin"]}, headers=claim)
        assert r.status_code == 401, r.text
    with serve(stack, keys, **env, INR_FORWARDED_ALLOW_IPS="127.0.0.0/8").running() as srv:  # the proxy is here
        assert httpx.get(srv.url + TILE.format("secret"), headers=claim).status_code == 200


def test_a_trusted_header_without_the_proxys_addresses_refuses_to_start(stack):
    """Secure answer: INR_ACCESS_TRUSTED_HEADER without INR_FORWARDED_ALLOW_IPS is one line and exit 2 (a header
    believed from anyone is a header anyone can send)."""
    env = {"INR_ACCESS_TRUSTED_HEADER": "X-Remote-User", "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [sys.executable, "-m", "service", "--models", str(stack.repo), "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert "INR_FORWARDED_ALLOW_IPS" in lines[0]


def test_forwarded_headers_hold_only_from_the_proxys_addresses(stack, keys):
    """Secure answer: X-Forwarded-Proto/-Host/-Prefix shape `info.json` ids and the cookie's `Secure` only from
    INR_FORWARDED_ALLOW_IPS (main believed them from any client, so its ids said https while its cookie did not)."""
    forged = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example", "X-Forwarded-Prefix": "/x"}
    with serve(stack, keys, INR_FORWARDED_ALLOW_IPS=NOT_HERE).running() as srv:
        assert httpx.get(f"{srv.url}/iiif/3/open/info.json", headers=forged).json()["id"] == (f"{srv.url}/iiif/3/open")
    with serve(stack, keys, INR_FORWARDED_ALLOW_IPS="127.0.0.1").running() as srv:
        behind = {
            "X-Forwarded-Proto": "https",
            "X-Forwarded-Host": "img.example.org",
            "Origin": "https://img.example.org",
        }
        assert httpx.get(f"{srv.url}/iiif/3/open/info.json", headers=behind).json()["id"] == (
            "https://img.example.org/iiif/3/open"
        )
        login = httpx.post(f"{srv.url}/iiif/auth/login", data={"key": keys[1]["staff"]}, headers=behind)
        cookie = login.headers.get("set-cookie", "")
        assert "inr_session=" in cookie and "Secure" in cookie, (login.status_code, login.text[:300])


def test_the_compose_nginx_tells_the_scheme_and_the_real_client():
    """Secure answer: the compose nginx sets X-Forwarded-Proto and replaces X-Forwarded-For with the peer it saw,
    and the replicas believe only the compose network's private addresses (a client's own X-Forwarded-For is
    never the address its render share is counted by)."""
    from tests.layout import ROOT

    for conf in ("deploy/nginx/nginx.conf.template", "deploy/k8s/nginx/nginx.conf.template"):
        text = (ROOT / conf).read_text()
        assert "proxy_set_header X-Forwarded-Proto" in text, conf
        assert "proxy_set_header X-Forwarded-For $remote_addr;" in text, conf
        assert "$proxy_add_x_forwarded_for" not in text, conf
    assert "INR_FORWARDED_ALLOW_IPS" in (ROOT / "docker-compose.yml").read_text()


def test_a_stale_cookie_is_anonymous_and_cleared(stack, keys):
    """Secure answer: a session cookie that no longer holds (its key revoked, logged out, expired) is answered as
    anonymous and cleared with Set-Cookie: public tiles, the viewer and health answer 200 (main: 401 on every
    route until the browser dropped the cookie). A bad bearer token sent on purpose stays a 401; health routes
    never need credentials."""
    path, made = keys
    srv = serve(stack, keys)
    with srv.running():
        ks = KeyStore(path)
        key, record = ks.create("gone", ["staff"], None)
        login = httpx.post(f"{srv.url}/iiif/auth/login", data={"key": key}, headers={"Origin": srv.url})
        session = login.cookies["inr_session"]
        assert httpx.get(srv.url + TILE.format("secret"), cookies={"inr_session": session}).status_code == 200
        ks.revoke(record.id)
        for path_ in (TILE.format("open"), "/", "/health/live", "/v1/models"):
            r = httpx.get(srv.url + path_, cookies={"inr_session": session})
            assert r.status_code == 200, (path_, r.status_code, r.text[:200])
        r = httpx.get(srv.url + TILE.format("open"), cookies={"inr_session": session})
        assert r.headers["set-cookie"].startswith("inr_session=;") and "Max-Age=0" in r.headers["set-cookie"]
        assert httpx.get(srv.url + TILE.format("secret"), cookies={"inr_session": session}).status_code == 401
        bad = {"Authorization": "Bearer not-a-token"}
        assert httpx.get(srv.url + TILE.format("open"), headers=bad).status_code == 401
        assert httpx.get(f"{srv.url}/health/live", headers=bad).status_code == 200
        assert httpx.get(f"{srv.url}/health/ready", headers=bad).status_code == 200


def test_the_rps_quota_counts_grpc_calls(stack, keys):
    """Secure answer: a key's requests-a-second quota counts every protocol in one bucket: gRPC calls and each
    message of a stream are RESOURCE_EXHAUSTED past it, with `retry-after` (main: 50 gRPC ModelInfer calls with an
    `rps=1` key all passed while HTTP answered 429 on the second)."""
    slow = {"authorization": f"Bearer {keys[1]['slow']}"}
    with serve(stack, keys).running() as srv:
        c = tg.InferenceServerClient(srv.grpc_url)
        x = tg.InferInput("coords", [1, 2], "FP32")
        x.set_data_from_numpy(np.array([[0.5, 0.5]], np.float32))
        codes = []
        for _ in range(5):
            try:
                c.infer("open", [x], headers=slow)
                codes.append("OK")
            except InferenceServerException as e:
                codes.append(e.status())
        assert codes[0] == "OK" and codes.count("StatusCode.RESOURCE_EXHAUSTED") >= 3, codes
        assert httpx.get(f"{srv.url}/v1/models", headers={"Authorization": slow["authorization"]}).status_code == 429
        c.close()


def test_the_viewers_own_files_do_not_spend_the_rps_quota(stack, keys):
    """Secure answer, and the viewer's: a key's requests-a-second quota counts its API requests, not the service's
    own page and scripts (a reload of /iiif.html with an `rps=5` key got a 429 on a module script, which the browser
    never fetches again: a dead page); the API calls after them still have the whole bucket."""
    slow = {"Authorization": f"Bearer {keys[1]['slow']}"}
    with serve(stack, keys).running() as srv:
        for path in ("/", "/index.html", "/iiif.html", "/api.js", "/style.css") * 2:
            assert httpx.get(srv.url + path, headers=slow).status_code == 200, path
        assert httpx.get(f"{srv.url}/v1/models", headers=slow).status_code == 200
        assert httpx.get(f"{srv.url}/v1/models", headers=slow).status_code == 429
        assert httpx.get(f"{srv.url}/iiif/3/open/info.json", headers=slow).status_code == 429  # the API counts
