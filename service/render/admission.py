"""Admission of renders by their estimated cost (issue 54: a few upscales of tiny regions held every render slot
until the timeout, and a bystander's tile got 503).

A render's cost is its samples (width × height × supersample²) × the CPU seconds a sample of its model takes in
the render workers on its path (a dense grid's lattice, a separable body, the whole graph): a running estimate per
model version and path (`CostBook`), measured from each render's tiles (service/render/scheduler.py's `busy_s`),
with a prior by path before the first. From it:

  - a render estimated over INR_RENDER_MAX_COST_S is refused up front (413 naming it); one whose tiles measure
    over it (by OVERRUN) stops at its next tile with the same answer;
  - a cheap render (at most INR_RENDER_CHEAP_COST_S: a viewer's tiles) takes a slot of its own lane, never queued
    behind dear ones (and the scheduler gives its tiles the next turns); dear renders have the other lane's slots,
    INR_RENDER_CONCURRENCY each;
  - a caller (a key's or token's subject; an anonymous client by its address, `scope["client"]`, which the
    trusted-proxy middleware sets from X-Forwarded-For) has at most INR_RENDER_CALLER_SHARE dear renders in flight
    or waiting: beyond, 429 with Retry-After;
  - a client that goes away while its render waits for a slot gives the wait up (the render core stops a running
    render's tiles the same way).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Awaitable, Callable

from ..engine.blocks import BlockedView
from ..errors import ClientGone, QueueTimeout, TooLarge, TooManyRequests
from ..settings import Settings
from .imaging import RenderSpec
from .lattice import axis_aligned

# CPU seconds a sample before a model's first render on a path; measured on 2 EPYC cores: a grid's lattice
# kernel ~50 ns, the bundled Fourier astronaut (an MLP of width 128) ~2 µs, the tests' tiny MLP ~0.3 µs
PRIORS = {"lattice": 2e-7, "separable": 1e-6, "graph": 1e-6}
# A network's prior from its size, where its metadata counts its parameters (about one multiply-add each a sample):
# the bundled astronaut's 66,307 at ~2 µs a sample. Without it, an MLP's first render was assumed at 1 µs, so a
# dear upscale before any render of size (~17 of its ~33 s) passed the ceiling and stopped only after some tiles.
SECONDS_PER_PARAMETER = 3e-11
ALPHA = 0.3  # the running estimate's weight of a new measurement (a render of FULL_WEIGHT_SAMPLES or more)
FULL_WEIGHT_SAMPLES = 2**18  # smaller renders weigh less: their tiles' fixed costs are a larger share
OVERRUN = 1.25  # a render admitted under the ceiling stops when its tiles measure this far over it
DISCONNECT_POLL_S = 0.1


def caller_key(scope) -> str:
    """Whose share a render counts against: the credentials' subject (`key:ID`, a proxy's user), else the client's
    address (the trusted-proxy middleware's rewrite of `scope["client"]` where a trusted proxy forwarded it)."""
    caller = (scope.get("state") or {}).get("caller")
    claims = getattr(caller, "claims", None)
    if claims is not None:
        return f"sub:{claims.sub}"
    client = scope.get("client")
    return f"addr:{client[0]}" if client else "addr:unknown"


def path_of(model, spec: RenderSpec) -> str:
    """The path the render core will take (service/render/core.py's painter_for), as the cost book keys it."""
    if axis_aligned(spec) and (isinstance(model, BlockedView) or getattr(model, "lattice", None) is not None):
        return "lattice"
    return "separable" if getattr(model, "separable", None) is not None else "graph"


def prior(model, path: str) -> float:
    """CPU seconds a sample before the model's first render on `path`: by the path, or for a network by its
    parameters (its metadata's `architecture.parameters`), never under the lattice's."""
    if path == "lattice":
        return PRIORS[path]
    metadata = getattr(model, "metadata", None)
    architecture = metadata.get("architecture") if isinstance(metadata, dict) else None
    params = architecture.get("parameters") if isinstance(architecture, dict) else None
    if isinstance(params, (int, float)) and params > 0:
        return max(PRIORS["lattice"], float(params) * SECONDS_PER_PARAMETER)
    return PRIORS[path]


@dataclass(frozen=True)
class Estimate:
    key: tuple  # (model, version, path)
    samples: int
    per_sample: float  # CPU seconds a sample
    measured: bool  # from this model's renders, not the prior

    @property
    def seconds(self) -> float:
        return self.samples * self.per_sample


class CostBook:
    """The running estimate of each (model, version, path)'s CPU seconds a sample. Read and written on
    the event loop only."""

    def __init__(self) -> None:
        self.per_sample: dict[tuple, float] = {}

    def estimate(self, model, spec: RenderSpec) -> Estimate:
        path = path_of(model, spec)
        key = (model.name, model.version, path)
        samples = spec.width * spec.height * spec.supersample**2
        known = self.per_sample.get(key)
        return Estimate(key, samples, prior(model, path) if known is None else known, known is not None)

    def observe(self, est: Estimate, projected_s: float) -> None:
        """A render's tiles measured (`projected_s` over all its tiles): the estimate moves toward it, the prior
        replaced by a render of FULL_WEIGHT_SAMPLES or more."""
        if projected_s <= 0 or est.samples <= 0:
            return
        weight = min(1.0, est.samples / FULL_WEIGHT_SAMPLES)
        alpha = weight * (ALPHA if est.measured else 1.0)
        old = self.per_sample.get(est.key, est.per_sample)
        self.per_sample[est.key] = old + alpha * (projected_s / est.samples - old)


class Admission:
    """The two lanes' slots and the callers' shares of the dear one."""

    def __init__(self, settings: Settings, workers: int):
        self.settings, self.workers = settings, workers
        self.book = CostBook()
        self.lanes = {lane: asyncio.Semaphore(settings.render_concurrency) for lane in ("cheap", "dear")}
        self.dear = Counter()  # caller → dear renders in flight or waiting
        self.dear_s = Counter()  # caller → their estimated CPU seconds

    def lane(self, est: Estimate) -> str:
        return "cheap" if est.seconds <= self.settings.render_cheap_cost_s else "dear"

    def check(self, est: Estimate, spec: RenderSpec) -> None:
        """TooLarge when the render is estimated over the ceiling."""
        ceiling = self.settings.render_max_cost_s
        if est.seconds > ceiling:
            raise TooLarge(
                f"the render of {spec.width}×{spec.height} (supersample {spec.supersample}) is estimated at "
                f"{est.seconds:.1f} s of rendering ({est.per_sample * 1e6:.3g} µs a sample, "
                f"{'measured' if est.measured else 'assumed'} for this model), over INR_RENDER_MAX_COST_S="
                f"{ceiling:g}: ask for fewer pixels"
            )

    def over_budget(self, spec: RenderSpec, done: int, total: int, projected_s: float) -> TooLarge:
        return TooLarge(
            f"the render of {spec.width}×{spec.height} measured {projected_s:.1f} s of rendering after {done} of "
            f"{total} tiles, over INR_RENDER_MAX_COST_S={self.settings.render_max_cost_s:g}; stopped"
        )

    @asynccontextmanager
    async def slot(self, caller: str, est: Estimate, spec: RenderSpec, is_disconnected: Callable[[], Awaitable[bool]]):
        """Hold a slot of the render's lane for the body (its lane's name); raises TooLarge, TooManyRequests,
        QueueTimeout or ClientGone."""
        self.check(est, spec)
        lane = self.lane(est)
        dear = lane == "dear"
        if dear:
            share = self.settings.render_caller_share
            if self.dear[caller] >= share:
                wait = min(self.settings.render_timeout_s, self.dear_s[caller] / self.workers)
                raise TooManyRequests(
                    f"this client already has {self.dear[caller]} dear renders in flight or waiting "
                    f"(INR_RENDER_CALLER_SHARE={share}); this one is estimated at {est.seconds:.1f} s of rendering",
                    retry_after=max(1.0, wait),
                )
            self.dear[caller] += 1
            self.dear_s[caller] += est.seconds
        try:
            slots = self.lanes[lane]
            if not await acquire(slots, self.settings.queue_timeout_s, is_disconnected):
                raise QueueTimeout(
                    f"no render slot within {self.settings.queue_timeout_s:g} s (INR_QUEUE_TIMEOUT_S): "
                    f"{self.settings.render_concurrency} {lane} renders are in flight (INR_RENDER_CONCURRENCY)",
                    retry_after=max(1, round(self.settings.queue_timeout_s)),
                )
            try:
                yield lane
            finally:
                slots.release()
        finally:
            if dear:
                self.dear[caller] -= 1
                self.dear_s[caller] -= est.seconds
                if self.dear[caller] <= 0:
                    del self.dear[caller], self.dear_s[caller]


async def acquire(slots: asyncio.Semaphore, timeout: float, is_disconnected: Callable[[], Awaitable[bool]]) -> bool:
    """Take a slot within `timeout` seconds (False when none came); ClientGone when the client leaves meanwhile.
    (Not wait_for: before Python 3.12 it can drop an acquire that completes as the timeout fires, and the slot
    would leak.)"""
    if not slots.locked():
        await slots.acquire()  # free now: no wait, no watcher
        return True
    task = asyncio.ensure_future(slots.acquire())
    watcher = asyncio.ensure_future(_gone(is_disconnected))
    try:
        done, _ = await asyncio.wait({task, watcher}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        _give_up(task, slots)
        raise
    finally:
        watcher.cancel()
    if task in done:
        return True
    _give_up(task, slots)
    if watcher in done and not watcher.cancelled() and watcher.exception() is None:
        raise ClientGone("the client disconnected while its render waited for a slot")
    return False


def _give_up(task: asyncio.Future, slots: asyncio.Semaphore) -> None:
    """Stop waiting for a slot; one acquired just now is given back."""
    if task.done() and not task.cancelled():
        slots.release()
    else:
        task.cancel()
        task.add_done_callback(lambda t: slots.release() if not t.cancelled() else None)


async def _gone(is_disconnected: Callable[[], Awaitable[bool]]) -> None:
    while not await is_disconnected():
        await asyncio.sleep(DISCONNECT_POLL_S)
