"""Numbers from JSON documents into numpy: the fast path of every numeric body (v1 coordinates and
pixels, V2 JSON tensors), and the checks that name a value which is not a JSON number."""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np
import orjson

NUMBERS = {float, int}
JSON_SPACE = b" \t\n\r"
NUMBER_CHARS = b"0123456789+-.eE"  # every character a JSON number can have
NUMBER_TO_ZERO = bytes.maketrans(NUMBER_CHARS, b"0" * len(NUMBER_CHARS))
BRACKETS_TO_SPACE = bytes.maketrans(b"[]", b"  ")
NUMBER_TEXT = NUMBER_CHARS + b"[]," + JSON_SPACE  # all that arrays of numbers are written with


def float_rows(rows: Any, width: int | None = None) -> np.ndarray | None:
    """[[number, …], …] with every row `width` long (or all equally long) → float64 [n, width], all finite;
    None when `rows` is anything else (the slow path then says what is wrong)."""
    if not isinstance(rows, list) or not rows or set(map(type, rows)) != {list}:
        return None
    lengths = set(map(len, rows))
    if len(lengths) != 1 or (width is not None and lengths != {width}):
        return None
    n, w = len(rows), lengths.pop()
    flat = list(itertools.chain.from_iterable(rows))
    if not set(map(type, flat)) <= NUMBERS:  # bool, str, None, lists: not plain numbers
        return None
    try:
        out = np.fromiter(flat, np.float64, n * w).reshape(n, w)
    except OverflowError:  # an integer beyond float64
        return None
    return out if np.isfinite(out).all() else None


def non_number(values: Any) -> tuple[list[int], Any] | None:
    """The position and value of the first leaf of nested lists that is not a JSON number (a boolean,
    a string, null, an object), or None when every leaf is one."""
    if not isinstance(values, list):
        return ([], values) if type(values) not in NUMBERS else None
    if set(map(type, values)) <= NUMBERS:
        return None
    for i, v in enumerate(values):
        found = non_number(v)
        if found is not None:
            return [i, *found[0]], found[1]
    return None


def looks_like_a_number(value: Any) -> bool:
    """A boolean, null or a numeric string: what a lenient parser would have taken for a number."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return False
        return True
    return False


def describe(value: Any) -> str:
    """A JSON value as the caller wrote it, shortened."""
    try:
        return orjson.dumps(value).decode()[:40]
    except TypeError:
        return repr(value)[:40]


def pixel_images(images: list, side: int) -> np.ndarray | None:
    """[N, 1, side, side] float64 when every image is side² numbers or `side` rows of `side`, all finite; else
    None (the per-image checks then name what is wrong)."""
    if not images or set(map(type, images)) != {list}:
        return None
    lengths = set(map(len, images))
    if lengths == {side * side}:
        flat = float_rows(images, side * side)
    elif lengths == {side}:
        flat = float_rows(list(itertools.chain.from_iterable(images)), side)  # the rows of every image
    else:
        return None
    return None if flat is None else flat.reshape(len(images), 1, side, side)


def only_numbers(body: bytes, key: str) -> Any:
    """The value of `key` in a body that is `{"key": value}` and nothing else, when the value is written with
    nothing but numbers, brackets, commas and whitespace (so every leaf of its arrays is a JSON number: no
    boolean, null or string has the letters); None for any other body, which the caller then parses and
    checks as a whole. For v1 classify's pixels, whose type checks leaf by leaf (`float_rows`) cost more than
    orjson's parse (docs/benchmarks.md, floor)."""
    if body.translate(None, NUMBER_TEXT) != _bare(key):
        return None
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return doc[key] if type(doc) is dict and len(doc) == 1 and key in doc else None


def _bare(key: str) -> bytes:
    """`{"key":}` without the characters of numbers: what `only_numbers` leaves of a body it takes."""
    return ('{"%s":}' % key).encode().translate(None, NUMBER_TEXT)


def leading_rows(body: bytes, key: str, width: int) -> tuple[np.ndarray, dict] | None:
    """A JSON object whose first member `key` is [[number × width], …], as v1 query bodies are written: the rows
    as float64 [n, width], read from the text without a Python list per row, and the other members (parsed by
    orjson); None for anything else, which the caller then parses as a whole (`float_rows` and the checks).
    Equal to `float_rows(orjson.loads(body)[key], width)` wherever it answers (`text_rows` says why). At 20,000
    coordinates this takes about half the CPU of orjson's 20,000 lists and `float_rows` (docs/benchmarks.md,
    json_path)."""
    head = _head(key).match(body)
    if head is None:
        return None
    start, end = head.end(), body.rfind(b"]]")  # the last "]]" ends the rows when no other member has one
    rows = text_rows(body[start : end + 2], width) if end >= start else None
    if rows is None:
        first = body.find(b"]]", start)  # else the first, if they are rows of this shape
        if first < 0 or first == end:
            return None
        end, rows = first, text_rows(body[start : first + 2], width)
        if rows is None:
            return None
    try:
        rest = body[end + 2 :].lstrip(JSON_SPACE)
        others = orjson.loads(b"{" + (rest[1:] if rest[:1] == b"," else rest)) if rest[:1] in (b",", b"}") else None
    except orjson.JSONDecodeError:  # the whole body then gets orjson's answer, or the standard library's
        return None
    if not isinstance(others, dict) or key in others or (rest[:1] == b"," and not others):
        return None  # a second `key` (orjson keeps the last), a comma before nothing
    return rows, others


def text_rows(text: bytes, width: int) -> np.ndarray | None:
    """The JSON text of [[number × width], …] as float64 [n, width], all finite; None for any other text.

    With JSON whitespace removed, the text must read exactly `[[N,N],[N,N],…]` (for width 2): with the number
    characters taken out it is `[[,]` `,[,]`… `]`, and no number character touches a `[` after it or a `]` before
    it, so every run of them sits where a row's number belongs. The brackets then become spaces and orjson reads
    the rest as one flat array of n × width numbers: each run must be one valid JSON number (orjson's own parser,
    as for a whole body; a space inside a number or an empty place is an error). Booleans, null, strings, objects,
    NaN and Infinity have letters the shape refuses."""
    tight = text.translate(NUMBER_TO_ZERO, JSON_SPACE)
    shape = tight.translate(None, b"0")
    row = b"[" + b"," * (width - 1) + b"]"
    n = (len(shape) - 1) // (len(row) + 1)
    if n < 1 or shape != b"[" + row + (b"," + row) * (n - 1) + b"]":
        return None
    u = np.frombuffer(tight, np.uint8)
    digit = u == ord("0")
    if ((digit[:-1] & (u[1:] == ord("["))) | ((u[:-1] == ord("]")) & digit[1:])).any():
        return None
    try:
        flat = orjson.loads(b"[" + text.translate(BRACKETS_TO_SPACE) + b"]")
    except orjson.JSONDecodeError:
        return None
    if len(flat) != n * width:
        return None
    out = np.fromiter(flat, np.float64, n * width).reshape(n, width)
    return out if np.isfinite(out).all() else None


_HEADS: dict[str, re.Pattern] = {}


def _head(key: str) -> re.Pattern:
    """`{"key":` at the start of a body, with JSON whitespace."""
    if key not in _HEADS:
        _HEADS[key] = re.compile(rb'[ \t\n\r]*\{[ \t\n\r]*"' + re.escape(key.encode()) + rb'"[ \t\n\r]*:[ \t\n\r]*')
    return _HEADS[key]
