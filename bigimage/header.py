"""What an image file is, read from its header alone: `probe(path) -> Header`, and the pixel limit.

The format is told from the file's first bytes, not its name, and only the three formats here are ever handed
to libvips, each to its own loader: a file that is something else (an SVG, a PDF, a CSV, whatever libvips could
also read) is refused before any loader sees it. Opening an image in libvips reads its header and nothing more;
pixels are decoded only when a region of it is asked for (read.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pyvips

from .errors import BigImageError, TooManyPixels, one_line

FORMATS = ("jpeg", "png", "tiff")
MAGIC = (
    (b"\xff\xd8\xff", "jpeg", False),
    (b"\x89PNG\r\n\x1a\n", "png", False),
    (b"II*\x00", "tiff", False),
    (b"MM\x00*", "tiff", False),
    (b"II+\x00", "tiff", True),  # BigTIFF: 64-bit offsets, files past 4 GiB
    (b"MM\x00+", "tiff", True),
)
DTYPES = {
    "uchar": "uint8",
    "char": "int8",
    "ushort": "uint16",
    "short": "int16",
    "uint": "uint32",
    "int": "int32",
    "float": "float32",
    "double": "float64",
    "complex": "complex64",
    "dpcomplex": "complex128",
}
# When libvips stops with an error rather than decoding what it can. JPEG and PNG: at errors, which include
# truncation ("truncated" < "error" < "warning"); damaged JPEG entropy-coded data is only a libjpeg warning and
# decodes to garbage, as in Pillow and browsers, while failing on warnings would refuse common harmless ones
# ("extraneous bytes before marker"; libpng's "known incorrect sRGB profile"). TIFF: at warnings, because a tile
# or strip that fails to decompress is only a warning in libtiff, and would otherwise come back as garbage.
FAIL_ON = {"jpeg": "error", "png": "error", "tiff": "warning"}
MAX_LEVELS = 64  # pages or SubIFDs looked at for a pyramid; real pyramids have a few dozen at most


@dataclass(frozen=True)
class Header:
    """An image as its header describes it. Sizes are in pixels, width first."""

    path: str
    format: str  # one of FORMATS
    width: int
    height: int
    bands: int  # samples per pixel as stored, alpha included (1 grey, 2 grey+alpha, 3 RGB, 4 RGBA or CMYK …)
    bits_per_sample: int  # as stored: 1, 2, 4, 8 (decoded as 8) or 16 (decoded as 16), 32 …
    dtype: str  # what the samples decode to, as numpy names it: uint8, uint16 (the two read.py converts) …
    colourspace: str  # libvips' interpretation: srgb, b-w, rgb16, grey16, cmyk …
    alpha: bool
    levels: tuple[tuple[int, int], ...]  # (width, height): the full image, then each reduced level of a pyramid
    pages: int  # the TIFF's top-level images (pages); 1 for JPEG and PNG
    tile: tuple[int, int] | None  # a tiled TIFF's tile (width, height); None for strips, JPEG, PNG
    bigtiff: bool
    interlaced: bool  # progressive JPEG or Adam7 PNG: libvips must decode these whole, memory ∝ pixels
    orientation: int  # EXIF orientation 1–8 (1: upright), reported and never applied

    @property
    def pixels(self) -> int:
        return self.width * self.height

    @property
    def pyramid(self) -> bool:
        return len(self.levels) > 1


def check_pixels(header: Header, limit: int) -> None:
    """TooManyPixels when the header declares more than `limit` pixels: the decompression-bomb guard, which needs
    nothing decoded (a PNG or TIFF of a few bytes can declare 10^10 pixels)."""
    check_size(header.path, header.width, header.height, limit)


def probe(path: str | os.PathLike, *, max_pixels: int | None = None) -> Header:
    """The header of a JPEG, PNG or TIFF, with the sizes of its pyramid levels, and nothing decoded. With
    `max_pixels`, TooManyPixels when the image is larger, checked before the levels are looked at."""
    path = os.fspath(path)
    fmt, bigtiff = sniff(path)
    image = load(path, fmt, access="sequential")
    width, height = image.width, image.height
    if max_pixels is not None:
        check_size(path, width, height, max_pixels)
    fields = set(image.get_fields())

    def field(key: str, default):
        return image.get(key) if key in fields else default

    vformat = image.format
    return Header(
        path=path,
        format=fmt,
        width=width,
        height=height,
        bands=image.bands,
        bits_per_sample=int(field("bits-per-sample", 8 * _bytes_per_sample(vformat))),
        dtype=DTYPES.get(vformat, vformat),
        colourspace=image.interpretation,
        alpha=bool(image.hasalpha()),
        levels=levels(path, image, field("n-subifds", 0), field("n-pages", 1)) if fmt == "tiff" else ((width, height),),
        pages=int(field("n-pages", 1)),
        tile=(int(field("tile-width", 0)), int(field("tile-height", 0))) if "tile-width" in fields else None,
        bigtiff=bigtiff,
        interlaced=bool(field("interlaced", 0)),
        orientation=int(field("orientation", 1)),
    )


def sniff(path: str) -> tuple[str, bool]:
    """(format, BigTIFF?) from the file's first bytes, or BigImageError for a file that is not one of FORMATS."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise BigImageError(f"{name(path)}: cannot be read ({e.strerror or e})") from None
    if not head:
        raise BigImageError(f"{name(path)}: the file is empty")
    for magic, fmt, bigtiff in MAGIC:
        if head.startswith(magic):
            return fmt, bigtiff
    raise BigImageError(f"{name(path)}: not a JPEG, PNG or TIFF (the file starts with {head[:8].hex(' ')})")


def load(
    path: str, fmt: str, *, access: str = "random", page: int = 0, subifd: int = -1, shrink: int = 1
) -> pyvips.Image:
    """The image through its format's own loader: the header read, nothing decoded. Damaged data fails the
    decode instead of coming back grey (fail_on), and a file rewritten at the same path is read again, not
    taken from libvips' cache (revalidate). `shrink` (JPEG: 1, 2, 4 or 8): libjpeg's DCT scaling, which
    decodes a fraction of the coefficients."""
    options = {"access": access, "fail_on": FAIL_ON[fmt], "revalidate": True}
    pyvips.vips_lib.vips_error_clear()  # libvips keeps earlier operations' warnings there: not this file's
    try:
        if fmt == "jpeg":
            return pyvips.Image.jpegload(path, shrink=shrink, **options)
        if fmt == "png":
            return pyvips.Image.pngload(path, **options)
        return pyvips.Image.tiffload(path, page=page, subifd=subifd, **options)
    except pyvips.Error as e:
        raise BigImageError(f"{name(path)}: not a readable {fmt.upper()} ({one_line(str(e))})") from None


def levels(path: str, image: pyvips.Image, subifds: int, pages: int) -> tuple[tuple[int, int], ...]:
    """The full size, then each reduced level: a TIFF pyramid is either SubIFDs of the first page (OME-TIFF,
    libvips' subifd=True) or pages that shrink (libvips' default, Aperio). A page that is not a smaller copy
    of the same picture (a label, a slide's macro photo, a document's next page) ends the pyramid there."""
    found = [(image.width, image.height)]
    if subifds:
        candidates = (load(path, "tiff", subifd=i) for i in range(min(int(subifds), MAX_LEVELS)))
    else:
        candidates = (load(path, "tiff", page=i) for i in range(1, min(int(pages), MAX_LEVELS)))
    full_w, full_h = found[0]
    for level in candidates:
        (last_w, last_h), (w, h) = found[-1], (level.width, level.height)
        same_shape = abs(w - full_w * h / full_h) <= max(2.0, 0.01 * w)
        if not (w < last_w and h < last_h and same_shape):
            break
        found.append((w, h))
    return tuple(found)


def name(path: str) -> str:
    """The file's name as errors show it: the last part of the path."""
    return os.path.basename(os.fspath(path)) or os.fspath(path)


def _bytes_per_sample(vformat: str) -> int:
    return {"uchar": 1, "char": 1, "ushort": 2, "short": 2, "double": 8, "complex": 8, "dpcomplex": 16}.get(vformat, 4)


def check_size(path: str, width: int, height: int, limit: int) -> None:
    """check_pixels, on a size read by the caller."""
    if width * height > limit:
        raise TooManyPixels(
            f"{name(path)}: {width}×{height} = {width * height:,} pixels, more than the limit of {limit:,}",
            width * height,
            limit,
        )
