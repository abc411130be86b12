"""Model bytes against the image codecs: docs/benchmarks/training.md (model_bytes, rd), docs/model-repository.md.

    python -m bench.codecs model_bytes --photos twowings.jpg,calla.png --targets 0.5,0.6 --work /tmp/mb
    python -m bench.codecs rd --photos kleiber.png --codes ans --targets 36,40,44 --lambdas 1e-4,1e-2 --work /tmp/rd
    python -m bench.codecs ctxcode_decode --baseline HEAD~1 --sizes 0.5,2.3,4

model_bytes, rd: grid models (`fit_photos`) beside the codecs (`encode`); rd adds BD-rates (`bd_rate`); --plot-from
RESULT: no fit, its plot and table. ctxcode_decode: the context code's decoders taking turns on synthetic levels.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import math
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from unittest import mock

import numpy as np
import pyvips
import torch
from PIL import Image
from scipy.interpolate import PchipInterpolator

from fitstore import PRESETS
from modelrepo import ctxcode, ctxdecode
from training.encodings import grid_plugin, grid_rate
from training.errors import UsageError
from training.fit_image import evaluate, finish, image_file, train
from training.image_models import ImageINR
from training.images import load_image

from .common import checkout, fit_image_config, log, machine, pyplot, setup_logging, write_json

listof = lambda kind: lambda text: [kind(x) for x in text.split(",") if x]  # noqa: E731
FIT = {"--photos": (listof(Path), []), "--work": (Path, None), "--steps": (int, 280), "--plot": (Path, None)}
FIT |= {"--plot-from": (Path, None), "--targets": (listof(float), [36.0, 40.0, 44.0])}  # rd: PSNR; model_bytes: B/px
OPTIONS = {  # each scenario's options: (type, default); OUT/NAME.json the result (OUT: bench/results)
    "model_bytes": FIT | {"--max-pixels": (int, 4_100_000), "--targets": (listof(float), [0.3, 0.4, 0.5, 0.6, 0.8])},
    "rd": FIT | {"--max-pixels": (int, 25_000_000), "--rd-steps": (int, 300), "--lambdas": (listof(float), [])},
    "ctxcode_decode": {"--sizes": (listof(float), [0.5, 2.3, 4.0]), "--repeats": (int, 5), "--baseline": (str, None)},
}
OPTIONS["model_bytes"]["--qualities"] = (listof(int), [30, 50, 70, 80, 90, 95])
OPTIONS["rd"] |= {"--qualities": (listof(int), [20, 35, 50, 65, 75, 85, 90, 95, 98])}
OPTIONS["rd"] |= {"--range": (listof(float), [34.0, 46.0]), "--codes": (listof(str), ["rice", "ans"])}
KINDS = {"model_bytes": ("jpeg", "webp", "pyramid"), "rd": ("jpeg444", "jpeg420", "webp", "avif", "j2k", "jxl")}
PILLOW = {"jpeg": ("JPEG", {}), "jpeg444": ("JPEG", {"subsampling": 0}), "jpeg420": ("JPEG", {"subsampling": 2})}
PILLOW |= {"webp": ("WEBP", {"method": 6}), "avif": ("AVIF", {}), "j2k": ("JPEG2000", {"quality_mode": "rates"})}


def psnr8(a: np.ndarray, b: np.ndarray) -> float:
    err = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 100.0 if err == 0 else round(float(10 * math.log10(255.0**2 / err)), 3)


def encode(kind: str, pixels: np.ndarray, q: int) -> dict:
    """The 8-bit pixels through a codec at quality q: the bytes, and the PSNR of the decoded pixels."""
    if kind == "jxl":  # imagecodecs, optional
        jxl = importlib.import_module("imagecodecs")
        size, back = len(data := jxl.jpegxl_encode(pixels, level=q, effort=7)), jxl.jpegxl_decode(data)
    elif kind == "pyramid":  # a pyramidal TIFF of JPEG tiles, as bench.classic serves it
        data = pyvips.Image.new_from_array(pixels).tiffsave_buffer(tile=True, pyramid=True, compression="jpeg", Q=q)
        size, back = len(data), pyvips.Image.new_from_buffer(data, "", page=0).numpy()[..., :3]
    else:  # Pillow; JPEG 2000 by rate: a ratio of 100 at q 20 down to about 3 at q 98
        (fmt, opts), ratio = PILLOW[kind], round(100 * (3 / 100) ** ((q - 20) / 78), 2)
        opts = opts | ({"quality_layers": [ratio]} if fmt == "JPEG2000" else {"quality": q})
        Image.fromarray(pixels).save(buf := io.BytesIO(), fmt, **opts)
        size, back = buf.tell(), np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
    return {"kind": kind, "quality": q, "bytes": size, "psnr": psnr8(back, pixels)}


def fit_photos(a) -> dict:
    """The grid preset trained once per photo (kept in --work), finished each way: model_bytes `today` (255 steps a
    level, uncoded: the tree before e773827), `coded`, `default`, byte targets; rd each --codes at PSNR targets, λs."""
    (work := a.work or Path(tempfile.gettempdir()) / f"bench-{a.scenario}").mkdir(parents=True, exist_ok=True)
    photos, kinds = [], [k for k in KINDS[a.scenario] if k != "jxl" or importlib.util.find_spec("imagecodecs")]
    for photo in a.photos:
        argv = ["--image", str(photo), "--steps", str(a.steps), "--protocol", "full", "--max-pixels", str(a.max_pixels)]
        cfg = fit_image_config([*argv, "--no-progress", *PRESETS["grid"]["argv"]])
        img, t0, train_s = load_image(cfg.image, cfg.size, cfg.crop, cfg.max_pixels)[0], time.perf_counter(), None
        if not (saved := work / f"{photo.stem}-{a.steps}.pt").is_file():
            torch.save({k: v.clone() for k, v in train(cfg, img)[0].state_dict().items()}, saved)
            train_s = round(time.perf_counter() - t0, 1)
        state = torch.load(saved, weights_only=True)
        (h, w, _), pixels = img.shape, np.round(img * 255).astype(np.uint8)
        rows = [encode(kind, pixels, q) for kind in kinds for q in a.qualities]
        ways = [({"kind": "grid", "variant": v, "target_bytes": None}, {}) for v in ("today", "coded", "default")]
        ways += [({"kind": "grid", "variant": "target", "target_bytes": int(b * w * h)}, {}) for b in a.targets]
        if a.scenario == "rd":
            psnrs = [None, *a.targets]
            ways = [({"kind": f"grid-{c}", "target_psnr": t}, {"table_code": c}) for c in a.codes for t in psnrs]
            rd = [{"table_code": "ans", "rd_lambda": lam, "rd_steps": a.rd_steps} for lam in a.lambdas]
            ways += [({"kind": "grid-rd", "lambda": e["rd_lambda"], "rd_steps": a.rd_steps}, e) for e in rd]
        for row, enc in ways:
            loss = 0.0 if (variant := row.get("variant")) in ("today", "coded") else grid_rate.LOSS_DB  # the finest
            code = (lambda data, code="rice": (data, {})) if variant == "today" else grid_plugin.code_tables  # uncoded
            try:
                with mock.patch.object(grid_rate, "LOSS_DB", loss), mock.patch.object(grid_plugin, "code_tables", code):
                    targets = {k: row[k] for k in ("target_bytes", "target_psnr") if k in row}
                    c = replace(cfg, model=replace(cfg.model, encoding=replace(cfg.model.encoding, **enc)), **targets)
                    (model := ImageINR(c.model)).load_state_dict(state)
                    t0 = time.perf_counter()
                    model = finish(model.eval(), c, img, history := {})
                    seconds, (data, _) = time.perf_counter() - t0, image_file(model, c, [w, h])
            except UsageError as e:  # below what this grid can make
                rows.append(row | {"error": str(e)})
                continue
            render = np.round(np.clip(evaluate(model, img, c.protocol)[1], 0, 1) * 255).astype(np.uint8)
            row |= {"bytes": len(data), "psnr": psnr8(render, pixels)}
            rate = (history.get("native_refit") or {}).get("rate", {})
            if variant:
                row |= {k: rate.get(k) for k in ("native_levels", "coarse_levels")} | {"finish_s": round(seconds, 1)}
            rows.append(row | ({"rd_seconds": history["rd"]["seconds"]} if "lambda" in row else {}))
            log.info("%s", rows[-1])
        points = {}
        for r in (r for r in rows if "bytes" in r):
            r["bytes_per_pixel"] = round(r["bytes"] / (w * h), 4)
            points.setdefault(r["kind"], []).append((r["bytes"], r["psnr"]))
        photos.append({"photo": photo.name, "width": w, "height": h, "size": [w, h], "train_s": train_s, "rows": rows})
        if a.scenario == "rd":
            anchor = points.pop("jpeg444")
            photos[-1]["bd_rate"] = {k: bd_rate(anchor, v, *a.range) for k, v in points.items()}
    doc = {"machine": machine(), "args": json.loads(json.dumps(vars(a), default=str)), "photos": photos}
    if a.scenario == "model_bytes":  # the figures' shape since its first run
        return {"machine": doc.pop("machine"), "args": doc.pop("args"), "result": doc}
    m = {k: [p["bd_rate"][k] for p in photos if p["bd_rate"].get(k) is not None] for p in photos for k in p["bd_rate"]}
    mean = {k: round(float(np.mean(v)), 1) for k, v in sorted(m.items()) if v}
    return doc | {"range_db": a.range, "mean_bd_rate": mean}


def bd_rate(anchor: list[tuple[float, float]], test: list[tuple[float, float]], lo: float, hi: float) -> float | None:
    """Bjøntegaard's delta rate of `test` against `anchor` ((bytes, PSNR) points) in percent, as JVET computes it: the
    mean gap of PCHIP curves of log-bytes against PSNR where both are within [lo, hi]; None if less than 1 dB."""
    curves = []
    for points in (anchor, test):  # a curve whose rate falls as PSNR rises is not an RD curve: its hull's rise
        kept = []
        for p, lb in sorted({round(p, 4): math.log10(b) for b, p in points}.items()):
            kept += [(p, lb)] if not kept or lb > kept[-1][1] else []
        curves.append(np.array(kept).T)
    (pa, ra), (pt, rt) = curves
    low, high = max(lo, pa.min(), pt.min()), min(hi, pa.max(), pt.max())
    if len(pa) < 2 or len(pt) < 2 or high - low < 1.0:
        return None
    grid = np.linspace(low, high, 200)
    gap = np.trapezoid(PchipInterpolator(pt, rt)(grid) - PchipInterpolator(pa, ra)(grid), grid) / (high - low)
    return round(float((10**gap - 1) * 100), 1)


def bytes_table(doc: dict) -> str:
    """Each grid model's bytes per pixel and PSNR, and each codec's at that PSNR (log bytes linear in PSNR between)."""
    head = "| photo | model | bytes | B/px | PSNR | JPEG at that PSNR | WebP | pyramid |"
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|"]
    for photo in doc["result"]["photos"]:
        curves = {k: [] for k in KINDS["model_bytes"]}  # each codec's (PSNR, log bytes per pixel), by quality
        for r in (r for r in photo["rows"] if r["kind"] in curves):
            curves[r["kind"]].append((r["psnr"], math.log(r["bytes_per_pixel"])))
        for r in (r for r in photo["rows"] if r["kind"] == "grid"):
            name = r["variant"] if r["variant"] != "target" else f"target {r['target_bytes']:,} B"
            if "bytes" not in r:
                lines.append(f"| {photo['photo']} | {name} | {r['error']} | | | | | |")
                continue
            p = r["psnr"]
            at = [np.interp(p, *zip(*sorted(c))) if min(c)[0] <= p <= max(c)[0] else None for c in curves.values()]
            cells = " | ".join("above the qualities run" if x is None else f"{math.exp(x):.3f}" for x in at)
            size = f"{r['bytes']:,} | {r['bytes_per_pixel']:.3f}"
            lines.append(f"| {photo['photo']} | {name} | {size} | {r['psnr']:.2f} | {cells} |")
    return "\n".join(lines)


def rd_table(doc: dict) -> str:
    """The BD-rates against JPEG 4:4:4: a row per photo, a column per codec or model."""
    kinds = sorted({k for p in doc["photos"] for k in p["bd_rate"]})
    lines = ["| photo | " + " | ".join(kinds) + " |", "|---|" + "---:|" * len(kinds)]
    for p in doc["photos"]:
        cells = [f"{p['bd_rate'][k]:+.1f} %" if p["bd_rate"].get(k) is not None else "–" for k in kinds]
        lines.append(f"| {p['photo']} {p['size'][0]}×{p['size'][1]} | " + " | ".join(cells) + " |")
    means = " | ".join(f"**{doc['mean_bd_rate'].get(k, float('nan')):+.1f} %**" for k in kinds)
    return "\n".join([*lines, f"| **mean** | {means} |"])


def plot(doc: dict, path: Path) -> None:
    """PSNR against bytes (model_bytes) or bits (rd) per pixel, a panel per photo, a line per codec or model."""
    plt, photos, rd = pyplot(), doc.get("result", doc)["photos"], "range_db" in doc
    fig, axes = plt.subplots(1, len(photos), figsize=(5.6 * len(photos), 4.5), squeeze=False)
    for ax, p in zip(axes[0], photos):
        (w, h), series = p.get("size") or (p["width"], p["height"]), {}
        for r in (r for r in p["rows"] if "bytes" in r):
            one = r.get("variant", "target") != "target"  # a single model: a marker, not a line
            label = r["kind"] + (f", {r['variant']}" if one else "")
            series.setdefault(label, []).append((r["bytes"] * (8 if rd else 1) / (w * h), r["psnr"]))
        for label, pts in sorted(series.items()):
            style = "*" if len(pts) == 1 else "o-" if label.startswith("grid") else ".--"
            ax.plot(*zip(*sorted(pts)), style, label=label, ms=10 if len(pts) == 1 else 4)
        ax.set(xscale="log", xlabel=f"{'bits' if rd else 'bytes'} per pixel", ylabel="PSNR, 8-bit RGB (dB)")
        ax.set(title=f"{p['photo']} ({w}×{h})", ylim=doc["range_db"] if rd else None)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.savefig(path, dpi=90, bbox_inches="tight")


def level(megapixels: float, seed: int = 0) -> np.ndarray:
    """A [1, 1, ry, rx] uint8 table of 16:9 about `megapixels`, as a photo fit leaves a native level: about 60,
    zero deviation almost everywhere, a few in ten ±1 or wider along the edges of a smooth random field."""
    rng, ry = np.random.default_rng(seed), int(round((megapixels * 1e6 * 9 / 16) ** 0.5))
    rx = int(round(megapixels * 1e6 / ry))
    field = np.kron(rng.normal(size=(ry // 32 + 2, rx // 32 + 2)), np.ones((32, 32)))[:ry, :rx]
    edges = np.hypot(*np.gradient(field))  # steps of the blocky field: lines of edges, flat between
    q = 60 + np.round(rng.laplace(0, 0.25 + 2.0 * edges / (edges.max() + 1e-9)))
    return np.clip(q, 0, 255).astype(np.uint8)[None, None]


def ctxcode_decode(a) -> dict:
    """Each decoder's median seconds per table, wall and CPU (`WAY cpu`), taking turns; a --baseline's (a checkout or
    git ref) modelrepo/ctxdecode.py (or ctxcode.py before it) imported into this tree's package (and its C decoder)."""
    numpy_decode = mock.patch.object(ctxdecode, "_ctxcode", None)(ctxcode.decode)  # as where C was not built
    ways = ({"this tree": ctxcode.decode} if ctxdecode._ctxcode else {}) | {"this tree, numpy": numpy_decode}
    if a.baseline:
        tree = checkout(a.baseline)[0] / "modelrepo"
        name = next(n for n in ("ctxdecode", "ctxcode") if (tree / f"{n}.py").is_file())
        spec = importlib.util.spec_from_file_location(f"modelrepo.{name}_baseline", tree / f"{name}.py")
        spec.loader.exec_module(module := importlib.util.module_from_spec(spec))
        ways[f"baseline {Path(a.baseline).name}"] = module.decode
    rows = []
    for table in (level(mp) for mp in a.sizes):
        data, times = ctxcode.encode(table), {way: [] for way in ways}
        for way, decode in [*ways.items()] * a.repeats:
            wall, cpu = time.perf_counter(), time.process_time()
            out = decode(data)
            times[way].append((time.perf_counter() - wall, time.process_time() - cpu))
            if not np.array_equal(out, table):
                raise SystemExit(f"ctxcode_decode: {way} decoded another table")
        rows.append({"megapixels": table.size / 1e6, "shape": list(table.shape), "bytes": len(data)})
        rows[-1] |= {way: float(np.median([t for t, _ in ts])) for way, ts in times.items()}
        rows[-1] |= {f"{way} cpu": float(np.median([c for _, c in ts])) for way, ts in times.items()}
        log.info("%s", rows[-1])
    return {"machine": machine(), "repeats": a.repeats, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.codecs", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="scenario", required=True)
    for name, options in OPTIONS.items():
        s = sub.add_parser(name)
        for flag, (kind, default) in ({"--out": (Path, None), "--name": (str, name)} | options).items():
            s.add_argument(flag, type=kind, default=default)
    a = p.parse_args(argv)
    setup_logging()
    if a.scenario == "ctxcode_decode":
        write_json(a.name, ctxcode_decode(a), a.out)
        return 0
    if not (a.plot_from or a.photos):
        p.error("--photos is needed (or --plot-from)")
    doc = json.loads(a.plot_from.read_text()) if a.plot_from else fit_photos(a)
    if not a.plot_from:
        write_json(a.name, doc, a.out)
    if a.plot:
        plot(doc, a.plot)
    print((bytes_table if a.scenario == "model_bytes" else rd_table)(doc))  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
