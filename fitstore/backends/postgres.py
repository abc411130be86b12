"""The PostgreSQL backend: huey's PostgresHuey; each transaction holds `pg_advisory_xact_lock` on the queue's
name, then `pg_notify`s as huey's own enqueue does. The clock is `clock_timestamp()`."""

from __future__ import annotations

from huey import PostgresHuey

from ..urls import StoreUrl
from .sqlite import Backend as SqlBackend


class Backend(SqlBackend):
    mark = "%s"

    def compact(self) -> None:
        """Nothing: PostgreSQL's autovacuum gives deleted rows' space back."""

    def __init__(self, storage):
        super().__init__(storage)
        self.kv, self.task, self.counter = storage.table_kv, storage.table_task, storage.table_counter

    @classmethod
    def open(cls, url: StoreUrl, name: str):
        huey = PostgresHuey(name, dsn=url.url, results=False, connect_timeout=10, create_tables=False)
        storage = huey.storage
        # huey runs its CREATE TABLE IF NOT EXISTS unlocked: PostgreSQL lets two of them on one new table race
        # (one fails on pg_type's unique index), as when several processes open a new store at once.
        with storage.db(commit=True, close=True) as curs:
            curs.execute("select pg_advisory_xact_lock(hashtext(%s))", (f"{storage.table_kv}:ddl",))
            for sql in storage.ddl:
                curs.execute(sql)
        return huey

    def now(self) -> float:
        return float(self.s.sql("select extract(epoch from clock_timestamp())", results=True)[0][0])

    def _lock(self, curs) -> None:
        curs.execute("select pg_advisory_xact_lock(hashtext(%s))", (f"{self.kv}:{self.s.name}",))

    def _notify(self, curs) -> None:
        curs.execute("select pg_notify(%s, %s)", (self.s.channel, ""))
