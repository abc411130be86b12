"""Renders of a grid model through the service, against bare onnxruntime on the same graph
(docs/benchmarks.md, grid_render).

For each head (`--heads 3x64,2x32`: depth × width of the MLP on the grid features) a grid model of the
photo's native size is fitted with `python -m training fit-image` (the grid preset's options, `--steps`
steps: the weights hardly change the cost, but a few steps give the encoders a real picture), and with
`--traced` beside it the same weights in the traced graph (one GridSample per level, as exported before the packed
corners; model name suffixed `-traced`), and with `--equal-features` the preset with 2 features on every level
(no native luma level, the earlier preset; suffixed `-equal`). They are served by one service per `--tile-samples`
value (render cache off) and timed in interleaved rounds:
  - a 512² tile at native scale: GET /iiif/3/NAME/0,0,512,512/512,/0/default.jpg (the viewer's format) and .png;
  - the whole image at native size: GET /v1/models/NAME/render?width=W, PNG and JPEG;
  - bare onnxruntime (the same model.onnx) on the same pixel centres in the service's tiles, without HTTP or
    encoding: one session of `--threads` threads running the tiles one after another ("seq"), and the
    service's way ("par": `--threads` threads each running tiles on a one-thread session).
Then onnxruntime's profiler on the 512² tile in the service's tiles (share of each operator type), and the
PNG encoding of the rendered tile and image at Pillow compress levels 1, 3 and 6.

    python -m bench.grid_render --image photo.jpg --rounds 5          # bench/results/grid_render.json
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

from fitstore import PRESETS

from .common import log, machine, median, setup_logging, write_json
from .serving import Server


def preset_argv() -> list[str]:
    """The grid preset's fit-image options without its head (each --heads entry gives depth and width)."""
    argv, out, i = PRESETS["grid"]["argv"], [], 0
    while i < len(argv):
        if argv[i] in ("--depth", "--width"):
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


TILE = "/iiif/3/{name}/0,0,512,512/512,/0/default.{fmt}"


def centres(x0: int, y0: int, w: int, h: int, width: int, height: int) -> np.ndarray:
    yy, xx = np.mgrid[y0 : y0 + h, x0 : x0 + w]
    return np.stack([(xx + 0.5) / width, (yy + 0.5) / height], -1).reshape(-1, 2).astype(np.float32)


def chunked(coords: np.ndarray, n: int) -> list[np.ndarray]:
    return [coords[i : i + n] for i in range(0, len(coords), n)]


def interleaved(fns: dict, rounds: int) -> dict:
    """Median seconds of each callable, the callables taking turns round by round (after one warm-up each)."""
    times = {k: [] for k in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return {k: median(v) for k, v in times.items()}


def fit(image: str, head: str, steps: int, out: Path, *extra: str) -> None:
    depth, width = head.split("x")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "training",
            "fit-image",
            "--image",
            image,
            "--protocol",
            "full",
            "--steps",
            str(steps),
            "--no-progress",
            *preset_argv(),
            "--depth",
            depth,
            "--width",
            width,
            *extra,
            "--out",
            str(out),
        ],
        check=True,
    )


def traced_copy(folder: Path, dest: Path) -> None:
    """`folder`'s model with the same weights in the traced graph (a GridSample per level), as model `dest.name`."""
    import onnx
    import torch
    from onnx import numpy_helper

    from training.encodings.grid_quant import store_tables_8bit
    from training.export import check_parity, set_metadata_props, trace
    from training.fp16 import store_weights_fp16
    from training.image_models import ImageINR, ImageModelConfig

    meta = json.loads((folder / "1" / "metadata.json").read_text())
    arch = {k: v for k, v in meta["architecture"].items() if k not in ("parameters", "batchnorm_folded")}
    model = ImageINR(ImageModelConfig.from_dict(arch))
    graph = onnx.load(str(folder / "1" / "model.onnx")).graph
    weights = {
        i.name.removesuffix("__fp16"): torch.from_numpy(numpy_helper.to_array(i).astype(np.float32))
        for i in graph.initializer
    }
    for name in [k for k in weights if k.endswith("__u8")]:  # 8-bit tables: q·scale + low (grid_quant)
        base = name.removesuffix("__u8")
        weights[base] = weights[name] * weights[f"{base}__scale"] + weights[f"{base}__low"]
    model.load_state_dict({k: v for k, v in weights.items() if k in model.state_dict()})
    model.eval()
    traced = trace(model, torch.rand(8, 2), "coords", ["rgb"], 17)
    if any(k.endswith("__u8") for k in weights):
        traced, _ = store_tables_8bit(traced, model)
    onnx_bytes, _ = store_weights_fp16(traced)
    w, h = meta["source"]["size"]
    onnx_bytes = set_metadata_props(onnx_bytes, {"image_width": str(w), "image_height": str(h)})
    probe = np.random.default_rng(0).random((4096, 2), dtype=np.float32)
    check_parity(model, onnx_bytes, probe, "coords", ["rgb"], atol=1e-4)
    shutil.copytree(folder, dest)
    config = dest / "config.pbtxt"
    config.write_text(re.sub(r'^name: ".*"', f'name: "{dest.name}"', config.read_text(), flags=re.M))
    (dest / "1" / "model.onnx").write_bytes(onnx_bytes)
    meta["onnx_sha256"] = hashlib.sha256(onnx_bytes).hexdigest()
    (dest / "1" / "metadata.json").write_text(json.dumps(meta, indent=1))


def session(path: Path, threads: int, profile_dir: str | None = None):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as the service runs it
    if profile_dir:
        opts.enable_profiling, opts.profile_file_prefix = True, str(Path(profile_dir) / "ort")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def profile(model: Path, coords: np.ndarray, threads: int, tile_samples: int) -> dict:
    """Share of each operator type (%) in 3 renders of `coords` in tiles, and kernel ms per render."""
    with tempfile.TemporaryDirectory() as tmp:
        s = session(model, threads, tmp)
        for _ in range(3):
            for c in chunked(coords, tile_samples):
                s.run(None, {"coords": c})
        events = json.loads(Path(s.end_profiling()).read_text())
    by_op = Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by_op[e["args"]["op_name"]] += e["dur"]
    total = sum(by_op.values())
    return {
        "kernel_ms": round(total / 3 / 1000, 1),
        **{op: round(100 * us / total, 1) for op, us in by_op.most_common(10)},
    }


def png_costs(pixels: np.ndarray, rounds: int) -> dict:
    from PIL import Image

    img = Image.fromarray(pixels)

    def enc(level: int):
        return lambda: img.save(io.BytesIO(), "PNG", compress_level=level)

    out = {f"png{level}_s": s for level, s in interleaved({level: enc(level) for level in (1, 3, 6)}, rounds).items()}
    for level in (1, 3, 6):
        buf = io.BytesIO()
        img.save(buf, "PNG", compress_level=level)
        out[f"png{level}_bytes"] = buf.tell()
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2, help="INR_THREADS and the bare sessions' threads")
    p.add_argument("--heads", default="3x64,2x32", help="MLP heads to measure, DEPTHxWIDTH, comma-separated")
    p.add_argument("--steps", type=int, default=30, help="fit steps per model (a picture for the PNG encoder)")
    p.add_argument("--tile-samples", default="8192", help="INR_RENDER_TILE_SAMPLES values, comma-separated")
    p.add_argument("--traced", action="store_true", help="also the same weights in the traced graph")
    p.add_argument(
        "--equal-features",
        action="store_true",
        help="also the preset with equal features on every level (--grid-finest-features 0, the preset "
        "before the native luma level), graph 'equal'",
    )
    p.add_argument("--out", default="grid_render", help="name of the results file in bench/results/")
    a = p.parse_args(argv)
    setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    tile_samples = [int(v) for v in a.tile_samples.split(",")]
    load_before, rows = os.getloadavg(), []
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        names = {}
        for head in a.heads.split(","):
            fit(a.image, head, a.steps, repo / f"grid-{head}")
            names[head] = {"packed": f"grid-{head}"}
            if a.traced:
                traced_copy(repo / f"grid-{head}", repo / f"grid-{head}-traced")
                names[head]["traced"] = f"grid-{head}-traced"
            if a.equal_features:
                fit(a.image, head, a.steps, repo / f"grid-{head}-equal", "--grid-finest-features", "0")
                names[head]["equal"] = f"grid-{head}-equal"
        meta = json.loads((repo / f"grid-{a.heads.split(',')[0]}" / "1" / "metadata.json").read_text())
        width, height = meta["source"]["size"]
        tile, full = centres(0, 0, 512, 512, width, height), centres(0, 0, width, height, width, height)
        models = {(h, kind): repo / n / "1" / "model.onnx" for h, d in names.items() for kind, n in d.items()}
        sessions = {k: session(path, a.threads) for k, path in models.items()}
        singles = {k: session(path, 1) for k, path in models.items()}
        pool = ThreadPoolExecutor(a.threads)
        bare = {}
        for n in tile_samples:
            fns = {}
            for k in models:
                s, one = sessions[k], singles[k]
                for what, xy in (("tile", tile), ("full", full)):
                    fns[k + (what, n, "seq")] = lambda s=s, n=n, xy=xy: [
                        s.run(None, {"coords": c}) for c in chunked(xy, n)
                    ]
                    fns[k + (what, n, "par")] = lambda s=one, n=n, xy=xy: list(
                        pool.map(lambda c: s.run(None, {"coords": c}), chunked(xy, n))
                    )
            bare.update(interleaved(fns, a.rounds))
        served = {}
        for n in tile_samples:
            env = {
                "INR_RENDER_CACHE_BYTES": "0",
                "INR_THREADS": str(a.threads),
                "INR_RENDER_TILE_SAMPLES": str(n),
                "INR_MAX_RENDER_PIXELS": str(width * height),
                "INR_RENDER_WORKERS": str(a.threads),
            }
            srv = Server(repo, "grid-render", env=env).wait()
            try:
                with httpx.Client(base_url=srv.url, timeout=600) as c:

                    def get(path: str, **params) -> bytes:
                        r = c.get(path, params=params)
                        assert r.status_code == 200, r.text
                        return r.content

                    fns = {}
                    for k in models:
                        name = names[k[0]][k[1]]
                        for fmt in ("jpg", "png"):
                            fns[k + ("tile", n, fmt)] = lambda name=name, fmt=fmt: get(TILE.format(name=name, fmt=fmt))
                            fns[k + ("full", n, fmt)] = lambda name=name, fmt=fmt: get(
                                f"/v1/models/{name}/render", width=width, format="jpeg" if fmt == "jpg" else fmt
                            )
                    served.update(interleaved(fns, a.rounds))
                    from PIL import Image

                    pixels = {
                        what: np.asarray(Image.open(io.BytesIO(get(path, **params))).convert("RGB"))
                        for what, path, params in (
                            ("tile", TILE.format(name=names[a.heads.split(",")[0]]["packed"], fmt="png"), {}),
                            ("full", f"/v1/models/{names[a.heads.split(',')[0]]['packed']}/render", {"width": width}),
                        )
                    }
            finally:
                srv.stop()
        for (head, kind), path in models.items():
            for n in tile_samples:
                row = {"head": head, "graph": kind, "tile_samples": n}
                for what in ("tile", "full"):
                    for fmt in ("jpg", "png"):
                        row[f"service_{what}_{fmt}_s"] = served[(head, kind, what, n, fmt)]
                    for how in ("seq", "par"):
                        row[f"bare_{what}_{how}_s"] = bare[(head, kind, what, n, how)]
                    best = min(row[f"bare_{what}_seq_s"], row[f"bare_{what}_par_s"])
                    for fmt in ("jpg", "png"):
                        row[f"service_{fmt}_over_best_bare_{what}"] = round(row[f"service_{what}_{fmt}_s"] / best, 2)
                row["ort_profile_tile"] = profile(path, tile, 1, n)  # one thread: the par sessions
                rows.append(row)
        png = {what: png_costs(px, a.rounds) for what, px in pixels.items()}
        sizes = {k[0]: models[k].stat().st_size for k in models if k[1] == "packed"}
    result = {
        "machine": machine(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "image": a.image,
        "width": width,
        "height": height,
        "rounds": a.rounds,
        "threads": a.threads,
        "steps": a.steps,
        "model_bytes": sizes,
        "rows": rows,
        "png": png,
    }
    for r in rows:
        log.info(
            "%-5s %-6s tiles %6d: tile jpg %.3f png %.3f s (bare seq %.3f par %.3f), full jpg %.2f png %.2f s "
            "(bare seq %.2f par %.2f)",
            r["head"],
            r["graph"],
            r["tile_samples"],
            r["service_tile_jpg_s"],
            r["service_tile_png_s"],
            r["bare_tile_seq_s"],
            r["bare_tile_par_s"],
            r["service_full_jpg_s"],
            r["service_full_png_s"],
            r["bare_full_seq_s"],
            r["bare_full_par_s"],
        )
    write_json(a.out, result)
    return result


if __name__ == "__main__":
    main()
