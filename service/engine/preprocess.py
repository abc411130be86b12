"""Digit inputs: JSON pixel arrays checked as they are, uploaded pictures made MNIST-like.

An upload (PNG or JPEG, any size, any colours) becomes a 28×28 float32 image in [0,1],
white digit on black, the way MNIST was made:
  1. greyscale (transparent pixels are laid on a background that contrasts the ink);
  2. invert when the background is light (dark ink on paper);
  3. stretch so that background → 0 and the strongest ink → 1, then crop to the ink;
  4. scale the longest side to 20 px, keeping the aspect ratio;
  5. paste into 28×28 so that the centre of mass sits at the centre.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ..errors import BadInput, NotANumber, TooLarge
from .json_numbers import describe, looks_like_a_number, non_number

SIDE, BOX = 28, 20
INK_THRESHOLD = 0.2  # after stretching, pixels above this count as ink for the crop
FORMATS = ("PNG", "JPEG")


class PreprocessError(BadInput):
    """An input that cannot become a digit image; the message names the problem."""


def images_from_json(images: list, max_images: int) -> np.ndarray:
    """[N, 1, 28, 28] float32 from a list of 28×28 nested or 784 flat lists with values in [0,1]."""
    if not isinstance(images, list) or not images:
        raise PreprocessError("images must be a non-empty list of 28×28 nested or 784 flat lists")
    if len(images) > max_images:
        raise TooLarge(f"{len(images)} images is more than the limit of {max_images} per request")
    out = np.empty((len(images), 1, SIDE, SIDE), np.float32)
    for n, img in enumerate(images):
        found = non_number(img)
        if found is not None and looks_like_a_number(found[1]):
            where = "".join(f"[{i}]" for i in found[0])
            raise NotANumber(f"images[{n}]{where} must be a number, got {describe(found[1])}")
        try:
            arr = np.asarray(img, dtype=np.float64)
        except (ValueError, TypeError):
            raise PreprocessError(f"images[{n}] must be numbers in nested lists of equal length") from None
        except OverflowError:  # an integer of more than 308 digits
            raise PreprocessError(f"images[{n}] has a number beyond the range of float64") from None
        if arr.shape not in ((SIDE, SIDE), (SIDE * SIDE,)):
            raise PreprocessError(f"images[{n}] has shape {list(arr.shape)}; expected [28, 28] or [784]")
        if not np.all(np.isfinite(arr)):
            raise PreprocessError(f"images[{n}] contains NaN or Inf")
        if arr.min() < 0.0 or arr.max() > 1.0:
            raise PreprocessError(f"images[{n}] has values in [{arr.min():g}, {arr.max():g}]; expected [0, 1]")
        out[n, 0] = arr.reshape(SIDE, SIDE)
    return out


def decode(data: bytes, name: str, max_pixels: int) -> Image.Image:
    """Open an uploaded PNG or JPEG, refusing other formats and oversized images before decoding."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
            if img.format not in FORMATS:
                raise PreprocessError(f"'{name}' is {img.format}; send PNG or JPEG")
            if img.width * img.height > max_pixels:
                raise TooLarge(
                    f"'{name}' is {img.width}×{img.height} pixels, more than the limit of "
                    f"{max_pixels} (INR_MAX_UPLOAD_PIXELS)"
                )
            img.load()
            img = ImageOps.exif_transpose(img)  # phone photos: upright as the camera meant
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise TooLarge(f"'{name}' has more pixels than the limit of {max_pixels} (INR_MAX_UPLOAD_PIXELS)") from None
    except UnidentifiedImageError:
        raise PreprocessError(f"'{name}' is not a readable PNG or JPEG image") from None
    except OSError as e:
        raise PreprocessError(f"'{name}' is a damaged image: {e}") from None
    return img


def greyscale(img: Image.Image) -> np.ndarray:
    """[H, W] float64 luminance in [0,1]; transparency is flattened onto a contrasting background."""
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = np.asarray(img.convert("RGBA"), dtype=np.float64) / 255.0
        alpha = rgba[..., 3]
        lum = np.asarray(img.convert("RGBA").convert("L"), dtype=np.float64) / 255.0
        if alpha.min() < 1.0:
            drawn = alpha > 0.5
            ink_is_dark = drawn.any() and lum[drawn].mean() < 0.5
            base = 1.0 if ink_is_dark else 0.0
            return lum * alpha + base * (1.0 - alpha)
        return lum
    if img.mode.startswith("I"):  # 16-bit greyscale PNG: Pillow's convert("L") would clip it to white
        return np.clip(np.asarray(img, dtype=np.float64) / 65535.0, 0.0, 1.0)
    return np.asarray(img.convert("L"), dtype=np.float64) / 255.0


def to_white_on_black(grey: np.ndarray, name: str = "image") -> np.ndarray:
    """Invert light backgrounds (judged by the border) and stretch background → 0, ink → 1."""
    border = np.concatenate([grey[0], grey[-1], grey[:, 0], grey[:, -1]])
    if np.median(border) > 0.5:
        grey = 1.0 - grey
        border = 1.0 - border
    background = float(np.median(border))
    peak = float(grey.max())
    if peak - background < 0.1:
        raise PreprocessError(f"'{name}' has no visible digit (no ink against the background)")
    return np.clip((grey - background) / (peak - background), 0.0, 1.0)


def crop_to_ink(ink: np.ndarray) -> np.ndarray:
    rows = np.flatnonzero((ink > INK_THRESHOLD).any(axis=1))
    cols = np.flatnonzero((ink > INK_THRESHOLD).any(axis=0))
    return ink[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]


def fit_box(ink: np.ndarray, box: int = BOX) -> np.ndarray:
    """Resize so that the longest side is `box` pixels (antialiased), keeping the aspect ratio."""
    h, w = ink.shape
    scale = box / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    img = Image.fromarray(ink.astype(np.float32), "F").resize(size, Image.LANCZOS)
    return np.clip(np.asarray(img, dtype=np.float64), 0.0, 1.0)


def centre_by_mass(ink: np.ndarray, side: int = SIDE) -> np.ndarray:
    """Paste into side×side so that the centre of mass lands on the centre (integer shift, clipped)."""
    h, w = ink.shape
    total = ink.sum()
    if total > 0:
        cy, cx = (ink.sum(axis=1) @ np.arange(h)) / total, (ink.sum(axis=0) @ np.arange(w)) / total
    else:
        cy, cx = (h - 1) / 2, (w - 1) / 2
    top, left = int(round((side - 1) / 2 - cy)), int(round((side - 1) / 2 - cx))
    out = np.zeros((side, side))
    y0, x0 = max(0, top), max(0, left)
    y1, x1 = min(side, top + h), min(side, left + w)
    out[y0:y1, x0:x1] = ink[y0 - top : y1 - top, x0 - left : x1 - left]
    return out


def mnist_like(img: Image.Image, name: str = "image") -> np.ndarray:
    """[28, 28] float32 in [0,1], white digit on black, centred by mass."""
    ink = to_white_on_black(greyscale(img), name)
    return centre_by_mass(fit_box(crop_to_ink(ink))).astype(np.float32)
