"""A py-spy flame graph of the service under wrk: one workload at a fixed number of clients (docs/benchmarks.md, flame).

    python -m bench.flame --load "v1 classify" --clients 1 --seconds 10 --out docs/img/flame.svg \
        [--baseline /tmp/floor-base]

The service (`python -m service`, one onnxruntime thread per model as in `bench.floor`, or the checkout in
`--baseline`) serves the bundled models; wrk sends the workload of `bench.peers_loads` for a second to warm
up, then for `--seconds` more while `py-spy record` samples the server at `--rate` Hz (idle samples left
out, GIL holders and native frames as py-spy records them). Needs `wrk` and `py-spy` (pip).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from .peers_loads import workloads
from .serving import LUA, ROOT, Load, Server, run_wrk


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.flame", description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, default=ROOT / "models")
    p.add_argument("--load", default="v1 classify", help="the workload whose label starts with this")
    p.add_argument("--coords", type=int, default=2000)
    p.add_argument("--clients", type=int, default=1)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--rate", type=int, default=500)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--format", default="flamegraph", help="py-spy's: flamegraph (SVG) or raw (collapsed stacks)")
    p.add_argument("--baseline", type=Path, help="run the service of this checkout instead")
    args = p.parse_args(argv)
    w = next(w for w in workloads(args.models, "astronaut", "digits", args.coords) if w.label.startswith(args.load))
    tmp = Path(tempfile.mkdtemp(prefix="bench-flame-"))
    (tmp / "load.lua").write_text(LUA)
    (tmp / "body").write_bytes(w.body)
    load = Load(w.label, w.paths["inr"], tmp / "body", ctype=w.ctype, ihcl=w.ihcl)
    env = {"INR_THREADS": "1", "INR_MAX_QUERY_COORDS": "20000"}
    server = Server(args.models, "flame", env, cwd=args.baseline or ROOT).wait()
    try:
        run_wrk(server.url, load, args.clients, 1, tmp / "load.lua")
        result: dict = {}
        t = threading.Thread(
            target=lambda: result.update(run_wrk(server.url, load, args.clients, args.seconds + 2, tmp / "load.lua"))
        )
        t.start()
        spy = Path(sys.executable).with_name("py-spy")
        subprocess.run(
            [
                str(spy),
                "record",
                "--pid",
                str(server.proc.pid),
                "--rate",
                str(args.rate),
                "--duration",
                str(args.seconds),
                "--format",
                args.format,
                "--output",
                str(args.out),
                "--nonblocking",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        t.join()
    finally:
        server.stop()
    print(
        f"{w.label}, {args.clients} client(s): {result.get('rps', 0):.0f} req/s while sampled, "
        f"load {os.getloadavg()[0]:.1f}; flame graph in {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
