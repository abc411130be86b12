"""The fit job store, shared by the API (which submits, reads and cancels) and the workers (which claim,
report progress and finish): huey's queue and key-value store, on SQLite, Redis or PostgreSQL.

docs/fits.md lists the keys. A job record has one writer at a time: the API until a worker claims it,
then that worker, or whoever declares the worker dead. Each hand-over goes through huey's atomic
`put_if_empty` on a key named after the job and its attempt, so exactly one process wins it. Queue
messages carry only (job id, attempt); a message for an attempt that is no longer the record's is
dropped by `claim`.
"""
from __future__ import annotations

import json
import socket
import time
import uuid
from pathlib import Path

from huey import PostgresHuey, RedisHuey, SqliteHuey
from huey.constants import EmptyData

STATES = ("queued", "running", "succeeded", "failed", "cancelled")
FINISHED = frozenset({"succeeded", "failed", "cancelled"})
TASK = "inr.fit"
MAX_FAILURES = 2   # a job whose worker died is retried once; the second death fails it
SEATS = 64         # live workers one store keeps track of (heartbeat seats)
SLOTS = 64         # the most fit slots (INR_FIT_MAX_RUNNING) a store may be configured with
LIST_LIMIT = 200   # GET /v1/fits: the newest this many jobs

# Sets of `fit-image` options; the worker parses them with fit-image's own parser. `size`: the default cap
# on the longer side (None: the whole upload at its native size); a job's own `size` replaces it.
PRESETS: dict[str, dict] = {
    "grid": {"argv": ["--encoding", "grid", "--depth", "2", "--width", "32", "--lr", "2e-3",
                      "--batch-size", "65536", "--grid-table-bits", "8", "--fp16-weights"], "steps": 280, "size": None,
             "doc": "a multiresolution grid (instant-ngp: 8 dense levels × 2 features, the finest as fine as 8-bit "
                    "tables within 1.45 bytes per pixel allow) under a 16→32→3 MLP, started from the image's pyramid, "
                    "at the upload's native size (docs/benchmarks.md §14)"},
    "fourier": {"argv": [], "steps": 500, "size": 256,
                "doc": "fit-image's defaults: a 4×256 MLP on 256 Gaussian Fourier features (σ 10)"},
    "fourier-small": {"argv": ["--depth", "3", "--width", "64", "--features", "64"], "steps": 300, "size": 256,
                      "doc": "a 3×64 MLP on 64 Gaussian Fourier features: a quick look"},
    "sinekan": {"argv": ["--model", "sinekan"], "steps": 500, "size": 256,
                "doc": "fit-image --model sinekan's defaults (docs/benchmarks.md §1)"},
}
DEFAULT_PRESET = "grid"


class StoreError(ValueError):
    """A store URL this module cannot open."""


class QueueFull(Exception):
    def __init__(self, active: int, limit: int, retry_after: int):
        super().__init__(f"{active} fits are queued or running, the limit is {limit}")
        self.active, self.limit, self.retry_after = active, limit, retry_after


class JobFinished(Exception):
    def __init__(self, record: dict):
        super().__init__(f"fit {record['id']} is already {record['state']}")
        self.record = record


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
    return PostgresHuey(name, dsn=url, results=False)


def _runs_in_a_worker(job_id: str, attempt: int) -> None:
    raise RuntimeError("fits run in a worker (python -m training worker), not in this process")


def worker_id() -> str:
    return f"{socket.gethostname()}:{uuid.uuid4().hex[:8]}"


class FitStore:
    def __init__(self, url: str, *, stale_s: float = 15.0, run=None):
        self.url, self.stale_s = url, stale_s
        self.huey = open_huey(url)
        self.kv = self.huey.storage
        # The API registers a placeholder (it only enqueues); a worker registers the fit itself.
        target = run or _runs_in_a_worker

        def fit(job_id: str, attempt: int):  # defined here: huey names tasks by module, the same everywhere
            return target(job_id, attempt)

        self.task = self.huey.task(name=TASK)(fit)

    def close(self) -> None:
        self.kv.close()

    # -- key-value helpers -------------------------------------------------------------------
    def _get(self, key: str):
        value = self.kv.peek_data(key)
        return None if value is EmptyData else json.loads(bytes(value))

    def _put(self, key: str, obj) -> None:
        self.kv.put_data(key, json.dumps(obj).encode())

    def _many(self, keys: list[str]) -> dict:
        found = self.kv.peek_many(keys) if keys else {}
        return {k: json.loads(bytes(v)) for k, v in found.items()}

    def _event(self, rec: dict, kind: str, data: dict | None = None, preview: bytes | None = None) -> dict:
        """Append event `kind` to the job's history and save the record (its writer only)."""
        seq = rec["seq"] + 1
        event = {"seq": seq, "type": kind, "time": time.time(), **(data or {})}
        if preview is not None:
            self.kv.put_data(f"pv:{rec['id']}:{seq}", preview)
            event["preview"] = True
            rec["preview_seq"] = seq
        self._put(f"ev:{rec['id']}:{seq}", event)
        rec["seq"] = seq
        self._put(f"job:{rec['id']}", rec)
        return rec

    def enqueue(self, job_id: str, attempt: int, delay: float | None = None) -> None:
        if delay:
            self.task.schedule(args=(job_id, attempt), delay=delay)
        else:
            self.task(job_id, attempt)

    # -- reading -------------------------------------------------------------------------------
    def get(self, job_id: str) -> dict | None:
        return self._get(f"job:{job_id}")

    def list(self) -> list[dict]:
        """The newest LIST_LIMIT jobs, newest first."""
        n = self.kv.incr("jobs", 0)
        ids = self._many([f"jobno:{k}" for k in range(n, max(0, n - LIST_LIMIT), -1)])
        records = self._many([f"job:{ids[f'jobno:{k}']}" for k in range(n, max(0, n - LIST_LIMIT), -1)
                              if f"jobno:{k}" in ids])
        return sorted(records.values(), key=lambda r: r["created"], reverse=True)

    def active_names(self) -> set[str]:
        return {r["name"] for r in self.list() if r["state"] not in FINISHED}

    def events(self, job_id: str, after: int = 0) -> list[dict]:
        rec = self.get(job_id)
        if rec is None:
            return []
        found = self._many([f"ev:{job_id}:{s}" for s in range(max(0, after) + 1, rec["seq"] + 1)])
        return sorted(found.values(), key=lambda e: e["seq"])

    def preview(self, job_id: str, seq: int) -> bytes | None:
        value = self.kv.peek_data(f"pv:{job_id}:{seq}")
        return None if value is EmptyData else bytes(value)

    def image(self, job_id: str) -> bytes | None:
        value = self.kv.peek_data(f"img:{job_id}")
        return None if value is EmptyData else bytes(value)

    def workers(self) -> list[dict]:
        """Workers whose heartbeat is younger than stale_s."""
        now = time.time()
        seats = self._many([f"hb:{k}" for k in range(SEATS)])
        return [hb for hb in seats.values() if now - hb["time"] <= self.stale_s]

    # -- the API's side --------------------------------------------------------------------------
    def submit(self, *, name: str, options: dict, image_png: bytes, source: dict, deadline_s: float,
               max_running: int, queue_limit: int) -> dict:
        self._put("config", {"max_running": min(max_running, SLOTS), "stale_s": self.stale_s})
        self.reap()
        active = sum(r["state"] not in FINISHED for r in self.list())
        if active >= max_running + queue_limit:
            raise QueueFull(active, max_running + queue_limit, retry_after=max(1, int(self.stale_s)))
        job_id = uuid.uuid4().hex[:12]
        rec = {"id": job_id, "state": "queued", "name": name, "version": None, "options": options,
               "source": source, "created": time.time(), "started": None, "finished": None,
               "deadline_s": deadline_s, "attempt": 1, "failures": 0, "worker": None, "step": 0,
               "steps": options["steps"], "loss": None, "psnr": None, "eta_s": None, "error": None,
               "metrics": None, "seq": 0, "preview_seq": None}
        self.kv.put_data(f"img:{job_id}", image_png)
        rec = self._event(rec, "queued", {"name": name})
        self._put(f"jobno:{self.kv.incr('jobs')}", job_id)
        self.enqueue(job_id, 1)
        return rec

    def cancel(self, job_id: str) -> dict:
        """Cancel a queued job at once, or ask a running job's worker to stop (`cancel_requested`)."""
        rec = self.get(job_id)
        if rec is None:
            raise KeyError(job_id)
        if rec["state"] in FINISHED:
            raise JobFinished(rec)
        if rec["state"] == "queued" and self.kv.put_if_empty(f"claim:{job_id}:{rec['attempt']}", b"api:cancelled"):
            rec = self.get(job_id)  # nobody else may write it now
            rec.update(state="cancelled", finished=time.time())
            self._drop_image(job_id)
            return self._event(rec, "cancelled", {"reason": "cancelled while queued"})
        self.kv.put_data(f"cancel:{job_id}", b"1")
        rec = self.get(job_id)
        if rec["state"] not in FINISHED:
            rec["cancel_requested"] = True
        return rec

    def _drop_image(self, job_id: str) -> None:
        self.kv.delete_data(f"img:{job_id}")

    # -- the worker's side -----------------------------------------------------------------------
    def register_worker(self, wid: str, info: dict) -> int:
        for k in range(SEATS):
            if self.kv.put_if_empty(f"hb:{k}", json.dumps({"worker": wid, "time": time.time(), **info}).encode()):
                return k
        raise RuntimeError(f"{SEATS} workers already hold a heartbeat seat in this store")

    def beat(self, seat: int, wid: str, info: dict) -> None:
        self._put(f"hb:{seat}", {"worker": wid, "time": time.time(), **info})

    def unregister_worker(self, seat: int, wid: str) -> None:
        held = self._get(f"hb:{seat}")
        if held and held["worker"] == wid:
            self.kv.delete_data(f"hb:{seat}")

    def claim(self, job_id: str, attempt: int, wid: str) -> dict | None | bool:
        """Take the job's attempt and a fit slot: the record (now running), None if the attempt is not
        this message's to run (already claimed, cancelled, superseded), False if every slot is held
        (the message was put back for 2 s)."""
        rec = self.get(job_id)
        if rec is None or rec["state"] != "queued" or rec["attempt"] != attempt:
            return None
        claim = f"claim:{job_id}:{attempt}"
        if not self.kv.put_if_empty(claim, wid.encode()):
            return None
        if self._take_slot(job_id, wid) is None:
            self.kv.delete_data(claim)
            self.enqueue(job_id, attempt, delay=2)
            return False
        rec = self.get(job_id)
        now = time.time()
        rec.update(state="running", worker=wid, started=rec["started"] or now, attempt_started=now)
        return self._event(rec, "started", {"attempt": attempt, "worker": wid})

    def _take_slot(self, job_id: str, wid: str) -> int | None:
        n = (self._get("config") or {}).get("max_running", 1)
        for k in range(n):
            if self.kv.put_if_empty(f"slot:{k}", json.dumps({"job": job_id, "worker": wid}).encode()):
                return k
        return None

    def _release_slots(self, job_id: str) -> None:
        for key, held in self._many([f"slot:{k}" for k in range(SLOTS)]).items():
            if held["job"] == job_id:
                self.kv.delete_data(key)

    def still_mine(self, rec: dict) -> bool:
        """False once another process declared this attempt's worker dead."""
        return not self.kv.has_data_for_key(f"reap:{rec['id']}:{rec['attempt']}")

    def cancel_requested(self, job_id: str) -> bool:
        return self.kv.has_data_for_key(f"cancel:{job_id}")

    def progress(self, rec: dict, data: dict, preview: bytes | None = None) -> dict:
        rec.update({k: data[k] for k in ("step", "loss", "psnr", "eta_s") if k in data})
        return self._event(rec, "progress", data, preview)

    def finish(self, rec: dict, state: str, **fields) -> dict:
        rec.update(state=state, finished=time.time(), eta_s=None, **fields)
        self._drop_image(rec["id"])
        self._release_slots(rec["id"])
        data = {k: rec.get(k) for k in ("error", "version", "metrics", "name") if rec.get(k) is not None}
        return self._event(rec, state, data)

    def hand_back(self, rec: dict, reason: str) -> dict:
        """The worker is stopping (SIGTERM): the job goes back to the queue as a new attempt; not a failure."""
        return self._requeue(rec, reason, failed=False)

    def _requeue(self, rec: dict, reason: str, failed: bool) -> dict:
        rec.update(state="queued", attempt=rec["attempt"] + 1, failures=rec["failures"] + failed, worker=None,
                   step=0, loss=None, psnr=None, eta_s=None)
        self._release_slots(rec["id"])
        rec = self._event(rec, "retrying", {"reason": reason, "attempt": rec["attempt"]})
        self.enqueue(rec["id"], rec["attempt"])
        return rec

    # -- dead workers ----------------------------------------------------------------------------
    def reap(self) -> list[str]:
        """Retry once, or fail, each running job whose worker has no live heartbeat; free the heartbeat
        seats and fit slots that dead workers held. Any process may call it; each job is reaped once."""
        now = time.time()
        seats = self._many([f"hb:{k}" for k in range(SEATS)])
        live = {hb["worker"] for hb in seats.values() if now - hb["time"] <= self.stale_s}
        for key, hb in seats.items():
            if hb["worker"] not in live:
                self.kv.delete_data(key)
        reaped = []
        for rec in self.list():
            if rec["state"] != "running" or rec["worker"] in live:
                continue
            if not self.kv.put_if_empty(f"reap:{rec['id']}:{rec['attempt']}", str(now).encode()):
                continue
            rec = self.get(rec["id"])  # ours to write now
            step = rec["step"]
            reason = (f"worker {rec['worker']} stopped answering (no heartbeat for {self.stale_s:g} s, "
                      f"INR_FIT_STALE_S) at step {step}")
            if rec["failures"] + 1 < MAX_FAILURES:
                self._requeue(rec, reason, failed=True)
            else:
                self.finish(rec, "failed", failures=rec["failures"] + 1,
                            error=f"{reason}; the fit was already retried once after its worker died")
            reaped.append(rec["id"])
        for key, held in self._many([f"slot:{k}" for k in range(SLOTS)]).items():
            job = self.get(held["job"])
            if held["worker"] not in live or job is None or job["state"] in FINISHED:
                self.kv.delete_data(key)
        return reaped
