"""Triton's response cache for inference: `response_cache { enable: true }` in a model's config.pbtxt.

A V2 inference (HTTP or gRPC) on such a model is looked up before it is batched: the key is the sha256 of the
loaded model's identity (name, version and the sha256 of its ONNX files, service/engine/cache.py
`model_identity`) and the input tensor (datatype, shape, bytes), so a new version, or a reload of changed
files, never answers from an old entry. A hit returns the stored outputs without running the model; a miss
runs it and stores a copy of all its outputs (the requested subset is picked afterwards, so one entry serves
any choice of outputs).

The store is the one the renders use (`CacheStore`, service/engine/cache.py): one LRU, one byte budget, set by
`--cache-config
local,size=BYTES` (Triton's form, INR_CACHE_CONFIG) or else INR_RENDER_CACHE_BYTES; renders and responses
evict each other by recency. Hits and misses count per model in `nv_cache_num_hits_per_model` and
`nv_cache_num_misses_per_model` with renders' (service/metrics/__init__.py).
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from .cache import CachedOutputs, CacheStore, model_identity

PREFIX = "infer:"


def response_key(model, x: np.ndarray) -> str:
    h = hashlib.sha256(json.dumps(model_identity(model), sort_keys=True).encode())
    h.update(f"{x.dtype.str}{list(x.shape)}".encode())
    h.update(np.ascontiguousarray(x).data)
    return PREFIX + h.hexdigest()


def lookup(cache: CacheStore, key: str) -> dict | None:
    entry = cache.get(key)
    return entry.outputs if isinstance(entry, CachedOutputs) else None


def store(cache: CacheStore, key: str, outputs: dict) -> None:
    """A copy of each output (a batch's outputs are views of the whole batch's arrays), read-only."""
    kept = {}
    for name, arr in outputs.items():
        arr = np.array(arr, copy=True)
        arr.setflags(write=False)
        kept[name] = arr
    cache.put(key, CachedOutputs(kept))
