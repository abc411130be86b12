"""Values that are not numbers where numbers belong, and nesting deeper than any valid body:
422 naming the position, or a 4xx, on the fast path and the fallback alike; never a 500, and the
connection keeps serving."""

import json

import httpx
import pytest

QUERY = "/v1/models/astronaut/query"
CLASSIFY = "/v1/models/digits/classify"


def post(client, path, body):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(path, content=content, headers={"content-type": "application/json"})


@pytest.mark.parametrize(
    "coords,where",
    [
        ([[True, False]], "coords.0.0"),
        ([[0.5, 0.5], [0.5, True]], "coords.1.1"),
        ([["0.5", 0.5]], "coords.0.0"),
        ([[0.5, "1e-3"]], "coords.0.1"),
        ([[None, 0.5]], "coords.0.0"),
        ([[0.5, 0.5]] * 3 + [[False, 0.5]], "coords.3.0"),
    ],
)
def test_a_coordinate_that_is_not_a_number_is_422_naming_it(client, coords, where):
    r = post(client, QUERY, {"coords": coords})
    assert r.status_code == 422, r.text
    assert r.json()["error"].startswith(where), r.json()


@pytest.mark.parametrize("value,status", [(True, 422), ("0.5", 422), (None, 422)])
def test_a_pixel_that_is_not_a_number_is_a_4xx_naming_it(client, value, status):
    for image in ([0.0] * 783 + [value], [[0.0] * 28] * 27 + [[0.0] * 27 + [value]]):
        r = post(client, CLASSIFY, {"images": [[0.0] * 784, image]})
        assert r.status_code == status, r.text
        assert "images[1]" in r.json()["error"] or "images.1" in r.json()["error"], r.text


def test_v2_data_that_is_not_numbers_is_a_400(client):
    for data in ([True, False], ["0.5", 0.5], [None, 0.5], [True, 0.5], [[0.5, False]]):
        r = client.post(
            "/v2/models/astronaut/infer",
            json={"inputs": [{"name": "coords", "shape": [1, 2], "datatype": "FP32", "data": data}]},
        )
        assert r.status_code == 400, r.text
        assert "error" in r.json()


@pytest.mark.parametrize(
    "path,key",
    [
        (QUERY, "coords"),
        (CLASSIFY, "images"),
        ("/v2/models/astronaut/infer", "inputs"),
        ("/v1/models/astronaut/render", "viewport"),
    ],
)
def test_nesting_deeper_than_any_valid_body_is_a_4xx_and_the_connection_lives(server, path, key):
    depth = 100_000
    body = (f'{{"{key}": ' + "[" * depth + "]" * depth + "}").encode()
    with httpx.Client(base_url=server.url, timeout=30.0) as c:
        r = post(c, path, body)
        assert 400 <= r.status_code < 500, r.text
        assert "error" in r.json()
        assert post(c, QUERY, {"coords": [[0.5, 0.5]]}).status_code == 200  # the same connection
