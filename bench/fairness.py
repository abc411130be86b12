"""Fair tile scheduling (docs/benchmarks.md, fairness). How long a small render takes while big ones run.

With two 4096² renders in flight, a 256² render through the real service (bundled model, render
cache off) is timed against its idle latency, in the same run:
  - `tiles`: this service (renders take turns by tiles, service/render/scheduler.py);
  - `whole`: the old behaviour, emulated with INR_RENDER_CONCURRENCY=2: each render holds one of two
    slots for its whole length, so the small one waits for a big one to finish (capped by --cap-s).
Target: the small render ≤ 3× its idle latency with `tiles`.

    python -m bench.fairness                      # 4096² big renders, 256² small, 5 small renders
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from pathlib import Path

import httpx

from .common import ROOT, machine, median, setup_logging, write_json
from .serving import Server

log = logging.getLogger("bench.fairness")


def small_latency(url: str, size: int, i: int, timeout: float) -> float:
    start = time.perf_counter()
    r = httpx.get(
        f"{url}/v1/models/astronaut/render", params={"width": size, "height": size, "rotate": i}, timeout=timeout
    )
    r.raise_for_status()
    return time.perf_counter() - start


def run_mode(mode: str, args) -> dict:
    env = {
        "INR_RENDER_CACHE_BYTES": "0",
        "INR_RENDER_TIMEOUT_S": "3600",
        "INR_QUEUE_TIMEOUT_S": "3600",
        "INR_THREADS": str(args.threads),
        "INR_RENDER_WORKERS": str(args.workers),
        "INR_RENDER_CONCURRENCY": "2" if mode == "whole" else "4",
        "INR_RENDER_MAX_COST_S": "3600",  # its big render is dear on purpose (admission by cost, render/admission.py)
        "INR_RENDER_CALLER_SHARE": "64",  # every request comes from this one address
    }
    srv = Server(Path(args.models), mode, env).wait()
    try:
        for i in range(2):
            small_latency(srv.url, args.small, 1000 + i, 120)  # warm up
        idle = [small_latency(srv.url, args.small, i, 120) for i in range(args.repeats)]
        stop = threading.Event()
        clients = [httpx.Client(timeout=3600) for _ in range(2)]

        def big(c: httpx.Client, k: int) -> None:
            try:
                c.get(
                    f"{srv.url}/v1/models/astronaut/render",
                    params={"width": args.big, "height": args.big, "rotate": 0.5 + k},
                )
            except httpx.HTTPError:  # closed below: the server abandons the render
                pass

        threads = [threading.Thread(target=big, args=(c, k), daemon=True) for k, c in enumerate(clients)]
        for t in threads:
            t.start()
        time.sleep(args.settle_s)
        loaded, capped = [], False
        for i in range(args.repeats):
            try:
                loaded.append(small_latency(srv.url, args.small, 100 + i, args.cap_s))
            except httpx.TimeoutException:
                loaded.append(args.cap_s)
                capped = True
                break
        stop.set()
        for c in clients:
            c.close()
    finally:
        srv.stop()
    row = {
        "mode": mode,
        "idle_s": idle,
        "loaded_s": loaded,
        "idle_median_s": median(idle),
        "loaded_median_s": median(loaded),
        "ratio": median(loaded) / median(idle),
        "capped": capped,
    }
    log.info(
        "%s: idle %.3f s, with two %d² renders %.3f s (%.1f×)%s",
        mode,
        row["idle_median_s"],
        args.big,
        row["loaded_median_s"],
        row["ratio"],
        " (capped)" if capped else "",
    )
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=str(ROOT / "models"))
    p.add_argument("--big", type=int, default=4096)
    p.add_argument("--small", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="onnxruntime threads per model")
    p.add_argument("--workers", type=int, default=2, help="INR_RENDER_WORKERS")
    p.add_argument("--settle-s", type=float, default=3.0, help="head start of the big renders")
    p.add_argument("--cap-s", type=float, default=120.0, help="longest wait for one small render")
    p.add_argument("--modes", default="tiles,whole")
    p.add_argument("--name", default="fairness")
    args = p.parse_args(argv)
    setup_logging()
    rows = [run_mode(m, args) for m in args.modes.split(",")]
    write_json(args.name, {"machine": machine(), "args": vars(args), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
