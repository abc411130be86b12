"""Micro-benchmarks of the render and grid kernels, in process; docs/benchmarks/renders.md says what each measures.
`python -m bench SCENARIO -- OPTIONS` (a scenario's OPTIONS, NAME=DEFAULT); the variants take turns round by round
(medians); the results go to OUT_DIR/NAME.json (--out-dir, default bench/results; --name, default the scenario)."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
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

from fitstore import PRESETS
from modelrepo import read_spec
from service.api.schemas import RenderRequest, sampling_matrix
from service.engine.runtime import RuntimeOptions
from service.engine.tasks import runtime_for
from service.geometry.transform import apply
from service.render.imaging import RenderSpec, plain_sampler, render
from service.render.separable import separable_sampler
from service.render.tiling import sample_coords, tiles
from training.export import export_onnx
from training.fit_image import export_image_model
from training.image_models import ImageINR, count_parameters
from training.images import pixel_centres
from training.reexport import load_from_onnx
from training.separable import BODY_INPUT, export_separable

from .common import ROOT, fit_image_config, log, machine, median, named_options, setup_logging, time_calls, write_json
from .serving import Server

OPTIONS = {  # !: required, ?: a flag, []: repeatable
    "roofline": "batches=1024,4096,16384,65536 threads=1,2 render-size=1024 render-threads=0 repeats=5 model-args=",
    "separable": "size=1024 tile=8192 threads=1 parts=in_process,http parity-sigma=0.0 rounds=5",
    "render_cost": "model=[] samples=16384 rounds=5",
    "grid_render": "image=! heads=3x64,2x32 steps=30 threads=2 tile-samples=8192 equal-features=? rounds=5",
    "grid_memory": "model=[] memory-rounds=2 threads=1 tile-samples=8192 rounds=7",
}
ROOF_ARGV = "--image astronaut --size 32 --steps 3 --device cpu --no-progress".split()
RENDER_COST = ["gaussian-mlp=--model mlp --encoding gaussian --scale 5", "sinekan=--model sinekan --scale 3"]
BEFORE = "557bd02:models/astronaut/1/model.onnx"  # the bundled astronaut's graph before, with the Concat
VIEWS = {"identity": ({}, 1), "rotate 33 scale 0.7 k=2": ({"rotate": 33, "scale": 0.7}, 2)}
VIEWS["rotate -120 scale 3"] = ({"rotate": -120, "scale": 3.0, "translate": [0.2, 0.1]}, 1)
CHECKED = {"response": [lambda r: r.is_error and r.raise_for_status()]}  # httpx: an error status raises


def session(model, threads: int, service: bool = False, profile: str = "") -> ort.InferenceSession:
    o = ort.SessionOptions()  # service: the service's options (no arena, no spinning)
    o.intra_op_num_threads, o.inter_op_num_threads, o.log_severity_level = threads, 1, 3
    o.enable_cpu_mem_arena, o.enable_profiling, o.profile_file_prefix = not service, bool(profile), profile or "ort"
    o.add_session_config_entry("session.intra_op.allow_spinning", "0" if service else "1")
    model = model if isinstance(model, bytes) else str(model)  # a path, or the ONNX file's bytes
    return ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])


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


def profiled(model, threads: int, feeds: list, runs: int) -> Counter:  # {(op type, node): µs a run}
    with tempfile.TemporaryDirectory() as tmp:
        s, us = session(model, threads, profile=f"{tmp}/ort"), Counter()
        [s.run(None, feed) for _ in range(runs) for feed in feeds]
        for e in json.loads(Path(s.end_profiling()).read_text()):
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                us[e["args"]["op_name"], e["name"].removesuffix("_kernel_time")] += e["dur"] / runs
    return us


@contextlib.contextmanager
def serve(repo: Path, env: dict | None = None, **kw):
    srv = Server(repo, "kernels", env, **kw).wait(120)  # `python -m service` on `repo`; get(path, headers, **params)
    try:
        with httpx.Client(base_url=srv.url, timeout=600, event_hooks=CHECKED) as c:
            yield lambda path, headers=None, **params: c.get(path, params=params, headers=headers)
    finally:
        srv.stop()


def fit(out: Path, *argv: str) -> Path:
    """`python -m training fit-image ARGV --out OUT`; its ONNX file."""
    cmd = [sys.executable, "-m", "training", "fit-image", "--no-progress", *argv, "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=ROOT)
    return out / "1" / "model.onnx"


def png(pixels: np.ndarray, level: int) -> int:
    Image.fromarray(pixels).save(buf := io.BytesIO(), "PNG", compress_level=level)
    return buf.tell()


def gemm_shapes(onnx_path: Path) -> tuple[list, dict]:  # (K, N) of each MatMul/Gemm of a weight; the other ops
    g = onnx.load(str(onnx_path)).graph
    dims, shapes, others = {i.name: tuple(i.dims) for i in g.initializer}, [], Counter()
    for n in g.node:
        if n.op_type in ("MatMul", "Gemm") and n.input[1] in dims:
            k, m = dims[n.input[1]]
            shapes.append((m, k) if any(a.name == "transB" and a.i for a in n.attribute) else (k, m))
        else:
            others[n.op_type] += 1
    return shapes, dict(others)


def roofline(a, repo: Path) -> dict:
    argv, rng = ROOF_ARGV + a.model_args.split(), np.random.default_rng(0)
    threads, batches = ([int(v) for v in s.split(",")] for s in (a.threads, a.batches))
    onnx_path, net = fit(repo / "roofline", *argv), ImageINR(fit_image_config(argv).model).eval()  # speed: not weights
    (shapes, others), eager = gemm_shapes(onnx_path), torch.inference_mode()(net)
    flops = sum(2 * k * n for k, n in shapes)
    res = {"machine": machine(), "model": " ".join(argv), "gemm_shapes": shapes, "other_ops": others}
    res |= {"gemm_flops_per_coord": flops, "compute": [], "ort_profile": [], "render": []}
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
    if not a.render_size:
        return res
    n, th, tile, st = a.render_size, a.render_threads or os.cpu_count() or 1, 65536, {}
    s, xy, path = session(onnx_path, th), pixel_centres(n, n).reshape(-1, 2), "/v1/models/roofline/render"
    with serve(repo, args=("--threads", str(th)), log_level="warning", capture=True) as get:
        get(path, width=64, height=64)  # the service's first call
        fns = {"onnxruntime, one call": lambda: st.update(rgb=s.run(["rgb"], {"coords": xy})[0].reshape(n, n, 3))}
        fns[f"onnxruntime, {tile}-coord tiles"] = lambda: [s.run(["rgb"], {"coords": x}) for x in chunks(xy, tile)]
        fns["clip + uint8"] = lambda: st.update(u8=np.rint(np.clip(st["rgb"], 0, 1) * 255).astype(np.uint8))
        fns |= {
            "PNG encode (level 3, as the service)": lambda: png(st["u8"], 3),
            "PNG encode (level 1)": lambda: png(st["u8"], 1),
        }
        fns["GET /render png"] = lambda: get(path, width=n, height=n, format="png")
        fns["HTTP round trip (/health/live)"] = lambda: get("/health/live")
        samples = interleaved(fns, a.repeats)
    rows = {k: {"median_s": median(v), "mpixel_per_s": n * n / 1e6 / median(v)} for k, v in samples.items()}
    rows = {k: r | {"samples": samples[k]} for k, r in rows.items()}
    bare = min(rows["onnxruntime, one call"]["median_s"], rows[f"onnxruntime, {tile}-coord tiles"]["median_s"])
    rd = {"size": n, "threads": th, "rows": rows, "png_bytes": png(st["u8"], 3)}
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
        lines += ["|---|---:|---:|"] + [
            f"| {k} | {v['median_s']:.3f} | {v['mpixel_per_s']:.2f} |" for k, v in rd["rows"].items()
        ]
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

    if a.parity_sigma:  # random weights of the bundled architecture (4×128, 128 Gaussian features) at this σ
        torch.manual_seed(0)
        cfg = fit_image_config(f"--depth 4 --width 128 --features 128 --scale {a.parity_sigma}".split())
        net = ImageINR(cfg.model).eval()
        export_image_model(net, cfg, repo / "m", {"kind": "bench"}, {}, {}, np.zeros((2, 2, 3), np.float32))
        m = runtime_for(repo / "m", read_spec(repo / "m"), 1, RuntimeOptions(threads=a.threads))
        assert m.load(), m.error
        return res | {"parity": parity(m, net.double())}
    old = subprocess.run(["git", "show", BEFORE], cwd=ROOT, capture_output=True, check=True).stdout
    for name in names:  # models/astronaut as it is, without its body, with its old graph
        d = shutil.copytree(ROOT / "models" / "astronaut", repo / name)
        for f in (d / "config.pbtxt", d / "metadata.json"):  # the contract: names match the folder
            f.write_text(f.read_text().replace('"astronaut"', f'"{name}"', 1))
        if name != "separable":
            meta = json.loads((d / "1" / "metadata.json").read_text())
            (d / "1" / "body.onnx").unlink()
            meta.pop("separable")
            if name == "before":  # the same weights
                (d / "1" / "model.onnx").write_bytes(old)
                meta["onnx_sha256"] = hashlib.sha256(old).hexdigest()
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
        samples, exact = interleaved(fns, a.rounds), load_from_onnx(repo / "before")[0].double()  # the same weights
        res["in_process"] = {"seconds": samples, "medians": medians(samples), "parity": parity(m["separable"], exact)}
        res["in_process"]["gemm_shapes"] = shapes
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


def grids(a, repo: Path) -> dict:
    res, models = {"machine": machine(), "load_average_before": os.getloadavg()}, {}  # grid_render, grid_memory
    kinds = ["packed", "equal"] if vars(a).get("equal_features") else ["packed"]  # equal: the preset before luma
    for head, kind in ((h, k) for h in vars(a).get("heads", "").split(",") if h for k in kinds):
        name, (depth, width) = f"grid-{head}" + f"-{kind}" * (kind != "packed"), head.split("x")
        argv = ["--image", a.image, "--protocol", "full", "--steps", str(a.steps), *PRESETS["grid"]["argv"]]
        argv += ["--depth", depth, "--width", width, *("--grid-finest-features", "0") * (kind == "equal")]
        models[head, kind] = name, fit(repo / name, *argv)
    for name, path in (m.split("=", 1) for m in vars(a).get("model", [])):  # served by its folder's name
        models[name, "file"] = Path(path).resolve().parents[1].name, Path(path).resolve()
    assert models, "grid_memory: --model NAME=PATH, one or more"
    meta = json.loads(next(iter(models.values()))[1].with_name("metadata.json").read_text())
    (width, height), ns = meta["source"]["size"], [int(n) for n in str(a.tile_samples).split(",")]
    xy, served, bare, rows = pixel_centres(height, width), {}, {}, []
    work = {"tile": xy[:512, :512].reshape(-1, 2), "full": xy.reshape(-1, 2)}
    for n in ns:  # bare: the tiles in turn on one session ("seq"), side by side on one-thread sessions ("par")
        fns, pool = {}, ThreadPoolExecutor(a.threads)
        for k, (_, path) in models.items():
            s, one = session(path, a.threads, True), session(path, 1, True)
            for w, c in work.items():
                fns[(*k, w, n, "seq")] = lambda s=s, c=chunks(c, n): [s.run(None, {"coords": x}) for x in c]
                fns[(*k, w, n, "par")] = lambda s=one, c=chunks(c, n): list(
                    pool.map(lambda x: s.run(None, {"coords": x}), c)
                )
        bare |= medians(interleaved(fns, a.rounds))
        if a.scenario == "grid_render":  # a 512² IIIF tile and the whole image through the service, render cache off
            env = {
                "INR_RENDER_CACHE_BYTES": "0",
                "INR_RENDER_TILE_SAMPLES": str(n),
                "INR_MAX_RENDER_PIXELS": str(width * height),
            }
            with serve(repo, env | {"INR_THREADS": str(a.threads), "INR_RENDER_WORKERS": str(a.threads)}) as get:
                fns = {}
                for k, (name, _), f in ((k, v, f) for k, v in models.items() for f in ("jpg", "png")):
                    fns[(*k, "tile", n, f)] = lambda u=f"/iiif/3/{name}/0,0,512,512/512,/0/default.{f}": get(u)
                    fmt = {"format": f.replace("jpg", "jpeg"), "width": width}
                    fns[(*k, "full", n, f)] = lambda u=f"/v1/models/{name}/render", fmt=fmt: get(u, **fmt)
                served |= medians(interleaved(fns, a.rounds))
    for (head, kind), (name, path), n in ((k, v, n) for k, v in models.items() for n in ns):
        row = {"head": head, "graph": kind, "tile_samples": n, "file_bytes": path.stat().st_size}
        row |= {f"bare_{w}_{h}_s": bare[head, kind, w, n, h] for w in work for h in ("seq", "par")}
        for w, f in ((w, f) for w in work for f in ("jpg", "png") if served):
            row[f"service_{w}_{f}_s"] = t = served[head, kind, w, n, f]
            row[f"service_{f}_over_best_bare_{w}"] = round(t / min(row[f"bare_{w}_seq_s"], row[f"bare_{w}_par_s"]), 2)
        ops = Counter()  # onnxruntime's profile of the tile on one thread (as the "par" sessions)
        for (op, _), us in profiled(path, 1, [{"coords": x} for x in chunks(work["tile"], n)], 3).items():
            ops[op] += us
        shares = {op: round(100 * us / ops.total(), 1) for op, us in ops.most_common(10)}
        row["ort_profile_tile"] = {"kernel_ms": round(ops.total() / 1e3, 1)} | shares
        for i in range(a.memory_rounds) if a.scenario == "grid_memory" else ():  # a fresh server each
            (d := repo / str(i) / name).parent.mkdir(parents=True), d.symlink_to(path.parents[1])
            with serve(d.parent) as get:
                get(f"/v1/models/{name}/render", width=8)  # loads it: the service measures its bytes
                row.setdefault("service", []).append(get(f"/v1/models/{name}").json()["versions"][0])
                row |= {
                    f"service_{k}": int(median([v[k] for v in row["service"]])) for k in ("bytes", "load_peak_bytes")
                }
                row["service_bytes_per_pixel"] = round(row["service_bytes"] / (width * height), 2)
        rows.append(row)
    res |= {"load_average_after": os.getloadavg(), "width": width, "height": height, "rounds": a.rounds}
    return res | {k: v for k, v in vars(a).items() if k in ("image", "threads", "steps", "model")} | {"rows": rows}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.kernels", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="scenario", required=True)
    for scenario, options in OPTIONS.items():
        s = sub.add_parser(scenario)
        s.add_argument("--name", "--out", default=scenario, help="the results file: OUT_DIR/NAME.json")
        s.add_argument("--out-dir", help="default: bench/results")
        for flag, _, d in (o.partition("=") for o in options.split()):
            kinds = {"!": dict(required=True), "?": dict(action="store_true"), "[]": dict(action="append", default=[])}
            typed = dict(default=d, type=int if d.isdigit() else float if "." in d else str)
            s.add_argument(f"--{flag}", **kinds.get(d, typed))
    a = p.parse_args(argv)
    a.parser = p
    setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        result = globals().get(a.scenario, grids)(a, Path(tmp) / "m")  # grids: grid_render, grid_memory
    write_json(a.name, result, a.out_dir)
    if a.scenario == "roofline":
        log.info("\n%s", table_md(result))
    return result


if __name__ == "__main__":
    main()
