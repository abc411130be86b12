"""POST and GET /v1/models/{name}/render: sizes, formats, transform properties, fills, limits."""

import io
import json

import numpy as np
import pytest
from PIL import Image


def render(client, method="post", **fields) -> Image.Image:
    if method == "post":
        r = client.post("/v1/models/astronaut/render", json=fields)
    else:
        r = client.get("/v1/models/astronaut/render", params=fields)
    assert r.status_code == 200, r.text
    img = Image.open(io.BytesIO(r.content))
    assert r.headers["content-type"] == f"image/{img.format.lower()}"
    return img


def pixels(client, **fields) -> np.ndarray:
    return np.asarray(render(client, **fields)).astype(int)


@pytest.mark.parametrize("fmt,pil", [("png", "PNG"), ("jpeg", "JPEG"), ("webp", "WEBP")])
def test_render_has_the_requested_size_and_format(client, fmt, pil):
    img = render(client, width=48, height=20, format=fmt)
    assert img.format == pil and img.size == (48, 20) and img.mode == "RGB"


def test_render_pixels_are_the_model_at_pixel_centres(client):
    img = pixels(client, width=8, height=4)
    centres = [[(j + 0.5) / 8, (i + 0.5) / 4] for i in range(4) for j in range(8)]
    rgb = np.array(client.post("/v1/models/astronaut/query", json={"coords": centres}).json()["rgb"])
    assert np.abs(img.reshape(-1, 3) - rgb * 255).max() <= 0.51


def test_identity_transform_renders_the_plain_image(client):
    plain = pixels(client, width=32, height=32)
    assert np.array_equal(pixels(client, width=32, height=32, transform={"rotate": 0, "scale": [1, 1]}), plain)


@pytest.mark.parametrize("width,height", [(32, 32), (40, 24)])
def test_render_rotated_90_equals_the_rotated_array(client, width, height):
    plain = pixels(client, width=width, height=height)
    rotated = pixels(client, width=height, height=width, transform={"rotate": 90})
    assert np.array_equal(rotated, np.rot90(plain))


def test_render_rotated_minus_90_and_180_equal_array_rotations(client):
    plain = pixels(client, width=32, height=32)
    assert np.array_equal(pixels(client, width=32, height=32, transform={"rotate": -90}), np.rot90(plain, -1))
    assert np.array_equal(pixels(client, width=32, height=32, transform={"rotate": 180}), np.rot90(plain, 2))


def test_one_pixel_translate_equals_a_shift(client):
    plain = pixels(client, width=32, height=32)
    right = pixels(client, width=32, height=32, transform={"translate": [1 / 32, 0]})
    down = pixels(client, width=32, height=32, transform={"translate": [0, 1 / 32]})
    assert np.array_equal(right[:, 1:], plain[:, :-1])
    assert np.array_equal(down[1:], plain[:-1])


def test_viewport_renders_a_region_at_any_resolution(client):
    whole = pixels(client, width=64, height=64)
    quarter = pixels(client, width=32, height=32, viewport=[0.5, 0.0, 1.0, 0.5])
    assert np.array_equal(quarter, whole[:32, 32:])


def test_supersampling_averages_the_finer_render(client):
    fine = pixels(client, width=64, height=64)
    coarse = pixels(client, width=16, height=16, supersample=4)
    assert np.abs(coarse - fine.reshape(16, 4, 16, 4, 3).mean(axis=(1, 3))).max() <= 1.0


def test_large_render_in_many_tiles_matches_a_query_at_its_corner(client):
    # the test server renders in tiles of 1024 samples: 256×256 is 64 tiles
    img = pixels(client, width=256, height=256)
    rgb = client.post("/v1/models/astronaut/query", json={"coords": [[255.5 / 256, 255.5 / 256]]}).json()["rgb"]
    assert np.abs(img[-1, -1] - np.array(rgb[0]) * 255).max() <= 0.51


def test_transparent_background_outside_the_unit_square(client):
    img = render(client, width=40, height=40, transform={"rotate": 45}, background="transparent")
    a = np.asarray(img)
    assert img.mode == "RGBA" and a[0, 0, 3] == 0 and a[20, 20, 3] == 255


def test_colour_background_outside_the_unit_square(client):
    a = pixels(client, width=40, height=40, viewport=[1.0, 1.0, 2.0, 2.0], background="#00ff00")
    assert np.all(a == [0, 255, 0])


def test_get_takes_the_same_fields_as_query_parameters(client):
    post = pixels(
        client,
        width=24,
        height=16,
        viewport=[0.1, 0.2, 0.9, 0.8],
        supersample=2,
        transform={"rotate": 30, "scale": [1.2, 0.9], "translate": [0.05, 0], "center": [0.4, 0.5]},
    )
    as_json = pixels(
        client,
        method="get",
        width=24,
        height=16,
        viewport="0.1,0.2,0.9,0.8",
        supersample=2,
        transform=json.dumps({"rotate": 30, "scale": [1.2, 0.9], "translate": [0.05, 0], "center": [0.4, 0.5]}),
    )
    as_params = pixels(
        client,
        method="get",
        width=24,
        height=16,
        viewport="0.1,0.2,0.9,0.8",
        supersample=2,
        rotate=30,
        scale="1.2,0.9",
        translate="0.05,0",
        center="0.4,0.5",
    )
    assert np.array_equal(as_json, post) and np.array_equal(as_params, post)


def test_get_works_as_an_img_src_with_defaults(client):
    r = client.get("/v1/models/astronaut/render")
    assert r.status_code == 200 and Image.open(io.BytesIO(r.content)).size == (256, 256)


@pytest.mark.parametrize(
    "fields,status,message",
    [
        ({"width": 0}, 422, "width"),
        (
            {"width": 2000, "height": 1000},
            413,
            "width × height × supersample² = 2000000 is more than the limit of 1000000",
        ),
        ({"width": 200, "height": 200, "supersample": 8}, 413, "2560000 is more than the limit"),
        ({"supersample": 12}, 413, "supersample 12 is more than the limit of 8"),
        ({"format": "gif"}, 422, "format"),
        ({"viewport": [0.5, 0, 0.2, 1]}, 422, "x1 > x0"),
        ({"viewport": [0, 0, 1]}, 422, "viewport"),
        ({"viewport": [0, 0, 1, "NaN"]}, 422, "viewport.3: Input should be a finite number"),
        ({"format": "jpeg", "background": "transparent"}, 422, "jpeg has no alpha channel"),
        ({"background": "nope"}, 422, "background"),
        ({"transform": {"scale": [1, 0]}}, 422, "scale must be non-zero"),
        ({"quality": 0}, 422, "quality"),
        ({"viewport": [0, 0, 1e300, 1]}, 400, "coordinates after the transform reach 1e+300"),
        ({"transform": {"matrix": [[1, 0, 0], [0, 1, -1e300]]}}, 400, "must stay below"),
    ],
)
def test_bad_renders_get_a_4xx_naming_the_problem(client, fields, status, message):
    r = client.post("/v1/models/astronaut/render", json=fields)
    assert r.status_code == status, r.text
    assert message in r.json()["error"]


@pytest.mark.parametrize(
    "params,message",
    [
        ({"viewport": "0,0,1"}, "viewport"),
        ({"viewport": "a,b,c,d"}, "viewport.0"),
        ({"transform": "{rotate: 90}"}, "transform is not valid JSON"),
        ({"transform": '{"rotate": 90}', "rotate": 45}, "either as JSON in 'transform' or as rotate"),
        ({"scale": "1,2,3"}, "transform.scale"),
        ({"rotate": "inf"}, "rotate"),
        ({"width": "wide"}, "width"),
    ],
)
def test_bad_get_parameters_get_a_4xx_naming_the_problem(client, params, message):
    r = client.get("/v1/models/astronaut/render", params=params)
    assert 400 <= r.status_code < 500, r.text
    assert message in r.json()["error"]


def test_render_on_a_digit_model_is_refused_naming_it(client):
    r = client.get("/v1/models/digits/render")
    assert r.status_code == 400 and "'digits' has task 'digits'; /render needs" in r.json()["error"]


def test_concurrent_renders_all_complete_and_agree(client):
    # the test server computes two renders at once; the other six wait their turn
    import concurrent.futures

    url = "/v1/models/astronaut/render?width=96&height=96&rotate=15"
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        bodies = list(pool.map(lambda _: client.get(url), range(8)))
    assert all(r.status_code == 200 for r in bodies)
    assert len({r.content for r in bodies}) == 1
