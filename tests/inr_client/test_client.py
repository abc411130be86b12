"""The Python client (sync and async) against the real server from conftest.py."""

import asyncio

import numpy as np
import pytest

from inr_client import AsyncClient, Client, ClientError, ServiceError
from inr_client.calls import decode_image
from tests.servers import draw_digit, png_bytes

# The test server allows 1,000,000 samples per render; tiles of 256² stay well under it.
TILE = 256


@pytest.fixture(scope="module")
def api(server):
    with Client(server.url, tile=TILE, timeout=60.0) as c:
        yield c


def test_models_lists_the_image_and_digit_models_with_their_status(api):
    models = {m["name"]: m for m in api.models()}
    assert models["astronaut"]["task"] == "image" and models["astronaut"]["status"] == "ready"
    assert models["digits"]["task"] == "digits"
    assert models["tampered"]["status"] == "failed"
    assert api.model("astronaut")["metadata"]["source"]["size"] == [32, 32]


def test_query_returns_the_colours_the_render_shows_at_pixel_centres(api):
    w, h = 8, 6
    ys, xs = np.mgrid[0:h, 0:w]
    coords = np.stack([(xs + 0.5) / w, (ys + 0.5) / h], axis=-1).reshape(-1, 2)
    rgb = api.query("astronaut", coords)
    image = decode_image(api.render_bytes("astronaut", w, h))
    assert rgb.shape == (w * h, 3)
    np.testing.assert_allclose(np.clip(rgb, 0, 1).reshape(h, w, 3) * 255, image, atol=1.0)


@pytest.mark.parametrize("transform", [None, {"rotate": 30, "center": [0.4, 0.6]}])
def test_a_render_fetched_as_tiles_equals_one_render_of_the_same_viewport(api, transform):
    viewport = [0.1, 0.2, 0.7, 0.65]
    whole = decode_image(api.render_bytes("astronaut", 50, 37, viewport=viewport, transform=transform))
    tiled = api.render("astronaut", 50, 37, viewport=viewport, transform=transform, tile=16)
    assert tiled.shape == whole.shape == (37, 50, 3)
    diff = np.abs(tiled.astype(int) - whole.astype(int))
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01  # float rounding only


def test_a_render_larger_than_the_server_allows_in_one_request_succeeds_in_tiles(api):
    with pytest.raises(ServiceError) as err:
        api.render_bytes("astronaut", 1010, 1000)
    assert err.value.status == 413 and "limit" in err.value.message
    seen = []
    image = api.render("astronaut", 1010, 1000, tile=512, progress=seen.append)
    assert image.shape == (1000, 1010, 3)
    assert sum(seen) == 1010 * 1000
    assert image.std() > 10  # an image, not a blank


def test_render_to_file_streams_a_png_equal_to_the_stitched_render(api, tmp_path):
    out = api.render_to_file(tmp_path / "big.png", "astronaut", 70, 45, tile=32)
    np.testing.assert_array_equal(decode_image(out.read_bytes()), api.render("astronaut", 70, 45, tile=32))
    assert [p.name for p in tmp_path.iterdir()] == ["big.png"]


def test_the_async_client_fetches_tiles_concurrently_and_gets_the_same_image(server, api):
    async def run():
        async with AsyncClient(server.url, tile=16, concurrency=3) as c:
            tiled = await c.render("astronaut", 40, 50, viewport=[0, 0, 0.5, 0.5])
            rgb = await c.query("astronaut", [[0.25, 0.25]])
            models = await c.models()
            return tiled, rgb, models

    tiled, rgb, models = asyncio.run(run())
    np.testing.assert_array_equal(tiled, api.render("astronaut", 40, 50, viewport=[0, 0, 0.5, 0.5], tile=16))
    np.testing.assert_allclose(rgb, api.query("astronaut", [[0.25, 0.25]]))
    assert "astronaut" in {m["name"] for m in models}


def test_classify_reads_digits_drawn_dark_on_light_from_png_files_and_bytes(api, tmp_path):
    path = tmp_path / "seven.png"
    draw_digit(7).save(path)
    predictions = api.classify_files("digits", [path, png_bytes(draw_digit(3))])
    assert [p.label for p in predictions] == [7, 3]
    assert all(len(p.probabilities) == 10 and abs(sum(p.probabilities) - 1) < 1e-4 for p in predictions)


def test_classify_sends_28_by_28_arrays_as_json(api):
    from service.engine.preprocess import mnist_like

    images = np.stack([mnist_like(draw_digit(d)) for d in (1, 4)])
    assert [p.label for p in api.classify("digits", images)] == [1, 4]
    assert api.classify("digits", images[0].reshape(784))[0].label == 1


def test_errors_from_the_service_raise_service_error_with_its_message(api):
    with pytest.raises(ServiceError) as err:
        api.query("no-such-model", [[0.5, 0.5]])
    assert err.value.status == 404 and "no-such-model" in err.value.message
    with pytest.raises(ServiceError) as err:
        api.classify("astronaut", np.zeros((28, 28)))
    assert 400 <= err.value.status < 500 and "astronaut" in err.value.message


@pytest.mark.parametrize(
    "call, problem",
    [
        (lambda c: c.query("astronaut", [0.5, 0.5]), "shape"),
        (lambda c: c.render("astronaut", 10, 10, viewport=[0.5, 0, 0.2, 1]), "x1 > x0"),
        (lambda c: c.render("astronaut", 10, 10, viewport=[0, 0, float("nan"), 1]), "finite"),
        (lambda c: c.render("astronaut", 0, 10), "width"),
        (lambda c: c.render_bytes("astronaut", 10, 10, format="gif"), "format"),
        (lambda c: c.classify("digits", np.zeros((2, 27, 27))), "28"),
        (lambda c: c.classify_files("digits", []), "no image"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_sent(api, call, problem):
    with pytest.raises(ClientError, match=problem):
        call(api)


def test_v2_infer_returns_the_same_colours_as_query(api):
    if not api.has_v2("astronaut"):
        pytest.skip("the server has no KServe V2 endpoints (/v2/models/{name}/ready answered non-200)")
    coords = np.array([[0.5, 0.5], [0.1, 0.9]], np.float32)
    out = api.infer("astronaut", {"coords": coords})
    np.testing.assert_allclose(out["rgb"], api.query("astronaut", coords), atol=1e-5)
