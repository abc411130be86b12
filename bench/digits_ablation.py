"""The digit-recipe ablation, scored on the validation slice only (docs/benchmarks.md, digits).

Each row is a set of `fit-digits` options; the row trains on the training digits minus the
stratified validation slice, and its per-epoch validation accuracy is recorded. The test
split is never read here. Each row's checkpoint is saved (--checkpoints) so the chosen one can
be exported later without retraining.

    python -m bench.digits_ablation --data-dir /work/shared/data/mnist-10k --name digits_ablation \\
        --row "base=--hidden 128 --epochs 25 --augment" --row "elastic=--hidden 128 --epochs 25 --augment --elastic"
"""

from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path

from .common import log, machine, set_threads, setup_logging, write_json


def row_config(options: str):
    """The training.digits FitConfig that `fit-digits OPTIONS` would train."""
    from training.cli import OneLineParser
    from training.digits.cli import add_training_options, fit_config

    p = OneLineParser(prog="fit-digits")
    add_training_options(p)
    p.add_argument("--model", default="sinekan")
    p.add_argument("--hidden", type=int, nargs="+", default=[64])
    p.add_argument("--augment", action="store_true")
    p.add_argument("--elastic", action="store_true")
    a = p.parse_args(shlex.split(options) + ["--no-progress"])
    return fit_config(a, a.model, a.hidden, augment=a.augment, elastic=a.elastic)


def digits_parser(doc: str, name: str) -> argparse.ArgumentParser:
    """The options every digits bench takes: --data-dir, --name (of the result file), --threads."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--name", default=name)
    ap.add_argument("--threads", type=int, default=1)
    return ap


def load_digits(a: argparse.Namespace):
    """Logging and threads set up, the IDX data of --data-dir loaded."""
    setup_logging()
    set_threads(a.threads)
    from training.digits.idx import load_dataset

    return load_dataset(a.data_dir)


def main(argv: list[str] | None = None) -> dict:
    ap = digits_parser(__doc__, "digits_ablation")
    ap.add_argument("--row", action="append", required=True, help="NAME=fit-digits options")
    ap.add_argument("--checkpoints", default=None, help="directory for NAME.pt checkpoints")
    a = ap.parse_args(argv)
    data = load_digits(a)
    from training.digits.checkpoints import save_checkpoint
    from training.digits.fit import train

    result = {"machine": machine(), "data_dir": a.data_dir, "rows": []}
    for spec in a.row:
        name, options = spec.split("=", 1)
        cfg = row_config(options)
        t0 = time.perf_counter()
        model, info = train(cfg, data)
        hist = info["history"]
        row = {
            "name": name,
            "options": options,
            "val_accuracy": hist[-1]["val_accuracy"],
            "val_loss": hist[-1].get("val_loss"),
            "best_val_accuracy": max(h["val_accuracy"] for h in hist),
            "best_epoch": max(hist, key=lambda h: h["val_accuracy"])["epoch"],
            "seconds": round(time.perf_counter() - t0, 1),
            "seconds_per_epoch": info["seconds_per_epoch"],
            "validation": info["validation"],
            "history": hist,
        }
        if a.checkpoints:
            save_checkpoint(model, cfg, info, Path(a.checkpoints) / f"{name}.pt")
        result["rows"].append(row)
        log.info(
            "%s: val %.4f (best %.4f at epoch %d), %.0f s",
            name,
            row["val_accuracy"],
            row["best_val_accuracy"],
            row["best_epoch"],
            row["seconds"],
        )
        write_json(a.name, result)
    return result


if __name__ == "__main__":
    main()
