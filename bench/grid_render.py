"""Section 14b: renders of a grid model through the service, against bare onnxruntime on the same graph.

A grid model of the photo's native size is made with `python -m training fit-image` (the grid preset's options,
a few steps: the weights do not change the cost), served by the real service (render cache off), and timed:
  - a 512² tile at native scale: GET /iiif/3/NAME/0,0,512,512/512,/0/default.png (PNG encoding included);
  - the whole image at native size: GET /v1/models/NAME/render?width=W (PNG);
  - bare onnxruntime (the same model.onnx, the service's thread count) on the same pixel centres, in one run
    and in the service's tiles (INR_RENDER_TILE_SAMPLES), without HTTP or encoding.
Then onnxruntime's profiler on one 512² run: the share of each operator type.

    python -m bench.grid_render --image photo.jpg --rounds 5
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np

from .common import log, machine, median, setup_logging, write_json
from .serving import Server

PRESET = ["--encoding", "grid", "--depth", "3", "--width", "64", "--lr", "1e-2", "--batch-size", "16384",
          "--fp16-weights"]


def centres(x0: int, y0: int, w: int, h: int, width: int, height: int) -> np.ndarray:
    yy, xx = np.mgrid[y0:y0 + h, x0:x0 + w]
    return np.stack([(xx + 0.5) / width, (yy + 0.5) / height], -1).reshape(-1, 2).astype(np.float32)


def timed(fn, rounds: int) -> float:
    fn()
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return median(out)


def profile(model: Path, coords: np.ndarray, threads: int) -> dict:
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.enable_profiling = threads, True
    with tempfile.TemporaryDirectory() as tmp:
        opts.profile_file_prefix = str(Path(tmp) / "ort")
        s = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        for _ in range(3):
            s.run(None, {"coords": coords})
        events = json.loads(Path(s.end_profiling()).read_text())
    by_op = Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by_op[e["args"]["op_name"]] += e["dur"]
    total = sum(by_op.values())
    return {op: round(100 * us / total, 1) for op, us in by_op.most_common(8)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tile-samples", type=int, default=8_192, help="INR_RENDER_TILE_SAMPLES (the service's default)")
    a = p.parse_args(argv)
    setup_logging()
    import onnxruntime as ort
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        subprocess.run([sys.executable, "-m", "training", "fit-image", "--image", a.image, "--protocol", "full",
                        "--steps", "3", "--no-progress", *PRESET, "--out", str(repo / "grid")], check=True)
        meta = json.loads((repo / "grid" / "1" / "metadata.json").read_text())
        width, height = meta["source"]["size"]
        onnx = repo / "grid" / "1" / "model.onnx"
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = a.threads
        bare = ort.InferenceSession(str(onnx), opts, providers=["CPUExecutionProvider"])
        tile = centres(0, 0, 512, 512, width, height)
        full = centres(0, 0, width, height, width, height)
        chunks = [full[i:i + a.tile_samples] for i in range(0, len(full), a.tile_samples)]
        row = {"image": a.image, "width": width, "height": height, "bytes": onnx.stat().st_size,
               "bare_tile_s": timed(lambda: bare.run(None, {"coords": tile}), a.rounds),
               "bare_full_s": timed(lambda: [bare.run(None, {"coords": c}) for c in chunks], a.rounds)}
        env = {"INR_RENDER_CACHE_BYTES": "0", "INR_THREADS": str(a.threads),
               "INR_RENDER_TILE_SAMPLES": str(a.tile_samples), "INR_MAX_RENDER_PIXELS": str(width * height)}
        srv = Server(repo, "grid-render", env=env).wait()
        try:
            with httpx.Client(base_url=srv.url, timeout=300) as c:
                def get(path: str, **params) -> None:
                    assert c.get(path, params=params).status_code == 200
                row["service_tile_s"] = timed(lambda: get("/iiif/3/grid/0,0,512,512/512,/0/default.png"), a.rounds)
                row["service_full_s"] = timed(lambda: get("/v1/models/grid/render", width=width), a.rounds)
        finally:
            srv.stop()
        row["service_over_bare_tile"] = round(row["service_tile_s"] / row["bare_tile_s"], 2)
        row["service_over_bare_full"] = round(row["service_full_s"] / row["bare_full_s"], 2)
        row["ort_profile_512_percent"] = profile(onnx, tile, a.threads)
    result = {"machine": machine(), "rounds": a.rounds, "threads": a.threads, "row": row}
    log.info("%s", json.dumps(row, indent=1))
    write_json("grid_render", result)
    return result


if __name__ == "__main__":
    main()
