"""Small holes of issue 54: a derived model name with `..`, and the substitute's `max`."""

from __future__ import annotations

import io

import httpx
from PIL import Image

from tests.fits import photo, png
from tests.security.stack import FAST


def test_a_derived_name_never_holds_two_dots(stack):
    """Secure answer: a name made from the file name collapses every run of dots, so the model it makes is reachable
    over IIIF (main replaced `..` once: `x....y.png` made `x..y`, a name no IIIF identifier can reach)."""
    files = {"file": ("dots....y.png", png(photo(40, 32, 7)), "image/png")}
    r = httpx.post(f"{stack.open_url}/v1/fits", files=files, data=FAST, timeout=60)
    assert r.status_code in (201, 202), r.text
    name = r.json()["name"]
    assert ".." not in name and name == "dots.y"
    assert stack.finished(r.json()["id"])["state"] == "succeeded"
    stack.served(name, 1)
    assert httpx.get(f"{stack.open_url}/iiif/3/{name}/info.json").status_code == 200


def test_max_for_a_substitute_only_caller_is_the_substitute(stack):
    """Secure answer: `full/max` (and a region's `max`) for a caller who may see only the substitute is the largest
    size info.json advertises to them (maxWidth, the substitute's): 200 at that size, made from the substitute's
    raster (main answered 401 although info.json listed the size)."""
    info = httpx.get(f"{stack.open_url}/iiif/3/thumb/info.json").json()
    r = httpx.get(f"{stack.open_url}/iiif/3/thumb/full/max/0/default.png")
    assert r.status_code == 200, r.text
    assert Image.open(io.BytesIO(r.content)).size == (info["maxWidth"], info["maxHeight"]) == (16, 16)
    half = httpx.get(f"{stack.open_url}/iiif/3/thumb/0,0,16,16/max/0/default.png")
    assert half.status_code == 200 and Image.open(io.BytesIO(half.content)).size == (8, 8)
    assert httpx.get(f"{stack.open_url}/iiif/3/thumb/full/32,/0/default.png").status_code == 401  # finer: refused
