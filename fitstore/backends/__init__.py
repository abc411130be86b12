"""The job store's backends, one module each (the contract they keep: fitstore.backends.base). A new backend is a
module here with a `Backend` class, its URL scheme in fitstore.urls.SCHEMES, and one line in BACKENDS."""

from __future__ import annotations

from ..urls import StoreUrl
from . import postgres, redis, sqlite
from .base import Atomic

BACKENDS: dict[str, type[Atomic]] = {"sqlite": sqlite.Backend, "redis": redis.Backend, "postgresql": postgres.Backend}


def open_store(url: str, name: str = "inr-fits") -> tuple[object, Atomic]:
    """(huey, its Atomic) on `url`; StoreError for a URL no backend takes."""
    parsed = StoreUrl.parse(url)
    cls = BACKENDS[parsed.backend]
    huey = cls.open(parsed, name)
    return huey, cls(huey.storage)
