"""Real photos at their native resolution (docs/benchmarks/training.md), a subcommand per scenario writing
bench/results/NAME.json, in-process: PSNR probes in the training loop, their time excluded (native_fit, native_steps),
a finish repeated from one fit's weights (native_refit), no model (native_ceiling); `plot` draws native_fit runs.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from . import common as c
from . import fits
from .common import machine, median, write_json

PAIRS = [(0.74, 0.74), (0.86, 0.86), (0.92, 0.92), (0.92, 0.47), (1.0, 0.5)]  # ceiling: (luma, chroma) × native
# fmt: off
OPTIONS = {
    "native_fit": {"image": "", "size": 0, "presets": "grid,fourier", "budget": 60.0, "checkpoints": "15,30,60,120,300",
                   "steps": 0, "protocol": "paper", "every": 10, "threads": 2, "backprojections": 0, "extra": ()},
    "native_ceiling": {"images": ...},
    "native_refit": {"image": "", "quantiles": "0,1e-6,1e-5,1e-4,1e-3", "threads": 2},
    "native_steps": {"image": "", "steps": 150, "every": 50, "threads": 2, "extra": ()},
    "plot": {"results": ..., "out": str(c.IMG / "native-fit-psnr-time.png")},
}
# fmt: on


def fit_md(result: dict) -> str:
    rows = []
    for r in result["rows"]:
        jpeg, webp = (f"{x['psnr']:.2f} (q{x['quality']})" if x["psnr"] else "–" for x in r["codecs"])
        rows.append([r["preset"], f"{r['width']}×{r['height']}", f"{r.get('fit_seconds', r['train_seconds']):.0f}"])
        rows[-1] += [r["steps"], f"{r['full_psnr']:.2f}", r.get("test_psnr", "–"), f"{r['bytes_per_pixel']:.3f}"]
        rows[-1] += [jpeg, webp]
    head = ["preset", "W×H", "fit s", "steps", "PSNR all px (dB)", "held-out (dB)", "B/px", "JPEG same bytes"]
    return "\n".join(fits.md([*head, "WebP same bytes"], "llrrrrrrr", rows))


def codec_at(img: np.ndarray, fmt: str, target: int) -> dict:
    """The best quality of `fmt` whose file is at most `target` bytes (bisection), and its PSNR."""
    from training.metrics import psnr

    best, lo, hi, u8 = (None, None), 1, 100, Image.fromarray(np.clip(img * 255 + 0.5, 0, 255).astype(np.uint8))
    while lo <= hi:
        u8.save(buf := io.BytesIO(), fmt, quality=(q := (lo + hi) // 2))
        best, lo, hi = ((q, buf.getvalue()), q + 1, hi) if buf.tell() <= target else (best, lo, q - 1)
    q, data = best  # (None, None): no quality fits in the bytes
    rgb = data and np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), np.float32) / 255
    return {"format": fmt, "quality": q, "bytes": data and len(data), "psnr": data and psnr(rgb, img, 3)}


def native_fit(argv: list[str] | None = None) -> dict:
    """Each preset fits for at most --budget training seconds, then is finished and exported as the worker does."""
    from fitstore import PRESETS
    from training.encodings import grid_init
    from training.fit_image import evaluate, export_image_model, finish, predict, train
    from training.images import load_image, pixel_centres
    from training.metrics import psnr

    a = fits.parse("native_fit", argv, OPTIONS, "native")[1]
    grid_init.BACKPROJECTIONS = a.backprojections or grid_init.BACKPROJECTIONS  # 0: the shipped number
    result = {"machine": machine(), "image": a.image, "budget_s": a.budget, "threads": a.threads}
    result.update(backprojections=grid_init.BACKPROJECTIONS, load_before=list(os.getloadavg()), rows=[])
    for name in (n for n in a.presets.split(",") if n):
        steps, size = str(a.steps or PRESETS[name]["steps"]), ["--size", str(a.size)] if a.size else []
        argv = ["--image", a.image, *size, "--protocol", a.protocol, "--device", "cpu", "--no-progress", "--steps"]
        cfg = c.fit_image_config(argv := [*argv, steps, *PRESETS[name]["argv"], *a.extra])
        img, source = load_image(cfg.image, cfg.size, cfg.crop, cfg.max_pixels)
        (h, w), todo = img.shape[:2], sorted(float(t) for t in a.checkpoints.split(",") if float(t) < a.budget)
        coords, clock, curve = pixel_centres(h, w).reshape(-1, 2), [0.0, time.perf_counter(), 0], []

        def probe(step: int, loss: float, model) -> bool:
            clock[:] = clock[0] + time.perf_counter() - clock[1], 0, step + 1
            while todo and clock[0] >= todo[0]:  # PSNR over all pixels, not timed
                full, _ = predict(model, coords, next(model.parameters()).device), todo.pop(0)
                curve.append((step + 1, round(clock[0], 2), psnr(full, img.reshape(-1, 3), 3)))
            clock[1] = time.perf_counter()
            return clock[0] >= a.budget

        model, history = train(cfg, img, on_step=probe, every=a.every)
        t = time.perf_counter()  # the finish: rounding, a native level's refit
        model, fin = finish(model, cfg, img, history), time.perf_counter() - t
        metrics, full = evaluate(model, img, cfg.protocol)
        with tempfile.TemporaryDirectory() as tmp:
            export_image_model(model, cfg, Path(tmp) / "m", source, metrics, history, full)
            files = sum(f.stat().st_size for f in (Path(tmp) / "m" / "1").glob("*.onnx"))
        row = {"preset": name, "argv": " ".join(argv), "width": w, "height": h, "train_seconds": round(clock[0], 2)}
        row.update(finish_seconds=round(fin, 2), fit_seconds=round(clock[0] + fin, 2), steps=clock[2], curve=curve)
        row.update(**metrics, best_step=history["best_step"], model_bytes=files)
        row["bytes_per_pixel"] = round(files / (w * h), 4)
        result["rows"].append({**row, "codecs": [codec_at(img, f, files) for f in ("JPEG", "WEBP")]})
        write_json(a.name, result, a.out_dir)
    result["load_after"] = list(os.getloadavg())
    write_json(a.name, result, a.out_dir)
    print(fit_md(result))  # noqa: T201 - the scenario's result
    return result


def native_ceiling(argv: list[str] | None = None) -> dict:
    """Each photo's luma and chroma resampled to fractions of the native size and back: PSNR over all pixels."""
    import torch
    import torch.nn.functional as F

    from training.encodings.grid_init import BASIS

    a, rows, basis = fits.parse("native_ceiling", argv, OPTIONS, "native")[1], {}, BASIS.numpy()
    for path in a.images:
        img = np.asarray(Image.open(path).convert("RGB"), np.float32) / 255
        opp, (h, w), row = np.einsum("hwc,kc->khw", img, basis), img.shape[:2], rows.setdefault(Path(path).stem, {})
        for luma, chroma in PAIRS:
            back = []
            for ch, f in zip(opp, (luma, chroma, chroma)):  # Lanczos down, bilinear up
                small = Image.fromarray(ch).resize((max(1, round(w * f)), max(1, round(h * f))), Image.LANCZOS)
                up = F.interpolate(torch.from_numpy(np.array(small))[None, None], (h, w), mode="bilinear")
                back.append(ch if f == 1.0 else up[0, 0].numpy())
            rgb = np.clip(np.einsum("khw,kc->hwc", np.stack(back), basis), 0, 1)
            row[f"luma {luma}, chroma {chroma}"] = round(float(-10 * np.log10(np.mean((rgb - img) ** 2))), 2)
    write_json(a.name, {"machine": machine(), "rows": rows}, a.out_dir)
    return rows


def grid_fit(a, *argv: str):
    """The config and the photo of a fit on all its pixels."""
    from training.images import load_image

    cfg = c.fit_image_config(["--image", a.image, "--protocol", "full", "--no-progress", *argv])
    return cfg, load_image(cfg.image, cfg.size, cfg.crop, cfg.max_pixels)[0]


def native_refit(argv: list[str] | None = None) -> dict:
    """One grid preset fit, its finish repeated: no refit, and the native level rounded over quantiles q … 1 − q."""
    from fitstore import PRESETS
    from training.encodings import grid_refit
    from training.encodings.grid_quant import round_tables_8bit
    from training.fit_image import checkpoint, evaluate, rebuild, split_pixels, train
    from training.fp16 import round_weights_fp16

    a = fits.parse("native_refit", argv, OPTIONS, "native")[1]
    cfg, img = grid_fit(a, "--steps", str(PRESETS["grid"]["steps"]), *PRESETS["grid"]["argv"])
    coords, targets, _, _ = split_pixels(img, "full")
    base = round_weights_fp16(rebuild(checkpoint(train(cfg, img)[0], cfg)))  # head float16, tables not rounded
    score = lambda m: evaluate(m, img, "full")[0]["full_psnr"]  # noqa: E731
    rows = {"float (head float16)": score(base), "no refit": score(round_tables_8bit(copy.deepcopy(base)))}
    for q, shipped in ((float(v), grid_refit.CLIP_QUANTILE) for v in a.quantiles.split(",")):
        grid_refit.CLIP_QUANTILE, m = q, round_tables_8bit(copy.deepcopy(base))
        grid_refit.finish_native(m, coords, targets, img.shape[1], img.shape[0], 8)
        grid_refit.CLIP_QUANTILE, rows[f"refit, quantile {q:g}"] = shipped, score(m)
    write_json(a.name, {"machine": machine(), "image": a.image, "rows": rows}, a.out_dir)
    return rows


def native_steps(argv: list[str] | None = None) -> dict:
    """PSNR over all pixels by step (after 1, every --every, at the end) of a grid fit with the options after `--`."""
    import torch

    from training.fit_image import predict, train
    from training.images import pixel_centres
    from training.metrics import psnr

    a = fits.parse("native_steps", argv, OPTIONS, "native")[1]
    (cfg, img), curve, t = grid_fit(a, "--steps", str(a.steps), "--encoding", "grid", *a.extra), [], time.perf_counter()
    coords = pixel_centres(*img.shape[:2]).reshape(-1, 2)

    def probe(step: int, loss: float, m) -> None:
        curve.append((step + 1, psnr(predict(m, coords, torch.device("cpu")), img.reshape(-1, 3), 3)))

    history = train(cfg, img, on_step=probe, every=a.every)[1]
    result = {"machine": machine(), "argv": " ".join(["--image", a.image, *a.extra]), "curve": curve}
    result.update(init_seconds=history["init_seconds"], wall_seconds=round(time.perf_counter() - t, 1))
    write_json(a.name, result, a.out_dir)
    return result


def plot_runs(argv: list[str] | None = None) -> str:
    """Runs of native_fit, named NAME_rN for round N: every round's curve; per run and preset, the medians."""
    a, groups = fits.parse("plot", argv, OPTIONS, "native")[1], {}
    for f, result in ((f, json.loads(Path(f).read_text())) for f in a.results):
        for r in result["rows"]:
            groups.setdefault((re.sub(r"_r\d+$", "", Path(f).stem), r["preset"], result["budget_s"]), []).append(r)
    fit = lambda r: r.get("fit_seconds", r["train_seconds"])  # noqa: E731 - older results: training alone
    curves, table = {}, []
    for (run, preset, _), i, r in ((k, i, r) for k, rs in groups.items() for i, r in enumerate(rs)):
        pts = [(t, db) for _, t, db in r["curve"]] + [(fit(r), r["full_psnr"])]
        curves[f"{run} {preset} #{i + 1}"] = tuple(zip(*pts))
    title = "Real photos at native resolution"
    fits.plot(a.out, curves, title, "fitting time, s (the probes excluded)", "PSNR over all pixels, dB", hline=38)
    for (run, preset, budget), rs in sorted(groups.items()):
        med = lambda f: median([f(r) for r in rs])  # noqa: E731
        held = [r["test_psnr"] for r in rs if r.get("test_psnr") is not None]
        table.append([run, f"{rs[0]['width']}×{rs[0]['height']}", preset, f"{budget:.0f}", len(rs), f"{med(fit):.1f}"])
        runs = ", ".join(f"{r['full_psnr']:.2f}" for r in rs)
        table[-1] += [f"{med(lambda r: r['steps']):.0f}", f"**{med(lambda r: r['full_psnr']):.2f}** ({runs})"]
        table[-1] += [f"{median(held):.2f}" if held else "–", f"{med(lambda r: r['bytes_per_pixel']):.3f}"]
        table[-1] += [" / ".join(f"{x['psnr']:.2f}" if x.get("psnr") else "–" for x in rs[0]["codecs"])]
    head = ["run", "W×H", "preset", "budget s", "rounds", "fit s", "steps", "PSNR all px (median)", "held-out", "B/px"]
    print(text := "\n".join(fits.md([*head, "JPEG / WebP same bytes"], "lllrrrrrrrr", table)))  # noqa: T201 - the result
    return text


SCENARIOS = {f.__name__: f for f in (native_fit, native_ceiling, native_refit, native_steps)} | {"plot": plot_runs}
main = lambda argv=None: fits.main(argv, SCENARIOS, "native")  # noqa: E731 - python -m bench.native SCENARIO …


if __name__ == "__main__":
    c.setup_logging()
    main()
