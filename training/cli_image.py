"""`fit-image`: its options (shared with sweep-scale and the fit worker) and the subcommand."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager

from commandline import positive_float, positive_int
from modelrepo import ContractError, portable

from .blocks import fit_blocked
from .encodings import ENCODINGS, Encoding, OptionError
from .encodings import INITS as ENCODING_INITS
from .errors import UsageError
from .fit_image import PROTOCOLS, SCHEDULES, FitConfig, fit_image
from .image_models import BODIES, MODEL_DEFAULTS, ImageModelConfig
from .images import BUILTIN, MAX_PIXELS, image_defaults, image_dims
from .regions import image_size
from .repository import check_out_dir
from .sinekan import INITS

# fit-image's defaults for the options a built-in image or a model may set otherwise (None: derived).
FIT_DEFAULTS = {
    "encoding": "gaussian",
    "scale": 10.0,
    "features": 256,
    "width": 256,
    "grid": 8,
    "first_grid": None,
    "first_freq": None,
    "hidden_freq": 1.0,
    "steps": 500,
    "lr": 5e-3,
}


def default_help(key: str, sep: str = "") -> str:
    per_model = "; ".join(f"--model {m}: {d[key]}" for m, d in MODEL_DEFAULTS.items() if key in d)
    base = FIT_DEFAULTS[key]
    return f"{sep}(default: {'derived' if base is None else base}{'; ' + per_model if per_model else ''})"


def zero_or_positive_float(text: str) -> float:
    """0 (the paper's setting) or a positive finite number."""
    try:
        if float(text) == 0:
            return 0.0
    except ValueError:
        pass
    return positive_float(text)


def add_image_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--image", default="astronaut", help=f"built-in name ({', '.join(BUILTIN)}) or an image file")
    p.add_argument(
        "--size",
        type=positive_int,
        default=None,
        help="cap on the longer side: the image is downscaled only when it is longer than SIZE "
        f"or has more than --max-pixels pixels (default: native, up to {MAX_PIXELS} pixels)",
    )
    p.add_argument(
        "--max-pixels",
        type=positive_int,
        default=MAX_PIXELS,
        help="a larger image is downscaled to this many pixels (default: %(default)s)",
    )
    p.add_argument("--crop", action="store_true", help="fit the image's centre square instead of the whole image")
    p.add_argument("--encoding", choices=sorted(ENCODINGS), help=default_help("encoding"))
    for encoding in option_owners():
        encoding.add_arguments(p, default_help)
    p.add_argument("--model", default="mlp", choices=sorted(BODIES))
    p.add_argument("--depth", type=positive_int, default=4)
    p.add_argument("--width", type=positive_int, help=default_help("width"))
    p.add_argument("--grid", type=positive_int, help="sinekan: grid size G" + default_help("grid", " "))
    p.add_argument(
        "--first-grid",
        type=positive_int,
        help="sinekan: grid size of the first layer" + default_help("first_grid", " ").replace("derived", "--grid"),
    )
    p.add_argument(
        "--first-freq",
        type=zero_or_positive_float,
        help="sinekan: the first layer's top frequency in cycles per unit (of a projection: in "
        "multiples of it), ω_k = 2π·F·k/G; 0 = the paper's ω_k = k" + default_help("first_freq", " "),
    )
    p.add_argument(
        "--hidden-freq",
        type=positive_float,
        help="sinekan: scale of the later layers' frequency grids, ω_k = S·k/(G+1); 1 = the paper's"
        + default_help("hidden_freq", " "),
    )
    p.add_argument(
        "--sinekan-init",
        default="scaled",
        choices=INITS,
        help="sinekan: amplitude initialisation: scaled to unit output variance (default; "
        "docs/benchmarks.md, fourier_table) or the paper's",
    )
    # Fast defaults, measured in docs/benchmarks.md, time_to_quality; the paper's protocol is
    # --steps 2000 --lr 1e-3 --schedule constant --batch-size 0.
    p.add_argument("--steps", type=positive_int, help=default_help("steps"))
    p.add_argument("--lr", type=positive_float, help="Adam learning rate" + default_help("lr", " "))
    p.add_argument(
        "--schedule",
        default="cosine",
        choices=SCHEDULES,
        help="learning rate: constant, or cosine decay to 0 over --steps (default)",
    )
    p.add_argument(
        "--batch-size", type=int, default=4096, help="random mini-batch of training pixels per step; 0 = full batch"
    )
    p.add_argument(
        "--protocol",
        default="paper",
        choices=PROTOCOLS,
        help="paper: train on [::2, ::2], test on the held-out pixels; full: train on all",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--compile", action="store_true", help="torch.compile the training step")
    p.add_argument(
        "--init",
        default="pyramid",
        choices=ENCODING_INITS,
        help="grid models: start the tables from the image's pyramid under a linear head (default), "
        "or from instant-ngp's random start",
    )
    p.add_argument(
        "--fp16-weights",
        action="store_true",
        help="round the weights to float16 and store them so (float32 compute; half the file)",
    )
    p.add_argument(
        "--target-bytes",
        type=positive_int,
        default=None,
        help="grid preset: the model file's bytes at most; the tables' steps are chosen for the best PSNR within "
        "them (docs/training.md, Byte and PSNR targets)",
    )
    p.add_argument(
        "--target-psnr",
        type=positive_float,
        default=None,
        help="grid preset: the PSNR over the training pixels at least, in dB, at the fewest bytes; without either "
        "target the rounding costs at most 0.2 dB",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def option_owners() -> list[Encoding]:
    """One registered encoding per config class: encodings that share a config share their options."""
    owners: dict[type, Encoding] = {}
    for encoding in ENCODINGS.values():
        owners.setdefault(encoding.config, encoding)
    return list(owners.values())


def resolve_defaults(args: argparse.Namespace) -> None:
    """Fill the options not given (None) from, in order: the built-in image's defaults
    (images.IMAGE_DEFAULTS), the model's (image_models.MODEL_DEFAULTS), fit-image's own (the MLP's)."""
    for key, base in FIT_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, image_defaults(args.image).get(key, MODEL_DEFAULTS.get(args.model, {}).get(key, base)))


def fit_config(args: argparse.Namespace, scale: float | None = None, dims: tuple[int, int] | None = None) -> FitConfig:
    """The fit the options ask for; the image's header gives the fitted size (an encoding may derive its options
    from it: see its `from_args`). `scale` replaces --scale (sweep-scale's σ). Every encoding's options are checked
    against their ranges, the chosen encoding's or not, as argparse checks every option's type."""
    resolve_defaults(args)
    if scale is not None:
        args = argparse.Namespace(**{**vars(args), "scale": scale})
    w, h = dims or image_dims(args.image, args.size, args.crop, args.max_pixels)  # dims: a block's own pixels
    for encoding in option_owners():
        encoding.check_options(encoding.from_args(args, (w, h)))
    enc = ENCODINGS[args.encoding].from_args(args, (w, h))
    model = ImageModelConfig(
        model=args.model,
        depth=args.depth,
        width=args.width,
        grid_size=args.grid,
        first_grid=args.first_grid or 0,
        first_freq=args.first_freq or 0.0,
        sinekan_init=args.sinekan_init,
        hidden_freq=args.hidden_freq,
        encoding=enc,
    )
    return FitConfig(
        image=args.image,
        size=args.size,
        crop=args.crop,
        max_pixels=args.max_pixels,
        fp16_weights=args.fp16_weights,
        steps=args.steps,
        lr=args.lr,
        schedule=args.schedule,
        batch_size=args.batch_size,
        compile=args.compile,
        init=args.init,
        protocol=args.protocol,
        seed=args.seed,
        device=args.device,
        progress=not args.no_progress,
        model=model,
        target_bytes=args.target_bytes,
        target_psnr=args.target_psnr,
    )


@contextmanager
def option_flags():
    """An encoding's OptionError (naming its option) as the command line says it: naming the option's flag."""
    try:
        yield
    except OptionError as e:
        encoding = ENCODINGS.get(e.encoding)
        if encoding is None:
            raise
        raise UsageError(f"{encoding.flag(e.option)} {e.problem}") from None


def cmd_fit_image(args: argparse.Namespace) -> int:
    out = check_out_dir(args.out) if args.out else None
    with option_flags():
        cfg = fit_config(args)
        cfg.validate()
        if args.block_size:
            result = fit_in_blocks(args, cfg, out)
        else:
            result = fit_image(cfg, out)
    metrics = result["metrics"]
    where = f" -> {out}" if out else ""
    sys.stdout.write(f"{json.dumps(metrics)}{where}\n")
    return 0


def fit_in_blocks(args: argparse.Namespace, cfg, out) -> dict:
    """--block-size: an image longer than a block is fitted in overlapping blocks (training/blocks.py), at its
    native size; --size and --crop do not apply."""
    if out is None:
        raise UsageError("--block-size needs --out: the blocks are written as one version of a model")
    if args.size or args.crop:
        raise UsageError("--block-size fits the image at its native size: drop --size and --crop")
    if args.target_bytes is not None:
        raise UsageError("--target-bytes is for one model; with --block-size give --target-psnr (each block meets it)")
    width, height = image_size(cfg.image)
    source = {"file": portable(cfg.image), "size": [width, height]}
    try:
        # each piece configured for its own pixels, as a fit job's pieces are: a block of 2048 (and its overlap) keeps
        # its grid in the packed dense graph, whose export is exact (docs/benchmarks.md, giant)
        return fit_blocked(
            lambda dims: fit_config(args, dims=dims), cfg.image, args.block_size, args.block_overlap, out, source
        )
    except ContractError as e:
        raise UsageError(f"--block-size/--block-overlap: {e}") from None


def register(sub) -> None:
    p = sub.add_parser("fit-image", help="fit a coordinate→RGB network to an image and export it")
    add_image_options(p)
    p.add_argument(
        "--block-size",
        type=positive_int,
        default=None,
        help="fit an image longer than this many pixels as a grid of overlapping blocks of at most this side, "
        "each a model of its own, at the image's native size (docs/model-repository.md, Block models)",
    )
    p.add_argument(
        "--block-overlap",
        type=int,
        default=32,
        help="pixels each block reaches into its neighbours, where they blend (default: %(default)s)",
    )
    p.add_argument("--out", help="model directory to write, e.g. models/astronaut")
    p.set_defaults(func=cmd_fit_image)
