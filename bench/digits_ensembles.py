"""Score candidate digit models on the validation slice only (docs/benchmarks.md, digits).

A candidate is one `fit-digits --checkpoint` / `bench.digits_ablation --checkpoints` file or the
logit mean of several (what `export-digits` would ship). Every checkpoint of a candidate must
hold the same validation slice (its indices hash); the slice is rebuilt from the training digits
and scored, accuracy and NLL. The test split is never read here.

    python -m bench.digits_ensembles --data-dir /work/shared/data/mnist-10k --name digits_ensembles \\
        --candidate "s0=ckpt/a.pt" --candidate "mean3=ckpt/a.pt,ckpt/b.pt,ckpt/c.pt"
"""

from __future__ import annotations

from pathlib import Path

from .common import log, machine, write_json
from .digits_ablation import digits_parser, load_digits


def score(paths: list[Path], train_split, fp16_weights: bool = False) -> dict:
    """Validation accuracy and NLL of one checkpoint or the logit mean of several (`fp16_weights`: with
    the weights rounded to float16, as `export-digits --fp16-weights` stores them)."""
    from training.digits.checkpoints import LogitMean, load_checkpoint
    from training.digits.fit import evaluate
    from training.digits.validation import stratified_split

    loaded = [load_checkpoint(p) for p in paths]
    hashes = {info["validation"]["indices_sha256"] for _, _, info in loaded}
    if len(hashes) != 1:
        raise SystemExit(f"error: the checkpoints {', '.join(map(str, paths))} hold different validation slices")
    cfg = loaded[0][1]
    _, val, val_info = stratified_split(train_split, cfg.val_fraction, cfg.val_seed)
    if val_info["indices_sha256"] not in hashes:
        raise SystemExit(f"error: '{paths[0]}' was trained on other data than --data-dir (validation slice differs)")
    models = [m for m, _, _ in loaded]
    model = models[0] if len(models) == 1 else LogitMean(models).eval()
    if fp16_weights:
        from training.fp16 import round_weights_fp16

        round_weights_fp16(model)
    got = evaluate(model, val)
    return {
        "checkpoints": [str(p) for p in paths],
        "members": len(models),
        "val_seed": cfg.val_seed,
        "val_size": val_info["size"],
        "fp16_weights": fp16_weights,
        "val_accuracy": got["test_accuracy"],
        "val_loss": got["test_loss"],
    }


def main(argv: list[str] | None = None) -> dict:
    ap = digits_parser(__doc__, "digits_ensembles")
    ap.add_argument("--candidate", action="append", required=True, help="NAME=ckpt[,ckpt...]")
    ap.add_argument("--fp16-weights", action="store_true", help="score the models with float16-rounded weights")
    a = ap.parse_args(argv)
    data = load_digits(a)
    result = {"machine": machine(), "data_dir": a.data_dir, "candidates": []}
    for spec in a.candidate:
        name, _, files = spec.partition("=")
        row = {"name": name, **score([Path(f) for f in files.split(",") if f], data.train, a.fp16_weights)}
        result["candidates"].append(row)
        log.info("%s: val %.4f, NLL %.4f (%d members)", name, row["val_accuracy"], row["val_loss"], row["members"])
    write_json(a.name, result)
    return result


if __name__ == "__main__":
    main()
