"""An image network made elsewhere (modelrepo/convention.py): the service's coordinates made the graph's, and the
graph's values made rgb, so that query, render, IIIF and the viewer serve it as they serve our own models. V2 infer
sends the graph its own tensors, untouched."""

from __future__ import annotations

import numpy as np

from modelrepo import ONNX_HEIGHT, ONNX_WIDTH, ModelSpec

from ..errors import ModelLoadError

DTYPES = {  # a V2 datatype's numpy type, for a graph's input
    "FP32": np.float32,
    "FP16": np.float16,
    "FP64": np.float64,
    "INT64": np.int64,
    "INT32": np.int32,
    "INT8": np.int8,
    "UINT8": np.uint8,
    "BOOL": np.bool_,
}
PROBE_SIDE = 8  # a probe render of PROBE_SIDE² pixels at load: a graph that gives NaN or Inf there is failed


class ForeignImage:
    """The affine maps of a spec's declared convention, applied with numpy."""

    def __init__(self, spec: ModelSpec):
        convention = spec.convention
        (sx, sy), (ox, oy), self.swap = convention.coordinate_map()
        self.scale = np.array([sx, sy], np.float32)
        self.offset = np.array([ox, oy], np.float32)
        self.value_scale, self.value_offset = (np.float32(v) for v in convention.value_map())
        self.input, self.output = spec.input.name, spec.outputs[0].name
        self.dtype = DTYPES[spec.input.datatype]
        self.channels = spec.outputs[0].shape[1]
        self.size = convention.native

    def coords(self, x: np.ndarray) -> np.ndarray:
        """The graph's coordinates [N, 2] for the service's (x right, y down, the unit square)."""
        g = np.asarray(x, np.float32) * self.scale + self.offset
        if self.swap:
            g = g[:, ::-1]
        return np.ascontiguousarray(g, self.dtype)

    def rgb(self, values: np.ndarray) -> np.ndarray:
        """rgb [N, 3] float32 of the graph's values [N, 1|3|4] (grey repeated; an alpha channel is not drawn)."""
        v = np.asarray(values, np.float32)
        v = np.repeat(v, 3, axis=1) if self.channels == 1 else v[:, :3]
        return v * self.value_scale + self.value_offset

    def run(self, session, x: np.ndarray) -> np.ndarray:
        """rgb at the service's coordinates `x` on `session`."""
        return self.rgb(session.run([self.output], {self.input: self.coords(x)})[0])

    def check(self, session, name: str, version: int) -> None:
        """ModelLoadError when the graph's `image_width`/`image_height` metadata (ONNX metadata_props, when it has
        them) are not the declared size, or when its values are not finite (`probe`)."""
        props = session.get_modelmeta().custom_metadata_map
        if ONNX_WIDTH in props or ONNX_HEIGHT in props:
            says = f"{props.get(ONNX_WIDTH)}×{props.get(ONNX_HEIGHT)}"
            declared = f"{self.size[0]}×{self.size[1]}" if self.size else "none (a square image)"
            if self.size is None or says != declared:
                raise ModelLoadError(
                    f"model '{name}' version {version}: the ONNX metadata says {says} pixels, config.pbtxt parameters "
                    f"image_width and image_height say {declared}: the declared convention contradicts the graph"
                )
        self.probe(session, name, version)

    def probe(self, session, name: str, version: int) -> None:
        """ModelLoadError when the graph gives NaN or Inf on a PROBE_SIDE² grid of pixel centres."""
        c = (np.arange(PROBE_SIDE, dtype=np.float32) + 0.5) / PROBE_SIDE
        gx, gy = np.meshgrid(c, c)
        x = np.stack([gx.ravel(), gy.ravel()], 1)
        out = session.run([self.output], {self.input: self.coords(x)})[0]
        if not np.isfinite(out).all():
            bad = int(np.argmax(~np.isfinite(out).all(axis=1)))
            raise ModelLoadError(
                f"model '{name}' version {version}: output '{self.output}' is NaN or Inf at the graph's coordinates "
                f"{self.coords(x[bad : bad + 1])[0].tolist()} (a probe of {PROBE_SIDE}x{PROBE_SIDE} pixels of the "
                "declared convention)"
            )
