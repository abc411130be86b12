"""The fit job store, shared by the API (which submits, reads and cancels) and the workers (which claim,
report progress and finish): huey's queue and key-value store, on SQLite, Redis or PostgreSQL.

docs/fits.md lists the keys. A job record has one writer at a time: the API until a worker claims it,
then that worker, or whoever declares the worker dead. Each hand-over goes through huey's atomic
`put_if_empty` on a key named after the job and its attempt, so exactly one process wins it. Queue
messages carry only (job id, attempt); a message for an attempt that is no longer the record's is
dropped by `claim`, so a duplicate message is harmless.

A record, its event and its queue message are written in one transaction (fitstore.backends), and a
submit checks the queue limit and a derived name in the transaction that inserts the job. Times are the
store's clock (`now`). Dead workers and lost messages are recovered in fitstore.recovery.
"""

from __future__ import annotations

import json
import socket
import uuid

from huey.constants import EmptyData

from . import jsontext, metrics
from .backends import open_store
from .dedupe import Dedupe, Duplicate
from .pieces import Pieces
from .recovery import Recovery
from .worker_calls import WorkerCalls

STATES = ("queued", "running", "succeeded", "failed", "cancelled")
FINISHED = frozenset({"succeeded", "failed", "cancelled"})
NAME_TAKEN = frozenset({"queued", "running", "succeeded"})  # a derived name is not given while a job has it
TASK = "inr.fit"
SEATS = 64  # live workers one store keeps track of (heartbeat seats)
SLOTS = 64  # the most fit slots (INR_FIT_MAX_RUNNING) a store may be configured with
LIST_LIMIT = 200  # GET /v1/fits: the newest this many jobs


class QueueFull(Exception):
    def __init__(self, active: int, limit: int, retry_after: int):
        super().__init__(f"{active} fits are queued or running, the limit is {limit}")
        self.active, self.limit, self.retry_after = active, limit, retry_after


class NameTaken(Exception):
    """A derived name another submit took first; the API derives the next one."""


class JobFinished(Exception):
    def __init__(self, record: dict):
        super().__init__(f"fit {record['id']} is already {record['state']}")
        self.record = record


def _runs_in_a_worker(job_id: str, attempt: int) -> None:
    raise RuntimeError("fits run in a worker (python -m training worker), not in this process")


def new_id() -> str:
    """A job's id: 12 lowercase hex digits."""
    return uuid.uuid4().hex[:12]


def worker_id() -> str:
    return f"{socket.gethostname()}:{uuid.uuid4().hex[:8]}"


class FitStore(WorkerCalls, Recovery, Dedupe, Pieces):
    seats, slots = SEATS, SLOTS

    def __init__(self, url: str, *, stale_s: float = 15.0, run=None):
        self.url, self.stale_s = url, stale_s
        self.huey, self.atomic = open_store(url)
        self.kv = self.huey.storage
        self.suspects: dict[tuple[str, int], tuple] = {}  # fitstore.recovery: possibly lost messages
        # The API registers a placeholder (it only enqueues); a worker registers the fit itself.
        target = run or _runs_in_a_worker

        def fit(job_id: str, attempt: int):  # defined here: huey names tasks by module, the same everywhere
            return target(job_id, attempt)

        self.task = self.huey.task(name=TASK)(fit)

    def close(self) -> None:
        self.kv.close()

    def compact(self) -> None:
        """Give the space of deleted records back to the disk (SQLite; the others do it themselves)."""
        self.atomic.compact()

    def now(self) -> float:
        """The store's clock (fitstore.backends): heartbeats, staleness, record times and deadlines."""
        return self.atomic.now()

    # -- key-value helpers -------------------------------------------------------------------
    def _get(self, key: str):
        value = self.kv.peek_data(key)
        return None if value is EmptyData else jsontext.loads(bytes(value))

    def _put(self, key: str, obj) -> None:
        self.kv.put_data(key, jsontext.dumps(obj))

    def _many(self, keys: list[str]) -> dict:
        found = self.kv.peek_many(keys) if keys else {}
        return {k: jsontext.loads(bytes(v)) for k, v in found.items()}

    def _message(self, job_id: str, attempt: int) -> bytes:
        return self.huey.serialize_task(self.task.s(job_id, attempt))

    def _write(
        self,
        rec: dict,
        kind: str,
        data: dict | None = None,
        *,
        preview: bytes | None = None,
        expect: dict | None = None,
        puts: dict | None = None,
        deletes=(),
        enqueue: bool = False,
        incr: dict | None = None,
        now: float | None = None,
    ) -> dict | None:
        """Append event `kind` to the job's history and save the record (its writer only), with `puts`,
        `deletes`, the counters `incr` and, with `enqueue`, the attempt's queue message and its `enq` marker:
        one transaction, done only if `expect` holds. The record, or None when `expect` did not hold."""
        now = self.now() if now is None else now
        rec = dict(rec, seq=rec["seq"] + 1)
        event = {"seq": rec["seq"], "type": kind, "time": now, **(data or {})}
        puts = dict(puts or {})
        if preview is not None:
            puts[f"pv:{rec['id']}:{rec['seq']}"] = preview
            event["preview"] = True
            rec["preview_seq"] = rec["seq"]
        puts[f"ev:{rec['id']}:{rec['seq']}"] = jsontext.dumps(event)  # strict JSON: null, never Infinity
        puts[f"job:{rec['id']}"] = jsontext.dumps(rec)
        message = []
        if enqueue:
            puts[f"enq:{rec['id']}:{rec['attempt']}"] = json.dumps(now).encode()
            message = [self._message(rec["id"], rec["attempt"])]
        return rec if self.atomic.txn(expect or {}, puts, deletes, message, incr) else None

    def _event(self, rec: dict, kind: str, data: dict | None = None, preview: bytes | None = None) -> dict:
        return self._write(rec, kind, data, preview=preview)

    def enqueue(self, job_id: str, attempt: int, delay: float | None = None) -> None:
        if delay:
            self.task.schedule(args=(job_id, attempt), delay=delay)
        else:
            self.task(job_id, attempt)

    # -- reading -------------------------------------------------------------------------------
    def get(self, job_id: str) -> dict | None:
        return self._get(f"job:{job_id}")

    def _seq(self) -> tuple[int, bytes | None]:
        """The number of the newest job, and its stored bytes (the submit transaction's expectation). A store
        written before `jobseq` numbered its jobs with huey's counter `jobs`: numbering goes on from there."""
        raw = self.kv.peek_data("jobseq")
        return (self.kv.incr("jobs", 0), None) if raw is EmptyData else (int(bytes(raw)), bytes(raw))

    def list(self, n: int | None = None) -> list[dict]:
        """The newest LIST_LIMIT jobs, newest first."""
        n = self._seq()[0] if n is None else n
        ids = self._many([f"jobno:{k}" for k in range(n, max(0, n - LIST_LIMIT), -1)])
        records = self._many(
            [f"job:{ids[f'jobno:{k}']}" for k in range(n, max(0, n - LIST_LIMIT), -1) if f"jobno:{k}" in ids]
        )
        return sorted(records.values(), key=lambda r: r["created"], reverse=True)

    def active_names(self) -> set[str]:
        return {r["name"] for r in self.list() if r["state"] in NAME_TAKEN}

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

    def workers(self, now: float | None = None) -> list[dict]:
        """Workers whose heartbeat is younger than stale_s, by the store's clock."""
        now = self.now() if now is None else now
        seats = self._many([f"hb:{k}" for k in range(SEATS)])
        return [hb for hb in seats.values() if now - hb["time"] <= self.stale_s]

    def metric_counters(self) -> dict[str, int]:
        return self.atomic.counters(metrics.PREFIX)

    # -- the API's side --------------------------------------------------------------------------
    def submit(
        self,
        *,
        name: str,
        options: dict,
        image_png: bytes,
        source: dict,
        deadline_s: float,
        max_running: int,
        queue_limit: int,
        derived: bool = False,
        traceparent: str | None = None,
        reuse: bool = False,
        job_id: str | None = None,
        visible=None,
        admit=None,
        access: dict | None = None,
    ) -> dict:
        """Queue a job. The queue limit and, for a `derived` name, that no queued, running or succeeded job
        among the newest has it, are checked in the transaction that inserts the job: it is done only if
        no other submit took the next job number meanwhile, else read again and retried. `traceparent`: the
        W3C trace context of the API's enqueue span, kept in the record for the worker's spans (a record
        written before it existed has none, and its fit starts a trace of its own). `source["sha256"]`, the upload's
        hash, is indexed in the same transaction (fitstore.dedupe); with `reuse`, a job with the same bytes that is
        queued, running or succeeded is raised as Duplicate(record) instead, before the queue limit is checked.
        `job_id`: one `new_id()` gave the caller before (an upload file named after its job, fitstore.uploads).
        `visible(record)`: which jobs `reuse` may answer with (the caller's view). `admit(records)`: raises to refuse
        the job given the newest records (a key's fit quotas): run in the loop the transaction retries, so two
        submits that race are both counted. `access`: the guard its publish is checked against (modelrepo.access.Guard,
        as JSON), kept in the record."""
        self._put("config", {"max_running": min(max_running, SLOTS), "stale_s": self.stale_s})
        self.reap()
        limit = max_running + queue_limit
        job_id = job_id or new_id()
        sha256 = source.get("sha256")
        while True:
            n, raw = self._seq()
            same = self.fitted(sha256, visible) if reuse and sha256 else None
            if same is not None:
                raise Duplicate(same)
            records = self.list(n)
            if admit is not None:
                admit(records)
            active = sum(r["state"] not in FINISHED for r in records)
            if active >= limit:
                raise QueueFull(active, limit, retry_after=max(1, int(self.stale_s)))
            if derived and any(r["name"] == name and r["state"] in NAME_TAKEN for r in records):
                raise NameTaken(name)
            now = self.now()
            rec = {
                "id": job_id,
                "state": "queued",
                "name": name,
                "version": None,
                "options": options,
                "source": source,
                "created": now,
                "started": None,
                "finished": None,
                "deadline_s": deadline_s,
                "attempt": 1,
                "failures": 0,
                "worker": None,
                "step": 0,
                "steps": options["steps"],
                "loss": None,
                "psnr": None,
                "eta_s": None,
                "error": None,
                "metrics": None,
                "seq": 0,
                "preview_seq": None,
                "traceparent": traceparent,
                "access": access,
            }
            puts = {
                "jobseq": str(n + 1).encode(),
                f"jobno:{n + 1}": json.dumps(job_id).encode(),
                **({f"img:{job_id}": image_png} if image_png else {}),  # none: kept as a file (fitstore.uploads)
                **self._sha_puts(sha256, job_id),
            }
            done = self._write(rec, "queued", {"name": name}, expect={"jobseq": raw}, puts=puts, enqueue=True, now=now)
            if done is not None:
                return done

    def cancel(self, job_id: str) -> dict:
        """Cancel a queued job at once, or ask a running job's worker to stop (`cancel_requested`)."""
        rec = self.get(job_id)
        if rec is None:
            raise KeyError(job_id)
        if rec["state"] in FINISHED:
            raise JobFinished(rec)
        if rec["state"] == "queued" and self.kv.put_if_empty(f"claim:{job_id}:{rec['attempt']}", b"api:cancelled"):
            rec = self.get(job_id)  # nobody else may write it now
            now = self.now()
            rec.update(state="cancelled", finished=now)
            return self._write(
                rec,
                "cancelled",
                {"reason": "cancelled while queued"},
                deletes=[f"img:{job_id}"],
                incr=metrics.finished(rec, "cancelled", None, now),
                now=now,
            )
        self.kv.put_data(f"cancel:{job_id}", b"1")
        rec = self.get(job_id)
        if rec["state"] not in FINISHED:
            rec["cancel_requested"] = True
        return rec
