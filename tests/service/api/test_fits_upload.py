"""POST /v1/fits makes every upload the 8-bit RGB image the worker fits (docs/fits.md): checked on the PNG
that the real job store holds (`FitStore.image`), for each kind of image the issue names."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from service.fits.upload import derive_name, to_rgb
from tests.servers import png_bytes
from tests.service.api.fitserver import api, fit_server, store, stored, upload  # noqa: F401


def saved(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def exif_rotated() -> bytes:
    """40×20, red left half, blue right half, with EXIF orientation 6: shown upright it is 20×40, red on top."""
    img = Image.new("RGB", (40, 20), (255, 0, 0))
    img.paste((0, 0, 255), (20, 0, 40, 20))
    exif = Image.Exif()
    exif[0x0112] = 6
    return saved(img, "JPEG", exif=exif, quality=95)


def palette() -> bytes:
    """Index 1 is (0, 128, 255); index 0 is transparent and becomes white."""
    img = Image.new("P", (16, 16), 1)
    img.putpalette([0, 0, 0, 0, 128, 255] + [0] * 762)
    img.paste(0, (0, 0, 8, 16))
    return saved(img, "PNG", transparency=0)


def sixteen_bit() -> bytes:
    """16-bit grey 0, 25700 (100 × 257) and 65535: scaled to 0, 100, 255; clipping would make 25700 white."""
    a = np.zeros((12, 12), np.uint16)
    a[:, 4:8], a[:, 8:] = 25700, 65535
    return png_bytes(Image.fromarray(a))


def grey_alpha() -> bytes:
    """LA: black ink, opaque on the left, half transparent in the middle, clear on the right."""
    a = np.zeros((12, 12, 2), np.uint8)
    a[:, :4, 1], a[:, 4:8, 1] = 255, 128
    return png_bytes(Image.fromarray(a, "LA"))


def animated() -> bytes:
    frames = [Image.new("RGB", (10, 10), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    return saved(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)


CASES = [  # (bytes, file name, size after, {pixel: colour}, tolerance, source fields)
    (
        exif_rotated,
        "phone.jpg",
        (20, 40),
        {(10, 5): (255, 0, 0), (10, 34): (0, 0, 255)},
        40,
        {"mode": "RGB", "format": "JPEG"},
    ),
    (
        lambda: saved(Image.new("CMYK", (8, 8), (0, 255, 255, 0)), "TIFF"),
        "print.tif",
        (8, 8),
        {(4, 4): (255, 0, 0)},
        0,
        {"mode": "CMYK", "format": "TIFF"},
    ),
    (palette, "logo.png", (16, 16), {(2, 2): (255, 255, 255), (12, 2): (0, 128, 255)}, 0, {"mode": "P"}),
    (sixteen_bit, "scan.png", (12, 12), {(1, 1): (0, 0, 0), (5, 1): (100, 100, 100), (10, 1): (255, 255, 255)}, 0, {}),
    (
        grey_alpha,
        "ink.png",
        (12, 12),
        {(1, 1): (0, 0, 0), (5, 1): (127, 127, 127), (10, 1): (255, 255, 255)},
        1,
        {"mode": "LA"},
    ),
    (lambda: png_bytes(Image.new("L", (6, 6), 77)), "grey.png", (6, 6), {(3, 3): (77, 77, 77)}, 0, {"mode": "L"}),
    (animated, "anim.gif", (10, 10), {(5, 5): (255, 0, 0)}, 0, {"frames": 3, "format": "GIF"}),
    (
        lambda: saved(Image.new("RGB", (9, 7), (1, 2, 3)), "WEBP", lossless=True),
        "pic.webp",
        (9, 7),
        {(4, 4): (1, 2, 3)},
        0,
        {"format": "WEBP"},
    ),
]


@pytest.mark.parametrize(
    "make, filename, size, pixels, tolerance, source",
    CASES,
    ids=["exif", "cmyk", "palette", "16-bit", "grey-alpha", "grey", "animated", "webp"],
)
def test_the_stored_image_is_upright_8_bit_rgb(api, store, make, filename, size, pixels, tolerance, source):
    r = upload(api, make(), filename, steps=3)
    assert r.status_code == 202, r.text
    rec = r.json()
    img = stored(store, rec["id"])
    assert img.size == size and (rec["source"]["width"], rec["source"]["height"]) == size
    for xy, colour in pixels.items():
        got = img.getpixel(xy)
        assert max(abs(a - b) for a, b in zip(got, colour)) <= tolerance, (xy, got, colour)
    for key, value in {"filename": filename, "frames": 1, **source}.items():
        assert rec["source"][key] == value, key
    assert api.delete(f"/v1/fits/{rec['id']}").status_code == 200


def test_32_bit_and_float_grey_are_scaled_not_clipped():
    i32 = Image.fromarray(np.array([[0, 25700, 65535]], np.int32), "I")
    assert np.asarray(to_rgb(i32))[0, :, 0].tolist() == [0, 100, 255]
    f = Image.fromarray(np.array([[0.0, 0.5, 1.0]], np.float32), "F")
    assert np.asarray(to_rgb(f))[0, :, 0].tolist() == [0, 128, 255]


def test_derived_names_match_the_repository_pattern():
    assert derive_name("Holiday Photo (1).JPG", lambda n: False) == "Holiday-Photo-1"
    assert derive_name("C:\\Users\\me\\cat.png", lambda n: False) == "cat"
    assert derive_name("", lambda n: False) == "image"
    assert derive_name("x" * 300 + ".png", lambda n: False) == "x" * 56
    taken = {"cat", "cat-2"}
    assert derive_name("cat.png", taken.__contains__) == "cat-3"
