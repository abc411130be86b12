"""Subcommands for digit classifiers: fit-digits and compare-digits."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from commandline import positive_float, positive_int

from ..errors import UsageError
from ..repository import check_out_dir
from .augment import AUG_PROB, ELASTIC_ALPHA_PX, ELASTIC_SIGMA_PX
from .idx import SOURCES, load_dataset
from .models import MODELS, DigitModelConfig


def add_data_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data-dir",
        required=True,
        help="directory with train-/t10k- images-idx3-ubyte / labels-idx1-ubyte files, .gz or raw",
    )
    p.add_argument(
        "--dataset",
        default="mnist",
        choices=sorted(SOURCES),
        help="which dataset the files hold (names the classes; picks --download mirrors)",
    )
    p.add_argument(
        "--download",
        action="store_true",
        help="fetch missing files from the public mirrors into --data-dir (MD5-checked)",
    )


def add_training_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--grid",
        type=positive_int,
        default=None,
        help="grid size G (default: sinekan 8, bspline-kan 5, fourier-kan 5; unused by mlp)",
    )
    p.add_argument("--epochs", type=positive_int, default=10)
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--lr", type=positive_float, default=1e-3, help="AdamW learning rate")
    p.add_argument("--weight-decay", type=float, default=1e-4, help="AdamW weight decay")
    p.add_argument("--gamma", type=positive_float, default=0.9, help="exponential schedule: LR multiplier per epoch")
    p.add_argument(
        "--schedule",
        default="exponential",
        help="learning rate: exponential (x gamma per epoch), cosine or onecycle (per batch)",
    )
    p.add_argument("--label-smoothing", type=float, default=0.0, help="cross-entropy label smoothing in [0, 1)")
    p.add_argument(
        "--distort-share",
        type=float,
        default=AUG_PROB,
        help="share of each batch that --augment / --elastic resample, in (0, 1]",
    )
    p.add_argument(
        "--elastic-alpha",
        type=float,
        default=ELASTIC_ALPHA_PX,
        help="elastic distortion: displacement scale α in px (Simard et al.: 34)",
    )
    p.add_argument(
        "--elastic-sigma",
        type=float,
        default=ELASTIC_SIGMA_PX,
        help="elastic distortion: smoothing σ of the field in px (Simard et al.: 4)",
    )
    p.add_argument(
        "--ema",
        type=float,
        default=0.0,
        help="keep an exponential moving average of the weights with this decay (0 = off)",
    )
    p.add_argument(
        "--val-fraction",
        type=float,
        default=0.1,
        help="stratified share of the training digits held out for validation, in (0, 1)",
    )
    p.add_argument("--val-seed", type=int, default=0, help="seed of the validation slice")
    p.add_argument(
        "--refit",
        action="store_true",
        help="train on the validation slice too: the final fit of a recipe already chosen on it "
        "(the model then has no validation score of its own)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def fit_config(args: argparse.Namespace, model: str, hidden: list[int], augment: bool = False, elastic: bool = False):
    from .fit import FitConfig

    cfg = FitConfig(
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        gamma=args.gamma,
        augment=augment,
        elastic=elastic,
        distort_share=args.distort_share,
        elastic_alpha=args.elastic_alpha,
        elastic_sigma=args.elastic_sigma,
        schedule=args.schedule,
        label_smoothing=args.label_smoothing,
        ema=args.ema,
        val_fraction=args.val_fraction,
        val_seed=args.val_seed,
        refit=args.refit,
        seed=args.seed,
        device=args.device,
        progress=not args.no_progress,
        model=DigitModelConfig(model=model, hidden=hidden, grid_size=args.grid or 0),
    )
    cfg.validate()
    return cfg


def cmd_fit_digits(args: argparse.Namespace) -> int:
    from .export import fit_digits

    out = check_out_dir(args.out) if args.out else None
    cfg = fit_config(args, args.model, args.hidden, augment=args.augment, elastic=args.elastic)
    data = load_dataset(args.data_dir, args.dataset, download=args.download)
    result = fit_digits(cfg, data, out, checkpoint_path=Path(args.checkpoint) if args.checkpoint else None)
    metrics = {k: v for k, v in result["metrics"].items() if k != "confusion_matrix"}
    sys.stdout.write(f"{json.dumps(metrics)}{f' -> {out}' if out else ''}\n")
    return 0


def cmd_export_digits(args: argparse.Namespace) -> int:
    from .checkpoints import export_checkpoint

    out = check_out_dir(args.out)
    data = load_dataset(args.data_dir, args.dataset, download=args.download)
    items = load_dataset(args.outliers_dir, "fashion-mnist") if args.outliers_dir else None
    result = export_checkpoint(
        [Path(c) for c in args.checkpoint],
        data,
        out,
        fp16_weights=args.fp16_weights,
        chosen_with=[Path(c) for c in args.chosen_with or []],
        calibrated=args.calibrate,
        detector=Path(args.detector) if args.detector else None,
        items=items,
    )
    metrics = {k: v for k, v in result["metrics"].items() if k not in ("confusion_matrix", "members", "chosen_with")}
    sys.stdout.write(f"{json.dumps(metrics)} -> {out}\n")
    return 0


def parse_list(text: str, option: str, cast=int, valid=None) -> list:
    items = [s.strip() for s in text.split(",") if s.strip()]
    try:
        values = [cast(s) for s in items]
    except ValueError:
        raise UsageError(f"{option} must be a comma-separated list, got '{text}'") from None
    if not values:
        raise UsageError(f"{option} must not be empty")
    if valid is not None:
        bad = [v for v in values if v not in valid]
        if bad:
            raise UsageError(f"{option}: unknown model '{bad[0]}'; valid: {', '.join(sorted(valid))}")
    elif any(v < 1 for v in values):
        raise UsageError(f"{option} must hold positive integers, got '{text}'")
    return values


def cmd_compare_digits(args: argparse.Namespace) -> int:
    from .compare import CompareConfig, run_compare, write_results

    models = parse_list(args.models, "--models", str, valid=MODELS)
    widths = parse_list(args.hidden, "--hidden")
    depths = parse_list(args.depths, "--depths")
    template = fit_config(args, models[0], [widths[0]])
    cfg = CompareConfig(
        models=models,
        widths=widths,
        depths=depths,
        fit=template,
        grid=args.grid or 0,
        threads=args.threads,
        train_limit=args.train_limit,
        timing_seconds=args.timing_seconds,
    )
    data = load_dataset(args.data_dir, args.dataset, download=args.download)
    rows = run_compare(cfg, data)
    write_results(rows, cfg, data, Path(args.table), Path(args.plots))
    return 0


def cmd_fit_detector(args: argparse.Namespace) -> int:
    from .reject import DetectorConfig, save_detector, train_detector

    names = ("epochs", "seed", "generated", "max_false_rejection", "items_held_out")
    cfg = DetectorConfig(**{k: getattr(args, k) for k in names})
    if not 0.0 <= cfg.max_false_rejection < 0.5:
        raise UsageError(f"--max-false-rejection must be in [0, 0.5), got {cfg.max_false_rejection}")
    data = load_dataset(args.data_dir, args.dataset, download=args.download)
    items = load_dataset(args.outliers_dir, "fashion-mnist")
    out = Path(args.checkpoint)
    model, info = train_detector(data, items, cfg)
    save_detector(model, info, out)
    sys.stdout.write(f"{json.dumps({'threshold': info['threshold'], **info['validation']['rates']})} -> {out}\n")
    return 0


def register(sub) -> None:
    p = sub.add_parser("fit-digits", help="train a digit classifier on IDX data and export it")
    add_data_options(p)
    p.add_argument("--model", default="sinekan", help=f"one of: {', '.join(sorted(MODELS))} (default sinekan)")
    p.add_argument("--hidden", type=positive_int, nargs="+", default=[64], help="hidden-layer widths, e.g. 128 64")
    add_training_options(p)
    p.add_argument("--augment", action="store_true", help="small random affine transforms while training")
    p.add_argument(
        "--elastic",
        action="store_true",
        help="elastic distortions (Simard et al. 2003) while training, composed with --augment",
    )
    p.add_argument("--out", help="model directory to write, e.g. models/digits")
    p.add_argument("--checkpoint", help="also save the trained model as a torch checkpoint here (for export-digits)")
    p.set_defaults(func=cmd_fit_digits)

    p = sub.add_parser("export-digits", help="export a fit-digits checkpoint to a model directory")
    add_data_options(p)
    p.add_argument(
        "--checkpoint",
        required=True,
        nargs="+",
        help="file(s) written by fit-digits --checkpoint; several: export the mean of their logits",
    )
    p.add_argument("--out", required=True, help="model directory to write, e.g. models/digits")
    p.add_argument(
        "--fp16-weights",
        action="store_true",
        help="round the weights to float16 before scoring and store them so (half the file; "
        "onnxruntime still computes in float32)",
    )
    p.add_argument(
        "--chosen-with",
        nargs="+",
        default=None,
        help="for --refit checkpoints: the held-out checkpoints of the same recipe it was chosen with "
        "(their validation accuracy goes into the metadata)",
    )
    p.add_argument("--calibrate", action="store_true", help="fit a temperature on the validation slice (logits / T)")
    p.add_argument("--detector", help="a fit-digit-detector checkpoint: ship its is_digit output and threshold")
    p.add_argument("--outliers-dir", help="with --detector: the IDX files of the images it was trained to reject")
    p.set_defaults(func=cmd_export_digits)

    p = sub.add_parser("fit-digit-detector", help="train the 'not a digit' detector and choose its threshold")
    add_data_options(p)
    p.add_argument("--outliers-dir", required=True, help="IDX files of images that are not digits (Fashion-MNIST)")
    p.add_argument("--checkpoint", required=True, help="where to save the detector (for export-digits --detector)")
    p.add_argument("--epochs", type=positive_int, default=2)
    p.add_argument("--generated", type=positive_int, default=4000, help="generated pages of each kind and letters")
    p.add_argument("--items-held-out", type=positive_int, default=10_000, help="last N outliers: for the threshold")
    p.add_argument("--max-false-rejection", type=float, default=0.005, help="of the validation digits, at most")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_fit_detector)

    p = sub.add_parser("compare-digits", help="all models × widths × depths on the same data and budget")
    add_data_options(p)
    p.add_argument("--models", default="sinekan,mlp,bspline-kan,fourier-kan", help="comma-separated model names")
    p.add_argument("--hidden", default="16,32,64,128,256", help="comma-separated hidden widths")
    p.add_argument("--depths", default="1,2,3", help="comma-separated numbers of hidden layers")
    add_training_options(p)
    p.add_argument(
        "--train-limit",
        type=positive_int,
        default=None,
        help="train on the first N training images only (the test split stays whole)",
    )
    p.add_argument("--threads", type=positive_int, default=1, help="CPU threads for the inference timings")
    p.add_argument(
        "--timing-seconds",
        type=positive_float,
        default=0.3,
        help="repeat each inference timing for at least this long (median of the calls)",
    )
    p.add_argument("--table", default="docs/digits-compare.md", help="markdown table to write")
    p.add_argument("--plots", default="docs/img/digits-compare", help="writes PLOTS-accuracy.png, PLOTS-speed.png")
    p.set_defaults(func=cmd_compare_digits, epochs=3)
