"""The native level's rounding range, chosen on a validation photo (docs/benchmarks.md, native_refit). One fit with
the grid preset, then the finish repeated from the same weights: no refit (every table rounded over its min … max),
and the refit with the native level rounded over its quantiles q … 1 − q for each --quantiles value (0: min … max).

    python -m bench.native_refit --image val.png          # bench/results/native_refit.json
"""

from __future__ import annotations

import argparse
import copy
import time

from fitstore import PRESETS
from training.encodings import grid_refit
from training.encodings.grid_quant import round_tables_8bit
from training.fit_image import checkpoint, evaluate, rebuild, split_pixels, train
from training.fp16 import round_weights_fp16
from training.images import load_image

from .common import fit_image_config, log, machine, set_threads, setup_logging, write_json


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image", required=True)
    p.add_argument("--quantiles", default="0,1e-6,1e-5,1e-4,1e-3")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--name", default="native_refit")
    a = p.parse_args(argv)
    setup_logging()
    set_threads(a.threads)
    preset = PRESETS["grid"]
    cfg = fit_image_config(
        ["--image", a.image, "--protocol", "full", "--no-progress", "--steps", str(preset["steps"]), *preset["argv"]]
    )
    img, _ = load_image(cfg.image, cfg.size, cfg.crop, cfg.max_pixels)
    h, w = img.shape[:2]
    model, _ = train(cfg, img)
    base = round_weights_fp16(rebuild(checkpoint(model, cfg)))
    coords, targets, _, _ = split_pixels(img, cfg.protocol)

    def score(m) -> float:
        return evaluate(m, img, cfg.protocol)[0]["full_psnr"]

    rows = {"float (head float16)": score(base), "no refit": score(round_tables_8bit(copy.deepcopy(base)))}
    for q in (float(v) for v in a.quantiles.split(",")):
        m = round_tables_8bit(copy.deepcopy(base))
        grid_refit.CLIP_QUANTILE, shipped = q, grid_refit.CLIP_QUANTILE
        t0 = time.perf_counter()
        grid_refit.finish_native(m, coords, targets, w, h, 8)
        grid_refit.CLIP_QUANTILE = shipped
        rows[f"refit, quantile {q:g}"] = score(m)
        log.info("quantile %g: %.3f dB (finish %.1f s)", q, rows[f"refit, quantile {q:g}"], time.perf_counter() - t0)
    write_json(a.name, {"machine": machine(), "image": a.image, "rows": rows})
    return rows


if __name__ == "__main__":
    main()
