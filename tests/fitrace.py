"""What the fit store race tests run in real processes (multiprocessing, spawn): each opens its own store, as an
API process or a worker would, and some die on purpose where a crash hurts most (os._exit: no cleanup)."""

from __future__ import annotations

import os
import time

from fitstore import FitStore, NameTaken, QueueFull

OPTIONS = {"preset": "fourier-small", "size": 32, "steps": 60, "protocol": "paper", "seed": 0}


def submit(
    store: FitStore, name: str, image: bytes, max_running: int = 1, queue_limit: int = 4, derived: bool = False
) -> dict:
    return store.submit(
        name=name,
        options=OPTIONS,
        image_png=image,
        derived=derived,
        source={"filename": f"{name}.png", "width": 48, "height": 40, "mode": "RGB", "frames": 1},
        deadline_s=300,
        max_running=max_running,
        queue_limit=queue_limit,
    )


def submit_many(url, go, out, tag, tries, max_running, queue_limit, image):
    """`tries` submits as fast as possible once every process is ready; the ids accepted (None: 429)."""
    store = FitStore(url)
    go.wait()
    got = []
    for i in range(tries):
        try:
            got.append(submit(store, f"{tag}-{i}", image, max_running, queue_limit)["id"])
        except QueueFull:
            got.append(None)
    out.put(got)


def submit_derived(url, go, out, base, image):
    """What the API does for an upload without a name: derive one, submit, and on NameTaken the next one."""
    store = FitStore(url)
    go.wait()
    passed = set()
    while True:
        active, n, name = store.active_names(), 1, base
        while name in active or name in passed:
            n += 1
            name = f"{base}-{n}"
        try:
            out.put(submit(store, name, image, queue_limit=64, derived=True)["name"])
            return
        except NameTaken:
            passed.add(name)


def take_and_die(url):
    """A worker that takes a message off the queue and dies before it claims the attempt."""
    store = FitStore(url)
    assert store.huey.dequeue() is not None
    os._exit(9)


def claim_and_die(url, job_id, wid):
    """A worker that claims an attempt and dies before the record says running (a heartbeat, then none)."""
    store = FitStore(url)
    store.register_worker(wid, {"pid": os.getpid()})
    store._take_slot = lambda *_: os._exit(9)
    store.claim(job_id, 1, wid)


def die_mid_submit(url, image):
    """An API process that dies inside the submit transaction, after its inserts, before its commit."""
    store = FitStore(url)
    store.atomic._notify = lambda curs: os._exit(9)
    submit(store, "never", image)


def sweep_twice(url, stale_s, go, out):
    """Two looks stale_s apart by one process (the sweep's rule); the ids it sent again."""
    store = FitStore(url, stale_s=stale_s)
    store.sweep(store.list(), store.now())
    time.sleep(stale_s + 0.2)
    go.wait()
    out.put(store.sweep(store.list(), store.now()))


def reap(url, stale_s, go, out):
    store = FitStore(url, stale_s=stale_s)
    go.wait()
    out.put(store.reap())


def skewed(url, offset_s, stale_s, action, out, done):
    """A process whose own clock is `offset_s` off: it registers a worker and beats (then waits for `done`),
    or reaps."""
    real = time.time
    time.time = lambda: real() + offset_s
    store = FitStore(url, stale_s=stale_s)
    if action == "register":
        seat = store.register_worker("skewed", {"pid": os.getpid()})
        store.beat(seat, "skewed", {"pid": os.getpid()})
        out.put(seat)
        done.wait(60)
    else:
        out.put(store.reap())
