"""Target images: built-in photos from scikit-image, generated text images, or files.

Coordinates are (x, y) in [0,1]², x to the right, y down; pixel (i, j) has its
centre at ((j+0.5)/W, (i+0.5)/H).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont, UnidentifiedImageError

from .errors import UsageError

SKIMAGE_PHOTOS = ("astronaut", "camera", "coffee", "chelsea", "rocket", "cat", "immunohistochemistry")
TEXT_IMAGES = {
    "text": "Implicit neural\nrepresentations",
    "text-fourier": "Fourier features\nlet networks learn",
    "text-sinekan": "SineKAN: sines\non KAN edges",
}
BUILTIN = tuple(SKIMAGE_PHOTOS) + tuple(TEXT_IMAGES)


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


def load_image(image: str, size: int) -> tuple[np.ndarray, dict]:
    """Return an [size, size, 3] float32 image in [0,1] and a description of its source."""
    if size < 4 or size > 4096:
        raise UsageError(f"--size must be between 4 and 4096, got {size}")
    if image in TEXT_IMAGES:
        arr = text_image(TEXT_IMAGES[image], size=512)
        source = {"kind": "builtin-text", "name": image, "text": TEXT_IMAGES[image]}
    elif image in SKIMAGE_PHOTOS:
        arr = _skimage_photo(image)
        source = {"kind": "builtin-photo", "name": image, "package": "scikit-image"}
    else:
        path = Path(image)
        if not path.exists():
            raise UsageError(f"unknown image '{image}': not a file; built-in images: {', '.join(BUILTIN)}")
        try:
            with Image.open(path) as im:
                arr = np.asarray(im.convert("RGB"))
        except (UnidentifiedImageError, OSError) as e:
            raise UsageError(f"cannot read image file '{image}': {e.__class__.__name__}") from None
        source = {"kind": "file", "path": str(path)}
    source["original_size"] = [int(arr.shape[1]), int(arr.shape[0])]
    pil = Image.fromarray(_to_uint8(arr))
    pil = _center_square(pil).resize((size, size), Image.LANCZOS)
    return np.asarray(pil, dtype=np.float32) / 255.0, source


def _to_uint8(arr: np.ndarray) -> np.ndarray:
    if arr.dtype == np.uint8:
        return arr
    return (np.clip(arr, 0, 1) * 255 + 0.5).astype(np.uint8)


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


def save_png(arr: np.ndarray, path: Path) -> None:
    Image.fromarray(_to_uint8(arr)).save(path)
