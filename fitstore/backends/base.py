"""What a job store backend provides: huey opened on a store URL, and what huey's key-value API lacks,
per backend: one clock (the store's), a transaction that checks keys and writes records together with their
queue message, and reading the fit metric counters in one call.

`txn(expect, puts, deletes, enqueue, incr)` is all or nothing: when every key of `expect` holds the given
value (None: absent), it writes `puts`, deletes `deletes`, pushes the serialized huey messages `enqueue` and
adds to the counters `incr` (the fit metrics), at once; otherwise it writes nothing and answers False. A key
named in `expect` must only ever be written through `txn` (on PostgreSQL the transactions serialize on an
advisory lock, not on the rows). `now()` is read in the store, never in the process: no process judges
another by its own clock.
"""

from __future__ import annotations

from ..urls import StoreUrl


class Atomic:
    """A backend's transactions, clock and counters over huey's storage `s`."""

    def __init__(self, storage):
        self.s = storage

    @classmethod
    def open(cls, url: StoreUrl, name: str):
        """huey on this backend (results off: a fit's outcome lives in its record)."""
        raise NotImplementedError

    def now(self) -> float:
        raise NotImplementedError

    def txn(self, expect: dict, puts: dict, deletes=(), enqueue=(), incr: dict | None = None) -> bool:
        raise NotImplementedError

    def counters(self, prefix: str) -> dict[str, int]:
        raise NotImplementedError

    def compact(self) -> None:
        """Give the space of deleted records back (a worker calls it after each job); most backends need not."""
