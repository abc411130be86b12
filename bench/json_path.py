"""JSON at numpy speed (docs/benchmarks.md, json_path) — /v1/query, V2 JSON and V2 binary against bare onnxruntime,
with a baseline tree of the service side by side in the same run.

Both servers serve the same model repository with 1 onnxruntime thread; bare onnxruntime runs the
same ONNX file with 1 thread in this process. For each size, each server answers sequential requests
on one keep-alive connection (median wall time of several, rounds alternating between servers) and
coordinates/s are compared with onnxruntime's, each against a bare run just before it, in wall time
and in CPU time (the server's own CPU, its onnxruntime run included, against onnxruntime's). Then wrk loads
2,000-coordinate /v1/query requests and
the server's CPU milliseconds per request are compared with the model's own CPU time for 2,000
coordinates.

    python -m bench.json_path --baseline 557bd02      # the tree before the fast path, beside this one
    python -m bench.json_path --sizes 2000 --rounds 1 --wrk-seconds 2     # quick

Needs `wrk` for the CPU part (Debian: apt-get install -y wrk). Results: bench/results/json_path.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from .common import RESULTS, checkout, ort_session, write_json
from .serving import LUA, ROOT, Load, Server, find_models, free_port, machine, median, wrk

log = logging.getLogger("bench.json_path")
MIN_SECONDS = 1.5  # per (server, protocol, round) measurement


class TreeServer(Server):
    """`python -m service` from another source tree (an older one may not know --grpc-port)."""

    def __init__(self, models: Path, name: str, env: dict, tree: Path):
        self.name, self.port = name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "service",
                "--models",
                str(models),
                "--port",
                str(self.port),
                "--log-level",
                "error",
            ],
            cwd=tree,
            env={**os.environ, **env, "PYTHONPATH": str(tree)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


def requests_for(image: str, coords: np.ndarray) -> dict[str, tuple[str, bytes, dict]]:
    """Per protocol: path, body, headers."""
    x = coords.astype(np.float32)
    v2 = {"name": "coords", "datatype": "FP32", "shape": list(x.shape)}
    head = json.dumps(
        {
            "inputs": [{**v2, "parameters": {"binary_data_size": x.nbytes}}],
            "outputs": [{"name": "rgb", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return {
        "v1 query JSON": (
            f"/v1/models/{image}/query",
            json.dumps({"coords": coords.tolist()}).encode(),
            {"content-type": "application/json"},
        ),
        "V2 JSON": (
            f"/v2/models/{image}/infer",
            json.dumps({"inputs": [{**v2, "data": x.ravel().tolist()}]}).encode(),
            {"content-type": "application/json"},
        ),
        "V2 binary": (
            f"/v2/models/{image}/infer",
            head + x.tobytes(),
            {"content-type": "application/octet-stream", "inference-header-content-length": str(len(head))},
        ),
    }


def seq_request(
    server: Server, client: httpx.Client, path: str, body: bytes, headers: dict, repeats: int
) -> tuple[float, float]:
    """Median wall seconds of sequential requests, and the server's CPU seconds per request."""
    client.post(path, content=body, headers=headers).raise_for_status()  # warm-up
    times, cpu0, start = [], server.cpu_seconds(), time.perf_counter()
    while len(times) < repeats or time.perf_counter() - start < MIN_SECONDS:  # /proc CPU ticks are 10 ms
        t0 = time.perf_counter()
        client.post(path, content=body, headers=headers).raise_for_status()
        times.append(time.perf_counter() - t0)
    return median(times), (server.cpu_seconds() - cpu0) / len(times)


def model_seconds(session, coords: np.ndarray, repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of one onnxruntime run (1 thread)."""
    x = coords.astype(np.float32)
    session.run(None, {"coords": x})
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        session.run(None, {"coords": x})
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return median(wall), median(cpu)


def check_answers(servers: dict, session, image: str) -> None:
    """Every server's /v1/query answer equals onnxruntime's (to the 6 decimals it rounds to)."""
    coords = np.random.default_rng(7).random((100, 2))
    want = session.run(None, {"coords": coords.astype(np.float32)})[0]
    for name, s in servers.items():
        got = np.asarray(httpx.post(f"{s.url}/v1/models/{image}/query", json={"coords": coords.tolist()}).json()["rgb"])
        assert np.abs(got - want).max() < 2e-6, f"{name} answers differently from onnxruntime"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.json_path", description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, default=ROOT / "models")
    p.add_argument(
        "--baseline", help="a checkout, or a git ref (e.g. the commit before the fast path), beside this tree"
    )
    p.add_argument("--sizes", default="2000,20000,200000", help="coordinates per request")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="at least this many sequential requests (and 1.5 s) per size, server, protocol and round",
    )
    p.add_argument("--wrk-seconds", type=float, default=5.0)
    p.add_argument("--wrk-connections", type=int, default=8)
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    image = find_models(args.models)["image"]
    onnx = next((args.models / image).glob("*/model.onnx"))
    session = ort_session(onnx, 1)
    env = {"INR_THREADS": "1", "INR_MAX_QUERY_COORDS": "262144", "INR_MAX_BODY_BYTES": str(64 << 20)}
    sizes = [int(v) for v in args.sizes.split(",")]
    info = machine()
    with tempfile.TemporaryDirectory() as tmp:
        servers = {"this tree": Server(args.models, "this tree", env)}
        if args.baseline:
            tree, sha = checkout(args.baseline)
            servers[f"baseline {tree.name if sha == 'unknown' else sha}"] = TreeServer(
                args.models, "baseline", env, tree
            )
        try:
            for s in servers.values():
                s.wait()
            check_answers(servers, session, image)
            rows = [size_row(servers, session, image, n, args) for n in sizes]
            cpu_rows = wrk_cpu(servers, session, image, args, Path(tmp))
        finally:
            for s in servers.values():
                s.stop()
    info["load_after"] = os.getloadavg()[0]
    result = {
        "machine": info,
        "command": "python -m bench.json_path " + " ".join(argv or sys.argv[1:]),
        "model": image,
        "threads": 1,
        "sizes": rows,
        "wrk_2000": cpu_rows,
    }
    write_json("json_path", result, args.out_dir)
    log.info("\n%s", table(result))
    return 0


def size_row(servers: dict, session, image: str, n: int, args) -> dict:
    """Each (server, protocol) against a bare onnxruntime run measured just before it, so that both
    see the same machine load; medians over the rounds of the wall and of the CPU ratios."""
    coords = np.random.default_rng(n).random((n, 2)).round(6)
    samples: dict[str, list[tuple[float, float, float, float]]] = {}
    for _ in range(args.rounds):
        for name, s in servers.items():
            with httpx.Client(base_url=s.url, timeout=300) as c:
                for proto, (path, body, headers) in requests_for(image, coords).items():
                    bare_wall, bare_cpu = model_seconds(session, coords, args.repeats)
                    wall, cpu = seq_request(s, c, path, body, headers, args.repeats)
                    samples.setdefault(f"{name} | {proto}", []).append((wall, cpu, bare_wall / wall, bare_cpu / cpu))
    out = {
        key: {
            "ms": median([v[0] for v in vs]) * 1000,
            "cpu_ms": median([v[1] for v in vs]) * 1000,
            "mcoords_s": n / median([v[0] for v in vs]) / 1e6,
            "vs_bare": median([v[2] for v in vs]),
            "cpu_vs_bare": median([v[3] for v in vs]),
        }
        for key, vs in samples.items()
    }
    bare_wall, bare_cpu = model_seconds(session, coords, args.repeats)
    row = {
        "coords": n,
        "bare_ms": bare_wall * 1000,
        "bare_cpu_ms": bare_cpu * 1000,
        "bare_mcoords_s": n / bare_wall / 1e6,
        "servers": out,
    }
    log.info("%d coords: %s", n, json.dumps(row))
    return row


def wrk_cpu(servers: dict, session, image: str, args, tmp: Path) -> dict:
    """Server CPU ms per 2,000-coordinate /v1/query under wrk, against the model's CPU ms for 2,000."""
    script = tmp / "bench.lua"
    script.write_text(LUA)
    coords = np.random.default_rng(2000).random((2000, 2)).round(6)
    path, body, _ = requests_for(image, coords)["v1 query JSON"]
    (tmp / "q2000.json").write_bytes(body)
    load = Load("v1 query 2000", path, tmp / "q2000.json", ctype="application/json")
    model_cpu = median([model_seconds(session, coords, args.repeats)[1] for _ in range(args.rounds)]) * 1000
    runs: dict[str, list[dict]] = {}
    for _ in range(args.rounds):
        for name, s in servers.items():
            runs.setdefault(name, []).append(wrk(s, load, args.wrk_connections, args.wrk_seconds, script))
    return {
        "model_cpu_ms": model_cpu,
        "connections": args.wrk_connections,
        "servers": {
            name: {
                "rps": median([r["rps"] for r in rs]),
                "cpu_ms_per_req": median([r["cpu_ms_per_req"] for r in rs]),
                "vs_model": median([r["cpu_ms_per_req"] for r in rs]) / model_cpu,
                "errors": sum(r["errors"] for r in rs),
            }
            for name, rs in runs.items()
        },
    }


def table(result: dict) -> str:
    lines = [
        "| coords | server · protocol | ms / request | server CPU ms | coords/s × bare (wall) | × bare (CPU) |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for row in result["sizes"]:
        lines.append(
            f"| {row['coords']:,} | bare onnxruntime, 1 thread | {row['bare_ms']:.1f} | "
            f"{row['bare_cpu_ms']:.1f} | 1.00 | 1.00 |"
        )
        for key, v in row["servers"].items():
            lines.append(
                f"| {row['coords']:,} | {key} | {v['ms']:.1f} | {v['cpu_ms']:.1f} | {v['vs_bare']:.2f} | "
                f"{v['cpu_vs_bare']:.2f} |"
            )
    w = result["wrk_2000"]
    lines += [
        "",
        f"wrk, {w['connections']} connections, 2,000-coordinate /v1/query; the model's own CPU time "
        f"for 2,000 coordinates: {w['model_cpu_ms']:.2f} ms",
        "",
        "| server | req/s | server CPU ms / request | × model CPU | errors |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, v in w["servers"].items():
        lines.append(f"| {name} | {v['rps']:.0f} | {v['cpu_ms_per_req']:.2f} | {v['vs_model']:.2f} | {v['errors']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
