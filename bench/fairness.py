"""Fair tile scheduling (docs/benchmarks.md, fairness). How long a small render takes while big ones run.

With two 4096² renders in flight, a 256² render through the real service (bundled model, render
cache off) is timed against its idle latency, in the same run:
  - `tiles`: this service (renders take turns by tiles, service/render/scheduler.py);
  - `whole`: the old behaviour, emulated with INR_RENDER_CONCURRENCY=2: each render holds one of two
    slots for its whole length, so the small one waits for a big one to finish (capped by --cap-s).
Target: the small render ≤ 3× its idle latency with `tiles`.

The `flood` scenario (issue 54, tests/security/test_render_flood.py): every render setting at its default, ATTACKERS
anonymous clients ask at once for upscales of different tiny regions (`0,0,10,10/^S,S`, no cache helps) of the
bundled Fourier astronaut (~2 µs of CPU a sample), while another client (another address, 127.0.0.2) asks for new
256 px tiles one after the other: the bystander's latency idle and under the attack (median, p95) and its statuses,
each attacker's status and seconds. With `--baseline DIR` (a checkout of main before a change, `git worktree add DIR
COMMIT`, run with this same Python) both trees in the same run, one after the other.

    python -m bench.fairness                      # 4096² big renders, 256² small, 5 small renders
    python -m bench.fairness flood --baseline /tmp/main-before   # about 3 minutes on 2 cores
    python -m bench.fairness flood --smoke                        # seconds: what tests/bench runs
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from .common import ROOT, machine, median, setup_logging, write_json
from .serving import Server

log = logging.getLogger("bench.fairness")
ATTACKERS = 6


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


def p95(xs: list[float]) -> float:
    return float(statistics.quantiles(xs, n=20, method="inclusive")[-1]) if len(xs) > 1 else xs[0]


def tile(client: httpx.Client, url: str, i: int, timeout: float) -> tuple[int | None, float]:
    """One new tile of about 256 px (256 - i % 64 wide: each new, no cache): (status or None for a timeout,
    seconds)."""
    start = time.perf_counter()
    try:
        r = client.get(f"{url}/iiif/3/astronaut/full/{256 - i % 64},/0/default.jpg", timeout=timeout)
        status = r.status_code
    except httpx.TimeoutException:
        status = None
    return status, time.perf_counter() - start


def attack(url: str, size: int, timeout: float) -> tuple[list[dict], list[threading.Thread]]:
    """ATTACKERS anonymous upscales of different tiny regions to `size`², sent together (tests/security's
    test_render_flood.py too): each thread's answer (status, error, retry_after, seconds) lands in its dict once it
    comes; an exception's name for its status when none came."""
    results = [{} for _ in range(ATTACKERS)]
    barrier = threading.Barrier(ATTACKERS)

    def one(i: int) -> None:
        barrier.wait()
        start = time.perf_counter()
        answer: dict = {}
        try:
            r = httpx.get(f"{url}/iiif/3/astronaut/{3 * i},{2 * i},10,10/^{size},{size}/0/default.jpg", timeout=timeout)
            error = r.json().get("error", "") if r.headers.get("content-type") == "application/json" else ""
            answer.update(status=r.status_code, error=error, retry_after=r.headers.get("retry-after"))
        except httpx.HTTPError as e:
            answer.update(status=type(e).__name__, error=repr(e), retry_after=None)
        results[i].update(answer, seconds=round(time.perf_counter() - start, 3))

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(ATTACKERS)]
    for t in threads:
        t.start()
    return results, threads


def run_tree(label: str, cwd: Path, repo: Path, args) -> dict:
    srv = Server(repo, label, cwd=cwd).wait()
    rows = []
    try:
        with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) as client:
            tile(client, srv.url, 63, 60)  # the model loaded and warm
            idle = [tile(client, srv.url, i, 60)[1] for i in range(args.repeats)]
            for k, size in enumerate(args.sizes):
                attackers, threads = attack(srv.url, size, args.attacker_timeout_s)
                time.sleep(args.settle_s)
                seen = [tile(client, srv.url, 1 + args.repeats * (k + 1) + i, args.cap_s) for i in range(args.repeats)]
                for t in threads:
                    t.join()
                loaded = [s for _, s in seen]
                row = {
                    "tree": label,
                    "attack": f"{ATTACKERS} × 0,0,10,10/^{size},{size}",
                    "idle_median_s": round(median(idle), 3),
                    "bystander_median_s": round(median(loaded), 3),
                    "bystander_p95_s": round(p95(loaded), 3),
                    "bystander_statuses": [s for s, _ in seen],
                    "attackers": attackers,
                }
                log.info(
                    "%s, %s: bystander %.3f s median, %.3f s p95 (idle %.3f s), statuses %s; attackers %s",
                    label,
                    row["attack"],
                    row["bystander_median_s"],
                    row["bystander_p95_s"],
                    row["idle_median_s"],
                    row["bystander_statuses"],
                    [(a["status"], a["seconds"]) for a in attackers],
                )
                rows.append(row)
                time.sleep(args.settle_s)  # what the attack left (a baseline's renders stopped at the timeout)
    finally:
        srv.stop()
    return {"tree": label, "rows": rows}


def flood(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fairness flood", description="a render flood against a bystander")
    p.add_argument("--baseline", type=Path, help="a checkout of main before the change, measured beside this one")
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[4096, 1536])
    p.add_argument("--repeats", type=int, default=9, help="bystander tiles idle and under each attack")
    p.add_argument("--settle-s", type=float, default=1.0, help="the attackers' head start")
    p.add_argument("--cap-s", type=float, default=30.0, help="longest wait for one bystander tile")
    p.add_argument("--attacker-timeout-s", type=float, default=90.0)
    p.add_argument("--smoke", action="store_true", help="this tree, one attack, 3 tiles: seconds")
    p.add_argument("--name", default="render_flood")
    p.add_argument("--out", type=Path, help="results folder (default bench/results)")
    args = p.parse_args(argv)
    if args.smoke:
        args.sizes, args.repeats, args.settle_s, args.baseline = [4096], 3, 0.5, None
    setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        shutil.copytree(ROOT / "models" / "astronaut", repo / "astronaut")
        trees = [("this", ROOT)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
        results = [run_tree(label, cwd, repo, args) for label, cwd in trees]
    payload = {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()}, "trees": results}
    write_json(args.name, payload, args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["flood"]:
        return flood(argv[1:])
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
