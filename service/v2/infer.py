"""V2 inference against one model: check the request's tensors against the model, run, answer.

The checks name what is wrong, in Triton's terms: an unknown input or output, a wrong
datatype, a shape that does not fit the model's, a batch over the model's limit, NaN or Inf.
The input goes through the same `inference` (batching) as /v1 query and classify.
"""
from __future__ import annotations

import numpy as np

from ..errors import BadInput, ModelNotReady, NotFound, TooLarge
from ..registry import Registry
from ..runtime import ModelRuntime
from ..settings import Settings
from .modelconfig import triton_config
from .tensors import InferRequest, RequestedOutput, decode, encode_response


def model_version(model: ModelRuntime) -> str:
    return str(model.metadata.get("version", 1))


def resolve(registry: Registry, name: str, version: str | None, ready: bool = False) -> ModelRuntime:
    """The named model; `version` ("" or None = latest) must be an integer the model has.
    With `ready`, a model that failed to load is a 503."""
    model = registry.get(name)
    if ready and not model.ready:
        raise ModelNotReady(name, model.status, model.error)
    if version:
        if not version.isdigit():
            raise BadInput(f"model version '{version}' is not a non-negative integer")
        if int(version) != int(model_version(model)):
            raise NotFound(f"unknown version {version} of model '{name}'; versions: {model_version(model)}")
    return model


_CONFIGS: dict[int, tuple[ModelRuntime, dict]] = {}


def config_of(model: ModelRuntime) -> dict:
    """The model's Triton config, read once per loaded model (a model folder is loaded once)."""
    cached = _CONFIGS.get(id(model))
    if cached is None or cached[0] is not model:
        cached = _CONFIGS[id(model)] = (model, triton_config(model.path, model.metadata, model.name))
    return cached[1]


def metadata_of(model: ModelRuntime) -> dict:
    meta = model.metadata
    return {"name": model.name, "versions": [model_version(model)], "platform": "onnxruntime_onnx",
            "inputs": meta.get("inputs", []), "outputs": meta.get("outputs", [])}


def _fits(shape: list[int], want: list[int]) -> bool:
    return len(shape) == len(want) and all(w < 0 or s == w for s, w in zip(shape, want))


def check_input(req: InferRequest, model: ModelRuntime, settings: Settings) -> np.ndarray:
    """The request's one input as float32, checked against the model's metadata and limits."""
    [spec] = [t for t in model.metadata["inputs"]]
    names = [t.name for t in req.inputs]
    extra = [n for n in names if n != spec["name"]]
    if extra:
        raise BadInput(f"unexpected inference input '{extra[0]}' for model '{model.name}'; "
                       f"its input is '{spec['name']}'")
    if len(names) != 1:
        raise BadInput(f"expected 1 input but got {len(names)} inputs for model '{model.name}'")
    t = req.inputs[0]
    if t.datatype != spec["datatype"]:
        raise BadInput(f"inference input '{t.name}' data-type is '{t.datatype}', but model '{model.name}' "
                       f"expects '{spec['datatype']}'")
    if not _fits(t.shape, spec["shape"]):
        raise BadInput(f"unexpected shape for input '{t.name}' for model '{model.name}': expected "
                       f"{spec['shape']}, got {t.shape}")
    x = decode(t)
    limit, what = _row_limit(model, settings)
    if len(x) > limit:
        raise TooLarge(f"inference request batch-size {len(x)} is more than the limit of {limit} for model "
                       f"'{model.name}' ({what})")
    if not np.all(np.isfinite(x)):
        raise BadInput(f"input '{t.name}' contains NaN or Inf")
    return x


def _row_limit(model: ModelRuntime, settings: Settings) -> tuple[int, str]:
    if model.task == "image":
        return settings.max_query_coords, "INR_MAX_QUERY_COORDS"
    batch = int(config_of(model).get("max_batch_size") or 0)
    return (batch, "max_batch_size in config.pbtxt") if batch > 0 else (settings.max_classify_images,
                                                                         "INR_MAX_CLASSIFY_IMAGES")


def requested_outputs(req: InferRequest, model: ModelRuntime) -> list[RequestedOutput]:
    names = [t["name"] for t in model.metadata["outputs"]]
    if req.outputs is None:
        return [RequestedOutput(n, req.binary_output) for n in names]
    for o in req.outputs:
        if o.name not in names:
            raise BadInput(f"unexpected inference output '{o.name}' for model '{model.name}'; "
                           f"outputs: {', '.join(names)}")
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


async def infer(req: InferRequest, model: ModelRuntime, settings: Settings, inference) -> tuple[bytes, dict]:
    x = check_input(req, model, settings)
    wanted = requested_outputs(req, model)
    timeout = request_timeout(req)
    if len(x):
        out = await inference(model, x, timeout)
    else:  # an empty batch is valid and needs no run
        out = {t["name"]: np.zeros([0, *[max(d, 0) for d in t["shape"][1:]]], np.float32)
               for t in model.metadata["outputs"]}
    return encode_response(model.name, model_version(model), req.id, [(o, out[o.name]) for o in wanted])
