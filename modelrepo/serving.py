"""Typed serving fields that an image model's version metadata carries beside its free-form
provenance, read here so that the service never walks the raw dict for them."""
from __future__ import annotations

from dataclasses import dataclass

MAX_SIDE = 65_536  # the largest width or height the service renders


def _size(value) -> tuple[int, int] | None:
    if (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_SIDE for v in value)):
        return value[0], value[1]
    return None


@dataclass(frozen=True)
class ImageSource:
    """metadata `source`: the training size [w, h] and, for an image defined at a size of its own (the
    IIIF test image), that native size. Either is None when absent or malformed."""
    size: tuple[int, int] | None = None
    native_size: tuple[int, int] | None = None

    @classmethod
    def from_metadata(cls, metadata: dict) -> "ImageSource":
        source = metadata.get("source") if isinstance(metadata, dict) else None
        if not isinstance(source, dict):
            return cls()
        return cls(_size(source.get("size")), _size(source.get("native_size")))
