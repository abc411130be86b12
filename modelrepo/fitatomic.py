"""The fit store's backends: huey opened on a store URL, and what huey's key-value API lacks, per backend:
one clock (the store's), a transaction that checks keys and writes records together with their queue
message, and reading the fit metric counters in one call.

`txn(expect, puts, deletes, enqueue, incr)` is all or nothing: when every key of `expect` holds the given
value (None: absent), it writes `puts`, deletes `deletes`, pushes the serialized huey messages `enqueue` and
adds to the counters `incr` (the fit metrics), at once; otherwise it writes nothing and answers False. A key
named in `expect` must only ever be written through `txn` (on PostgreSQL the transactions serialize on an
advisory lock, not on the rows):

- SQLite: one `BEGIN EXCLUSIVE` transaction (huey's own `begin_sql`; in WAL mode the same lock as
  `BEGIN IMMEDIATE`: the writer lock is taken before the first read), kv rows and the task row together;
- Redis: one Lua script (EVALSHA), which no other command interleaves;
- PostgreSQL: one transaction holding `pg_advisory_xact_lock` on the queue's name, then `pg_notify` as
  huey's own enqueue does.

The clock (`now`) is read in the store: Redis `TIME`, PostgreSQL `clock_timestamp()`, SQLite
`julianday('now')`. A SQLite store's file must be on a local disk (WAL needs shared memory; it does not work
over a network file system), so all its processes run on one host and SQLite's clock is that host's one
clock; reading it in SQLite (through its VFS, not the process's own `time.time`) keeps the rule the same on
every backend: no process judges another by its own clock.
"""
from __future__ import annotations

import json
from pathlib import Path

from huey import PostgresHuey, RedisHuey, SqliteHuey
from huey.storage import PostgresStorage, RedisStorage, SqliteStorage


class StoreError(ValueError):
    """A store URL this module cannot open."""


def check_url(url: str) -> str:
    """The backend a store URL names (sqlite, redis, postgresql), or StoreError naming the valid forms."""
    if url.startswith("sqlite:///"):
        if not Path(url[len("sqlite:///"):]).name:
            raise StoreError(f"store URL {url!r} names no file: sqlite:///path/to/fits.sqlite")
        return "sqlite"
    if url.startswith(("redis://", "rediss://", "unix://")):
        return "redis"
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql"
    raise StoreError(f"unknown job store {url!r}: expected sqlite:///PATH, redis://HOST:PORT/DB or "
                     "postgresql://USER@HOST/DB")


def open_huey(url: str, name: str = "inr-fits"):
    """huey on `sqlite:///relative/path`, `sqlite:////absolute/path`, `redis://…` or `postgresql://…`."""
    kind = check_url(url)
    if kind == "sqlite":
        path = Path(url[len("sqlite:///"):])
        path.parent.mkdir(parents=True, exist_ok=True)
        return SqliteHuey(name, filename=str(path), results=False, timeout=30)
    if kind == "redis":
        return RedisHuey(name, url=url, results=False)
    huey = PostgresHuey(name, dsn=url, results=False, connect_timeout=10, create_tables=False)
    storage = huey.storage
    # huey runs its CREATE TABLE IF NOT EXISTS unlocked: PostgreSQL lets two of them on one new table race
    # (one fails on pg_type's unique index), as when several processes open a new store at once.
    with storage.db(commit=True, close=True) as curs:
        curs.execute("select pg_advisory_xact_lock(hashtext(%s))", (f"{storage.table_kv}:ddl",))
        for sql in storage.ddl:
            curs.execute(sql)
    return huey


LUA_TXN = """
local spec = cjson.decode(ARGV[1])
local i = 2
for _, e in ipairs(spec.expect) do
  local have = redis.call('HGET', KEYS[1], e[1])
  if e[2] == 1 then
    if have ~= ARGV[i] then return 0 end
    i = i + 1
  elseif have then
    return 0
  end
end
for _, k in ipairs(spec.puts) do redis.call('HSET', KEYS[1], k, ARGV[i]); i = i + 1 end
for _, k in ipairs(spec.deletes) do redis.call('HDEL', KEYS[1], k) end
for _ = 1, spec.enqueue do redis.call('LPUSH', KEYS[2], ARGV[i]); i = i + 1 end
for _, k in ipairs(spec.incr) do redis.call('HINCRBY', KEYS[3], k, ARGV[i]); i = i + 1 end
return 1
"""


class Atomic:
    def __init__(self, storage):
        self.s = storage

    def now(self) -> float:
        raise NotImplementedError

    def txn(self, expect: dict, puts: dict, deletes=(), enqueue=(), incr: dict | None = None) -> bool:
        raise NotImplementedError

    def counters(self, prefix: str) -> dict[str, int]:
        raise NotImplementedError


class SqlAtomic(Atomic):
    mark = "?"
    kv = "kv"
    task = "task"
    counter = "counter"

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
                curs.execute(f"insert into {self.counter} (queue, key, value) values ({m}, {m}, {m}) on conflict "
                             f"(queue, key) do update set value = {self.counter}.value + excluded.value",
                             (s.name, key, n))
            if enqueue:
                self._notify(curs)
        return True

    def counters(self, prefix: str) -> dict[str, int]:
        m = self.mark
        rows = self.s.sql(f"select key, value from {self.counter} where queue = {m} and substr(key, 1, {m}) = {m}",
                          (self.s.name, len(prefix), prefix), results=True)
        return {k: int(v) for k, v in rows}


class PostgresAtomic(SqlAtomic):
    mark = "%s"

    def __init__(self, storage):
        super().__init__(storage)
        self.kv, self.task, self.counter = storage.table_kv, storage.table_task, storage.table_counter

    def now(self) -> float:
        return float(self.s.sql("select extract(epoch from clock_timestamp())", results=True)[0][0])

    def _lock(self, curs) -> None:
        curs.execute("select pg_advisory_xact_lock(hashtext(%s))", (f"{self.kv}:{self.s.name}",))

    def _notify(self, curs) -> None:
        curs.execute("select pg_notify(%s, %s)", (self.s.channel, ""))


class RedisAtomic(Atomic):
    def __init__(self, storage):
        super().__init__(storage)
        self._txn = storage.conn.register_script(LUA_TXN)

    def now(self) -> float:
        sec, usec = self.s.conn.time()
        return sec + usec / 1e6

    def txn(self, expect: dict, puts: dict, deletes=(), enqueue=(), incr: dict | None = None) -> bool:
        incr = incr or {}
        spec = {"expect": [[k, 0 if v is None else 1] for k, v in expect.items()], "puts": list(puts),
                "deletes": list(deletes), "enqueue": len(enqueue), "incr": list(incr)}
        args = [json.dumps(spec), *(v for v in expect.values() if v is not None), *puts.values(), *enqueue,
                *incr.values()]
        return bool(self._txn(keys=[self.s.result_key, self.s.queue_key, self.s.counter_key], args=args))

    def counters(self, prefix: str) -> dict[str, int]:
        found = self.s.conn.hgetall(self.s.counter_key)
        return {k.decode(): int(v) for k, v in found.items() if k.decode().startswith(prefix)}


def atomic_for(storage) -> Atomic:
    if isinstance(storage, SqliteStorage):
        return SqlAtomic(storage)
    if isinstance(storage, RedisStorage):
        return RedisAtomic(storage)
    if isinstance(storage, PostgresStorage):
        return PostgresAtomic(storage)
    raise TypeError(f"no atomic operations for {type(storage).__name__}")
