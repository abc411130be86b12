"""`Client` (sync) and `AsyncClient` (asyncio) for the INR service, built on httpx.

Both expose the same methods. On `AsyncClient` every method is awaited:

    with Client("http://127.0.0.1:8000") as c:
        rgb = c.query("astronaut", [[0.5, 0.5]])
        img = c.render("astronaut", 8192, 8192)          # fetched as tiles, stitched

    async with AsyncClient(url) as c:
        preds = await c.classify("digits-sinekan", images)

Fits: `submit_fit(data, filename, skip_existing=True, preset=…)` → calls.Submitted(record, existing),
`fits_with_sha256(hex)`, `fit_record(job_id)`; `python -m inr_client fit` runs many (inr_client/fitting.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import AsyncIterator, Callable, Iterator, Sequence

import httpx
import numpy as np

from . import calls
from .calls import Call
from .output import ImageFileSink
from .tiles import join_band, plan, tile_side, tile_viewport

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TILE = 1024
DEFAULT_MAX_SAMPLES = 1 << 22  # per tile request: side² · supersample²

Progress = Callable[[int], None]  # called with the number of pixels just finished


class _Methods:
    """Methods that are one call each. `_do` returns the value (sync) or a coroutine (async)."""

    tile: int = DEFAULT_TILE
    max_samples: int = DEFAULT_MAX_SAMPLES

    def _do(self, call: Call):  # pragma: no cover - defined by subclasses
        raise NotImplementedError

    def models(self):
        """All models with name, task, status, provider and metadata."""
        return self._do(calls.list_models())

    def model(self, name: str):
        return self._do(calls.get_model(name))

    def query(self, name: str, coords, transform: dict | None = None):
        """RGB in [0, 1] at (x, y) coordinates of the unit square → float32 [N, 3]."""
        return self._do(calls.query(name, coords, transform))

    def render_bytes(
        self,
        name: str,
        width: int,
        height: int,
        *,
        viewport=None,
        transform=None,
        supersample: int = 1,
        format: str = "png",
    ):
        """One /render request; returns the encoded image."""
        return self._do(
            calls.render(
                name, width, height, viewport=viewport, transform=transform, supersample=supersample, format=format
            )
        )

    def classify(self, name: str, images):
        """Digit arrays [N, 28, 28] in [0, 1], white on black → list of Prediction."""
        return self._do(calls.classify(name, images))

    def classify_files(self, name: str, files: Sequence[str | Path | bytes]):
        """PNG/JPEG files or bytes of any size and colours → list of Prediction."""
        return self._do(calls.classify_files(name, files))

    def has_v2(self, name: str):
        """Whether the service answers the KServe V2 protocol for this model."""
        return self._do(calls.v2_ready(name))

    def infer(self, name: str, inputs: dict, outputs: Sequence[str] | None = None):
        """KServe V2 inference: {input name: array} → {output name: array}."""
        return self._do(calls.v2_infer(name, inputs, outputs))

    def submit_fit(self, data: bytes, filename: str, *, skip_existing: bool = False, **options):
        """Queue a fit of an image file's bytes (POST /v1/fits) → calls.Submitted(record, existing); with
        `skip_existing`, a job queued, running or succeeded with the same bytes is answered instead."""
        return self._do(calls.submit_fit(data, filename, options, skip_existing))

    def fits_with_sha256(self, sha256: str):
        """The fit jobs whose upload had these bytes (sha256, hex), newest first, in any state."""
        return self._do(calls.fits_with_sha256(sha256))

    def fit_record(self, job_id: str):
        return self._do(calls.fit_record(job_id))

    def _bands(self, name, width, height, viewport, transform, supersample, tile) -> Iterator[list[tuple]]:
        calls.check_size(width, height)
        viewport = calls.check_viewport(viewport)
        side = tile_side(supersample, self.max_samples, tile or self.tile)
        for band in plan(int(width), int(height), side):
            yield [
                (
                    t,
                    calls.render(
                        name,
                        t.width,
                        t.height,
                        viewport=tile_viewport(t, width, height, viewport),
                        transform=transform,
                        supersample=supersample,
                        format="png",
                    ),
                )
                for t in band
            ]


def _send_kwargs(call: Call) -> dict:
    return {"json": call.json, "params": call.params, "files": call.files, "data": call.data}


class Client(_Methods):
    """Synchronous client. `render` and `render_to_file` fetch large images tile by tile."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        timeout: float = 120.0,
        tile: int = DEFAULT_TILE,
        max_samples: int = DEFAULT_MAX_SAMPLES,
        headers: dict | None = None,
        http: httpx.Client | None = None,
    ):
        self.http = http or httpx.Client(base_url=url, timeout=timeout, headers=headers)
        self.tile, self.max_samples = tile, max_samples

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _do(self, call: Call):
        response = self.http.request(call.method, call.path, **_send_kwargs(call))
        if call.raise_for_error:
            calls.check(response)
        return call.decode(response)

    def render_bands(
        self,
        name: str,
        width: int,
        height: int,
        *,
        viewport=None,
        transform=None,
        supersample: int = 1,
        tile: int | None = None,
        progress: Progress | None = None,
    ) -> Iterator[np.ndarray]:
        """Yield the image as uint8 bands [h, width, C], top to bottom."""
        for band in self._bands(name, width, height, viewport, transform, supersample, tile):
            pieces = [calls.decode_image(self._do(c)) for _, c in band]
            if progress is not None:
                progress(sum(t.width * t.height for t, _ in band))
            yield join_band(pieces)

    def render(self, name: str, width: int, height: int, **kw) -> np.ndarray:
        """The whole image as uint8 [height, width, C], fetched as tiles and stitched."""
        return np.concatenate(list(self.render_bands(name, width, height, **kw)), axis=0)

    def render_to_file(self, path: str | Path, name: str, width: int, height: int, **kw) -> Path:
        """Render into `path` (.png streamed band by band; .jpg/.webp encoded at the end)."""
        with ImageFileSink(path, width, height) as sink:
            for band in self.render_bands(name, width, height, **kw):
                sink.add(band)
        return sink.path


class AsyncClient(_Methods):
    """asyncio client; tiles of a large render are fetched `concurrency` at a time."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        timeout: float = 120.0,
        tile: int = DEFAULT_TILE,
        max_samples: int = DEFAULT_MAX_SAMPLES,
        concurrency: int = 4,
        headers: dict | None = None,
        http: httpx.AsyncClient | None = None,
    ):
        self.http = http or httpx.AsyncClient(base_url=url, timeout=timeout, headers=headers)
        self.tile, self.max_samples = tile, max_samples
        self.concurrency = max(1, concurrency)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _do(self, call: Call):
        response = await self.http.request(call.method, call.path, **_send_kwargs(call))
        if call.raise_for_error:
            calls.check(response)
        return call.decode(response)

    async def render_bands(
        self,
        name: str,
        width: int,
        height: int,
        *,
        viewport=None,
        transform=None,
        supersample: int = 1,
        tile: int | None = None,
        progress: Progress | None = None,
    ) -> AsyncIterator[np.ndarray]:
        """Yield uint8 bands top to bottom; the next band is already being fetched meanwhile."""
        gate = asyncio.Semaphore(self.concurrency)

        async def fetch(t, call) -> np.ndarray:
            async with gate:
                image = calls.decode_image(await self._do(call))
            if progress is not None:
                progress(t.width * t.height)
            return image

        def start(band) -> list[asyncio.Task]:
            return [asyncio.ensure_future(fetch(t, c)) for t, c in band]

        bands = self._bands(name, width, height, viewport, transform, supersample, tile)
        current: list[asyncio.Task] = start(next(bands))
        ahead: list[asyncio.Task] = []
        try:
            while current:
                following = next(bands, None)
                ahead = start(following) if following is not None else []
                pieces = await asyncio.gather(*current)
                current, ahead = ahead, []
                yield join_band(list(pieces))
        finally:
            for task in current + ahead:
                task.cancel()

    async def render(self, name: str, width: int, height: int, **kw) -> np.ndarray:
        return np.concatenate([b async for b in self.render_bands(name, width, height, **kw)], axis=0)

    async def render_to_file(self, path: str | Path, name: str, width: int, height: int, **kw) -> Path:
        with ImageFileSink(path, width, height) as sink:
            async for band in self.render_bands(name, width, height, **kw):
                sink.add(band)
        return sink.path
