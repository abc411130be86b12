"""Encoded renders in the cache store (service/engine/cache.py), and the renders' HTTP validators.

A render is a pure function of the model's files and the canonical request, so its key is the
sha256 of both: the ONNX graph's (and the separable body's and first stage's) sha256 from the
loaded model, its name, version and native geometry (W, H), and the request reduced to what the pixels depend on (size,
the 2×3 sampling matrix, viewport, supersampling, background, format and, for lossy formats,
quality). A changed model folder, a new version or a reload changes the sha256s, so it can never
be answered from an old entry; the key doubles as the strong ETag.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from ..engine.cache import model_identity
from .imaging import PNG_COMPRESS_LEVEL, RenderSpec


@dataclass(frozen=True)
class CachedRender:
    etag: str
    media_type: str
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


def render_key(model, spec: RenderSpec, fmt: str, quality: int, finish: str = "") -> str:
    """sha256 hex of the model identity and the canonical render request (`finish`: a pixel operation
    after sampling, e.g. IIIF gray)."""
    canonical = {
        **model_identity(model),
        "geometry": getattr(model, "image_size", None),
        "width": spec.width,
        "height": spec.height,
        "supersample": spec.supersample,
        "matrix": [float(v) for v in spec.matrix.reshape(-1)],
        "viewport": [float(v) for v in spec.viewport],
        "background": [spec.background.mode, list(spec.background.rgb)],
        "format": fmt,
        "quality": quality if fmt in ("jpeg", "webp") else None,
    }
    if fmt == "png":  # the bytes change with the zlib level: so does the strong ETag
        canonical["png_level"] = PNG_COMPRESS_LEVEL
    if finish:
        canonical["finish"] = finish
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()


def etag_of(key: str) -> str:
    return f'"{key}"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110 If-None-Match: `*` or a list of entity tags (weak comparison, as GET requires)."""
    if not if_none_match:
        return False
    if if_none_match.strip() == "*":
        return True
    tags = [t.strip() for t in if_none_match.split(",")]
    return any((t[2:] if t.startswith("W/") else t) == etag for t in tags)
