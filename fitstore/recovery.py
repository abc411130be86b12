"""Heartbeats and recovery in the fit store (docs/fits.md, "Life of a job"): jobs whose worker died are retried
once, then
failed; queued jobs whose queue message was lost are sent again. Any process may run it (every worker's
heartbeat thread, the API on its reads and submits); all times are the store's clock.

A worker is dead when its heartbeat is older than `stale_s`. Declaring it so is a transaction that expects
`reap:ID:ATTEMPT` absent and writes it with the retried (or failed) record, its event and its new queue
message: exactly one reaper wins, and a reaper that dies mid-way leaves nothing half-written.

A message is lost when a process dies after taking it off the queue and before claiming its attempt (a
worker between `dequeue` and `claim`, between moving due scheduled messages to the queue, or between giving
a claim back and rescheduling it). A queued job whose attempt has no claim and no message in the queue or the
schedule is a suspect; one still a suspect `stale_s` later (by the store's clock, seen by the same process)
is sent again, once: the send expects the attempt's `enq` marker as it was at the first look and rewrites
it, so of several sweepers one sends. A message sent
twice is harmless: the second finds the attempt claimed, or the record moved on, and is dropped.
"""

from __future__ import annotations

import json

from . import metrics

MAX_FAILURES = 2  # a job whose worker died is retried once; the second death fails it


class Recovery:
    """The FitStore methods that keep heartbeats and recover from dead processes (mixed into
    fitstore.store.FitStore)."""

    def register_worker(self, wid: str, info: dict) -> int:
        for k in range(self.seats):
            if self.kv.put_if_empty(f"hb:{k}", json.dumps({"worker": wid, "time": self.now(), **info}).encode()):
                return k
        raise RuntimeError(f"{self.seats} workers already hold a heartbeat seat in this store")

    def beat(self, seat: int, wid: str, info: dict) -> None:
        self._put(f"hb:{seat}", {"worker": wid, "time": self.now(), **info})

    def unregister_worker(self, seat: int, wid: str) -> None:
        held = self._get(f"hb:{seat}")
        if held and held["worker"] == wid:
            self.kv.delete_data(f"hb:{seat}")

    def _requeue(
        self, rec: dict, reason: str, failed: bool, why: str, expect: dict | None = None, puts: dict | None = None
    ) -> dict | None:
        rec = dict(
            rec,
            state="queued",
            attempt=rec["attempt"] + 1,
            failures=rec["failures"] + failed,
            worker=None,
            step=0,
            loss=None,
            psnr=None,
            eta_s=None,
        )
        done = self._write(
            rec,
            "retrying",
            {"reason": reason, "attempt": rec["attempt"]},
            expect=expect,
            puts=puts,
            enqueue=True,
            incr=metrics.retried(why),
        )
        if done is not None:
            self._release_slots(rec["id"])
        return done

    def _raw(self, keys: list[str]) -> dict[str, bytes]:
        return {k: bytes(v) for k, v in (self.kv.peek_many(keys) if keys else {}).items()}

    def reap(self) -> list[str]:
        """Retry once, or fail, each job whose worker has no live heartbeat (running, or queued with its attempt
        claimed by that worker); free the heartbeat seats and fit slots dead workers held; send again the
        messages that were lost. Each job is reaped once. The ids of the jobs reaped."""
        now = self.now()
        seats = self._many([f"hb:{k}" for k in range(self.seats)])
        live = {hb["worker"] for hb in seats.values() if now - hb["time"] <= self.stale_s}
        for key, hb in seats.items():
            if hb["worker"] not in live:
                self.kv.delete_data(key)
        records = self.list()
        waiting = [r for r in records if r.get("children") and r["state"] == "running"]
        records += [c for parent in waiting for c in self.children(parent)]  # pieces (fitstore/pieces.py)
        claims = self._raw([f"claim:{r['id']}:{r['attempt']}" for r in records if r["state"] == "queued"])
        reaped = []
        for rec in records:
            holder = claims.get(f"claim:{rec['id']}:{rec['attempt']}", b"").decode()
            if rec.get("children") is not None and rec["worker"] is None:
                continue  # waits on its pieces, which are reaped on their own
            if rec["state"] == "running" and rec["worker"] not in live:
                who, what = rec["worker"], f"at step {rec['step']}"
            elif rec["state"] == "queued" and holder and not holder.startswith("api:") and holder not in live:
                who, what = holder, f"after claiming attempt {rec['attempt']}"
            else:
                continue
            fresh = self.get(rec["id"])
            if fresh is None or (fresh["state"], fresh["attempt"]) != (rec["state"], rec["attempt"]):
                continue
            key = f"reap:{rec['id']}:{rec['attempt']}"
            mark = {key: json.dumps(now).encode()}
            reason = f"worker {who} stopped answering (no heartbeat for {self.stale_s:g} s, INR_FIT_STALE_S) {what}"
            if fresh["failures"] + 1 < MAX_FAILURES:
                done = self._requeue(fresh, reason, True, "worker_died", expect={key: None}, puts=mark)
            else:
                done = self.finish(
                    fresh,
                    "failed",
                    reason="worker_died",
                    expect={key: None},
                    puts=mark,
                    failures=fresh["failures"] + 1,
                    error=f"{reason}; the fit was already retried once after its worker died",
                )
            if done is not None:
                reaped.append(rec["id"])
                self.child_ended(done)  # a piece failed for good fails its job
        for key, held in self._many([f"slot:{k}" for k in range(self.slots)]).items():
            job = self.get(held["job"])
            if held["worker"] not in live or job is None or job["state"] in ("succeeded", "failed", "cancelled"):
                self.kv.delete_data(key)
        self.sweep([r for r in records if r["id"] not in reaped], now)
        return reaped

    def sweep(self, records: list[dict], now: float) -> list[str]:
        """Send again the message of each queued job whose attempt has had no claim and no message for
        stale_s (two looks by this process); the ids sent again."""
        queued = {(r["id"], r["attempt"]): r for r in records if r["state"] == "queued"}
        if not queued:
            self.suspects.clear()
            return []
        waiting = {tuple(t.args) for t in (*self.huey.pending(), *self.huey.scheduled())}
        claimed = self._raw([f"claim:{i}:{a}" for i, a in queued])
        lost = [k for k in queued if k not in waiting and f"claim:{k[0]}:{k[1]}" not in claimed]
        marks = self._raw([f"enq:{i}:{a}" for i, a in lost])
        seen, self.suspects = self.suspects, {}
        sent = []
        for job_id, attempt in lost:
            marker = f"enq:{job_id}:{attempt}"
            first, mark = seen.get((job_id, attempt), (now, marks.get(marker)))
            if mark != marks.get(marker):  # sent again by someone else since the first look: look afresh
                first, mark = now, marks.get(marker)
            if now - first < self.stale_s:
                self.suspects[job_id, attempt] = (first, mark)
            elif self.atomic.txn(
                {marker: mark},
                {marker: json.dumps(now).encode()},
                enqueue=[self._message(job_id, attempt)],
                incr=metrics.retried("lost_message"),
            ):
                sent.append(job_id)
        return sent
