"""V2 inference against one model: check the request's tensors against the model, run, answer.

The checks (against the model's spec) name what is wrong, in Triton's terms: an unknown input or output, a wrong
datatype, a shape that does not fit the model's, a batch over the model's limit, NaN or Inf.
The input goes through the same `inference` (batching) as /v1 query and classify.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from modelrepo import config_json

from ...engine.dataplane import DataPlane
from ...engine.registry import Registry
from ...engine.runtime import ModelRuntime
from ...engine.tasks import DigitsRuntime
from ...errors import BadInput, ModelNotReady
from .tensors import InferRequest, RequestedOutput, decode, encode_response, rejected_classes


def model_version(model: ModelRuntime) -> str:
    return str(model.version)


def resolve(registry: Registry, name: str, version: str | None, ready: bool = False) -> ModelRuntime:
    """The named model's version `version` ("" or None = the highest ready one).
    With `ready`, a version that failed to load is a 503."""
    state = registry.get(name)
    if version:
        if not version.isdigit():
            raise BadInput(f"model version '{version}' is not a non-negative integer")
        model = state.known_version(int(version))
    else:
        model = state.serving or (state.versions[-1] if state.versions else None)
        if model is None:
            raise ModelNotReady(name, state.status, state.reason)
    if ready and not model.ready:
        raise ModelNotReady(name, model.status, model.error)
    return model


def config_of(model: ModelRuntime) -> dict:
    """The model's Triton config (GET /v2/models/NAME/config), built from its spec."""
    kind = "KIND_GPU" if model.provider == "CUDAExecutionProvider" else "KIND_CPU"
    return config_json(model.spec, kind)


def metadata_of(model: ModelRuntime, registry: Registry) -> dict:
    state = registry.models.get(model.name)
    versions = [str(v.version) for v in state.versions if v.ready] if state else [model_version(model)]
    doc = {
        "name": model.name,
        "versions": versions,
        "platform": "onnxruntime_onnx",
        "inputs": [t.to_json() for t in model.spec.inputs],
        "outputs": [t.to_json() for t in model.spec.outputs],
    }
    size = model.image_size if model.task == "image" else None
    if size:  # the native pixel grid (docs/model-repository.md); gRPC's message has no parameters and drops it
        doc["parameters"] = {"image_width": size[0], "image_height": size[1]}
    return doc


def _fits(shape: list[int], want: tuple[int, ...]) -> bool:
    return len(shape) == len(want) and all(w < 0 or s == w for s, w in zip(shape, want))


def check_input(req: InferRequest, model: ModelRuntime, dataplane: DataPlane) -> np.ndarray:
    """The request's one input as float32, checked against the model's spec and limits."""
    spec = model.spec.input
    names = [t.name for t in req.inputs]
    extra = [n for n in names if n != spec.name]
    if extra:
        raise BadInput(f"unexpected inference input '{extra[0]}' for model '{model.name}'; its input is '{spec.name}'")
    if len(names) != 1:
        raise BadInput(f"expected 1 input but got {len(names)} inputs for model '{model.name}'")
    t = req.inputs[0]
    if t.datatype != spec.datatype:
        raise BadInput(
            f"inference input '{t.name}' data-type is '{t.datatype}', but model '{model.name}' "
            f"expects '{spec.datatype}'"
        )
    if not _fits(t.shape, spec.shape):
        raise BadInput(
            f"unexpected shape for input '{t.name}' for model '{model.name}': expected "
            f"{list(spec.shape)}, got {t.shape}"
        )
    if t.shape:
        dataplane.check_rows(model, t.shape[0])
    x = decode(t)
    if not np.all(np.isfinite(x)):
        raise BadInput(f"input '{t.name}' contains NaN or Inf")
    return x


def requested_outputs(req: InferRequest, model: ModelRuntime) -> list[RequestedOutput]:
    names = [t.name for t in model.spec.outputs]
    if req.outputs is None:
        return [RequestedOutput(n, req.binary_output) for n in names]
    for o in req.outputs:
        if o.name not in names:
            raise BadInput(
                f"unexpected inference output '{o.name}' for model '{model.name}'; outputs: {', '.join(names)}"
            )
    return req.outputs


def request_timeout(req: InferRequest) -> float | None:
    """Triton's `timeout` request parameter (schedule policy extension): microseconds a request may wait
    to be scheduled, 0 or absent = the server's limit (INR_QUEUE_TIMEOUT_S); in seconds, or None."""
    us = req.parameters.get("timeout")
    if us is None:
        return None
    if not isinstance(us, int) or isinstance(us, bool) or us < 0:
        raise BadInput(f"parameters.timeout must be a non-negative integer of microseconds, got {us!r}")
    return us / 1e6 if us else None


async def run(
    req: InferRequest, model: ModelRuntime, dataplane: DataPlane, deadline: float | None = None
) -> list[tuple[RequestedOutput, np.ndarray]]:
    """The checks above → the dataplane: the requested outputs, for HTTP and gRPC alike. `deadline`: seconds the
    caller still waits (gRPC's deadline); the shorter of it and the request's `timeout` parameter applies."""
    x = check_input(req, model, dataplane)
    wanted = requested_outputs(req, model)
    timeout = request_timeout(req)
    if deadline is not None:
        timeout = deadline if timeout is None else min(timeout, deadline)
    out = await dataplane.infer(model, x, timeout)
    if isinstance(model, DigitsRuntime) and any(o.classification for o in wanted):
        return digit_classes(model, wanted, out, x)
    return [(o, out[o.name]) for o in wanted]


def digit_classes(model: DigitsRuntime, wanted: list[RequestedOutput], out: dict, x: np.ndarray) -> list:
    """The classification extension on a digits model: what is not a digit answers "P(digit):-1:REASON" first
    (service/engine/tasks.py, `reasons`); the raw tensors stay the network's."""
    reasons = model.reasons(out, x)
    rule = model.rejection()
    digit = out[rule[0]].reshape(len(x), -1)[:, 0] if rule is not None else None
    return [
        (replace(o, classification=0), rejected_classes(out[o.name], o.classification, reasons, digit))
        if o.classification
        else (o, out[o.name])
        for o in wanted
    ]


async def infer(req: InferRequest, model: ModelRuntime, dataplane: DataPlane) -> tuple[bytes, dict]:
    """Decode → `run` → encode (HTTP)."""
    return encode_response(model.name, model_version(model), req.id, await run(req, model, dataplane))
