"""Jobs by the bytes of their upload (fitstore.dedupe), on SQLite, Redis and PostgreSQL: the index written with the
job, the lookup in any state, `reuse` answering the job that counts (queued, running, succeeded) before the queue
limit, and exactly one job when processes submit the same bytes at once."""

from __future__ import annotations

import hashlib
import multiprocessing

import pytest

from fitstore import Duplicate, FitStore, QueueFull
from tests.fits import FAST, png

SPAWN = multiprocessing.get_context("spawn")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def submit(store: FitStore, name: str, data: bytes, reuse: bool = False, queue_limit: int = 8) -> dict:
    return store.submit(
        name=name,
        options=FAST,
        image_png=data,
        source={"filename": f"{name}.png", "width": 48, "height": 40, "sha256": sha(data)},
        deadline_s=300,
        max_running=1,
        queue_limit=queue_limit,
        reuse=reuse,
    )


def test_jobs_are_found_by_their_bytes_in_any_state_and_only_live_ones_count(url):
    store, data, other = FitStore(url), png(), b"other bytes"
    a = submit(store, "a", data)
    assert a["source"]["sha256"] == sha(data)
    assert [r["id"] for r in FitStore(url).with_sha256(sha(data))] == [a["id"]]
    assert store.fitted(sha(data))["id"] == a["id"] and store.fitted(sha(other)) is None
    b = submit(store, "b", data)  # without reuse: a second job, as before
    assert [r["id"] for r in store.with_sha256(sha(data).upper())] == [b["id"], a["id"]]  # newest first
    assert store.fitted(sha(data))["id"] == b["id"]
    store.cancel(b["id"])
    assert store.fitted(sha(data))["id"] == a["id"]  # a cancelled job does not count
    store.cancel(a["id"])
    assert store.fitted(sha(data)) is None
    assert [r["state"] for r in store.with_sha256(sha(data))] == ["cancelled", "cancelled"]
    with pytest.raises(ValueError):
        store.with_sha256("not-a-hash")


def test_reuse_answers_the_live_job_before_the_queue_limit_and_a_failed_one_does_not_count(url):
    store, data = FitStore(url), png()
    a = submit(store, "a", data, queue_limit=0)  # the queue is now full: 1 running + 0 queued
    with pytest.raises(Duplicate) as same:
        submit(store, "again", data, reuse=True, queue_limit=0)
    assert same.value.record["id"] == a["id"] and len(store.list()) == 1
    with pytest.raises(QueueFull):
        submit(store, "new", b"new bytes", reuse=True, queue_limit=0)
    store.register_worker("w1", {})  # a live worker: the reaper in each submit leaves its job alone
    running = store.claim(a["id"], 1, "w1")
    with pytest.raises(Duplicate):  # running counts
        submit(store, "again", data, reuse=True, queue_limit=0)
    assert store.finish(running, "failed", reason="error", error="boom")["state"] == "failed"
    b = submit(store, "again", data, reuse=True, queue_limit=0)  # a failed job does not count
    assert b["id"] != a["id"] and store.fitted(sha(data))["id"] == b["id"]
    done = store.finish(store.claim(b["id"], 1, "w1"), "succeeded", version=1)
    assert done["state"] == "succeeded"
    with pytest.raises(Duplicate) as same:  # succeeded counts
        submit(store, "third", data, reuse=True)
    assert same.value.record["id"] == b["id"]


def submit_same(url, go, out, data):
    """One API process: the same bytes with reuse, once every process is ready; the job id it got."""
    store = FitStore(url)
    go.wait()
    try:
        out.put(submit(store, "same", data, reuse=True, queue_limit=64)["id"])
    except Duplicate as e:
        out.put(e.record["id"])


def test_the_same_bytes_submitted_at_once_by_many_processes_queue_one_job(url):
    data, n = png(), 6
    go, out = SPAWN.Barrier(n), SPAWN.Queue()
    procs = [SPAWN.Process(target=submit_same, args=(url, go, out, data)) for _ in range(n)]
    for p in procs:
        p.start()
    got = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    store = FitStore(url)
    assert len(set(got)) == 1 and [r["id"] for r in store.list()] == got[:1], got
    assert [r["id"] for r in store.with_sha256(sha(data))] == got[:1]
