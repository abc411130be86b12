"""KServe V2 over gRPC against V2 HTTP binary, and the response cache: req/s and server CPU per request.

One `python -m service --threads 1` on the bundled models; for each workload (2,000 and 20,000 coordinates on
astronaut, one digit) and each number of clients, client *processes* (tritonclient.grpc or tritonclient.http
with binary tensors, the same request) loop for `--duration` seconds after a 1 s warm-up. Server CPU is the
user + system time of the server's processes (/proc) per request answered. Protocols alternate within a
round; the table gives the median of `--rounds` rounds.

`--cache` instead compares the response cache: a server whose astronaut has `response_cache { enable: true }`
against one without, on a repeated workload (every request the same tensor) and on one that never repeats
(every request new coordinates), V2 HTTP binary.

`--variant NAME:K=V,...` adds the service with those settings over gRPC, `--baseline DIR` the service of another
checkout (both protocols), and `--floor` the floors: uvicorn answering a constant body (bench/floor_app.py) and
grpc.aio and the sync grpc.server answering the service's own serialised answer (bench/grpc_floor.py). Every
server is measured in every round, in an order that rotates by round.

    python -m bench.grpc_http                       # gRPC vs HTTP binary, 1 and 8 clients, 3 rounds
    python -m bench.grpc_http --workload "2,000 coordinates" --floor --variant inline0:INR_INLINE_RUN_MS=0
    python -m bench.grpc_http --cache               # response cache on and off
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .serving import Server

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = {
    "2,000 coordinates": ("astronaut", "coords", (2000, 2)),
    "20,000 coordinates": ("astronaut", "coords", (20000, 2)),
    "one digit": ("digits", "images", (1, 1, 28, 28)),
}


def client_loop(
    protocol: str, url: str, model: str, name: str, shape: tuple, fresh: bool, ready, window, counts
) -> None:
    """Set up, wait for every client, then send until the window's end, counting the answers after its start.
    `fresh`: new random values every request."""
    import tritonclient.grpc as tg
    import tritonclient.http as th

    lib = tg if protocol == "grpc" else th
    c = lib.InferenceServerClient(url)
    rng = np.random.default_rng()
    x = rng.random(shape, dtype=np.float32)
    t = lib.InferInput(name, list(shape), "FP32")
    t.set_data_from_numpy(x)
    c.infer(model, [t])  # connected, first call made
    ready.wait()  # every client is set up
    ready.wait()  # the window is set
    start, end = window[0], window[1]
    n = errors = 0
    while time.time() < end:
        if fresh:
            t.set_data_from_numpy(rng.random(shape, dtype=np.float32))
        try:
            c.infer(model, [t])
            n += time.time() >= start
        except Exception:  # a failed request is counted, not timed
            errors += 1
    counts.put((n, errors))


def measure(server: Server, protocol: str, workload: str, clients: int, duration: float, fresh: bool = False) -> dict:
    model, name, shape = WORKLOADS[workload]
    url = server.grpc_url if protocol == "grpc" else server.url.removeprefix("http://")
    counts, ready, window = mp.Queue(), mp.Barrier(clients + 1), mp.Array("d", 2)
    procs = [
        mp.Process(target=client_loop, args=(protocol, url, model, name, shape, fresh, ready, window, counts))
        for _ in range(clients)
    ]
    for p in procs:
        p.start()
    ready.wait(timeout=300)
    start = time.time() + 1.0  # a warm-up second once every client is connected
    end = start + duration
    window[0], window[1] = start, end
    ready.wait(timeout=60)
    time.sleep(max(0.0, start - time.time()))
    cpu0 = server.cpu_seconds()
    time.sleep(max(0.0, end - time.time()))
    cpu1 = server.cpu_seconds()
    got = [counts.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
    n, errors = sum(g[0] for g in got), sum(g[1] for g in got)
    return {
        "protocol": protocol,
        "workload": workload,
        "clients": clients,
        "req_s": n / duration,
        "cpu_ms": (cpu1 - cpu0) * 1e3 / max(n, 1),
        "errors": errors,
    }


def median_rows(rounds: list[list[dict]]) -> list[dict]:
    out = []
    for rows in zip(*rounds):
        by = sorted(rows, key=lambda r: r["req_s"])
        out.append({**by[len(by) // 2], "errors": sum(r["errors"] for r in rows)})
    return out


def side_by_side(rows: list[dict], keys: list[str], a: str, b: str) -> str:
    """A markdown table of rows measured in pairs (a, b): req/s with server CPU ms per request, and b ÷ a."""
    lines = [
        f"| workload | {' | '.join(keys)} | {a} req/s (CPU ms/req) | {b} req/s (CPU ms/req) | {b} ÷ {a} | errors |",
        "|---|" + "---:|" * (len(keys) + 4),
    ]
    for x, y in zip(rows[::2], rows[1::2]):
        lines.append(
            f"| {x['workload']} | {' | '.join(str(x[k]) for k in keys)} | {x['req_s']:.0f} ({x['cpu_ms']:.2f}) "
            f"| {y['req_s']:.0f} ({y['cpu_ms']:.2f}) | {y['req_s'] / x['req_s']:.2f}× | "
            f"{x['errors'] + y['errors']} |"
        )
    return "\n".join(lines)


def wide(rows: list[dict], names: list[str]) -> str:
    """Per workload and clients: each target's req/s (server CPU ms/req, × the first target's req/s)."""
    by = {(r["workload"], r["clients"], r["target"]): r for r in rows}
    lines = ["| workload | clients | " + " | ".join(names) + " | errors |", "|---|---:|" + "---:|" * (len(names) + 1)]
    for w, c in dict.fromkeys((r["workload"], r["clients"]) for r in rows):
        first = by[(w, c, names[0])]["req_s"] or 1
        cells = [
            f"{x['req_s']:.0f} ({x['cpu_ms']:.2f}, {x['req_s'] / first:.2f}×)" for x in (by[(w, c, n)] for n in names)
        ]
        lines.append(f"| {w} | {c} | " + " | ".join(cells) + f" | {sum(by[(w, c, n)]['errors'] for n in names)} |")
    return "\n".join(lines)


def protocols(args) -> str:
    from .grpc_floor import floors

    servers = {"": Server(args.models, "grpc-http", args=("--threads", "1"))}
    targets = [("HTTP binary", "", "http"), ("gRPC", "", "grpc")]
    if args.baseline:
        servers["before"] = Server(args.models, "before", args=("--threads", "1"), cwd=args.baseline)
        targets += [("before: HTTP binary", "before", "http"), ("before: gRPC", "before", "grpc")]
    for v in args.variant:
        name, _, pairs = v.partition(":")
        env = dict(kv.split("=", 1) for kv in pairs.split(",") if kv)
        servers[name] = Server(args.models, name, env, args=("--threads", "1"))
        targets.append((f"gRPC, {name}", name, "grpc"))
    workloads = args.workload or list(WORKLOADS)
    try:
        for s in servers.values():
            s.wait()
        if args.floor:
            for name, protocol, server in floors(servers[""], {w: WORKLOADS[w] for w in workloads}):
                servers[name] = server
                targets.append((name, name, protocol))
        results: dict[tuple, list[dict]] = {}
        for rnd in range(args.rounds):
            for w in workloads:
                for c in args.clients:
                    order = targets[rnd % len(targets) :] + targets[: rnd % len(targets)]
                    for label, name, protocol in order:
                        r = measure(servers[name], protocol, w, c, args.duration)
                        results.setdefault((w, c, label), []).append(r)
                        print(
                            f"{w} c={c} {label}: {r['req_s']:.0f} req/s {r['cpu_ms']:.2f} CPU ms/req "  # noqa: T201
                            f"(load {os.getloadavg()[0]:.1f})",
                            file=sys.stderr,
                            flush=True,
                        )
    finally:
        for s in servers.values():
            s.stop()
    rows = [{**median_rows([[r] for r in rs])[0], "target": label} for (_, _, label), rs in results.items()]
    return wide(rows, [t[0] for t in targets])


def cache(args) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "cached"
        shutil.copytree(args.models / "astronaut", repo / "astronaut")
        cfg = repo / "astronaut" / "config.pbtxt"
        cfg.write_text(cfg.read_text() + "response_cache {\n  enable: true\n}\n")
        servers = {
            "off": Server(args.models, "cache-off", args=("--threads", "1")).wait(),
            "on": Server(repo, "cache-on", args=("--threads", "1", "--cache-config", "local,size=268435456")).wait(),
        }
        try:
            rounds = []
            for _ in range(args.rounds):
                rounds.append(
                    [
                        {
                            **measure(servers[s], "http", w, c, args.duration, fresh),
                            "requests": "never repeat" if fresh else "repeated",
                        }
                        for fresh in (False, True)
                        for w in list(WORKLOADS)[:2]
                        for c in args.clients
                        for s in ("off", "on")
                    ]
                )
        finally:
            for s in servers.values():
                s.stop()
    return side_by_side(median_rows(rounds), ["requests", "clients"], "cache off", "cache on")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.grpc_http", description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, default=ROOT / "models")
    p.add_argument("--clients", type=lambda s: [int(v) for v in s.split(",")], default=[1, 8])
    p.add_argument("--duration", type=float, default=4.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workload", action="append", choices=list(WORKLOADS), help="only these (repeatable)")
    p.add_argument("--variant", action="append", default=[], help="NAME:K=V,...: the service with these settings")
    p.add_argument("--baseline", type=Path, help="also the service of this checkout (git archive COMMIT service ...)")
    p.add_argument("--floor", action="store_true", help="also the HTTP and gRPC floors")
    p.add_argument("--cache", action="store_true", help="the response cache on and off instead of the protocols")
    args = p.parse_args(argv)
    print(cache(args) if args.cache else protocols(args))  # noqa: T201  (a command's result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
