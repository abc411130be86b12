"""The "not a digit" threshold against what it costs, on validation data only (docs/benchmarks.md, digits_official).

For each share of the validation digits the threshold may reject (the detector's `--max-false-rejection`), the
threshold it gives and, on the classifier's validation slice, the classify accuracy when a rejected digit counts
as wrong (what v1 classify answers), and the share rejected of the last 10,000 Fashion-MNIST training items and of
the validation seeds' pages, letters and strokes. The test splits are never read.

    python -m bench.digits_threshold --data-dir ../shared/data/mnist --items-dir /usr/share/datasets/fashion-mnist \\
        --detector build/digits-detector.pt --checkpoint build/digits-s0.pt build/digits-s1.pt
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from .common import log, machine, set_threads, setup_logging, write_json

SHARES = (0.001, 0.002, 0.003, 0.004, 0.005)


def sweep(data, items, detector_path: Path, checkpoints: list[Path], shares=SHARES, generated: int = 1000) -> list:
    import torch

    from training.digits.checkpoints import LogitMean, load_checkpoint
    from training.digits.fit import predict_logits, to_tensor
    from training.digits.outliers import synthetic
    from training.digits.reject import SEEDS, load_detector, scores
    from training.digits.validation import stratified_split
    from training.fp16 import round_weights_fp16

    loaded = [load_checkpoint(p) for p in checkpoints]
    cfg = loaded[0][1]
    _, val, _ = stratified_split(data.train, cfg.val_fraction, cfg.val_seed)
    model = loaded[0][0] if len(loaded) == 1 else LogitMean([m for m, _, _ in loaded]).eval()
    right = predict_logits(round_weights_fp16(model), to_tensor(val.images), torch.device("cpu")).argmax(1).numpy()
    right = right == val.labels
    detector, info = load_detector(detector_path)
    digit = scores(round_weights_fp16(detector), val.images)
    held = info["config"].get("items_held_out", 10_000)
    others = {"items": items.train.images[-held:], **synthetic(generated, SEEDS["val"])}
    other_scores = {k: scores(detector, v) for k, v in others.items()}
    rows = []
    for share in shares:
        t = float(np.sort(digit)[int(share * len(digit))])
        row = {
            "max_false_rejection": share,
            "threshold": round(t, 6),
            "digits_rejected": round(float((digit < t).mean()), 5),
            "classify_accuracy": round(float((right & (digit >= t)).mean()), 5),
            **{f"{k}_rejected": round(float((s < t).mean()), 5) for k, s in other_scores.items()},
        }
        rows.append(row)
        log.info("%s", row)
    return [{"val_accuracy": round(float(right.mean()), 5), "val_size": len(right)}, *rows]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--items-dir", required=True)
    ap.add_argument("--detector", type=Path, required=True)
    ap.add_argument("--checkpoint", type=Path, nargs="+", required=True)
    ap.add_argument("--generated", type=int, default=1000)
    ap.add_argument("--name", default="digits_threshold")
    ap.add_argument("--out-dir", type=Path, default=None)
    a = ap.parse_args(argv)
    setup_logging()
    set_threads(1)
    from training.digits.idx import load_dataset

    data, items = load_dataset(a.data_dir), load_dataset(a.items_dir, "fashion-mnist")
    head, *rows = sweep(data, items, a.detector, a.checkpoint, generated=a.generated)
    result = {"machine": machine(), "detector": str(a.detector), **head, "rows": rows}
    write_json(a.name, result, a.out_dir)
    return result


if __name__ == "__main__":
    main()
