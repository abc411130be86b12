"""The fit presets: sets of `fit-image` options a job names (docs/fits.md)."""

from __future__ import annotations

# Sets of `fit-image` options; the worker parses them with fit-image's own parser. `size`: the default cap
# on the longer side (None: the whole upload at its native size); a job's own `size` replaces it.
PRESETS: dict[str, dict] = {
    "grid": {
        "argv": [
            "--encoding",
            "grid",
            "--depth",
            "2",
            "--width",
            "32",
            "--lr",
            "2e-3",
            "--batch-size",
            "65536",
            "--grid-table-bits",
            "8",
            "--grid-finest-features",
            "1",
            "--fp16-weights",
        ],
        "steps": 280,
        "size": None,
        "targets": True,  # takes target_bytes, target_psnr (grid_rate.py) or rd_lambda (grid_rd.py)
        "doc": "a multiresolution grid (instant-ngp: 8 dense levels of 8-bit tables within 1.45 bytes per pixel, "
        "the finest the luma on the native pixels, 7 coarser ones of 2 features) under a 15→32→3 MLP, "
        "started from the image's pyramid, at the upload's native size (docs/benchmarks.md, native_fit)",
    },
    "fourier": {
        "argv": [],
        "steps": 500,
        "size": 256,
        "doc": "fit-image's defaults: a 4×256 MLP on 256 Gaussian Fourier features (σ 10)",
    },
    "fourier-small": {
        "argv": ["--depth", "3", "--width", "64", "--features", "64"],
        "steps": 300,
        "size": 256,
        "doc": "a 3×64 MLP on 64 Gaussian Fourier features: a quick look",
    },
    "sinekan": {
        "argv": ["--model", "sinekan"],
        "steps": 500,
        "size": 256,
        "doc": "fit-image --model sinekan's defaults (docs/benchmarks.md, fourier_table)",
    },
}
DEFAULT_PRESET = "grid"
# a byte target's range (fit-image --target-bytes, POST /v1/fits target_bytes): a model file has a head and a graph
TARGET_BYTES = (1024, 1 << 40)
TARGET_PSNR = 100.0  # dB, the most a PSNR target may ask (training.metrics.PSNR_CAP_DB)
# the quality as a rate–distortion trade-off (fit-image --grid-rd-lambda, POST /v1/fits rd_lambda; grid_rd.py)
RD_LAMBDA = (1e-7, 1.0)
