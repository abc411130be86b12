"""The ways to run a large request on an image model, side by side in-process (docs/benchmarks.md, peers): milliseconds
per run and the memory each leaves resident, on the same ONNX and the same coordinates.

Each variant runs in a fresh process of its own (glibc's heap and onnxruntime's allocators are per process), with
one malloc arena as `python -m service` sets it (service/engine/memory.py), and the variants take turns round by round:

- `whole-1t`: the whole run on a one-thread session with no arena (main before issue 49: an image model's one session);
- `bare`: onnxruntime's defaults (a thread per core, its arena on): what a caller gets from onnxruntime itself;
- `whole-2t`, `whole-2t-arena`: the whole run on a session with INR_THREADS intra-op threads, without and with its
  arena (`a21f3f8`'s query session had both, and one such session per model);
- `pieces-1t`: pieces of --piece rows one after another on the one-thread session;
- `pieces`: pieces side by side on the caller and the run threads (service/engine/split.py, what the service does);
- `pieces-trim`: the same with the heap trimmed after every run;
- `pieces-env-arena`: the same with one onnxruntime arena shared by every session (an environment allocator,
  `session.use_env_allocators`).

A variant may name its own piece size, `pieces:8192`. Memory: the resident set's growth from the session made to
after the timed runs (what stays while requests keep coming), and after 1.5 s idle (what stays after them).

    python -m bench.large_runs --model astronaut --rows 20000 --rounds 5
    python -m bench.large_runs --variants pieces:2048,pieces:4096,pieces:8192,bare   # the piece size
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .common import machine

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("whole-1t", "bare", "whole-2t", "whole-2t-arena", "pieces-1t", "pieces", "pieces-trim", "pieces-env-arena")


def child(variant: str, model: Path, rows: int, piece: int, threads: int, seconds: float) -> dict:
    """One variant, timed in this process."""
    variant, _, size = variant.partition(":")
    piece = int(size) if size else piece
    import numpy as np
    import onnxruntime as ort

    from service.engine.memory import rss, trim
    from service.engine.split import Splitter

    env_arena = variant == "pieces-env-arena"
    if env_arena:
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = {"bare": 0, "whole-2t": threads, "whole-2t-arena": threads}.get(variant, 1)
    opts.inter_op_num_threads = 1
    opts.enable_cpu_mem_arena = variant in ("bare", "whole-2t-arena") or env_arena
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if env_arena:
        opts.add_session_config_entry("session.use_env_allocators", "1")
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    name, outputs = session.get_inputs()[0].name, [o.name for o in session.get_outputs()]
    x = np.random.default_rng(0).random((rows, 2)).astype(np.float32)
    splitter = Splitter(1 if variant == "pieces-1t" else threads, piece)

    def whole(part):
        return session.run(outputs, {name: part})

    def run():
        if not variant.startswith("pieces"):
            return whole(x)
        out = splitter.run(whole, x)
        if variant == "pieces-trim":
            trim()
        return out

    trim()
    before = rss()
    run()
    times, end = [], time.perf_counter() + seconds
    while len(times) < 3 or time.perf_counter() < end:
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    busy = rss() - before
    time.sleep(1.5)
    return {"ms": statistics.median(times) * 1000, "kept_mib": busy / 2**20, "idle_mib": (rss() - before) / 2**20}


def known_size(variant: str) -> bool:
    """No size, or a positive number of rows after the colon."""
    size = variant.partition(":")[2]
    return not size or (size.isdigit() and int(size) > 0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.large_runs", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="astronaut", help="an image model in models/")
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--piece", type=int, default=4096, help="rows per piece (INR_SPLIT_ROWS)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="INR_THREADS")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.5, help="of runs per variant and round")
    p.add_argument("--variants", type=lambda t: t.split(","), default=list(VARIANTS))
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    model = ROOT / "models" / args.model / "1" / "model.onnx"
    if args.child:
        print(json.dumps(child(args.child, model, args.rows, args.piece, args.threads, args.seconds)))
        return 0
    unknown = [v for v in args.variants if v.partition(":")[0] not in VARIANTS or not known_size(v)]
    if unknown or not model.is_file() or min(args.rows, args.piece, args.threads, args.rounds) <= 0:
        problem = f"unknown variants {unknown}" if unknown else f"no {model}" if not model.is_file() else "not positive"
        sys.stderr.write(f"error: {problem}\n")
        return 2
    env = {**os.environ, "MALLOC_ARENA_MAX": "1"}
    runs: dict[str, list[dict]] = {v: [] for v in args.variants}
    flags = ["--model", args.model, "--rows", str(args.rows), "--piece", str(args.piece)]
    flags += ["--threads", str(args.threads), "--seconds", str(args.seconds)]
    for r in range(args.rounds):
        order = args.variants[r % len(args.variants) :] + args.variants[: r % len(args.variants)]
        for v in order:
            out = subprocess.run(
                [sys.executable, "-m", "bench.large_runs", *flags, "--child", v],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            runs[v].append(json.loads(out.stdout))
    bare = [run["ms"] for run in runs.get("bare", [])]
    rows = {}
    for v, rs in runs.items():
        rows[v] = {k: round(statistics.median(run[k] for run in rs), 2) for k in ("ms", "kept_mib", "idle_mib")}
        rows[v]["ms_rounds"] = [round(run["ms"], 1) for run in rs]
        if bare:  # per round, against bare onnxruntime of that round
            rows[v]["bare_over_this"] = round(statistics.median(b / run["ms"] for b, run in zip(bare, rs)), 2)
    doc = {
        "machine": {**machine(), "load_avg": list(os.getloadavg())},
        "command": "python -m bench.large_runs " + " ".join(argv if argv is not None else sys.argv[1:]),
        "result": rows,
    }
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
