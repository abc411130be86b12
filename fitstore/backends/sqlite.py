"""The SQLite backend: huey's SqliteHuey, and each transaction one `BEGIN EXCLUSIVE` (huey's own `begin_sql`; in
WAL mode the same lock as `BEGIN IMMEDIATE`: the writer lock is taken before the first read), key-value rows
and the task row together.

The clock is SQLite's `julianday('now')`. A SQLite store's file must be on a local disk (WAL needs shared
memory; it does not work over a network file system), so all its processes run on one host and SQLite's
clock is that host's one clock; reading it in SQLite (through its VFS, not the process's own `time.time`)
keeps the rule the same on every backend.
"""

from __future__ import annotations

import contextlib
import sqlite3

from huey import SqliteHuey
from huey.storage import SqliteStorage

from ..urls import StoreUrl
from .base import Atomic

COMPACT_PAGES = 4096  # pages (4 KiB) given back per compact()
WAL_LIMIT = 8 << 20  # the write-ahead log is cut back to this after a checkpoint (a fit's upload passes through it)


class Storage(SqliteStorage):
    def _create_connection(self):
        conn = super()._create_connection()
        conn.execute(f"pragma journal_size_limit = {WAL_LIMIT}")
        return conn


class Backend(Atomic):
    """SQL transactions over huey's tables; PostgreSQL's backend is the same with its own marks and lock."""

    mark = "?"
    kv = "kv"
    task = "task"
    counter = "counter"

    @classmethod
    def open(cls, url: StoreUrl, name: str):
        url.prepare()
        if not url.path.exists():  # before its first table: pages freed by deletes can go back to the disk
            with contextlib.closing(sqlite3.connect(str(url.path))) as db:
                db.execute("pragma auto_vacuum = incremental")
        return SqliteHuey(name, filename=str(url.path), results=False, timeout=30, storage_class=Storage)

    def compact(self) -> None:
        """The pages that deleted records (a finished job's upload, its published pieces) left free go back to the
        disk, a few MiB at a time (a file made before auto_vacuum keeps its size: `VACUUM` shrinks it)."""
        self.s.sql(f"pragma incremental_vacuum({COMPACT_PAGES})")

    def now(self) -> float:
        return float(self.s.sql("select (julianday('now') - 2440587.5) * 86400.0", results=True)[0][0])

    def _lock(self, curs) -> None:
        pass

    def _notify(self, curs) -> None:
        pass

    def txn(self, expect: dict, puts: dict, deletes=(), enqueue=(), incr: dict | None = None) -> bool:
        s, m = self.s, self.mark
        with s.db(commit=True) as curs:  # BEGIN (EXCLUSIVE on SQLite); committed on leaving, rolled back on error
            self._lock(curs)
            for key, want in expect.items():
                curs.execute(f"select value from {self.kv} where queue = {m} and key = {m}", (s.name, key))
                row = curs.fetchone()
                if (None if row is None else bytes(row[0])) != want:
                    return False
            for key, value in puts.items():
                curs.execute(f"delete from {self.kv} where queue = {m} and key = {m}", (s.name, key))
                curs.execute(f"insert into {self.kv} (queue, key, value) values ({m}, {m}, {m})", (s.name, key, value))
            for key in deletes:
                curs.execute(f"delete from {self.kv} where queue = {m} and key = {m}", (s.name, key))
            for data in enqueue:
                curs.execute(f"insert into {self.task} (queue, data, priority) values ({m}, {m}, 0)", (s.name, data))
            for key, n in (incr or {}).items():
                curs.execute(
                    f"insert into {self.counter} (queue, key, value) values ({m}, {m}, {m}) on conflict "
                    f"(queue, key) do update set value = {self.counter}.value + excluded.value",
                    (s.name, key, n),
                )
            if enqueue:
                self._notify(curs)
        return True

    def counters(self, prefix: str) -> dict[str, int]:
        m = self.mark
        rows = self.s.sql(
            f"select key, value from {self.counter} where queue = {m} and substr(key, 1, {m}) = {m}",
            (self.s.name, len(prefix), prefix),
            results=True,
        )
        return {k: int(v) for k, v in rows}
