"""The cache store: one LRU in memory, bounded in bytes, that encoded renders (service/render/cache.py) and
inference responses (service/engine/response_cache.py) share, as Triton's `--cache-config local,size=BYTES`.

Entries are keyed by a sha256 that includes the loaded model's identity (`model_identity`: its name, version
and the sha256 of its files), so a changed model folder, a new version or a reload can never be answered
from an old entry.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol


class Entry(Protocol):
    @property
    def size(self) -> int: ...


@dataclass(frozen=True)
class CachedOutputs:
    """A response cache entry (service/engine/response_cache.py): a model's output tensors for one input."""

    outputs: dict

    @property
    def size(self) -> int:
        return sum(a.nbytes for a in self.outputs.values())


def model_identity(model) -> dict:
    """What identifies a model version's function: its name, version and file digests (ModelRuntime.identity,
    the same whether it is loaded or not; for other objects, what they carry)."""
    identity = getattr(model, "identity", None)
    if isinstance(identity, dict):
        return identity
    sep = getattr(model, "separable", None)
    record = getattr(model, "record", None)
    return {
        "model": model.name,
        "version": str(model.version),
        "onnx_sha256": record.onnx_sha256 if record else None,
        "body_sha256": sep.sha256 if sep else None,
        "stage_sha256": sep.stage_sha256 if sep else None,
    }


class CacheStore:
    """LRU bounded by `max_bytes` (the sum of the entries' sizes), thread-safe: the one store of the service's
    caches, encoded renders and (keys prefixed `infer:`) inference responses, in one budget."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.lock = threading.Lock()
        self.entries: OrderedDict[str, Entry] = OrderedDict()
        self.bytes = 0
        self.evictions = 0

    def get(self, key: str) -> Entry | None:
        with self.lock:
            entry = self.entries.get(key)
            if entry is not None:
                self.entries.move_to_end(key)
            return entry

    def put(self, key: str, entry: Entry) -> None:
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
            return {
                "entries": len(self.entries),
                "bytes": self.bytes,
                "max_bytes": self.max_bytes,
                "evictions": self.evictions,
            }
