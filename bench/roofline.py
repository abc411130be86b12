"""The render roofline of an exported image model (docs/benchmarks.md, roofline).

For the fit-image architecture (Gaussian features → 4×256 ReLU MLP → sigmoid) this measures,
in one run and interleaved:
  - coordinates/s and GEMM GFLOP/s of the ONNX model under onnxruntime and of the same
    network under torch eager;
  - the fp32 matrix-multiply rate of this machine for exactly the model's GEMM shapes
    (torch.mm and numpy/OpenBLAS, preallocated outputs): the roofline;
  - end-to-end GET /render (PNG) of the real service against bare onnxruntime on the same
    pixels, plus the pieces in between (tiling, PNG encoding), to say where time goes.
FLOPs count the MatMul/Gemm nodes of the ONNX graph (2·K·N per coordinate each); sin, cos,
ReLU and sigmoid are extra work the roofline does not credit.

    python -m bench.roofline          # full: batches 1024…65536 at 1 and 2 threads, /render 1024²
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from .common import fit_image_config, log, machine, median, ort_session, setup_logging, time_calls, write_json
from .serving import Server

MODEL_ARGV = ["--image", "astronaut", "--size", "32", "--steps", "3", "--device", "cpu", "--no-progress"]


def export_model(repo: Path, argv: list[str], name: str = "roofline") -> tuple[Path, object]:
    """A fit-image model directory (architecture = fit-image defaults, a few steps of training)."""
    from training.fit_image import fit_image

    cfg = fit_image_config(argv)
    fit_image(cfg, repo / name)
    return repo / name / "1" / "model.onnx", cfg


def gemm_shapes(onnx_path: Path) -> tuple[list[tuple[int, int]], dict]:
    """(K, N) of every MatMul/Gemm with a constant weight, and a count of the other ops."""
    import onnx

    g = onnx.load(str(onnx_path)).graph
    inits = {i.name: tuple(i.dims) for i in g.initializer}
    shapes, others = [], {}
    for node in g.node:
        if node.op_type in ("MatMul", "Gemm") and node.input[1] in inits:
            k, n = inits[node.input[1]]
            trans_b = any(a.name == "transB" and a.i for a in node.attribute)
            shapes.append((n, k) if trans_b else (k, n))
        else:
            others[node.op_type] = others.get(node.op_type, 0) + 1
    return shapes, others


def kernels(onnx_path: Path, cfg, shapes, batch: int, threads: int) -> dict:
    """Callables that each do one batch of work; all see the same threads."""
    import torch

    from training.image_models import ImageINR

    torch.set_num_threads(threads)
    sess = ort_session(onnx_path, threads)
    coords = np.random.default_rng(0).random((batch, 2), dtype=np.float32)
    net = ImageINR(cfg.model).eval()  # same architecture as the export; speed does not depend on weights
    tcoords = torch.from_numpy(coords)
    tw = [(torch.randn(batch, k), torch.randn(k, n), torch.empty(batch, n)) for k, n in shapes]
    nw = [(a.numpy(), b.numpy(), o.numpy()) for a, b, o in tw]

    def torch_model():
        with torch.inference_mode():
            net(tcoords)

    def torch_gemm():
        for a, b, o in tw:
            torch.mm(a, b, out=o)

    def numpy_gemm():
        for a, b, o in nw:
            np.matmul(a, b, out=o)

    return {
        "onnxruntime": lambda: sess.run(["rgb"], {"coords": coords}),
        "torch eager": torch_model,
        "torch.mm (GEMMs only)": torch_gemm,
        "numpy matmul (GEMMs only)": numpy_gemm,
    }


def measure_compute(onnx_path, cfg, shapes, batches, threads_list, repeats) -> list[dict]:
    from threadpoolctl import threadpool_limits

    flops = sum(2 * k * n for k, n in shapes)
    rows = []
    for threads in threads_list:
        with threadpool_limits(limits=threads):
            for batch in batches:
                fns = kernels(onnx_path, cfg, shapes, batch, threads)
                for f in fns.values():
                    f()  # warm-up
                samples = {n: [] for n in fns}
                for _ in range(repeats):  # interleaved
                    for n, f in fns.items():
                        samples[n] += time_calls(f, repeats=1, warmup=0, min_seconds=0.2)
                roof = max(batch * flops / median(samples[n]) for n in fns if "GEMMs only" in n)
                for n, s in samples.items():
                    t = median(s)
                    rows.append(
                        {
                            "threads": threads,
                            "batch": batch,
                            "kernel": n,
                            "median_s": t,
                            "coords_per_s": batch / t,
                            "gflops": batch * flops / t / 1e9,
                            "fraction_of_matmul_rate": batch * flops / t / roof,
                        }
                    )
                    log.info(
                        "threads %d batch %6d %-26s %8.3f ms %6.1f GFLOP/s (%.0f%% of matmul)",
                        threads,
                        batch,
                        n,
                        1e3 * t,
                        rows[-1]["gflops"],
                        100 * rows[-1]["fraction_of_matmul_rate"],
                    )
    return rows


def profile_ort(onnx_path: Path, batch: int, threads: int, runs: int = 10) -> dict:
    """onnxruntime's own profiler: share of kernel time per node of the optimised graph."""
    import json

    opts = ort_session(onnx_path, threads).get_session_options()
    opts.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        opts.profile_file_prefix = str(Path(tmp) / "ort")
        import onnxruntime as ort

        sess = ort.InferenceSession(str(onnx_path), sess_options=opts, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(0).random((batch, 2), dtype=np.float32)
        for _ in range(runs):
            sess.run(["rgb"], {"coords": x})
        events = json.loads(Path(sess.end_profiling()).read_text())
    per_node: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            key = f"{e['args']['op_name']} {e['name'][: -len('_kernel_time')]}"
            per_node[key] = per_node.get(key, 0.0) + e["dur"] / runs / 1e3
    total = sum(per_node.values())
    return {
        "batch": batch,
        "threads": threads,
        "ms": dict(sorted(per_node.items(), key=lambda kv: -kv[1])),
        "share": {k: v / total for k, v in sorted(per_node.items(), key=lambda kv: -kv[1])},
    }


def start_service(repo: Path, threads: int) -> tuple[subprocess.Popen, str]:
    srv = Server(repo, "roofline", args=("--threads", str(threads)), log_level="warning", capture=True).wait(90)
    return srv.proc, srv.url


def measure_render(repo: Path, onnx_path: Path, size: int, threads: int, repeats: int, name: str) -> dict:
    """GET /render PNG against bare onnxruntime on the same pixel centres, interleaved."""
    import httpx
    from PIL import Image

    from training.images import pixel_centres

    sess = ort_session(onnx_path, threads)
    coords = pixel_centres(size, size).reshape(-1, 2)
    tile = 65536
    state = {}

    def bare():
        state["rgb"] = sess.run(["rgb"], {"coords": coords})[0]

    def bare_tiled():
        for i in range(0, len(coords), tile):
            sess.run(["rgb"], {"coords": coords[i : i + tile]})

    def to_uint8():
        state["u8"] = np.rint(np.clip(state["rgb"], 0, 1) * 255).astype(np.uint8).reshape(size, size, 3)

    def png(level):
        def enc():
            buf = io.BytesIO()
            Image.fromarray(state["u8"]).save(buf, "PNG", compress_level=level)
            state[f"png{level}"] = buf.getbuffer().nbytes

        return enc

    proc, url = start_service(repo, threads)
    try:
        client = httpx.Client(timeout=600)
        path = f"{url}/v1/models/{name}/render"

        def render(fmt="png"):
            def get():
                r = client.get(path, params={"width": size, "height": size, "format": fmt})
                r.raise_for_status()
                state[f"bytes_{fmt}"] = len(r.content)

            return get

        def ping():
            client.get(f"{url}/health/live").raise_for_status()

        fns = {
            "onnxruntime, one call": bare,
            f"onnxruntime, {tile}-coord tiles": bare_tiled,
            "clip + uint8": to_uint8,
            "PNG encode (level 3, as the service)": png(3),
            "PNG encode (level 1)": png(1),
            "GET /render png": render("png"),
            "HTTP round trip (/health/live)": ping,
        }
        for f in (bare, to_uint8, png(3), png(1), ping):
            f()  # warm-up, and fills state for the encoders
        client.get(path, params={"width": 64, "height": 64}).raise_for_status()  # the service's first call
        samples = {n: [] for n in fns}
        for _ in range(repeats):
            for n, f in fns.items():
                samples[n] += time_calls(f, repeats=1, warmup=0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    mpix = size * size / 1e6
    rows = {n: {"median_s": median(s), "mpixel_per_s": mpix / median(s), "samples": s} for n, s in samples.items()}
    bare_t = min(rows["onnxruntime, one call"]["median_s"], rows[f"onnxruntime, {tile}-coord tiles"]["median_s"])
    return {
        "size": size,
        "threads": threads,
        "rows": rows,
        "png_bytes": state["png3"],
        "render_over_bare": bare_t / rows["GET /render png"]["median_s"],
    }


def table_md(result: dict) -> str:
    lines = [
        "| threads | batch | kernel | ms / batch | Mcoords/s | GFLOP/s | % of matmul rate |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in result["compute"]:
        lines.append(
            f"| {r['threads']} | {r['batch']} | {r['kernel']} | {1e3 * r['median_s']:.1f} | "
            f"{r['coords_per_s'] / 1e6:.3f} | {r['gflops']:.1f} | {100 * r['fraction_of_matmul_rate']:.0f} % |"
        )
    for prof in result.get("ort_profile", []):
        lines += [
            "",
            f"onnxruntime profile, batch {prof['batch']}, {prof['threads']} thread(s):",
            "",
            "| node (optimised graph) | ms | share |",
            "|---|---:|---:|",
        ]
        lines += [f"| {k} | {prof['ms'][k]:.2f} | {100 * v:.1f} % |" for k, v in prof["share"].items()]
    for rd in result["render"]:
        lines += [
            "",
            f"Render {rd['size']}² at {rd['threads']} thread(s): /render png = "
            f"{rd['render_over_bare']:.2f}× bare onnxruntime (the faster of one call and tiles)",
            "",
            "| step | median s | Mpixel/s |",
            "|---|---:|---:|",
        ]
        lines += [f"| {n} | {v['median_s']:.3f} | {v['mpixel_per_s']:.2f} |" for n, v in rd["rows"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.roofline", description=__doc__.splitlines()[0])
    p.add_argument("--batches", default="1024,4096,16384,65536", help="coordinates per call")
    p.add_argument("--threads", default="1,2", help="thread counts to measure (ORT, torch and BLAS alike)")
    p.add_argument("--render-size", type=int, default=1024, help="/render width = height; 0 skips /render")
    p.add_argument("--render-threads", type=int, default=0, help="service and bare ORT threads (0 = all cores)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--model-args", default="", help="extra fit-image options for the exported model")
    p.add_argument("--name", default="roofline")
    p.add_argument("--out-dir", default=None)
    a = p.parse_args(argv)
    batches = [int(b) for b in a.batches.split(",")]
    threads = [int(t) for t in a.threads.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        onnx_path, cfg = export_model(repo, MODEL_ARGV + a.model_args.split())
        shapes, others = gemm_shapes(onnx_path)
        result = {
            "machine": machine(),
            "model": " ".join(MODEL_ARGV + a.model_args.split()),
            "gemm_shapes": shapes,
            "other_ops": others,
            "gemm_flops_per_coord": sum(2 * k * n for k, n in shapes),
            "compute": [],
            "render": [],
        }
        result["compute"] = measure_compute(onnx_path, cfg, shapes, batches, threads, a.repeats)
        result["ort_profile"] = [profile_ort(onnx_path, b, threads[0]) for b in batches]
        write_json(a.name, result, a.out_dir)
        if a.render_size:
            rt = a.render_threads or os.cpu_count() or 1
            result["render"].append(measure_render(repo, onnx_path, a.render_size, rt, a.repeats, "roofline"))
        write_json(a.name, result, a.out_dir)
    log.info("\n%s", table_md(result))
    return result


if __name__ == "__main__":
    setup_logging()
    main()
