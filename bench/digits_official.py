"""The shipped digit model through the real service (docs/benchmarks.md, digits_official).

Starts `python -m service` on a model repository and sends, over HTTP:

* the official MNIST test digits (10,000) through V2 infer (tritonclient, binary tensors): accuracy from the
  network's raw probabilities, expected calibration error (15 bins), the share whose is_digit is below the
  model's threshold (false rejections);
* the same digits through v1 classify (JSON pixels): accuracy counting a null label as wrong, the share
  answered null;
* what is not a digit through v1 classify: Fashion-MNIST's test split (10,000 items), blank, solid, noise and
  salt pages and letters (training.digits.outliers, the test seeds): the share answered null;
* a few of each through V2 with the classification extension: the rejected ones answer index −1 first.

    python -m bench.digits_official --data-dir ../shared/data/mnist --items-dir /usr/share/datasets/fashion-mnist
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import httpx
import numpy as np

from .common import ROOT, log, machine, setup_logging, write_json

BATCH = 256  # the digits model's max_batch_size
GENERATED = 1000  # pages of each kind and letters


def v2_outputs(url: str, model: str, x: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """The named outputs for float32 images [N, 1, 28, 28], BATCH at a time, as tritonclient reads them."""
    import tritonclient.http as triton

    client = triton.InferenceServerClient(url.removeprefix("http://"), network_timeout=120)
    parts: dict[str, list] = {n: [] for n in names}
    for i in range(0, len(x), BATCH):
        chunk = np.ascontiguousarray(x[i : i + BATCH])
        inp = triton.InferInput("images", list(chunk.shape), "FP32")
        inp.set_data_from_numpy(chunk, binary_data=True)
        res = client.infer(model, [inp], outputs=[triton.InferRequestedOutput(n, binary_data=True) for n in names])
        for n in names:
            parts[n].append(res.as_numpy(n))
    client.close()
    return {n: np.concatenate(v) for n, v in parts.items()}


def v2_classes(url: str, model: str, x: np.ndarray, k: int = 2) -> list[list[str]]:
    """The classification extension's top-k strings for the probabilities output (JSON V2)."""
    body = {
        "inputs": [{"name": "images", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}],
        "outputs": [{"name": "probabilities", "parameters": {"classification": k}}],
    }
    r = httpx.post(f"{url}/v2/models/{model}/infer", json=body, timeout=60)
    r.raise_for_status()
    return np.array(r.json()["outputs"][0]["data"], dtype=object).reshape(len(x), k).tolist()


def v1_classify(url: str, model: str, x: np.ndarray) -> list[dict]:
    preds = []
    with httpx.Client(timeout=120) as c:
        for i in range(0, len(x), BATCH):
            r = c.post(f"{url}/v1/models/{model}/classify", json={"images": x[i : i + BATCH, 0].tolist()})
            r.raise_for_status()
            preds += r.json()["predictions"]
    return preds


def images(u8: np.ndarray) -> np.ndarray:
    return (u8.astype(np.float32) / 255.0)[:, None]


def evaluate(url: str, model: str, digits, items: np.ndarray, generated: int = GENERATED) -> dict:
    """Every number of the module docstring, for `digits` (a Split) and `items` (uint8 images)."""
    from training.digits.calibrate import ece
    from training.digits.outliers import synthetic
    from training.digits.reject import SEEDS

    meta = httpx.get(f"{url}/v1/models/{model}", timeout=30).json()
    rule = (meta.get("metadata") or meta).get("rejection")
    x, y = images(digits.images), digits.labels
    names = ["probabilities"] + (["is_digit"] if rule else [])
    t0 = time.perf_counter()
    out = v2_outputs(url, model, x, names)
    v2_s = time.perf_counter() - t0
    probs = out["probabilities"]
    result = {
        "digits": len(y),
        "v2_accuracy": round(float((probs.argmax(1) == y).mean()), 5),
        "v2_seconds": round(v2_s, 2),
        "test_ece": round(ece(probs.astype(np.float64), y), 5),
        "threshold": rule["threshold"] if rule else None,
    }
    if rule:
        result["v2_false_rejections"] = round(float((out["is_digit"][:, 0] < rule["threshold"]).mean()), 5)
    preds = v1_classify(url, model, x)
    labels = np.array([-1 if p["label"] is None else p["label"] for p in preds])
    result["v1_accuracy"] = round(float((labels == y).mean()), 5)
    result["v1_null"] = round(float((labels == -1).mean()), 5)
    others = {"fashion_mnist_test": items, **synthetic(generated, SEEDS["test"])}
    for name, u8 in others.items():
        got = v1_classify(url, model, images(u8))
        result[f"{name}_null"] = round(float(np.mean([p["label"] is None for p in got])), 5)
        result[f"{name}_count"] = len(u8)
    probe = np.concatenate([x[:4], images(others["fashion_mnist_test"][:4])])
    result["classification_extension"] = v2_classes(url, model, probe)
    return result


def cpu_per_digit(onnx_path: Path, x: np.ndarray) -> dict:
    """onnxruntime on one thread, the model file alone: median µs per digit at batch 1 and 256."""
    from .common import median, ort_session, time_calls

    sess = ort_session(onnx_path.read_bytes(), 1)
    out = {}
    for b in (1, BATCH):
        xb = np.ascontiguousarray(x[:b])
        out[f"us_per_digit_b{b}"] = round(
            1e6 * median(time_calls(lambda: sess.run(None, {"images": xb}), 9, 1, 0.2)) / b, 1
        )
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="the official MNIST IDX files")
    ap.add_argument("--items-dir", required=True, help="Fashion-MNIST's IDX files")
    ap.add_argument("--models", type=Path, default=ROOT / "models", help="a repository with a digits model")
    ap.add_argument("--model", default="digits")
    ap.add_argument("--limit", type=int, default=None, help="the first N test digits and items only")
    ap.add_argument("--generated", type=int, default=GENERATED)
    ap.add_argument("--name", default="digits_official")
    ap.add_argument("--out-dir", type=Path, default=None)
    a = ap.parse_args(argv)
    setup_logging()
    from training.digits.idx import Split, load_dataset

    from .serving import Server

    data = load_dataset(a.data_dir)
    items = load_dataset(a.items_dir, "fashion-mnist").test.images[: a.limit]
    test = Split(data.test.images[: a.limit], data.test.labels[: a.limit])
    srv = Server(a.models, "digits", env={"INR_THREADS": "2"}, capture=True).wait()
    try:
        result = {"machine": machine(), "models": str(a.models), **evaluate(srv.url, a.model, test, items, a.generated)}
    finally:
        srv.stop()
    version = max((p for p in (a.models / a.model).iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    result["cpu_one_thread"] = cpu_per_digit(version / "model.onnx", images(data.test.images[:BATCH]))
    log.info("%s", {k: v for k, v in result.items() if k not in ("machine", "classification_extension")})
    write_json(a.name, result, a.out_dir)
    return result


if __name__ == "__main__":
    main()
