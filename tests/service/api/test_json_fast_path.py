"""The orjson/numpy fast path (service/api/jsonbody.py) answers exactly as the pydantic path did: the
same values for good bodies, the same 4xx for bad ones, including bodies built to slip through a
flattening parser (ragged rows whose total is right, nested lists, strings, booleans)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from service.api.schemas import QueryRequest
from service.engine.json_numbers import float_rows


@pytest.mark.parametrize(
    "rows,width,expected",
    [
        ([[0.5, 1], [2, 3.25]], 2, [[0.5, 1], [2, 3.25]]),
        ([[0.5, 0.5, 0.5], [0.5]], 2, None),  # 4 numbers, but not pairs
        ([[0.5, [0.5]], [0.5, 0.5]], 2, None),  # nested deeper
        ([[0.5, "0.5"]], 2, None),  # a string: pydantic decides
        ([[True, 0.5]], 2, None),  # a boolean: pydantic decides
        ([[0.5, None]], 2, None),
        ([[10**400, 0.5]], 2, None),  # beyond float64
        ([[float("nan"), 0.5]], 2, None),
        ([], 2, None),
        ([0.5, 0.5], 2, None),
        ("x", 2, None),
        ([[1, 2, 3], [4, 5, 6]], None, [[1, 2, 3], [4, 5, 6]]),
    ],
)
def test_float_rows_takes_only_plain_rectangular_numbers(rows, width, expected):
    got = float_rows(rows, width)
    if expected is None:
        assert got is None
    else:
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == np.float64


def post(client, body, **headers):
    return client.post(
        "/v1/models/astronaut/query",
        content=body if isinstance(body, bytes) else json.dumps(body, allow_nan=True).encode(),
        headers={"content-type": "application/json", **headers},
    )


def test_fast_and_slow_paths_give_the_same_colours(client):
    coords = np.random.default_rng(0).random((500, 2)).round(6)
    fast = post(client, {"coords": coords.tolist(), "transform": {"rotate": 30}})
    assert fast.status_code == 200, fast.text
    assert np.asarray(fast.json()["rgb"]).shape == (500, 3)
    # The pydantic path reads the same numbers (strings no longer force it; they are a 422).
    slow = np.asarray(QueryRequest.model_validate({"coords": coords.tolist()}).coords, dtype=np.float64)
    np.testing.assert_array_equal(slow, float_rows(coords.tolist(), 2))
    r = post(client, {"coords": [[str(x), y] for x, y in coords.tolist()], "transform": {"rotate": 30}})
    assert r.status_code == 422 and r.json()["error"].startswith("coords.0.0"), r.text


@pytest.mark.parametrize(
    "body,status,message",
    [
        ({"coords": [[0.5, 0.5, 0.5], [0.5]]}, 422, "coords.0: Tuple should have at most 2 items"),
        ({"coords": [[0.5, [0.5]]]}, 422, "coords.0.1: Input should be a valid number"),
        ({"coords": [[0.5, None]]}, 422, "coords.0.1"),
        ({"coords": [[0.5, 10**400]]}, 422, "coords.0.1"),
        ({"coords": [[0.5, 0.5]], "extra": 1}, 422, "extra: Extra inputs are not permitted"),
        ({"coords": [[0.5, 0.5]], "transform": {"rotate": "x"}}, 422, "transform.rotate"),
        ([[0.5, 0.5]], 422, "expected a JSON object"),
        (b"", 422, "a JSON body is required"),
        (b'{"coords": [[0.5, 0.5]]', 422, "invalid JSON"),
        (b'{"coords": [[0.5, 0.5]]}\xff', 422, "invalid JSON"),
    ],
)
def test_bad_bodies_get_the_pydantic_messages(client, body, status, message):
    r = post(client, body)
    assert r.status_code == status, r.text
    assert message in r.json()["error"]


def test_the_json_subtypes_fastapi_accepts_are_accepted(client):
    assert post(client, {"coords": [[0.5, 0.5]]}, **{"content-type": "application/vnd.api+json"}).status_code == 200
    r = client.post("/v1/models/astronaut/query", content=b'{"coords": [[0.5, 0.5]]}')  # no content type
    assert r.status_code == 422 and "application/json" in r.json()["error"]


def test_the_schema_still_describes_the_body(client):
    schema = client.get("/openapi.json").json()
    body = schema["paths"]["/v1/models/{name}/query"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/QueryRequest"}
    assert schema["components"]["schemas"]["QueryRequest"]["required"] == ["coords"]
    assert set(QueryRequest.model_fields) == set(schema["components"]["schemas"]["QueryRequest"]["properties"])


@pytest.mark.parametrize(
    "images,status,message",
    [
        ([[0.0] * 784, [[0.0] * 28] * 28], 200, None),  # flat and nested mixed: the slow path, same answer
        ([[0.0] * 783], 400, "images[0] has shape [783]"),
        ([[[0.0] * 28] * 27 + [[0.0] * 29]], 400, "images[0] must be numbers in nested lists of equal length"),
        ([[2.0] * 784], 400, "expected [0, 1]"),
        ([[float("nan")] * 784], 400, "images[0] contains NaN or Inf"),
        ([["0.5"] * 784], 422, "images[0][0] must be a number"),  # a string is not a pixel
    ],
)
def test_classify_json_fast_path_keeps_its_checks(client, images, status, message):
    r = client.post(
        "/v1/models/digits/classify",
        content=json.dumps({"images": images}, allow_nan=True).encode(),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == status, r.text
    if message:
        assert message in r.json()["error"]
    else:
        assert len(r.json()["predictions"]) == len(images)


def test_classify_fast_and_slow_paths_agree(client):
    flat = np.random.default_rng(1).random((3, 784)).round(4)
    fast = client.post("/v1/models/digits/classify", json={"images": flat.tolist()})
    slow = client.post(
        "/v1/models/digits/classify",
        json={"images": [img.reshape(28, 28).tolist() for img in flat[:1]] + flat[1:].tolist()},
    )
    assert fast.status_code == slow.status_code == 200
    assert fast.json() == slow.json()
