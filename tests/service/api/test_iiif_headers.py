"""IIIF and render responses carry one ETag and one Cache-Control, and If-None-Match in any form
(the ETag of another rendering of the same tile, two tags, a weak tag, `*`, garbage) is a 304 or a
200, never a 500 or a reset connection."""

import http.client
import io
from urllib.parse import urlsplit

import pytest
from PIL import Image

ID = "iiif-test"
TILES = [
    f"/iiif/3/{ID}/0,0,256,256/64,/0/{q}"
    for q in ("default.png", "gray.png", "bitonal.png", "gray.jpg", "bitonal.webp", "color.jpg")
]
TILES += [
    f"/iiif/3/{ID}/0,0,256,256/64,/30/default.png",
    f"/iiif/3/{ID}/0,0,256,256/64,/!90/gray.png",
    f"/iiif/3/{ID}/0,0,256,256/64,/!45/bitonal.jpg",
    f"/iiif/3/{ID}/info.json",
    f"/v1/models/{ID}/render?width=32&height=32",
    f"/v1/models/{ID}/versions/1/render?width=32&height=32",
]


def get(server, path: str, headers: dict | None = None):
    """Status, the headers as a list (duplicates kept) and the body, on a connection of its own."""
    u = urlsplit(server.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, [(k.lower(), v) for k, v in r.getheaders()], r.read()
    finally:
        conn.close()


def values(headers, name: str) -> list[str]:
    return [v for k, v in headers if k == name]


@pytest.mark.parametrize("path", TILES)
def test_one_etag_and_one_cache_control(iiif_server, path):
    status, headers, _ = get(iiif_server, path)
    assert status == 200
    assert len(values(headers, "etag")) == 1, values(headers, "etag")
    assert len(values(headers, "cache-control")) == 1, values(headers, "cache-control")


def test_the_etag_of_a_colour_tile_is_not_the_gray_tiles(iiif_server):
    """The report's case: the colour tile's ETag sent on …/gray.png and …/bitonal.png answers their images."""
    base = f"/iiif/3/{ID}/0,0,256,256/64,/0/"
    for tag in values(get(iiif_server, base + "default.png")[1], "etag"):
        for quality in ("gray", "bitonal"):
            status, headers, body = get(iiif_server, f"{base}{quality}.png", {"If-None-Match": tag})
            assert status == 200, (quality, status, body[:200])
            assert Image.open(io.BytesIO(body)).size == (64, 64)


@pytest.mark.parametrize("path", TILES)
def test_if_none_match_in_any_form_is_304_or_200(iiif_server, path):
    status, headers, body = get(iiif_server, path)
    (etag,) = values(headers, "etag")
    cases = {
        etag: 304,
        f'"other", {etag}': 304,
        f"W/{etag}": 304,
        "*": 304,
        '"other"': 200,
        "garbage": 200,
        "W/": 200,
        ",,,": 200,
        '"': 200,
    }
    for header, want in cases.items():
        got, again, content = get(iiif_server, path, {"If-None-Match": header})
        assert got == want, (header, got, content[:200])
        if got == 304:
            assert content == b"" and values(again, "etag") == [etag]
        else:
            assert content == body
