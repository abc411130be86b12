"""Micro-benchmarks of the render and grid kernels (docs/benchmarks/renders.md), `python -m bench SCENARIO -- OPTIONS`
(OPTIONS: parse's); the variants take turns round by round (medians), the results in OUT_DIR/NAME.json."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import itertools
import json
import logging
import os
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
import onnx
import onnxruntime as ort
import torch
from PIL import Image
from threadpoolctl import threadpool_limits

from modelrepo import read_spec
from service.api.schemas import RenderRequest, sampling_matrix
from service.engine.runtime import RuntimeOptions
from service.engine.sessions import session_options
from service.engine.tasks import runtime_for
from service.geometry.transform import apply
from service.render.imaging import RenderSpec, plain_sampler, render
from service.render.separable import separable_sampler
from service.render.tiling import sample_coords, tiles
from training.export import export_onnx
from training.image_models import ImageINR, count_parameters
from training.images import pixel_centres
from training.reexport import load_from_onnx
from training.separable import BODY_INPUT, export_separable

from .common import ROOT, fit_image_config, log, machine, median, named_options, setup_logging, time_calls, write_json
from .serving import Server
from .tiles import GRID, fit

OPTIONS = {  # parse's
    "roofline": "batches=1024,4096,16384,65536 threads=1,2 render-size=1024 render-threads=0 repeats=5 model-args=",
    "separable": "size=1024 tile=8192 threads=1 parts=in_process,http rounds=5",
    "render_cost": "model=[] samples=16384 rounds=5",
    "grid_render": "image=! heads=3x64,2x32 steps=30 threads=2 tile-samples=8192 equal-features=? rounds=5",
}
ROOF_ARGV = "--image astronaut --size 32 --steps 3 --device cpu --no-progress".split()
RENDER_COST = ["gaussian-mlp=--model mlp --encoding gaussian --scale 5", "sinekan=--model sinekan --scale 3"]
BEFORE = "557bd02:models/astronaut/1/model.onnx"  # the bundled astronaut's graph before, with the Concat
VIEWS = {"identity": ({}, 1), "rotate 33 scale 0.7 k=2": ({"rotate": 33, "scale": 0.7}, 2)}
VIEWS["rotate -120 scale 3"] = ({"rotate": -120, "scale": 3.0, "translate": [0.2, 0.1]}, 1)
CHECKED = {"response": [lambda r: r.is_error and r.raise_for_status()]}  # httpx: an error status raises
KINDS = {"!": dict(type=Path, required=True), "?": dict(action="store_true"), "[]": dict(action="append", default=[])}


def session(model, threads: int, service: bool = False, profile: str = "") -> ort.InferenceSession:
    o = session_options(threads, spin=not service)  # service: the service's options (no arena, no spinning)
    o.enable_cpu_mem_arena, o.enable_profiling, o.profile_file_prefix = not service, bool(profile), profile or "ort"
    return ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])  # model: a path or the file's bytes


def interleaved(fns: dict, rounds: int, min_seconds: float = 0.0) -> dict:
    """{key: seconds a call, one a round}: a warm-up each, then the rounds taking turns, every other one reversed."""
    out = {k: time_calls(fn, repeats=0) for k, fn in fns.items()}
    for r in range(rounds):
        for k in list(fns)[:: 1 - 2 * (r % 2)]:
            out[k] += time_calls(fns[k], repeats=1, warmup=0, min_seconds=min_seconds)
    return out


def medians(samples: dict) -> dict:
    return {k: median(v) for k, v in samples.items()}


def chunks(xy: np.ndarray, n: int) -> list:
    return [xy[i : i + n] for i in range(0, len(xy), n)]


def profiled(model, threads: int, feeds: list, runs: int, nodes: bool = True) -> Counter:  # µs a run by (op, node)
    with tempfile.TemporaryDirectory() as tmp:
        s, us = session(model, threads, profile=f"{tmp}/ort"), Counter()
        [s.run(None, feed) for _ in range(runs) for feed in feeds]
        for e in json.loads(Path(s.end_profiling()).read_text()):
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                op, node = e["args"]["op_name"], e["name"].removesuffix("_kernel_time")
                us[(op, node) if nodes else op] += e["dur"] / runs
    return us


@contextlib.contextmanager
def serve(repo: Path, env: dict | None = None, **kw):
    srv = Server(repo, "kernels", env, **kw).wait(120)  # `python -m service` on `repo`; get(path, headers, **params)
    try:
        with httpx.Client(base_url=srv.url, timeout=600, event_hooks=CHECKED) as c:
            yield lambda path, headers=None, **params: c.get(path, params=params, headers=headers)
    finally:
        srv.stop()


def nbytes(img, fmt: str, **kw) -> int:  # the bytes Pillow writes of an image (or uint8 pixels) as FMT with kw
    (Image.fromarray(img) if isinstance(img, np.ndarray) else img).save(buf := io.BytesIO(), fmt, **kw)
    return buf.tell()


def gemm_shapes(onnx_path: Path) -> tuple[list, dict]:  # (K, N) of each MatMul/Gemm of a weight; the other ops
    g = onnx.load(str(onnx_path)).graph
    dims = {i.name: tuple(i.dims) for i in g.initializer}
    gemms = [n for n in g.node if n.op_type in ("MatMul", "Gemm") and n.input[1] in dims]
    shapes = [dims[n.input[1]][:: -1 if any(a.name == "transB" and a.i for a in n.attribute) else 1] for n in gemms]
    return shapes, dict(Counter(n.op_type for n in g.node if n not in gemms))  # transB: the weight stored as (N, K)


def roofline(a, repo: Path) -> dict:
    argv, rng = ROOF_ARGV + a.model_args.split(), np.random.default_rng(0)
    threads, batches = ([int(v) for v in s.split(",")] for s in (a.threads, a.batches))
    onnx_path, net = fit(repo / "roofline", *argv), ImageINR(fit_image_config(argv).model).eval()  # speed: not weights
    (shapes, others), eager = gemm_shapes(onnx_path), torch.inference_mode()(net)
    flops = sum(2 * k * n for k, n in shapes)
    res = {"machine": machine(), "model": " ".join(argv), "gemm_shapes": shapes, "other_ops": others}
    res |= {"gemm_flops_per_coord": flops, "compute": [], "ort_profile": []}
    for th, batch in ((th, b) for th in threads for b in batches):
        torch.set_num_threads(th)
        s, x = session(onnx_path, th), rng.random((batch, 2), dtype=np.float32)
        tw = [(torch.randn(batch, k), torch.randn(k, n), torch.empty(batch, n)) for k, n in shapes]
        nw, tx = [[t.numpy() for t in w] for w in tw], torch.from_numpy(x)
        fns = {"onnxruntime": lambda: s.run(["rgb"], {"coords": x}), "torch eager": lambda: eager(tx)}
        fns["torch.mm (GEMMs only)"] = lambda: [torch.mm(p, q, out=o) for p, q, o in tw]
        fns["numpy matmul (GEMMs only)"] = lambda: [np.matmul(p, q, out=o) for p, q, o in nw]
        with threadpool_limits(limits=th):
            t = medians(interleaved(fns, a.repeats, 0.2))
        roof = max(batch * flops / v for k, v in t.items() if "GEMMs only" in k)
        for k, v in t.items():
            g, row = batch * flops / v, {"threads": th, "batch": batch, "kernel": k, "median_s": v}
            row |= {"coords_per_s": batch / v, "gflops": g / 1e9, "fraction_of_matmul_rate": g / roof}
            res["compute"].append(row)
    for batch in batches:
        us = profiled(onnx_path, threads[0], [{"coords": rng.random((batch, 2), dtype=np.float32)}], 10)
        ms = {f"{op} {node}": v / 1e3 for (op, node), v in us.most_common()}
        share = {k: v / sum(ms.values()) for k, v in ms.items()}
        res["ort_profile"].append({"batch": batch, "threads": threads[0], "ms": ms, "share": share})
    n, th, tile, st = a.render_size, a.render_threads or os.cpu_count() or 1, 65536, {}
    s, xy, path = session(onnx_path, th), pixel_centres(n, n).reshape(-1, 2), "/v1/models/roofline/render"
    with serve(repo, args=("--threads", str(th)), log_level="warning", capture=True) as get:
        get(path, width=64, height=64)  # the service's first call
        fns = {"onnxruntime, one call": lambda: st.update(rgb=s.run(["rgb"], {"coords": xy})[0].reshape(n, n, 3))}
        fns[f"onnxruntime, {tile}-coord tiles"] = lambda: [s.run(["rgb"], {"coords": x}) for x in chunks(xy, tile)]
        fns["clip + uint8"] = lambda: st.update(u8=np.rint(np.clip(st["rgb"], 0, 1) * 255).astype(np.uint8))
        for level, say in ((3, ", as the service"), (1, "")):
            fns[f"PNG encode (level {level}{say})"] = lambda level=level: nbytes(st["u8"], "PNG", compress_level=level)
        fns["GET /render png"] = lambda: get(path, width=n, height=n, format="png")
        fns["HTTP round trip (/health/live)"] = lambda: get("/health/live")
        samples = interleaved(fns, a.repeats)
    rows = {k: dict(median_s=median(v), mpixel_per_s=n * n / 1e6 / median(v), samples=v) for k, v in samples.items()}
    bare = min(rows["onnxruntime, one call"]["median_s"], rows[f"onnxruntime, {tile}-coord tiles"]["median_s"])
    rd = {"size": n, "threads": th, "rows": rows, "png_bytes": nbytes(st["u8"], "PNG", compress_level=3)}
    return res | {"render": [rd | {"render_over_bare": bare / rows["GET /render png"]["median_s"]}]}


def table_md(result: dict) -> str:
    """roofline's tables (bench.store renders the stored figures with it)."""
    lines = ["| threads | batch | kernel | ms / batch | Mcoords/s | GFLOP/s | % of matmul rate |"]
    lines += ["|---:|---:|---|---:|---:|---:|---:|"]
    for r in result["compute"]:
        cells = f"{r['batch']} | {r['kernel']} | {1e3 * r['median_s']:.1f} | {r['coords_per_s'] / 1e6:.3f}"
        lines += [f"| {r['threads']} | {cells} | {r['gflops']:.1f} | {100 * r['fraction_of_matmul_rate']:.0f} % |"]
    for p in result.get("ort_profile", []):
        lines += ["", f"onnxruntime profile, batch {p['batch']}, {p['threads']} thread(s):", ""]
        lines += ["| node (optimised graph) | ms | share |", "|---|---:|---:|"]
        lines += [f"| {k} | {p['ms'][k]:.2f} | {100 * v:.1f} % |" for k, v in p["share"].items()]
    for rd in result["render"]:
        say = f"/render png = {rd['render_over_bare']:.2f}× bare onnxruntime (the faster of one call and tiles)"
        lines += ["", f"Render {rd['size']}² at {rd['threads']} thread(s): {say}", "", "| step | median s | Mpixel/s |"]
        lines.append("|---|---:|---:|")
        lines += [f"| {k} | {v['median_s']:.3f} | {v['mpixel_per_s']:.2f} |" for k, v in rd["rows"].items()]
    return "\n".join(lines)


def separable(a, repo: Path) -> dict:
    torch.set_num_threads(a.threads)
    torch.set_grad_enabled(False)  # the float64 reference network
    n, tile, names = a.size, a.tile, ("before", "plain", "separable")
    res = {"machine": machine(), "args": {k: v for k, v in vars(a).items() if k != "parser"}}
    req = {v: RenderRequest.model_validate({"width": n, "height": n, "transform": tf}) for v, (tf, _) in VIEWS.items()}
    specs = {v: RenderSpec(n, n, sampling_matrix(r.transform), supersample=VIEWS[v][1]) for v, r in req.items()}

    def parity(m, exact) -> dict:  # max abs differences of the separable render, the plain graph and float64
        out = {}
        for view, sp in specs.items():
            ts = list(tiles(n, n, sp.supersample, tile))
            xy = (apply(sp.matrix, sample_coords(t, n, n, sp.supersample, sp.viewport)).reshape(-1, 2) for t in ts)
            samplers = separable_sampler(m.separable, sp), plain_sampler(lambda c: m.predict(c)["rgb"], sp)
            x, p = (np.concatenate([f(t).ravel() for t in ts]) for f in samplers)
            e = np.concatenate([exact(torch.from_numpy(c)).numpy().ravel() for c in xy])
            d = {"separable_vs_plain": x - p, "separable_vs_float64": x - e, "plain_vs_float64": p - e}
            out[view] = {k: float(np.abs(v).max()) for k, v in d.items()}
        return out

    old = subprocess.run(["git", "show", BEFORE], cwd=ROOT, capture_output=True, check=True).stdout
    for name in names:  # models/astronaut as it is, without its body, with its old graph
        d = shutil.copytree(ROOT / "models" / "astronaut", repo / name)
        for f in (d / "config.pbtxt", d / "metadata.json"):  # the contract: names match the folder
            f.write_text(f.read_text().replace('"astronaut"', f'"{name}"', 1))
        if name != "separable":
            (d / "1" / "body.onnx").unlink()
            meta = {k: v for k, v in json.loads((d / "1" / "metadata.json").read_text()).items() if k != "separable"}
            (d / "1" / "model.onnx").write_bytes(old) if name == "before" else None  # the same weights
            meta |= {"onnx_sha256": hashlib.sha256(old).hexdigest()} if name == "before" else {}
            (d / "1" / "metadata.json").write_text(json.dumps(meta))
    if "in_process" in a.parts:  # a render without HTTP or PNG: tiles → model → pixels, and its parts
        m = {k: runtime_for(repo / k, read_spec(repo / k), 1, RuntimeOptions(threads=a.threads)) for k in names}
        assert all(v.load() for v in m.values()), {k: v.error for k, v in m.items()}
        s, tl = specs["identity"], list(tiles(n, n, 1, tile))
        sep, (shapes, _) = m["separable"].separable, gemm_shapes(repo / "separable" / "1" / "body.onnx")
        feats = separable_sampler(sep, s, run=lambda f: f)  # the first stage's features alone
        pre, ws = [feats(t) for t in tl[:8]], [torch.randn(k, c) for k, c in shapes]  # 8 MB each
        xs = [torch.randn(tile, shapes[0][0]), *(torch.empty(tile, c) for _, c in shapes)]  # a GEMM's input, output
        fns = {k: lambda k=k: render(lambda x: m[k].predict(x)["rgb"], s, tile) for k in ("before", "plain")}
        fns["separable"] = lambda: render(None, s, tile, sampler=separable_sampler(sep, s))
        fns["separable: features only"] = lambda: [feats(t) for t in tl]
        fns["separable: body graph only"] = lambda: [sep.run(pre[i % 8]) for i in range(len(tl))]
        fns["GEMMs only (torch.mm)"] = lambda: [torch.mm(x, w, out=o) for _ in tl for x, w, o in zip(xs, ws, xs[1:])]
        samples, p = interleaved(fns, a.rounds), parity(m["separable"], load_from_onnx(repo / "before")[0].double())
        res["in_process"] = {"seconds": samples, "medians": medians(samples), "parity": p, "gemm_shapes": shapes}
    env = {"INR_THREADS": str(a.threads), "INR_RENDER_TIMEOUT_S": "3600"}
    if "http" in a.parts:  # the real service, render cache off
        with serve(repo, env | {"INR_RENDER_CACHE_BYTES": "0", "INR_RENDER_WORKERS": "1"}) as get:
            fns = {k: lambda k=k: get(f"/v1/models/{k}/render", width=n, height=n) for k in names}
            samples = interleaved(fns, a.rounds)
        res["http"] = {"seconds": samples, "medians": medians(samples)}
    if "cache" in a.parts:  # the render cache on: a render's first answer (miss), repeats (hits), revalidations (304)
        out, r = {"miss": [], "hit": [], "304": []}, None
        with serve(repo, env) as get:
            for i, kind in ((i, kind) for i in range(a.rounds) for kind in out):
                t0, headers = time.perf_counter(), {"If-None-Match": r.headers["etag"]} if kind == "304" else None
                r = get("/v1/models/separable/render", headers, width=n, height=n, rotate=i)
                out[kind].append(time.perf_counter() - t0)
                assert r.status_code == (304 if kind == "304" else 200), r.status_code
            metrics = [v for v in get("/metrics").text.splitlines() if v.startswith("nv_cache_num_")]
        counts = {v.split("{")[0]: v.split()[-1] for v in metrics if 'model="separable"' in v}
        res["cache"] = {"seconds": out, "medians": medians(out), "metrics": counts}
    return res


def render_cost(a, repo: Path) -> dict:
    torch.set_num_threads(1)
    x, rows = np.random.default_rng(0).random((a.samples, 2), dtype=np.float32), {}
    for name, options in named_options(a.model or RENDER_COST, a.parser, "--model").items():
        torch.manual_seed(0)  # an untrained network, exported as fit-image exports it: weights do not change the cost
        model = ImageINR(fit_image_config(["--size", "128", *options]).model).eval()
        runs = {"plain": (session(export_onnx(model, torch.rand(8, 2), "coords", ["rgb"]), 1), {"coords": x})}
        rows[name] = {"options": " ".join(options), "parameters": count_parameters(model)}
        if sep := export_separable(model, x[:256].astype(np.float64)):  # None: no sines of affine maps first
            feats = np.sin(x.astype(np.float64) @ np.asarray(sep[1]["P"]).T + np.asarray(sep[1]["phase"]))
            runs["body"] = session(sep[0], 1), {BODY_INPUT: feats.astype(np.float32)}
            rows[name]["body_features"] = sep[1]["features"]
        for k, (s, feed) in runs.items():  # µs a sample: the median of ROUNDS calls of SAMPLES samples
            t = median(time_calls(lambda: s.run(["rgb"], feed), a.rounds, min_seconds=0.3))
            rows[name][f"{k}_us_per_sample"] = t / a.samples * 1e6
    return {"machine": machine(), "samples": a.samples, "rounds": a.rounds, "models": rows}


def grid_render(a, repo: Path) -> dict:
    res, models, n = {"machine": machine(), "load_average_before": os.getloadavg()}, {}, a.tile_samples
    for head, kind in itertools.product(a.heads.split(","), ["packed", "equal"][: 1 + a.equal_features]):
        name, (depth, width) = f"grid-{head}" + f"-{kind}" * (kind != "packed"), head.split("x")  # equal: before luma
        argv = ["--image", a.image, "--steps", str(a.steps), *GRID, "--depth", depth, "--width", width]
        models[head, kind] = name, fit(repo / name, *argv, *("--grid-finest-features", "0") * (kind == "equal"))
    width, height = json.loads(next(iter(models.values()))[1].with_name("metadata.json").read_text())["source"]["size"]
    xy, fns, pool = pixel_centres(height, width), {}, ThreadPoolExecutor(a.threads)
    work = {"tile": xy[:512, :512].reshape(-1, 2), "full": xy.reshape(-1, 2)}
    for k, (_, path) in models.items():  # bare: in turn on one session ("seq"), side by side on 1-thread ones ("par")
        s, one = session(path, a.threads, True), session(path, 1, True)
        for w, c in work.items():
            fns[(*k, w, "seq")] = lambda s=s, c=chunks(c, n): [s.run(None, {"coords": x}) for x in c]
            fns[(*k, w, "par")] = lambda s=one, c=chunks(c, n): list(pool.map(lambda x: s.run(None, {"coords": x}), c))
    bare, fns = medians(interleaved(fns, a.rounds)), {}
    env = dict(INR_RENDER_CACHE_BYTES="0", INR_RENDER_TILE_SAMPLES=str(n), INR_MAX_RENDER_PIXELS=str(width * height))
    with serve(repo, env | dict(INR_THREADS=str(a.threads), INR_RENDER_WORKERS=str(a.threads))) as get:
        for k, (name, _), f in ((k, v, f) for k, v in models.items() for f in ("jpg", "png")):
            fns[(*k, "tile", f)] = lambda u=f"/iiif/3/{name}/0,0,512,512/512,/0/default.{f}": get(u)  # a 512² tile
            fmt = {"format": f.replace("jpg", "jpeg"), "width": width}
            fns[(*k, "full", f)] = lambda u=f"/v1/models/{name}/render", fmt=fmt: get(u, **fmt)  # the whole image
        served, rows = medians(interleaved(fns, a.rounds)), []
    for (head, kind), (name, path) in models.items():
        row = {"head": head, "graph": kind, "tile_samples": n, "file_bytes": path.stat().st_size}
        row |= {f"bare_{w}_{h}_s": bare[head, kind, w, h] for w in work for h in ("seq", "par")}
        for w, f in itertools.product(work, ("jpg", "png")):
            row[f"service_{w}_{f}_s"] = t = served[head, kind, w, f]
            row[f"service_{f}_over_best_bare_{w}"] = round(t / min(row[f"bare_{w}_seq_s"], row[f"bare_{w}_par_s"]), 2)
        ops = profiled(path, 1, [{"coords": x} for x in chunks(work["tile"], n)], 3, nodes=False)  # one thread: "par"
        shares = {op: round(100 * us / ops.total(), 1) for op, us in ops.most_common(10)}
        rows.append(row | {"ort_profile_tile": {"kernel_ms": round(ops.total() / 1e3, 1)} | shares})
    res |= {"load_average_after": os.getloadavg(), "width": width, "height": height, "rounds": a.rounds}
    return res | {"image": str(a.image), "threads": a.threads, "steps": a.steps, "rows": rows}


def parse(prog: str, doc: str, specs: dict[str, str], argv: list[str] | None) -> argparse.Namespace:
    """The command line of bench.kernels and bench.tiles: a subcommand per scenario, its options "NAME=DEFAULT" (typed
    as DEFAULT reads; KINDS: ! a required path, ? a flag, [] repeatable), --name and --out-dir: OUT_DIR/NAME.json."""
    p = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    sub = p.add_subparsers(dest="scenario", required=True)
    for scenario, spec in specs.items():  # a NAME given twice: the later one
        s, options = sub.add_parser(scenario), f"name={scenario} out-dir= {spec}".split()
        for flag, d in dict(o.split("=", 1) for o in options).items():
            typed = int if d.isdigit() else float if d.replace(".", "", 1).isdigit() else str
            s.add_argument(f"--{flag}", **(KINDS.get(d) or dict(type=typed, default=typed(d))))
    a = p.parse_args(argv)
    setup_logging()
    [logging.getLogger(noisy).setLevel(logging.WARNING) for noisy in ("httpx", "pyvips")]
    a.parser, a.command = p, " ".join([prog, *(sys.argv[1:] if argv is None else argv)])
    return a


def main(argv: list[str] | None = None) -> dict:
    a = parse("python -m bench.kernels", __doc__, OPTIONS, argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = globals()[a.scenario](a, Path(tmp) / "m")
    write_json(a.name, result, a.out_dir)
    log.info("\n%s", table_md(result)) if a.scenario == "roofline" else None
    return result


if __name__ == "__main__":
    main()
