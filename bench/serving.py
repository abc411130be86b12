"""Serving throughput with wrk (docs/benchmarks.md, serving) — classify with dynamic batching on and off, render with
1..N workers.

For each concurrency the two classify servers (same models, same threads, one with
INR_BATCHING=false) are loaded in turn by wrk, interleaved, for several rounds; the table keeps
the median round. Render runs GET /render at a fixed concurrency against servers with
different `--workers`. Every request body is real: one 28×28 digit as JSON for classify.

    python -m bench.serving                       # models/ if it has a digit model, else stand-ins
    python -m bench.serving --duration 5 --rounds 1 --concurrency 1,32   # quick

Needs `wrk` (Debian: apt-get install -y wrk). Results: bench/results/serving.json and a
markdown table on stdout's log.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from . import procs
from .common import cpu_model
from .ports import free_port as free_port  # where the tests and harnesses take it from

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("bench.serving")
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
    """`python -m service` in a subprocess on a free port: the one helper of the benchmarks and the tests
    (tests/servers.py). `args` are more command-line options; with `capture`, the server's output is kept
    for the error when it exits early; `cwd` is the checkout whose `service` runs (`bench.floor --baseline`); `port`
    a port to listen on (a replica restarted where nginx expects it), else a free one."""

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
        self.url = f"http://127.0.0.1:{self.port}"
        self.grpc_url = f"127.0.0.1:{self.grpc_port}"
        cmd = [
            sys.executable,
            "-m",
            "service",
            "--models",
            str(models),
            "--port",
            str(self.port),
            "--grpc-port",
            str(self.grpc_port),
            "--log-level",
            log_level,
            *(["--workers", str(workers)] if workers != 1 else []),
            *args,
        ]
        out = subprocess.PIPE if capture else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT if capture else subprocess.DEVNULL,
            text=True,
        )

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
        return procs.tree(self.proc.pid)

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of the server and its worker processes so far."""
        return procs.cpu_seconds(self.pids())

    def peak_rss_mib(self) -> float:
        """The peak resident sets (VmHWM) of the server's processes, added up, in MiB."""
        return round(sum(procs.status_kib(pid, "VmHWM") for pid in self.pids()) / 1024, 1)

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
    cmd = [
        "wrk",
        "-t1",
        f"-c{concurrency}",
        f"-d{duration:g}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        base + load.path,
    ]
    env = {
        **os.environ,
        "BENCH_BODY": str(load.body),
        "BENCH_METHOD": load.method,
        "BENCH_CTYPE": load.ctype,
        "BENCH_IHCL": load.ihcl,
    }
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60, env=env).stdout
    line = next(row for row in out.splitlines() if row.startswith("RESULT "))
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
    write_model_dir(
        repo / "digits-sinekan",
        task="digits",
        onnx_bytes=onnx,
        inputs=[TensorSpec("images", "FP32", [-1, 1, 28, 28])],
        outputs=[TensorSpec("logits", "FP32", [-1, 10]), TensorSpec("probabilities", "FP32", [-1, 10])],
        metadata={"description": "untrained SineKAN [784, 64, 10] stand-in for serving benchmarks"},
        max_batch_size=256,
        dynamic_batching_us=500,
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "training",
            "fit-image",
            "--image",
            "astronaut",
            "--size",
            "64",
            "--steps",
            "20",
            "--out",
            str(repo / "astronaut"),
            "--no-progress",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return "stand-ins: untrained SineKAN [784, 64, 10] grid 8 (the bundled digit architecture) and fit-image defaults"


def machine() -> dict:
    return {
        "cpu": cpu_model(),
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_before": os.getloadavg()[0],
    }


def median(values: list[float]) -> float:
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def summary(rounds: list[dict]) -> dict:
    """Medians over the rounds, and every round's throughput."""
    return {
        "rps": median([r["rps"] for r in rounds]),
        "p50_ms": median([r["p50_ms"] for r in rounds]),
        "p99_ms": median([r["p99_ms"] for r in rounds]),
        "errors": sum(r["errors"] for r in rounds),
        "cpu_ms_per_req": median([r["cpu_ms_per_req"] for r in rounds]),
        "rps_rounds": [round(r["rps"], 1) for r in rounds],
    }


def classify_loads(digits: str, tmp: Path) -> list[Load]:
    """One 28×28 digit per request: as v1 JSON, and as a V2 binary tensor (what tritonclient sends)."""
    img = np.random.default_rng(0).random((28, 28)).round(3)
    v1 = tmp / "classify.json"
    v1.write_text(json.dumps({"images": [img.tolist()]}))
    x = img.astype(np.float32)[None, None]
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "images",
                    "datatype": "FP32",
                    "shape": list(x.shape),
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "outputs": [{"name": "probabilities", "parameters": {"binary_data": True}}],
        }
    ).encode()
    v2 = tmp / "infer.bin"
    v2.write_bytes(head + x.tobytes())
    return [
        Load("v1 classify, JSON", f"/v1/models/{digits}/classify", v1, ctype="application/json"),
        Load(
            "v2 infer, binary", f"/v2/models/{digits}/infer", v2, ctype="application/octet-stream", ihcl=str(len(head))
        ),
    ]


def server_stats(url: str, model: str) -> dict:
    """From the server's own metrics: rows per onnxruntime run and compute milliseconds per row."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for sample in family.samples:
            if sample.labels.get("model") == model:
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    rows, runs = values["nv_inference_count_total"], values["nv_inference_exec_count_total"]
    return {
        "rows_per_run": rows / runs,
        "requests_per_run": values["inr_batch_requests_sum"] / runs,
        "compute_ms_per_row": values["inr_inference_compute_duration_seconds_sum"] * 1000 / rows,
    }


def bench_classify(repo: Path, digits: str, args, tmp: Path) -> list[dict]:
    loads = [load for load in classify_loads(digits, tmp) if load.label.split()[0] in args.protocols]
    env = {
        "INR_MAX_QUEUE_DELAY_MS": str(args.delay_ms),
        "INR_MAX_BATCH": str(args.max_batch),
        **({"INR_THREADS": str(args.threads)} if args.threads else {}),
    }
    w = args.classify_workers
    servers = {
        "on": Server(repo, "batching on", env, w),
        "off": Server(repo, "batching off", {**env, "INR_BATCHING": "false"}, w),
    }
    rows = []
    try:
        for s in servers.values():
            s.wait()
        time.sleep(w)  # every worker loads the models
        results: dict[tuple, list] = {}
        for rnd in range(args.rounds):
            for load in loads:
                for c in args.concurrency:
                    order = ("off", "on") if (rnd + c) % 2 == 0 else ("on", "off")
                    for variant in order:
                        s = servers[variant]
                        run_wrk(s.url, load, c, 1, args.script)  # warm-up
                        r = wrk(s, load, c, args.duration, args.script)
                        log.info(
                            "%s c=%d batching %s: %.0f req/s p50 %.1f ms p99 %.1f ms, %.2f CPU ms/req, "
                            "errors %d (load %.1f)",
                            load.label,
                            c,
                            variant,
                            r["rps"],
                            r["p50_ms"],
                            r["p99_ms"],
                            r["cpu_ms_per_req"],
                            r["errors"],
                            os.getloadavg()[0],
                        )
                        results.setdefault((load.label, c, variant), []).append(r)
            # the floor: CPU per request of a route that does nothing, same server, same round
            floor = wrk(
                servers["on"],
                Load("floor", "/v2/health/live", tmp / "empty", method="GET"),
                32,
                args.duration,
                args.script,
            )
            results.setdefault(("floor",), []).append(floor)
            log.info("GET /v2/health/live c=32: %.2f CPU ms/req", floor["cpu_ms_per_req"])
        floors = results.pop(("floor",))
        for (label, c, variant), rs in results.items():
            row = {"load": label, "concurrency": c, "batching": variant, **summary(rs)}
            if variant == "on":  # the ratio of each round's back-to-back pair, then the median
                pairs = [a["rps"] / b["rps"] for a, b in zip(rs, results[(label, c, "off")])]
                row["ratio_rounds"] = [round(x, 2) for x in pairs]
                row["ratio"] = median(pairs)
            rows.append(row)
        rows.append({"floor_get_live": summary(floors)})
        for variant, s in servers.items():
            rows.append({"server_metrics": variant, **server_stats(s.url, digits)})
    finally:
        for s in servers.values():
            s.stop()
    return rows


def bench_render(repo: Path, image: str, args, tmp: Path) -> list[dict]:
    body = tmp / "empty"
    load = Load(
        "render",
        f"/v1/models/{image}/render?width={args.render_size}&height={args.render_size}&format=png",
        body,
        method="GET",
    )
    results: dict[int, list] = {}
    for rnd in range(args.rounds):
        for workers in args.workers:
            s = Server(repo, f"{workers} workers", {}, workers=workers).wait()
            time.sleep(1)  # let every worker finish loading
            try:
                run_wrk(s.url, load, args.render_concurrency, 1, args.script)
                r = wrk(s, load, args.render_concurrency, args.render_duration, args.script)
            finally:
                s.stop()
            log.info(
                "render %d² workers %d: %.1f req/s p50 %.1f ms p99 %.1f ms",
                args.render_size,
                workers,
                r["rps"],
                r["p50_ms"],
                r["p99_ms"],
            )
            results.setdefault(workers, []).append(r)
    return [{"workers": w, **summary(results[w])} for w in args.workers]


def table(rows: list[dict], render: list[dict]) -> str:
    by = {(r["load"], r["concurrency"], r["batching"]): r for r in rows if "concurrency" in r}
    lines = [
        "| request | clients | off req/s | on req/s | on/off | off p50 ms | on p50 ms | off p99 ms | on p99 ms "
        "| off CPU ms/req | on CPU ms/req |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, c in sorted({k[:2] for k in by}, key=lambda k: (k[0], k[1])):
        off, on = by[(label, c, "off")], by[(label, c, "on")]
        lines.append(
            f"| {label} | {c} | {off['rps']:.0f} | {on['rps']:.0f} | {on['ratio']:.2f}× | "
            f"{off['p50_ms']:.1f} | {on['p50_ms']:.1f} | {off['p99_ms']:.1f} | {on['p99_ms']:.1f} | "
            f"{off['cpu_ms_per_req']:.2f} | {on['cpu_ms_per_req']:.2f} |"
        )
    extra = {k: r for r in rows for k in ("floor_get_live",) if k in r}
    if extra:
        f = extra["floor_get_live"]["floor_get_live"]
        lines += ["", f"Floor: GET /v2/health/live at 32 clients costs {f['cpu_ms_per_req']:.2f} CPU ms/req."]
    for r in rows:
        if "server_metrics" in r:
            lines.append(
                f"Batching {r['server_metrics']}: {r['rows_per_run']:.1f} rows per onnxruntime run, "
                f"{r['compute_ms_per_row']:.3f} compute ms per row."
            )
    if render:
        lines += ["", "| workers | render req/s | p50 ms | p99 ms | CPU ms/req |", "|---:|---:|---:|---:|---:|"]
        lines += [
            f"| {r['workers']} | {r['rps']:.1f} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['cpu_ms_per_req']:.0f} |"
            for r in render
        ]
    return "\n".join(lines)


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.serving", description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, default=ROOT / "models")
    p.add_argument("--concurrency", type=ints, default=[1, 8, 32, 64])
    p.add_argument("--duration", type=float, default=3.0, help="seconds per wrk run")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the table keeps medians")
    p.add_argument("--delay-ms", type=float, default=0.5, help="INR_MAX_QUEUE_DELAY_MS of the batching server")
    p.add_argument("--threads", type=int, default=0, help="INR_THREADS of the classify servers (0: the default)")
    p.add_argument("--max-batch", type=int, default=256)
    p.add_argument("--workers", type=ints, default=[1, 2], help="uvicorn workers of the render servers")
    p.add_argument("--classify-workers", type=int, default=1, help="uvicorn workers of the classify servers")
    p.add_argument("--render-size", type=int, default=64)
    p.add_argument("--render-concurrency", type=int, default=4)
    p.add_argument("--render-duration", type=float, default=6.0)
    p.add_argument("--protocols", type=lambda t: t.split(","), default=["v1", "v2"], help="v1,v2")
    p.add_argument("--skip", choices=("classify", "render"), action="append", default=[])
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "serving.json")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if shutil.which("wrk") is None:
        sys.stderr.write("error: wrk is not installed (Debian: apt-get install -y wrk)\n")
        return 2
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        args.script = tmp / "bench.lua"
        args.script.write_text(LUA)
        (tmp / "empty").write_text("")
        repo, source = args.models, f"repository {args.models}"
        found = find_models(repo) if repo.is_dir() else {}
        if "digits" not in found or "image" not in found:
            repo = tmp / "models"
            repo.mkdir()
            source = make_standins(repo)
            found = find_models(repo)
        info = {**machine(), "models": source, "command": "python -m bench.serving " + " ".join(argv or sys.argv[1:])}
        log.info("machine: %s", info)
        classify = [] if "classify" in args.skip else bench_classify(repo, found["digits"], args, tmp)
        render = [] if "render" in args.skip else bench_render(repo, found["image"], args, tmp)
    info["load_after"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": info, "classify": classify, "render": render}, indent=1))
    log.info("\n%s\n\nwritten to %s", table(classify, render), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
