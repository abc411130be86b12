"""The batching policies: adaptive runs a request on an idle model at once and gathers
the requests that arrive while a batch runs; Triton's fixed delay stays available. A lone short
request runs on the event loop."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
from test_batching import counted, images

from service.engine.batching import BatchConfig, BatchingInference
from service.engine.policy import queue_delay
from service.metrics import Metrics


def timed_single(model_repo, config: BatchConfig) -> float:
    metrics = Metrics()
    model = counted(model_repo, metrics)

    async def main():
        inference = BatchingInference(config, metrics)
        try:
            await inference(model, images(1, 0))  # warm the pool thread
            start = time.perf_counter()
            await inference(model, images(1, 1))
            return time.perf_counter() - start
        finally:
            await inference.close()

    return asyncio.run(main())


def test_an_idle_model_runs_a_request_at_once_under_the_adaptive_policy(model_repo):
    # A 30 s delay that adaptive must not wait for: one 1-image run is milliseconds, so only a wait for the
    # delay could reach 15 s (a 0.25 s bound against a 0.5 s delay failed whenever a loaded machine
    # descheduled the run for a quarter second). The delay policy waits its delay: a lower bound, exact.
    assert timed_single(model_repo, BatchConfig(policy="adaptive", max_queue_delay=30)) < 15
    assert timed_single(model_repo, BatchConfig(policy="delay", max_queue_delay=0.3)) >= 0.3


@pytest.mark.parametrize(
    "settings_delay,policy,adaptive",
    [(None, "auto", True), (0.002, "auto", False), (None, "delay", False), (0.002, "adaptive", True)],
)
def test_the_policy_from_the_settings(model_repo, settings_delay, policy, adaptive):
    model = counted(model_repo)
    delay = queue_delay(model, BatchConfig(max_queue_delay=settings_delay, policy=policy))
    assert (delay == 0.0) == adaptive


def test_requests_that_arrive_while_a_batch_runs_share_the_next_run(model_repo):
    metrics = Metrics()
    model = counted(model_repo, metrics)
    xs = [images(1, seed) for seed in range(8)]

    async def main():
        inference = BatchingInference(BatchConfig(policy="adaptive", instances=1), metrics)
        try:
            first = asyncio.ensure_future(inference(model, images(64, 99)))
            await asyncio.sleep(0.001)  # the first run has been taken
            rest = await asyncio.gather(*(inference(model, x) for x in xs))
            return await first, rest
        finally:
            await inference.close()

    _, rest = asyncio.run(main())
    stats = metrics.models[model.name, str(model.version)]
    assert stats.execution_count == 2 and stats.inference_count == 72
    for x, out in zip(xs, rest):
        np.testing.assert_allclose(out["probabilities"], model.predict(x)["probabilities"], atol=1e-6)


def threads_that_ran(model_repo, inflight: int, inline_run: float, timeout: float | None = None) -> set[str]:
    """The threads that ran the model for three requests one after another (the run on the loop)."""
    metrics = Metrics()
    model = counted(model_repo, metrics)
    ran: set[str] = set()
    predict = model.predict
    model.predict = lambda x, requests=1: ran.add(threading.current_thread().name) or predict(x, requests)

    async def main():
        inference = BatchingInference(BatchConfig(policy="adaptive", inline_run=inline_run), metrics, lambda: inflight)
        try:
            await inference(model, images(1, 0))  # the first run is timed in a pool thread
            ran.clear()
            for seed in (1, 2, 3):
                out = await inference(model, images(1, seed), timeout)
                np.testing.assert_allclose(out["probabilities"], predict(images(1, seed))["probabilities"], atol=1e-6)
        finally:
            await inference.close()

    asyncio.run(main())
    assert metrics.models[model.name, str(model.version)].execution_count >= 4
    return ran


def test_a_lone_short_request_runs_on_the_event_loop_and_others_in_the_pool(model_repo):
    assert threads_that_ran(model_repo, inflight=1, inline_run=1.0) == {"MainThread"}
    assert "MainThread" not in threads_that_ran(model_repo, inflight=2, inline_run=1.0)  # others in flight
    assert "MainThread" not in threads_that_ran(model_repo, inflight=1, inline_run=0.0)  # INR_INLINE_RUN_MS=0
    assert "MainThread" not in threads_that_ran(model_repo, inflight=1, inline_run=1.0, timeout=5.0)  # a deadline


def test_long_queued_work_is_shared_among_the_instances(model_repo):
    """Adaptive, 2 instances: 8 requests queued at once whose rows would run for 5 ms or more are split into
    batches of an instance's share (ModelQueue.share), so that both instances run; short work stays one batch,
    and the delay policy keeps Triton's batches whole."""
    reference = counted(model_repo)

    def runs(row_seconds: float, policy: str) -> list[int]:
        metrics = Metrics()
        model = counted(model_repo, metrics)
        xs = [images(4, seed) for seed in range(8)]

        async def main():
            config = BatchConfig(policy=policy, instances=2, max_queue_delay=0.05 if policy == "delay" else None)
            inference = BatchingInference(config, metrics)
            try:
                await inference(model, images(1, 99))  # the queue exists, its first run is measured
                queue = next(iter(inference.queues.values()))
                queue.row_seconds = row_seconds  # as if its runs had taken this long per row
                outs = await asyncio.gather(*(inference(model, x) for x in xs))
                for x, out in zip(xs, outs):
                    np.testing.assert_allclose(out["probabilities"], reference.predict(x)["probabilities"], atol=1e-6)
            finally:
                await inference.close()

        asyncio.run(main())
        stats = metrics.models[model.name, str(model.version)]
        return sorted(r for r, b in stats.batches.items() for _ in range(b.count) if r != 1)

    assert runs(1.0, "adaptive") == [16, 16]  # 32 rows of 1 s each: half each
    assert runs(1e-6, "adaptive") == [32]  # 32 µs of work: one run
    assert runs(1.0, "delay") == [32]  # Triton's rule: one batch up to max_batch_size
