"""The service's HTTP calls, described without doing any I/O.

Each function returns a `Call`: what to send and how to decode the answer. The sync and
async clients only differ in how they send it, so they share every call defined here.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

RENDER_FORMATS = ("png", "jpeg", "webp")
# V2 inference protocol datatypes the client can encode and decode.
V2_DTYPES = {
    "FP32": np.float32,
    "FP64": np.float64,
    "INT64": np.int64,
    "INT32": np.int32,
    "UINT8": np.uint8,
    "BOOL": np.bool_,
}


class ClientError(ValueError):
    """Bad arguments, caught before anything is sent."""


class ServiceError(Exception):
    """The service answered with an error status; `message` is its `{"error": …}` text, `retry_after` its
    Retry-After in seconds (a 429 or 503 says when to come back), else None."""

    def __init__(self, status: int, message: str, url: str = "", retry_after: float | None = None):
        super().__init__(f"{status} from {url}: {message}" if url else f"{status}: {message}")
        self.status = status
        self.message = message
        self.url = url
        self.retry_after = retry_after


@dataclass(frozen=True)
class Prediction:
    label: int
    probabilities: list[float]


@dataclass
class Call:
    method: str
    path: str
    json: Any = None
    params: dict | None = None
    files: list | None = None
    data: dict | None = None  # form fields, sent with `files` as multipart/form-data
    raise_for_error: bool = True
    decode: Callable[[Any], Any] = field(default=lambda response: response.json())


def check(response) -> Any:
    """Raise ServiceError for a 4xx/5xx, quoting the service's `error` message."""
    if response.status_code < 400:
        return response
    try:
        message = response.json().get("error") or response.text
    except ValueError:
        message = response.text or response.reason_phrase
    raise ServiceError(
        response.status_code, str(message), str(response.request.url), seconds(response.headers.get("retry-after"))
    )


def seconds(value: str | None) -> float | None:
    """A Retry-After in seconds (the HTTP-date form is not sent by this service: None)."""
    try:
        s = float(value) if value is not None else None
    except ValueError:
        return None
    return s if s is not None and math.isfinite(s) and s >= 0 else None


def _finite(name: str, values: Sequence[float]) -> list[float]:
    out = [float(v) for v in values]
    if not all(math.isfinite(v) for v in out):
        raise ClientError(f"{name} must be finite numbers, got {list(values)}")
    return out


def check_viewport(viewport: Sequence[float] | None) -> list[float] | None:
    if viewport is None:
        return None
    if len(viewport) != 4:
        raise ClientError(f"viewport must be 4 numbers x0,y0,x1,y1, got {len(viewport)}")
    x0, y0, x1, y1 = _finite("viewport", viewport)
    if not (x1 > x0 and y1 > y0):
        raise ClientError(f"viewport must have x1 > x0 and y1 > y0, got {[x0, y0, x1, y1]}")
    return [x0, y0, x1, y1]


def check_size(width: int, height: int) -> None:
    for label, v in (("width", width), ("height", height)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ClientError(f"{label} must be a positive integer, got {v!r}")


def list_models() -> Call:
    return Call("GET", "/v1/models", decode=lambda r: _models_list(r.json()))


def _models_list(payload: Any) -> list[dict]:
    return payload["models"] if isinstance(payload, dict) and "models" in payload else payload


def get_model(name: str) -> Call:
    return Call("GET", f"/v1/models/{name}")


def query(name: str, coords, transform: dict | None = None) -> Call:
    xy = np.asarray(coords, dtype=np.float64)
    if xy.ndim != 2 or xy.shape[1] != 2:
        raise ClientError(f"coords must have shape [N, 2], got {list(xy.shape)}")
    body: dict = {"coords": xy.tolist()}
    if transform is not None:
        body["transform"] = transform
    return Call(
        "POST",
        f"/v1/models/{name}/query",
        json=body,
        decode=lambda r: np.asarray(r.json()["rgb"], dtype=np.float32).reshape(-1, 3),
    )


def render(
    name: str,
    width: int,
    height: int,
    *,
    viewport=None,
    transform: dict | None = None,
    supersample: int = 1,
    format: str = "png",
) -> Call:
    """One render request; the answer is the encoded image bytes."""
    check_size(width, height)
    if format not in RENDER_FORMATS:
        raise ClientError(f"unknown format '{format}'; valid: {', '.join(RENDER_FORMATS)}")
    body: dict = {"width": int(width), "height": int(height), "supersample": int(supersample), "format": format}
    vp = check_viewport(viewport)
    if vp is not None:
        body["viewport"] = vp
    if transform is not None:
        body["transform"] = transform
    return Call("POST", f"/v1/models/{name}/render", json=body, decode=lambda r: r.content)


def _predictions(response) -> list[Prediction]:
    return [Prediction(int(p["label"]), [float(x) for x in p["probabilities"]]) for p in response.json()["predictions"]]


def classify(name: str, images) -> Call:
    """Classify [N, 28, 28] (or one [28, 28]) arrays in [0, 1], white digit on black."""
    arr = np.asarray(images, dtype=np.float64)
    if arr.shape == (28, 28) or arr.shape == (784,):
        arr = arr[None]
    if arr.ndim == 2 and arr.shape[1] == 784:
        arr = arr.reshape(-1, 28, 28)
    if arr.ndim != 3 or arr.shape[1:] != (28, 28):
        raise ClientError(f"images must have shape [N, 28, 28] or [N, 784], got {list(np.shape(images))}")
    return Call("POST", f"/v1/models/{name}/classify", json={"images": arr.tolist()}, decode=_predictions)


def classify_files(name: str, files: Sequence[str | Path | bytes]) -> Call:
    """Classify image files (PNG or JPEG, any size); the service does MNIST-style preprocessing."""
    parts = []
    for i, f in enumerate(files):
        if isinstance(f, (bytes, bytearray)):
            parts.append(("files", (f"image{i}.png", bytes(f), "image/png")))
        else:
            path = Path(f)
            mime = "image/jpeg" if path.suffix.lower() in (".jpg", ".jpeg") else "image/png"
            parts.append(("files", (path.name, path.read_bytes(), mime)))
    if not parts:
        raise ClientError("no image files given")
    return Call("POST", f"/v1/models/{name}/classify", files=parts, decode=_predictions)


def v2_ready(name: str) -> Call:
    """KServe V2 `GET /v2/models/{name}/ready`; decodes to True/False without raising."""
    return Call("GET", f"/v2/models/{name}/ready", raise_for_error=False, decode=lambda r: r.status_code == 200)


def v2_infer(name: str, inputs: dict[str, Any], outputs: Sequence[str] | None = None) -> Call:
    """KServe V2 `POST /v2/models/{name}/infer` with JSON tensors; decodes to {name: ndarray}."""
    tensors = []
    for tname, value in inputs.items():
        arr = np.asarray(value)
        dtype = next((k for k, t in V2_DTYPES.items() if arr.dtype == t), None)
        if arr.dtype == np.float64 or dtype is None:
            arr, dtype = arr.astype(np.float32), "FP32"
        tensors.append({"name": tname, "shape": list(arr.shape), "datatype": dtype, "data": arr.reshape(-1).tolist()})
    body: dict = {"inputs": tensors}
    if outputs:
        body["outputs"] = [{"name": o} for o in outputs]
    return Call("POST", f"/v2/models/{name}/infer", json=body, decode=lambda r: decode_v2(r.json()))


@dataclass(frozen=True)
class Submitted:
    """What `POST /v1/fits` answered: the job's record, and whether it is an existing job with the same bytes
    (`skip_existing`: 200) rather than a new one (202)."""

    record: dict
    existing: bool


def submit_fit(data: bytes, filename: str, options: dict | None = None, skip_existing: bool = False) -> Call:
    """Queue a fit of an image file's bytes; `options`: the form fields of POST /v1/fits (preset, size, steps,
    protocol, seed, name), None left out."""
    fields = {k: str(v) for k, v in (options or {}).items() if v is not None}
    if skip_existing:
        fields["skip_existing"] = "true"
    return Call(
        "POST",
        "/v1/fits",
        files=[("file", (filename, data, "application/octet-stream"))],
        data=fields,
        decode=lambda r: Submitted(r.json(), r.status_code == 200),
    )


def fits_with_sha256(sha256: str) -> Call:
    """Every job whose upload had these bytes (sha256, hex), newest first, in any state."""
    return Call("GET", "/v1/fits", params={"sha256": sha256}, decode=lambda r: r.json()["fits"])


def fit_record(job_id: str) -> Call:
    return Call("GET", f"/v1/fits/{job_id}")


def decode_v2(payload: dict) -> dict[str, np.ndarray]:
    out = {}
    for t in payload["outputs"]:
        dtype = V2_DTYPES.get(t["datatype"])
        if dtype is None:
            raise ServiceError(200, f"unsupported V2 datatype {t['datatype']!r} in output {t['name']!r}")
        out[t["name"]] = np.asarray(t["data"], dtype=dtype).reshape(t["shape"])
    return out


def decode_image(data: bytes) -> np.ndarray:
    """Encoded image bytes → uint8 [H, W, C] array (RGB, or RGBA if the image has alpha)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        img = img.convert("RGBA" if "A" in img.getbands() else "RGB")
        return np.asarray(img)
