"""The dataplane: the one place that runs inference, for every protocol.

In the manner of KServe's `DataPlane` and `Model.__call__`, a route decodes its protocol, calls
the dataplane, and encodes the answer; it holds no inference logic. The dataplane owns, once:

  - the row limits (service/engine/limits.py), checked before any work;
  - the per-task steps (service/engine/tasks.py: preprocess → predict → postprocess);
  - batching (service/engine/batching.py), and with it the queue deadlines and the inference metrics;
  - an empty batch, which is valid and needs no run;
  - the response cache of V2 inference, for models that enable it (service/engine/response_cache.py);
  - the model's residency: a version not in memory is loaded on first use, within the memory budget, and held
    while its request runs (service/engine/residency.py).

Errors are the domain errors of service/errors.py, mapped to HTTP in one place.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from telemetry import tracing

from ..geometry.sampling import Background
from ..metrics import Metrics
from ..settings import Settings
from .batching import BatchConfig, BatchingInference, Outputs
from .blocks import hold
from .cache import CacheStore
from .limits import check_rows, row_limit
from .residency import Residency
from .response_cache import lookup, response_key, store
from .runtime import ModelRuntime
from .tasks import DigitsRuntime, ImageRuntime
from .traced import infer_span


class TracedBatching(BatchingInference):
    """The batcher with each request's `inr.infer` span (service/engine/traced.py): used only with traces on."""

    async def __call__(self, model: ModelRuntime, x: np.ndarray, timeout: float | None = None) -> Outputs:
        with infer_span(model, len(x)):
            return await super().__call__(model, x, timeout)


class DataPlane:
    def __init__(
        self,
        settings: Settings,
        metrics: Metrics | None = None,
        cache: CacheStore | None = None,
        inflight: Callable[[], int] | None = None,
        residency: Residency | None = None,
    ):
        """`inflight`: requests in flight in the process (the drain's count), for the batcher's run on the loop.
        `residency`: loads a model version on first use, and holds it while its request runs."""
        self.settings, self.metrics, self.cache, self.residency = settings, metrics, cache, residency
        batching = TracedBatching if tracing.ON else BatchingInference  # nothing of traces on the path when off
        self.batcher = batching(BatchConfig.from_settings(settings), metrics, inflight)

    # -- limits ------------------------------------------------------------------------------------
    def row_limit(self, model: ModelRuntime) -> int:
        return row_limit(model, self.settings)[0]

    def check_rows(self, model: ModelRuntime, rows: int) -> None:
        """413 naming the limit, for a request of `rows` rows (coordinates, images, tensor rows)."""
        check_rows(model, rows, self.settings)

    # -- inference ---------------------------------------------------------------------------------
    async def infer(self, model: ModelRuntime, x: np.ndarray, timeout: float | None = None) -> Outputs:
        """Tensors in, tensors out (V2): batched with every other request to `model`."""
        self.check_rows(model, len(x))
        if not len(x):
            return {t.name: np.zeros([0, *[max(d, 0) for d in t.shape[1:]]], np.float32) for t in model.spec.outputs}
        if not (model.spec.response_cache and self.cache is not None and self.cache.max_bytes):
            return await self._run(model, x, timeout)
        start = time.perf_counter()  # the response cache (service/engine/response_cache.py)
        key = response_key(model, x)
        out = lookup(self.cache, key)
        hit = out is not None
        if not hit:
            out = await self._run(model, x, timeout)
            store(self.cache, key, out)
        if self.metrics is not None:
            self.metrics.cache(model.name, hit, time.perf_counter() - start, model.version)
        return out

    async def query(
        self, model: ImageRuntime, coords: np.ndarray, matrix: np.ndarray, background: Background
    ) -> np.ndarray:
        """RGB at the coordinates, sampled at their inverse-mapped model coordinates."""
        self.check_rows(model, len(coords))
        src = model.preprocess(coords, matrix)
        out = await self._run(model, model.graph_input(src))
        return model.postprocess(out, src, background)

    async def classify_json(self, model: DigitsRuntime, images: list, include_input: bool = False) -> list[dict]:
        """MNIST-style pixel arrays, as they are."""
        self.check_rows(model, len(images))
        return await self.classify(model, model.preprocess(images, self.row_limit(model)), include_input)

    async def classify(self, model: DigitsRuntime, x: np.ndarray, include_input: bool = False) -> list[dict]:
        """Prepared [N, 1, 28, 28] images (uploads made MNIST-like by the decoder)."""
        self.check_rows(model, len(x))
        out = await self._run(model, x)
        return model.postprocess(out, x, include_input)

    async def _run(self, model: ModelRuntime, x: np.ndarray, timeout: float | None = None) -> Outputs:
        """The batcher's run of `x`, the model loaded first unless resident, and held until the run is done."""
        if self.residency is not None:
            await self.residency.acquire(model, timeout)
        try:
            if getattr(model, "blocks", None) is None:
                return await self.batcher(model, x, timeout)
            async with hold(self.residency, model.needed_blocks(x), timeout):  # a block model: its blocks too
                return await self.batcher(model, x, timeout)
        finally:
            if self.residency is not None:
                self.residency.release(model)

    # -- life cycle --------------------------------------------------------------------------------
    def retire(self, models: list[ModelRuntime]) -> None:
        self.batcher.retire(models)

    async def close(self) -> None:
        await self.batcher.close()
