"""The store's records and events as strict JSON (docs/fits.md): whatever reads them (the API's JSON responses
and event stream, a worker, a client) gets standard JSON. Python's json module otherwise writes a float that is
not finite as `Infinity` or `NaN`, which the API's encoder refuses (a 500) and no other JSON parser reads.

The writers send finite numbers (a PSNR by training.metrics.psnr_from_mse's convention: at most 100 dB, or
None); a float that is not finite all the same is written as null, with a warning, and a record written
before (issue 38: an exact fit's PSNR, `Infinity`) reads as null.
"""

from __future__ import annotations

import json
import logging
import math

log = logging.getLogger(__name__)


def _finite(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def dumps(obj) -> bytes:
    """`obj` as strict JSON; a float that is not finite becomes null."""
    try:
        return json.dumps(obj, allow_nan=False).encode()
    except ValueError:
        log.warning("fit store: a value that is not a finite number is written as null in %.200s", obj)
        return json.dumps(_finite(obj), allow_nan=False).encode()


def _null(constant: str) -> None:
    return None


def loads(raw: bytes):
    """Stored JSON; `Infinity`, `-Infinity` and `NaN` in a value written before strict writes read as null."""
    return json.loads(raw, parse_constant=_null)
