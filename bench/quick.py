"""`make bench`: small versions of the benchmarks, in a few minutes on 2 CPU cores.

Results go to bench/results/quick/ (the committed full and scaled results in bench/results/
and the plots in docs/img/ are left alone). The full commands are in docs/benchmarks.md.

    python -m bench.quick                  # a few minutes
    python -m bench.quick --preset smoke   # seconds: what tests/bench runs
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import time

from .common import RESULTS, log, setup_logging

PRESETS = {
    "quick": {
        "fourier_table": [
            "--size",
            "48",
            "--steps",
            "150",
            "--photos",
            "astronaut,camera",
            "--texts",
            "text",
            "--sigmas",
            "2,5",
            "--threads",
            "1",
        ],
        "time_to_quality": [
            "--size",
            "48",
            "--rounds",
            "2",
            "--target",
            "30",
            "--threads",
            "1",
            "--variants",
            "paper,lr 5e-3 cosine 500,minibatch ¼ lr 5e-3 cosine 500",
        ],
        "roofline": ["roofline", "--batches", "4096", "--threads", "1", "--render-size", "256", "--repeats", "3"],
        "sinekan_speed": ["--hidden", "64;128,128", "--batches", "1,256", "--repeats", "3"],
        "classic": ["classic", "--preset", "quick"],
    },
    "smoke": {
        "fourier_table": [
            "--size",
            "16",
            "--steps",
            "4",
            "--photos",
            "astronaut",
            "--texts",
            "text",
            "--sigmas",
            "2,5",
            "--threads",
            "1",
        ],
        "time_to_quality": [
            "--size",
            "16",
            "--rounds",
            "2",
            "--target",
            "12",
            "--every",
            "2",
            "--threads",
            "1",
            "--max-steps",
            "20",
            "--variants",
            "paper,lr 5e-3 cosine 500",
        ],
        "roofline": ["roofline", "--batches", "256", "--threads", "1", "--render-size", "32", "--repeats", "1"],
        "sinekan_speed": ["--hidden", "8", "--batches", "1,8", "--repeats", "1"],
        "classic": ["classic", "--preset", "smoke"],
    },
}
# name -> (module, function): the function takes the harness's argv and returns its result, imported when run
BENCHES = {
    "fourier_table": ("bench.fits", "fourier_table"),
    "time_to_quality": ("bench.fits", "time_to_quality"),
    "roofline": ("bench.kernels", "main"),
    "sinekan_speed": ("bench.fits", "sinekan_speed"),
    "classic": ("bench.tiles", "main"),
}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.quick", description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="quick", choices=sorted(PRESETS))
    p.add_argument("--only", default=",".join(BENCHES), help="comma-separated benchmarks to run")
    p.add_argument("--out-dir", default=str(RESULTS / "quick"))
    a = p.parse_args(argv)
    results = {}
    for name in a.only.split(","):
        if name not in BENCHES:
            p.error(f"unknown benchmark '{name}'; valid: {', '.join(BENCHES)}")
        if name == "sinekan_speed" and importlib.util.find_spec("training.digits") is None:
            log.warning("skipping sinekan_speed: training.digits is not in this checkout")
            continue
        t0 = time.perf_counter()
        extra = ["--out-dir", a.out_dir, "--name", name]
        if name not in ("roofline", "classic"):
            extra += ["--plot", ""]
        module, function = BENCHES[name]
        results[name] = getattr(importlib.import_module(module), function)(PRESETS[a.preset][name] + extra)
        log.info("%s: %.0f s", name, time.perf_counter() - t0)
    return results


if __name__ == "__main__":
    setup_logging()
    main()
