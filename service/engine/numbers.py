"""Numbers from JSON documents into numpy: the fast path of every numeric body (v1 coordinates and
pixels, V2 JSON tensors), and the checks that name a value which is not a JSON number."""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import orjson

NUMBERS = {float, int}


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
