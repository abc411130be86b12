"""The fit job store on its embedded backend (SQLite) and real servers (redis-server, PostgreSQL): records, events,
limits, cancel, one claim per attempt under a race, fit slots, and dead workers retried once then failed."""

from __future__ import annotations

import json
import math
import threading
import time

import pytest

from fitstore import FitStore, JobFinished, QueueFull, StoreError
from tests.fits import png, submit


def test_a_submitted_job_is_listed_with_its_queued_event_and_image(url):
    store = FitStore(url)
    rec = submit(store, "cat")
    assert rec["state"] == "queued" and rec["attempt"] == 1 and rec["steps"] == 60
    again = FitStore(url)  # another process's view: everything is in the store
    assert again.get(rec["id"]) == rec
    assert [r["id"] for r in again.list()] == [rec["id"]]
    assert [e["type"] for e in again.events(rec["id"])] == ["queued"]
    assert again.image(rec["id"]) == png()
    assert again.active_names() == {"cat"}
    assert again.get("nope") is None and again.events("nope") == []
    second = submit(store, "dog")
    assert [r["id"] for r in again.list()] == [second["id"], rec["id"]]  # newest first


def test_over_running_plus_queue_limit_is_refused_and_nothing_is_added(url):
    store = FitStore(url)
    for i in range(3):
        submit(store, f"j{i}", max_running=1, queue_limit=2)
    with pytest.raises(QueueFull) as full:
        submit(store, "j3", max_running=1, queue_limit=2)
    assert full.value.limit == 3 and full.value.active == 3 and full.value.retry_after >= 1
    assert len(store.list()) == 3


def test_cancel_a_queued_job_wins_its_claim_so_no_worker_starts_it(url):
    store = FitStore(url)
    rec = submit(store)
    done = store.cancel(rec["id"])
    assert done["state"] == "cancelled" and done["finished"]
    assert store.claim(rec["id"], 1, "w1") is None
    assert store.image(rec["id"]) is None  # the upload is dropped with the job
    with pytest.raises(JobFinished):
        store.cancel(rec["id"])
    with pytest.raises(KeyError):
        store.cancel("unknown")
    assert [e["type"] for e in store.events(rec["id"])] == ["queued", "cancelled"]


def test_one_claim_per_attempt_when_many_processes_race(url):
    rec = submit(FitStore(url))
    stores = [FitStore(url) for _ in range(8)]
    go, won = threading.Barrier(8), []

    def race(i):
        go.wait()
        if stores[i].claim(rec["id"], 1, f"w{i}"):
            won.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    got = stores[0].get(rec["id"])
    assert got["state"] == "running" and got["worker"] == f"w{won[0]}"
    assert [e["type"] for e in stores[0].events(rec["id"])] == ["queued", "started"]


def test_fit_slots_bound_running_fits_across_workers(url):
    store = FitStore(url)
    a, b = submit(store, "a", max_running=1), submit(store, "b", max_running=1)
    assert store.claim(a["id"], 1, "w1")["state"] == "running"
    assert store.claim(b["id"], 1, "w2") is False  # every slot held: put back for later
    assert store.get(b["id"])["state"] == "queued"
    store.finish(store.get(a["id"]), "succeeded", version=1)
    assert store.claim(b["id"], 1, "w2")["state"] == "running"


def test_progress_events_keep_order_and_previews(url):
    store = FitStore(url)
    rec = store.claim(submit(store)["id"], 1, "w1")
    for step in (10, 20, 30):
        rec = store.progress(
            rec,
            {"step": step, "steps": 60, "loss": 0.1 / step, "psnr": step, "eta_s": 1.0},
            preview=b"png%d" % step if step == 20 else None,
        )
    events = store.events(rec["id"])
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5]
    assert [e.get("step") for e in events[2:]] == [10, 20, 30]
    assert store.preview(rec["id"], 4) == b"png20" and store.preview(rec["id"], 3) is None
    assert [e["seq"] for e in store.events(rec["id"], after=3)] == [4, 5]  # resume after an event id
    assert store.get(rec["id"])["step"] == 30


def test_records_and_events_are_strict_json_and_an_infinity_written_before_reads_as_null(url):
    """Issue 38: an exact fit's infinite PSNR made GET /v1/fits/ID a 500. The store writes standard JSON (a float
    that is not finite as null), and a record an earlier version wrote with `Infinity` reads as null."""
    store = FitStore(url)
    rec = store.claim(submit(store)["id"], 1, "w1")
    rec = store.progress(rec, {"step": 10, "steps": 60, "loss": math.nan, "psnr": math.inf, "eta_s": 1.0})
    raw = store.kv.peek_many([f"job:{rec['id']}", f"ev:{rec['id']}:{rec['seq']}"])
    assert len(raw) == 2 and all(b"Infinity" not in bytes(v) and b"NaN" not in bytes(v) for v in raw.values())
    assert store.get(rec["id"])["psnr"] is None and store.events(rec["id"])[-1]["loss"] is None
    old = bytes(store.kv.peek_data(f"job:{rec['id']}")).replace(b'"psnr": null', b'"psnr": Infinity')
    store.kv.put_data(f"job:{rec['id']}", old)  # as the code before the fix wrote an exact fit's PSNR
    assert store.get(rec["id"])["psnr"] is None and store.list()[0]["psnr"] is None
    done = store.finish(store.get(rec["id"]), "succeeded", version=1, metrics={"full_psnr": 100.0})
    assert json.loads(bytes(store.kv.peek_data(f"job:{rec['id']}")), parse_constant=refuse) == done


def refuse(constant: str):
    raise ValueError(f"{constant} is not JSON")


def test_a_dead_workers_job_is_retried_once_then_failed_and_reaped_once(url):
    store = FitStore(url, stale_s=0.5)
    rec = submit(store, max_running=1)
    seat = store.register_worker("w1", {})
    assert store.claim(rec["id"], 1, "w1")["worker"] == "w1"
    # w1's heartbeat is fresh: a reaper that calls 60 s stale reaps nothing (asking `store`, 0.5 s, failed
    # whenever a loaded machine took half a second from the register to the reap)
    assert FitStore(url, stale_s=60).reap() == []
    time.sleep(0.7)  # w1 stops beating: dead (a lower bound, so a slow machine only makes it deader)
    reapers = [FitStore(url, stale_s=0.5) for _ in range(4)]
    reaped = []
    threads = [threading.Thread(target=lambda s=s: reaped.extend(s.reap())) for s in reapers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert reaped == [rec["id"]]  # four reapers, one reaping
    got = store.get(rec["id"])
    assert got["state"] == "queued" and got["attempt"] == 2 and got["failures"] == 1
    retry = store.events(rec["id"])[-1]
    assert retry["type"] == "retrying" and "w1 stopped answering" in retry["reason"]
    assert store.workers() == [] and store.claim(rec["id"], 1, "late") is None  # the old attempt is gone
    store.unregister_worker(seat, "w1")

    store.register_worker("w2", {})
    assert store.claim(rec["id"], 2, "w2")["state"] == "running"  # the slot w1 held was freed
    time.sleep(0.7)
    assert store.reap() == [rec["id"]]
    failed = store.get(rec["id"])
    assert failed["state"] == "failed" and "already retried once" in failed["error"]
    assert not store.still_mine({"id": rec["id"], "attempt": 2})


def test_a_stopping_worker_hands_its_job_back_without_counting_a_failure(url):
    store = FitStore(url)
    rec = store.claim(submit(store)["id"], 1, "w1")
    back = store.hand_back(rec, "worker w1 stopped (SIGTERM) at step 5")
    assert back["state"] == "queued" and back["attempt"] == 2 and back["failures"] == 0
    assert store.claim(rec["id"], 2, "w2")["state"] == "running"


@pytest.mark.parametrize("bad", ["mysql://x/y", "sqlite:///", "", "fits.sqlite"])
def test_an_unknown_store_url_is_refused_naming_the_forms(bad):
    with pytest.raises(StoreError, match="sqlite:///"):
        FitStore(bad)


def test_a_store_written_before_jobseq_keeps_its_jobs_listed_and_numbering(url):
    """Stores made by the earlier code numbered jobs with huey's counter `jobs`; an upgrade goes on from it."""
    old = submit(FitStore(url), "old")
    store = FitStore(url)
    store.kv.delete_data("jobseq")  # as the earlier code left it: the number only in the counter
    store.kv.incr("jobs", 1)
    new = submit(store, "new")
    assert [r["id"] for r in store.list()] == [new["id"], old["id"]]
    assert store.kv.peek_many(["jobno:2"]) and store.kv.peek_many(["jobno:1"])


def test_a_worker_declared_dead_writes_nothing_over_the_retried_record(url):
    """A worker that was only slow (its heartbeat stale, then back): once reaped, its progress, its end and its
    hand-back are refused, so the retried record and its queued attempt stand."""
    store = FitStore(url, stale_s=0.3)
    rec = store.claim(submit(store)["id"], 1, "slow")  # "slow" never beat: dead to the reaper
    time.sleep(0.4)
    assert store.reap() == [rec["id"]]
    assert store.progress(dict(rec), {"step": 5, "loss": 0.1}) is None
    assert store.finish(dict(rec), "succeeded", version=1) is None
    assert store.hand_back(dict(rec), "SIGTERM") is None
    got = store.get(rec["id"])
    assert got["state"] == "queued" and got["attempt"] == 2 and got["step"] == 0
    assert store.claim(rec["id"], 2, "w2")["state"] == "running"


def test_a_job_in_pieces_shows_its_blocks_psnr_not_the_overviews(url):
    """A job fitted in blocks (docs/fits.md, "Giant images"): its running `psnr` is the blocks' training PSNR, the
    image's pixels; the overview's (a reduced image, queued first) only until a block has a loss."""
    store = FitStore(url)
    parent = store.claim(submit(store, max_running=2)["id"], 1, "w1")
    pieces = [("blocks/r0c0.onnx", png(), 10), ("blocks/r0c1.onnx", png(), 10), ("overview", png(), 10)]
    parent = store.split(parent, {"width": 96, "height": 40, "block": 48, "overlap": 12}, pieces)
    overview = store.claim(f"{parent['id']}-p2", 1, "w1")
    store.progress(overview, {"step": 5, "steps": 10, "loss": 1e-2, "psnr": 20.0, "eta_s": 1.0})
    assert store.pieces_progress(store.get(parent["id"]))["psnr"] == 20.0
    block = store.claim(f"{parent['id']}-p0", 1, "w2")
    store.progress(block, {"step": 5, "steps": 10, "loss": 1e-3, "psnr": 30.0, "eta_s": 1.0})
    progress = store.pieces_progress(store.get(parent["id"]))
    assert progress["psnr"] == 30.0 and progress["pieces"]["running"] == 2, progress
