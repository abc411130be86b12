"""A recipe choice for the native fits (docs/benchmarks.md, native_steps): PSNR over all pixels by *step* (not time)
on a validation photo.

Choosing a learning rate or a batch on a loaded machine cannot use time; steps and samples can. Every
`--every` steps (the first after one step) the model is rendered at every pixel centre and scored (protocol
full).

    python -m bench.native_steps --image val.png --steps 150 --every 50 -- --depth 2 --width 32 --lr 1e-3
"""

from __future__ import annotations

import argparse
import time

import torch

from training.fit_image import predict, train
from training.images import load_image, pixel_centres
from training.metrics import psnr

from .common import fit_image_config, log, machine, set_threads, setup_logging, write_json


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.native_steps", description=__doc__.splitlines()[0])
    p.add_argument("--image", required=True)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--name", default="native_steps")
    a, extra = p.parse_known_args(argv)
    setup_logging()
    set_threads(a.threads)
    argv = [
        "--image",
        a.image,
        "--protocol",
        "full",
        "--no-progress",
        "--steps",
        str(a.steps),
        "--encoding",
        "grid",
        *[x for x in extra if x != "--"],
    ]
    cfg = fit_image_config(argv)
    img, _ = load_image(cfg.image, cfg.size, cfg.crop, cfg.max_pixels)
    coords = pixel_centres(*img.shape[:2]).reshape(-1, 2)
    curve: list[tuple[int, float]] = []

    def on_step(step: int, loss: float, model: torch.nn.Module) -> bool:
        full = predict(model, coords, torch.device("cpu"))
        model.train()
        curve.append((step + 1, psnr(full, img.reshape(-1, 3), 3)))
        log.info("step %d: %.2f dB over all pixels", *curve[-1])
        return False

    t = time.perf_counter()
    _, history = train(cfg, img, on_step=on_step, every=a.every)
    result = {
        "machine": machine(),
        "argv": " ".join(argv),
        "curve": curve,
        "init_seconds": history["init_seconds"],
        "wall_seconds": round(time.perf_counter() - t, 1),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    write_json(a.name, result)
    return result


if __name__ == "__main__":
    main()
