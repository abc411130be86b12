"""Model access on the real server (docs/access.md): a restricted model is refused on every route that names a model
(the routes are read from the app's routing table, so a new route cannot miss the check), hidden from every list,
and served to a token with its scope; bad tokens are 401s that never quote the token."""

from __future__ import annotations

import re
import shutil
import time

import httpx
import pytest
from fastapi.routing import iter_route_contexts

from service.app import create_app
from service.auth.tokens import Signer
from service.server.model_access import REFUSE, kind_of
from service.settings import Settings
from tests.servers import Server
from tests.service.engine.test_residency import copy_model

SECRET = "s" * 40
RESTRICTED = 'parameters { key: "access" value { string_value: "restricted" } }\n'
SCOPES = 'parameters { key: "access_scopes" value { string_value: "staff" } }\n'
# a value for each path parameter of a route, so that a request would reach its model
VALUES = {"version": "1", "region": "full", "size": "max", "rotation": "0", "quality_format": "default.png"}


def restrict(folder, extra: str = "") -> None:
    config = folder / "config.pbtxt"
    config.write_text(config.read_text() + RESTRICTED + extra)


@pytest.fixture(scope="module")
def repo(model_repo, tmp_path_factory):
    repo = tmp_path_factory.mktemp("access")
    copy_model(model_repo / "astronaut", repo / "open")
    copy_model(model_repo / "astronaut", repo / "secret")
    restrict(repo / "secret", SCOPES)
    shutil.copytree(model_repo / "digits", repo / "digits")
    restrict(repo / "digits")
    copy_model(model_repo / "astronaut", repo / "thumb")  # 32²: public up to 16 px on its long side
    restrict(repo / "thumb", 'parameters { key: "access_substitute" value { string_value: "16" } }\n')
    return repo


@pytest.fixture(scope="module")
def srv(repo):
    s = Server(repo, env={"INR_ACCESS_SECRET": SECRET, "INR_MODEL_CONTROL_MODE": "explicit", "INR_LOAD_MODEL": "*"})
    with s.running():
        yield s


def token(scopes=("staff",), key: str = SECRET, ttl: int = 60, kind: str = "access", models=None) -> str:
    return Signer(key.encode()).issue("tester", scopes, ttl, kind, models)[0]


def model_routes() -> list[tuple[str, str]]:
    """(method, path template) of every route of the app whose path names a model."""
    app = create_app(Settings(models="models"))
    out = []
    for ctx in iter_route_contexts(app.routes):
        template = getattr(ctx, "path_format", "") or ""
        if "{name}" in template:
            out += [(m, template) for m in sorted(ctx.methods or ()) if m != "HEAD"]
    assert len(out) >= 24  # v1, V2, the repository and IIIF
    return out


ROUTES = model_routes()


def path_of(template: str, name: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: name if m.group(1) == "name" else VALUES[m.group(1)], template)


def call(srv, method: str, path: str, headers=None) -> httpx.Response:
    return httpx.request(method, srv.url + path, headers=headers or {}, json={}, timeout=60)


def refused(r: httpx.Response, template: str, status: int) -> None:
    """A refusal as the route's kind answers it (service/server/model_access.py)."""
    if kind_of(template) == REFUSE or template.endswith("/{quality_format}"):
        assert r.status_code == status, (r.status_code, r.text)
        assert r.json()["error"] and (status != 401 or r.headers["www-authenticate"].startswith("Bearer"))
    elif template.endswith("/info.json"):  # the auth services, no pixels
        assert r.status_code == status and r.json()["service"][0]["type"] == "AuthProbeService2", r.text
    elif template.endswith("/manifest.json"):  # the same, on the painting's body
        body = r.json()["items"][0]["items"][0]["items"][0]["body"]
        assert r.status_code == status and body["service"][1]["type"] == "AuthProbeService2", r.text
    elif template.startswith("/iiif/auth/probe"):  # the probe answers 200, with the tiles' status
        assert r.status_code == 200 and r.json()["status"] == status, r.text
    else:  # the image's base URI: a redirect to its information, which answers as above
        assert r.status_code == 303 and r.headers["location"].endswith("/info.json"), r.text


@pytest.mark.parametrize("method,template", ROUTES, ids=[f"{m} {t}" for m, t in ROUTES])
def test_every_route_that_names_a_model_refuses_a_restricted_one(srv, method, template):
    refused(call(srv, method, path_of(template, "secret")), template, 401)
    other = {"Authorization": f"Bearer {token(('other',))}"}
    refused(call(srv, method, path_of(template, "secret"), other), template, 403)
    if "iiif/3" in template:  # an identifier with a version names the same model
        refused(call(srv, method, path_of(template, "secret@1")), template, 401)
    # with the scope, the route answers as it would for a public model (whatever that is for an empty body)
    allowed = call(srv, method, path_of(template, "secret"), {"Authorization": f"Bearer {token()}"})
    public = call(srv, method, path_of(template, "open"))
    assert allowed.status_code == public.status_code, (allowed.text, public.text)
    if template.endswith("/load"):  # its rows, shown to who may read it
        assert {r["name"] for r in allowed.json()} == {"secret"}, allowed.text
    if template.endswith("/unload"):  # both were unloaded: load them again for the routes after this one
        for name in ("open", "secret"):
            assert call(srv, "POST", f"/v2/repository/models/{name}/load", {"Authorization": f"Bearer {token()}"})


LISTS = [
    ("GET", "/v1/models"),
    ("POST", "/v2/repository/index"),
    ("GET", "/v2/models/stats"),
    ("GET", "/iiif/3/collection.json"),
]


@pytest.mark.parametrize("method,path", LISTS)
def test_lists_show_a_restricted_model_only_to_who_may_read_it(srv, method, path):
    anonymous = call(srv, method, path).text
    assert "open" in anonymous and "secret" not in anonymous and "digits" not in anonymous
    staff = call(srv, method, path, {"Authorization": f"Bearer {token()}"}).text
    assert "secret" in staff and "digits" not in staff  # digits needs the scope read
    reader = call(srv, method, path, {"Authorization": f"Bearer {token(('read',))}"}).text
    assert ("digits" in reader or "iiif" in path) and "secret" not in reader  # the collection: image models only


def test_an_unknown_model_lists_the_public_ones_only(srv):
    for headers in ({}, {"Authorization": f"Bearer {token()}"}):
        r = httpx.get(f"{srv.url}/v1/models/nothing-here", headers=headers)
        assert r.status_code == 404 and r.json()["error"] == "unknown model 'nothing-here'; models: open"


def test_scoped_tokens_read_what_they_name(srv):
    r = httpx.post(
        f"{srv.url}/v1/models/secret/query",
        json={"coords": [[0.5, 0.5]]},
        headers={"Authorization": f"Bearer {token()}"},
    )
    assert r.status_code == 200, r.text
    only_open = token(("staff",), models=["open"])
    r = httpx.post(
        f"{srv.url}/v1/models/secret/query",
        json={"coords": [[0.5, 0.5]]},
        headers={"Authorization": f"Bearer {only_open}"},
    )
    assert r.status_code == 403, r.text
    admin = token(("admin",))
    r = httpx.get(f"{srv.url}/v1/models/digits", headers={"Authorization": f"Bearer {admin}"})
    assert r.status_code == 200, r.text


BAD = {
    "expired": lambda: token(ttl=-5),
    "signed with another key": lambda: token(key="k" * 40),
    "a session token": lambda: token(kind="session"),
    "not a token": lambda: "abc.def.ghi",
    "tampered": lambda: token()[:-3] + "AAA",
}


@pytest.mark.parametrize("why", BAD)
def test_a_bad_token_is_a_401_that_does_not_quote_it(srv, why):
    bad = BAD[why]()
    r = httpx.get(f"{srv.url}/v1/models/open", headers={"Authorization": f"Bearer {bad}"})
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer"), r.text
    assert bad not in r.text and bad[:20] not in r.text and r.json()["error"]


def test_a_token_in_the_query_string_is_refused(srv):
    good = token()
    for key in ("access_token", "token"):
        r = httpx.get(f"{srv.url}/v1/models/secret", params={key: good})
        assert r.status_code == 401 and "Authorization header" in r.json()["error"] and good not in r.text


def test_other_schemes_and_path_tricks(srv):
    r = httpx.get(f"{srv.url}/v1/models/secret", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert r.status_code == 401 and "Bearer" in r.json()["error"]
    for path in ("/v1/models/%2e%2e", "/v1/models/..%2fsecret", "/v1/models/SECRET", "/iiif/3/secret%2Finfo.json"):
        r = httpx.get(srv.url + path)
        # refused, unknown, or (the escaped slash, decoded before routing) the information a 401 carries: no pixels
        assert r.status_code in (401, 404) and "json" in r.headers["content-type"], (path, r.text)
        assert list(r.json()) == ["error"] or r.json()["service"][0]["type"] == "AuthProbeService2"


def test_the_default_restricts_models_that_say_nothing(model_repo, tmp_path):
    copy_model(model_repo / "astronaut", tmp_path / "plain")
    s = Server(tmp_path, "--access-default", "restricted", "--grpc-port", "0", env={"INR_ACCESS_SECRET": SECRET})
    with s.running():
        assert httpx.get(f"{s.url}/v1/models/plain").status_code == 401
        assert "plain" not in httpx.get(f"{s.url}/v1/models").text
        r = httpx.get(f"{s.url}/v1/models/plain", headers={"Authorization": f"Bearer {token(('read',))}"})
        assert r.status_code == 200


def test_a_token_expires_while_in_use(srv):
    short = Signer(SECRET.encode()).issue("tester", ("staff",), 3)[0]  # whole seconds: valid 2 s at least
    headers = {"Authorization": f"Bearer {short}"}
    assert httpx.get(f"{srv.url}/v1/models/secret", headers=headers).status_code == 200
    time.sleep(3.2)
    r = httpx.get(f"{srv.url}/v1/models/secret", headers=headers)
    assert r.status_code == 401 and "expired" in r.json()["error"]


def test_a_substitute_is_public_up_to_its_size(srv):
    info = httpx.get(f"{srv.url}/iiif/3/thumb/info.json")
    assert info.status_code == 200, info.text
    doc = info.json()
    assert (doc["width"], doc["maxWidth"], doc["maxHeight"]) == (32, 16, 16) and doc["service"]
    assert all(max(s["width"], s["height"]) <= 16 for s in doc["sizes"]) and doc["tiles"][0]["scaleFactors"] == [2]
    assert "private" in info.headers["cache-control"]
    for path, status in (
        ("full/16,/0/default.png", 200),
        ("full/!16,16/0/default.png", 200),
        ("0,0,16,16/8,/0/default.png", 200),  # a quarter at half scale: the whole would be 16
        ("full/32,/0/default.png", 401),
        ("full/max/0/default.png", 200),  # max is the substitute's size (tests/security/test_small_holes.py)
        ("0,0,16,16/16,/0/default.png", 401),  # a quarter at full scale
    ):
        r = httpx.get(f"{srv.url}/iiif/3/thumb/{path}")
        assert r.status_code == status, (path, r.text)
        if status == 401:
            assert "16 pixels" in r.json()["error"]
    assert (
        httpx.get(
            f"{srv.url}/iiif/3/thumb/full/max/0/default.png", headers={"Authorization": f"Bearer {token(('read',))}"}
        ).status_code
        == 200
    )
    probe = httpx.get(f"{srv.url}/iiif/auth/probe/thumb").json()
    assert probe["status"] == 401 and probe["substitute"][0]["id"].endswith("/thumb/full/!16,16/0/default.jpg")
    # the substitute is for images only: the model's other routes stay closed
    assert httpx.post(f"{srv.url}/v1/models/thumb/query", json={"coords": [[0.5, 0.5]]}).status_code == 401
    assert httpx.get(f"{srv.url}/v1/models/thumb/render", params={"width": 16, "height": 16}).status_code == 401


def test_a_restricted_manifest_carries_the_auth_services_and_validates(srv):
    from iiif_prezi3 import Manifest

    r = httpx.get(f"{srv.url}/iiif/3/secret/manifest.json", headers={"Authorization": f"Bearer {token()}"})
    assert r.status_code == 200 and "private" in r.headers["cache-control"]
    Manifest.model_validate(r.json())  # the Presentation 3 schema, auth services and all
    (body,) = [a["body"] for page in r.json()["items"][0]["items"] for a in page["items"]]
    assert [s["type"] for s in body["service"]] == ["ImageService3", "AuthProbeService2"]
    assert "AuthProbeService2" not in httpx.get(f"{srv.url}/iiif/3/open/manifest.json").text


def test_a_token_sent_in_a_url_is_not_written_to_the_log(repo):
    from bench.serving import Server as Service

    s = Service(
        repo, "test server", {"INR_ACCESS_SECRET": SECRET}, args=("--grpc-port", "0"), log_level="info", capture=True
    )
    try:
        s.wait()
        good = token()
        r = httpx.get(f"{s.url}/v1/models/secret", params={"access_token": good, "n": "1"})
        assert r.status_code == 401 and good not in r.text
    finally:
        s.stop()
    said = s.proc.stdout.read()
    assert "access_token=REDACTED" in said and good not in said and good[:40] not in said, said[-2000:]
