"""Target images: built-in photos from scikit-image, generated text images, or files.

Coordinates are (x, y) in [0,1]², x to the right, y down; pixel (i, j) has its
centre at ((j+0.5)/W, (i+0.5)/H).
"""

from __future__ import annotations

import ast
import importlib.util
import math
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont, UnidentifiedImageError

from modelrepo import portable

from .errors import UsageError

SKIMAGE_PHOTOS = ("astronaut", "camera", "coffee", "chelsea", "rocket", "cat", "immunohistochemistry")
TEXT_IMAGES = {
    "text": "Implicit neural\nrepresentations",
    "text-fourier": "Fourier features\nlet networks learn",
    "text-sinekan": "SineKAN: sines\non KAN edges",
}
# The IIIF validator's test image: a 10×10 grid of flat colour squares, 100 px each, 1000² native.
IIIF_TEST = "iiif-test"
IIIF_GRID, IIIF_SQUARE = 10, 100
BUILTIN = tuple(SKIMAGE_PHOTOS) + tuple(TEXT_IMAGES) + (IIIF_TEST,)
# Training defaults a built-in image carries (the CLI applies them where the option is not given).
# iiif-test: flat squares with sharp edges; σ and steps measured in docs/iiif.md ("The test image").
IMAGE_DEFAULTS: dict[str, dict] = {IIIF_TEST: {"scale": 14.0, "width": 128, "features": 128, "steps": 2000}}
# The most pixels a fit takes (INR_MAX_UPLOAD_PIXELS' default): a larger image is downscaled to fit.
MAX_PIXELS = 25_000_000
MAX_SIDE = 32768  # --size caps the longer side at most at this
MAX_DECODE_PIXELS = 300_000_000  # files with more pixels than this are refused before decoding
UINT8_CHUNK = 1 << 20  # values per chunk of a float image rounded to uint8


def image_defaults(image: str) -> dict:
    return IMAGE_DEFAULTS.get(image, {})


def iiif_validator_colours() -> list[list[tuple[int, int, int]]]:
    """The colour table of the installed `iiif-validator` package, `colorInfo[x][y]` for the square in
    column x, row y. Read from its source with `ast` (importing it would pull in libmagic and bottle)."""
    spec = importlib.util.find_spec("iiif_validator")
    if spec is None or spec.origin is None:
        raise UsageError(
            "--image iiif-test needs the colour table of the iiif-validator package: pip install iiif-validator==1.0.5"
        )
    tree = ast.parse((Path(spec.origin).parent / "validator.py").read_text())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Attribute)
            and node.targets[0].attr == "colorInfo"
        ):
            table = ast.literal_eval(node.value)
            if len(table) == IIIF_GRID and all(len(col) == IIIF_GRID for col in table):
                return [[tuple(int(c) for c in rgb) for rgb in col] for col in table]
    raise UsageError("the installed iiif-validator has no 10×10 colorInfo table; install iiif-validator==1.0.5")


def iiif_test_image() -> np.ndarray:
    """[1000, 1000, 3] uint8: square (x, y) — column x, row y — is colorInfo[x][y]."""
    table = np.asarray(iiif_validator_colours(), dtype=np.uint8)  # [x, y, 3]
    grid = table.transpose(1, 0, 2)  # [row, column, 3]
    return np.repeat(np.repeat(grid, IIIF_SQUARE, axis=0), IIIF_SQUARE, axis=1)


def text_image(text: str, size: int = 512, seed: int = 0) -> np.ndarray:
    """A generated text image in the spirit of the Fourier-features paper's text set:
    coloured text on a light background, with sharp edges."""
    rng = np.random.default_rng(seed)
    bg = tuple(int(c) for c in rng.integers(200, 256, 3))
    fg = tuple(int(c) for c in rng.integers(0, 120, 3))
    img = Image.new("RGB", (size, size), bg)
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=max(8, size // 9))
    draw.multiline_text((size * 0.06, size * 0.3), text, fill=fg, font=font, spacing=size // 20)
    return np.asarray(img, dtype=np.float32) / 255.0


def _skimage_photo(name: str) -> np.ndarray:
    from skimage import data

    img = getattr(data, name)()
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    return img[..., :3]


def fit_dims(
    width: int, height: int, size: int | None = None, crop: bool = False, max_pixels: int = MAX_PIXELS
) -> tuple[int, int]:
    """(W, H) a native width × height image is fitted at: the whole image (its centre square with `crop`),
    downscaled only so that its longer side is at most `size` and its pixels at most `max_pixels`."""
    if crop:
        width = height = min(width, height)
    scale = 1.0
    if size and max(width, height) > size:
        scale = size / max(width, height)
    if width * height * scale * scale > max_pixels:
        scale = min(scale, math.sqrt(max_pixels / (width * height)))
    if scale == 1.0:
        return width, height
    return max(1, min(width, math.floor(width * scale + 0.5))), max(1, min(height, math.floor(height * scale + 0.5)))


def check_size(size: int | None) -> None:
    if size is not None and not 1 <= size <= MAX_SIDE:
        raise UsageError(f"--size must be between 1 and {MAX_SIDE} (the longer side's cap), got {size}")


def read_native(image: str) -> tuple[np.ndarray, dict, int]:
    """(the image at its native size as [H, W, 3] uint8, a description of its source, the resampling filter)."""
    resample = Image.LANCZOS
    if image in TEXT_IMAGES:
        arr = text_image(TEXT_IMAGES[image], size=512)
        source = {"kind": "builtin-text", "name": image, "text": TEXT_IMAGES[image]}
    elif image == IIIF_TEST:
        arr = iiif_test_image()
        n = IIIF_GRID * IIIF_SQUARE
        # native_size: the pixel size the image is defined at; IIIF serves the model at exactly this size.
        source = {"kind": "builtin-iiif-test", "name": image, "package": "iiif-validator", "native_size": [n, n]}
        resample = Image.BOX  # area averages: flat squares stay flat, no Lanczos ringing along the edges
    elif image in SKIMAGE_PHOTOS:
        arr = _skimage_photo(image)
        source = {"kind": "builtin-photo", "name": image, "package": "scikit-image"}
    else:
        path = Path(image)
        if not path.exists():
            raise UsageError(f"unknown image '{image}': not a file; built-in images: {', '.join(BUILTIN)}")
        try:
            with Image.open(path) as im:
                if im.width * im.height > MAX_DECODE_PIXELS:
                    raise UsageError(
                        f"image file '{image}' has {im.width}×{im.height} pixels, more than "
                        f"{MAX_DECODE_PIXELS} this tool decodes"
                    )
                arr = np.asarray(im.convert("RGB"))
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as e:
            raise UsageError(f"cannot read image file '{image}': {e.__class__.__name__}") from None
        source = {"kind": "file", "path": portable(path)}
    source["original_size"] = [int(arr.shape[1]), int(arr.shape[0])]
    return _to_uint8(arr), source, resample


def load_image(
    image: str, size: int | None = None, crop: bool = False, max_pixels: int = MAX_PIXELS
) -> tuple[np.ndarray, dict]:
    """The image to fit as [H, W, 3] float32 in [0,1] — whole, at its native size and aspect unless `size`
    caps its longer side or it has more than `max_pixels`; its centre square only with `crop` — and a
    description of its source (`size`: the fitted [W, H])."""
    check_size(size)
    arr, source, resample = read_native(image)
    pil = Image.fromarray(arr)
    if crop:
        pil = _center_square(pil)
        source["crop"] = "centre square"
    dims = fit_dims(pil.width, pil.height, size, False, max_pixels)
    if dims != pil.size:
        pil = pil.resize(dims, resample)
    source["size"] = [pil.width, pil.height]
    out = np.asarray(pil, dtype=np.float32)
    out /= 255.0
    return out, source


def image_dims(
    image: str, size: int | None = None, crop: bool = False, max_pixels: int = MAX_PIXELS
) -> tuple[int, int]:
    """(W, H) that `load_image` returns, reading only a file's header."""
    check_size(size)
    if image in TEXT_IMAGES:
        w = h = 512
    elif image == IIIF_TEST:
        w = h = IIIF_GRID * IIIF_SQUARE
    elif image in SKIMAGE_PHOTOS:
        h, w = _skimage_photo(image).shape[:2]
    else:
        try:
            with Image.open(image) as im:
                w, h = im.size
        except (FileNotFoundError, IsADirectoryError):
            raise UsageError(f"unknown image '{image}': not a file; built-in images: {', '.join(BUILTIN)}") from None
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as e:
            raise UsageError(f"cannot read image file '{image}': {e.__class__.__name__}") from None
    return fit_dims(int(w), int(h), size, crop, max_pixels)


def _to_uint8(arr: np.ndarray) -> np.ndarray:
    """Values in [0,1] as uint8, rounded; a chunk of rows at a time (a 25 MP render takes no float copies of it)."""
    if arr.dtype == np.uint8:
        return arr
    if arr.ndim < 2 or arr.size == 0:
        return (np.clip(arr, 0, 1) * 255 + 0.5).astype(np.uint8)
    out = np.empty(arr.shape, np.uint8)
    rows = max(1, UINT8_CHUNK // arr[0].size)
    for i in range(0, len(arr), rows):
        out[i : i + rows] = np.clip(arr[i : i + rows], 0, 1) * 255 + 0.5
    return out


def _center_square(img: Image.Image) -> Image.Image:
    w, h = img.size
    s = min(w, h)
    left, top = (w - s) // 2, (h - s) // 2
    return img.crop((left, top, left + s, top + s))


def pixel_centres(height: int, width: int) -> np.ndarray:
    """[H, W, 2] float32 coordinates (x, y) of pixel centres in [0,1]²."""
    ys = (np.arange(height, dtype=np.float32) + 0.5) / height
    xs = (np.arange(width, dtype=np.float32) + 0.5) / width
    gx, gy = np.meshgrid(xs, ys)  # both [H, W]
    return np.stack([gx, gy], axis=-1)


def downscaled(arr: np.ndarray, max_side: int | None = None) -> np.ndarray:
    """[H, W, 3] in [0,1] (or uint8) as uint8, box-downscaled in its aspect to at most `max_side` on its longer side:
    the pixels save_png writes (a preview made so lets its caller drop the full render)."""
    pixels = _to_uint8(arr)
    if not max_side or max(pixels.shape[:2]) <= max_side:
        return pixels
    img = Image.fromarray(pixels)
    return np.asarray(img.resize(fit_dims(img.width, img.height, max_side), Image.BOX))


def save_png(arr: np.ndarray, path: Path, max_side: int | None = None) -> None:
    """[H, W, 3] in [0,1] as a PNG; with max_side, box-downscaled in its aspect to at most that longer side."""
    Image.fromarray(downscaled(arr, max_side)).save(path)
