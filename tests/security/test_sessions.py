"""Class 5, revocation and logout reach sessions (docs/security.md, "Sessions"). The secure answer: a session cookie
and the access tokens made from it are checked against the key they came from, so a revoked key's cookie and tokens,
and a logged-out session (a copy of its cookie included), are refused from the next request, on every replica, and
mint no more access tokens. An access token made before a logout lives until its expiry (at most
INR_ACCESS_TOKEN_TTL_S, 300 s): IIIF Auth 2.0's tokens are stateless, as docs/access.md says."""

from __future__ import annotations

import re

import httpx

from service.auth.keys import KeyStore

TILE = "/iiif/3/secret/full/8,/0/default.png"


def login(stack, key: str) -> str:
    r = httpx.post(
        f"{stack.open_url}/iiif/auth/login", data={"key": key}, headers={"Origin": stack.open_url}, timeout=30
    )
    assert r.status_code == 200, r.text
    return r.cookies["inr_session"]


def access_token(stack, cookie: str) -> str | None:
    page = httpx.get(
        f"{stack.open_url}/iiif/auth/token",
        params={"messageId": "1", "origin": stack.open_url},
        cookies={"inr_session": cookie},
    ).text
    found = re.search(r'"accessToken": "([^"]+)"', page)
    return found.group(1) if found else None


def new_key(stack, name: str) -> tuple[str, str]:
    key, record = KeyStore(stack.keys_path).create(name, ["staff"])
    return key, record.id


def test_a_copied_cookie_is_refused_after_logout_and_mints_no_token(stack):
    key, _ = new_key(stack, "session-logout")
    cookie = login(stack, key)
    token = access_token(stack, cookie)
    assert token
    assert httpx.get(stack.open_url + TILE, cookies={"inr_session": cookie}).status_code == 200
    assert httpx.get(stack.open_url + TILE, headers={"Authorization": f"Bearer {token}"}).status_code == 200
    out = httpx.post(  # from the service's own page (test_logout.py: another site's is refused)
        f"{stack.open_url}/iiif/auth/logout", cookies={"inr_session": cookie}, headers={"Origin": stack.open_url}
    )
    assert out.status_code == 200
    for url in (stack.open_url, stack.key_url):  # every replica: the keys file is shared
        copied = httpx.get(url + TILE, cookies={"inr_session": cookie})
        assert copied.status_code == 401 and "logged out" in copied.json()["error"], copied.text
        assert httpx.get(url + TILE, headers={"Authorization": f"Bearer {token}"}).status_code == 200  # until expiry
    assert access_token(stack, cookie) is None
    again = login(stack, key)  # a new session works
    assert httpx.get(stack.open_url + TILE, cookies={"inr_session": again}).status_code == 200


def test_a_revoked_keys_session_is_refused_at_the_next_request(stack):
    key, kid = new_key(stack, "session-revoke")
    cookie = login(stack, key)
    token = access_token(stack, cookie)
    assert httpx.get(stack.open_url + TILE, cookies={"inr_session": cookie}).status_code == 200
    revoked = httpx.delete(f"{stack.open_url}/v1/keys/{kid}", headers=stack.auth("admin"))
    assert revoked.status_code == 200, revoked.text
    r = httpx.get(stack.open_url + TILE, cookies={"inr_session": cookie})
    assert r.status_code == 401 and "revoked" in r.json()["error"], r.text
    assert httpx.get(stack.open_url + TILE, headers={"Authorization": f"Bearer {token}"}).status_code == 401
    assert access_token(stack, cookie) is None
    assert key not in r.text and cookie not in r.text
