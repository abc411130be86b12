"""Warm tile latency and large requests, this tree beside other checkouts (docs/benchmarks.md, collection): each
serves its own checkout's models/ (so each its own export of the bundled photo model) with the render cache off and
its default threads; the same 512² IIIF tiles, as OpenSeadragon asks for them, are asked of each server in turns,
round by round, after one warming pass. Then a whole-image render (`/render` PNG, 1024² by default) and the large
request: the same 20,000 coordinates of that model, as `/v1/query` JSON and as a V2 binary tensor, one request
after another on each server in turns. Reports each server's median and p90 over every tile of every round, the
medians of the renders and of the large requests, the peak resident set of each server, and the ratios of
medians to each baseline.

    git worktree add /tmp/base REV
    python -m bench.collection_warm --baseline /tmp/base --model dandelion --tiles 40 --rounds 5
    python -m bench.collection_warm --baseline /tmp/a --baseline /tmp/b --large-coords 20000 --large-seconds 2
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from .collection import tile_url
from .serving import ROOT, Server, machine


def timed(client: httpx.Client, urls: list[str]) -> list[float]:
    out = []
    for url in urls:
        start = time.perf_counter()
        r = client.get(url)
        out.append((time.perf_counter() - start) * 1000)
        assert r.status_code == 200, r.text
    return out


def large_requests(model: str, n: int, seed: int) -> dict[str, tuple[str, bytes, dict]]:
    """`n` coordinates as v1 JSON and as a V2 binary tensor: label → (path, body, headers)."""
    x = np.random.default_rng(seed).random((n, 2)).round(6).astype(np.float32)
    head = json.dumps(
        {
            "inputs": [
                {"name": "coords", "datatype": "FP32", "shape": [n, 2], "parameters": {"binary_data_size": x.nbytes}}
            ],
            "outputs": [{"name": "rgb", "parameters": {"binary_data": True}}],
        }
    ).encode()
    binary = {"content-type": "application/octet-stream", "inference-header-content-length": str(len(head))}
    return {
        f"v1 query JSON, {n:,}": (
            f"/v1/models/{model}/query",
            json.dumps({"coords": x.tolist()}).encode(),
            {"content-type": "application/json"},
        ),
        f"V2 binary, {n:,}": (f"/v2/models/{model}/infer", head + x.tobytes(), binary),
    }


def posted(client: httpx.Client, request: tuple, seconds: float) -> list[float]:
    """Milliseconds of each request, one after another, for at least `seconds` (and at least 3): (path, body,
    headers) is a POST, (path, params) a GET."""
    out: list[float] = []
    end = time.perf_counter() + seconds
    while len(out) < 3 or time.perf_counter() < end:
        start = time.perf_counter()
        if len(request) == 3:
            r = client.post(request[0], content=request[1], headers=request[2])
        else:
            r = client.get(request[0], params=request[1])
        out.append((time.perf_counter() - start) * 1000)
        assert r.status_code == 200, r.text
    return out


def ratios(rows: dict[str, dict], key: str) -> dict[str, float]:
    return {f"this_over_{name}": round(rows["this"][key] / rows[name][key], 3) for name in rows if name != "this"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.collection_warm", description=__doc__.splitlines()[0])
    p.add_argument(
        "--baseline", type=Path, action="append", required=True, help="another checkout of this project (repeatable)"
    )
    p.add_argument("--model", default="dandelion")
    p.add_argument("--tiles", type=int, default=40)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--render", type=int, default=1024, help="width and height of the /render PNG (0: none)")
    p.add_argument("--large-coords", type=int, default=20_000, help="coordinates of the large request (0: none)")
    p.add_argument(
        "--large-seconds",
        type=float,
        default=2.0,
        help="seconds of renders and of each large request, per server and round",
    )
    args = p.parse_args(argv)
    trees = {"this": ROOT, **{("base" if i == 0 else f"base{i + 1}"): b for i, b in enumerate(args.baseline)}}
    env = {"INR_RENDER_CACHE_BYTES": "0", "INR_MODEL_LOADING": "startup"}
    servers = {name: Server(tree / "models", name, env=env, cwd=tree) for name, tree in trees.items()}
    large = large_requests(args.model, args.large_coords, args.seed) if args.large_coords else {}
    if args.render:
        size = {"width": args.render, "height": args.render, "format": "png"}
        large = {f"/render {args.render}²": (f"/v1/models/{args.model}/render", size), **large}
    try:
        for srv in servers.values():
            srv.wait(300)
        detail = httpx.get(f"{servers['this'].url}/v1/models/{args.model}", timeout=60).json()
        rng = random.Random(args.seed)
        urls = [tile_url(args.model, detail["width"], detail["height"], rng) for _ in range(args.tiles)]
        clients = {name: httpx.Client(base_url=srv.url, timeout=120) for name, srv in servers.items()}
        for name in servers:
            timed(clients[name], urls)  # warm: sessions, threads, allocator
            for request in large.values():
                posted(clients[name], request, 0)
        times: dict[str, list[float]] = {name: [] for name in servers}
        big: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            order = list(servers)[r % len(servers) :] + list(servers)[: r % len(servers)]
            for name in order:
                times[name] += timed(clients[name], urls)
            for label, request in large.items():
                for name in order:
                    big.setdefault((name, label), []).append(
                        statistics.median(posted(clients[name], request, args.large_seconds))
                    )
        peaks = {name: srv.peak_rss_mib() for name, srv in servers.items()}
    finally:
        for srv in servers.values():
            srv.stop()
    rows = {
        name: {
            "median_ms": round(statistics.median(t), 2),
            "p90_ms": round(statistics.quantiles(t, n=10)[-1], 2),
            "tiles": len(t),
            **{f"{label} ms": round(statistics.median(big[(name, label)]), 1) for label in large},
            "peak_rss_mib": peaks[name],
        }
        for name, t in times.items()
    }
    result = {**rows, "ratio": ratios(rows, "median_ms")}
    for label in large:
        result[f"ratio {label}"] = ratios(rows, f"{label} ms")
    doc = {
        "machine": machine(),
        "command": "python -m bench.collection_warm " + " ".join(argv or sys.argv[1:]),
        "trees": {name: str(tree) for name, tree in trees.items()},
        "result": result,
    }
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
