"""The Redis backend: huey's RedisHuey; each transaction is one Lua script (EVALSHA), which no other command
interleaves. The clock is Redis `TIME`."""

from __future__ import annotations

import json

from huey import RedisHuey

from ..urls import StoreUrl
from .base import Atomic

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


class Backend(Atomic):
    def __init__(self, storage):
        super().__init__(storage)
        self._txn = storage.conn.register_script(LUA_TXN)

    @classmethod
    def open(cls, url: StoreUrl, name: str):
        return RedisHuey(name, url=url.url, results=False)

    def now(self) -> float:
        sec, usec = self.s.conn.time()
        return sec + usec / 1e6

    def txn(self, expect: dict, puts: dict, deletes=(), enqueue=(), incr: dict | None = None) -> bool:
        incr = incr or {}
        spec = {
            "expect": [[k, 0 if v is None else 1] for k, v in expect.items()],
            "puts": list(puts),
            "deletes": list(deletes),
            "enqueue": len(enqueue),
            "incr": list(incr),
        }
        args = [
            json.dumps(spec),
            *(v for v in expect.values() if v is not None),
            *puts.values(),
            *enqueue,
            *incr.values(),
        ]
        return bool(self._txn(keys=[self.s.result_key, self.s.queue_key, self.s.counter_key], args=args))

    def counters(self, prefix: str) -> dict[str, int]:
        found = self.s.conn.hgetall(self.s.counter_key)
        return {k.decode(): int(v) for k, v in found.items() if k.decode().startswith(prefix)}
