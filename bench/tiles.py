"""The tiles family, `python -m bench.tiles SCENARIO [options]` (docs/benchmarks/renders.md, fits-and-browser.md):
classic (our IIIF tiles beside iipsrv behind nginx under wrk), tile_cost (one uncached tile's CPU by part, in process),
viewer_sharp (the time to a sharp view in Chromium), fairness and flood (a small request's time beside big ones)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pyvips
from PIL import Image

from fitstore import PRESETS
from modelrepo import read_spec
from service.engine import runtime, tasks
from service.render import imaging as im
from service.render import lattice as lt
from service.render import tiling
from training.metrics import psnr

from .common import ROOT, free_port, log, machine, median, status_kib, time_calls, write_json
from .serving import Server

IIPSRV, PHOTO = Path("/usr/lib/iipimage-server/iipsrv.fcgi"), str(ROOT / "data" / "photos" / "dandelion.jpg")
GRID = ["--protocol", "full", *PRESETS["grid"]["argv"]]  # fit-image's grid preset, at the image's native size
NGINX = """worker_processes 1; daemon off; pid {t}/nginx.pid; error_log {t}/error.log; events {{ }} http {{
  access_log off; keepalive_requests 1000000; client_body_temp_path {t}/b; fastcgi_temp_path {t}/f; proxy_temp_path
  {t}/p; uwsgi_temp_path {t}/u; scgi_temp_path {t}/s; server {{ listen 127.0.0.1:{port}; location /fcgi-bin/iipsrv.fcgi
  {{ fastcgi_pass 127.0.0.1:{fcgi}; fastcgi_param QUERY_STRING $query_string; fastcgi_param REQUEST_URI $request_uri;
  fastcgi_param REQUEST_METHOD $request_method; fastcgi_param PATH_INFO $fastcgi_script_name; }} }} }}"""
LUA = """local paths, i = {}, 0; for line in io.lines(os.getenv("BENCH_PATHS")) do paths[#paths + 1] = line end
request = function() i = i % #paths + 1; return wrk.format("GET", paths[i]) end
done = function(s, l) local e = s.errors; io.write(string.format('RESULT {"requests": %d, "errors": %d, "duration_s": '
  .. '%.3f, "p50_ms": %.3f, "p95_ms": %.3f}\\n', s.requests, e.status + e.connect + e.read + e.write + e.timeout,
  s.duration / 1e6, l:percentile(50) / 1000, l:percentile(95) / 1000)) end"""
CLASSIC = {  # fit steps, rounds, seconds of wrk a cell, clients, tile side, blocks, the bundled photo's size
    "full": dict(steps=PRESETS["grid"]["steps"], rounds=3, duration=10, clients=[1, 4], tile=512, blocks=0, size=None),
    "quick": dict(steps=100, rounds=1, duration=3.0, clients=[1, 4], tile=512, blocks=512, size=(1024, 640)),
    "smoke": dict(steps=4, rounds=1, duration=1.0, clients=[1, 4], tile=128, blocks=160, size=(300, 200)),
}
CELL = ("tiles_per_s", "p50_ms", "p95_ms", "cpu_ms_per_tile", "nginx_cpu_ms_per_tile", "errors")
CELL_MD = "{tiles_per_s:.0f} ({p50_ms:.1f} / {p95_ms:.1f} ms)"
# viewer_sharp's pages: path, element, wheel notches, deltaY, the zoom they ask (the viewer's: exp(462 · 0.0015) = 2)
PAGES = {"viewer": ("/?model={name}", "#view", 1, -462, 2.0), "osd": ("/iiif.html?id={name}", "#osd", 4, -100, 1.2**4)}
ZOOM = "(s) => Number(document.querySelector(s).dataset.zoom || document.querySelector(s).dataset.imageZoom)"
SHARP = "(t) => performance.getEntriesByName('inr-sharp').map(m => m.startTime).find(s => s > t)"  # the first after t
WHEEL = "window.__wheels = 0; addEventListener('wheel', (e) => { window.__wheel = e.timeStamp; window.__wheels++; });"
ATTACKERS = 6
BIG = "/v1/models/astronaut/render?width={0}&height={0}&rotate={1}"
RENDER = dict(INR_RENDER_CACHE_BYTES="0", INR_RENDER_TIMEOUT_S="3600", INR_QUEUE_TIMEOUT_S="3600", INR_THREADS="1")
RENDER |= dict(INR_RENDER_WORKERS="2", INR_RENDER_MAX_COST_S="3600", INR_RENDER_CALLER_SHARE="64")  # fairness's


class Proc(Server):  # a server that is not ours (iipsrv, nginx): Server's cpu_seconds() and stop() over its process
    def __init__(self, cmd: list, url: str, **env):
        self.url, self.proc = url, subprocess.Popen(cmd, env=os.environ | env, stdout=subprocess.DEVNULL, stderr=-3)


def iipsrv(images: Path, tmp: Path) -> Proc:
    """iipsrv (FastCGI, MAX_IMAGE_CACHE_SIZE=0) over the pyramids in `images`, behind nginx (its .nginx)."""
    fcgi, port, end = free_port(), free_port(), time.monotonic() + 30
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "nginx.conf").write_text(NGINX.format(t=tmp, port=port, fcgi=fcgi))
    env = dict(FILESYSTEM_PREFIX=f"{images}/", MAX_IMAGE_CACHE_SIZE="0", JPEG_QUALITY="90", VERBOSITY="0")
    srv = Proc([str(IIPSRV), "--bind", f"127.0.0.1:{fcgi}"], f"http://127.0.0.1:{port}", **env)
    srv.nginx = Proc(["nginx", "-c", str(tmp / "nginx.conf"), "-p", str(tmp)], srv.url)
    while time.monotonic() < end and srv.proc.poll() is None and srv.nginx.proc.poll() is None:
        try:
            if httpx.get(f"{srv.url}/fcgi-bin/iipsrv.fcgi", timeout=1).status_code < 500:
                return srv
        except httpx.TransportError:
            time.sleep(0.1)
    srv.stop(), srv.nginx.stop()
    raise RuntimeError("iipsrv behind nginx did not answer")


def rgb(img) -> np.ndarray:
    """A pyvips image as [H, W, 3] uint8, alpha flattened over white."""
    img = img.flatten(background=[255, 255, 255]) if img.hasalpha() else img
    img = (img.bandjoin([img, img]) if img.bands == 1 else img).colourspace("srgb").cast("uchar")[:3]
    return np.ndarray(buffer=img.write_to_memory(), dtype=np.uint8, shape=(img.height, img.width, 3)).copy()


def fit(out: Path, *argv: str) -> Path:
    """`python -m training fit-image ARGV --out OUT`, its output left out; its ONNX file."""
    cmd = [sys.executable, "-m", "training", "fit-image", "--no-progress", *argv, "--out", str(out)]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return out / "1" / "model.onnx"


def bench_photo(photo: Path, a, tmp: Path) -> dict:
    key, pixels = photo.stem.lower().replace("_", "-"), rgb(pyvips.Image.new_from_file(str(photo), access="sequential"))
    (h, w, _), servers, images, models = pixels.shape, {}, tmp / "images", tmp / f"models-{key}"
    if not a.missing:  # the pyramid: `vips tiffsave --tile --pyramid --compression jpeg --Q 90`
        images.mkdir(exist_ok=True)
        tif, vips = images / f"{key}.tif", pyvips.Image.new_from_memory(pixels.data, w, h, 3, "uchar")
        vips.tiffsave(str(tif), tile=True, pyramid=True, compression="jpeg", Q=90)
        level0, prefix = rgb(pyvips.Image.new_from_file(str(tif), page=0)), f"/fcgi-bin/iipsrv.fcgi?IIIF={tif.name}"
        servers["iipsrv"] = {"bytes": tif.stat().st_size, "psnr": psnr(level0 / 255, pixels / 255), "prefix": prefix}
    kinds = {"one": []} | ({"blocks": ["--block-size", str(a.blocks)]} if 0 < a.blocks < max(w, h) else {})
    for kind, folder in ((kind, models / f"{key}-{kind}") for kind in kinds):
        if not (folder / "1" / "metadata.json").is_file():  # --work keeps an earlier run's fits
            shutil.rmtree(folder, ignore_errors=True)
            fit(folder, "--image", str(photo), "--steps", str(a.steps), *GRID, *kinds[kind])
        size = sum(p.stat().st_size for p in folder.rglob("*.onnx"))
        servers[kind] = {"bytes": size, "prefix": f"/iiif/3/{key}-{kind}"}
    servers |= {f"{kind}@base": dict(servers[kind]) for kind in kinds if a.baseline}
    tiles = []  # the IIIF tiles a deep-zoom viewer (OpenSeadragon) asks for at the scales 1, 1/2 and 1/4, row by row
    for s, y, x in ((s, y, x) for s in (1, 2, 4) for y in range(0, h, a.tile * s) for x in range(0, w, a.tile * s)):
        tw, th = min(a.tile * s, w - x), min(a.tile * s, h - y)
        tiles.append(f"/{x},{y},{tw},{th}/{-(-tw // s)},/0/default.jpg")
    running: dict[str, Server] = {}
    try:  # each server started and first-tiled in turn, the others idle: the first tile of a fresh server, then the
        for name, s in servers.items():  # resident set after the same tiles (it grows with the tiles), then the PSNR
            cwd, env = a.baseline if "@" in name else ROOT, {"INR_RENDER_CACHE_BYTES": "0"}
            ours = Server(models, name, env, args=("--model-control-mode", "none"), cwd=cwd) if name != "iipsrv" else 0
            srv = running[name] = ours.wait() if ours else iipsrv(images, tmp / f"iipsrv-{key}")
            with httpx.Client(base_url=srv.url + s["prefix"], timeout=600) as client:
                s["first_tile_s"] = time_calls(lambda: client.get(tiles[0]).raise_for_status(), 1, 0)[0]
                [client.get(tile).raise_for_status() for tile in tiles * 2]
            s["rss_after_tiles"] = status_kib(srv.proc.pid, "VmRSS") * 1024
            (tmp / f"paths-{key}-{name}.txt").write_text("".join(s["prefix"] + tile + "\n" for tile in tiles))
            q, model = {"width": w, "height": h, "format": "png"}, f"{key}-{name.partition('@')[0]}"
            r = httpx.get(f"{srv.url}/v1/models/{model}/render", params=q, timeout=600) if ours else None
            s |= {"psnr": psnr(rgb(pyvips.Image.new_from_buffer(r.content, "")) / 255, pixels / 255)} if r else {}
        for rnd, clients in itertools.product(range(a.rounds), a.clients):  # the servers take turns round by round
            for name in list(servers)[rnd % len(servers) :] + list(servers)[: rnd % len(servers)]:
                srv, env = running[name], os.environ | {"BENCH_PATHS": str(tmp / f"paths-{key}-{name}.txt")}
                both = [(x, x.cpu_seconds()) for x in (srv, getattr(srv, "nginx", None)) if x]
                cmd = ["wrk", "-t1", f"-c{clients}", f"-d{a.duration:g}s", "--timeout", "20s", "-s", f"{tmp}/tiles.lua"]
                out = subprocess.run([*cmd, srv.url], capture_output=True, text=True, env=env).stdout
                r = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:])
                m = [(x.cpu_seconds() - cpu) * 1000 / max(r["requests"], 1) for x, cpu in both] + [0.0]
                r |= dict(tiles_per_s=r["requests"] / r["duration_s"], cpu_ms_per_tile=m[0], nginx_cpu_ms_per_tile=m[1])
                servers[name].setdefault("rounds", {}).setdefault(clients, []).append(r)
                log.info("%s %s at %d: %.1f tiles/s, %.2f ms", key, name, clients, r["tiles_per_s"], m[0])
        for name, s in servers.items():  # after its rounds (the tiles differ by server)
            s["rss"], s["peak_rss"] = (status_kib(running[name].proc.pid, k) * 1024 for k in ("VmRSS", "VmHWM"))
            s["tiles_served"] = sum(r["requests"] for rs in s["rounds"].values() for r in rs)
            s["cells"] = {c: {k: median([r[k] for r in rs]) for k in CELL} for c, rs in s["rounds"].items()}
    finally:
        [(srv.stop(), getattr(srv, "nginx", srv).stop()) for srv in running.values()]
    return {"photo": photo.name, "size": [w, h], "servers": servers, "tiles": len(tiles)}


def classic(a) -> dict:
    for k, v in CLASSIC[a.preset].items():  # an option left at 0 or "" takes the preset's value
        setattr(a, k, getattr(a, k, None) or v)
    if not shutil.which("wrk"):  # nothing can be measured without the load generator
        return {"skipped": "wrk is not installed (apt-get install wrk)"}
    a.missing = "" if IIPSRV.is_file() and shutil.which("nginx") else "apt-get install iipimage-server nginx-light"
    log.warning("the classic server is left out: %s", a.missing) if a.missing else None
    info = {**machine(), "load_before": os.getloadavg()[0], "command": a.command}
    with tempfile.TemporaryDirectory(prefix="bench-classic-") as d:
        (tmp := Path(a.work or d)).mkdir(parents=True, exist_ok=True)
        (tmp / "tiles.lua").write_text(LUA)
        if not a.photos and a.size:  # the bundled photo at the preset's size, a lossless PNG
            pyvips.Image.thumbnail(PHOTO, a.size[0], height=a.size[1], size="force").write_to_file(f"{tmp}/smoke.png")
        photos = a.photos or str(tmp / "smoke.png" if a.size else PHOTO)  # full: the bundled photo as it is
        results = [bench_photo(Path(photo), a, tmp) for photo in photos.split(",")]
    head = ["photo", "server", "file", "PSNR", "first tile", *(f"tiles/s at {c} (p50 / p95)" for c in a.clients)]
    md = [[*head, "CPU per tile", "÷ iipsrv", "RSS after the same tiles"], ["---"] * (len(head) + 3)]
    for r in results:  # a row per photo and server; CPU per tile the median over the client counts
        cpu = {n: [median([s["cells"][c][k] for c in a.clients]) for k in CELL[3:5]] for n, s in r["servers"].items()}
        for name, s in r["servers"].items():
            row = ["{photo} {size[0]}×{size[1]}".format(**r), name, f"{s['bytes'] / 1e6:.2f} MB", f"{s['psnr']:.2f} dB"]
            row += [f"{s['first_tile_s'] * 1000:.0f} ms", *(CELL_MD.format(**s["cells"][c]) for c in a.clients)]
            row += [f"{cpu[name][0]:.2f} ms" + (f" (+ {cpu[name][1]:.2f} nginx)" if name == "iipsrv" else "")]
            row += [f"{cpu[name][0] / cpu['iipsrv'][0]:.1f}×" if "iipsrv" in cpu else ""]
            md.append([*row, f"{s['rss_after_tiles'] / 2**20:.0f} MiB"])
    log.info("\n%s", table := "\n".join("| " + " | ".join(row) + " |" for row in md))
    info["load_after"] = os.getloadavg()[0]
    return {"machine": info, "classic_missing": a.missing, "clients": a.clients, "photos": results, "table": table}


def tile_cost(a) -> dict:
    from .kernels import nbytes, profiled  # torch and the training code: only here

    rt = tasks.runtime_for(a.model, read_spec(a.model), 1, runtime.RuntimeOptions())
    if not rt.load() or rt.lattice is None:
        raise SystemExit(f"tile_cost: {a.model}: {rt.error or 'no lattice (not a dense grid model)'}")
    (w, h), (x0, y0), lat, tp = rt.image_size, (int(v) for v in a.at.split(",")), rt.lattice, im.tile_points
    spec = im.RenderSpec(512, 512, np.eye(3)[:2], viewport=(x0 / w, y0 / h, (x0 + 512) / w, (y0 + 512) / h))
    sizes, put = (1, lt.LATTICE_TILE_FACTOR, lt.KERNEL_TILE_FACTOR), im.render_tile  # × 8192: the service's tile
    plain, lat_tiles, kernel_tiles = (list(tiling.tiles(512, 512, 1, 8192 * f)) for f in sizes)
    points, features = [tp(spec, t) for t in plain], [lat.axes(*lt.model_axes(spec, t)) for t in lat_tiles]
    feats, rgbs, out = [lat.grid_features(f) for f in features], [rt.render_rgb(x) for x in points], im.new_image(spec)
    [put(spec, t, r.copy(), out) for t, r in zip(plain, rgbs)]
    img, numpy_lat, paint = Image.fromarray(out), dataclasses.replace(lat, kernel=None), lt.lattice_painter
    jpeg = functools.partial(nbytes, img, "JPEG", quality=90)  # its bytes, with more of Pillow's options

    def sampled(lattice, parts: list) -> None:  # the lattice's samples, then pixels
        rt.lattice, sample = lattice, lt.lattice_sampler(rt, spec)
        [put(spec, t, sample(t), out) for t in parts]
        rt.lattice = lat

    parts = {
        "plain: the whole graph": lambda: [rt.render_rgb(x) for x in points],
        "plain: samples → pixels": lambda: [put(spec, t, r.copy(), out) for t, r in zip(plain, rgbs)],
        "plain: all but the encoding": lambda: [put(spec, t, rt.render_rgb(tp(spec, t)), out) for t in plain],
        "lattice without the kernel: features (numpy)": lambda: [lat.grid_features(f) for f in features],
        "lattice without the kernel: head (onnxruntime)": lambda: [lat.run(f) for f in feats],
        "lattice without the kernel: all but the encoding": lambda: sampled(numpy_lat, lat_tiles),
        "lattice kernel: rgb, then samples → pixels": lambda: sampled(lat, kernel_tiles),
        "lattice kernel: pixels (the service's road)": lambda: [paint(rt, spec, out)(t) for t in kernel_tiles],
        "JPEG q90 (Pillow's defaults: 4:2:0, no optimize)": lambda: im.encode(out, "jpeg", 90),
        "JPEG q90 optimize": lambda: jpeg(optimize=True),
        "JPEG q90 4:4:4": lambda: jpeg(subsampling=0),
    }
    ms = {name: [] for name in parts if lat.kernel is not None or not name.startswith("lattice kernel")}
    for rnd, name in itertools.product(range(a.rounds + 1), list(ms)):  # round 0 warms; the parts take turns
        t = time.thread_time()
        parts[name]()
        ms[name] += [(time.thread_time() - t) * 1000] if rnd else []
    ops = profiled(rt.version_dir / "model.onnx", 1, [{"coords": x} for x in points], 1, nodes=False)  # by op type
    log.info("\n%s", "\n".join(f"{name:50} {median(xs):7.2f} ms" for name, xs in ms.items()))
    result = {"machine": machine(), "model": str(a.model), "size": [w, h], "tile": [x0, y0, 512, 512]}
    result["cpu_ms"] = {name: round(median(xs), 2) for name, xs in ms.items()}
    result["jpeg_bytes"] = {"defaults": jpeg(), "optimize": jpeg(optimize=True), "4:4:4": jpeg(subsampling=0)}
    return result | {"plain_op_shares": {op: round(us / ops.total(), 3) for op, us in ops.most_common()}}


def sharp_round(browser, url: str, name: str, which: str) -> dict:
    """One round on a page: navigation → its first 'inr-sharp' mark, the last wheel event → the next one."""
    path, sel, notches, delta, factor = PAGES[which]
    with browser.new_context(viewport={"width": 1600, "height": 1000}, device_scale_factor=1) as context:
        page, requests, load0 = context.new_page(), [], os.getloadavg()[0]
        page.on("request", lambda r: requests.append(r.url) if "/render" in r.url or "/iiif/3/" in r.url else None)
        page.add_init_script(WHEEL)
        page.goto(url + path.format(name=name))
        first, loaded = page.wait_for_function(SHARP, arg=0, polling=20, timeout=300_000).json_value(), len(requests)
        page.wait_for_timeout(300)  # the page idle (OpenSeadragon's last frames)
        box, home = page.locator(sel).bounding_box(), page.evaluate(ZOOM, sel)
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        for i in range(notches):
            page.wait_for_timeout(80 if i else 0)  # OpenSeadragon drops wheel events < 50 ms apart
            page.mouse.wheel(0, delta)
        wheel = page.wait_for_function(f"window.__wheels >= {notches} && window.__wheel").json_value()  # ms
        zoomed = page.wait_for_function(SHARP, arg=wheel, polling=20, timeout=300_000).json_value()
        reached = page.evaluate(ZOOM, sel) / home
        r = dict(load_s=first / 1000, zoom_s=(zoomed - wheel) / 1000, zoom_factor=reached, load_requests=loaded)
        r |= dict(zoomed_as_asked=abs(reached / factor - 1) < 0.02, zoom_requests=len(requests) - loaded)
        return r | dict(load_average=[load0, os.getloadavg()[0]])


def viewer_sharp(a) -> dict:
    from playwright.sync_api import sync_playwright

    models, env = a.models.split(","), {"INR_RENDER_CACHE_BYTES": "0"}
    for name, _, photo in (f.partition("=") for f in a.fit.split(",") if f):  # a render's cost, not the fit's quality
        (a.repo / name).exists() or fit(a.repo / name, "--image", photo, "--steps", str(a.fit_steps), *GRID)
        models += [name] if name not in models else []
    out = {"machine": machine(), "load_before": os.getloadavg()[0], "command": a.command, "env": env}
    out |= {"browser_viewport": [1600, 1000], "rounds": a.rounds, "models": {}}
    server, chromium = Server(a.repo, "viewer_sharp", env).wait(), os.environ.get("CHROMIUM", "/usr/bin/chromium")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--disable-gpu"])
            for name, which in itertools.product(models, PAGES):
                meta = json.loads(next((a.repo / name).glob("[0-9]*/metadata.json")).read_text())
                entry = out["models"].setdefault(name, {"native_size": meta.get("source", {}).get("size"), "pages": {}})
                rounds = [sharp_round(browser, server.url, name, which) for _ in range(a.rounds)]
                load, zoom = [r["load_s"] for r in rounds], [r["zoom_s"] for r in rounds if r["zoomed_as_asked"]]
                page = {"median_load_s": median(load), "median_zoom_s": median(zoom) if zoom else None}
                entry["pages"][which] = page | {"rounds": rounds}
                log.info("%s %s: median load %.2f s, zoom %s s", name, which, median(load), page["median_zoom_s"])
    finally:
        server.stop()
    return out | {"load_after": os.getloadavg()[0]}


def attack(url: str, size: int, timeout: float, paths: list[str] = ()) -> tuple[list[dict], list, list[httpx.Client]]:
    """GETs sent together, a thread and a client each (closed: the server drops its request), by default ATTACKERS
    anonymous upscales of tiny regions to size²; each one's status, error, retry_after and seconds in its dict."""
    paths = paths or [f"/iiif/3/astronaut/{3 * i},{2 * i},10,10/^{size},{size}/0/default.jpg" for i in range(ATTACKERS)]
    results, barrier, clients = [{} for _ in paths], threading.Barrier(len(paths)), [httpx.Client() for _ in paths]

    def one(i: int) -> None:
        barrier.wait()
        t = time.perf_counter()
        try:
            r = clients[i].get(url + paths[i], timeout=timeout)
            error = r.json().get("error", "") if r.headers.get("content-type") == "application/json" else ""
            results[i].update(status=r.status_code, error=error, retry_after=r.headers.get("retry-after"))
        except (httpx.HTTPError, RuntimeError) as e:  # RuntimeError: its client closed under it
            results[i].update(status=type(e).__name__, error=repr(e), retry_after=None)
        results[i]["seconds"] = round(time.perf_counter() - t, 3)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(paths))]
    return results, [t.start() or t for t in threads], clients


def pressure(a) -> dict:
    """fairness (a server per mode) and flood (per tree): a small request's seconds idle and under each load."""
    flood, n = a.scenario == "flood", itertools.count()
    if flood and a.smoke:
        a.sizes, a.repeats, a.settle_s, a.baseline = "4096", 3, 0.5, None
    runs = [("this", ROOT), ("baseline", a.baseline)] if flood else [(mode, ROOT) for mode in a.modes.split(",")]
    out = {"machine": machine(), "args": {k: str(v) for k, v in vars(a).items() if k != "parser"}, "trees": []}
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(ROOT / "models" / "astronaut", Path(tmp) / "astronaut")
        for label, cwd in (run for run in runs if run[1]):  # fairness: big renders dear on purpose, one address
            env = {} if flood else {**RENDER, "INR_RENDER_CONCURRENCY": "2" if label == "whole" else "4"}
            srv, rows = Server(Path(tmp), label, env, cwd=cwd).wait(), []
            bystander = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) if flood else httpx

            def small(cap: float) -> tuple[int | None, float]:  # a new tile or render each time: no cache helps
                i, t = next(n), time.perf_counter()
                path = f"/iiif/3/astronaut/full/{256 - i % 64},/0/default.jpg" if flood else BIG.format(a.small, i)
                try:
                    return bystander.get(srv.url + path, timeout=cap).status_code, time.perf_counter() - t
                except httpx.TimeoutException:  # a small render behind a whole big one: capped at --cap-s
                    return None, cap

            try:
                idle = [small(120)[1] for _ in range(a.repeats + 2)][2:]  # the first two: the model loaded, warm
                for size in [int(s) for s in a.sizes.split(",")] if flood else [a.big]:
                    paths = [] if flood else [BIG.format(size, k + 0.5) for k in range(2)]
                    answers, threads, clients = attack(srv.url, size, 90 if flood else 3600, paths)
                    time.sleep(a.settle_s)
                    seen: list = []
                    while len(seen) < a.repeats and (flood or not seen or seen[-1][0]):
                        seen.append(small(a.cap_s))
                    [t.join() for t in threads] if flood else [c.close() for c in clients]
                    (statuses, loaded), what = zip(*seen), f"{ATTACKERS} × ^{size},{size}" if flood else f"2 × {size}²"
                    row = dict(tree=label, attack=what, idle_s=idle, idle_median_s=round(median(idle), 3))
                    row |= dict(bystander_s=loaded, bystander_median_s=round(median(loaded), 3), attackers=answers)
                    row |= dict(bystander_p95_s=round(float(np.percentile(loaded, 95)), 3), capped=statuses[-1] is None)
                    rows.append(row | dict(bystander_statuses=statuses, ratio=median(loaded) / median(idle)))
                    log.info("%s, %s: %.3f s (idle %.3f s), %s", label, what, median(loaded), median(idle), statuses)
                    time.sleep(a.settle_s if flood else 0)  # what the attack left (a baseline's renders: to a timeout)
            finally:
                srv.stop()
            out["trees"].append({"tree": label, "rows": rows})
    return out


SCENARIOS = {  # name: function, options (parse's)
    "classic": (classic, "preset=full photos= blocks=0 rounds=0 duration=0.0 baseline= work="),
    "tile_cost": (tile_cost, "model=! rounds=7 at=512,512"),
    "viewer_sharp": (viewer_sharp, "repo=! models=dandelion fit= fit-steps=50 rounds=5"),
    "fairness": (pressure, "big=4096 small=256 repeats=5 settle-s=3.0 cap-s=120.0 modes=tiles,whole"),
    "flood": (pressure, "name=render_flood sizes=4096,1536 repeats=9 settle-s=1.0 cap-s=30.0 baseline= smoke=?"),
}


def main(argv: list[str] | None = None) -> dict:
    from .kernels import parse  # the harnesses' command line

    a = parse("python -m bench.tiles", __doc__, {k: spec for k, (_, spec) in SCENARIOS.items()}, argv)
    result = SCENARIOS[a.scenario][0](a)
    write_json(a.name, result, a.out_dir) if "skipped" not in result else None
    return result


if __name__ == "__main__":
    main()
