"""The tile scheduler: renders take turns by tiles, a new small render goes ahead, deadlines and cancels
stop a render at its next tile, an error fails only its own render. Asserts on order, not on time."""

from __future__ import annotations

import threading
import time

import pytest

from service.render.scheduler import TileJob, TileScheduler


class Gate:
    """Holds the first tile until released, so that every job is queued before any progress."""

    def __init__(self):
        self.open = threading.Event()
        self.first = threading.Event()

    def tile(self, _):
        self.first.set()
        self.open.wait(10)


@pytest.fixture
def sched():
    s = TileScheduler(workers=1, head_start=4)
    yield s
    s.close()


def test_concurrent_renders_take_turns_tile_by_tile(sched):
    gate = Gate()
    blocker = TileJob([0], gate.tile)
    sched.submit(blocker)
    gate.first.wait(5)
    a, b = TileJob(range(6), lambda t: None), TileJob(range(6), lambda t: None)
    fa, fb = sched.submit(a), sched.submit(b)
    gate.open.set()
    fa.result(5), fb.result(5)
    order = sorted([(c, "a") for c in a.started] + [(c, "b") for c in b.started])
    assert "".join(name for _, name in order) == "ab" * 6


def test_a_new_small_render_does_not_wait_for_the_big_ones(sched):
    gate = Gate()
    big1 = TileJob(range(40), lambda t: gate.tile(t) if t == 6 else None)
    big2 = TileJob(range(40), lambda t: None)
    f1, f2 = sched.submit(big1), sched.submit(big2)
    gate.first.wait(5)  # the big renders have taken turns for 13 tiles; a small one arrives
    small = TileJob(range(3), lambda t: None)
    fs = sched.submit(small)
    gate.open.set()
    fs.result(5), f1.result(5), f2.result(5)
    held = big1.started[6]
    assert small.started == [held + 1, held + 2, held + 3], "the small render waited behind the big ones"


def test_a_newcomer_gets_only_the_head_start_then_renders_alternate(sched):
    gate = Gate()
    big = TileJob(range(100), lambda t: gate.tile(t) if t == 20 else None)
    fb = sched.submit(big)
    gate.first.wait(5)  # tile 20 holds the worker: 21 tiles handed out
    newcomer = TileJob(range(30), lambda t: None)
    fn = sched.submit(newcomer)
    gate.open.set()
    fn.result(5), fb.result(5)
    order = sorted([(c, "b") for c in big.started] + [(c, "n") for c in newcomer.started])
    names = "".join(n for c, n in order if c > big.started[20])
    assert names[:16] == "nnnn" + "bn" * 6  # 4 tiles ahead (head_start), then turns


def test_a_render_past_its_deadline_stops_at_the_next_tile_and_the_others_finish(sched):
    """The deadline passes during tile 0 by construction: the tile moves it to the present (a deadline 0.1 s
    ahead with 20 ms tiles let a machine that stalled 0.1 s before the first tile run none)."""
    ran = []

    def tile(t):
        ran.append(t)
        late.deadline = time.monotonic()

    late = TileJob(
        range(100),
        tile,
        deadline=time.monotonic() + 3600,
        on_deadline=lambda job: TimeoutError(f"late after {job.done}"),
    )
    other = TileJob(range(5), lambda t: None)
    f_late, f_other = sched.submit(late), sched.submit(other)
    with pytest.raises(TimeoutError, match="late after 1"):
        f_late.result(30)
    assert f_other.result(30) is None
    assert ran == [0]
    # no sleep needed: a failed job leaves the list under the lock that in_flight() takes, and a job whose
    # last tile was handed out has left it already
    assert sched.in_flight() == 0


def test_a_cancelled_render_stops_and_an_error_fails_only_its_render(sched):
    gate = Gate()
    cancelled = TileJob(
        range(50), lambda t: gate.tile(t) if t == 0 else None, on_cancel=lambda: ConnectionAbortedError("gone")
    )
    fc = sched.submit(cancelled)
    gate.first.wait(5)
    cancelled.cancel()

    def boom(t):
        if t == 2:
            raise ValueError("model failed")

    broken, fine = TileJob(range(5), boom), TileJob(range(5), lambda t: None)
    fbroken, ffine = sched.submit(broken), sched.submit(fine)
    gate.open.set()
    with pytest.raises(ConnectionAbortedError):
        fc.result(5)
    with pytest.raises(ValueError, match="model failed"):
        fbroken.result(5)
    assert ffine.result(5) is None
    assert cancelled.done < 50


@pytest.fixture
def thread_errors(monkeypatch):
    """Exceptions that escaped any thread during the test."""
    seen = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))
    return seen


@pytest.mark.parametrize("ending", ["shutdown", "last tile", "error", "deadline"])
def test_a_render_whose_waiter_cancelled_its_future_ends_without_an_escaped_exception(ending, thread_errors):
    """A request cut at the end of the shutdown grace period cancels the future it awaits; the tiles
    still running then end the job, which must not raise InvalidStateError in a worker thread."""
    sched = TileScheduler(workers=1, head_start=4)
    gate = Gate()

    def run_tile(t):
        gate.tile(t)
        if ending == "error":
            raise ValueError("model failed")

    job = TileJob(
        [0] if ending != "deadline" else [0, 1],
        run_tile,
        deadline=time.monotonic() + 3600 if ending == "deadline" else None,
    )
    future = sched.submit(job)
    assert gate.first.wait(30)
    assert future.cancel() is False or future.cancelled()  # a plain Future is cancellable until settled
    if ending == "shutdown":
        closer = threading.Thread(target=sched.close)
        closer.start()
        while not sched.closed:  # close() has failed the jobs and waits for the running tile
            time.sleep(0.01)
    if ending == "deadline":  # passed while tile 0 runs, by construction (a 0.2 s deadline and a 0.3 s sleep
        job.deadline = time.monotonic()  # failed the job before tile 0 when the first pick came 0.2 s late)
    gate.open.set()
    if ending == "shutdown":
        closer.join(10)
    else:
        time.sleep(0.2)
        sched.close()
    assert future.cancelled()
    assert thread_errors == []


def test_a_lone_render_runs_its_tiles_on_every_worker():
    """Each tile waits at a barrier of 2: only two workers running tiles of the one render at the same time get
    past it (when submit woke one worker, that one ran every tile and the barrier broke)."""
    s = TileScheduler(workers=2)
    try:
        barrier, threads = threading.Barrier(2, timeout=10), set()

        def tile(_):
            threads.add(threading.get_ident())
            barrier.wait()

        s.submit(TileJob(range(4), tile)).result(30)
        assert len(threads) == 2
    finally:
        s.close()
