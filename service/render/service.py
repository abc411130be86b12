"""The render service: one `render(model, job)` for every image the service answers.

`/v1/models/NAME/render` and IIIF both describe what they want as a typed `RenderJob` (a
`RenderSpec` of samples, the encoding, and any pixel operation IIIF needs: gray, bitonal, the
corners of a rotated region) and call `RenderService.render`, which owns:

  - the limits (INR_MAX_SUPERSAMPLE, INR_MAX_RENDER_PIXELS, coordinates the float32 model can take);
  - the ETag, one per response: the sha256 of the model's files and the canonical job
    (service/render/cache.py), so If-None-Match is compared against the ETag of the very response
    it would produce, and a 304 is never decoded;
  - the render cache of encoded bytes, and its hit/miss metrics;
  - the render itself on the shared tile scheduler (service/render/core.py), the pixel operation on
    the array, and one encode.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import numpy as np
from fastapi.responses import Response

from telemetry import tracing

from ..engine.blocks import BlockedView, hold
from ..engine.cache import CacheStore
from ..engine.residency import Residency
from ..engine.runtime import ModelRuntime
from ..errors import BadInput, TooLarge
from ..metrics import Metrics
from ..settings import Settings
from .cache import CachedRender, etag_matches, etag_of, render_key
from .core import RenderCore, compute_render
from .imaging import MEDIA_TYPES, RenderSpec, check_render_coords, encode

Finish = Callable[[np.ndarray], object]  # [H, W, C] uint8 → the array or PIL image to encode


@dataclass(frozen=True)
class RenderJob:
    spec: RenderSpec
    format: str = "png"  # png | jpeg | webp
    quality: int = 90  # jpeg / webp
    finish: Finish | None = None  # a pixel operation before the one encode (IIIF quality, region mask)
    finish_key: str = ""  # what `finish` does, in the cache key and so in the ETag

    def encode(self, pixels: np.ndarray) -> bytes:
        return encode(self.finish(pixels) if self.finish else pixels, self.format, self.quality)


@dataclass(frozen=True)
class Rendered:
    status: int  # 200, or 304 when If-None-Match named this ETag
    body: bytes
    media_type: str
    headers: dict = field(default_factory=dict)  # exactly one ETag and one Cache-Control

    @property
    def etag(self) -> str:
        return self.headers["ETag"]

    def response(self, extra: dict | None = None) -> Response:
        headers = {**(extra or {}), **self.headers}
        if self.status == 304:
            return Response(status_code=304, headers=headers)
        return Response(self.body, media_type=self.media_type, headers=headers)


def check_limits(spec: RenderSpec, settings: Settings) -> RenderSpec:
    """The spec checked against the limits (TooLarge, BadInput naming the setting or the value)."""
    samples = spec.width * spec.height * spec.supersample**2
    if spec.supersample > settings.max_supersample:
        raise TooLarge(
            f"supersample {spec.supersample} is more than the limit of {settings.max_supersample} (INR_MAX_SUPERSAMPLE)"
        )
    if samples > settings.max_render_pixels:
        raise TooLarge(
            f"width × height × supersample² = {samples} is more than the limit of "
            f"{settings.max_render_pixels} (INR_MAX_RENDER_PIXELS)"
        )
    try:
        check_render_coords(spec)
    except ValueError as e:
        raise BadInput(str(e)) from None
    return spec


class RenderService:
    """Made in the app's lifespan; `render` is the one entry for every render."""

    def __init__(self, settings: Settings, metrics: Metrics, cache: CacheStore, residency: Residency | None = None):
        self.settings, self.metrics, self.cache, self.residency = settings, metrics, cache, residency
        self.core: RenderCore | None = None

    def start(self) -> None:
        self.core = RenderCore.start(self.settings, self.metrics)

    def close(self) -> None:
        if self.core is not None:
            self.core.close()

    async def render(
        self,
        model: ModelRuntime,
        job: RenderJob,
        *,
        cache_control: str,
        if_none_match: str | None = None,
        is_disconnected: Callable[[], Awaitable[bool]] | None = None,
        caller: str = "",
    ) -> Rendered:
        """The encoded image, or 304 when `if_none_match` names its ETag; from the cache when it can be.
        A caller that disconnects (a viewer that zoomed again) cancels the render at its next tile. `caller`
        (service/render/admission.py's `caller_key`) is whose share of the dear renders it counts against.
        Traced as `inr.render` (attribute `inr.cache`: hit, miss or not_modified) over `inr.render.plan`
        and, on a miss, service/render/core.py's `inr.render.tiles` and `inr.render.encode`."""
        spec = job.spec
        with tracing.span(
            "inr.render",
            attributes={
                "inr.model": model.name,
                "inr.model.version": model.version,
                "inr.width": spec.width,
                "inr.height": spec.height,
                "inr.supersample": spec.supersample,
                "inr.format": job.format,
            },
        ):
            return await self._render(model, job, cache_control, if_none_match, is_disconnected or _connected, caller)

    async def _render(self, model, job, cache_control, if_none_match, is_disconnected, caller) -> Rendered:
        start = time.perf_counter()
        with tracing.span("inr.render.plan"):
            check_limits(job.spec, self.settings)
            key = render_key(model, job.spec, job.format, job.quality, job.finish_key)
            headers = {"ETag": etag_of(key), "Cache-Control": cache_control}
        media_type = MEDIA_TYPES[job.format]
        if etag_matches(if_none_match, headers["ETag"]):
            tracing.annotate({"inr.cache": "not_modified"})
            self.metrics.cache(model.name, True, time.perf_counter() - start, model.version)
            return Rendered(304, b"", media_type, headers)
        cached = self.cache.get(key)
        tracing.annotate({"inr.cache": "miss" if cached is None else "hit"})
        if cached is not None:
            self.metrics.cache(model.name, True, time.perf_counter() - start, model.version)
            return Rendered(200, cached.data, cached.media_type, headers)
        if self.residency is not None:  # a miss: the model loaded first unless resident, held while it renders
            await self.residency.acquire(model)
        try:
            blocks = getattr(model, "blocks", None)
            if blocks is None or blocks.render_scale(job.spec) >= blocks.overview_pixel:
                data = await compute_render(self.core, model, job.spec, job.encode, is_disconnected, caller)
            else:  # a block model seen finer than its overview: from the blocks the render touches
                async with hold(self.residency, blocks.in_box(*render_box(job.spec))):
                    view = BlockedView(model, blocks)
                    data = await compute_render(self.core, view, job.spec, job.encode, is_disconnected, caller)
        finally:
            if self.residency is not None:
                self.residency.release(model)
        self.cache.put(key, CachedRender(headers["ETag"], media_type, data))
        self.metrics.cache(model.name, False, time.perf_counter() - start, model.version)
        return Rendered(200, data, media_type, headers)


def render_box(spec) -> tuple[float, float, float, float]:
    """The model-coordinate box a render samples: its viewport's corners through its matrix (an affine map)."""
    x0, y0, x1, y1 = spec.viewport
    corners = np.array([[x0, y0, 1.0], [x1, y0, 1.0], [x0, y1, 1.0], [x1, y1, 1.0]]) @ np.asarray(spec.matrix).T
    (bx0, by0), (bx1, by1) = corners.min(axis=0), corners.max(axis=0)
    return float(bx0), float(by0), float(bx1), float(by1)


async def _connected() -> bool:
    return False
