"""The inference routes reached without FastAPI's routing (service/server/hotpath.py): which requests
take that path, and that they get the same answers (bodies, codes, metrics labels) as on FastAPI's path."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings

IMAGE = [[0.0] * 28 for _ in range(28)]
V2 = {"inputs": [{"name": "coords", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 0.25]}]}


@pytest.fixture(scope="module")
def spied(model_repo):
    """A TestClient on the app, and the hot call (or None) each request took, by method and path."""
    app = create_app(Settings(models=model_repo, grpc_port=0))
    taken: dict[tuple[str, str], object] = {}

    class Spy:  # outermost: sees the scope after the request
        def __init__(self, inner):
            self.inner = inner

        async def __call__(self, scope, receive, send):
            await self.inner(scope, receive, send)
            if scope["type"] == "http":
                taken[scope["method"], scope["path"] + "?" + scope["query_string"].decode()] = scope.get("inr.hot_call")

    app.add_middleware(Spy)
    with TestClient(app) as c:
        yield c, taken


def test_the_inference_routes_take_the_hot_path_and_the_rest_does_not(spied):
    c, taken = spied
    assert c.post("/v1/models/digits/classify", json={"images": [IMAGE]}).status_code == 200
    assert c.post("/v1/models/astronaut/query", json={"coords": [[0.5, 0.5]]}).status_code == 200
    assert c.post("/v2/models/astronaut/infer", json=V2).status_code == 200
    assert c.post("/v2/models/astronaut/versions/1/infer", json=V2).status_code == 200
    for path in (
        "/v1/models/digits/classify?",
        "/v1/models/astronaut/query?",
        "/v2/models/astronaut/infer?",
        "/v2/models/astronaut/versions/1/infer?",
    ):
        assert taken["POST", path] is not None, path
    assert c.post("/v1/models/digits/classify?include_input=true", json={"images": [IMAGE]}).status_code == 200
    assert c.post("/v1/models/" + "x" * 65 + "/query", json={"coords": [[0.5, 0.5]]}).status_code == 422
    assert c.get("/v2/models/astronaut/infer").status_code != 200  # FastAPI's answer, whatever it is
    for key in (
        ("POST", "/v1/models/digits/classify?include_input=true"),
        ("POST", "/v1/models/" + "x" * 65 + "/query?"),
        ("GET", "/v2/models/astronaut/infer?"),
    ):
        assert taken[key] is None, key


def test_both_paths_answer_alike(spied):
    """classify with an unknown query parameter goes through FastAPI (which ignores it); without, the hot path."""
    c, taken = spied
    cases = [
        ({"images": [IMAGE]}, 200),
        ({"images": [[[2.0] * 28] * 28]}, 400),
        ({"images": "x"}, 422),
        ({"pictures": []}, 422),
    ]
    for body, code in cases:
        hot = c.post("/v1/models/digits/classify", json=body)
        slow = c.post("/v1/models/digits/classify?unused=1", json=body)
        assert (hot.status_code, hot.content) == (slow.status_code, slow.content) and hot.status_code == code
        assert taken["POST", "/v1/models/digits/classify?"] is not None
        assert taken["POST", "/v1/models/digits/classify?unused=1"] is None
    for name, code in (("nope", 404), ("astronaut", 400)):
        hot = c.post(f"/v1/models/{name}/classify", json={"images": [IMAGE]})
        slow = c.post(f"/v1/models/{name}/classify?unused=1", json={"images": [IMAGE]})
        assert (hot.status_code, hot.json()) == (slow.status_code, slow.json()) and hot.status_code == code
    metrics = c.get("/metrics").text
    assert 'endpoint="/v1/models/{name}/classify",method="POST",model="digits"' in metrics
    assert 'endpoint="/v2/models/{name}/versions/{version}/infer",method="POST",model="astronaut"' in metrics
