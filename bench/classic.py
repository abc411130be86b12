"""This service beside a classic IIIF server on the same photos and the same tiles (docs/benchmarks.md, classic).

For each photo: iipsrv (Debian's `iipimage-server`) behind nginx over a libvips pyramidal TIFF
(`tiffsave --tile --pyramid --compression jpeg --Q 90`), and this service over a grid model fitted with the grid
preset (`fit-image`, one model) and, with `--blocks`, the same photo fitted in blocks (`--block-size`, as
`POST /v1/fits` fits a long photo). No cache on either side (`MAX_IMAGE_CACHE_SIZE=0`, `INR_RENDER_CACHE_BYTES=0`).
The load is the IIIF tile list a deep-zoom viewer asks for (512² tiles at the scale factors 1, 1/2 and 1/4), every
tile a JPEG of quality 90, cycled by wrk at each `--clients` count, the servers taking turns round by round. Each
cell: tiles/s, p50 and p95, and the CPU per tile of the server's own processes (/proc; nginx's apart). Beside it:
the first tile of a fresh server (ours loads the model on first use), the servers' resident memory after the load,
the file bytes, and the PSNR of the stored image (the pyramid's full level; the model rendered at its native size)
against the photo's pixels.

    python -m bench.classic --photos a.jpg,b.png --blocks 2048 --rounds 3 --duration 10   # the table's command
    python -m bench.classic --preset quick     # a minute, on a generated 1024×640 photo (`make bench`)
    python -m bench.classic --preset smoke     # on a 300×200 one, 128² tiles (what tests/bench runs)

Cantaloupe is not among the servers: see docs/benchmarks.md, classic. Needs wrk, and iipimage-server and nginx
for the classic side (without them the classic server is reported missing and ours runs alone).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from fitstore import PRESETS

from .classic_servers import (
    Classic,
    iiif_path,
    missing_classic,
    psnr,
    pyramid_level0,
    rgb_pixels,
    rss_bytes,
    tile_regions,
    write_pyramid,
)
from .common import RESULTS, ROOT, log, machine, median, setup_logging, write_json
from .serving import Server

LUA = """
local paths = {}
for line in io.lines(os.getenv("BENCH_PATHS")) do paths[#paths + 1] = line end
local i = 0
request = function()
  i = i % #paths + 1
  return wrk.format("GET", paths[i])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RESULT {"requests": %d, "errors": %d, "duration_s": %.3f, "p50_ms": %.3f, '
    .. '"p95_ms": %.3f}\\n', summary.requests, e.status + e.connect + e.read + e.write + e.timeout,
    summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(95) / 1000))
end
"""
PRESETS_RUN = {
    "full": {"steps": PRESETS["grid"]["steps"], "rounds": 3, "duration": 10.0, "clients": "1,4"},
    "smoke": {
        "steps": 4,
        "rounds": 1,
        "duration": 1.0,
        "clients": "1,4",
        "size": (300, 200),
        "tile": 128,
        "blocks": 160,
    },
}


def smoke_photo(path: Path, size: tuple[int, int]) -> Path:
    """A small lossless photo-like image (smooth gradients and some texture), for the smoke preset."""
    from PIL import Image

    w, h = size
    yy, xx = np.mgrid[0:h, 0:w] / max(w, h)
    rng = np.random.default_rng(0)
    img = np.stack([np.sin(6 * xx) * 0.5 + 0.5, np.cos(5 * yy) * 0.5 + 0.5, (xx + yy) / 2], -1)
    img = np.clip(img + rng.normal(0, 0.03, img.shape), 0, 1)
    Image.fromarray((img * 255).astype(np.uint8)).save(path)
    return path


def fit(photo: Path, out: Path, steps: int, block: int = 0) -> None:
    cmd = [sys.executable, "-m", "training", "fit-image", "--image", str(photo), *PRESETS["grid"]["argv"]]
    cmd += ["--protocol", "full", "--steps", str(steps), "--no-progress", "--out", str(out)]
    if block:
        cmd += ["--block-size", str(block)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def run_wrk(url: str, paths: Path, clients: int, duration: float, script: Path) -> dict:
    cmd = ["wrk", "-t1", f"-c{clients}", f"-d{duration:g}s", "--timeout", "20s", "-s", str(script), url]
    env = {**os.environ, "BENCH_PATHS": str(paths)}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120, env=env).stdout
    r = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[len("RESULT ") :])
    r["tiles_per_s"] = r["requests"] / r["duration_s"]
    return r


def first_tile(url: str) -> tuple[float, bytes]:
    t = time.perf_counter()
    r = httpx.get(url, timeout=120)
    r.raise_for_status()
    return time.perf_counter() - t, r.content


def our_psnr(server: Server, name: str, pixels: np.ndarray) -> float:
    import io

    from PIL import Image

    h, w, _ = pixels.shape
    r = httpx.get(
        f"{server.url}/v1/models/{name}/render", params={"width": w, "height": h, "format": "png"}, timeout=600
    )
    r.raise_for_status()
    return psnr(np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB")), pixels)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*.onnx"))


def bench_photo(photo: Path, args, tmp: Path, script: Path) -> dict:
    key = photo.stem.lower().replace("_", "-")
    pixels = rgb_pixels(photo)
    h, w, _ = pixels.shape
    log.info("%s: %d×%d", photo.name, w, h)
    result: dict = {"photo": photo.name, "size": [w, h], "servers": {}}
    regions = tile_regions(w, h, args.tile)
    result["tiles"] = len(regions)
    servers: dict[str, dict] = {}
    images = tmp / "images"
    images.mkdir(exist_ok=True)
    if not args.missing:
        tif = images / f"{key}.tif"
        write_pyramid(pixels, tif)
        servers["iipsrv"] = {"bytes": tif.stat().st_size, "psnr": psnr(pyramid_level0(tif), pixels), "file": tif.name}
    models = tmp / f"models-{key}"
    kinds = [("one", 0)] + ([("blocks", args.blocks)] if 0 < args.blocks < max(w, h) else [])
    for kind, block in kinds:
        t = time.perf_counter()
        folder = models / f"{key}-{kind}"
        if not (folder / "1" / "metadata.json").is_file():  # a --work folder keeps the fits of an earlier run
            shutil.rmtree(folder, ignore_errors=True)
            fit(photo, folder, args.steps, block)
        servers[kind] = {"bytes": folder_bytes(folder), "fit_s": time.perf_counter() - t}
    if args.baseline:  # the same models served by another checkout of this service (`--baseline`)
        for kind, _ in kinds:
            servers[f"{kind}@base"] = dict(servers[kind])
    env = {"INR_RENDER_CACHE_BYTES": "0", "INR_LOG_LEVEL": "error"}
    procs: dict[str, Server] = {}
    try:
        for name in servers:  # started and first-tiled one at a time: the cold tile on a quiet server
            if name == "iipsrv":
                procs[name] = Classic(images, tmp / f"iipsrv-{key}").wait()
                prefix = procs[name].tile_prefix(servers[name]["file"])
            else:
                kind, _, where = name.partition("@")
                cwd = args.baseline if where else ROOT
                procs[name] = Server(models, env=env, args=("--model-control-mode", "none"), cwd=cwd).wait()
                prefix = f"/iiif/3/{key}-{kind}"
            servers[name]["prefix"] = prefix
            servers[name]["first_tile_s"], _ = first_tile(procs[name].url + iiif_path(regions[0], prefix))
        for name, info in servers.items():  # the resident set after the same tiles on every server, before any
            # other request (it grows with the tiles a server has rendered: the end of the run is not comparable)
            with httpx.Client(timeout=120) as client:
                for _ in range(2):
                    for r in regions:
                        client.get(procs[name].url + iiif_path(r, info["prefix"])).raise_for_status()
            info["rss_after_tiles"] = rss_bytes(procs[name].proc)[0]
            info["rss_tiles"] = 1 + 2 * len(regions)
        for name in servers:
            if name != "iipsrv":
                servers[name]["psnr"] = our_psnr(procs[name], f"{key}-{name.partition('@')[0]}", pixels)
        for name, info in servers.items():
            paths = tmp / f"paths-{key}-{name}.txt"
            paths.write_text("\n".join(iiif_path(r, info["prefix"]) for r in regions) + "\n")
            info["paths"] = paths
            info["rounds"] = {c: [] for c in args.clients}
        for rnd in range(args.rounds):
            order = list(servers)[rnd % len(servers) :] + list(servers)[: rnd % len(servers)]
            for clients in args.clients:
                for name in order:
                    proc, info = procs[name], servers[name]
                    cpu, ncpu = proc.cpu_seconds(), _nginx_cpu(proc)
                    r = run_wrk(proc.url, info["paths"], clients, args.duration, script)
                    n = max(r["requests"], 1)
                    r["cpu_ms_per_tile"] = (proc.cpu_seconds() - cpu) * 1000 / n
                    r["nginx_cpu_ms_per_tile"] = (_nginx_cpu(proc) - ncpu) * 1000 / n
                    info["rounds"][clients].append(r)
                    log.info(
                        "%s %s, %d clients: %.1f tiles/s, %.2f ms CPU",
                        key,
                        name,
                        clients,
                        r["tiles_per_s"],
                        r["cpu_ms_per_tile"],
                    )
        for name, info in servers.items():
            info["rss"], info["peak_rss"] = rss_bytes(procs[name].proc)  # after its rounds: tiles differ by server
            info["tiles_served"] = sum(r["requests"] for rs in info["rounds"].values() for r in rs)
    finally:
        for p in procs.values():
            p.stop()
    for info in servers.values():
        info.pop("paths")
        info["cells"] = {c: _cell(rs) for c, rs in info["rounds"].items()}
    result["servers"] = servers
    return result


def _nginx_cpu(proc: Server) -> float:
    return proc.nginx_cpu_seconds() if isinstance(proc, Classic) else 0.0


def _cell(rounds: list[dict]) -> dict:
    """The median round of a cell by tiles/s, with the medians of its other figures."""
    return {
        k: median([r[k] for r in rounds])
        for k in ("tiles_per_s", "p50_ms", "p95_ms", "cpu_ms_per_tile", "nginx_cpu_ms_per_tile", "errors")
    }


def table(results: list[dict], clients: list[int]) -> str:
    """The markdown table: one row per photo and server; CPU per tile is the median over the client counts."""
    head = "| photo | server | file | PSNR | first tile | " + " | ".join(f"tiles/s at {c} (p50 / p95)" for c in clients)
    head += " | CPU per tile | ÷ iipsrv | RSS after the same tiles |\n|" + "---|" * (8 + len(clients)) + "\n"
    rows = []
    for r in results:
        base = r["servers"].get("iipsrv")
        base_cpu = None if base is None else median([base["cells"][c]["cpu_ms_per_tile"] for c in clients])
        for name, s in r["servers"].items():
            cpu = median([s["cells"][c]["cpu_ms_per_tile"] for c in clients])
            nginx = median([s["cells"][c]["nginx_cpu_ms_per_tile"] for c in clients])
            cpu_text = f"{cpu:.2f} ms" + (f" (+ {nginx:.2f} nginx)" if name == "iipsrv" else "")
            ratio = "" if base_cpu is None else f"{cpu / base_cpu:.1f}×"
            cells = " | ".join(
                "{tiles_per_s:.0f} ({p50_ms:.1f} / {p95_ms:.1f} ms)".format(**s["cells"][c]) for c in clients
            )
            rows.append(
                f"| {r['photo']} {r['size'][0]}×{r['size'][1]} | {name} | {s['bytes'] / 1e6:.2f} MB | "
                f"{s['psnr']:.2f} dB | {s['first_tile_s'] * 1000:.0f} ms | {cells} | {cpu_text} | {ratio} | "
                f"{s['rss_after_tiles'] / 2**20:.0f} MiB |"
            )
    return head + "\n".join(rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.classic", description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="full", choices=sorted(PRESETS_RUN))
    p.add_argument("--photos", default="", help="comma-separated photo files (the smoke preset makes its own)")
    p.add_argument("--blocks", type=int, default=0, help="also the photo fitted in blocks of this side (0: not)")
    p.add_argument("--steps", type=int, default=0, help="fit steps (default: the preset's)")
    p.add_argument("--rounds", type=int, default=0)
    p.add_argument("--duration", type=float, default=0.0, help="seconds of wrk per cell")
    p.add_argument("--clients", default="")
    p.add_argument("--tile", type=int, default=0, help="tile side (default 512)")
    p.add_argument("--baseline", type=Path, default=None, help="also serve the models from this checkout (before)")
    p.add_argument("--work", type=Path, default=None, help="keep the pyramids and fitted models here, and reuse them")
    p.add_argument("--out-dir", default=str(RESULTS))
    p.add_argument("--name", default="classic")
    a = p.parse_args(argv)
    logging.getLogger("pyvips").setLevel(logging.WARNING)  # its debug lines, one per libvips thread pool
    preset = PRESETS_RUN[a.preset]
    a.steps = a.steps or preset["steps"]
    a.rounds = a.rounds or preset["rounds"]
    a.duration = a.duration or preset["duration"]
    a.clients = [int(c) for c in (a.clients or preset["clients"]).split(",")]
    a.tile = a.tile or preset.get("tile", 512)
    a.blocks = a.blocks or preset.get("blocks", 0)
    if shutil.which("wrk") is None:  # the load generator: nothing can be measured without it
        log.warning("classic: skipped, wrk is not installed (apt-get install wrk)")
        return {"skipped": "wrk is not installed (apt-get install wrk)"}
    a.missing = missing_classic()
    if a.missing:
        log.warning("the classic server is left out: %s", a.missing)
    info = {
        **machine(),
        "load_before": os.getloadavg()[0],
        "command": "python -m bench.classic " + " ".join(argv or sys.argv[1:]),
    }
    with tempfile.TemporaryDirectory(prefix="bench-classic-") as d:
        tmp = a.work or Path(d)
        tmp.mkdir(parents=True, exist_ok=True)
        photos = [Path(x) for x in a.photos.split(",") if x]
        if not photos:
            if "size" not in preset:
                p.error("--photos is needed with the full preset")
            photos = [smoke_photo(tmp / "smoke.png", preset["size"])]
        script = tmp / "tiles.lua"
        script.write_text(LUA)
        results = [bench_photo(photo, a, tmp, script) for photo in photos]
    info["load_after"] = os.getloadavg()[0]
    payload = {"machine": info, "classic_missing": a.missing, "clients": a.clients, "photos": results}
    md = table(results, a.clients)
    payload["table"] = md
    write_json(a.name, payload, Path(a.out_dir))
    log.info("\n%s", md)
    return payload


if __name__ == "__main__":
    setup_logging()
    main()
