"""An upload streamed to disk (service/fits/stream.py), made the Upload a job carries: decoded whole, or kept as a
file and read by region (docs/fits.md, "Giant images").

* **Decoded whole** (service/fits/upload.py's `decode`, into the PNG the store carries): an image of at most
  INR_MAX_UPLOAD_PIXELS whose file has at most WHOLE_BYTES, and any image that is not a JPEG, PNG or TIFF (GIF,
  WebP, BMP …), which Pillow can only decode whole: over those limits it is refused (413).
* **Kept as a file**: a JPEG, PNG or TIFF (BigTIFF and pyramidal TIFF included) with more pixels, up to
  INR_FIT_MAX_UPLOAD_PIXELS, read from its header alone (bigimage.probe, libvips): a header that declares more is
  refused before a pixel is decoded (a PNG or TIFF bomb). A progressive JPEG or interlaced PNG over
  INTERLACED_PIXELS is refused: libvips can only decode it whole. The worker reads the file a region at a time, in
  the stored orientation (EXIF orientation is recorded in `source.orientation`, not applied).
"""

from __future__ import annotations

from pathlib import Path

import bigimage

from ..errors import BadInput, TooLarge
from .stream import StreamedFile
from .upload import Upload, decode

MiB = 1 << 20
WHOLE_BYTES = 64 * MiB  # a file decoded whole into memory has at most this many bytes
INTERLACED_PIXELS = 100_000_000  # 300 MB of 8-bit RGB: what a worker's libvips may decode whole


def header_of(path: Path, filename: str) -> bigimage.Header | None:
    """The header of a JPEG, PNG or TIFF; None for another format (Pillow's, decoded whole); 400 for a file that
    starts as one of the three and whose header libvips cannot read."""
    try:
        bigimage.header.sniff(str(path))
    except bigimage.BigImageError:
        return None
    try:
        return bigimage.probe(path)
    except bigimage.BigImageError as e:
        detail = str(e).split(": ", 1)[-1]
        raise BadInput(f"'{filename}' is a damaged or truncated image: {detail}") from None


def received(file: StreamedFile, max_bytes: int, max_pixels: int, max_file_pixels: int) -> Upload:
    """The upload at `file.path` as a job's Upload: decoded whole (`png`), or kept as a file (`path`, the same
    file; `source` without its `upload` name, which the caller gives once it has named the file)."""
    filename = "".join(c for c in file.filename if c.isprintable())[-200:] or "upload"
    if file.size > max_bytes:  # BodyLimit stops the body first; this holds without it
        raise TooLarge(
            f"'{filename}' is {file.size} bytes, more than the limit of {max_bytes} (INR_FIT_MAX_UPLOAD_BYTES)"
        )
    header = header_of(file.path, filename) if file.size else None
    if header is not None and (header.pixels > max_pixels or file.size > WHOLE_BYTES):
        return by_region(file, header, filename, max_file_pixels)
    if file.size > WHOLE_BYTES:
        raise TooLarge(
            f"'{filename}' is {file.size} bytes: an image that is not a JPEG, PNG or TIFF is decoded whole, and may "
            f"have at most {WHOLE_BYTES} bytes and {max_pixels} pixels (INR_MAX_UPLOAD_PIXELS)"
        )
    try:
        return decode(file.path.read_bytes(), filename, max_bytes, max_pixels, file.sha256)
    except TooLarge as e:
        raise TooLarge(
            f"{e}; only a JPEG, PNG or TIFF may have more, up to {max_file_pixels} (INR_FIT_MAX_UPLOAD_PIXELS), "
            "read by region"
        ) from None


def by_region(file: StreamedFile, header: bigimage.Header, filename: str, max_file_pixels: int) -> Upload:
    if header.pixels > max_file_pixels:
        raise TooLarge(
            f"'{filename}' is {header.width}×{header.height} pixels, more than the limit of {max_file_pixels} "
            "(INR_FIT_MAX_UPLOAD_PIXELS)"
        )
    if header.interlaced and header.pixels > INTERLACED_PIXELS:
        kind = "a progressive JPEG" if header.format == "jpeg" else "an interlaced PNG"
        raise TooLarge(
            f"'{filename}' is {kind} of {header.width}×{header.height} pixels, which can only be decoded whole; "
            f"at most {INTERLACED_PIXELS} pixels. Save it as a baseline JPEG, a plain PNG or a tiled TIFF"
        )
    source = {
        "filename": filename,
        "width": header.width,
        "height": header.height,
        "mode": header.colourspace,
        "format": header.format.upper(),
        "frames": 1,
        "sha256": file.sha256,
        "bytes": file.size,
        "orientation": header.orientation,
        "levels": len(header.levels),
    }
    return Upload(b"", source, file.path)
