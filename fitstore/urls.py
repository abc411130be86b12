"""Job store URLs, the one parser the API (`INR_FIT_STORE`) and the workers (`--store`) share.

sqlite:///relative/path.sqlite   sqlite:////absolute/path.sqlite
redis://HOST:PORT/DB             rediss://…   unix://…
postgresql://USER:PASS@HOST/DB   postgres://…
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT = "sqlite:///build/fits.sqlite"
SQLITE = "sqlite:///"
SCHEMES = {
    "sqlite": (SQLITE,),
    "redis": ("redis://", "rediss://", "unix://"),
    "postgresql": ("postgresql://", "postgres://"),
}


class StoreError(ValueError):
    """A store URL that names no backend here, or names it wrongly."""


@dataclass(frozen=True)
class StoreUrl:
    url: str
    backend: str  # a key of SCHEMES (and of fitstore.backends.BACKENDS)
    path: Path | None = None  # SQLite's file

    @classmethod
    def parse(cls, url: str) -> "StoreUrl":
        """The backend a URL names, or StoreError naming the valid forms."""
        if url.startswith(SQLITE):
            path = Path(url[len(SQLITE) :])
            if not path.name:
                raise StoreError(f"store URL {url!r} names no file: sqlite:///path/to/fits.sqlite")
            return cls(url, "sqlite", path)
        for backend, prefixes in SCHEMES.items():
            if url.startswith(prefixes):
                return cls(url, backend)
        raise StoreError(
            f"unknown job store {url!r}: expected sqlite:///PATH, redis://HOST:PORT/DB or postgresql://USER@HOST/DB"
        )

    def exists(self) -> bool:
        """False only for a SQLite file nobody has created yet (a server backend always exists)."""
        return self.path is None or self.path.exists()

    def prepare(self) -> None:
        """What opening needs first: SQLite's folder (build/ may not exist yet)."""
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)


def check_url(url: str) -> str:
    """The backend a store URL names (sqlite, redis, postgresql), or StoreError."""
    return StoreUrl.parse(url).backend
