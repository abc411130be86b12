"""The API docs pages, /docs (Swagger UI) and /redoc (ReDoc), in headless Chromium against the real server with
every request to another host refused: their assets come from the server itself (service/api/docs.py), and they
render every operation of the schema. The schema generates without warnings, each operation id its own."""

import time
import warnings
from collections import Counter

import pytest

from service.app import create_app
from service.settings import Settings
from tests.service.api.test_viewer import ARGS, CHROMIUM, TIMEOUT_MS, sync_api

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def operation_ids(schema: dict) -> list[str]:
    return [op["operationId"] for path in schema["paths"].values() for m, op in path.items() if m in METHODS]


def test_the_schema_generates_without_warnings_and_every_operation_id_is_unique(model_repo, tmp_path):
    app = create_app(Settings(models=str(model_repo), session_cache=str(tmp_path / "sessions")))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a duplicate operation id is a UserWarning
        schema = app.openapi()
    ids = operation_ids(schema)
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    heads = [op for path in schema["paths"].values() for m, op in path.items() if m == "head"]
    assert len(heads) == 6 and all(op["operationId"].endswith("_head") for op in heads)  # the IIIF routes'


@pytest.fixture(scope="module")
def offline(server):
    """A browser context that reaches the server and nothing else; the refused requests and the console's errors."""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        context = browser.new_context()
        refused, errors = [], []

        def route(r):
            if r.request.url.startswith(server.url + "/"):
                r.continue_()
            else:
                refused.append(r.request.url)
                r.abort()

        context.route("**/*", route)
        yield context, refused, errors
        browser.close()


@pytest.mark.parametrize(
    ("path", "selector"),
    [("/docs", ".opblock .opblock-summary-path"), ("/redoc", "[data-section-id*='/operation/']")],
)
def test_the_docs_pages_render_every_operation_with_no_network(offline, server, client, path, selector):
    context, refused, errors = offline
    ids = operation_ids(client.get("/openapi.json").json())
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    answer = page.goto(server.url + path)
    assert "default-src 'none'" in answer.headers["content-security-policy"]
    # polled from here: wait_for_function's polls evaluate a string in the page, which its policy refuses (no eval)
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while page.locator(selector).count() < len(ids):
        assert time.monotonic() < deadline, f"{path}: {page.locator(selector).count()} of {len(ids)} operations shown"
        page.wait_for_timeout(100)
    if path == "/docs":  # a block an operation
        assert page.locator(selector).count() == len(ids)
    else:  # a section an operation, under each of its tags
        found = page.eval_on_selector_all(selector, "all => all.map(e => e.dataset.sectionId.split('/operation/')[1])")
        assert set(found) == set(ids)
    assert "/v2/models/{name}/infer" in page.content()
    page.close()
    # ReDoc's "API docs by Redocly" logo is the one file its bundle asks of another host: the policy refuses it
    logo = [e for e in errors if "https://cdn.redoc.ly/redoc/logo-mini.svg" in e and "Content Security Policy" in e]
    assert refused == [] and [e for e in errors if e not in logo] == []
    errors.clear()
