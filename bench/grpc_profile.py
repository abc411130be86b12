"""Where a V2 infer's server time goes, over gRPC and over HTTP binary: py-spy and the threads' CPU.

One `python -m service --threads 1` (with `--env K=V` settings, e.g. INR_INLINE_RUN_MS=0) takes the clients of
`bench.grpc_http` (tritonclient processes, one request each in a loop) for `--seconds`, while `py-spy record`
samples the server (idle samples left out) and /proc gives each server thread's CPU. The samples are put in
the categories below by their innermost frame that has one, so that each category is its own (self) time. Code
without Python frames (grpc's Cython server and C core, uvloop, syscalls) falls to the innermost Python frame
around it: for grpc.aio that is asyncio's `Runner.run`, so "asyncio / threads" holds grpc.aio's call machinery.
The threads' CPU shows what runs beside the event loop (grpc's C-core "event_engine" threads, the poller):

    python -m bench.grpc_profile --workload "2,000 coordinates" --clients 1 [--protocol http] [--raw stacks.txt]

Needs `py-spy` (pip) beside the interpreter or on PATH.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

from .grpc_http import WORKLOADS, measure
from .serving import ROOT, Server

# (category, the frame's text contains this); the first match from the innermost frame outwards wins
CATEGORIES = [
    ("model (onnxruntime)", "onnxruntime/"),
    ("protobuf parse / serialise", "FromString"),
    ("protobuf parse / serialise", "SerializeToString"),
    ("protobuf parse / serialise", "google/protobuf/"),
    ("ours: gRPC servicer wrapper", "api/grpc/servicer.py"),
    ("ours: gRPC ↔ V2 conversion", "api/grpc/convert.py"),
    ("ours: V2 checks and tensors", "api/v2/"),
    ("ours: dataplane and batching", "service/engine/"),
    ("ours: metrics", "service/metrics/"),
    ("prometheus_client", "prometheus_client/"),
    ("ours: HTTP layers (server/, app)", "service/server/"),
    ("ours: HTTP layers (server/, app)", "service/app.py"),
    ("Starlette / FastAPI", "starlette/"),
    ("Starlette / FastAPI", "fastapi/"),
    ("uvicorn (the HTTP floor)", "uvicorn/"),
    ("uvicorn (the HTTP floor)", "httptools"),
    ("grpc.aio (Python side of the call machinery)", "grpc/aio/"),
    ("grpc (sync server)", "grpc/_server.py"),
    ("grpc (other)", "grpc/"),
    ("asyncio / threads", "asyncio/"),
    ("asyncio / threads", "threading.py"),
    ("asyncio / threads", "concurrent/"),
    ("numpy", "numpy/"),
]


def category(stack: str) -> str:
    for frame in reversed(stack.split(";")):
        for name, needle in CATEGORIES:
            if needle in frame:
                return name
    return "other"


def summarise(raw: str) -> Counter:
    """py-spy's collapsed stacks ("frame;frame;... count" per line) → samples by category."""
    out: Counter = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            out[category(stack)] += int(count)
    return out


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of the process by thread name (Python's threads are all "python")."""
    tick, out = os.sysconf("SC_CLK_TCK"), Counter()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        name = "main (the event loop)" if task.name == str(pid) else name.rstrip("0123456789-_") or name
        out[name] += (int(fields[11]) + int(fields[12])) / tick
    return out


def py_spy() -> str:
    here = Path(sys.executable).with_name("py-spy")
    found = str(here) if here.exists() else shutil.which("py-spy")
    if not found:
        raise SystemExit("py-spy not found: pip install py-spy")
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.grpc_profile", description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, default=ROOT / "models")
    p.add_argument("--workload", default="2,000 coordinates", choices=list(WORKLOADS))
    p.add_argument("--protocol", default="grpc", choices=("grpc", "http"))
    p.add_argument("--clients", type=int, default=1)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--rate", type=int, default=500)
    p.add_argument("--env", action="append", default=[], help="K=V: a setting of the server")
    p.add_argument("--raw", type=Path, help="also keep py-spy's collapsed stacks here")
    args = p.parse_args(argv)
    env = dict(kv.split("=", 1) for kv in args.env)
    server = Server(args.models, "profile", env, args=("--threads", "1")).wait()
    raw = Path(tempfile.mkdtemp(prefix="bench-grpc-profile-")) / "stacks.txt"
    result: dict = {}
    try:
        t = threading.Thread(
            target=lambda: result.update(measure(server, args.protocol, args.workload, args.clients, args.seconds + 2))
        )
        t.start()
        # measure() starts the clients, waits for each to connect and make a call, then warms up for 1 s
        threading.Event().wait(4)
        before = thread_cpu(server.proc.pid)
        subprocess.run(
            [
                py_spy(),
                "record",
                "--pid",
                str(server.proc.pid),
                "--rate",
                str(args.rate),
                "--duration",
                str(args.seconds),
                "--format",
                "raw",
                "--output",
                str(raw),
                "--nonblocking",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        after = thread_cpu(server.proc.pid)
        t.join()
    finally:
        server.stop()
    text = raw.read_text()
    if args.raw:
        args.raw.write_text(text)
    samples = summarise(text)
    total = sum(samples.values()) or 1
    n = result.get("req_s", 0) * (args.seconds + 2)
    lines = [
        f"{args.protocol}, {args.workload}, {args.clients} client(s), env {env or '-'}: "
        f"{result.get('req_s', 0):.0f} req/s, server CPU {result.get('cpu_ms', 0):.2f} ms/req, "
        f"load {os.getloadavg()[0]:.1f}",
        "",
        "| where (innermost frame) | share of samples |",
        "|---|---:|",
    ]
    lines += [f"| {k} | {v / total:.1%} |" for k, v in samples.most_common()]
    lines += ["", "| server thread | CPU s while sampled |", "|---|---:|"]
    lines += [
        f"| {k} | {after[k] - before.get(k, 0):.2f} |"
        for k in sorted(after, key=lambda k: before.get(k, 0) - after[k])
        if after[k] > before.get(k, 0)
    ]
    print("\n".join(lines) + f"\n\n(about {n:.0f} requests in the client window)")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
