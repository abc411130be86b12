"""`leading_rows` (service/engine/json_numbers.py) reads v1 query coordinates from the body's text: wherever it
answers it
must answer as orjson + `float_rows` would, and anything it is not sure of goes back to that path, so the HTTP
answers stay the same for every body."""

from __future__ import annotations

import json
import random

import numpy as np
import orjson
import pytest

from service.engine.json_numbers import float_rows, leading_rows

COORDS = [[0.25, 0.5], [1, 0], [-0.0, 1e-3], [0.75, 2.5e-1]]
GOOD = [
    json.dumps({"coords": COORDS}).encode(),  # Python's separators
    json.dumps({"coords": COORDS}, separators=(",", ":")).encode(),  # JavaScript's
    json.dumps({"coords": COORDS, "transform": {"rotate": 30}, "background": "white"}).encode(),
    b' \r\n{ "coords" :\t[ [0.25 , 0.5] ,\n [1,0],[ -0.0,1e-3 ],[0.75,2.5E-1]]\n ,"background":"#fff"} \n',
    b'{"coords": [[0.25, 0.5], [1, 0], [-0.0, 1e-3], [0.75, 2.5e-1]], "transform": {"matrix": [[1, 0, 0], [0, 1, 0]]}}',
]
BAD = [
    b'{"coords": [[1, 2, 3], [4]]}',
    b'{"coords": [[1, [2]]]}',
    b'{"coords": [[1, 2]],}',
    b'{"coords": [[1, 2]], }',
    b'{"coords": [[1, true]]}',
    b'{"coords": [[1, "2"]]}',
    b'{"coords": [[1, null]]}',
    b'{"coords": [[1, 1e400]]}',
    b'{"coords": [[1, NaN]]}',
    b'{"coords": [[1, Infinity]]}',
    b'{"coords": [[1 2, 3]]}',
    b'{"coords": [[01, 2]]}',
    b'{"coords": [[.5, 2]]}',
    b'{"coords": [[+1, 2]]}',
    b'{"coords": [[1., 2]]}',
    b'{"coords": [[1e, 2]]}',
    b'{"coords": [[1, 2]]',
    b'{"coords": [[1, 2]]}x',
    b'{"coords": [[1, 2]]} {}',
    b'{"coords": [[1, 2]]]}',
    b'{"coords": [[1, 2],]}',
    b'{"coords": [[, ]]}',
    b'{"coords": [[1,, 2]]}',
    b'{"coords": [[]]}',
    b'{"coords": []}',
    b'{"coords": [[1, 2]] "a": 1}',
    b'{"coords": [[1, 2]], "coords": [[3, 4]]}',
    b'{"coords": [[1, {"a": 2}]]}',
    b'{"coords": [[1, 2]], "a": [[1, 2]]}',
    b'{"coords": [[1, 2]], "a": "\xff"}',
    b'{"co\\u006frds": [[1, 2]]}',
    b'{"coords": [[1, 2]], "a": ' + b"[" * 2000 + b"]" * 2000 + b"}",
    b'{"coords": [[123456789012345678901234567890, 2]]}',
    b'{\x0c"coords": [[1, 2]]}',
    b'{"coords": [[1,\x0c2]]}',
    b'{"coords": [[1, ]2, [3, 4]]}',
    b'{"coords": [5[1, 2]]}',
    b'{"coords": [[1, 2]5]}',
    b'{"coords": [[1, 2], 5[3, 4]]}',
    b'{"coords": [[1, 2]5, [3, 4]]}',
    b'{"coords": [[1,2 ]]}x',
    b'{"coords": [[1, 2 3]]}',
    b'{"coords": [[- 1, 2]]}',
    b'{"coords": [[1, 2]] , , "a": 1}',
]


def whole_body(body: bytes):
    """What the general path makes of a body: orjson's document, the rows by `float_rows` and the other members."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    rows = float_rows(doc.get("coords"), 2)
    return None if rows is None else (rows, {k: v for k, v in doc.items() if k != "coords"})


def same_as_whole_body(body: bytes) -> bool:
    """`leading_rows` either hands the body back or answers exactly as the general path; True when it answered."""
    got = leading_rows(body, "coords", 2)
    if got is None:
        return False
    want = whole_body(body)
    assert want is not None, body
    np.testing.assert_array_equal(got[0], want[0])
    assert got[0].dtype == np.float64 and got[0].shape == want[0].shape
    assert got[1] == want[1]
    return True


@pytest.mark.parametrize("body", GOOD)
def test_the_usual_bodies_are_read_from_the_text(body):
    assert same_as_whole_body(body)
    np.testing.assert_array_equal(leading_rows(body, "coords", 2)[0], np.asarray(COORDS, np.float64))


@pytest.mark.parametrize("body", BAD)
def test_anything_else_goes_back_to_the_general_path(body):
    assert leading_rows(body, "coords", 2) is None or same_as_whole_body(body)


def test_a_second_key_goes_back_too():
    """orjson keeps the last of two `coords`; the text reader, which sees the first, must not answer."""
    body = b'{"coords": [[1, 2]], "coords": [[3, 4]]}'
    assert leading_rows(body, "coords", 2) is None
    np.testing.assert_array_equal(whole_body(body)[0], [[3, 4]])


def test_mutated_bodies_are_never_read_differently():
    """Random edits of good bodies (a character inserted, removed or replaced by one that JSON gives meaning to):
    whatever the text reader accepts, the general path reads the same."""
    rng = random.Random(27)
    alphabet = b'[]{},:" .-+eE0123456789tfnulNaI\t\n\\x'
    answered = 0
    for _ in range(5000):
        body = bytearray(rng.choice(GOOD))
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(body))
            op = rng.randrange(3)
            if op == 0:
                body.insert(i, rng.choice(alphabet))
            elif op == 1:
                del body[i]
            else:
                body[i] = rng.choice(alphabet)
        answered += same_as_whole_body(bytes(body))
    assert answered > 100  # edits inside the numbers or the spacing still read from the text


def post(client, body: bytes):
    return client.post("/v1/models/astronaut/query", content=body, headers={"content-type": "application/json"})


def test_every_layout_of_the_same_body_gets_the_same_answer(client):
    coords = np.random.default_rng(27).random((300, 2)).round(6).tolist()
    doc = {"coords": coords, "transform": {"rotate": 30}}
    layouts = [
        json.dumps(doc).encode(),
        json.dumps(doc, separators=(",", ":")).encode(),
        json.dumps(doc, indent=2).encode(),  # the general path
        json.dumps({"transform": doc["transform"], "coords": coords}).encode(),
    ]  # coords not first: general
    answers = [post(client, body) for body in layouts]
    assert {r.status_code for r in answers} == {200}
    assert len({r.content for r in answers}) == 1


def test_a_repeated_key_keeps_the_last_as_before(client):
    twice = post(client, b'{"coords": [[0.1, 0.1]], "coords": [[0.9, 0.8]]}')
    last = post(client, b'{"coords": [[0.9, 0.8]]}')
    assert twice.status_code == last.status_code == 200 and twice.content == last.content


@pytest.mark.parametrize(
    "body,message",
    [
        (b'{"coords": [[0.5, 0.5]],}', "invalid JSON"),
        (b'{"coords": [[0.5, 0.5]]]}', "invalid JSON"),
        (b'{"coords": [[01, 0.5]]}', "invalid JSON"),
        (b'{"coords": [[0.5 0.5]]}', "invalid JSON"),
        (b'{"coords": [[0.5, 0.5]]} {}', "invalid JSON"),
        (b'{"coords": [[0.5, 1e400]]}', "coords.0.1"),
        (b'{"coords": [[0.5, true]]}', "coords.0.1"),
        (b'{"coords": [[0.5, 0.5]], "extra": 1}', "extra: Extra inputs are not permitted"),
        (b'{"coords": [[0.5, 0.5]], "background": "transparent"}', "background"),
    ],
)
def test_bad_bodies_that_start_like_good_ones_get_the_same_422(client, body, message):
    r = post(client, body)
    assert r.status_code == 422, r.text
    assert message in r.json()["error"]
