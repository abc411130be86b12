"""The worker's calls on the fit store (mixed into fitstore.store.FitStore): claim a job's attempt and a fit slot,
report progress, finish, or hand the job back when the worker stops. Each write of a running attempt expects that
nobody declared its worker dead (fitstore.recovery), so a worker thought dead never writes over the retried record.
"""

from __future__ import annotations

import json

from . import metrics
from .quality import settle


class WorkerCalls:
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
            self.kv.delete_data(claim)  # a crash before the next line leaves the job to the sweep (fitreap)
            self.enqueue(job_id, attempt, delay=2)
            return False
        rec = self.get(job_id)
        now = self.now()
        rec.update(state="running", worker=wid, started=rec["started"] or now, attempt_started=now)
        done = self._write(rec, "started", {"attempt": attempt, "worker": wid}, expect=self._mine(rec), now=now)
        if done is None:  # declared dead between its claim and now: the attempt is the reaper's
            self._release_slots(job_id)
        return done

    def _take_slot(self, job_id: str, wid: str) -> int | None:
        n = (self._get("config") or {}).get("max_running", 1)
        for k in range(n):
            if self.kv.put_if_empty(f"slot:{k}", json.dumps({"job": job_id, "worker": wid}).encode()):
                return k
        return None

    def _release_slots(self, job_id: str) -> None:
        for key, held in self._many([f"slot:{k}" for k in range(self.slots)]).items():
            if held["job"] == job_id:
                self.kv.delete_data(key)

    @staticmethod
    def _mine(rec: dict) -> dict:
        """What the attempt's writer expects of each write: nobody declared it dead (fitreap)."""
        return {f"reap:{rec['id']}:{rec['attempt']}": None}

    def still_mine(self, rec: dict) -> bool:
        """False once another process declared this attempt's worker dead."""
        return not self.kv.has_data_for_key(f"reap:{rec['id']}:{rec['attempt']}")

    def cancel_requested(self, job_id: str) -> bool:
        return self.kv.has_data_for_key(f"cancel:{job_id}")

    def progress(self, rec: dict, data: dict, preview: bytes | None = None) -> dict | None:
        """The record with the progress event; None once the attempt was reaped (nothing written: a worker
        thought dead must not write over the retried record)."""
        rec.update({k: data[k] for k in ("step", "loss", "psnr", "eta_s") if k in data})
        return self._write(rec, "progress", data, preview=preview, expect=self._mine(rec))

    def finish(
        self,
        rec: dict,
        state: str,
        reason: str | None = None,
        expect: dict | None = None,
        puts: dict | None = None,
        **fields,
    ) -> dict | None:
        """End the job: `state`, the fields, its event and metric counters (`reason`: why it failed, one of
        metrics.FAILURES) in one transaction, done only if `expect` holds (by default: the attempt was not
        reaped); the upload and slot go."""
        expect = self._mine(rec) if expect is None else expect
        now = self.now()
        rec = settle(dict(rec, state=state, finished=now, eta_s=None, **fields))
        data = {k: rec.get(k) for k in ("error", "version", "metrics", "name") if rec.get(k) is not None}
        if state == "succeeded":
            data.update({k: rec[k] for k in ("psnr", "ssim") if rec.get(k) is not None})
        done = self._write(
            rec,
            state,
            data,
            expect=expect,
            puts=puts,
            deletes=[f"img:{rec['id']}"],
            incr=metrics.finished(rec, state, reason, now),
            now=now,
        )
        if done is not None:
            self._release_slots(rec["id"])
        return done

    def hand_back(self, rec: dict, reason: str) -> dict:
        """The worker is stopping (SIGTERM): the job goes back to the queue as a new attempt; not a failure."""
        return self._requeue(rec, reason, failed=False, why="worker_stopped", expect=self._mine(rec))
