"""Dynamic batching: concurrent requests to one model share one onnxruntime run.

`BatchingInference` is `await inference(model, x)` → outputs by name; the dataplane
(service/engine/dataplane.py) runs v1 query, v1 classify and V2 infer through it.

Per model there is one queue and `instances` worker tasks on the event loop (Triton's instance
count). A worker takes the oldest request and, by the policy (INR_BATCH_POLICY):
  - adaptive (the default): at once, with everything queued behind it, so an idle model adds no
    wait and batches form only while the other instances compute; when the queued rows would run
    SPLIT_RUN_S or more and other instances are idle, only its share of them (`ModelQueue.share`);
  - delay (Triton's rule; the default when INR_MAX_QUEUE_DELAY_MS is set): waits until the queued rows
    reach `max_batch` or the model's queue delay (config.pbtxt `dynamic_batching`, or
    INR_MAX_QUEUE_DELAY_MS) has passed since that request arrived;
then concatenates the inputs
along the first axis, runs them once in the thread pool and hands each request its own slice of
every output, in order. While one batch runs the next one gathers, and with two instances it
runs beside it on another core; under load batches grow by themselves.

* Rows per run: the model's `max_batch_size` (its spec), lowered by `max_batch` when set.
  A request with more rows than that runs alone, never split.
* A runtime the registry has swapped out (`retired`) gets no new queue: its queued requests
  finish on it, later ones run alone on it, and its workers stop once its queue is empty.
* A failed batched run is retried request by request, so one bad request fails alone.
* The queue is bounded (`max_queue` requests): beyond it requests get 503 at once.
* A request still queued after `queue_timeout` seconds (INR_QUEUE_TIMEOUT_S, or a shorter
  per-request `timeout`, V2's parameter) leaves the queue with 503 and Retry-After at that moment;
  once its batch runs, it finishes. A request that runs alone (more rows than the limit, or
  batching off) has the same deadline for its wait for a pool thread: Triton applies the queue
  timeout to every request not yet executing, and a caller's `timeout` means the same whichever
  path its request takes. Once its run has started, it finishes.
* A request cancelled while queued (client gone) is dropped before the run.
* `enabled=False` runs every request on its own, still timed for the metrics.
* Run here: under the adaptive policy, a request without a deadline of its own (V2's
  `timeout`, gRPC's deadline: those keep their queue, and so their answer) that is the only one in
  flight in the process (`inflight`, the drain's count of HTTP and gRPC requests), to a model with
  nothing queued or running, whose rows took at most `inline_run` seconds (INR_INLINE_RUN_MS) on the
  model's recent runs, runs on the event loop at once, without the hand-off to a pool thread and back,
  which costs about as much as a one-digit run. It first yields to the loop once, so that requests
  that arrived in the same poll (several clients) start and are counted. With other requests in
  flight it goes through the queue as before, so that their parsing overlaps the run and batches form.

Requests are validated before they are queued, so inputs in one batch have the same trailing
shape and dtype. onnxruntime sessions are safe to run from several threads, so /render (which
calls the model from the thread pool directly) can run beside a batch.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from telemetry import tracing

from ..errors import Overloaded
from ..metrics import Metrics
from .execution import Outputs, run_alone, run_batch
from .policy import BatchConfig, deadline, max_rows, queue_delay, queue_timeout
from .runtime import ModelRuntime
from .traced import recording, run_span, start_run

SPLIT_RUN_S = 0.005  # queued work at least this long is shared among the instances (ModelQueue.share)


class Pending:
    __slots__ = ("x", "rows", "future", "arrived", "timer", "trace")

    def __init__(self, x: np.ndarray, future: asyncio.Future):
        self.x, self.rows, self.future, self.arrived = x, len(x), future, time.perf_counter()
        self.timer: asyncio.TimerHandle | None = None
        self.trace = recording() if tracing.ON else None  # the request's recording `inr.infer`: traced.py


class ModelQueue:
    """The queue and worker task of one model."""

    def __init__(
        self,
        model: ModelRuntime,
        config: BatchConfig,
        metrics: Metrics | None,
        inflight: Callable[[], int] | None = None,
    ):
        self.model, self.config, self.metrics, self.inflight = model, config, metrics, inflight
        self.row_seconds = float("inf")  # seconds per row of the last runs (see timed_run); inf = none yet
        self.max_rows = max_rows(model, config)
        self.delay = queue_delay(model, config)
        self.items: deque[Pending] = deque()
        self.rows = 0  # rows queued
        self.running = 0  # batches taken from the queue and not yet answered
        self.wake = asyncio.Event()
        # The runs' own threads, one per instance: `run_in_executor` hands a batch over for about 45 µs of CPU,
        # anyio's `run_in_threadpool` for 60 (its limiter and cancel scope; docs/benchmarks.md, floor). The run
        # needs no context of the loop's: its spans are made on the loop (traced.start_run).
        self.pool = ThreadPoolExecutor(config.instances, thread_name_prefix=f"batch-{model.name}")
        loop = asyncio.get_running_loop()
        self.tasks = [
            loop.create_task(self.worker(), name=f"batcher-{model.name}-{i}") for i in range(config.instances)
        ]

    async def submit(self, x: np.ndarray, timeout: float | None = None) -> Outputs:
        if self.may_run_here(x, timeout):
            await asyncio.sleep(0)  # requests that arrived with this one start (and count) before it decides
            if self.may_run_here(x, timeout):
                return self.run_here(x)
        if len(self.items) >= self.config.max_queue:
            raise Overloaded(
                f"model '{self.model.name}' has {len(self.items)} requests waiting, the limit "
                "(INR_MAX_QUEUE); try again later"
            )
        loop = asyncio.get_running_loop()
        item = Pending(x, loop.create_future())
        limit, what = deadline(self.config, timeout)
        item.timer = loop.call_later(limit, self._timed_out, item, limit, what)
        self.items.append(item)
        self.rows += item.rows
        self._pending(+1)
        self.wake.set()
        return await item.future

    def may_run_here(self, x: np.ndarray, timeout: float | None) -> bool:
        return (
            timeout is None
            and not self.delay
            and self.inflight is not None
            and not self.items
            and not self.running
            and self.inflight() <= 1
            and self.row_seconds * len(x) <= self.config.inline_run
        )

    def run_here(self, x: np.ndarray) -> Outputs:
        """Run on the event loop now (see the module's docstring): no wait, so the queue time is 0."""
        if self.metrics:
            self.metrics.queued(self.model.name, [0.0], self.model.version)
        with run_span(len(x)):
            [result] = self.timed_run([x])
        if isinstance(result, BaseException):
            raise result
        return result

    def timed_run(self, xs: list[np.ndarray]) -> list[Outputs | BaseException]:
        """`run_batch`, keeping the moving average of seconds per row that decides `run_here`."""
        start = time.perf_counter()
        results = run_batch(self.model, xs)
        per_row = (time.perf_counter() - start) / max(1, sum(len(x) for x in xs))
        # the low envelope: down at once, up slowly, so that a run slowed by other work does not decide alone
        self.row_seconds = min(per_row, 0.9 * self.row_seconds + 0.1 * per_row)
        return results

    def _timed_out(self, item: Pending, limit: float, what: str) -> None:
        """Still queued at its deadline: out of the queue, 503 to the caller."""
        try:
            self.items.remove(item)
        except ValueError:  # already taken into a batch
            return
        self.rows -= item.rows
        self._pending(-1)
        if self.metrics:
            self.metrics.queue_timeout(self.model.name, "batch")
        if not item.future.done():
            item.future.set_exception(queue_timeout(self.model, "a batch", limit, what))

    def _pending(self, delta: int) -> None:
        if self.metrics:
            self.metrics.pending(self.model.name, delta, self.model.version)

    async def gather(self) -> list[Pending]:
        """Wait for the oldest request, then for batch-mates until max_batch rows or the delay is up.
        Several workers may gather at once: each re-checks the queue after every wake-up."""
        loop = asyncio.get_running_loop()
        while True:
            timer, expired = None, []
            if self.items:
                left = self.items[0].arrived + self.delay - time.perf_counter()
                if self.rows >= self.max_rows or left <= 0:
                    break
                timer = loop.call_later(left, self._expire, expired)
            self.wake.clear()
            try:
                await self.wake.wait()
            finally:
                if timer is not None:
                    timer.cancel()
            # Trust the timer rather than the clock: an event loop with millisecond timers may fire
            # early, and re-arming for the few microseconds left would spin.
            if expired and self.items:
                break
        batch = [self.items.popleft()]
        rows, limit = batch[0].rows, self.share()
        while self.items and rows + self.items[0].rows <= limit:
            rows += self.items[0].rows
            batch.append(self.items.popleft())
        self.rows -= rows
        self._pending(-len(batch))
        for p in batch:
            p.timer.cancel()
        return [p for p in batch if not p.future.done()]  # done = cancelled: the client went away

    def share(self) -> int:
        """Rows the next batch may take: `max_rows`; under the adaptive policy, when the queued rows would run for
        SPLIT_RUN_S or more, only its share among the instances not running (this one included; at least one
        request), so that the idle instances run the rest beside it, on other cores, instead of one run holding
        them all while the others idle."""
        idle = self.config.instances - self.running
        if self.delay or idle < 2 or self.row_seconds * self.rows < SPLIT_RUN_S:
            return self.max_rows
        return min(self.max_rows, -(-self.rows // idle))

    def _expire(self, expired: list) -> None:
        expired.append(True)
        self.wake.set()

    async def worker(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self.gather()
            if not batch:
                continue
            started = time.perf_counter()
            if self.metrics:
                self.metrics.queued(self.model.name, [started - p.arrived for p in batch], self.model.version)
            self.running += 1
            run = start_run(batch, sum(p.rows for p in batch), started) if tracing.ON else None
            try:
                results = await loop.run_in_executor(self.pool, self.timed_run, [p.x for p in batch])
            except BaseException as e:  # cancelled while running: fail the batch, then stop
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(e if isinstance(e, Exception) else RuntimeError("shutting down"))
                raise
            finally:
                self.running -= 1
                if run is not None:
                    run.end()
            for p, result in zip(batch, results):
                if p.future.done():
                    continue
                if isinstance(result, BaseException):
                    p.future.set_exception(result)
                else:
                    p.future.set_result(result)

    async def drain_and_close(self) -> None:
        """Close once the queued requests have been taken (a retired runtime)."""
        while self.items or self.running:  # a batch taken but not answered must finish, not be cancelled
            await asyncio.sleep(self.delay + 0.001)
        await asyncio.sleep(0)
        await self.close()

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for p in self.items:
            p.timer.cancel()
            if not p.future.done():
                p.future.set_exception(Overloaded("the server is shutting down"))
        self.items.clear()
        self.rows = 0
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.pool.shutdown(wait=False)  # a run already started finishes in its thread; its batch has its answer


class BatchingInference:
    """`await inference(model, x)` → outputs by name, batched per model (or not, when disabled)."""

    def __init__(self, config: BatchConfig, metrics: Metrics | None = None, inflight: Callable[[], int] | None = None):
        self.config, self.metrics, self.inflight = config, metrics, inflight
        self.queues: dict[int, ModelQueue] = {}  # by id() of the runtime (one per loaded model version)
        self.closing: set[asyncio.Task] = set()

    async def __call__(self, model: ModelRuntime, x: np.ndarray, timeout: float | None = None) -> Outputs:
        if not self.config.enabled or len(x) > max_rows(model, self.config):
            return await self.alone(model, x, timeout)
        queue = self.queues.get(id(model))
        if queue is None or queue.model is not model:
            if model.retired:
                return await self.alone(model, x, timeout)
            queue = self.queues[id(model)] = ModelQueue(model, self.config, self.metrics, self.inflight)
        return await queue.submit(x, timeout)

    def retire(self, models: list[ModelRuntime]) -> None:
        """The registry stopped serving `models` (call on the event loop): their queues drain, then close."""
        for model in models:
            queue = self.queues.get(id(model))
            if queue is not None and queue.model is model:
                del self.queues[id(model)]
                task = asyncio.get_running_loop().create_task(queue.drain_and_close())
                self.closing.add(task)
                task.add_done_callback(self.closing.discard)

    async def alone(self, model: ModelRuntime, x: np.ndarray, timeout: float | None = None) -> Outputs:
        """Run `x` by itself in the thread pool (service/engine/execution.py); 503 if no pool thread took it in time."""
        return await run_alone(model, x, self.config, self.metrics, timeout)

    async def close(self) -> None:
        for queue in self.queues.values():
            await queue.close()
        self.queues.clear()
        await asyncio.gather(*self.closing, return_exceptions=True)
