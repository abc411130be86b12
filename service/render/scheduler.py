"""Fair tile scheduling: the renders in flight share the render workers tile by tile.

A render is a `TileJob`: its tiles, a function that computes one tile into the job's output, a
deadline and a cancel flag. `INR_RENDER_WORKERS` threads take one tile at a time from the job that
has had the least service so far (tiles started), the oldest first on ties — least attained service,
which is round-robin among renders that started together. A new render starts `HEAD_START` tiles
behind the least-served render in flight, so a small render (a viewer preview) runs nearly at once
instead of waiting for the big ones, while a stream of small renders can only delay a big one by that
many tiles each. Memory stays bounded: one tile's intermediates per worker, plus each render's
output image.

A job may have a `finish` (a render's encode): the worker that completes its last tile runs it, outside the
lock, and its result is the job's future's, so a render needs no other thread after its tiles.

Before each tile the job's deadline and cancel flag are checked: a render past its deadline or
abandoned by its client stops there and its future fails; tiles already running finish and are
dropped. So is its budget, when it has one: each tile's CPU seconds in its worker are summed (`busy_s`), and a job whose
tiles so far project more than `budget_s` over all its tiles stops the same way (service/render/admission.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future, InvalidStateError
from typing import Callable, Iterable

log = logging.getLogger(__name__)
HEAD_START = 32  # tiles a new render may take before it shares the workers round-robin
BUDGET_TILES = 4  # tiles done before a job's budget is judged from them (the first may warm up)


class TileJob:
    def __init__(
        self,
        tiles: Iterable,
        run_tile: Callable[[object], None],
        deadline: float | None = None,
        on_deadline: Callable[["TileJob"], Exception] | None = None,
        on_cancel: Callable[[], Exception] | None = None,
        finish: Callable[[], object] | None = None,
        budget_s: float | None = None,
        on_budget: Callable[["TileJob"], Exception] | None = None,
    ):
        self.pending = deque(tiles)
        self.total = len(self.pending)
        self.run_tile = run_tile
        self.deadline = deadline  # time.monotonic() value, or None
        # given the job, so that its error can say how far it got without closing over it: a job that a callable of
        # its own refers to is a cycle, and its tiles' painter (the model's tables) lived until Python's cycle
        # collector ran (~1 GiB of unloaded models' tables over a 1 GiB budget, docs/benchmarks.md, collection)
        self.on_deadline = on_deadline or (lambda job: TimeoutError("render deadline passed"))
        self.on_cancel = on_cancel or (lambda: RuntimeError("render cancelled"))
        self.finish = finish  # run by the worker that completes the last tile: its result is the future's
        self.budget_s = budget_s  # CPU seconds its tiles may project to; None = no budget
        self.on_budget = on_budget or (lambda job: RuntimeError("render over its budget"))
        self.busy_s = 0.0  # CPU seconds of its tiles done, in their workers' threads (time.thread_time)
        self.cancelled = threading.Event()
        self.future: Future = Future()
        self.service = 0  # tiles handed out (the scheduler's priority)
        self.done = 0
        self.failed = False
        self.started: list[int] = []  # order of tiles started (tests and benchmarks read it)

    def cancel(self) -> None:
        self.cancelled.set()

    def projected_s(self) -> float:
        """CPU seconds of all its tiles, from those done so far (0 before the first)."""
        return self.busy_s * self.total / self.done if self.done else 0.0


class TileScheduler:
    """`workers` threads computing the tiles of submitted jobs, least-served job first."""

    def __init__(self, workers: int, head_start: int = HEAD_START, name: str = "render"):
        self.head_start = head_start
        self.cond = threading.Condition()
        self.jobs: list[TileJob] = []
        self.closed = False
        self.clock = 0  # global tile counter, for TileJob.started
        self.threads = [
            threading.Thread(target=self._work, name=f"{name}-tiles-{i}", daemon=True) for i in range(workers)
        ]
        for t in self.threads:
            t.start()

    def submit(self, job: TileJob) -> Future:
        if job.total == 0:
            self._finish(job)
            return job.future
        with self.cond:
            if self.closed:
                raise RuntimeError("the render scheduler is closed")
            least = min((j.service for j in self.jobs), default=0)
            job.service = max(0, least - self.head_start)
            self.jobs.append(job)
            # every idle worker: a lone render's tiles run side by side (notify() woke one, and that one
            # then computed every tile of the render while the others slept)
            self.cond.notify_all()
        return job.future

    def in_flight(self) -> int:
        with self.cond:
            return len(self.jobs)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            for job in self.jobs:
                self._fail(job, RuntimeError("the server is shutting down"))
            self.jobs.clear()
            self.cond.notify_all()
        for t in self.threads:
            t.join(timeout=5)

    # -- workers ---------------------------------------------------------------------------------
    @staticmethod
    def _settle(job: TileJob, error: Exception | None = None, result: object = None) -> None:
        """Complete the job's future, unless its waiter has cancelled it (a client gone, or a request
        cut at the end of the shutdown grace period): then there is nobody to tell."""
        try:
            if error is None:
                job.future.set_result(result)
            else:
                job.future.set_exception(error)
        except InvalidStateError:  # cancelled from the event loop's thread since we looked
            pass

    def _finish(self, job: TileJob) -> None:
        """Every tile done: the job's `finish` (a render's encode) in this thread, outside the lock, then its
        future; not for a job whose client has gone meanwhile."""
        if job.cancelled.is_set() or job.future.cancelled():
            self._settle(job, job.on_cancel())
            return
        try:
            result = job.finish() if job.finish is not None else None
        except Exception as e:  # an encoding error fails this render only
            self._settle(job, e)
            return
        self._settle(job, result=result)

    def _fail(self, job: TileJob, error: Exception) -> None:
        """Under the lock: fail the job once and stop handing out its tiles."""
        if not job.failed:
            job.failed = True
            self._settle(job, error)
        if job in self.jobs:
            self.jobs.remove(job)

    def _next(self):
        with self.cond:
            while True:
                if self.closed:
                    return None
                job = min(self.jobs, key=lambda j: j.service, default=None)  # min is stable: oldest first
                if job is None:
                    self.cond.wait()
                    continue
                if job.cancelled.is_set() or job.future.cancelled():
                    self._fail(job, job.on_cancel())
                    continue
                if job.deadline is not None and time.monotonic() > job.deadline:
                    self._fail(job, job.on_deadline(job))
                    continue
                if job.budget_s is not None and job.done >= BUDGET_TILES and job.projected_s() > job.budget_s:
                    self._fail(job, job.on_budget(job))
                    continue
                tile = job.pending.popleft()
                job.service += 1
                job.started.append(self.clock)
                self.clock += 1
                if not job.pending:
                    self.jobs.remove(job)  # every tile handed out; the job finishes with its last one
                return job, tile

    def _work(self) -> None:
        while (item := self._next()) is not None:
            job, tile = item
            error = None
            started = time.thread_time()
            if not job.failed:
                try:
                    job.run_tile(tile)
                except Exception as e:  # a model or encoding error fails this render only
                    error = e
            busy = time.thread_time() - started
            with self.cond:
                job.done += 1
                job.busy_s += busy
                last = error is None and job.done == job.total and not job.failed
                if error is not None:
                    self._fail(job, error)
            if last:
                self._finish(job)
