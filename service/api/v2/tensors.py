"""The V2 inference protocol's request and response bodies, JSON and binary.

A request body is JSON, or — with the binary tensor extension — JSON of
`Inference-Header-Content-Length` bytes followed by the raw tensors of every input whose
`parameters.binary_data_size` is set, in input order. JSON `data` may be nested or flat
(row-major). Outputs come back as JSON `data`, or as raw bytes after the JSON when the
output asks for `binary_data` (or the request for `binary_data_output`). Everything here is
pure: bytes in, arrays out, and back; errors are `BadInput` naming the field.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field

import numpy as np
import orjson

from ...engine.json_numbers import describe, non_number
from ...errors import BadInput, TooLarge
from ..jsonbody import JSONError, loads

DTYPES = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
}
HEADER = "inference-header-content-length"


@dataclass
class InputTensor:
    name: str
    datatype: str
    shape: list[int]
    array: np.ndarray | None = None  # decoded by `decode`; None until then
    data: object = None  # the JSON `data`, or the binary bytes
    binary: bool = False
    booleans: bool = True  # False: the JSON text has no `true` or `false`, so `data` holds no boolean


@dataclass
class RequestedOutput:
    name: str
    binary: bool
    classification: int = 0  # top-k classes as "score:index" strings (classification extension)


@dataclass
class InferRequest:
    id: str | None
    inputs: list[InputTensor]
    outputs: list[RequestedOutput] | None  # None: all outputs
    binary_output: bool = False
    parameters: dict = field(default_factory=dict)


def decompress(body: bytes, encoding: str | None, limit: int) -> bytes:
    """Undo `Content-Encoding: gzip|deflate` (tritonclient's request compression), at most `limit` bytes."""
    if not encoding or encoding == "identity":
        return body
    if encoding not in ("gzip", "deflate"):
        raise BadInput(f"Content-Encoding '{encoding}' is not supported; use gzip, deflate or none")
    d = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as e:
        raise BadInput(f"body is not valid {encoding} data ({e})") from None
    if len(out) > limit or d.unconsumed_tail:
        raise TooLarge(f"the {encoding} body inflates beyond the limit of {limit} bytes (INR_MAX_BODY_BYTES)")
    return out


def _obj(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise BadInput(f"{where} must be a JSON object")
    return value


def _shape(value, where: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value):
        raise BadInput(f"{where}.shape must be a list of non-negative integers, got {json.dumps(value)[:80]}")
    return value


def parse_request(body: bytes, header_length: str | None) -> InferRequest:
    """Split JSON and binary parts and read the JSON; tensors stay undecoded (see `decode`)."""
    binary = b""
    if header_length is not None:
        if not header_length.strip().isdigit() or int(header_length) > len(body):
            raise BadInput(
                f"Inference-Header-Content-Length {header_length!r} must be a byte count no larger "
                f"than the body ({len(body)} bytes)"
            )
        n = int(header_length)
        body, binary = body[:n], body[n:]
    try:  # NaN, Infinity, 1e400 and huge integers are parsed, then refused by name in the checks
        doc = loads(body)
    except JSONError as e:
        raise BadInput(f"request is not valid JSON ({e})") from None
    doc = _obj(doc, "the request")
    params = _obj(doc.get("parameters") or {}, "parameters")
    rid = doc.get("id")
    if rid is not None and not isinstance(rid, str):
        raise BadInput("id must be a string")
    inputs_doc = doc.get("inputs")
    if not isinstance(inputs_doc, list) or not inputs_doc:
        raise BadInput("inputs must be a non-empty list of tensors")
    inputs, offset = [], 0
    booleans = b"true" in body or b"false" in body  # JSON writes a boolean no other way (`decode`)
    for i, t in enumerate(inputs_doc):
        t = _obj(t, f"inputs[{i}]")
        name = t.get("name")
        if not isinstance(name, str):
            raise BadInput(f"inputs[{i}].name must be a string")
        where = f"input '{name}'"
        datatype = t.get("datatype")
        if not isinstance(datatype, str):
            raise BadInput(f'{where}: datatype must be a string such as "FP32"')
        tensor = InputTensor(name, datatype, _shape(t.get("shape"), where), booleans=booleans)
        size = _obj(t.get("parameters") or {}, f"{where}.parameters").get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(binary):
                raise BadInput(
                    f"{where}: binary_data_size {size!r} does not fit the {len(binary) - offset} "
                    "binary bytes left after the JSON header"
                )
            tensor.data, tensor.binary = binary[offset : offset + size], True
            offset += size
        elif "data" in t:
            tensor.data = t["data"]
        else:
            raise BadInput(f"{where} has neither data nor parameters.binary_data_size")
        inputs.append(tensor)
    if offset != len(binary):
        raise BadInput(
            f"{len(binary) - offset} bytes after the JSON header belong to no input "
            "(check binary_data_size and Inference-Header-Content-Length)"
        )
    binary_output = bool(params.get("binary_data_output", False))
    outputs = None
    if doc.get("outputs") is not None:
        if not isinstance(doc["outputs"], list):
            raise BadInput('outputs must be a list of {"name": ...}')
        outputs = [_requested(o, i, binary_output) for i, o in enumerate(doc["outputs"])]
    return InferRequest(rid, inputs, outputs, binary_output, params)


def _requested(o, i: int, binary_default: bool) -> RequestedOutput:
    o = _obj(o, f"outputs[{i}]")
    if not isinstance(o.get("name"), str):
        raise BadInput(f"outputs[{i}].name must be a string")
    p = _obj(o.get("parameters") or {}, f"output '{o['name']}'.parameters")
    k = p.get("classification", 0)
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise BadInput(f"output '{o['name']}': classification must be a non-negative integer")
    return RequestedOutput(o["name"], bool(p.get("binary_data", binary_default)), k)


def decode(t: InputTensor) -> np.ndarray:
    """The tensor's values as an array of its datatype and shape; errors name the input."""
    where = f"input '{t.name}'"
    dtype = DTYPES.get(t.datatype)
    if dtype is None:
        raise BadInput(f"{where}: datatype '{t.datatype}' is not supported; supported: {', '.join(DTYPES)}")
    count = math.prod(t.shape)
    if t.binary:
        if len(t.data) != count * dtype.itemsize:
            raise BadInput(
                f"{where}: {len(t.data)} binary bytes do not match shape {t.shape} of {t.datatype} "
                f"({count * dtype.itemsize} bytes)"
            )
        return np.frombuffer(t.data, dtype).reshape(t.shape)
    try:
        raw = np.asarray(t.data)
    except ValueError:
        raise BadInput(f"{where}: data is ragged; give a flat list or equal-length nested lists") from None
    if raw.size and raw.dtype.kind not in ("b" if t.datatype == "BOOL" else "iuf" if dtype.kind == "f" else "iu"):
        raise BadInput(
            f"{where}: data must hold {t.datatype} numbers, found {raw.dtype.kind!r} values (strings, null or objects)"
        )
    # a value by value search, about as long as numpy's own pass: only where the text has a boolean to find
    found = non_number(t.data) if raw.dtype.kind != "b" and t.booleans else None
    if found is not None:  # a boolean among numbers, which numpy would take as 0 or 1
        raise BadInput(
            f"{where}: data{''.join(f'[{i}]' for i in found[0])} must be a {t.datatype} number, "
            f"got {describe(found[1])}"
        )
    if raw.size != count:
        raise BadInput(f"{where}: data has {raw.size} values but shape {t.shape} needs {count}")
    arr = raw.astype(dtype).reshape(t.shape)
    if dtype.kind in "iu" and raw.size and not np.array_equal(arr.ravel(), raw.ravel()):
        raise BadInput(f"{where}: data has values outside the range of {t.datatype}")
    return arr


def _classes(scores: np.ndarray, k: int) -> np.ndarray:
    """Top-k of the last axis as "score:index" strings (Triton's classification extension)."""
    flat = scores.reshape(len(scores), -1)
    top = np.argsort(-flat, axis=1, kind="stable")[:, :k]
    return np.array([[f"{flat[r, c]:f}:{c}" for c in row] for r, row in enumerate(top)], dtype=object)


def rejected_classes(scores: np.ndarray, k: int, reasons: list, digit: np.ndarray | None) -> np.ndarray:
    """`_classes` where an image that is not a digit answers first "P(digit):-1:REASON" (no class, index -1),
    then its k − 1 best classes."""
    arr = _classes(scores, k)
    for r, why in enumerate(reasons):
        if why is not None:
            p = float(digit[r]) if digit is not None else 0.0
            arr[r] = np.array([f"{p:f}:-1:{why}", *arr[r, : k - 1]], dtype=object)
    return arr


def _bytes_tensor(arr: np.ndarray) -> bytes:
    parts = []
    for s in arr.ravel():
        b = s.encode()
        parts += [len(b).to_bytes(4, "little"), b]
    return b"".join(parts)


def output_tensor(req: RequestedOutput, arr: np.ndarray) -> tuple[str, np.ndarray]:
    """An output as its V2 datatype and array; top-k classes (BYTES) when the request asks for classification."""
    if req.classification:
        arr = _classes(arr, req.classification)
    return ("BYTES" if arr.dtype == object else next(k for k, v in DTYPES.items() if v == arr.dtype)), arr


def raw_bytes(datatype: str, arr: np.ndarray) -> bytes:
    """The tensor's raw bytes as the binary extension and gRPC's raw_output_contents carry them."""
    return _bytes_tensor(arr) if datatype == "BYTES" else np.ascontiguousarray(arr, DTYPES[datatype]).tobytes()


def encode_response(
    model: str, version: str, rid: str | None, outputs: list[tuple[RequestedOutput, np.ndarray]]
) -> tuple[bytes, dict[str, str]]:
    """The response body and its headers: JSON, then the binary outputs in order."""
    tensors, chunks = [], []
    for req, arr in outputs:
        datatype, arr = output_tensor(req, arr)
        tensor = {"name": req.name, "datatype": datatype, "shape": list(arr.shape)}
        if req.binary:
            data = raw_bytes(datatype, arr)
            tensor["parameters"] = {"binary_data_size": len(data)}
            chunks.append(data)
        else:  # numbers go from numpy to JSON in orjson; FP16/FP32 widened as tolist() (and Triton) write them
            tensor["data"] = (
                arr.ravel().tolist()
                if datatype == "BYTES"
                else np.ascontiguousarray(arr.ravel(), np.float64 if arr.dtype.kind == "f" else None)
            )
        tensors.append(tensor)
    doc = {
        "model_name": model,
        "model_version": version,
        **({"id": rid} if rid is not None else {}),
        "outputs": tensors,
    }
    head = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    if not chunks:
        return head, {"content-type": "application/json"}
    return head + b"".join(chunks), {
        "content-type": "application/octet-stream",
        "inference-header-content-length": str(len(head)),
    }
