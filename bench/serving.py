"""The servers and load of the HTTP benchmarks: `Server` (`python -m service` on a free port, its processes' CPU and
memory from /proc), `Load` and `wrk`/`run_wrk` (wrk with LUA, one thread, the server's CPU ms per request),
`find_models`, `make_standins`, `machine`, `summary`, and the workloads of the peers' scenarios (bench.peers).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

import httpx
import numpy as np

from .common import ROOT, cpu_model, cpu_seconds, median, ort_session, status_kib, tree
from .common import free_port as free_port  # where the tests and harnesses take it from

LUA = """
local f = io.open(os.getenv("BENCH_BODY"), "rb")
wrk.method = os.getenv("BENCH_METHOD")
if wrk.method == "POST" then
  wrk.body = f:read("*a")
  wrk.headers["Content-Type"] = os.getenv("BENCH_CTYPE")
  local n = os.getenv("BENCH_IHCL")
  if n ~= "" then wrk.headers["Inference-Header-Content-Length"] = n end
end
f:close()
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RESULT {"requests": %d, "errors": %d, "duration_s": %.3f, "p50_ms": %.3f, '
    .. '"p99_ms": %.3f}\\n', summary.requests, e.status + e.connect + e.read + e.write + e.timeout,
    summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
"""


class Server:
    """`python -m service` in a subprocess on a free port (or `port`), for the benchmarks and tests/servers.py:
    `args` more options, `capture` keeps its output for the error if it exits early, `cwd` the checkout it runs."""

    def __init__(
        self,
        models: Path,
        name: str = "service",
        env: dict | None = None,
        workers: int = 1,
        *,
        args: tuple[str, ...] = (),
        log_level: str = "error",
        capture: bool = False,
        cwd: Path = ROOT,
        port: int | None = None,
    ):
        self.name, self.port, self.grpc_port = name, port or free_port(), free_port()
        self.url, self.grpc_url = f"http://127.0.0.1:{self.port}", f"127.0.0.1:{self.grpc_port}"
        more = [*(["--workers", str(workers)] if workers != 1 else []), *args]
        cmd = [sys.executable, "-m", "service", "--models", str(models), "--port", str(self.port)]
        cmd += ["--grpc-port", str(self.grpc_port), "--log-level", log_level, *more]
        out, err = (subprocess.PIPE, subprocess.STDOUT) if capture else (subprocess.DEVNULL, subprocess.DEVNULL)
        self.proc = subprocess.Popen(cmd, cwd=cwd, env={**os.environ, **(env or {})}, stdout=out, stderr=err, text=True)

    def wait(self, timeout: float = 120) -> "Server":
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                said = f": {self.proc.stdout.read()}" if self.proc.stdout else ""
                raise RuntimeError(f"server {self.name} exited with {self.proc.returncode}{said}")
            try:
                if httpx.get(f"{self.url}/health/ready", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server {self.name} did not become ready")

    wait_ready = wait

    def pids(self) -> list[int]:
        """The server's process and its worker processes."""
        return tree(self.proc.pid)

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of the server and its worker processes so far."""
        return cpu_seconds(self.pids())

    def peak_rss_mib(self) -> float:
        """The peak resident sets (VmHWM) of the server's processes, added up, in MiB."""
        return round(sum(status_kib(pid, "VmHWM") for pid in self.pids()) / 1024, 1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Load:
    """One kind of request: a URL path, a body file and its headers."""

    def __init__(self, label: str, path: str, body: Path, method: str = "POST", ctype: str = "", ihcl: str = ""):
        self.label, self.path, self.body, self.method, self.ctype, self.ihcl = label, path, body, method, ctype, ihcl


def wrk(server: Server, load: Load, concurrency: int, duration: float, script: Path) -> dict:
    """wrk's numbers, plus the server's CPU milliseconds per request: throughput on a shared machine
    depends on the CPU share it gets, CPU per request much less."""
    cpu = server.cpu_seconds()
    r = run_wrk(server.url, load, concurrency, duration, script)
    r["cpu_ms_per_req"] = (server.cpu_seconds() - cpu) * 1000 / max(r["requests"], 1)
    return r


def run_wrk(base: str, load: Load, concurrency: int, duration: float, script: Path) -> dict:
    """wrk's RESULT line (requests, errors, duration_s, p50_ms, p99_ms), and req/s."""
    cmd = ["wrk", "-t1", f"-c{concurrency}", f"-d{duration:g}s", "--timeout", "10s", "-s", str(script)]
    env = {"BENCH_BODY": str(load.body), "BENCH_METHOD": load.method, "BENCH_CTYPE": load.ctype}
    env = {**os.environ, **env, "BENCH_IHCL": load.ihcl}
    out = subprocess.run([*cmd, base + load.path], capture_output=True, text=True, timeout=duration + 60, env=env)
    line = next(row for row in out.stdout.splitlines() if row.startswith("RESULT "))
    r = json.loads(line[len("RESULT ") :])
    r["rps"] = r["requests"] / r["duration_s"]
    return r


def find_models(repo: Path) -> dict[str, str]:
    """The first digits and the first image model of the repository, by metadata task."""
    found: dict[str, str] = {}
    for meta in sorted(repo.glob("*/metadata.json")):
        task = json.loads(meta.read_text()).get("task")
        found.setdefault(task, meta.parent.name)
    return found


def make_standins(repo: Path) -> str:
    """A digit model of the bundled SineKAN architecture ([784, 64, 10], grid 8; weights untrained:
    speed does not depend on them) and a small image model, written by the training code."""
    import torch

    from training.export import export_onnx
    from training.repository import TensorSpec, write_model_dir
    from training.sinekan import SineKAN

    class Digits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = SineKAN([784, 64, 10], grid_size=8)

        def forward(self, images):
            logits = self.body(images.flatten(1) * 2 - 1)
            return logits, torch.softmax(logits, dim=1)

    torch.manual_seed(0)
    onnx = export_onnx(Digits().eval(), torch.rand(2, 1, 28, 28), "images", ["logits", "probabilities"])
    inputs = [TensorSpec("images", "FP32", [-1, 1, 28, 28])]
    outputs = [TensorSpec(name, "FP32", [-1, 10]) for name in ("logits", "probabilities")]
    about = {"description": "untrained SineKAN [784, 64, 10] stand-in for serving benchmarks"}
    batching = {"max_batch_size": 256, "dynamic_batching_us": 500}
    kw = {"task": "digits", "onnx_bytes": onnx, "inputs": inputs, "outputs": outputs, "metadata": about, **batching}
    write_model_dir(repo / "digits-sinekan", **kw)
    cmd = [sys.executable, "-m", "training", "fit-image", "--image", "astronaut", "--size", "64", "--steps", "20"]
    subprocess.run([*cmd, "--out", str(repo / "astronaut"), "--no-progress"], cwd=ROOT, check=True, capture_output=True)
    return "stand-ins: untrained SineKAN [784, 64, 10] grid 8 (the bundled digit architecture) and fit-image defaults"


def machine() -> dict:
    """The CPU, the CPUs this process may use, Python, the date and the load before (bench.common's is fuller)."""
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cpus, python = len(os.sched_getaffinity(0)), platform.python_version()
    return {"cpu": cpu_model(), "cpus": cpus, "python": python, "date": date, "load_before": os.getloadavg()[0]}


def summary(rounds: list[dict]) -> dict:
    """Medians over the rounds, and every round's throughput."""
    out = {k: median([r[k] for r in rounds]) for k in ("rps", "p50_ms", "p99_ms")}
    errors, cpu = sum(r["errors"] for r in rounds), median([r["cpu_ms_per_req"] for r in rounds])
    return out | {"errors": errors, "cpu_ms_per_req": cpu, "rps_rounds": [round(r["rps"], 1) for r in rounds]}


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
    inputs = [{"name": name, "datatype": "FP32", "shape": list(x.shape), "data": x.ravel().tolist()}]
    return json.dumps({"inputs": inputs, "outputs": [{"name": output}]}).encode()


def v2_binary(name: str, x: np.ndarray, output: str) -> tuple[bytes, str]:
    tensor = {"name": name, "datatype": "FP32", "shape": list(x.shape), "parameters": {"binary_data_size": x.nbytes}}
    head = json.dumps({"inputs": [tensor], "outputs": [{"name": output, "parameters": {"binary_data": True}}]}).encode()
    return head + x.tobytes(), str(len(head))


def ours(path: str) -> dict[str, str]:
    """This service, with its defaults (`inr`), with two uvicorn workers (`inr2`) and from another checkout
    (`base`, --baseline)."""
    return {"inr": path, "inr2": path, "base": path}


def coordinate_loads(
    image: str, coords: np.ndarray, rgb: np.ndarray, bare: Callable, suffix: str = "", **extra
) -> tuple[Workload, Workload, Workload]:
    """`coords` as V2 JSON, V2 binary (this service and KServe) and v1 query (this service, LitServe, BentoML)."""
    v2_image, n, (binary, ihcl) = f"/v2/models/{image}/infer", f"{len(coords):,}", v2_binary("coords", coords, "rgb")
    load = partial(Workload, reference=rgb, coordinates=True, bare=bare)
    v2 = lambda: {**ours(v2_image), "kserve": v2_image}  # noqa: E731
    octets = {"ctype": "application/octet-stream", "ihcl": ihcl, **extra.get("binary", {})}
    v1 = {**ours(f"/v1/models/{image}/query"), "litserve": "/query", "bentoml": "/query"}
    v1_body = json.dumps({"coords": coords.tolist()}).encode()
    return (
        load(f"V2 JSON, {n} coordinates{suffix}", v2(), v2_json("coords", coords, "rgb"), read=v2_output("rgb")),
        load(f"V2 binary, {n} coordinates{suffix}", v2(), binary, read=v2_output("rgb"), **octets),
        load(f"v1 query, {n} coordinates{suffix}", v1, v1_body, read=v1_rgb, **extra.get("v1", {})),
    )


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
    classify = partial(Workload, reference=probs, bare=lambda: digit_model.run(["probabilities"], {"images": img}))
    v2_digits, v1_digits = f"/v2/models/{digits}/infer", f"/v1/models/{digits}/classify"
    v2_paths = {**ours(v2_digits), "kserve": v2_digits}
    v1_paths = {**ours(v1_digits), "litserve": "/classify", "bentoml": "/classify"}
    v2_json_load, v2_binary_load, v1_load = coordinate_loads(image, coords, rgb, bare_rgb)
    v2_body, v1_body = v2_json("images", img, "probabilities"), json.dumps({"images": [img[0, 0].tolist()]}).encode()
    return [
        v2_json_load,
        v2_binary_load,
        classify("V2 classify, JSON", v2_paths, v2_body, read=v2_output("probabilities")),
        classify("v1 classify, JSON", v1_paths, v1_body, read=v1_probabilities),
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
