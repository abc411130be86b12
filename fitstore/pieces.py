"""A fit in pieces (mixed into fitstore.store.FitStore; docs/fits.md, "Giant images"): one upload is one job, and the
blocks of its image (and its overview) are jobs of their own on the queue, which any worker takes.

* **Split.** The worker that claims the job plans the blocks and, in one transaction, writes a child job per piece
  (`parent`, `piece`, its pixels as `img:CHILD`), their queue messages, and the parent's record: still `running`,
  with no worker and its `children`, its fit slot given back. The children are not in the job list and not counted
  against the queue limit; each takes a fit slot when it runs, so `INR_FIT_MAX_RUNNING` bounds them as it does fits.
* **Pieces.** A child is claimed, retried when its worker dies and failed like any job. It ends by writing its ONNX
  file and its record (`piece:PARENT:KEY`, `piecemeta:PARENT:KEY`) in the transaction that finishes it. The pieces of
  a failed or cancelled job stay in the store until the job is deleted, so what was fitted is not lost: a later job of
  the same bytes, options and layout takes them at its split (`kept_pieces`) and fits only the rest.
* **Publish.** The worker that finishes a piece and finds every piece written takes `publish:PARENT` (one process
  wins) and writes the version at once, then finishes the parent with the whole image's metrics.
* **Failure.** A child that fails (its fit failed, or its worker died twice) fails the parent with the child's reason;
  a cancelled parent stops its children at their next step.
"""

from __future__ import annotations

import json
import statistics

from huey.constants import EmptyData

from . import metrics
from .quality import number, psnr_of, settle


def child_id(parent: str, k: int) -> str:
    return f"{parent}-p{k}"


class Pieces:
    def split(self, rec: dict, layout: dict, pieces: list[tuple[str, bytes, int]]) -> dict | None:
        """Queue a child job per piece (key, its PNG, its steps) and leave the parent waiting on them; one
        transaction, done only if the parent is still this attempt's. The parent's record, or None."""
        now = self.now()
        children, puts, messages = [], {}, []
        kept = self.kept_pieces(rec, layout, [key for key, _, _ in pieces])
        for k, (key, png, steps) in enumerate(pieces):
            cid = child_id(rec["id"], k)
            if key in kept:  # fitted for an earlier job of the same bytes, options and layout: copied, not refitted
                children.append(cid)
                puts.update(self._reused(rec, cid, key, kept[key], now, steps))
                continue
            child = {
                **{f: rec[f] for f in ("name", "options", "source", "deadline_s", "traceparent")},
                "steps": steps,
                "id": cid,
                "parent": rec["id"],
                "piece": key,
                "layout": layout,
                "state": "queued",
                "version": None,
                "created": now,
                "started": None,
                "finished": None,
                "attempt": 1,
                "failures": 0,
                "worker": None,
                "step": 0,
                "loss": None,
                "psnr": None,
                "eta_s": None,
                "error": None,
                "metrics": None,
                "seq": 1,
                "preview_seq": None,
            }
            children.append(cid)
            puts[f"img:{cid}"] = png
            puts[f"job:{cid}"] = json.dumps(child).encode()
            puts[f"ev:{cid}:1"] = json.dumps({"seq": 1, "type": "queued", "time": now, "piece": key}).encode()
            puts[f"enq:{cid}:1"] = json.dumps(now).encode()
            messages.append(self._message(cid, 1))
        if messages and pieces and pieces[-1][0] not in kept:  # the overview first: the whole image's preview early
            messages.insert(0, messages.pop())
        parent = dict(rec, worker=None, children=children, layout=layout, steps=sum(n for _, _, n in pieces), step=0)
        parent["seq"] += 1
        event = {"seq": parent["seq"], "type": "split", "time": now, "pieces": len(pieces), "layout": layout}
        puts[f"ev:{rec['id']}:{parent['seq']}"] = json.dumps(event).encode()
        puts[f"job:{rec['id']}"] = json.dumps(parent).encode()
        if not self.atomic.txn(self._mine(rec), puts, [f"img:{rec['id']}"], messages):
            return None
        self._release_slots(rec["id"])
        return parent

    def kept_pieces(self, rec: dict, layout: dict, keys: list[str]) -> dict[str, str]:
        """{piece key: the earlier job whose written piece this job may take}: a job (any state, of the newest by the
        upload's sha256) with the same options and layout. At least one piece is always left to fit: the worker
        that finishes the last one publishes the version."""
        sha256, found = (rec.get("source") or {}).get("sha256"), {}
        if not sha256:
            return found
        for old in self.with_sha256(sha256):
            if old["id"] == rec["id"] or old.get("layout") != layout or old.get("options") != rec.get("options"):
                continue
            written = self.kv.peek_many([f"piecemeta:{old['id']}:{key}" for key in keys])
            for key in keys:
                if key not in found and f"piecemeta:{old['id']}:{key}" in written:
                    found[key] = old["id"]
        if found and len(found) == len(keys):
            found.pop(keys[-1])  # the overview: fitted again, and its worker publishes
        return found

    def _reused(self, rec: dict, cid: str, key: str, source: str, now: float, steps: int) -> dict:
        """The puts of a child that takes the piece `source` fitted: succeeded at once, its files copied."""
        child = {
            **{f: rec[f] for f in ("name", "options", "source", "deadline_s", "traceparent")},
            "steps": steps,
            "id": cid,
            "parent": rec["id"],
            "piece": key,
            "state": "succeeded",
            "reused_from": source,
            "created": now,
            "started": now,
            "finished": now,
            "attempt": 1,
            "failures": 0,
            "worker": None,
            "step": steps,
            "seq": 1,
            "preview_seq": None,
        }
        event = {"seq": 1, "type": "succeeded", "time": now, "piece": key, "reused_from": source}
        return {
            f"job:{cid}": json.dumps(child).encode(),
            f"ev:{cid}:1": json.dumps(event).encode(),
            f"piece:{rec['id']}:{key}": bytes(self.kv.peek_data(f"piece:{source}:{key}")),
            f"piecemeta:{rec['id']}:{key}": bytes(self.kv.peek_data(f"piecemeta:{source}:{key}")),
        }

    def children(self, parent: dict) -> list[dict]:
        found = self._many([f"job:{c}" for c in parent.get("children") or ()])
        return [found[f"job:{c}"] for c in parent.get("children") or () if f"job:{c}" in found]

    def pieces_progress(self, parent: dict) -> dict:
        """A waiting parent's progress, from its pieces, in the fields of a one-model job's: the steps done of all
        (`step` of `steps`), the training PSNR of the pieces fitted so far, an ETA that counts the pieces still
        queued (`pieces_eta`), the pieces by state, and the overview's latest preview (`preview_of`: its job and
        event) as the whole image's."""
        kids = self.children(parent)
        states = {s: sum(c["state"] == s for c in kids) for s in ("queued", "running", "succeeded", "failed")}
        workers = len({c["worker"] for c in kids if c["state"] == "running"})
        # the whole image's preview: the overview's latest (the overview is the whole image, smaller)
        overview = kids[-1] if kids and kids[-1].get("preview_seq") else None
        fitting = [c for c in kids if c["state"] in ("running", "succeeded") and number(c.get("loss"))]
        # the image's pixels are the blocks': the overview's loss (a reduced image) only until a block has one
        losses = [c["loss"] for c in fitting if c["piece"] != "overview"] or [c["loss"] for c in fitting]
        return {
            "step": sum(c["steps"] if c["state"] == "succeeded" else c.get("step") or 0 for c in kids),
            "steps": sum(c["steps"] for c in kids) or parent["steps"],
            "loss": sum(losses) / len(losses) if losses else None,
            "psnr": psnr_of(sum(losses) / len(losses)) if losses else None,
            "eta_s": pieces_eta(kids, workers, self.now()),
            "pieces": {"total": len(kids), **states},
            "workers_on_pieces": workers,
            "preview_of": {"job": overview["id"], "seq": overview["preview_seq"]} if overview else None,
        }

    def finish_piece(self, rec: dict, onnx: bytes, piece: dict) -> dict | None:
        """The child succeeds with its piece written, in one transaction."""
        parent, key = rec["parent"], rec["piece"]
        puts = {f"piece:{parent}:{key}": onnx, f"piecemeta:{parent}:{key}": json.dumps(piece).encode()}
        return self.finish(rec, "succeeded", puts=puts, metrics=piece.get("metrics"))

    def pieces_written(self, parent: dict) -> bool:
        keys = [f"piecemeta:{parent['id']}:{c['piece']}" for c in self.children(parent)]
        return bool(keys) and len(self.kv.peek_many(keys)) == len(parent["children"])

    def claim_publish(self, parent_id: str, wid: str) -> bool:
        return self.kv.put_if_empty(f"publish:{parent_id}", wid.encode())

    def pieces(self, parent: dict) -> list[tuple[dict, object]]:
        """(record, a call that reads its ONNX file) of every piece: the files are read one at a time, when written."""
        out = []
        for child in self.children(parent):
            key = f"{parent['id']}:{child['piece']}"
            out.append((self._get(f"piecemeta:{key}"), lambda key=key: bytes(self.kv.peek_data(f"piece:{key}"))))
        return out

    def finish_parent(self, parent_id: str, state: str, reason: str | None = None, **fields) -> dict | None:
        """End a parent that waits on its children (it has no worker: whoever ends it writes it, once)."""
        while True:
            raw = self.kv.peek_data(f"job:{parent_id}")
            if raw is EmptyData:
                return None
            rec = json.loads(bytes(raw))
            if rec["state"] not in ("running", "queued"):
                return rec
            now = self.now()
            done = settle(dict(rec, state=state, finished=now, eta_s=None, seq=rec["seq"] + 1, **fields))
            if state == "succeeded":
                done["step"] = done["steps"]
            data = {k: done.get(k) for k in ("error", "version", "metrics", "name") if done.get(k) is not None}
            if state == "succeeded":
                data.update({k: done[k] for k in ("psnr", "ssim") if done.get(k) is not None})
            puts = {
                f"ev:{parent_id}:{done['seq']}": json.dumps({"seq": done["seq"], "type": state, "time": now, **data}),
                f"job:{parent_id}": json.dumps(done),
            }
            expect = {f"job:{parent_id}": bytes(raw)}
            incr = metrics.finished(done, state, reason, now)
            # published: the pieces are the version's files now (a failed or cancelled job keeps them, to be taken)
            gone = self._published_pieces(done) if state == "succeeded" else []
            if self.atomic.txn(expect, {k: v.encode() for k, v in puts.items()}, gone, (), incr):
                return done

    def _published_pieces(self, parent: dict) -> list[str]:
        keys = [f"{parent['id']}:{c['piece']}" for c in self.children(parent)]
        return [f"{kind}:{key}" for key in keys for kind in ("piece", "piecemeta")]

    def child_ended(self, child: dict) -> None:
        """A child that failed or was cancelled ends its parent the same way, naming the piece."""
        if child.get("parent") is None or child["state"] not in ("failed", "cancelled"):
            return
        why = child.get("error") or child["state"]
        self.finish_parent(
            child["parent"],
            child["state"],
            reason="error" if child["state"] == "failed" else None,
            error=f"piece {child['piece']} {child['state']}: {why}" if child["state"] == "failed" else None,
        )


def pieces_eta(kids: list[dict], workers: int, now: float) -> float | None:
    """Seconds until every piece is fitted: the longest ETA of the running pieces (each its own worker's), and the
    queued pieces' steps at the seconds per step of a whole piece (from its claim to its end: reading, start and
    export included), shared among the workers on pieces. The seconds per step come from the pieces that ended, or
    before any did, from the running ones' time so far and their ETA. None until a piece has an ETA."""
    ended = [
        (c["finished"] - c["started"]) / c["steps"]
        for c in kids
        if c["state"] == "succeeded" and not c.get("reused_from") and c.get("started") and c.get("finished")
    ]
    running = [c for c in kids if c["state"] == "running" and c.get("started")]
    guessed = [(now - c["started"] + c["eta_s"]) / c["steps"] for c in running if number(c.get("eta_s"))]
    per_step = statistics.median(ended or guessed) if ended or guessed else None
    if per_step is None:
        return None
    left = [c["eta_s"] if number(c.get("eta_s")) else per_step * (c["steps"] - (c.get("step") or 0)) for c in running]
    queued = sum(c["steps"] for c in kids if c["state"] == "queued")
    return round(max(left, default=0.0) + queued * per_step / max(1, workers), 1)
