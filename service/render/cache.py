"""The cache store: encoded renders (and inference responses) in memory (LRU, bounded in bytes), and the
renders' HTTP validators.

A render is a pure function of the model's files and the canonical request, so its key is the
sha256 of both: the ONNX graph's (and the separable body's and first stage's) sha256 from the
loaded model, its name, version and native geometry (W, H), and the request reduced to what the pixels depend on (size,
the 2×3 sampling matrix, viewport, supersampling, background, format and, for lossy formats,
quality). A changed model folder, a new version or a reload changes the sha256s, so it can never
be answered from an old entry; the key doubles as the strong ETag.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

import json

from .imaging import PNG_COMPRESS_LEVEL, RenderSpec


@dataclass(frozen=True)
class CachedRender:
    etag: str
    media_type: str
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class CachedOutputs:
    """A response cache entry (service/engine/response_cache.py): a model's output tensors for one input."""
    outputs: dict

    @property
    def size(self) -> int:
        return sum(a.nbytes for a in self.outputs.values())


def model_identity(model) -> dict:
    """What identifies a loaded model's function: its name, version and file digests."""
    sep = getattr(model, "separable", None)
    record = getattr(model, "record", None)
    return {"model": model.name, "version": str(model.version),
            "onnx_sha256": record.onnx_sha256 if record else None,
            "body_sha256": sep.sha256 if sep else None, "stage_sha256": sep.stage_sha256 if sep else None}


def render_key(model, spec: RenderSpec, fmt: str, quality: int, finish: str = "") -> str:
    """sha256 hex of the model identity and the canonical render request (`finish`: a pixel operation
    after sampling, e.g. IIIF gray)."""
    canonical = {
        **model_identity(model), "geometry": getattr(model, "image_size", None),
        "width": spec.width, "height": spec.height, "supersample": spec.supersample,
        "matrix": [float(v) for v in spec.matrix.reshape(-1)], "viewport": [float(v) for v in spec.viewport],
        "background": [spec.background.mode, list(spec.background.rgb)],
        "format": fmt, "quality": quality if fmt in ("jpeg", "webp") else None,
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


class RenderCache:
    """LRU bounded by `max_bytes` (the sum of the entries' sizes), thread-safe: the one store of the service's
    caches, encoded renders and (keys prefixed `infer:`) inference responses, in one budget."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.lock = threading.Lock()
        self.entries: OrderedDict[str, CachedRender] = OrderedDict()
        self.bytes = 0
        self.evictions = 0

    def get(self, key: str) -> CachedRender | None:
        with self.lock:
            entry = self.entries.get(key)
            if entry is not None:
                self.entries.move_to_end(key)
            return entry

    def put(self, key: str, entry: CachedRender | CachedOutputs) -> None:
        size = entry.size
        if size > self.max_bytes:
            return  # larger than the whole cache (or the cache is off)
        with self.lock:
            old = self.entries.pop(key, None)
            if old is not None:
                self.bytes -= old.size
            self.entries[key] = entry
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, evicted = self.entries.popitem(last=False)
                self.bytes -= evicted.size
                self.evictions += 1

    def info(self) -> dict:
        with self.lock:
            return {"entries": len(self.entries), "bytes": self.bytes, "max_bytes": self.max_bytes,
                    "evictions": self.evictions}
