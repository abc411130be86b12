"""service/server/heap.py with the real collector: a frozen model runtime in a reference cycle is still
reclaimed once the registry drops it, and the heap is frozen again afterwards."""

from __future__ import annotations

import asyncio
import gc
import weakref

from service.server import heap


class Runtime:  # a stand-in for a model version's runtime, in a cycle as a bound callback makes one
    def __init__(self):
        self.callback = self.run
        self.weights = bytearray(1 << 20)

    def run(self):
        return len(self.weights)


def test_a_dropped_runtime_in_a_cycle_is_freed_and_the_heap_settles_again(monkeypatch):
    monkeypatch.setattr(heap, "RECHECK_S", 0.05)

    async def scenario():
        runtime = Runtime()
        alive = weakref.ref(runtime)
        heap.settle()
        assert gc.get_freeze_count() > 0 and gc.get_threshold()[0] == heap.GEN0
        h = heap.Heap(asyncio.get_running_loop())
        holder = [runtime]  # a request still answering on it
        del runtime
        h.release([holder[0]])
        assert gc.get_freeze_count() == 0  # unfrozen at once: the next collections may reclaim it
        await asyncio.sleep(0.2)
        assert alive() is not None and h.pending is not None  # still held: not settled, still watching
        holder.clear()  # the request finished; only the cycle keeps it now
        for _ in range(100):
            await asyncio.sleep(0.05)
            if h.pending is None:
                break
        assert alive() is None and h.pending is None and gc.get_freeze_count() > 0
        h.close()

    threshold = gc.get_threshold()
    try:
        asyncio.run(scenario())
    finally:
        gc.unfreeze()  # leave the test process's collector as it was
        gc.set_threshold(*threshold)


def test_a_runtime_held_for_good_stops_the_rechecks_after_max_checks(monkeypatch, caplog):
    monkeypatch.setattr(heap, "RECHECK_S", 0.02)
    monkeypatch.setattr(heap, "MAX_CHECKS", 3)

    async def scenario():
        heap.settle()
        h = heap.Heap(asyncio.get_running_loop())
        kept = Runtime()  # held for ever, as a leak would
        h.release([kept])
        for _ in range(100):
            await asyncio.sleep(0.02)
            if h.pending is None:
                break
        assert h.pending is None and h.checks == 3 and not h.gone and gc.get_freeze_count() > 0
        assert "1 dropped model runtime(s) still held" in caplog.text
        h.release([Runtime()])  # a later release watches again from a fresh count
        assert gc.get_freeze_count() == 0
        await asyncio.sleep(0)
        assert h.checks == 0 and h.pending is not None
        h.close()

    threshold = gc.get_threshold()
    try:
        asyncio.run(scenario())
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
