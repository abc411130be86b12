"""The workloads of `python -m bench.peers`: request bodies, where each server takes them, and how to read
each server's answer back as an array to check it against onnxruntime before any timing."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx
import numpy as np

from .common import ort_session

V2 = "application/json"
HEADER = "Inference-Header-Content-Length"


@dataclass
class Workload:
    label: str
    paths: dict[str, str]  # server name → URL path
    body: bytes
    reference: np.ndarray  # onnxruntime's answer for the body
    read: Callable[[httpx.Response], np.ndarray]
    ctype: str = "application/json"
    ihcl: str = ""  # Inference-Header-Content-Length of a binary V2 request
    coordinates: bool = False  # a coordinate workload (the ≥ 2× target)
    bare: Callable[[], object] = lambda: None  # the model alone on the same input, in this process
    large: bool = False  # a large request, served with each server's default threads; `bare` has onnxruntime's
    bare_target: float | None = None  # a large request: the goal for req/s at one client over `bare` runs/s
    checks: dict[str, float] = field(default_factory=dict)  # server → max abs difference


def v2_output(name: str) -> Callable[[httpx.Response], np.ndarray]:
    """The output tensor `name` of a V2 response, JSON data or binary after the JSON header."""

    def read(r: httpx.Response) -> np.ndarray:
        n = r.headers.get(HEADER)
        head = json.loads(r.content[: int(n)] if n else r.content)
        offset = int(n or 0)
        for out in head["outputs"]:
            size = (out.get("parameters") or {}).get("binary_data_size")
            if out["name"] == name:
                if size is None:
                    return np.asarray(out["data"], dtype=np.float64).reshape(out["shape"])
                return np.frombuffer(r.content[offset : offset + size], dtype=np.float32).reshape(out["shape"])
            offset += size or 0
        raise ValueError(f"no output '{name}' in the answer")

    return read


def v1_rgb(r: httpx.Response) -> np.ndarray:
    return np.asarray(r.json()["rgb"], dtype=np.float64)


def v1_probabilities(r: httpx.Response) -> np.ndarray:
    return np.asarray([p["probabilities"] for p in r.json()["predictions"]], dtype=np.float64)


def v2_json(name: str, x: np.ndarray, output: str) -> bytes:
    return json.dumps(
        {
            "inputs": [{"name": name, "datatype": "FP32", "shape": list(x.shape), "data": x.ravel().tolist()}],
            "outputs": [{"name": output}],
        }
    ).encode()


def v2_binary(name: str, x: np.ndarray, output: str) -> tuple[bytes, str]:
    head = json.dumps(
        {
            "inputs": [
                {"name": name, "datatype": "FP32", "shape": list(x.shape), "parameters": {"binary_data_size": x.nbytes}}
            ],
            "outputs": [{"name": output, "parameters": {"binary_data": True}}],
        }
    ).encode()
    return head + x.tobytes(), str(len(head))


def ours(path: str) -> dict[str, str]:
    """This service, with its defaults (`inr`), with two uvicorn workers (`inr2`) and from another checkout
    (`base`, --baseline)."""
    return {"inr": path, "inr2": path, "base": path}


def coordinate_loads(
    image: str, coords: np.ndarray, rgb: np.ndarray, bare: Callable, suffix: str = "", **extra
) -> tuple[Workload, Workload, Workload]:
    """`coords` as V2 JSON, V2 binary (this service and KServe) and v1 query (this service, LitServe, BentoML)."""
    v2_image, n = f"/v2/models/{image}/infer", f"{len(coords):,}"
    binary, ihcl = v2_binary("coords", coords, "rgb")
    common = {"coordinates": True, "bare": bare}
    v2_json_load = Workload(
        f"V2 JSON, {n} coordinates{suffix}",
        {**ours(v2_image), "kserve": v2_image},
        v2_json("coords", coords, "rgb"),
        rgb,
        v2_output("rgb"),
        **common,
    )
    v2_binary_load = Workload(
        f"V2 binary, {n} coordinates{suffix}",
        {**ours(v2_image), "kserve": v2_image},
        binary,
        rgb,
        v2_output("rgb"),
        ctype="application/octet-stream",
        ihcl=ihcl,
        **common,
        **extra.get("binary", {}),
    )
    v1_load = Workload(
        f"v1 query, {n} coordinates{suffix}",
        {**ours(f"/v1/models/{image}/query"), "litserve": "/query", "bentoml": "/query"},
        json.dumps({"coords": coords.tolist()}).encode(),
        rgb,
        v1_rgb,
        **common,
        **extra.get("v1", {}),
    )
    return v2_json_load, v2_binary_load, v1_load


def workloads(models: Path, image: str, digits: str, n_coords: int, seed: int = 0) -> list[Workload]:
    """V2 JSON and binary coordinates and V2 classify (this service and KServe); v1 classify and v1 query
    (this service, LitServe, BentoML). Inputs have few decimals, so JSON carries them exactly."""
    rng = np.random.default_rng(seed)
    coords = rng.random((n_coords, 2)).round(6).astype(np.float32)
    img = rng.random((1, 1, 28, 28)).round(3).astype(np.float32)
    image_model = ort_session(models / image / "1" / "model.onnx", 1)
    digit_model = ort_session(models / digits / "1" / "model.onnx", 1)
    rgb = image_model.run(["rgb"], {"coords": coords})[0]
    probs = digit_model.run(["probabilities"], {"images": img})[0]
    bare_rgb = lambda: image_model.run(["rgb"], {"coords": coords})  # noqa: E731
    bare_probs = lambda: digit_model.run(["probabilities"], {"images": img})  # noqa: E731
    v2_digits = f"/v2/models/{digits}/infer"
    v2_json_load, v2_binary_load, v1_load = coordinate_loads(image, coords, rgb, bare_rgb)
    return [
        v2_json_load,
        v2_binary_load,
        Workload(
            "V2 classify, JSON",
            {**ours(v2_digits), "kserve": v2_digits},
            v2_json("images", img, "probabilities"),
            probs,
            v2_output("probabilities"),
            bare=bare_probs,
        ),
        Workload(
            "v1 classify, JSON",
            {**ours(f"/v1/models/{digits}/classify"), "litserve": "/classify", "bentoml": "/classify"},
            json.dumps({"images": [img[0, 0].tolist()]}).encode(),
            probs,
            v1_probabilities,
            bare=bare_probs,
        ),
        v1_load,
    ]


def large_workloads(models: Path, image: str, n_coords: int, seed: int = 1) -> list[Workload]:
    """A large request (`n_coords` coordinates) as v1 JSON (this service, LitServe, BentoML) and as a V2 binary
    tensor (this service and KServe). Every server runs it with its default threads, and `bare` is onnxruntime
    with its own default (a thread per core, its arena on): what a caller would get from onnxruntime itself."""
    coords = np.random.default_rng(seed).random((n_coords, 2)).round(6).astype(np.float32)
    model = ort_session(models / image / "1" / "model.onnx", 0)
    rgb = model.run(["rgb"], {"coords": coords})[0]
    bare = lambda: model.run(["rgb"], {"coords": coords})  # noqa: E731
    goals = {"v1": {"large": True, "bare_target": 0.7}, "binary": {"large": True, "bare_target": 0.9}}
    _, v2_binary_load, v1_load = coordinate_loads(image, coords, rgb, bare, ", default threads", **goals)
    return [v1_load, v2_binary_load]


def check(load: Workload, server: str, url: str, atol: float) -> float:
    """POST the body once and compare the answer with onnxruntime's; ValueError names the difference."""
    headers = {"content-type": load.ctype, **({HEADER: load.ihcl} if load.ihcl else {})}
    r = httpx.post(url + load.paths[server], content=load.body, headers=headers, timeout=60)
    if r.status_code != 200:
        raise ValueError(f"{server} answers {load.label} with HTTP {r.status_code}: {r.text[:200]}")
    got = load.read(r)
    if got.shape != load.reference.shape:
        raise ValueError(f"{server} answers {load.label} with shape {got.shape}, onnxruntime {load.reference.shape}")
    diff = float(np.max(np.abs(got - load.reference)))
    if not diff <= atol:
        raise ValueError(f"{server} answers {load.label} {diff:.3g} away from onnxruntime (tolerance {atol:g})")
    load.checks[server] = diff
    return diff
