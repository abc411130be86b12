"""Class 9, a logout forced from another site (docs/security.md, "Sessions and keys"; issue 54). The secure answer:
opening the logout service's URL (`GET /iiif/auth/logout`, IIIF Auth 2.0's AuthLogoutService2, which a client opens
in a window) changes nothing: it is a page with a "Log out" button. The logout is a `POST` to the same URL, done
only for a request from this service's own pages or an origin of INR_ACCESS_ORIGINS: an allowed `Origin` header,
or without one a `Referer` of this service (and no `Sec-Fetch-Site: cross-site`). Another site's request, a
top-level navigation that carries the `SameSite=Lax` cookie or a form's POST with its own Origin, is refused (403
naming the check on the POST), ends no session and writes nothing to the shared keys file."""

from __future__ import annotations

import httpx

from service.auth.keys import KeyStore
from tests.security.test_sessions import TILE, login

EVIL = "http://evil.example"
# what a browser sends when a page of another site sends it to the logout URL (a link, window.location, a form)
NAVIGATION = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}


def session(stack, name: str) -> tuple[str, str]:
    """A new key with the scope staff, logged in: its id and the session cookie."""
    key, record = KeyStore(stack.keys_path).create(name, ["staff"])
    return record.id, login(stack, key)


def reads(stack, cookie: str) -> int:
    return httpx.get(stack.open_url + TILE, cookies={"inr_session": cookie}).status_code


def generation(stack, kid: str) -> int:
    return KeyStore(stack.keys_path).get(kid).generation


def forgets_cookie(r: httpx.Response) -> bool:
    return any(v.startswith("inr_session=") for v in r.headers.get_list("set-cookie"))


def test_another_sites_navigation_to_the_logout_url_ends_no_session(stack):
    kid, cookie = session(stack, "logout-navigation")
    before = stack.keys_path.read_bytes()
    for headers in (NAVIGATION, {**NAVIGATION, "Referer": f"{EVIL}/"}, {}):  # an <img>, a link: the same GET
        r = httpx.get(f"{stack.open_url}/iiif/auth/logout", cookies={"inr_session": cookie}, headers=headers)
        assert r.status_code == 200 and not forgets_cookie(r), r.headers
        assert '<form method="post">' in r.text and "Log out</button>" in r.text  # the way to log out, no more
        assert "logout-navigation" in r.text  # says who is logged in
    assert stack.keys_path.read_bytes() == before and generation(stack, kid) == 0
    assert reads(stack, cookie) == 200


def test_another_sites_post_is_refused_and_changes_nothing(stack):
    kid, cookie = session(stack, "logout-forged-post")
    before = stack.keys_path.read_bytes()
    url = f"{stack.open_url}/iiif/auth/logout"
    forged = (
        {"Origin": EVIL, "Sec-Fetch-Site": "cross-site"},  # a form on another site, posted by the browser
        {"Origin": "null"},  # a sandboxed frame, a redirect that hid its origin
        {"Referer": f"{EVIL}/page"},  # no Origin, a Referer of another site
        {"Sec-Fetch-Site": "cross-site", "Referer": f"{stack.open_url}/"},  # no Origin, and the browser says cross-site
        {},  # neither: nothing says it is ours
    )
    for headers in forged:
        r = httpx.post(url, cookies={"inr_session": cookie}, headers=headers)
        assert r.status_code == 403 and not forgets_cookie(r), (headers, r.text)
        assert "logout refused" in r.json()["error"] and ("Origin" in r.json()["error"])
    page = httpx.post(url, cookies={"inr_session": cookie}, headers={"Origin": EVIL, "Accept": "text/html"})
    assert page.status_code == 403 and "INR_ACCESS_ORIGINS" in page.text and not forgets_cookie(page)
    assert stack.keys_path.read_bytes() == before and generation(stack, kid) == 0
    assert reads(stack, cookie) == 200


def test_the_services_own_pages_log_out(stack):
    """The control: the logout page's form (Origin of the service, or a Referer of its pages without one) logs out."""
    for name, headers in (
        ("logout-own-origin", {"Origin": stack.open_url, "Accept": "text/html"}),
        ("logout-own-referer", {"Referer": f"{stack.open_url}/iiif/auth/logout"}),
    ):
        kid, cookie = session(stack, name)
        r = httpx.post(f"{stack.open_url}/iiif/auth/logout", cookies={"inr_session": cookie}, headers=headers)
        assert r.status_code == 200 and forgets_cookie(r), r.text
        assert generation(stack, kid) == 1
        assert reads(stack, cookie) == 401  # the copy the test kept is refused too


def test_whoami_names_only_the_caller_and_never_to_another_origin(stack):
    kid, cookie = session(stack, "whoami-me")
    url = f"{stack.open_url}/iiif/auth/whoami"
    me = httpx.get(url, cookies={"inr_session": cookie})
    assert me.json() == {"sub": f"key:{kid}", "name": "whoami-me", "scopes": ["staff"]}
    assert "access-control-allow-origin" not in me.headers and "no-store" in me.headers["cache-control"]
    assert httpx.get(url).json() == {"sub": None, "name": None, "scopes": []}
    refused = httpx.get(url, cookies={"inr_session": cookie}, headers={"Origin": EVIL})
    assert refused.status_code == 403 and kid not in refused.text
