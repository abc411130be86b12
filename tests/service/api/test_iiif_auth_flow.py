"""IIIF Authorization Flow 2.0 in headless Chromium (Debian's /usr/bin/chromium via Playwright), as a viewer runs it,
from a page on another origin (tests/service/api/pages/auth_client.html, served by a small HTTP server here):
probe (401) → open the access service and log in with an API key → a token from the token service's iframe →
probe (200) → the tiles load → log out in the logout service's window (the tiles are refused again; a token issued
before lives until it expires). Then the attacks on the pages: an origin not allowed, a messageId that carries script,
a login with no Origin, a logout forced by another site's page (tests/security/test_logout.py: the same over HTTP)."""

from __future__ import annotations

import functools
import http.server
import json
import threading

import httpx
import pytest

# Chromium, its flags and the module-scoped browser fixture are the viewer tests' (skips without Chromium).
from test_viewer import browser  # noqa: F401

from bench.common import free_port
from tests.servers import Server
from tests.service.server.test_model_access import SECRET, repo  # noqa: F401 (fixture)

PAGES = __import__("pathlib").Path(__file__).parent / "pages"
TILE = "/iiif/3/secret/full/16,/0/default.png"  # the test model is 32²


def static_origin():
    """The pages of tests/service/api/pages from a plain static server on a port of its own: its origin."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(PAGES))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    handler.log_message = lambda *a: None
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def client_origin():
    """The client page's own origin, among INR_ACCESS_ORIGINS."""
    yield from static_origin()


@pytest.fixture(scope="module")
def other_origin():
    """A page of another site, not among INR_ACCESS_ORIGINS (any page: the attack is its script)."""
    yield from static_origin()


@pytest.fixture(scope="module")
def service(repo, client_origin, tmp_path_factory):  # noqa: F811
    keys = tmp_path_factory.mktemp("keys") / "keys.json"
    env = {"INR_ACCESS_SECRET": SECRET, "INR_ACCESS_ORIGINS": client_origin, "INR_ACCESS_KEYS": str(keys)}
    srv = Server(repo, "--grpc-port", "0", env=env)
    with srv.running():
        made = __import__("subprocess").run(
            [
                __import__("sys").executable,
                "-m",
                "service.auth",
                "keys",
                "create",
                "--keys",
                str(keys),
                "--name",
                "curator",
                "--scope",
                "staff",
                "--scope",
                "read",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        srv.key = json.loads(made.stdout)["key"]
        assert srv.key not in made.stderr  # the audit line names the id only
        yield srv


@pytest.fixture
def page(browser, service, client_origin):  # noqa: F811
    context = browser.new_context()
    p = context.new_page()
    p.goto(f"{client_origin}/auth_client.html?info={service.url}/iiif/3/secret/info.json")
    yield p
    context.close()


def open_access(page):
    """What the user's click on "Log in" does: the access service in a new window (the promise resolves when it
    closes); the window."""
    with page.context.expect_page() as popup:
        page.evaluate("() => { window.accessClosed = flow.openAccess(); }")
    login = popup.value
    login.wait_for_load_state()
    return login


def click_log_in(page, key: str) -> None:
    """The page's own "Log in" button, then the key in the access window it opens."""
    with page.context.expect_page() as popup:
        page.click("#login")
    login = popup.value
    login.wait_for_load_state()
    login.fill("input[name=key]", key)
    login.click("button[type=submit]")


def log_in(page, key: str) -> None:
    login = open_access(page)
    login.fill("input[name=key]", key)
    login.click("button[type=submit]")
    assert page.evaluate("window.accessClosed") is True  # the page closed itself


def open_logout(page):
    """What the user's click on "Log out" does: the logout service in a new window; the window."""
    with page.context.expect_page() as popup:
        page.evaluate("() => { window.logoutClosed = flow.logout(); }")
    window = popup.value
    window.wait_for_load_state()
    return window


def test_the_whole_flow(page, service, client_origin):
    described = page.evaluate("flow.describe()")
    assert described["status"] == 401 and described["services"]["profile"] == "active"
    probe = page.evaluate("flow.probe(null)")
    assert probe["type"] == "AuthProbeResult2" and probe["status"] == 401 and probe["heading"]["en"]
    assert page.evaluate(f"flow.tile({json.dumps(service.url + TILE)})") == {"loaded": False}
    no_session = page.evaluate("flow.token('m0')")
    assert no_session["data"]["type"] == "AuthAccessTokenError2" and no_session["data"]["profile"] == "missingAspect"

    log_in(page, service.key)
    got = page.evaluate("flow.token('m1')")
    assert got["origin"] == service.url and got["data"]["type"] == "AuthAccessToken2"
    assert got["data"]["messageId"] == "m1" and 0 < got["data"]["expiresIn"] <= 300
    token = got["data"]["accessToken"]
    assert page.evaluate(f"flow.probe({json.dumps(token)})")["status"] == 200
    assert page.evaluate(f"flow.tile({json.dumps(service.url + TILE)})") == {"loaded": True, "width": 16}

    window = open_logout(page)  # opening the logout service changes nothing: a page with a button
    assert "logged in as curator" in window.inner_text("body")
    assert page.evaluate(f"flow.tile({json.dumps(service.url + TILE)})") == {"loaded": True, "width": 16}
    window.click("button[type=submit]")
    assert page.evaluate("window.logoutClosed") is True  # logged out, the window closed itself
    assert page.evaluate(f"flow.tile({json.dumps(service.url + TILE)})") == {"loaded": False}
    after = page.evaluate("flow.token('m2')")
    assert after["data"]["type"] == "AuthAccessTokenError2" and after["data"]["profile"] == "missingAspect"
    # a token issued before the logout lives until its expiry (stateless, docs/access.md)
    assert page.evaluate(f"flow.probe({json.dumps(token)})")["status"] == 200


def test_a_wrong_key_does_not_log_in(page, service):
    page.evaluate("flow.describe()")
    login = open_access(page)
    login.fill("input[name=key]", service.key[:-4] + "AAAA")
    login.click("button[type=submit]")
    login.wait_for_load_state()
    assert "not valid" in login.content() and service.key[-20:] not in login.content()
    login.close()
    assert page.evaluate("flow.token('w')")["data"]["profile"] == "missingAspect"


def test_a_message_id_that_carries_script_is_posted_back_as_text(page, service):
    page.evaluate("flow.describe()")
    page.evaluate("window.pwned = false")
    evil = "</script><script>parent.pwned = true</script><!--"
    got = page.evaluate(f"flow.token({json.dumps(evil)})")
    assert got["data"]["messageId"] == evil and page.evaluate("window.pwned") is False
    raw = httpx.get(f"{service.url}/iiif/auth/token", params={"messageId": evil, "origin": service.url}).text
    assert "</script><script>parent" not in raw


def test_an_origin_not_allowed_gets_no_token(page, service):
    page.evaluate("flow.describe()")
    log_in(page, service.key)
    # the client asks for its token to be posted to another origin: the page refuses it, and the browser would
    # not deliver a message for another origin anyway
    got = page.evaluate("flow.token('x', 'http://evil.example')")
    assert got.get("timeout") and not any("accessToken" in json.dumps(m["data"]) for m in got["seen"])
    raw = httpx.get(f"{service.url}/iiif/auth/token", params={"messageId": "x", "origin": "http://evil.example"}).text
    assert "invalidOrigin" in raw and "accessToken" not in raw
    r = httpx.get(f"{service.url}/iiif/auth/token", params={"messageId": "x", "origin": "http://evil.example"})
    assert "frame-ancestors 'self' http://127.0.0.1" in r.headers["content-security-policy"]


def test_a_login_without_an_allowed_origin_is_refused(service):
    for headers in ({}, {"Origin": "http://evil.example"}):
        r = httpx.post(f"{service.url}/iiif/auth/login", data={"key": service.key}, headers=headers)
        assert "Refused" in r.text and "set-cookie" not in r.headers
    r = httpx.post(f"{service.url}/iiif/auth/login", data={"key": service.key}, headers={"Origin": service.url})
    assert "inr_session=" in r.headers["set-cookie"] and "HttpOnly" in r.headers["set-cookie"]
    assert "SameSite=lax" in r.headers["set-cookie"]


def test_the_external_pattern_trusts_the_proxys_headers(repo):  # noqa: F811
    env = {
        "INR_ACCESS_SECRET": SECRET,
        "INR_ACCESS_TRUSTED_HEADER": "X-Remote-User",
        "INR_ACCESS_TRUSTED_SCOPES_HEADER": "X-Remote-Scopes",
        "INR_FORWARDED_ALLOW_IPS": "127.0.0.1",  # the test is the proxy
    }
    srv = Server(repo, "--grpc-port", "0", env=env)
    with srv.running():
        info = httpx.get(f"{srv.url}/iiif/3/secret/info.json")
        profiles = [s["profile"] for s in info.json()["service"][0]["service"]]
        assert info.status_code == 401 and profiles == ["external", "active"]
        proxy = {"X-Remote-User": "ada", "X-Remote-Scopes": "staff other"}
        assert httpx.get(srv.url + TILE, headers=proxy).status_code == 200
        assert httpx.get(srv.url + TILE, headers={"X-Remote-User": "ada"}).status_code == 403  # no scope
        assert httpx.get(srv.url + TILE).status_code == 401
        page = httpx.get(f"{srv.url}/iiif/auth/token", params={"messageId": "e", "origin": srv.url}, headers=proxy)
        assert '"AuthAccessToken2"' in page.text and '"expiresIn": 300' in page.text
        token = page.text.split('"accessToken": "')[1].split('"')[0]
        probe = httpx.get(f"{srv.url}/iiif/auth/probe/secret", headers={"Authorization": f"Bearer {token}"})
        assert probe.json()["status"] == 200


def test_deep_zoom_shows_the_substitute_then_the_whole_image_after_login(browser, service):  # noqa: F811
    context = browser.new_context()
    page = context.new_page()
    osd = "#osd"
    try:
        page.goto(f"{service.url}/iiif.html?id=thumb")
        page.wait_for_function(f"document.querySelector('{osd}').dataset.access === 'substitute'")
        page.wait_for_function("window.iiifViewer && iiifViewer.world.getItemCount() === 1")
        assert page.evaluate("iiifViewer.world.getItemAt(0).getContentSize().x") == 16  # the public version
        assert page.is_visible("#login") and not page.is_visible("#logout")
        click_log_in(page, service.key)
        page.wait_for_function(f"document.querySelector('{osd}').dataset.access === 'full'")
        page.wait_for_function(
            "window.iiifViewer && iiifViewer.world.getItemCount() === 1"
            " && iiifViewer.world.getItemAt(0).getFullyLoaded()"
        )
        assert page.evaluate("iiifViewer.world.getItemAt(0).getContentSize().x") == 32  # the whole image
        assert page.is_visible("#logout") and not page.is_visible("#login")
        page.click("#logout")
        page.wait_for_function(f"document.querySelector('{osd}').dataset.access === 'substitute'")
        page.goto(f"{service.url}/iiif.html?id=secret")  # no substitute: nothing shown but the way in
        page.wait_for_function(f"document.querySelector('{osd}').dataset.access === 'restricted'")
        assert page.is_visible("#login") and "restricted" in page.inner_text("#message")
    finally:
        context.close()


def test_the_viewer_lists_the_restricted_models_once_logged_in(browser, service):  # noqa: F811
    context = browser.new_context()
    page = context.new_page()
    options = "Array.from(document.querySelectorAll('#model option')).map((o) => o.value)"
    try:
        page.goto(f"{service.url}/")
        page.wait_for_function("document.querySelectorAll('#model option').length > 0")
        assert "secret" not in page.evaluate(options) and "open" in page.evaluate(options)
        assert page.is_visible("#login")
        click_log_in(page, service.key)
        page.wait_for_function(f"{options}.includes('secret')")
        assert "thumb" in page.evaluate(options)
        page.click("#logout")
        page.wait_for_function(f"!{options}.includes('secret')")
    finally:
        context.close()


def test_another_site_cannot_log_the_visitor_out(page, service, other_origin):
    """A page of a site not among INR_ACCESS_ORIGINS sends the logged-in browser to the logout service: a top-level
    navigation (the SameSite=Lax cookie goes with it) shows the page with the button, and a form it posts is refused
    (403); the session lives on."""
    page.evaluate("flow.describe()")
    log_in(page, service.key)
    tile = f"flow.tile({json.dumps(service.url + TILE)})"
    assert page.evaluate(tile) == {"loaded": True, "width": 16}
    evil = page.context.new_page()
    evil.goto(f"{other_origin}/auth_client.html")
    logout = f"{service.url}/iiif/auth/logout"
    with evil.expect_navigation():
        evil.evaluate(f"location.href = {json.dumps(logout)}")
    assert "Log out" in evil.inner_text("body")
    assert page.evaluate(tile) == {"loaded": True, "width": 16}
    evil.goto(f"{other_origin}/auth_client.html")
    with evil.expect_navigation():
        evil.evaluate(
            """(url) => { const f = document.createElement("form"); f.method = "post"; f.action = url;
                          document.body.appendChild(f); f.submit(); }""",
            logout,
        )
    assert "logout refused" in evil.inner_text("body") and "INR_ACCESS_ORIGINS" in evil.inner_text("body")
    assert page.evaluate(tile) == {"loaded": True, "width": 16}
    assert page.evaluate("flow.token('still')")["data"]["type"] == "AuthAccessToken2"
