"""The viewer (`/`) and deep zoom (`/iiif.html`) with API keys, in headless Chromium (issue 54): a key with the
documented quota `rps=5` (docs/access.md, "Keys") logs in through the viewer's own "Log in", and the pages honour
the quota's 429s (Retry-After: they wait and ask again) for model lists, details, renders, info.json and tiles, so
the model renders and zooms with no "render failed"; the page shows "Log in" or "Log out", never both, and who is
logged in; a link to a restricted model says so (with "Log in") rather than showing another model, and a link to
no model says that."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

# Chromium, its flags and the module-scoped browser fixture are the viewer tests' (skips without Chromium).
from test_viewer import TIMEOUT_MS, browser  # noqa: F401

from service.auth.keys import KeyStore
from tests.servers import Server
from tests.service.server.test_model_access import SECRET, repo  # noqa: F401 (fixture)

VIEW = "document.querySelector('#view').dataset"


@pytest.fixture(scope="module")
def service(repo, tmp_path_factory):  # noqa: F811
    keys = tmp_path_factory.mktemp("keys") / "keys.json"
    srv = Server(repo, env={"INR_ACCESS_SECRET": SECRET, "INR_ACCESS_KEYS": str(keys)})
    with srv.running():
        made = subprocess.run(  # the documented command, with the documented quota
            [sys.executable, "-m", "service.auth", "keys", "create", "--keys", str(keys), "--name", "curator"]
            + ["--scope", "staff", "--scope", "read", "--quota", "rps=5"],
            capture_output=True,
            text=True,
            check=True,
        )
        srv.key, srv.keys_path = json.loads(made.stdout)["key"], keys
        yield srv


class Visit:
    """A page in a fresh browser context, with every answer's status and the page's errors kept."""

    def __init__(self, browser, url):  # noqa: F811
        self.context = browser.new_context(viewport={"width": 820, "height": 560})
        self.page = self.context.new_page()
        self.page.set_default_timeout(TIMEOUT_MS)
        self.answers: list[tuple[str, int]] = []
        self.errors: list[str] = []
        self.page.on("response", lambda r: self.answers.append((r.url, r.status)))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        if url:
            self.page.goto(url)

    def refused(self) -> list[str]:
        return [u for u, s in self.answers if s == 429]

    def message(self) -> str:
        return self.page.inner_text("#view-message")

    def buttons(self) -> tuple[bool, bool]:
        return self.page.is_visible("#login"), self.page.is_visible("#logout")

    def sharp(self, n: int) -> None:
        self.page.wait_for_function(f"Number({VIEW}.renders || 0) >= {n} && {VIEW}.state === 'sharp'")
        assert "render failed" not in self.message(), self.message()

    def log_in(self, key: str) -> None:
        """The viewer's own "Log in": the access service's window, the key, its submit (the window closes)."""
        with self.context.expect_page() as popup:
            self.page.click("#login")
        window = popup.value
        window.wait_for_load_state()
        window.fill("input[name=key]", key)
        window.click("button[type=submit]")

    def close(self) -> None:
        self.context.close()


def spend_the_quota(service) -> None:
    """The key used elsewhere at the same time: its bucket emptied, so the page's next requests get 429s."""
    auth = {"Authorization": f"Bearer {service.key}"}
    answers = [httpx.get(f"{service.url}/v1/models", headers=auth).status_code for _ in range(12)]
    assert 429 in answers, answers


@pytest.mark.serial
def test_a_restricted_link_then_log_in_then_render_and_zoom_within_rps_5(browser, service):  # noqa: F811
    v = Visit(browser, f"{service.url}/?model=secret")
    try:
        v.page.wait_for_function("document.querySelector('#view-message').textContent.includes('restricted')")
        assert v.message() == "secret is restricted: log in to see it"
        assert v.buttons() == (True, False) and not v.page.is_visible("#who")
        # no other model in its place: nothing picked, nothing rendered
        assert v.page.evaluate("document.querySelector('#model').value") == ""
        assert v.page.evaluate(f"{VIEW}.state") is None and not any("/render" in u for u, _ in v.answers)

        v.log_in(service.key)
        v.page.wait_for_function("document.querySelector('#who').textContent === 'logged in as curator'")
        v.sharp(1)
        assert v.buttons() == (False, True)
        assert v.page.evaluate("document.querySelector('#model').value") == "secret"
        for n in (2, 3, 4):  # zoom a few times, the key's quota spent elsewhere before each
            spend_the_quota(service)
            v.page.click("#zoom-in")
            v.sharp(n)
        assert v.refused(), "the page never met the quota: the test proves nothing"
        assert v.message() == ""

        v.page.click("#logout")
        v.page.wait_for_function("document.querySelector('#view-message').textContent.includes('restricted')")
        assert v.message() == "secret is restricted: log in to see it" and v.buttons() == (True, False)
        assert not v.page.is_visible("#who")
        assert v.errors == []
    finally:
        v.close()


def test_a_link_to_no_model_says_so_and_shows_no_other(browser, service):  # noqa: F811
    v = Visit(browser, f"{service.url}/?model=no-such-model")
    try:
        v.page.wait_for_function("document.querySelector('#view-message').textContent !== ''")
        assert v.message() == "no such model: no-such-model"
        assert v.page.evaluate("document.querySelector('#model').value") == ""
        assert v.page.evaluate(f"{VIEW}.state") is None and v.buttons() == (True, False)
        v.page.select_option("#model", "open")  # the picker still works
        v.sharp(1)
        assert v.errors == []
    finally:
        v.close()


@pytest.mark.serial
def test_deep_zoom_tiles_wait_out_the_quota(browser, service):  # noqa: F811
    v = Visit(browser, f"{service.url}/iiif.html?id=secret")
    osd = "document.querySelector('#osd').dataset"
    try:
        v.page.wait_for_function(f"{osd}.access === 'restricted'")
        v.log_in(service.key)  # deep zoom's own "Log in"
        v.page.wait_for_function(f"{osd}.access === 'full'")
        v.page.wait_for_function("window.iiifViewer && iiifViewer.world.getItemCount() === 1")
        v.page.wait_for_function("iiifViewer.world.getItemAt(0).getFullyLoaded()")
        # the test model (32 px) is whole at the home zoom: the other model, its info.json and tiles, with the key's
        # quota spent elsewhere just before
        spend_the_quota(service)
        v.page.select_option("#model", "open")
        v.page.wait_for_function(f"{osd}.access === 'public' && {osd}.state === 'open'")
        v.page.wait_for_function(
            "iiifViewer.world.getItemCount() === 1 && iiifViewer.world.getItemAt(0).getFullyLoaded()"
        )
        assert any("/iiif/3/open/" in u for u in v.refused()), v.refused()
        assert "failed" not in v.page.inner_text("#message"), v.page.inner_text("#message")
        assert v.errors == []
    finally:
        v.close()


def test_a_page_load_while_logged_in_never_spends_the_quota_on_files(browser, service):  # noqa: F811
    """A browser asks for a page's dozen files at once; a file answered 429 would be a dead page (nothing asks for a
    module script again), so the key's bucket counts its API requests only: docs/access.md's example key of `rps=5`
    loads the page, twice in a row."""
    key, _ = KeyStore(service.keys_path).create("reader", ["staff"], quotas={"rps": 5})
    v = Visit(browser, None)
    try:
        login = v.context.request.post(
            f"{service.url}/iiif/auth/login", form={"key": key}, headers={"Origin": service.url}
        )
        assert login.ok and any(c["name"] == "inr_session" for c in v.context.cookies())
        v.page.goto(f"{service.url}/?model=secret")
        v.sharp(1)
        v.page.reload()
        v.sharp(1)
        assert v.page.inner_text("#who") == "logged in as reader" and v.buttons() == (False, True)
        files = [(u, s) for u, s in v.answers if "/v1/" not in u and "/iiif/" not in u and u.startswith("http")]
        assert len(files) >= 10 and all(s == 200 for _, s in files), files
        assert v.errors == []
    finally:
        v.close()
