"""Writing a rendered image to disk atomically: bands go to a temporary sibling that is renamed
into place only when the image is complete, so a failure never leaves a half-written file.

PNG output is streamed band by band (bounded memory for any size); JPEG and WebP are
encoded by Pillow from the whole image.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .calls import ClientError
from .tiles import PngWriter

FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP"}


def check_output(path: str | Path) -> Path:
    """Validate an output path before any work starts."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ClientError(f"output '{path}' must end in one of {', '.join(FORMATS)}")
    if path.exists() and path.is_dir():
        raise ClientError(f"output '{path}' is a directory")
    if not path.parent.is_dir():
        raise ClientError(f"output directory '{path.parent}' does not exist")
    return path


class ImageFileSink:
    """`with ImageFileSink(path, w, h) as sink: sink.add(band)` for each band, top to bottom."""

    def __init__(self, path: str | Path, width: int, height: int):
        self.path = check_output(path)
        self.format = FORMATS[self.path.suffix.lower()]
        self.width, self.height = width, height
        self.tmp = self.path.with_name(f".{self.path.name}.part-{os.getpid()}")
        self._file = None
        self._png: PngWriter | None = None
        self._bands: list[np.ndarray] = []

    def __enter__(self) -> "ImageFileSink":
        return self

    def add(self, band: np.ndarray) -> None:
        if self.format != "PNG":
            self._bands.append(band)
            return
        if self._png is None:
            self._file = open(self.tmp, "wb")
            self._png = PngWriter(self._file, self.width, self.height, channels=band.shape[2])
        self._png.write(band)

    def _finish(self) -> None:
        if self._png is not None:
            self._png.close()
            self._file.close()
        else:
            from PIL import Image

            image = Image.fromarray(np.concatenate(self._bands, axis=0))
            if self.format == "JPEG" and image.mode == "RGBA":
                image = image.convert("RGB")
            image.save(self.tmp, format=self.format, quality=92)
        os.replace(self.tmp, self.path)

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self._finish()
        finally:
            if self._file is not None and not self._file.closed:
                self._file.close()
            if self.tmp.exists():
                self.tmp.unlink()
