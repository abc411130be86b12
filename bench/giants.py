"""Giant images: `python -m bench.giants CMD`; commands, methods and tables in docs/benchmarks/images.md. Each fit,
worker and server is a process of its own, its CPU and peak RSS from wait4 or /proc; the mosaic: the docs' (--work)."""

import argparse
import inspect
import io
import json
import os
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pyvips
from httpx import Client
from PIL import Image

import bigimage
from fitstore import PRESETS, FitStore
from modelrepo.blocks import BlockLayout

from .common import RESULTS, ROOT, cpu_seconds, machine, ort_session, status_kib, time_calls, write_json
from .serving import Server

BLOCK, BAND, OVERLAP, TILE, ORIGIN = 2048, 8, 32, (2400, 1500), (4800, 3636)  # TILE: a photo's crop in the mosaic
TIFF = {"tile": True, "tile_width": 512, "tile_height": 512, "bigtiff": True}
FILES = {"JPEG": ("big.jpg", {"Q": 90}), "JPEG progressive": ("big-progressive.jpg", {"Q": 90, "interlace": True})}
FILES |= {"PNG": ("big.png", {"compression": 6}), "BigTIFF tiled": ("big-tiled.tif", TIFF)}
FILES["TIFF pyramid"] = ("big-pyramid.tif", TIFF | {"pyramid": True})
DEFAULTS = {"work": None, "results": None, "key": None, "name": None, "out": None, "megapixels": 100.0, "rounds": 3}
DEFAULTS |= {"source": ROOT / "data" / "photos" / "dandelion.jpg", "ops": "probe,region,scaled,strips,pillow_region"}
DEFAULTS |= {"variants": "cli,api,api-blocks", "threads": 1, "steps": 20, "sizes": "2048,3072"}
DEFAULTS |= {"budget": "2GiB", "model": "giant4096", "repeats": 5, "workers": 2, "file": "mosaic.png"}
CHILD = "import json, os, time, bigimage, numpy as np\nfrom PIL import Image\n"  # `measure` in a fresh interpreter
CHILD += f"from bench.common import status_kib\nBLOCK = {BLOCK}\n"
ms = lambda s: round(float(np.median(s)) * 1000)  # noqa: E731
near = lambda n, edges, half: (abs(np.arange(n)[:, None] + 0.5 - [*edges, -9e9]) < half).any(1)  # noqa: E731
popen = lambda argv, env, log: subprocess.Popen(argv, cwd=ROOT, env=os.environ | env, stdout=log.open("ab"), stderr=-2)  # noqa: E731
mib = lambda pid, key="VmHWM": round(status_kib(pid, key) / 1024)  # noqa: E731


def measure(op: str, path: str) -> dict:
    before, t0, h = status_kib(os.getpid(), "VmHWM"), time.perf_counter(), bigimage.probe(path)
    w, hh, what = min(BLOCK, h.width), min(BLOCK, h.height), f"{h.width}×{h.height}, {len(h.levels)} level(s)"
    x, y = (h.width - w) // 2, (h.height - hh) // 2  # the centre block
    if op == "region":
        a = bigimage.read_region(path, x, y, w, hh)
    elif op == "pillow_region":  # Pillow decodes the whole image first
        Image.MAX_IMAGE_PIXELS = None
        with Image.open(path) as im:
            a = np.asarray(im.convert("RGB").crop((x, y, x + w, y + hh)))
    elif op == "scaled":
        what = "{1}×{0}".format(*bigimage.read_scaled(path, BLOCK).shape)
    elif op == "strips":
        what = f"mean {int(sum(s.sum(dtype=np.uint64) for _, s in bigimage.strips(path, BLOCK))) / (h.pixels * 3):.2f}"
    elif op == "to_tiled":
        what = f"{len(bigimage.to_tiled(path, t := path + '.t.tif').levels)} levels, {os.path.getsize(t) >> 20} MiB"
        os.remove(t)
    what = f"{a.shape[1]}×{a.shape[0]} mean {a.mean():.2f}" if "region" in op else what
    seconds, peak = time.perf_counter() - t0, status_kib(os.getpid(), "VmHWM")
    return {"seconds": seconds, "peak_rss_mib": peak / 1024, "import_rss_mib": before / 1024, "what": what}


def big_image(a) -> dict:
    photo, rows = pyvips.Image.new_from_file(str(a.source)), []
    n = max(1, round((a.megapixels * 1e6 / (photo.width * photo.height)) ** 0.5))
    copies = [(photo.fliphor() if i % 2 else photo) for i in range(n * n)]
    copies = [(p.flipver() if i // 2 % 2 else p) * (0.8 + 0.4 * (i * 37 % 49) / 48) for i, p in enumerate(copies)]
    big = pyvips.Image.arrayjoin([p.cast("uchar") for p in copies], across=n)
    a.out.mkdir(parents=True, exist_ok=True)
    for label, (file, options) in FILES.items():
        if not (path := a.out / file).exists():
            tiff = {"compression": "deflate", "predictor": "horizontal"} if file.endswith(".tif") else {}
            (big.tiffsave if tiff else big.write_to_file)(str(path), **tiff, **options)
        for op in [*a.ops.split(","), *(["to_tiled"] if label == "JPEG" and "to_tiled" not in a.ops else [])]:
            src = CHILD + inspect.getsource(measure) + f"print(json.dumps(measure({op!r}, {str(path)!r})))"
            runs = [subprocess.run([sys.executable, "-c", src], capture_output=True, cwd=ROOT) for _ in range(a.rounds)]
            good = [json.loads(r.stdout) for r in runs if not r.returncode]
            row = {"format": label, "op": op, "file": file, "bytes": path.stat().st_size}
            if not good:
                rows.append(row | {"error": (runs[0].stderr.decode().strip() or "?").splitlines()[-1]})
                continue
            row |= {k: float(np.median([g[k] for g in good])) for k in ("seconds", "import_rss_mib")}
            rows.append(row | {"peak_rss_mib": max(g["peak_rss_mib"] for g in good), "what": good[0]["what"]})
    libvips = ".".join(str(pyvips.version(i)) for i in range(3))
    return {"machine": machine() | {"libvips": libvips}, "megapixels": a.megapixels, "rounds": a.rounds, "rows": rows}


def bigimage_table(result: dict) -> str:
    lines = ["| format | operation | time | peak RSS (after imports) | result |", "|---|---|---:|---:|---|"]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['format']} | {r['op']} | | | error: {r['error']} |")
            continue
        rss = f"{r['peak_rss_mib']:.0f} MiB ({r['import_rss_mib']:.0f})"
        lines.append(f"| {r['format']} | {r['op']} | {r['seconds']:.3f} s | {rss} | {r['what']} |")
    return "\n".join(lines)


def reaped(proc: subprocess.Popen, kill: bool = False) -> dict:
    os.kill(proc.pid, 15) if kill else None  # SIGTERM; not terminate(): its poll() would reap it, and the rusage
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"cpu_s": round(ru.ru_utime + ru.ru_stime, 1), "peak_rss_mib": round(ru.ru_maxrss / 1024)}


def fit_cli(image: Path, out: Path, env: dict, *extra: str) -> dict:  # the grid preset, its steps, every pixel
    grid, mp, t0 = PRESETS["grid"], np.prod(Image.open(image).size) / 1e6, time.perf_counter()
    argv = [sys.executable, "-m", "training", "fit-image", "--image", str(image), "--out", str(out), *grid["argv"]]
    argv += ["--steps", str(grid["steps"]), "--protocol", "full", "--no-progress", *extra]
    log = out.parent / f"{out.name}.log"
    got = reaped(proc := popen(argv, env, log)) | {"pixels": int(mp * 1e6)}
    if proc.returncode:
        raise SystemExit(f"fit-image failed: {log.read_text()[-2000:]}")
    wall, metrics = round(time.perf_counter() - t0, 1), latest(out)[1]["metrics"]
    return got | {"wall_s": wall, "s_per_mp": round(wall / mp, 2), "metrics": metrics, "command": argv[3:]}


def latest(model: Path, version: Path | None = None) -> tuple[Path, dict, BlockLayout | None]:
    version = version or max(model.glob("*/metadata.json"), key=lambda p: int(p.parent.name)).parent
    meta = json.loads((version / "metadata.json").read_text())
    return version, meta, BlockLayout.from_metadata(meta["blocks"]) if "blocks" in meta else None


class Stack:
    def __init__(self, work: Path, threads: int, env: dict, *args: str, models: Path | None = None):
        self.work, self.models, self.threads, self.procs = work, models or work / "models", threads, []
        [d.mkdir(parents=True, exist_ok=True) for d in (work / "uploads", work / "logs", self.models)]
        self.env = {"INR_FIT_STORE": f"sqlite:///{work / 'fits.sqlite'}", "INR_FIT_UPLOADS": str(work / "uploads")}
        self.env |= {"INR_FIT_QUEUE_LIMIT": "64", "INR_FIT_DEADLINE_S": "7200", "INR_RENDER_TIMEOUT_S": "600"} | env
        self.env |= {"OMP_NUM_THREADS": str(threads)} if threads else {}
        self.api = Server(self.models, env=self.env, args=args).wait(180)
        self.client, self.pid = Client(base_url=self.api.url, timeout=3600), self.api.proc.pid

    def close(self) -> None:
        [(proc.terminate(), proc.wait(120)) for proc in self.procs if proc.returncode is None]
        self.client.close(), self.api.stop()

    def worker(self, k: int = 0, *extra: str) -> subprocess.Popen:
        argv = [sys.executable, "-m", "training", "worker", "--threads", str(self.threads), "--nice", "0", *extra]
        self.procs.append(popen([*argv, "--models", str(self.models)], self.env, self.work / "logs" / f"worker{k}.log"))
        return self.procs[-1]

    def upload(self, path: Path, **fields) -> tuple[dict, dict]:
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")  # the API's VmHWM from here (proc(5), clear_refs)
        before, n, t0 = status_kib(self.pid, "VmRSS"), path.stat().st_size, time.perf_counter()
        with path.open("rb") as f:  # streamed as it is read
            r = self.client.post("/v1/fits", files={"file": (path.name, f)}, data=fields)
        if r.status_code != 202:
            raise SystemExit(f"POST /v1/fits: {r.status_code} {r.text[:500]}")
        stats = {"bytes": n, "seconds": round(t := time.perf_counter() - t0, 2), "mb_per_s": round(n / t / 1e6, 1)}
        return r.json(), stats | {"api_rss_mib_before": round(before / 1024), "api_rss_mib_max_during": mib(self.pid)}

    def wait(self, job: str, every: float = 0.2) -> dict:
        while (rec := self.client.get(f"/v1/fits/{job}").json())["state"] not in ("succeeded", "failed", "cancelled"):
            time.sleep(every)
        return rec

    def fit(self, photo: Path, name: str, fields: dict, *worker_args: str) -> dict:
        job = self.upload(photo, name=name, **fields)[0]["id"]  # then a fresh worker, stopped once the job ended
        t0, proc = time.perf_counter(), self.worker(0, *worker_args)
        rec, wall = self.wait(job), time.perf_counter() - t0
        if (got := reaped(proc, kill=True)) and rec["state"] != "succeeded":
            raise SystemExit(f"fit {job} {rec['state']}: {rec.get('error')}")
        return got | {"wall_s": round(wall, 1), "version": rec["version"], "job": job, "recorded": rec["metrics"]}

    def get(self, path: str, **params) -> tuple[float, bytes]:
        t0, r = time.perf_counter(), self.client.get(path, params=params)
        return time.perf_counter() - t0, r.raise_for_status().content

    def quality(self, path: str, strips, w: int, h: int, layout, skip=None) -> dict:
        edges = (layout.y_edges[1:-1], layout.x_edges[1:-1]) if layout else ([], [])
        (by, bx), se, n = (near(h, edges[0], BAND), near(w, edges[1], BAND)), [0.0] * 3, [0] * 3
        sy, sx = skip or (near(h, [], 1), near(w, [], 1))
        for y0, truth in strips:
            png = self.get(path, width=w, height=len(truth), viewport=f"0,{y0 / h},1,{(y0 + len(truth)) / h}")[1]
            err = ((np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), float) - truth) / 255) ** 2
            b, s = by[y0 : y0 + len(truth), None] | bx[None], sy[y0 : y0 + len(truth), None] | sx[None]
            for i, m in enumerate((np.ones_like(b), b & ~s, ~b & ~s)):
                se[i], n[i] = se[i] + float(err[m].sum()), n[i] + int(m.sum()) * 3
        keys = ("psnr", "psnr_seams", "psnr_elsewhere")[: 3 if layout else 1]
        return {k: round(float(10 * np.log10(n[i] / se[i])), 3) for i, k in enumerate(keys)}


def overhead(version: Path) -> dict:
    _, meta, layout = latest(version.parent, version)
    xs, ys, fits, core = layout.x_edges, layout.y_edges, meta["block_fits"], np.zeros(2)
    extra = np.array([(version / "model.onnx").stat().st_size, fits["overview"]["seconds"]], float)
    for b in layout.blocks:
        share = (xs[b.col + 1] - xs[b.col]) * (ys[b.row + 1] - ys[b.row]) / (b.w * b.h)
        cost = np.array([(version / b.file).stat().st_size, fits[b.file]["seconds"]], float)
        core, extra = core + cost * share, extra + cost * (1 - share)
    (size, seconds), view = (extra / core).round(4).tolist(), meta["blocks"].get("overview")
    return {"overview_and_overlaps_bytes": size, "overview_and_overlaps_fit_seconds": seconds, "overview": view}


def compare(a) -> dict:
    from training.worker.memory import one_model_peak as bound

    poll, v, rows = ("--model-control-mode", "poll", "--repository-poll-secs", "1"), a.variants.split(","), []
    with closing(Stack(a.work, a.threads, {"INR_RENDER_CACHE_BYTES": "0"}, *poll)) as stack:
        for r, variant, photo in ((r, x, Path(p)) for r in range(a.rounds) for x in np.roll(v, -r) for p in a.args):
            name, pixels = f"{variant}-r{r}-{photo.stem}", int(np.prod(Image.open(photo).size))
            if variant == "memory":  # one model (no blocks at 64 GiB): the worker's peak against its bound
                got = stack.fit(photo, name, {"steps": str(a.steps)}, "--once", "--memory", "64GiB")
                rows.append(got | {"photo": photo.name, "mp": round(pixels / 1e6, 2), "bound_mib": bound(pixels) >> 20})
                continue
            fields = {"seed": str(r)} | ({"blocks": "always"} if "blocks" in variant else {})
            cli = variant == "cli" and fit_cli(photo, stack.models / name, stack.env, "--seed", str(r))
            got, t0 = cli or stack.fit(photo, name, fields), time.monotonic()
            version, _, layout = latest(stack.models / name)
            path = f"/v1/models/{name}/versions/{version.name}/render"
            while stack.client.get(path, params={"width": 8, "height": 8}).is_error and time.monotonic() < t0 + 120:
                time.sleep(0.5)  # until the service serves it
            truth, onnx = np.asarray(Image.open(photo).convert("RGB"), np.float64), list(version.rglob("*.onnx"))
            strips = ((y, truth[y : y + 256]) for y in range(0, len(truth), 256))
            got |= stack.quality(path, strips, *truth.shape[1::-1], layout) | {"overhead": layout and overhead(version)}
            got |= {"bytes": sum(p.stat().st_size for p in onnx), "files": len(onnx), "variant": variant, "round": r}
            rows.append({"photo": photo.name, **got, "bytes_per_px": round(got["bytes"] / pixels, 3)})
    return {"photos": a.args, "threads": a.threads, "steps": a.steps, "rows": rows}


def serve(a) -> dict:
    _, meta, layout = latest(a.work / "models" / a.model)
    out = {"model": a.model, "budget": a.budget, "grid": [layout.cols, layout.rows], "recorded": meta["metrics"]}
    with closing(Stack(a.work, 0, {}, "--memory-budget", a.budget)) as stack:
        tile = lambda name, x, y: stack.get(f"/iiif/3/{name}/{x},{y},512,512/max/0/default.jpg")[0]  # noqa: E731
        mid = [(b.x + b.w // 2 - 256, b.y + b.h // 2 - 256) for b in layout.blocks]
        cold = [tile(a.model, x, y) for x, y in mid]  # each block's first tile loads it; then 3 warm ones, not cached
        warm = [tile(a.model, x + k * 64, y) for x, y in mid for k in (1, 2, 3)]
        out["tiles"] = {"cold_ms_median": ms(cold), "cold_ms_max": ms(max(cold)), "cold": len(cold), "warm": len(warm)}
        out["tiles"] |= {"warm_ms_median": ms(warm), "warm_ms_p90": ms(np.percentile(warm, 90))}
        (rw, rh), _ = latest(a.work / "models" / "ref4mp")[1]["source"]["size"], tile("ref4mp", 0, 0)  # loads it
        ref = [tile("ref4mp", x, y) for x in range(64, rw - 512, 400) for y in range(64, rh - 512, 400)]
        out["one_model_4mp"] = {"warm_ms_median": ms(ref), "tiles": len(ref)}
    with closing(Stack(a.work, 0, {}, "--memory-budget", a.budget)) as stack:  # every tile of every level of info.json
        info, levels = stack.client.get(f"/iiif/3/{a.model}/info.json").json(), {}
        (w, h), side = (info["width"], info["height"]), info["tiles"][0]["width"]
        for sf, span in ((sf, side * sf) for sf in sorted(info["tiles"][0]["scaleFactors"])[::-1]):
            boxes = [(x, y, min(span, w - x), min(span, h - y)) for y in range(0, h, span) for x in range(0, w, span)]
            url = f"/iiif/3/{a.model}/" + "{},{},{},{}/{},{}/0/default.jpg"
            times = [stack.get(url.format(x, y, bw, bh, -(-bw // sf), -(-bh // sf)))[0] for x, y, bw, bh in boxes]
            levels[sf] = {"tiles": len(boxes), "ms_median": ms(times)}
        out["browse"] = {"levels": levels, "peak_rss_mib": mib(stack.pid), "end_rss_mib": mib(stack.pid, "VmRSS")}
        skip = near(h, range(TILE[1], h, TILE[1]), 2 * BAND), near(w, range(TILE[0], w, TILE[0]), 2 * BAND)
        strips = bigimage.strips(str(a.work / "mosaic.tiled.tif"), 500)  # skip: the mosaic's own photo borders
        out["quality"] = stack.quality(f"/v1/models/{a.model}/render", strips, w, h, layout, skip)
        out["peak_rss_mib_after_quality"] = mib(stack.pid)
    return out


def block(a) -> dict:
    rows = []
    for size, side in ((int(size), int(size) + 2 * OVERLAP) for size in a.sizes.split(",")):
        crop = a.work / f"block{size}.png"
        Image.fromarray(bigimage.read_region(str(a.work / "mosaic.tiled.tif"), *ORIGIN, side, side)).save(crop)
        got, (version, meta, _) = fit_cli(crop, crop.with_suffix(""), {}), latest(crop.with_suffix(""))
        ys, xs = np.mgrid[0:512, 0:512].astype(np.float32) + 0.5 + (side - 512) // 2
        coords, onnx = {"coords": np.stack([xs.ravel(), ys.ravel()], 1) / np.float32(side)}, version / "model.onnx"
        loads, sess = time_calls(lambda: ort_session(onnx, 2), a.repeats, warmup=0), ort_session(onnx, 2)
        tiles, export = time_calls(lambda: sess.run(None, coords), a.repeats), meta["export"]
        graph = "dense (packed corners)" if "packed_corners" in export.get("tables", {}) else "traced (GridSample)"
        rows.append({"block": size, "pixels": side * side, "fit_s": got["wall_s"], "s_per_mp": got["s_per_mp"]})
        rows[-1] |= {"psnr": round(meta["metrics"]["full_psnr"], 2), "parity": export.get("max_abs_diff_vs_torch")}
        rows[-1] |= {"graph": graph, "peak_rss_mib": got["peak_rss_mib"], "load_ms_median": ms(loads)}
        rows[-1] |= {"file_mb": round(onnx.stat().st_size / 1e6, 1), "tile_512_ms_median": ms(tiles)}
    return {"rows": rows}


def http(a) -> dict:
    env, out = {"INR_FIT_MAX_RUNNING": str(a.workers), "INR_FIT_ANONYMOUS_MAX_PIXELS": str(10**9)}, {"file": a.file}
    with closing(Stack(a.work / "http", 1, env, models=a.work / "models")) as stack:
        workers, store = [stack.worker(k) for k in range(a.workers)], FitStore(stack.env["INR_FIT_STORE"])
        pids, out["workers"], out["torch_threads_per_worker"] = [w.pid for w in workers], a.workers, 1
        while len(store.workers()) < a.workers:
            time.sleep(0.2)
        for phase, file, fields in (("ref_4mp", "ref4mp.png", {"size": "2400"}), ("giant", a.file, {})):
            [Path(f"/proc/{pid}/clear_refs").write_text("5") for pid in pids]  # each phase's own VmHWM (proc(5))
            t0, c0 = time.perf_counter(), cpu_seconds(pids)
            rec, upload = stack.upload(a.work / file, name=a.name + ("-ref" if fields else ""), **fields)
            job, mp = stack.wait(rec["id"], 2.0), rec["source"]["width"] * rec["source"]["height"] / 1e6
            got = {"state": job["state"], "error": job.get("error"), "metrics": job.get("metrics"), "upload": upload}
            got |= {"wall_s": round(time.perf_counter() - t0, 1), "fit_s": round(job["finished"] - job["started"], 1)}
            got |= {"worker_cpu_s": round(cpu_seconds(pids) - c0, 1), "source": rec["source"]}
            s = got["fit_s"] if fields else got["wall_s"] * a.workers  # the giant: every worker's time
            got |= {"worker_s_per_mp": round(s / mp, 2), "worker_cpu_s_per_mp": round(got["worker_cpu_s"] / mp, 2)}
            out[phase] = got | {"worker_peak_rss_mib": [mib(pid) for pid in pids]}
            save("giant", a.key, out, a.results)
        for k, ratio in (("worker_s_per_mp", "ratio_to_ref"), ("worker_cpu_s_per_mp", "cpu_ratio_to_ref")):
            out[ratio] = round(out["giant"][k] / out["ref_4mp"][k], 3)
        if (full := store.get(rec["id"])).get("children"):  # the pieces' fit seconds: from the version (published)
            fits = {key: fit["seconds"] for key, fit in latest(stack.models / a.name)[1]["block_fits"].items()}
            pieces = [(c["finished"] - c["started"], c["piece"], c["attempt"]) for c in store.children(full)]
            walls, over = [p[0] for p in pieces], [p[0] - fits.get(p[1], p[0]) for p in pieces]
            out |= {"pieces": len(pieces), "attempts": sorted(p[2] for p in pieces), "layout": full.get("layout")}
            for key, v, d in (("piece_wall_s", walls, 1), ("queue_cost_per_piece_s", over, 2)):
                out |= {f"{key}_median": round(float(np.median(v)), d), f"{key}_max": round(max(v), d)}
        out |= {"uploads_left": os.listdir(a.work / "http" / "uploads"), "api_peak_rss_mib": mib(stack.pid)}
        store.close()
    return out


def save(name: str, key: str | None, value: dict, out: Path | None) -> None:
    path, value = Path(out or RESULTS) / f"{name}.json", {"machine": machine()} | value  # the whole file, or a key
    write_json(name, (json.loads(path.read_text()) if path.exists() else {}) | {key: value} if key else value, out)


RUN = {"bigimage": big_image, "compare": compare, "memory": compare, "serve": serve, "block": block}
RUN |= {"http": http, "overhead": lambda a: overhead(Path(a.args[0]))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.giants", description=__doc__.splitlines()[0])
    p.add_argument("cmd", choices=list(RUN))
    p.add_argument("args", nargs="*", help="compare, memory: photos; overhead: a version folder")
    for key, default in DEFAULTS.items():  # --results: bench/results; --out: bigimage's images; --key: in the file
        kind = Path if key in ("work", "results", "out", "source") else type(default or "")
        p.add_argument(f"--{key}", type=kind, default=default)
    a = p.parse_intermixed_args(argv)
    a.work = a.work or Path({"compare": "/tmp/bench-blocks", "memory": "/tmp/bench-memory"}.get(a.cmd, "/tmp/giant"))
    a.key = a.key or {"serve": f"serve_{a.model}_{a.budget}"}.get(a.cmd, a.cmd)
    a.name = a.name or {"bigimage": "bigimage"}.get(a.cmd, "giant-http")
    a.rounds, a.variants = (1, "memory") if a.cmd == "memory" else (a.rounds, a.variants)
    if a.cmd in ("serve", "block") and not (tiff := a.work / "mosaic.tiled.tif").exists():  # regions in any order
        bigimage.to_tiled(str(a.work / "mosaic.png"), str(tiff))
    if a.cmd == "bigimage" and (a.out is None or a.out.resolve().is_relative_to(ROOT)):
        p.error("--out must be outside the repository (the images are hundreds of MB)")
    name = {"compare": "blocks", "memory": "blocks", "block": "giant_block", "bigimage": a.name}.get(a.cmd, "giant")
    if (result := RUN[a.cmd](a)) and a.cmd != "overhead":
        save(name, None if a.cmd in ("block", "bigimage") else a.key, result, a.results)
    print(bigimage_table(result) if a.cmd == "bigimage" else json.dumps(result))  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
