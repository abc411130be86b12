"""Which model versions hold onnxruntime sessions, under a memory budget (`--memory-budget`, docs/operations.md,
"Memory budget"), in the manner of KServe ModelMesh.

A version is listed from its files with no session (ModelRuntime.describe) and loaded the first time a request
needs it: `acquire` loads it unless it is resident, and requests that arrive during a load wait for that one load
and its warmup. A request holds its version from `acquire` to `release`; a held version is never unloaded.

* **Budget.** The bytes of resident versions stay within the budget: before a load, the least recently used
  versions that no request holds and that are not pinned (`--pin-model`) are unloaded until the new one fits,
  with room for its load's peak. A load waits for a release only while its *result* does not fit beside the held
  versions: the peak is transient, and a request that holds a block model's overview while it loads a block would
  otherwise wait on itself (the room for a grid's peak is often the whole budget). A version larger than the whole
  budget is refused (ModelTooLarge), and the others keep serving.
* **Bytes, measured.** A version's bytes are the growth of the process's resident set across its load and warmup,
  when no session ran meanwhile (service/engine/measure.py); a version not yet measured that way is estimated
  from its packed corner cells (a grid photo's) or its file's size, at the ratio of the measured ones.
* **Bounded loads.** At most `--max-concurrent-loads` versions load or wait to load at once; a request that would
  start another, or that finds no room because every resident version is held, waits within its deadline
  (INR_QUEUE_TIMEOUT_S, or the gRPC call's) and then gets 503 with Retry-After.

All the bookkeeping runs on the event loop; loads and unloads run in threads. A version dropped by a reload or
an unload (`forget`) leaves the accounting at once; its sessions go when the requests holding it finish.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from starlette.concurrency import run_in_threadpool

from telemetry import tracing

from ..errors import ModelNotReady, ModelTooLarge, QueueTimeout
from ..metrics import Metrics
from .measure import Measure
from .memory import format_bytes, trim
from .runtime import ModelRuntime

log = logging.getLogger(__name__)
PRIMER = Path(__file__).with_name("prime.onnx")  # a 2 → 3 MatMul


@dataclass(frozen=True)
class ResidencyOptions:
    budget: int  # bytes of resident versions
    max_concurrent_loads: int = 2
    pinned: frozenset[str] = frozenset()  # model names never unloaded
    wait_s: float = 10.0  # the longest wait for a load slot or for room, unless the request has its own deadline


class Residency:
    def __init__(self, options: ResidencyOptions, metrics: Metrics | None = None):
        self.options, self.metrics = options, metrics
        self.resident: OrderedDict[ModelRuntime, None] = OrderedDict()  # least recently used first
        self.loads: dict[ModelRuntime, asyncio.Future] = {}  # loads under way, shared by their waiters
        self.unloading: dict[ModelRuntime, asyncio.Future] = {}  # chosen to go, done when gone (`_evict`)
        self.measure = Measure()
        self._lock = threading.Lock()  # the tables, also touched by reload threads (forget, adopt)
        self._changed: asyncio.Condition | None = None  # a release or an unload: room may have appeared
        self._slots: asyncio.Semaphore | None = None  # --max-concurrent-loads (made on the loop)
        self._waiting = 0  # loads waiting for room
        if metrics is not None:
            metrics.residency(self)

    def prime(self) -> None:
        """Run onnxruntime once on a tiny graph (blocking), so that its one-time start-up memory is not counted in
        the bytes of the first model loaded."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(PRIMER), options, providers=["CPUExecutionProvider"])
        session.run(None, {"x": np.zeros((1, 2), np.float32)})
        trim()

    # -- reading ----------------------------------------------------------------------------------
    @property
    def bytes(self) -> int:
        with self._lock:
            return sum(r.bytes or 0 for r in self.resident)

    def resident_now(self) -> list[ModelRuntime]:
        with self._lock:
            return list(self.resident)

    def held_bytes(self) -> int:
        """Bytes of the resident versions that cannot go now: held by requests, pinned, or loading."""
        with self._lock:
            return sum(r.bytes or 0 for r in self.resident if r.inflight or self.is_pinned(r) or r in self.loads)

    def pinned_bytes(self) -> int:
        with self._lock:
            return sum(r.bytes or 0 for r in self.resident if self.is_pinned(r))

    def is_pinned(self, runtime: ModelRuntime) -> bool:
        return runtime.name in self.options.pinned

    def estimate(self, runtime: ModelRuntime) -> int:
        return self.measure.estimate(runtime)

    # -- requests -------------------------------------------------------------------------------------
    async def acquire(self, runtime: ModelRuntime, timeout: float | None = None) -> ModelRuntime:
        """Hold `runtime` for a request, loading it first unless it is resident; `release` it when done.
        ModelNotReady when its load failed, ModelTooLarge when it cannot fit, QueueTimeout when the wait for a
        load slot or for room outlasted `timeout` (default: ResidencyOptions.wait_s)."""
        runtime.inflight += 1
        try:
            unloading = self.unloading.get(runtime)
            if unloading is not None:  # chosen to go before this request came: gone first, then loaded again
                await asyncio.shield(unloading)
            if not runtime.resident:
                await self._load(runtime, self.options.wait_s if timeout is None else timeout)
            with self._lock:
                if runtime in self.resident:
                    self.resident.move_to_end(runtime)
            return runtime
        except BaseException:
            self.release(runtime)
            raise

    def release(self, runtime: ModelRuntime) -> None:
        runtime.inflight -= 1
        if runtime.inflight == 0:
            if self._waiting:
                self._notify()
            self._trim()

    def _trim(self) -> None:
        """Back within the budget once a version can go: a load that measured more than its estimate while the
        others were held could evict nothing then, and no later load may come to do it (on the event loop)."""
        if self.bytes <= self.options.budget:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the loop: the next load or release trims
            return
        victims = self._victims(0, None)[0]
        if victims:
            loop.create_task(self._evict(victims))

    # -- loading ----------------------------------------------------------------------------------
    async def _load(self, runtime: ModelRuntime, timeout: float) -> None:
        future = self.loads.get(runtime)
        if future is None:
            future = self.loads[runtime] = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().create_task(self._run_load(runtime, future, timeout))
        start = time.perf_counter()
        await asyncio.shield(future)  # the load goes on for the others if this request gives up
        if self.metrics is not None:
            self.metrics.load_wait(runtime.name, time.perf_counter() - start)
        if not runtime.resident:
            raise ModelNotReady(runtime.name, f"failed in version {runtime.version}", runtime.error)

    async def _run_load(self, runtime: ModelRuntime, future: asyncio.Future, timeout: float) -> None:
        try:
            await self._admit_and_load(runtime, timeout)
        except BaseException as e:  # noqa: BLE001 - every waiter gets it
            future.set_exception(e)
            future.exception()  # retrieved: a load nobody waits for any more is not an unhandled error
        else:
            future.set_result(None)
        finally:
            self.loads.pop(runtime, None)

    async def _admit_and_load(self, runtime: ModelRuntime, timeout: float) -> None:
        if runtime.bytes is not None and runtime.bytes > self.options.budget:
            raise self._too_large(runtime, runtime.bytes)
        deadline = time.monotonic() + timeout
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.options.max_concurrent_loads)
        try:
            await asyncio.wait_for(self._slots.acquire(), max(deadline - time.monotonic(), 0.001))
        except asyncio.TimeoutError:
            raise QueueTimeout(
                f"model '{runtime.name}' waited {timeout:g} s to load: "
                f"{self.options.max_concurrent_loads} other loads are under way "
                "(--max-concurrent-loads)",
                retry_after=1,
            ) from None
        try:
            await self._make_room(runtime, deadline)
            with tracing.span(
                "inr.model.load", attributes={"inr.model": runtime.name, "inr.model.version": runtime.version}
            ):
                seconds = await run_in_threadpool(self._load_measured, runtime)
        finally:
            self._slots.release()
        if not runtime.resident:
            if self.metrics is not None:
                self.metrics.model_load(runtime.name, "failed", seconds)
            return
        if runtime.bytes > self.options.budget:
            await run_in_threadpool(self._unload, runtime)
            raise self._too_large(runtime, runtime.bytes)
        with self._lock:
            if runtime.retired:  # forgotten while it loaded: out of the accounting; its holders finish on it
                return
            self.resident[runtime] = None
        if self.metrics is not None:
            self.metrics.model_load(runtime.name, "loaded", seconds)
        await self._evict(self._victims(0, runtime)[0])  # the measured bytes may be more than the estimate

    def _load_measured(self, runtime: ModelRuntime) -> float:
        """Load and warm up (blocking), its bytes measured (service/engine/measure.py); the seconds it took."""
        seconds, grown, quiet = self.measure.load(runtime)
        if runtime.resident:
            log.info(
                "model %s version %d: loaded in %.3f s, %s resident (%s; %s of %s in use)",
                runtime.name,
                runtime.version,
                seconds,
                format_bytes(runtime.bytes),
                "measured" if quiet else f"estimated: runs overlapped the load, which grew {format_bytes(grown)}",
                format_bytes(self.bytes + runtime.bytes),
                format_bytes(self.options.budget),
            )
        return seconds

    def _too_large(self, runtime: ModelRuntime, size: int) -> ModelTooLarge:
        if self.metrics is not None:
            self.metrics.model_load(runtime.name, "too_large", 0.0)
        return ModelTooLarge(runtime.name, runtime.version, size, self.options.budget)

    # -- room ---------------------------------------------------------------------------------------
    async def _make_room(self, runtime: ModelRuntime, deadline: float) -> None:
        """Unload least recently used versions (not held, not pinned, not loading, not `runtime`) until `runtime`'s
        load fits with room for its peak, or no more can go; then, while its result still does not fit beside what
        is held, wait for a release until `deadline`. Only idle versions make room for the peak."""
        result = min(self.measure.estimate(runtime), self.options.budget)  # measured past it: ModelTooLarge after
        peak = min(max(self.measure.room(runtime), result), self.options.budget)
        while True:
            await self._evict(self._victims(peak, runtime)[0])
            resident = self.bytes
            if resident + result <= self.options.budget:
                return
            await self._wait(
                deadline,
                f"model '{runtime.name}' version {runtime.version} needs {format_bytes(result)}, and "
                f"{format_bytes(self.held_bytes())} of the memory budget ({format_bytes(self.options.budget)}, "
                f"--memory-budget) is held by requests in flight, pinned models and loads "
                f"({format_bytes(resident)} resident)",
            )

    async def _evict(self, victims: list[ModelRuntime]) -> None:
        """Unload `victims` (from `_victims`) one after the other; a request for one waits until it is gone."""
        for victim in victims:
            try:
                await run_in_threadpool(self._unload, victim)
            finally:
                self.unloading.pop(victim).set_result(None)

    def _victims(self, needed: int, keep: ModelRuntime) -> tuple[list[ModelRuntime], bool]:
        """The versions to unload (taken out of the table and marked `unloading`; `_evict` them) and whether that
        still leaves too little room. Runs on the event loop, as `acquire` does."""
        with self._lock:
            over = sum(r.bytes or 0 for r in self.resident) + needed - self.options.budget
            victims = []
            for r in list(self.resident):
                if over <= 0:
                    break
                if r is keep or r.inflight or self.is_pinned(r) or r in self.loads:
                    continue
                del self.resident[r]
                victims.append(r)
                self.unloading[r] = asyncio.get_running_loop().create_future()
                over -= r.bytes or 0
            return victims, over > 0

    def _unload(self, runtime: ModelRuntime) -> None:
        with self._lock:
            self.resident.pop(runtime, None)
        with self.measure.lock:  # not while a load is measured: the memory it frees would be taken off that load's
            runtime.unload()
            trim()
        if self.metrics is not None:
            self.metrics.model_evicted(runtime.name)
        log.info(
            "model %s version %d: unloaded (least recently used; %s of %s in use)",
            runtime.name,
            runtime.version,
            format_bytes(self.bytes),
            format_bytes(self.options.budget),
        )

    async def _wait(self, deadline: float, why: str) -> None:
        if self._changed is None:
            self._changed = asyncio.Condition()
        left = deadline - time.monotonic()
        if left <= 0:
            raise QueueTimeout(f"no room to load a model in time: {why}", retry_after=1)
        self._waiting += 1
        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait(), left)
        except asyncio.TimeoutError:
            raise QueueTimeout(f"no room to load a model in time: {why}", retry_after=1) from None
        finally:
            self._waiting -= 1

    def _notify(self) -> None:
        async def notify():
            async with self._changed:
                self._changed.notify_all()

        asyncio.get_running_loop().create_task(notify())

    # -- the registry's changes -------------------------------------------------------------------------
    def load_now(self, runtime: ModelRuntime) -> None:
        """A load outside `acquire` (at start, a reload of a resident model, an explicit load; blocking): measured
        and counted. Nothing is unloaded for it; going over the budget is logged."""
        self._load_measured(runtime)
        if runtime.resident:
            with self._lock:
                if runtime.retired:
                    return
                self.resident[runtime] = None
            if self.bytes > self.options.budget:
                log.warning(
                    "models resident: %s, over the memory budget of %s (--memory-budget)",
                    format_bytes(self.bytes),
                    format_bytes(self.options.budget),
                )

    def forget(self, runtime: ModelRuntime) -> None:
        """A version the registry no longer serves: out of the accounting, with a block model's blocks; its sessions
        go with its last holder."""
        blocks = getattr(runtime, "blocks", None)
        with self._lock:
            runtime.retired = True
            self.resident.pop(runtime, None)
            for block in blocks.all_runtimes() if blocks is not None else ():
                block.retired = True  # a block that is loading now stays out of the table too
                self.resident.pop(block, None)
