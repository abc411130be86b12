"""IIIF Image API 3.0 at /iiif/3 against the real server, over the model fitted to the iiif-test image."""

import http.client
import io
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
from PIL import Image

from service.api.iiif.info import INFO_MEDIA_TYPE

ID = "iiif-test"


@pytest.fixture(scope="module")
def iiif(iiif_server):
    with httpx.Client(base_url=iiif_server.url, timeout=120.0) as c:
        yield c


def raw_get(server, path: str, method: str = "GET", headers: dict | None = None):
    """A request with the path exactly as given (no client-side normalisation of '..' or escapes)."""
    u = urlsplit(server.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    conn.request(method, path, headers=headers or {})
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def pixels(content: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(content)))


def test_base_uri_redirects_to_info_json(iiif, iiif_server):
    r = iiif.get(f"/iiif/3/{ID}", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == f"{iiif_server.url}/iiif/3/{ID}/info.json"
    assert r.headers["access-control-allow-origin"] == "*"


def test_info_json(iiif, iiif_server):
    r = iiif.get(f"/iiif/3/{ID}/info.json")
    assert r.status_code == 200
    assert r.headers["content-type"] == INFO_MEDIA_TYPE
    assert r.headers["access-control-allow-origin"] == "*"
    doc = r.json()
    assert list(doc)[0] == "@context" and doc["@context"] == "http://iiif.io/api/image/3/context.json"
    assert doc["id"] == f"{iiif_server.url}/iiif/3/{ID}"
    assert (doc["type"], doc["protocol"], doc["profile"]) == ("ImageService3", "http://iiif.io/api/image", "level2")
    assert (doc["width"], doc["height"]) == (1000, 1000)  # the native size the image records
    assert doc["maxArea"] == 4_194_304  # INR_MAX_RENDER_PIXELS of this server
    assert doc["tiles"] == [{"width": 512, "height": 512, "scaleFactors": [1, 2]}]
    assert {"width": 500, "height": 500} in doc["sizes"]
    assert set(doc["extraQualities"]) == {"color", "gray", "bitonal"} and doc["extraFormats"] == ["webp"]
    assert {"mirroring", "rotationArbitrary", "sizeUpscaling"} <= set(doc["extraFeatures"])
    # an ordinary model: its native size (source.size), upscaling (^) up to INR_IIIF_ZOOM × that: 32² × 64
    astro = iiif.get("/iiif/3/astronaut/info.json").json()
    assert (astro["width"], astro["height"]) == (32, 32) and astro["tiles"][0]["scaleFactors"] == [1]
    assert (astro["maxWidth"], astro["maxHeight"]) == (2048, 2048) and "sizeUpscaling" in astro["extraFeatures"]


def test_info_of_a_non_square_model_is_its_native_size(iiif):
    cat = iiif.get("/iiif/3/cat/info.json").json()
    assert (cat["width"], cat["height"]) == (2400, 1500)
    assert (cat["maxWidth"], cat["maxHeight"]) == (65_536, 65_536)  # 64× native, within the largest side
    assert cat["tiles"] == [{"width": 512, "height": 512, "scaleFactors": [1, 2, 4, 8]}]
    assert {"width": 300, "height": 188} in cat["sizes"] and {"width": 2400, "height": 1500} in cat["sizes"]
    half = Image.open(io.BytesIO(iiif.get("/iiif/3/cat/full/pct:50/0/default.png").content))
    assert half.size == (1200, 750)
    assert iiif.get("/iiif/3/cat/full/4800,/0/default.png").status_code == 400  # past native needs ^
    up = iiif.get("/iiif/3/cat/0,0,100,100/^400,/0/default.png")
    assert up.status_code == 200 and Image.open(io.BytesIO(up.content)).size == (400, 400)
    turned = Image.open(io.BytesIO(iiif.get("/iiif/3/cat/full/600,/90/default.png").content))
    assert turned.size == (375, 600)  # rotation in square pixels


def test_info_id_behind_a_proxy(iiif):
    r = iiif.get(
        f"/iiif/3/{ID}/info.json",
        headers={"X-Forwarded-Proto": "https", "X-Forwarded-Host": "img.example.org", "X-Forwarded-Prefix": "/inr/"},
    )
    assert r.json()["id"] == f"https://img.example.org/inr/iiif/3/{ID}"
    r = iiif.get(f"/iiif/3/{ID}/info.json", headers={"X-Forwarded-Host": "example.org", "X-Forwarded-Port": "8443"})
    assert r.json()["id"] == f"http://example.org:8443/iiif/3/{ID}"


def test_head_options_etag_and_links(iiif, iiif_server):
    url = f"/iiif/3/{ID}/pct:10,10,30,30/max/0/default.png"
    r = iiif.get(url)
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    link = r.headers["link"]
    assert f'<{iiif_server.url}/iiif/3/{ID}/100,100,300,300/max/0/default.png>;rel="canonical"' in link
    assert '<http://iiif.io/api/image/3/level2.json>;rel="profile"' in link
    assert r.headers["cache-control"].startswith("public, max-age=")
    etag = r.headers["etag"]
    assert iiif.get(f"/iiif/3/{ID}/100,100,300,300/max/0/default.png").headers["etag"] == etag  # canonical key
    again = iiif.get(url, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b"" and again.headers["access-control-allow-origin"] == "*"
    head = iiif.head(url)
    assert head.status_code == 200 and head.content == b"" and head.headers["etag"] == etag
    assert iiif.head(f"/iiif/3/{ID}/info.json").status_code == 200
    pre = iiif.request("OPTIONS", url, headers={"Origin": "http://example.org", "Access-Control-Request-Method": "GET"})
    assert pre.status_code == 204 and pre.headers["access-control-allow-origin"] == "*"
    assert "GET" in pre.headers["access-control-allow-methods"]


def test_a_tile_is_the_render_route_of_the_same_region(iiif):
    """One render core: the IIIF tile and /v1/…/render with the region as viewport are the same bytes."""
    tile = iiif.get(f"/iiif/3/{ID}/512,0,488,512/244,256/0/default.jpg")
    assert tile.status_code == 200 and pixels(tile.content).shape == (256, 244, 3)
    ref = iiif.get(
        f"/v1/models/{ID}/render", params={"width": 244, "height": 256, "format": "jpeg", "viewport": "0.512,0,1,0.512"}
    )
    assert tile.content == ref.content


def test_rotation_mirroring_and_qualities(iiif):
    base = pixels(iiif.get(f"/iiif/3/{ID}/0,0,400,200/200,100/0/default.png").content).astype(int)
    for rot, expect in (
        ("90", np.rot90(base, k=-1)),
        ("180", np.rot90(base, k=2)),
        ("270", np.rot90(base, k=1)),
        ("!0", base[:, ::-1]),
        ("!90", np.rot90(base[:, ::-1], k=-1)),
    ):
        got = pixels(iiif.get(f"/iiif/3/{ID}/0,0,400,200/200,100/{rot}/default.png").content).astype(int)
        assert got.shape == expect.shape and np.abs(got - expect).max() <= 1, rot
    tilted = pixels(iiif.get(f"/iiif/3/{ID}/300,300,200,200/max/30/default.png").content)
    assert tilted.shape == (273, 273, 4)
    assert tilted[0, 0, 3] == 0 and tilted[136, 136, 3] == 255  # transparent corners, opaque centre
    gray = Image.open(io.BytesIO(iiif.get(f"/iiif/3/{ID}/full/200,/0/gray.jpg").content))
    assert gray.mode == "L"
    bitonal = pixels(iiif.get(f"/iiif/3/{ID}/full/200,/0/bitonal.png").content)
    assert set(np.unique(bitonal)) <= {0, 1, 255, True, False}
    webp = iiif.get(f"/iiif/3/{ID}/full/100,/0/color.webp")
    assert webp.headers["content-type"] == "image/webp" and webp.content[8:12] == b"WEBP"
    up = pixels(iiif.get(f"/iiif/3/{ID}/0,0,100,100/^300,/0/default.png").content)
    assert up.shape == (300, 300, 3)


def test_versions_and_tasks(iiif):
    assert iiif.get(f"/iiif/3/{ID}@1/info.json").status_code == 200
    r = iiif.get(f"/iiif/3/{ID}@2/info.json")
    assert r.status_code == 404 and "unknown version 2" in r.json()["error"]
    assert iiif.get("/iiif/3/digits/info.json").status_code == 400


BAD = [  # (what, path after /iiif/3/, status, words in the error)
    ("region outside the image", f"{ID}/1000,0,10,10/max/0/default.jpg", 400, "entirely outside"),
    ("a zero size", f"{ID}/full/0,/0/default.jpg", 400, "at least 1"),
    ("a zero-width region", f"{ID}/0,0,0,10/max/0/default.jpg", 400, "zero width"),
    ("size pct: over 100", f"{ID}/full/pct:150/0/default.jpg", 400, "upscaling needs the ^"),
    ("region pct: over 100", f"{ID}/pct:101,0,10,10/max/0/default.jpg", 400, "outside"),
    ("!0,0", f"{ID}/full/!0,0/0/default.jpg", 400, "zero pixels"),
    ("area over maxArea", f"{ID}/full/^5000,5000/0/default.jpg", 400, "maxArea 4194304 (INR_MAX_RENDER_PIXELS)"),
    ("upscaling without ^", f"{ID}/full/1200,/0/default.jpg", 400, "upscaling needs the ^"),
    ("rotation abc", f"{ID}/full/max/abc/default.jpg", 400, "rotation 'abc'"),
    ("rotation 400", f"{ID}/full/max/400/default.jpg", 400, "out of range"),
    ("quality sepia", f"{ID}/full/max/0/sepia.jpg", 400, "quality 'sepia'"),
    ("format gif", f"{ID}/full/max/0/default.gif", 501, "format 'gif'"),
    ("a random format", f"{ID}/full/max/0/default.xyz", 400, "format 'xyz'"),
    ("identifier with ../", f"..%2F{ID}/info.json", 400, "slash"),
    ("identifier ..", "%2E%2E/info.json", 400, "'..'"),
    ("an escaped slash", "a%2Fb/full/max/0/default.jpg", 400, "escaped %2F"),
    ("an unescaped slash", "a/b/full/max/0/default.jpg", 404, "no IIIF route"),
    ("a 10,000-character identifier", "a" * 10_000 + "/info.json", 400, "10000 characters"),
    ("an unknown identifier", "no-such-model/full/max/0/default.jpg", 404, "unknown model 'no-such-model'"),
    ("unescaped [frob]", "[frob]/full/max/0/default.jpg", 404, "unknown identifier"),
    ("a wrong method", f"{ID}/full/max/0/default.jpg", 405, "method POST"),
]


@pytest.mark.parametrize("what, path, status, words", BAD, ids=[b[0] for b in BAD])
def test_bad_input(iiif_server, what, path, status, words):
    code, headers, body = raw_get(iiif_server, f"/iiif/3/{path}", method="POST" if status == 405 else "GET")
    assert code == status, body
    assert headers["access-control-allow-origin"] == "*"
    assert headers["content-type"] == "application/json"
    import json

    assert words in json.loads(body)["error"]
    assert httpx.get(f"{iiif_server.url}/health/live").status_code == 200  # the server stays up


def test_the_manifest_canvas_of_a_non_square_model_has_its_native_size(iiif):
    doc = iiif.get("/iiif/3/cat/manifest.json").json()
    canvas = doc["items"][0]
    assert (canvas["width"], canvas["height"]) == (2400, 1500)
    body = canvas["items"][0]["items"][0]["body"]
    assert (body["width"], body["height"]) == (2400, 1500)
    assert canvas["thumbnail"][0]["id"].endswith("/full/!256,256/0/default.jpg")  # smaller than native: no ^
    thumb = Image.open(io.BytesIO(iiif.get(canvas["thumbnail"][0]["id"]).content))
    assert thumb.size == (256, 160)
