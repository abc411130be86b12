"""The fit store's races, each raced by real processes (tests/fitrace.py, spawned) on SQLite,
Redis and PostgreSQL: the queue limit across submitters, derived names across submitters, a message lost by a
worker that died between taking it and claiming it, a worker that died after claiming, an API that died
inside its submit, and staleness judged by the store's clock whatever a process's own clock says."""

from __future__ import annotations

import multiprocessing
import time

import pytest

from fitstore import FitStore
from fitstore import metrics as fitmetrics
from tests import fitrace
from tests.fits import png

SPAWN = multiprocessing.get_context("spawn")


def race(n: int, target, args) -> list:
    """n processes of target(*args(i, go, out)), let go together (`go`, a barrier); what each put in `out`."""
    go, out = SPAWN.Barrier(n), SPAWN.Queue()
    procs = [SPAWN.Process(target=target, args=args(i, go, out)) for i in range(n)]
    for p in procs:
        p.start()
    got = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    return got


def run_one(target, *args) -> int:
    p = SPAWN.Process(target=target, args=args)
    p.start()
    p.join(120)
    return p.exitcode


def test_the_queue_limit_holds_when_processes_submit_at_once(url):
    image = png()
    got = race(8, fitrace.submit_many, lambda i, go, out: (url, go, out, f"p{i}", 3, 1, 2, image))
    accepted = [job for jobs in got for job in jobs if job]
    assert len(accepted) == 3, accepted  # INR_FIT_MAX_RUNNING 1 + INR_FIT_QUEUE_LIMIT 2, of 24 submits
    records = FitStore(url).list()
    assert sorted(r["id"] for r in records) == sorted(accepted)
    assert [r["state"] for r in records] == ["queued"] * 3
    assert FitStore(url).huey.pending_count() == 3  # each accepted job has its message, nothing else does


def test_derived_names_are_unique_across_processes(url):
    image = png()
    names = race(8, fitrace.submit_derived, lambda i, go, out: (url, go, out, "photo", image))
    assert sorted(names) == sorted(["photo"] + [f"photo-{k}" for k in range(2, 9)]), names
    assert sorted(r["name"] for r in FitStore(url).list()) == sorted(names)


def test_a_message_lost_by_a_dying_worker_is_sent_again_once(url):
    store = FitStore(url, stale_s=1)
    job = fitrace.submit(store, "lost", png())["id"]
    assert run_one(fitrace.take_and_die, url) == 9
    assert store.huey.pending_count() == 0 and store.get(job)["state"] == "queued"
    sent = [j for got in race(4, fitrace.sweep_twice, lambda i, go, out: (url, 1.0, go, out)) for j in got]
    assert sent == [job], sent  # four sweepers, one sends
    assert [tuple(t.args) for t in store.huey.pending()] == [(job, 1)]
    assert store.metric_counters().get("m:retries:lost_message") == 1
    assert store.claim(job, 1, "w2")["state"] == "running"
    assert store.sweep(store.list(), store.now()) == []  # claimed: nothing to recover


def test_a_waiting_message_is_not_sent_again(url):
    store = FitStore(url, stale_s=0.3)
    job = fitrace.submit(store, "waits", png())["id"]
    store.sweep(store.list(), store.now())
    time.sleep(0.5)
    assert store.sweep(store.list(), store.now()) == [] and store.huey.pending_count() == 1
    assert store.get(job)["state"] == "queued"


def test_a_worker_that_died_after_claiming_is_reaped_once(url):
    store = FitStore(url, stale_s=0.5)
    job = fitrace.submit(store, "claimed", png())["id"]
    assert run_one(fitrace.claim_and_die, url, job, "dead-worker") == 9
    assert store.get(job)["state"] == "queued" and store.claim(job, 1, "w2") is None  # the dead one holds it
    time.sleep(0.7)
    reaped = [j for got in race(4, fitrace.reap, lambda i, go, out: (url, 0.5, go, out)) for j in got]
    assert reaped == [job], reaped
    rec = store.get(job)
    assert rec["state"] == "queued" and rec["attempt"] == 2 and rec["failures"] == 1
    assert "dead-worker" in store.events(job)[-1]["reason"] and "after claiming" in store.events(job)[-1]["reason"]
    assert (job, 2) in {tuple(t.args) for t in store.huey.pending()}
    assert store.claim(job, 2, "w2")["state"] == "running"
    assert store.metric_counters().get("m:retries:worker_died") == 1


def test_an_api_that_dies_inside_its_submit_leaves_nothing(url):
    if url.startswith("redis"):
        pytest.skip("a Lua script runs whole in redis-server; a client cannot die inside it")
    store = FitStore(url)
    assert run_one(fitrace.die_mid_submit, url, png()) == 9
    assert store.list() == [] and store.huey.pending_count() == 0
    assert store.kv.peek_many(["jobseq", "jobno:1"]) == {}
    rec = fitrace.submit(store, "after", png())
    assert [r["id"] for r in store.list()] == [rec["id"]] and store.huey.pending_count() == 1


def test_staleness_is_judged_by_the_stores_clock(url):
    """A worker whose clock is an hour slow is alive to everyone; a reaper whose clock is an hour fast reaps
    no live worker's job."""
    store = FitStore(url, stale_s=5)
    out, done = SPAWN.Queue(), SPAWN.Event()
    slow = SPAWN.Process(target=fitrace.skewed, args=(url, -3600, 5, "register", out, done))
    slow.start()
    try:
        out.get(timeout=120)
        assert [w["worker"] for w in store.workers()] == ["skewed"]
    finally:
        done.set()
        slow.join(30)
    seat = store.register_worker("w1", {})
    job = fitrace.submit(store, "clock", png())["id"]
    assert store.claim(job, 1, "w1")["state"] == "running"
    assert run_one(fitrace.skewed, url, 3600, 5, "reap", out, done) == 0
    assert out.get(timeout=30) == []
    assert store.get(job)["state"] == "running" and store.still_mine(store.get(job))
    store.unregister_worker(seat, "w1")


def test_metric_counters_count_each_end_once(url):
    store = FitStore(url)
    a = store.claim(fitrace.submit(store, "a", png())["id"], 1, "w1")
    store.finish(a, "succeeded", version=1)
    b = fitrace.submit(store, "b", png())
    store.cancel(b["id"])
    counters = store.metric_counters()
    assert counters["m:finished:succeeded"] == 1 and counters["m:finished:cancelled"] == 1
    buckets, total = fitmetrics.histogram(counters, "duration")
    assert buckets[-1] == ("+Inf", 1) and total >= 0
