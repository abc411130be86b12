"""v1 classify's usual body, `{"images": [...]}` written with numbers only, goes into numpy without a type check
per pixel (`only_numbers`, service/engine/json_numbers.py; `DigitsRuntime.pixel_array`). Wherever that path answers,
it must answer exactly as the general path, which parses the body and checks it value by value; every other body
must be handed to the general path. Over HTTP the general path is reached with the same body under the key
spelled with a JSON escape (`"\\u0069mages"`), which orjson reads as `images` and the fast path refuses."""

from __future__ import annotations

import json

import numpy as np
import pytest

from service.engine.json_numbers import only_numbers
from service.engine.tasks import DigitsRuntime

URL = "/v1/models/digits/classify"
RNG = np.random.default_rng(7)
DIGIT = RNG.random((28, 28)).round(4).tolist()
FLAT = sum(DIGIT, [])


def body(images, key: str = "images", indent=None) -> bytes:
    return json.dumps({key: images}, indent=indent, allow_nan=True).encode()


def general(images) -> bytes:
    return body(images).replace(b'"images"', b'"\\u0069mages"', 1)


@pytest.mark.parametrize(
    "text", [body([DIGIT]), body([FLAT, FLAT]), body([DIGIT], indent=2), b' {"images" :[[[0,1e-3],[1E0,-0.0]]]} ']
)
def test_bodies_of_numbers_are_taken(text):
    assert only_numbers(text, "images") == json.loads(text)["images"]


@pytest.mark.parametrize(
    "text",
    [
        body([[True] + FLAT[1:]]),
        body([[None] + FLAT[1:]]),
        body([["0.5"] + FLAT[1:]]),
        body([[float("nan")] + FLAT[1:]]),
        body([[float("inf")] + FLAT[1:]]),
        json.dumps({"images": [DIGIT], "extra": 1}).encode(),
        json.dumps({"images": [DIGIT], "i": 1}).encode(),
        b'{"images": [[0.5]], "images": [[0.5]]}',
        b'{"im1ages": [[0.5]]}',
        general([DIGIT]),
        b'{"images": {}}',
        b'{"images": [[0.5]]',
        b'["images", [[0.5]]]',
        b'{"images": [[0.5,]]}',
        b'{"images": [[1 2]]}',
        b"",
    ],
)
def test_every_other_body_is_handed_back(text):
    got = only_numbers(text, "images")
    assert got is None or not isinstance(got, list) or type(json.loads(text)) is not dict, got


@pytest.mark.parametrize(
    "values,taken",
    [
        ([DIGIT], True),
        ([FLAT, DIGIT], False),  # one shape per request, else per image
        ([DIGIT, DIGIT], True),
        ([FLAT], True),
        ([[row[:27] for row in DIGIT]], False),
        ([FLAT[:783]], False),  # not 28×28 or 784
        ([[[2.0] + FLAT[1:]]], False),
        ([[-0.5] + FLAT[1:]], False),  # outside [0, 1]: the checks name it
        ([], False),
        (0.5, False),
        ([[[DIGIT]]], False),
        ([[2**70] + FLAT[1:]], False),
    ],
)
def test_pixel_array_takes_what_the_checks_would_take_unchanged(values, taken):
    x = DigitsRuntime.pixel_array(None, values)
    assert (x is not None) == taken
    if taken:
        ref = np.asarray(values, np.float64).reshape(len(values), 1, 28, 28).astype(np.float32)
        np.testing.assert_array_equal(x, ref)
        assert x.dtype == np.float32


@pytest.mark.parametrize(
    "images",
    [
        [DIGIT],
        [FLAT, FLAT],
        [DIGIT] * 8,  # taken by the fast path
        [DIGIT] * 9,  # 413: more than INR_MAX_CLASSIFY_IMAGES
        [[[1.5] + row[1:] for row in DIGIT]],
        [[-1] + FLAT[1:]],  # outside [0, 1]
        [FLAT, DIGIT],
        [FLAT[:100]],
        [[row[:27] for row in DIGIT]],
        [],
        [[]],
        [[[]]],
        [[True] + FLAT[1:]],
        [["0.5"] + FLAT[1:]],
        [[None] + FLAT[1:]],
        [[float("nan")] + FLAT[1:]],
        [[float("inf")] + FLAT[1:]],
        [[10**400] + FLAT[1:]],
    ],
)
def test_both_paths_answer_byte_for_byte_alike(client, images):
    fast = client.post(URL, content=body(images), headers={"content-type": "application/json"})
    slow = client.post(URL, content=general(images), headers={"content-type": "application/json"})
    assert (fast.status_code, fast.content) == (slow.status_code, slow.content)
    assert fast.status_code in (200, 400, 413, 422), fast.text


def test_include_input_is_the_same_on_both_paths(client):
    fast = client.post(
        URL, params={"include_input": "true"}, content=body([DIGIT]), headers={"content-type": "application/json"}
    )
    slow = client.post(
        URL, params={"include_input": "true"}, content=general([DIGIT]), headers={"content-type": "application/json"}
    )
    assert fast.status_code == 200 and fast.content == slow.content
