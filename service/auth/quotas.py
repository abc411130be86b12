"""Quotas per API key (docs/access.md, "Keys"): requests per second as a token bucket, and on fits over HTTP the
fits a day, the fits queued or running at once and the bytes of uploads kept. Each is answered with 429
`{"error"}` and `Retry-After`, naming the quota and the key's id.

A key's quotas are in its record (`python -m service.auth keys create --quota rps=5 --quota fits_per_day=20`). The
bucket is per process: with W workers and R replicas a key gets up to W × R times its rate; the fit quotas are
counted in the shared job store (the jobs' `source.owner`), so they hold across replicas.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from commandline import parse_bytes

KINDS = {"rps": float, "burst": int, "fits_per_day": int, "concurrent_fits": int, "bytes_stored": "bytes"}
DAY_S = 86_400
ACTIVE = ("queued", "running")
COUNTED = ("queued", "running", "succeeded")  # a failed or cancelled fit's upload is deleted


def parse(items: list[str]) -> dict:
    """`["rps=5", "bytes_stored=2GiB"]` → `{"rps": 5.0, "bytes_stored": 2147483648}`; ValueError naming the item."""
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        kind = KINDS.get(key.strip())
        if not eq or kind is None:
            raise ValueError(f"quota '{item[:60]}': expected NAME=VALUE with NAME one of {', '.join(KINDS)}")
        try:
            number = parse_bytes(value) if kind == "bytes" else kind(value)
        except ValueError:
            raise ValueError(f"quota '{item[:60]}': '{value[:40]}' is not a number") from None
        if not math.isfinite(number) or number <= 0:  # nan, inf: never stored (the file is strict JSON)
            raise ValueError(f"quota '{item[:60]}' must be a finite number more than 0")
        out[key.strip()] = number
    return out


class Buckets:
    """A token bucket per key id: `rps` tokens a second, up to `burst` (default: one second's worth, at least 1)."""

    def __init__(self):
        self._state: dict[str, tuple[float, float]] = {}  # id → (tokens, when)
        self._lock = threading.Lock()

    def take(self, kid: str, rps: float, burst: int | None = None, now: float | None = None) -> float:
        """0 when the request may go now (a token taken), else the seconds until a token is there."""
        now = time.monotonic() if now is None else now
        cap = float(burst or max(1, math.ceil(rps)))
        with self._lock:
            tokens, when = self._state.get(kid, (cap, now))
            tokens = min(cap, tokens + (now - when) * rps)
            if tokens >= 1:
                self._state[kid] = (tokens - 1, now)
                return 0.0
            self._state[kid] = (tokens, now)
            return (1 - tokens) / rps


@dataclass(frozen=True)
class Refusal:
    message: str
    retry_after: float


def fit_refusal(kid: str, quotas: dict, jobs: list[dict], upload_bytes: int, now: float | None = None):
    """Why the key may not queue another fit now (None: it may). `jobs`: the store's records, newest first."""
    now = time.time() if now is None else now
    mine = [j for j in jobs if (j.get("source") or {}).get("owner") == f"key:{kid}"]
    if "concurrent_fits" in quotas:
        active = [j for j in mine if j.get("state") in ACTIVE]
        if len(active) >= quotas["concurrent_fits"]:
            return Refusal(
                f"key {kid}: {len(active)} fits queued or running, its quota concurrent_fits is "
                f"{quotas['concurrent_fits']}; retry when one ends",
                30,
            )
    if "fits_per_day" in quotas:
        today = sorted(j["created"] for j in mine if now - j.get("created", 0) < DAY_S)
        if len(today) >= quotas["fits_per_day"]:
            wait = DAY_S - (now - today[len(today) - quotas["fits_per_day"]])
            return Refusal(
                f"key {kid}: {len(today)} fits in the last 24 hours, its quota fits_per_day is "
                f"{quotas['fits_per_day']}",
                wait,
            )
    if "bytes_stored" in quotas:
        stored = sum((j.get("source") or {}).get("bytes", 0) for j in mine if j.get("state") in COUNTED)
        if stored + upload_bytes > quotas["bytes_stored"]:
            return Refusal(
                f"key {kid}: {stored} bytes of uploads kept and {upload_bytes} more, its quota bytes_stored is "
                f"{quotas['bytes_stored']}; delete models or fits first",
                DAY_S,
            )
    return None
