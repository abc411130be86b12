"""What a loaded grid photo model costs in memory and in render time, for model files side by side
(training/encodings/grid_store.py: packed corners in the tables' dtype against float32).

For each `--model NAME=PATH` (an image model's model.onnx, its pixel grid in the file's metadata_props):
  - bytes per image pixel resident, each in a fresh process per model and round, onnxruntime started on
    models/digits first, RSS growth between `malloc_trim(0)`s (as the service measures a version,
    service/engine/residency.py): "service" with the service's session options (no arena: service/engine/
    sessions.py) across the load and config.pbtxt's warmup (2 runs of 8192 rows, made before the window), and
    "probe", the plain probe: default options (the arena keeps the run's activations) and one run of 8192 random
    rows made inside the window (numpy's first random draw alone adds about 6 MiB); also the peak growth (VmHWM:
    the load-time constant folding);
  - render time on one thread (the service's session options), the models taking turns round by round
    (median): a 512² tile at native scale and the whole image, each in calls of `--tile-samples` coordinates
    (the service's tiles);
  - the file's bytes.

    python -m bench.grid_memory --model before=old/1/model.onnx --model after=models/dandelion/1/model.onnx
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .common import log, machine, median, setup_logging, write_json

ROOT = Path(__file__).resolve().parents[1]
PRIMER = ROOT / "models" / "digits" / "1" / "model.onnx"
PROBE = r"""
import ctypes, json, sys
import numpy as np, onnxruntime as ort

def status(key):
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(key))

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096

primer, path, mode = sys.argv[1:]
trim = ctypes.CDLL("libc.so.6").malloc_trim
o = ort.SessionOptions()
o.intra_op_num_threads = 1
o.log_severity_level = 3
ort.InferenceSession(primer, o, providers=["CPUExecutionProvider"])  # onnxruntime's own start-up first
if mode == "service":  # service/engine/sessions.py's options; the warmup's input made before the window
    o.inter_op_num_threads = 1
    o.enable_cpu_mem_arena = False
    o.add_session_config_entry("session.intra_op.allow_spinning", "0")
    x = np.random.default_rng(0).random((8192, 2), dtype=np.float32)
trim(0)
before = rss()
s = ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])
trim(0)
loaded = rss()
if mode != "service":
    x = np.random.default_rng(0).random((8192, 2), dtype=np.float32)
for _ in range(2 if mode == "service" else 1):  # config.pbtxt's model_warmup: 2 runs of 8192 rows
    s.run(None, {"coords": x})
peak = status("VmHWM:")
trim(0)
print(json.dumps({"loaded": loaded - before, "resident": rss() - before, "peak": peak - before}))
"""


def pixel_grid(path: Path) -> tuple[int, int]:
    import onnx

    props = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    return int(props["image_width"]), int(props["image_height"])


def resident(path: Path, mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(PRIMER), str(path), mode], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)


def centres(w: int, h: int, width: int, height: int) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([(xx + 0.5) / width, (yy + 0.5) / height], -1).reshape(-1, 2).astype(np.float32)


def render_times(models: dict[str, Path], rounds: int, tile_samples: int) -> dict:
    """{name: {"tile_s", "full_s"}}: median wall seconds over `rounds` interleaved rounds (after one warm-up each);
    also the median CPU seconds of the rendering thread (`_cpu_s`: less moved by other work on a shared machine,
    one intra-op thread running on the caller's) and the fastest round (`_min_s`)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()  # as the service makes them (service/engine/sessions.py), on one thread
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.enable_cpu_mem_arena = False
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sessions = {k: ort.InferenceSession(str(p), opts, providers=["CPUExecutionProvider"]) for k, p in models.items()}
    width, height = pixel_grid(next(iter(models.values())))
    work = {
        "tile": centres(min(512, width), min(512, height), width, height),
        "full": centres(width, height, width, height),
    }
    wall = {(k, what): [] for k in models for what in work}
    cpu = {key: [] for key in wall}
    order = list(wall)
    for r in range(rounds + 1):
        for k, what in order if r % 2 else order[::-1]:  # each round in turn forwards and backwards
            xy, w0, c0 = work[what], time.perf_counter(), time.thread_time()
            for i in range(0, len(xy), tile_samples):
                sessions[k].run(None, {"coords": xy[i : i + tile_samples]})
            if r:  # round 0 warms up
                wall[(k, what)].append(time.perf_counter() - w0)
                cpu[(k, what)].append(time.thread_time() - c0)
    return {
        k: {
            **{f"{what}_s": round(median(wall[(k, what)]), 4) for what in work},
            **{f"{what}_cpu_s": round(median(cpu[(k, what)]), 4) for what in work},
            **{f"{what}_min_s": round(min(wall[(k, what)]), 4) for what in work},
        }
        for k in models
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", required=True, help="NAME=PATH of a model.onnx (repeatable)")
    p.add_argument("--rounds", type=int, default=7, help="render rounds (median)")
    p.add_argument("--memory-rounds", type=int, default=2, help="fresh processes per model for the memory probe")
    p.add_argument("--tile-samples", type=int, default=8192, help="coordinates per call (the service's tiles)")
    p.add_argument("--out", default="grid_memory", help="name of the results file in bench/results/")
    a = p.parse_args(argv)
    setup_logging()
    models = {k: Path(v) for k, v in (m.split("=", 1) for m in a.model)}
    width, height = pixel_grid(next(iter(models.values())))
    started, load_before = time.strftime("%Y-%m-%d %H:%M:%S %Z"), os.getloadavg()
    modes = ("probe", "service")
    probes = {(k, m): [] for k in models for m in modes}
    for _ in range(a.memory_rounds):  # interleaved too
        for k, m in probes:
            probes[(k, m)].append(resident(models[k], m))
    renders = render_times(models, a.rounds, a.tile_samples)
    rows, first = {}, next(iter(models))
    for k, path in models.items():
        rows[k] = {"file_bytes": path.stat().st_size}
        for m in modes:
            for what in ("loaded", "resident", "peak"):
                rows[k][f"{m}_{what}_bytes"] = int(median([r[what] for r in probes[(k, m)]]))
            rows[k][f"{m}_bytes_per_pixel"] = round(rows[k][f"{m}_resident_bytes"] / (width * height), 2)
        rows[k].update(renders[k])
    for k, r in rows.items():
        base = rows[first]
        log.info(
            "%-8s B/px: %5.2f service (%.1f MiB; %.1f after load, peak %.0f), %5.2f probe (%.1f MiB); file %d B",
            k,
            r["service_bytes_per_pixel"],
            r["service_resident_bytes"] / 2**20,
            r["service_loaded_bytes"] / 2**20,
            r["service_peak_bytes"] / 2**20,
            r["probe_bytes_per_pixel"],
            r["probe_resident_bytes"] / 2**20,
            r["file_bytes"],
        )
        for what in ("tile", "full"):
            log.info(
                "%-8s %s: %.3f s wall (%.2fx), %.3f s cpu (%.2fx), fastest %.3f s (%.2fx)",
                k,
                what,
                *(r[f"{what}_{m}s"] / d for m in ("", "cpu_", "min_") for d in (1, base[f"{what}_{m}s"])),
            )
    result = {
        "machine": machine(),
        "started": started,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "width": width,
        "height": height,
        "rounds": a.rounds,
        "tile_samples": a.tile_samples,
        "models": {k: str(v) for k, v in models.items()},
        "rows": rows,
    }
    write_json(a.out, result)
    return result


if __name__ == "__main__":
    main()
