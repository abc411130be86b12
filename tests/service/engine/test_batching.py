"""Dynamic batching: the batcher on a real model, and batching on against off over HTTP with 32 clients."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import tritonclient.http as triton

from modelrepo import read_spec
from service.engine.batching import BatchConfig, BatchingInference
from service.engine.runtime import ModelRuntime, RuntimeOptions
from service.errors import Overloaded
from service.metrics import Metrics


def counted(model_repo, metrics: Metrics | None = None) -> ModelRuntime:
    """Version 1 of the digits model, counting its runs in `metrics`."""
    model = ModelRuntime(
        model_repo / "digits", read_spec(model_repo / "digits"), 1, RuntimeOptions(threads=1, metrics=metrics)
    )
    assert model.load()
    return model


@pytest.fixture(scope="module")
def digits(model_repo) -> ModelRuntime:
    return counted(model_repo)


def images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 1, 28, 28), dtype=np.float32)


def run_concurrently(config: BatchConfig, model: ModelRuntime, xs: list[np.ndarray]):
    """Submit every input at once; return the outputs (or exceptions) in order and the metrics."""
    metrics = Metrics()
    model = counted(model.path.parent, metrics)

    async def main():
        inference = BatchingInference(config, metrics)
        try:
            return await asyncio.gather(*(inference(model, x) for x in xs), return_exceptions=True)
        finally:
            await inference.close()

    return asyncio.run(main()), metrics.models[model.name, str(model.version)]


def test_concurrent_requests_share_one_run_and_get_their_own_rows(digits):
    xs = [images(n, seed) for seed, n in enumerate([1, 3, 2, 1, 4, 1, 2, 2])]
    results, stats = run_concurrently(BatchConfig(max_batch=64, max_queue_delay=0.05), digits, xs)
    assert stats.execution_count == 1 and stats.inference_count == 16
    for x, out in zip(xs, results):
        alone = digits.predict(x)
        assert out["probabilities"].shape == (len(x), 10)
        np.testing.assert_allclose(out["probabilities"], alone["probabilities"], atol=1e-6)
        np.testing.assert_allclose(out["logits"], alone["logits"], atol=1e-5)


@pytest.mark.parametrize("instances", [1, 3])
def test_batches_stop_at_max_batch_rows_and_big_requests_run_alone(digits, instances):
    xs = [images(3, seed) for seed in range(6)] + [images(20, 99)]
    config = BatchConfig(max_batch=8, max_queue_delay=0.05, instances=instances)
    results, stats = run_concurrently(config, digits, xs)
    for x, out in zip(xs, results):
        np.testing.assert_allclose(out["probabilities"], digits.predict(x)["probabilities"], atol=1e-6)
    assert sorted(stats.batches) == [6, 20]  # pairs of 3-row requests, and the 20-row one alone
    assert stats.batches[6].count == 3 and stats.execution_count == 4


def test_one_bad_request_fails_alone_and_its_batch_mates_succeed(digits):
    bad = np.zeros((1, 1, 28, 27), np.float32)  # past validation by mistake: the merged run cannot take it
    xs = [images(1, 0), images(2, 1), bad, images(1, 2)]
    results, stats = run_concurrently(BatchConfig(max_batch=64, max_queue_delay=0.05), digits, xs)
    assert isinstance(results[2], Exception)
    for i in (0, 1, 3):
        np.testing.assert_allclose(results[i]["probabilities"], digits.predict(xs[i])["probabilities"], atol=1e-6)


def test_batching_off_runs_every_request_on_its_own(digits):
    xs = [images(1, seed) for seed in range(5)]
    results, stats = run_concurrently(BatchConfig(enabled=False), digits, xs)
    assert stats.execution_count == 5 and sorted(stats.batches) == [1]
    for x, out in zip(xs, results):
        np.testing.assert_allclose(out["probabilities"], digits.predict(x)["probabilities"], atol=1e-6)


def test_a_full_queue_answers_overloaded_at_once(digits):
    xs = [images(1, seed) for seed in range(5)]
    results, stats = run_concurrently(BatchConfig(max_batch=64, max_queue_delay=0.05, max_queue=3), digits, xs)
    assert [isinstance(r, Overloaded) for r in results] == [False, False, False, True, True]
    assert stats.inference_count == 3 and stats.pending == 0


def test_a_cancelled_request_is_dropped_before_the_run(digits):
    async def main():
        metrics = Metrics()
        model = counted(digits.path.parent, metrics)
        inference = BatchingInference(BatchConfig(max_batch=64, max_queue_delay=0.05), metrics)
        gone = asyncio.ensure_future(inference(model, images(4, 0)))
        kept = asyncio.ensure_future(inference(model, images(1, 1)))
        await asyncio.sleep(0.01)
        gone.cancel()
        out = await kept
        await inference.close()
        return out, metrics.models[model.name, str(model.version)]

    out, stats = asyncio.run(main())
    assert out["probabilities"].shape == (1, 10) and stats.inference_count == 1


@pytest.fixture(scope="module")
def servers(model_repo, server):
    """The same models served with batching (a long delay, so that merges surely happen) and without,
    by the conftest's server class (taken from the session server, so this works however tests import)."""
    Server = type(server)
    on = Server(model_repo, env={"INR_MAX_QUEUE_DELAY_MS": "20", "INR_MAX_BATCH": "64"})
    off = Server(model_repo, env={"INR_BATCHING": "false"})
    try:
        yield on.wait_ready(), off.wait_ready()
    finally:
        on.stop()
        off.stop()


def batched_runs(url: str) -> tuple[float, float]:
    text = httpx.get(f"{url}/metrics").text
    lines = [line for line in text.splitlines() if line.startswith("inr_batch_requests_") and '"digits"' in line]
    get = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in lines}
    return get["inr_batch_requests_sum"], get["inr_batch_requests_count"]


def test_32_concurrent_clients_get_the_same_results_with_batching_on_and_off(servers):
    xs = [images(1 + i % 3, seed=i) for i in range(32)]
    coords = [np.random.default_rng(i).random((5, 2), dtype=np.float32) for i in range(32)]

    def client_calls(url: str, i: int) -> tuple:
        with httpx.Client(base_url=url, timeout=60) as c:
            v1 = c.post("/v1/models/digits/classify", json={"images": xs[i][:, 0].tolist()}).json()
            q = c.post("/v1/models/astronaut/query", json={"coords": coords[i].tolist()}).json()
        tc = triton.InferenceServerClient(url.removeprefix("http://"))
        t = triton.InferInput("images", list(xs[i].shape), "FP32")
        t.set_data_from_numpy(xs[i])
        v2 = tc.infer("digits", [t]).as_numpy("probabilities")
        tc.close()
        return np.array([p["probabilities"] for p in v1["predictions"]]), np.array(q["rgb"]), v2

    answers = {}
    for server in servers:
        with ThreadPoolExecutor(32) as pool:
            answers[server.url] = list(pool.map(lambda i: client_calls(server.url, i), range(32)))
    on, off = (answers[s.url] for s in servers)
    for i, (a, b) in enumerate(zip(on, off)):
        for got, want in zip(a, b):
            np.testing.assert_allclose(got, want, atol=2e-6, err_msg=f"client {i}")
        np.testing.assert_allclose(a[2], a[0], atol=2e-6)  # v2 infer equals v1 classify
    merged, runs = batched_runs(servers[0].url)
    assert merged == 64 and runs < 64, "with batching on, concurrent requests should share runs"
    merged, runs = batched_runs(servers[1].url)
    assert merged == runs == 64, "with batching off, every request runs alone"


def test_a_retired_runtime_finishes_its_queue_then_runs_late_requests_alone(digits):
    async def main():
        metrics = Metrics()
        model = counted(digits.path.parent, metrics)
        inference = BatchingInference(BatchConfig(max_batch=64, max_queue_delay=0.05), metrics)
        queued = [asyncio.ensure_future(inference(model, images(1, i))) for i in range(3)]
        await asyncio.sleep(0.005)
        model.retired = True  # what the registry does when a reload swaps it out
        inference.retire([model])
        late = await inference(model, images(2, 9))
        done = await asyncio.gather(*queued)
        await asyncio.gather(*inference.closing)
        left = dict(inference.queues)
        await inference.close()
        return done, late, left, metrics.models[model.name, str(model.version)]

    done, late, left, stats = asyncio.run(main())
    assert [d["probabilities"].shape for d in done] == [(1, 10)] * 3 and late["logits"].shape == (2, 10)
    assert left == {} and stats.inference_count == 5 and stats.execution_count == 2


@pytest.mark.parametrize("enabled", [True, False])
def test_a_request_run_alone_keeps_its_queue_deadline(digits, enabled):
    """Too many rows to batch (or batching off): while no pool thread is free it waits in the pool's
    queue, and gets 503 at its deadline (V2's `timeout`) without ever running; one with time left runs."""
    import threading

    import anyio.to_thread

    from service.errors import QueueTimeout

    async def main():
        metrics = Metrics()
        model = counted(digits.path.parent, metrics)
        inference = BatchingInference(BatchConfig(enabled=enabled, max_batch=2, queue_timeout=30), metrics)
        limiter = anyio.to_thread.current_default_thread_limiter()  # this event loop's
        limiter.total_tokens, tokens = 1, limiter.total_tokens
        release = threading.Event()
        busy = asyncio.ensure_future(anyio.to_thread.run_sync(release.wait))  # the only pool thread
        asyncio.get_running_loop().call_later(1.0, release.set)  # long after the 0.1 s deadline
        await asyncio.sleep(0.05)
        late = asyncio.ensure_future(inference(model, images(4, 1), timeout=0.1))
        patient = asyncio.ensure_future(inference(model, images(3, 2), timeout=20))
        error = None
        try:
            await late
        except QueueTimeout as e:
            error = e
        out = await patient
        await busy
        limiter.total_tokens = tokens
        await inference.close()
        return error, out, metrics

    error, out, metrics = asyncio.run(main())
    assert error is not None and "timeout parameter" in str(error) and error.headers["retry-after"] == "1"
    stats = metrics.models["digits", "1"]
    assert out["logits"].shape == (3, 10) and stats.execution_count == 1 and stats.inference_count == 3
    assert metrics.queue_timeouts.labels("digits", "alone")._value.get() == 1
