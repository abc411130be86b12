"""Admission by estimated cost (service/render/admission.py) in process: the cost book, the ceiling, the lanes, the
callers' shares, a waiting client that leaves, and the scheduler's budget (the HTTP attack is
tests/security/test_render_flood.py)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import numpy as np
import pytest

from service.auth.policy import Caller
from service.errors import ClientGone, QueueTimeout, TooLarge, TooManyRequests
from service.render.admission import PRIORS, Admission, CostBook, caller_key
from service.render.imaging import RenderSpec
from service.render.scheduler import TileJob, TileScheduler
from service.settings import Settings

MODEL = SimpleNamespace(name="m", version=1, lattice=None, separable=None)
GRID = SimpleNamespace(name="g", version=1, lattice=object(), separable=None)


def spec(side: int, rotate: bool = False, supersample: int = 1) -> RenderSpec:
    matrix = ((0.0, 1.0, 0.0), (1.0, 0.0, 0.0)) if rotate else ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0))
    return RenderSpec(width=side, height=side, matrix=matrix, supersample=supersample)


async def never() -> bool:
    return False


def test_the_estimate_is_samples_times_the_paths_cost_a_sample_and_learns_from_renders():
    book = CostBook()
    est = book.estimate(MODEL, spec(1000, supersample=2))
    assert est.samples == 4_000_000 and est.per_sample == PRIORS["graph"] and not est.measured
    assert book.estimate(GRID, spec(1000)).per_sample == PRIORS["lattice"]
    assert book.estimate(GRID, spec(1000, rotate=True)).key[2] == "graph"  # a turned grid render: the whole graph
    book.observe(est, 4_000_000 * 3e-6)  # a big render replaces the prior
    again = book.estimate(MODEL, spec(1000, supersample=2))
    assert again.measured and again.per_sample == pytest.approx(3e-6)
    small = book.estimate(MODEL, spec(16))
    book.observe(small, small.samples * 1e-3)  # a tiny render's fixed costs barely move it
    moved = book.estimate(MODEL, spec(16)).per_sample
    assert moved < 3e-6 * 1.5


def test_a_network_s_prior_comes_from_its_parameters():
    """Before its first render, an MLP's cost a sample is its parameters' (~3e-11 s each): the bundled astronaut's
    66,307 at ~2 µs, so its ^4096 upscale is over the ceiling from the first request on."""
    book = CostBook()
    mlp = SimpleNamespace(**vars(MODEL), metadata={"architecture": {"parameters": 66_307}})
    est = book.estimate(mlp, spec(4096))
    assert est.per_sample == pytest.approx(2e-6, rel=0.01) and est.seconds > Settings().render_max_cost_s
    assert book.estimate(mlp, spec(1024, supersample=2)).seconds < Settings().render_max_cost_s  # the API docs' one
    tiny = SimpleNamespace(**vars(MODEL), metadata={"architecture": {"parameters": 10}})
    assert book.estimate(tiny, spec(8)).per_sample == PRIORS["lattice"]  # never under the lattice's
    odd = SimpleNamespace(**vars(MODEL), metadata={"architecture": {"parameters": "many"}})
    assert book.estimate(odd, spec(8)).per_sample == PRIORS["graph"]


def test_a_render_over_the_ceiling_is_refused_naming_the_setting():
    async def main():
        adm = Admission(Settings(render_max_cost_s=2.0), workers=2)
        est = adm.book.estimate(MODEL, spec(2000))  # 4 M samples × 1 µs
        with pytest.raises(TooLarge, match="INR_RENDER_MAX_COST_S=2"):
            async with adm.slot("addr:a", est, spec(2000), never):
                pass
        assert not adm.dear

    asyncio.run(main())


def test_a_caller_over_its_share_gets_429_and_cheap_renders_pass_a_full_dear_lane():
    async def main():
        adm = Admission(Settings(render_concurrency=2, render_caller_share=2, queue_timeout_s=0.2), workers=2)
        dear = adm.book.estimate(MODEL, spec(2000))
        cheap = adm.book.estimate(MODEL, spec(256))
        assert adm.lane(dear) == "dear" and adm.lane(cheap) == "cheap"
        held = asyncio.Event()
        done = asyncio.Event()

        async def hold(caller):
            async with adm.slot(caller, dear, spec(2000), never):
                held.set()
                await done.wait()

        holders = [asyncio.ensure_future(hold("addr:a")) for _ in range(2)]
        await asyncio.sleep(0.01)
        with pytest.raises(TooManyRequests, match="INR_RENDER_CALLER_SHARE=2") as e:
            async with adm.slot("addr:a", dear, spec(2000), never):
                pass
        assert int(e.value.headers["retry-after"]) >= 1
        with pytest.raises(QueueTimeout, match="INR_RENDER_CONCURRENCY"):  # another caller waits for the lane
            async with adm.slot("addr:b", dear, spec(2000), never):
                pass
        start = time.perf_counter()
        async with adm.slot("addr:a", cheap, spec(256), never) as lane:  # its own lane: at once
            assert lane == "cheap" and time.perf_counter() - start < 0.1
        done.set()
        await asyncio.gather(*holders)
        assert not adm.dear and not adm.dear_s  # every share given back
        async with adm.slot("addr:a", dear, spec(2000), never):
            pass

    asyncio.run(main())


def test_a_client_that_leaves_while_waiting_gives_its_wait_up():
    async def main():
        adm = Admission(Settings(render_concurrency=1, queue_timeout_s=5), workers=1)
        dear = adm.book.estimate(MODEL, spec(2000))
        release = asyncio.Event()

        async def hold():
            async with adm.slot("addr:a", dear, spec(2000), never):
                await release.wait()

        holder = asyncio.ensure_future(hold())
        await asyncio.sleep(0.01)
        left = time.monotonic() + 0.2

        async def gone() -> bool:
            return time.monotonic() > left

        start = time.perf_counter()
        with pytest.raises(ClientGone):
            async with adm.slot("addr:b", dear, spec(2000), gone):
                pass
        assert time.perf_counter() - start < 1
        release.set()
        await holder
        assert adm.lanes["dear"]._value == 1 and not adm.dear  # nothing leaked

    asyncio.run(main())


def test_caller_key_is_the_subject_else_the_clients_address():
    keyed = Caller(SimpleNamespace(sub="key:abc"))
    assert caller_key({"state": {"caller": keyed}, "client": ("10.0.0.1", 5)}) == "sub:key:abc"
    assert caller_key({"state": {"caller": Caller()}, "client": ("10.0.0.1", 5)}) == "addr:10.0.0.1"
    assert caller_key({}) == "addr:unknown"


def test_a_job_whose_tiles_measure_over_its_budget_stops():
    sched = TileScheduler(1)
    try:

        def busy(_tile):
            end = time.thread_time() + 0.01
            while time.thread_time() < end:
                np.sqrt(np.arange(1000.0))

        job = TileJob(range(100), busy, budget_s=0.2, on_budget=lambda j: TooLarge(f"over after {j.done}"))
        future = sched.submit(job)
        with pytest.raises(TooLarge, match="over after"):
            future.result(timeout=30)
        assert job.done < 10  # stopped once its first tiles projected ~1 s
    finally:
        sched.close()
