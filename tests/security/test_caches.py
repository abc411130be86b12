"""Class 2, caches between (docs/security.md, "Caches"): every answer made from a restricted model (a render, a tile,
its information, its manifest, a fit preview of its new pixels, a list that depends on who asks) is `private`, so a
shared cache never stores it; and the nginx of docker-compose.yml, in front of the real service, never hands a
restricted render to the next anonymous caller, while it still caches public renders."""

from __future__ import annotations

import httpx
import pytest

from tests.deploy.nginxconf import LocalNginx
from tests.service.server.test_model_access import ROUTES, path_of

BODIES = {"render": {"width": 8}, "query": {"coords": [[0.5, 0.5]]}, "infer": {}}


def body_for(template: str) -> dict:
    return next((b for k, b in BODIES.items() if template.endswith(k)), {})


@pytest.mark.parametrize("method,template", ROUTES, ids=[f"{m} {t}" for m, t in ROUTES])
def test_no_answer_about_a_restricted_model_is_public(stack, method, template):
    """Every route that names a model, asked for `secret` by a caller who may read it: whatever it answers, a shared
    cache may not keep it (the routes are read from the app, so a new one is checked too)."""
    if template.endswith(("/load", "/unload")):
        pytest.skip("model control: refused in poll mode (400), nothing to cache")
    path = path_of(template, "secret").replace("full/max", "full/8,")
    r = httpx.request(method, stack.open_url + path, headers=stack.auth("staff"), json=body_for(template), timeout=60)
    assert "public" not in r.headers.get("cache-control", ""), (r.status_code, r.headers.get("cache-control"))


def test_version_pinned_renders_of_a_restricted_model_are_private_and_immutable(stack):
    for path in ("/v1/models/secret/versions/1/render?width=8", "/iiif/3/secret@1/full/8,/0/default.png"):
        r = httpx.get(stack.open_url + path, headers=stack.auth("staff"))
        assert r.status_code == 200 and r.headers["cache-control"] == "private, max-age=31536000, immutable"


def test_lists_that_depend_on_the_caller_are_private(stack):
    r = httpx.get(f"{stack.open_url}/iiif/3/collection.json", headers=stack.auth("staff"))
    assert "secret" in r.text and r.headers["cache-control"].startswith("private")
    anon = httpx.get(f"{stack.open_url}/iiif/3/collection.json")
    assert "secret" not in anon.text and anon.headers["cache-control"].startswith("public")
    assert httpx.get(f"{stack.open_url}/metrics").headers["cache-control"].startswith("private")


@pytest.fixture(scope="module")
def nginx(stack, tmp_path_factory):
    local = LocalNginx(tmp_path_factory.mktemp("nginx"), [stack.open_url.removeprefix("http://")])
    yield local
    local.stop()


def test_the_compose_nginx_never_hands_a_restricted_render_to_the_next_caller(stack, nginx):
    for path in ("/v1/models/secret/render?width=8", "/v1/models/secret/versions/1/render?width=8"):
        first = httpx.get(nginx.url + path, headers=stack.auth("staff"))
        assert first.status_code == 200 and first.headers["content-type"] == "image/png"
        again = httpx.get(nginx.url + path, headers=stack.auth("staff"))
        assert again.headers["x-cache-status"] != "HIT"
        anonymous = httpx.get(nginx.url + path)
        assert anonymous.status_code == 401 and anonymous.headers["x-cache-status"] != "HIT", anonymous.headers


def test_the_compose_nginx_still_caches_public_renders_but_none_asked_with_credentials(stack, nginx):
    """The control: the cache is on for anonymous public renders (so the test above could fail); an answer to a
    request with credentials is never stored (proxy_no_cache), whatever its headers say."""
    path = "/v1/models/open/render?width=9"
    httpx.get(nginx.url + path, headers=stack.auth("staff"))
    assert httpx.get(nginx.url + path).headers["x-cache-status"] == "MISS"
    assert httpx.get(nginx.url + path).headers["x-cache-status"] == "HIT"
