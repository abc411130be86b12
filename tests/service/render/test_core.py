"""The render core (service/render/core.py) leaves nothing of a render behind: once a render has answered, its tile
job, painter and image are freed by their references alone, not at Python's next cycle collection. A job that its
own deadline callback referred to was a cycle: under a 1 GiB budget with models loaded and unloaded all along, the
unloaded models' tables (pinned by the painters) took the server's resident set to 2 GiB between collections."""

from __future__ import annotations

import asyncio
import gc
import weakref

import numpy as np

from modelrepo import read_spec
from service.engine.runtime import RuntimeOptions
from service.engine.tasks import runtime_for
from service.metrics import Metrics
from service.render.core import RenderCore, compute_render
from service.render.imaging import RenderSpec, encode
from service.settings import Settings
from tests.service.engine.test_residency import PHOTO


async def never() -> bool:
    return False


def test_an_answered_render_holds_no_model_without_the_cycle_collector():
    runtime = runtime_for(PHOTO, read_spec(PHOTO), 1, RuntimeOptions())
    assert runtime.load(), runtime.error
    kernel = weakref.ref(runtime.lattice.kernel)
    spec = RenderSpec(300, 200, np.eye(3)[:2])

    async def go():
        core = RenderCore.start(Settings(), Metrics())
        try:
            return await compute_render(core, runtime, spec, lambda out: encode(out, "png"), never)
        finally:
            core.close()

    gc.collect()
    gc.disable()
    try:
        data = asyncio.run(go())
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        runtime.unload()
        assert kernel() is None, gc.get_referrers(kernel())
    finally:
        gc.enable()
