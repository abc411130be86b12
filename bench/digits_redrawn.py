"""The shipped digit model on re-drawn test digits, through the real service (docs/benchmarks.md,
digits).

Every t10k digit is drawn as dark ink on a light page (random page size, digit size and place,
slightly uneven paper), saved as a PNG and uploaded to a running `python -m service` on a free
port, POST /v1/models/NAME/classify, 32 files per request. The raw accuracy is the model's on the
28×28 IDX digits under onnxruntime, for comparison.

    python -m bench.digits_redrawn --data-dir /work/shared/data/mnist-10k --models models
"""

from __future__ import annotations

import argparse
import io

import numpy as np

from .common import ROOT, log, machine, ort_session, setup_logging, write_json
from .serving import Server

BATCH = 32


def redraw(digit: np.ndarray, rng: np.random.Generator):
    """uint8 [28, 28] white-on-black → a PIL page, dark ink on light paper."""
    from PIL import Image

    page_w, page_h = int(rng.integers(120, 400)), int(rng.integers(120, 400))
    size = int(rng.integers(40, min(page_w, page_h) + 1))
    ink = Image.fromarray(digit).resize((size, size), Image.BICUBIC)
    paper = rng.uniform(200, 255)
    page = np.full((page_h, page_w), paper, np.float32) + rng.normal(0, 4, (page_h, page_w))
    x, y = int(rng.integers(0, page_w - size + 1)), int(rng.integers(0, page_h - size + 1))
    darkness = rng.uniform(0.75, 1.0)
    patch = page[y : y + size, x : x + size]
    page[y : y + size, x : x + size] = patch * (1 - darkness * np.asarray(ink, np.float32) / 255.0)
    return Image.fromarray(np.clip(page, 0, 255).astype(np.uint8))


def png(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def main(argv: list[str] | None = None) -> dict:
    import httpx

    from training.digits.idx import load_dataset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--models", default=str(ROOT / "models"))
    ap.add_argument("--model", default="digits")
    ap.add_argument("--limit", type=int, default=0, help="first N test digits only (0 = all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="digits_redrawn")
    a = ap.parse_args(argv)
    test = load_dataset(a.data_dir).test
    images, labels = (test.images[: a.limit], test.labels[: a.limit]) if a.limit else (test.images, test.labels)
    sess = ort_session(f"{a.models}/{a.model}/1/model.onnx", threads=1)
    raw = sess.run(["probabilities"], {"images": images[:, None].astype(np.float32) / 255.0})[0].argmax(1)
    rng = np.random.default_rng(a.seed)
    server = Server(a.models, "inr", {}).wait()
    url = server.url
    preds = []
    try:
        meta = httpx.get(f"{url}/v1/models/{a.model}", timeout=10).json()
        for i in range(0, len(images), BATCH):
            files = [
                ("files", (f"d{i + j}.png", png(redraw(im, rng)), "image/png"))
                for j, im in enumerate(images[i : i + BATCH])
            ]
            r = httpx.post(f"{url}/v1/models/{a.model}/classify", files=files, timeout=60)
            r.raise_for_status()
            preds += [p["label"] for p in r.json()["predictions"]]
    finally:
        server.stop()
    result = {
        "machine": machine(),
        "model": a.model,
        "status": meta.get("status"),
        "samples": len(labels),
        "raw_accuracy": round(float((raw == labels).mean()), 5),
        "redrawn_accuracy": round(float((np.asarray(preds) == labels).mean()), 5),
    }
    log.info("%s", result)
    write_json(a.name, result)
    return result


if __name__ == "__main__":
    setup_logging()
    main()
