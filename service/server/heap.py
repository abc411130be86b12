"""The cyclic garbage collector, set for a server: start-up's heap frozen, and a young generation that holds
the requests in flight.

* **Frozen start-up heap.** A full collection walks every object the collector tracks. After start-up that is
  some hundreds of thousands (the modules, FastAPI's routes, the models' runtimes), and on the 2-core VM one full
  collection took 110–180 ms of CPU. Requests that keep objects alive a while, such as the spans a trace
  exporter holds until its next batch, made one come every second or two. `gc.freeze()` moves what is alive
  once the models are loaded out of the collector's generations, so that later collections walk only what came
  after, as the CPython documentation suggests for servers.
* **A young generation of GEN0 objects, not 700.** A collection of the young generation starts when the
  containers allocated and not yet freed pass the threshold. Eight one-digit classify requests in flight hold
  about that many: with traces on (a few more objects each, even for requests the sampler leaves out), the
  count crossed 700 again and again, 250–290 collections of about 0.4 ms in 5 s, and never crossed 2,000.

Both together took the collector's CPU from 0.27 to 0 ms a request with every span exported, and from 0.04–0.14
to 0 with none or one in 20 (`python -m bench.gc_cost`, docs/benchmarks.md, gc_cost).

A frozen object is still freed when its last reference goes, but a frozen cycle never is. So when the
registry drops a model version (a reload, an unload) `release` unfreezes everything at once: the next
collections can reclaim the runtime whatever cycles it is in. Once every dropped runtime is gone (weak
references tell), the heap is frozen again. If one is still held after MAX_CHECKS looks (a minute), something
keeps it for good: the heap is frozen anyway, with a warning, rather than paying a full collection every
RECHECK_S for ever.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref

log = logging.getLogger(__name__)
RECHECK_S = 5.0  # how often a release looks whether the dropped runtimes are gone
MAX_CHECKS = 12  # looks after the last release before the heap is frozen with the runtimes still held
GEN0 = 20_000  # the young generation's threshold (CPython 3.11's default: 700)


def settle() -> None:
    """Collect what is garbage now, freeze what is left, and set the young generation's threshold (call when
    the models are loaded)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GEN0, *gc.get_threshold()[1:])


class Heap:
    """`release(dropped)` from the registry's listener (any thread); settles again once they are freed."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.gone: list[weakref.ref] = []
        self.pending: asyncio.TimerHandle | None = None
        self.checks = 0

    def release(self, dropped: list) -> None:
        gc.unfreeze()
        self.loop.call_soon_threadsafe(self._watch, [weakref.ref(m) for m in dropped])

    def _watch(self, refs: list[weakref.ref]) -> None:
        self.gone += refs
        self.checks = 0
        if self.pending is None:
            self.pending = self.loop.call_later(RECHECK_S, self._check)

    def _check(self) -> None:
        self.pending = None
        gc.collect()
        self.gone = [r for r in self.gone if r() is not None]
        self.checks += 1
        if self.gone and self.checks < MAX_CHECKS:  # still answering a request, or a queue draining: look again
            self.pending = self.loop.call_later(RECHECK_S, self._check)
            return
        if self.gone:
            log.warning(
                "%d dropped model runtime(s) still held after %.0f s; freezing the heap with them",
                len(self.gone),
                self.checks * RECHECK_S,
            )
            self.gone = []
        gc.freeze()
        log.debug("heap settled: %d objects frozen", gc.get_freeze_count())

    def close(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            self.pending = None
