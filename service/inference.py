"""How routes run a model: `await inference(model, x)` → the task's outputs by name.

`DirectInference` runs each request as its own onnxruntime call in the thread pool,
so the event loop stays free. This is the seam for dynamic batching (issue 5): any
`Inference` — e.g. one that queues rows per model, runs them together through
`model.predict` and splits the results — can replace `app.state.inference`, and the
query and classify routes use it unchanged.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np
from starlette.concurrency import run_in_threadpool

from .runtime import ModelRuntime


class Inference(Protocol):
    async def __call__(self, model: ModelRuntime, x: np.ndarray, timeout: float | None = None
                       ) -> dict[str, np.ndarray]:
        """`timeout`: the longest wait in a queue in seconds (V2's `timeout` parameter); None = the default."""


class DirectInference:
    async def __call__(self, model: ModelRuntime, x: np.ndarray, timeout: float | None = None
                       ) -> dict[str, np.ndarray]:
        return await run_in_threadpool(model.predict, x)
