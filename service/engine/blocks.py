"""A block model's blocks (modelrepo/blocks.py, docs/model-repository.md "Block models"), served whole.

A blocked version is an `ImageRuntime` whose own session is the overview; each block is a `BlockRuntime`, a model
version of its own to the residency (service/engine/residency.py): listed with no session, loaded on first use
under the memory budget, held by the requests that need it, unloaded when least recently used.

`BlockSet.predict` answers coordinates of the whole image: each point goes to the blocks whose blend weight is not
zero there, in the blocks' own unit squares, and their answers are added with the weights (the same formulas as
the fit's, `modelrepo.blocks.axis_weights`). A request first holds the blocks its coordinates touch (`hold`).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import numpy as np

from modelrepo import ContractError
from modelrepo.blocks import Block, BlockLayout, axis_weights

from ..errors import ModelLoadError, ModelNotReady
from .runtime import ModelRuntime

if TYPE_CHECKING:
    from .residency import Residency


class BlockRuntime(ModelRuntime):
    """One block of a blocked version: its ONNX file `N/blocks/rRcC.onnx`, checked against the layout's sha256."""

    def __init__(self, parent: ModelRuntime, block: Block):
        self.block = block
        super().__init__(parent.path, parent.spec, parent.version, parent.options)
        self.record = parent.record
        self.status = "ready"

    def __repr__(self) -> str:
        return f"BlockRuntime({self.name} v{self.version} {self.block.file})"

    def files_stamp(self) -> tuple:
        if self.remote:
            m = self.options.repository.model(self.name)
            return ((m.files if m else {}).get(f"{self.version}/{self.block.file}"),)
        try:
            st = (self.path / str(self.version) / self.block.file).stat()
            return ((st.st_mtime_ns, st.st_size),)
        except OSError:
            return (None,)

    def file_bytes(self) -> int:
        return self.stamp[0][1] if self.stamp[0] is not None else 0

    @property
    def separable(self):  # a block renders the plain way
        return None

    @separable.setter
    def separable(self, value) -> None:
        pass

    def _load(self) -> None:
        path = self.fetch(self.block.file, self.block.sha256)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ModelLoadError(f"unreadable {self.version}/{self.block.file}: {e.strerror or e}") from None
        if hashlib.sha256(data).hexdigest() != self.block.sha256:
            raise ModelLoadError(
                f"{self.version}/{self.block.file} does not match the sha256 that metadata.json `blocks` records"
            )
        # verified above: the session cache may serve its optimised graph (no constant folding again after an eviction)
        cached = None if self.options.session_cache is None else (self.options.session_cache, self.block.sha256)
        self.session = self._session(path, self.session_threads, cached)
        self._check_signature()
        self.render_session = self.session
        self.lattice = self._lattice(path, self.session_threads)
        self.warmup_seconds = 0.0


class BlockSet:
    """The blocks of one blocked version, and the whole image's coordinates answered from them."""

    def __init__(self, parent: ModelRuntime, layout: BlockLayout):
        self.layout = layout
        self.record = parent.record  # the version record the layout was read from
        self.runtimes = {b.file: BlockRuntime(parent, b) for b in layout.blocks}
        self.x_edges, self.y_edges = layout.x_edges, layout.y_edges
        # the overview's pixel, in the image's pixels (its size as the layout records it, modelrepo/blocks.py)
        self.overview_pixel = max(layout.width, layout.height) / max(layout.overview)

    @classmethod
    def from_metadata(cls, parent: ModelRuntime, metadata: dict) -> "BlockSet | None":
        entry = metadata.get("blocks")
        if entry is None:
            return None
        source = metadata.get("source") or {}
        try:
            size = tuple(source["size"]) if isinstance(source.get("size"), list) else None
            return cls(parent, BlockLayout.from_metadata(entry, size))
        except ContractError as e:
            raise ModelLoadError(str(e)) from None

    def needed(self, x: np.ndarray) -> list[BlockRuntime]:
        """The blocks that coordinates `x` [N, 2] touch (none for no finite coordinate)."""
        if not len(x):
            return []
        finite = x[np.isfinite(x).all(axis=1)]
        if not len(finite):
            return []
        (x0, y0), (x1, y1) = finite.min(axis=0), finite.max(axis=0)
        return self.in_box(float(x0), float(y0), float(x1), float(y1))

    def in_box(self, x0: float, y0: float, x1: float, y1: float) -> list[BlockRuntime]:
        """The blocks that the unit-square box [x0, x1] × [y0, y1] touches."""
        w, h = self.layout.width, self.layout.height
        return [self.runtimes[b.file] for b in self.layout.touching(x0 * w, y0 * h, x1 * w, y1 * h)]

    def predict(self, x: np.ndarray) -> np.ndarray:
        """rgb [N, 3] at the whole image's coordinates `x` [N, 2], blended from the blocks (which the caller holds)."""
        layout = self.layout
        px = x[:, 0].astype(np.float64) * layout.width
        py = x[:, 1].astype(np.float64) * layout.height
        out = np.zeros((len(x), 3), np.float32)
        for runtime in self.needed(x):
            b = runtime.block
            weight = axis_weights(self.x_edges, layout.overlap, b.col, px) * axis_weights(
                self.y_edges, layout.overlap, b.row, py
            )
            mask = weight > 0
            if not mask.any():
                continue
            local = np.empty((int(mask.sum()), 2), np.float32)
            local[:, 0] = (px[mask] - b.x) / b.w
            local[:, 1] = (py[mask] - b.y) / b.h
            out[mask] += weight[mask, None] * runtime.render_rgb(local)
        return out

    def render_scale(self, spec) -> float:
        """The finer of a render's two sample steps, in the image's pixels (service/render/imaging.RenderSpec)."""
        (a, b, _), (d, e, _) = spec.matrix
        vx0, vy0, vx1, vy1 = spec.viewport
        sx = (vx1 - vx0) / (spec.width * spec.supersample)
        sy = (vy1 - vy0) / (spec.height * spec.supersample)
        w, h = self.layout.width, self.layout.height
        step_x = math.hypot(a * sx * w, d * sx * h)
        step_y = math.hypot(b * sy * w, e * sy * h)
        return min(step_x, step_y)

    def all_runtimes(self) -> list[BlockRuntime]:
        return list(self.runtimes.values())


class BlockedView:
    """What the render core draws from when a render needs the blocks: their blend, under the version's name."""

    separable = None

    def __init__(self, model: ModelRuntime, blocks: BlockSet):
        self.name, self.version, self.blocks = model.name, model.version, blocks

    def render_rgb(self, x: np.ndarray) -> np.ndarray:
        return self.blocks.predict(x)


@asynccontextmanager
async def hold(residency: "Residency | None", runtimes: list[BlockRuntime], timeout: float | None = None):
    """Hold `runtimes` (loaded first where they are not resident) for the body; released after it."""
    if residency is None:
        for r in runtimes:
            if not r.resident and not await asyncio.to_thread(r.load):
                raise ModelNotReady(r.name, f"failed in version {r.version}", r.error)
        yield
        return
    held: list[BlockRuntime] = []
    try:
        for r in runtimes:  # one after the other: the budget frees room for each in turn
            held.append(await residency.acquire(r, timeout))
        yield
    finally:
        for r in held:
            residency.release(r)
