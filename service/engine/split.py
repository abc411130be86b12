"""A large run of an image model cut into pieces that run side by side: on the calling thread and on the run
threads, which every model shares (one `Splitter` per process, made by the app from INR_THREADS and
INR_SPLIT_ROWS).

An image model has one onnxruntime session with one intra-op thread (its render tiles run side by side on the
render workers: service/engine/runtime.py). A query of 20,000 coordinates on it would use one core of the machine,
and with the onnxruntime arena off (service/engine/sessions.py) take ~80 MiB of activations from the heap and give
them back on every run. Cut into pieces of a few thousand rows, the pieces run on every core at once (a session is
safe to run from several threads, and a coordinate network's rows are independent), each piece's activations
fit in the core's L2 cache, and glibc's malloc reuses the same few megabytes from one piece to the next instead of
mapping fresh pages each time (docs/benchmarks.md, peers). The memory a run holds at once falls with it:
pieces in flight times a piece's activations, whatever the rows of the request or the batch.

The caller takes pieces too, so a run never waits for a run thread: when the run threads are busy with other
requests' pieces, it does its own, as it did before there were any.

What the pieces leave behind goes back to the system after them. Pieces running side by side in glibc's one
arena (service/engine/memory.py) leave its heap fragmented: ~140 MiB of free memory stays resident after a burst of
20,000-coordinate queries on two threads, where one whole run left 19 MiB. Trimming after every run gives it back
but costs a fifth of the run; so the heap is trimmed once `TRIM_AFTER_S` after the last large run ends, and a
steady stream of large requests keeps its memory while it lasts.
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import numpy as np

from .memory import trim

TRIM_AFTER_S = 1.0  # the heap is trimmed this long after the last large run, if no other began meanwhile
Run = Callable[[np.ndarray], list[np.ndarray]]  # a session run on some rows → its outputs


class Splitter:
    """Runs of more than `rows` rows cut into pieces, spread over the caller and `threads - 1` run threads."""

    def __init__(self, threads: int, rows: int):
        self.rows = rows
        helpers = max(0, threads - 1) if rows > 0 else 0
        self.pool = ThreadPoolExecutor(helpers, thread_name_prefix="run-piece") if helpers else None
        self.width = helpers + 1  # threads that can run pieces of one run at once
        self.idle = threading.Condition()
        self.running = 0  # large runs in flight
        self.ended: float | None = None  # when the last large run ended, if the heap was not trimmed since
        self.trimmer: threading.Thread | None = None
        self.closed = False

    def pieces(self, n: int) -> int:
        """How many pieces a run of `n` rows is cut into: none over `rows`, as many as there are threads to run
        them (a multiple of `width`, so that none waits alone for the last)."""
        if self.rows <= 0 or n <= self.rows:
            return 1
        return math.ceil(n / (self.rows * self.width)) * self.width

    def run(self, run: Run, x: np.ndarray) -> list[np.ndarray]:
        """`run(x)`, in pieces when `x` has more than `rows` rows; the outputs are the pieces' joined in order."""
        k = self.pieces(len(x))
        if k == 1:
            return run(x)
        with self.idle:
            self.running += 1
        try:
            return self._run(run, x, k)
        finally:
            with self.idle:
                self.running -= 1
                self.ended = time.monotonic()
                if self.trimmer is None and not self.closed:
                    self.trimmer = threading.Thread(target=self._trim, name="run-piece-trim", daemon=True)
                    self.trimmer.start()
                self.idle.notify()

    def _run(self, run: Run, x: np.ndarray, k: int) -> list[np.ndarray]:
        size = math.ceil(len(x) / k)
        parts = [x[i : i + size] for i in range(0, len(x), size)]
        results: list[list[np.ndarray] | None] = [None] * len(parts)
        errors: list[BaseException] = []
        lock, taken = threading.Lock(), iter(range(len(parts)))

        def work() -> None:
            while not errors:
                with lock:
                    i = next(taken, None)
                if i is None:
                    return
                try:
                    results[i] = run(parts[i])
                except BaseException as e:  # noqa: BLE001 - the caller raises it
                    errors.append(e)

        helpers: list[Future] = []
        if self.pool is not None and not self.closed:  # closed: the caller runs every piece
            helpers = [self.pool.submit(work) for _ in range(min(self.width, len(parts)) - 1)]
        work()
        for f in helpers:
            if not f.cancel():  # not cancelled: it started, and ends with the last piece it took
                f.result()
        if errors:
            raise errors[0]
        return [np.concatenate([r[j] for r in results]) for j in range(len(results[0]))]

    def _trim(self) -> None:
        """The trimmer thread: gives the heap back `TRIM_AFTER_S` after the last large run ended, once (outside the
        lock, so that a run ending meanwhile does not wait for it)."""
        while True:
            with self.idle:
                while self.ended is None or self.running or time.monotonic() < self.ended + TRIM_AFTER_S:
                    if self.closed:
                        return
                    quiet = self.ended is None or self.running
                    self.idle.wait(None if quiet else self.ended + TRIM_AFTER_S - time.monotonic())
                self.ended = None
            trim()

    def close(self) -> None:
        """Stop the run threads (pieces already running finish) and the trimmer (the app's shutdown)."""
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
        with self.idle:
            self.closed = True
            self.idle.notify_all()
