"""API keys: one per client, with scopes, stored hashed in a JSON file (`INR_ACCESS_KEYS`), made and revoked by
`python -m service.auth keys` or the admin API.

A key reads `inr_ID_SECRET`: the id finds its record, the secret (32 random bytes) is checked against the
record's SHA-256 in constant time. A slow password hash is not needed for a secret of 256 random bits, and a
check costs microseconds, so a key may be sent with every request like a token. The secret is shown once, when
the key is made; the file holds only its hash. Records: id, name, scopes, models (None: any its scopes allow),
created, revoked. The file is rewritten whole through a temporary file and a rename, and read again when its
mtime changes, so keys made by the CLI are seen by a running server without a restart.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from modelrepo import NAME_RE
from modelrepo.access import SCOPE_RE

log = logging.getLogger(__name__)
PREFIX = "inr_"
KEY_RE = re.compile(r"^inr_([0-9a-f]{12})_([A-Za-z0-9_-]{43})\Z")
ADMIN, FIT, READ = "admin", "fit", "read"


class KeyError_(Exception):
    """A key request that cannot be done (unknown id, a bad scope); one line."""


@dataclass
class KeyRecord:
    id: str
    name: str
    scopes: list[str]
    sha256: str
    created: float
    models: list[str] | None = None
    revoked: float | None = None
    quotas: dict = field(default_factory=dict)
    generation: int = 0  # bumped by a logout: the sessions (and their access tokens) of an older one are refused

    def public(self) -> dict:
        """The record without its hash: what the CLI and the admin API show."""
        out = asdict(self)
        del out["sha256"]
        return out


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class KeyStore:
    def __init__(self, path: Path | None):
        self.path = path
        self._lock = threading.Lock()
        self._records: dict[str, KeyRecord] = {}
        self._stamp: int | None = None

    # -- reading ---------------------------------------------------------------------------------
    def _load(self) -> dict[str, KeyRecord]:
        if self.path is None:
            return {}
        try:
            stamp = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            return {}
        if stamp != self._stamp:
            with self._lock:
                try:
                    rows = json.loads(self.path.read_text() or "[]")
                    self._records = {r["id"]: KeyRecord(**r) for r in rows}
                except (OSError, ValueError, TypeError, KeyError) as e:  # closed, not open: no key is valid
                    log.error("keys file %s unreadable (%s): every API key is refused until it is fixed", self.path, e)
                    self._records = {}
                self._stamp = stamp
        return self._records

    def check(self) -> None:
        """KeyError_ when the file exists but cannot be read as keys (the CLI stops there, not the server)."""
        if self.path is not None and self.path.exists():
            try:
                [KeyRecord(**r) for r in json.loads(self.path.read_text() or "[]")]
            except (OSError, ValueError, TypeError, KeyError) as e:
                raise KeyError_(f"keys file {self.path} is unreadable: {e}") from None

    def records(self) -> list[KeyRecord]:
        return sorted(self._load().values(), key=lambda r: r.created)

    def verify(self, key: str) -> KeyRecord | None:
        """The live record of `key`, or None (unknown id, wrong secret, revoked); constant time in the secret."""
        m = KEY_RE.match(key)
        if m is None:
            return None
        record = self._load().get(m.group(1))
        # compare even for an unknown id, so that the time does not tell which ids exist
        want = record.sha256 if record is not None else "0" * 64
        good = hmac.compare_digest(_digest(m.group(2)), want)
        return record if good and record is not None and record.revoked is None else None

    # -- writing (the CLI and the admin API) -----------------------------------------------------
    def get(self, kid: str) -> KeyRecord | None:
        return self._load().get(kid)

    def create(
        self, name: str, scopes: list[str], models: list[str] | None = None, quotas: dict | None = None
    ) -> tuple[str, KeyRecord]:
        """A new key. `models`: None for any model its scopes allow, else at least one model name (an empty list is
        refused: it would read as every model)."""
        if self.path is None:
            raise KeyError_("no key file: set INR_ACCESS_KEYS (or --keys)")
        scopes = sorted(set(scopes))
        bad = [s for s in scopes if not SCOPE_RE.match(s)]
        if not scopes or bad:
            raise KeyError_(f"scope '{bad[0] if bad else ''}' must be lower-case letters, digits, '_', '.' or '-'")
        if models is not None:
            if not models:
                raise KeyError_("models must name at least one model; leave it out for every model its scopes allow")
            odd = [m for m in models if not isinstance(m, str) or not NAME_RE.match(m)]
            if odd:
                raise KeyError_(f"models: '{str(odd[0])[:40]}' is not a model name")
        kid, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        record = KeyRecord(
            kid,
            name[:200],
            scopes,
            _digest(secret),
            time.time(),
            sorted(set(models)) if models is not None else None,
            None,
            quotas or {},
        )
        self._write(lambda rows: rows + [asdict(record)])
        return f"{PREFIX}{kid}_{secret}", record

    def revoke(self, kid: str) -> KeyRecord:
        if kid not in self._load():
            raise KeyError_(f"no key with id '{kid[:40]}'")
        now = time.time()
        self._write(lambda rows: [{**r, "revoked": r["revoked"] or now} if r["id"] == kid else r for r in rows])
        return self._load()[kid]

    def end_sessions(self, kid: str) -> KeyRecord:
        """Log out every session of the key (its generation bumped): on every replica, at their next request."""
        if kid not in self._load():
            raise KeyError_(f"no key with id '{kid[:40]}'")
        self._write(
            lambda rows: [{**r, "generation": r.get("generation", 0) + 1} if r["id"] == kid else r for r in rows]
        )
        return self._load()[kid]

    def _write(self, change) -> None:
        """Read, change and replace the file under a lock that other processes (the CLI, the server's workers,
        replicas on the shared volume) take too, so that no change is lost to another's."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, open(self.path.with_name(f".{self.path.name}.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            rows = json.loads(self.path.read_text() or "[]") if self.path.exists() else []
            text = json.dumps(change(rows), indent=1, allow_nan=False)  # strict JSON, or nothing written
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".keys-")
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
            self._stamp = None
