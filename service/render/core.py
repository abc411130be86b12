"""The render core: a checked RenderSpec → tiles on the shared scheduler → pixels → encoded bytes.

One path for every render (POST/GET /render and IIIF through service/render/service.py):
  - admission by its estimated cost (service/render/admission.py): refused over INR_RENDER_MAX_COST_S (413), a
    caller's share of the dear renders (429), then a slot of its lane, cheap or dear (INR_RENDER_CONCURRENCY
    renders in flight each; waiting longer than INR_QUEUE_TIMEOUT_S answers 503 with Retry-After);
  - its tiles on service/render/scheduler.py, taking turns with the other renders' tiles, on a dense grid's
    lattice when the render is axis-aligned (service/render/lattice.py), through the separable body
    (service/render/separable.py) when the model ships one, else the whole graph;
  - a deadline, INR_RENDER_TIMEOUT_S from arrival, checked before every tile (503), its measured cost against
    the ceiling (413), and the client's disconnect, polled, which stops it the same way; its tiles' measured
    cost then updates the model's estimate;
  - encoding by the render worker that finishes the last tile (no hand-off to another thread).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

import anyio
import numpy as np

from telemetry import tracing

from ..engine.cpus import available_cpus
from ..engine.memory import trim
from ..engine.runtime import ModelRuntime
from ..errors import ClientGone, QueueTimeout, RenderTimeout
from ..metrics import Metrics
from ..settings import Settings
from .admission import OVERRUN, Admission
from .imaging import RenderSpec, new_image, plain_sampler, render_tile
from .lattice import KERNEL_TILE_FACTOR, LATTICE_TILE_FACTOR, lattice_painter, lattice_sampler
from .scheduler import TileJob, TileScheduler
from .separable import separable_sampler
from .tiling import tiles

log = logging.getLogger(__name__)
DISCONNECT_POLL_S = 0.1
# after a render of at least this many samples, glibc's malloc_trim (engine/memory.py): its tiles' buffers, freed
# in the middle of the heap, would otherwise stay resident (a 4 MP render left ~50 MiB); a few ms against its seconds
TRIM_SAMPLES = 2**20


@dataclass
class RenderCore:
    """The app's render machinery, made in the lifespan: admission (lanes, shares, costs), the tile scheduler and
    metrics."""

    settings: Settings
    scheduler: TileScheduler
    admission: Admission
    metrics: Metrics

    @classmethod
    def start(cls, settings: Settings, metrics: Metrics) -> "RenderCore":
        workers = settings.render_workers or max(1, available_cpus() // settings.render_threads)
        return cls(settings, TileScheduler(workers), Admission(settings, workers), metrics)

    def close(self) -> None:
        self.scheduler.close()


def painter_for(model: ModelRuntime, spec: RenderSpec, out: np.ndarray, tile_samples: int):
    """(a tile → its pixels in `out`, samples per tile): the lattice kernel's pixels where it has them
    (service/render/lattice.py), else `sampler_for`'s samples through render_tile."""
    paint = lattice_painter(model, spec, out)
    if paint is not None:
        return paint, tile_samples * KERNEL_TILE_FACTOR
    sample, tile_samples = sampler_for(model, spec, tile_samples)
    return (lambda t: render_tile(spec, t, sample(t), out)), tile_samples


def sampler_for(model: ModelRuntime, spec: RenderSpec, tile_samples: int):
    """(the tiles' sampler, samples per tile): on the lattice for an axis-aligned render of a dense grid model
    (service/render/lattice.py), through the separable body for a model that ships one, else the whole graph."""
    sample = lattice_sampler(model, spec)
    if sample is not None:
        return sample, tile_samples * LATTICE_TILE_FACTOR
    if model.separable is not None:
        return separable_sampler(model.separable, spec, model.predict_features), tile_samples
    return plain_sampler(model.render_rgb, spec), tile_samples


async def compute_render(
    core: RenderCore,
    model: ModelRuntime,
    spec: RenderSpec,
    encode: Callable[[np.ndarray], bytes],
    is_disconnected: Callable[[], Awaitable[bool]],
    caller: str = "",
) -> bytes:
    """Admit by estimated cost, render tile by tile on the scheduler, encode. Raises TooLarge, TooManyRequests,
    QueueTimeout, RenderTimeout, ClientGone or the model's error."""
    arrived = time.monotonic()
    admission = core.admission
    est = admission.book.estimate(model, spec)
    try:
        async with admission.slot(caller, est, spec, is_disconnected):
            return await _render_in_slot(core, model, spec, encode, is_disconnected, arrived, est)
    except QueueTimeout:
        core.metrics.queue_timeout(model.name, "render")
        raise


async def _render_in_slot(core, model, spec, encode, is_disconnected, arrived, est) -> bytes:
    settings = core.settings
    admission = core.admission
    out = new_image(spec)
    paint, tile_samples = painter_for(model, spec, out, settings.render_tile_samples)

    def deadline_error(job: TileJob) -> Exception:
        core.metrics.render_deadlines.labels(model.name).inc()
        return RenderTimeout(
            f"the render of {spec.width}×{spec.height} ran past its deadline of "
            f"{settings.render_timeout_s:g} s (INR_RENDER_TIMEOUT_S); stopped after "
            f"{job.done} of {job.total} tiles"
        )

    context = contextvars.copy_context()  # inr.render's: the encode's span is its child, as the tiles' is

    def finish() -> bytes:
        with tracing.span("inr.render.encode"):
            return encode(out)

    job = TileJob(
        tiles(spec.height, spec.width, spec.supersample, tile_samples),
        paint,
        deadline=arrived + settings.render_timeout_s,
        on_deadline=deadline_error,
        on_cancel=lambda: ClientGone("the client disconnected; render abandoned"),
        finish=lambda: context.run(finish),  # by the worker of the last tile: no other thread's hand-off
        budget_s=settings.render_max_cost_s * OVERRUN / settings.render_threads,
        on_budget=lambda j: admission.over_budget(spec, j.done, j.total, j.projected_s() * settings.render_threads),
    )
    try:
        with tracing.span("inr.render.tiles", attributes={"inr.tiles": job.total}):
            data = await _tiles(core, job, model, spec, is_disconnected)
    finally:
        # what its tiles measured, finished or stopped: CPU seconds of the worker threads (an intra-op pool's other
        # threads, INR_RENDER_THREADS > 1, counted as busy as the worker)
        admission.book.observe(est, job.projected_s() * settings.render_threads)
    if spec.width * spec.height * spec.supersample**2 >= TRIM_SAMPLES:
        await anyio.to_thread.run_sync(trim)  # a large render's tiles leave free pages in the heap: give them back
    return data


async def _tiles(core: RenderCore, job: TileJob, model: ModelRuntime, spec: RenderSpec, is_disconnected):
    """The job's tiles on the scheduler, then its `finish`'s result; stopped when the client disconnects (looked at
    every DISCONNECT_POLL_S, from the first: most tiles are done before it)."""
    future = asyncio.wrap_future(core.scheduler.submit(job))

    async def watch() -> None:
        await asyncio.sleep(DISCONNECT_POLL_S)
        while not await is_disconnected():
            await asyncio.sleep(DISCONNECT_POLL_S)
        job.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        return await future
    except ClientGone:
        log.info("render of %s %dx%d abandoned: the client disconnected", model.name, spec.width, spec.height)
        raise
    except asyncio.CancelledError:
        job.cancel()
        raise
    finally:
        watcher.cancel()
