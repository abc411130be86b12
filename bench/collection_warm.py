"""Warm tile latency, this tree beside another checkout (docs/benchmarks.md, collection): each serves its own
checkout's models/ (so each its own export of the bundled photo model) with the render cache off; the same 512²
IIIF tiles, as OpenSeadragon asks for them, are asked of each server in turns, round by round, after one warming
pass. Reports each server's median and p90 over every tile of every round, and the ratio of medians.

    git worktree add /tmp/base REV
    python -m bench.collection_warm --baseline /tmp/base --model dandelion --tiles 40 --rounds 5
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.collection_warm", description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path, required=True, help="another checkout of this project")
    p.add_argument("--model", default="dandelion")
    p.add_argument("--tiles", type=int, default=40)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    trees = {"this": ROOT, "base": args.baseline}
    env = {"INR_RENDER_CACHE_BYTES": "0", "INR_MODEL_LOADING": "startup"}
    servers = {name: Server(tree / "models", name, env=env, cwd=tree) for name, tree in trees.items()}
    try:
        for srv in servers.values():
            srv.wait(300)
        detail = httpx.get(f"{servers['this'].url}/v1/models/{args.model}", timeout=60).json()
        rng = random.Random(args.seed)
        urls = [tile_url(args.model, detail["width"], detail["height"], rng) for _ in range(args.tiles)]
        clients = {name: httpx.Client(base_url=srv.url, timeout=120) for name, srv in servers.items()}
        for name in servers:
            timed(clients[name], urls)  # warm: sessions, threads, allocator
        times: dict[str, list[float]] = {name: [] for name in servers}
        for r in range(args.rounds):
            for name in servers if r % 2 == 0 else reversed(list(servers)):
                times[name] += timed(clients[name], urls)
    finally:
        for srv in servers.values():
            srv.stop()
    rows = {
        name: {
            "median_ms": round(statistics.median(t), 2),
            "p90_ms": round(statistics.quantiles(t, n=10)[-1], 2),
            "tiles": len(t),
        }
        for name, t in times.items()
    }
    doc = {
        "machine": machine(),
        "command": "python -m bench.collection_warm " + " ".join(argv or sys.argv[1:]),
        "result": {**rows, "ratio_this_over_base": round(rows["this"]["median_ms"] / rows["base"]["median_ms"], 3)},
    }
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
