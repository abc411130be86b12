"""A request run by itself, not batched: more rows than a batch holds, batching off, or a retired runtime
(service/engine/batching.py), and `run_batch`, the one run both paths make.

`run_alone` has the queue's deadline for its wait for a pool thread: Triton applies the queue timeout to every
request not yet executing. Once its run has started, it finishes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import numpy as np
from starlette.concurrency import run_in_threadpool

from ..metrics import Metrics
from .policy import BatchConfig, deadline, queue_timeout
from .runtime import ModelRuntime
from .traced import run_span

log = logging.getLogger(__name__)
Outputs = dict[str, np.ndarray]


def run_batch(model: ModelRuntime, xs: list[np.ndarray]) -> list[Outputs | BaseException]:
    """Run the inputs as one batch (in a pool thread); per-input outputs or errors. `model.predict`
    counts the run. If the merged run fails, each input runs alone so that only the bad one gets the error."""
    try:
        merged = model.predict(xs[0] if len(xs) == 1 else np.concatenate(xs), requests=len(xs))
    except Exception as e:  # noqa: BLE001 - handed to the request(s) that caused it
        if len(xs) == 1:
            return [e]
        log.warning("model %s: batched run of %d requests failed (%s); running them one by one", model.name, len(xs), e)
        results: list[Outputs | BaseException] = []
        for x in xs:
            try:
                results.append(model.predict(x))
            except Exception as one:  # noqa: BLE001
                results.append(one)
        return results
    if len(xs) == 1:
        return [merged]
    bounds = np.cumsum([0] + [len(x) for x in xs])
    return [{k: v[a:b] for k, v in merged.items()} for a, b in zip(bounds[:-1], bounds[1:])]


async def run_alone(
    model: ModelRuntime, x: np.ndarray, config: BatchConfig, metrics: Metrics | None, timeout: float | None = None
) -> Outputs:
    """Run `x` by itself in the thread pool; 503 if no pool thread took it within its deadline."""
    arrived = time.perf_counter()
    started: float | None = None
    lock = threading.Lock()
    limit, what = deadline(config, timeout)

    def timed() -> list | None:
        nonlocal started
        with lock:
            if started is not None:  # the deadline passed first: the caller has its 503
                return None
            started = time.perf_counter()
        with run_span(len(x)):  # in the pool thread, with the request's context (run_in_threadpool copies it)
            return run_batch(model, [x])

    run = asyncio.ensure_future(run_in_threadpool(timed))
    try:
        done, _ = await asyncio.wait({run}, timeout=limit)
    except asyncio.CancelledError:  # the client went away: a run not yet in a thread never starts
        run.cancel()
        raise
    if not done:
        with lock:
            gave_up = started is None
            if gave_up:
                started = -1.0
        if gave_up:
            run.cancel()  # still waiting for a thread: give the slot back
            if metrics:
                metrics.queue_timeout(model.name, "alone")
            raise queue_timeout(model, "a pool thread", limit, what)
    [result] = await run
    if metrics:
        metrics.queued(model.name, [started - arrived], model.version)
    if isinstance(result, BaseException):
        raise result
    return result
