"""`fit-image`: its options (shared with sweep-scale and the fit worker) and the subcommand."""
from __future__ import annotations

import argparse
import json
import sys

from commandline import positive_float, positive_int

from .encodings import ENCODINGS, EncodingConfig
from .fit_image import PROTOCOLS, SCHEDULES, FitConfig, fit_image
from .image_models import BODIES, MODEL_DEFAULTS, ImageModelConfig
from .encodings import grid
from .encodings.grid_init import INITS as GRID_INITS
from .images import BUILTIN, MAX_PIXELS, image_defaults, image_dims
from .sinekan import INITS
from .repository import check_out_dir


# fit-image's defaults for the options a built-in image or a model may set otherwise (None: derived).
FIT_DEFAULTS = {"encoding": "gaussian", "scale": 10.0, "features": 256, "width": 256, "grid": 8, "first_grid": None,
                "first_freq": None, "hidden_freq": 1.0, "steps": 500, "lr": 5e-3}


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
    p.add_argument("--size", type=positive_int, default=None,
                   help="cap on the longer side: the image is downscaled only when it is longer than SIZE "
                        f"or has more than --max-pixels pixels (default: native, up to {MAX_PIXELS} pixels)")
    p.add_argument("--max-pixels", type=positive_int, default=MAX_PIXELS,
                   help="a larger image is downscaled to this many pixels (default: %(default)s)")
    p.add_argument("--crop", action="store_true", help="fit the image's centre square instead of the whole image")
    p.add_argument("--encoding", choices=sorted(ENCODINGS), help=default_help("encoding"))
    p.add_argument("--scale", type=positive_float, help="gaussian/projection: σ of the frequency matrix"
                   + default_help("scale", " "))
    p.add_argument("--features", type=positive_int,
                   help="gaussian/sine/projection: number of frequencies" + default_help("features", " "))
    p.add_argument("--levels", type=positive_int, default=8, help="positional: number of frequencies")
    p.add_argument("--max-freq", type=positive_float, default=None,
                   help="positional: largest frequency (default: SIZE/4)")
    p.add_argument("--bandwidth", type=positive_float, default=None,
                   help="sine: radius of the frequency disc (default: SIZE/8)")
    p.add_argument("--damping", action="store_true", help="sine: damp amplitudes toward Nyquist")
    add_grid_options(p)
    p.add_argument("--model", default="mlp", choices=sorted(BODIES))
    p.add_argument("--depth", type=positive_int, default=4)
    p.add_argument("--width", type=positive_int, help=default_help("width"))
    p.add_argument("--grid", type=positive_int, help="sinekan: grid size G" + default_help("grid", " "))
    p.add_argument("--first-grid", type=positive_int,
                   help="sinekan: grid size of the first layer" + default_help("first_grid", " ").replace("derived", "--grid"))
    p.add_argument("--first-freq", type=zero_or_positive_float,
                   help="sinekan: the first layer's top frequency in cycles per unit (of a projection: in "
                        "multiples of it), ω_k = 2π·F·k/G; 0 = the paper's ω_k = k" + default_help("first_freq", " "))
    p.add_argument("--hidden-freq", type=positive_float,
                   help="sinekan: scale of the later layers' frequency grids, ω_k = S·k/(G+1); 1 = the paper's"
                        + default_help("hidden_freq", " "))
    p.add_argument("--sinekan-init", default="scaled", choices=INITS,
                   help="sinekan: amplitude initialisation: scaled to unit output variance (default; "
                        "docs/benchmarks.md §1) or the paper's")
    # Fast defaults, measured in docs/benchmarks.md §2; the paper's protocol is
    # --steps 2000 --lr 1e-3 --schedule constant --batch-size 0.
    p.add_argument("--steps", type=positive_int, help=default_help("steps"))
    p.add_argument("--lr", type=positive_float, help="Adam learning rate" + default_help("lr", " "))
    p.add_argument("--schedule", default="cosine", choices=SCHEDULES,
                   help="learning rate: constant, or cosine decay to 0 over --steps (default)")
    p.add_argument("--batch-size", type=int, default=4096,
                   help="random mini-batch of training pixels per step; 0 = full batch")
    p.add_argument("--protocol", default="paper", choices=PROTOCOLS,
                   help="paper: train on [::2, ::2], test on the held-out pixels; full: train on all")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--compile", action="store_true", help="torch.compile the training step")
    p.add_argument("--init", default="pyramid", choices=GRID_INITS,
                   help="grid models: start the tables from the image's pyramid under a linear head (default), "
                        "or from instant-ngp's random start")
    p.add_argument("--fp16-weights", action="store_true",
                   help="round the weights to float16 and store them so (float32 compute; half the file)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def add_grid_options(p: argparse.ArgumentParser) -> None:
    """The grid encoding's options; out of range, fit_config refuses them naming the range (encodings/grid.py)."""
    lim = grid.LIMITS
    p.add_argument("--grid-levels", type=int, default=8, help=f"grid: levels L, {range_text(lim['levels'])} "
                   "(default: %(default)s)")
    p.add_argument("--grid-features", type=int, default=2, help=f"grid: features per level F, "
                   f"{range_text(lim['features'])} (default: %(default)s)")
    p.add_argument("--grid-finest-features", type=int, default=0,
                   help=f"grid: features of the finest level, {range_text(lim['finest_features'])}; 0 = F (default). "
                        "Fewer than F (1: the luma) puts the finest level on the native pixels and the others below it "
                        "within --grid-bytes-per-pixel (encodings/grid.py)")
    p.add_argument("--grid-log2-table", type=int, default=0,
                   help=f"grid: a level of more than 2^T cells is hashed into 2^T entries, T in "
                        f"{range_text(lim['log2_table'])}; 0 = the largest T within --grid-bytes-per-pixel (default)")
    p.add_argument("--grid-base", type=int, default=16, help=f"grid: cells of the coarsest level along the longer "
                   f"side, {range_text(lim['base'])} (default: %(default)s)")
    p.add_argument("--grid-finest", type=int, default=0, help=f"grid: cells of the finest level along the longer "
                   f"side, {range_text(lim['finest'])}; 0 = the fitted image's pixels (default)")
    p.add_argument("--grid-table-bits", type=int, default=16,
                   help="grid: bits per table entry in the model file, 16 (float16; with --fp16-weights) or 8 "
                        "(uint8 with a scale per level and feature: twice the cells in the same bytes); "
                        "out of range, refused (default: %(default)s)")
    p.add_argument("--grid-bytes-per-pixel", type=float, default=1.45,
                   help="grid: float16 bytes of tables per fitted pixel that the derived table size keeps to "
                        "(default: %(default)s)")


def range_text(lo_hi: tuple) -> str:
    return f"{lo_hi[0]:g}..{lo_hi[1]:g}"


def resolve_defaults(args: argparse.Namespace) -> None:
    """Fill the options not given (None) from, in order: the built-in image's defaults
    (images.IMAGE_DEFAULTS), the model's (image_models.MODEL_DEFAULTS), fit-image's own (the MLP's)."""
    for key, base in FIT_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, image_defaults(args.image).get(key, MODEL_DEFAULTS.get(args.model, {}).get(key, base)))


def fit_config(args: argparse.Namespace, scale: float | None = None) -> FitConfig:
    """The fit the options ask for; the image's header gives the fitted size (frequencies derive from its
    longer side, the grid from both)."""
    resolve_defaults(args)
    w, h = image_dims(args.image, args.size, args.crop, args.max_pixels)
    side = max(w, h)
    enc = EncodingConfig(
        name=args.encoding, scale=scale if scale is not None else args.scale, features=args.features,
        levels=args.levels, max_freq=args.max_freq or max(side / 4, 1.0),
        bandwidth=args.bandwidth or max(side / 8, 1.0), damping=args.damping,
        nyquist=side / 4 if args.protocol == "paper" else side / 2, seed=args.seed,
        grid_levels=args.grid_levels, grid_features=args.grid_features,
        grid_finest_features=args.grid_finest_features, grid_log2_table=args.grid_log2_table,
        grid_base=args.grid_base, grid_finest=args.grid_finest, grid_bytes_per_pixel=args.grid_bytes_per_pixel,
        grid_table_bits=args.grid_table_bits,
        image_size=[w, h])
    model = ImageModelConfig(model=args.model, depth=args.depth, width=args.width, grid_size=args.grid,
                             first_grid=args.first_grid or 0, first_freq=args.first_freq or 0.0,
                             sinekan_init=args.sinekan_init, hidden_freq=args.hidden_freq, encoding=enc)
    return FitConfig(image=args.image, size=args.size, crop=args.crop, max_pixels=args.max_pixels,
                     fp16_weights=args.fp16_weights, steps=args.steps, lr=args.lr, schedule=args.schedule,
                     batch_size=args.batch_size, compile=args.compile, init=args.init,
                     protocol=args.protocol, seed=args.seed, device=args.device,
                     progress=not args.no_progress, model=model)


def cmd_fit_image(args: argparse.Namespace) -> int:
    out = check_out_dir(args.out) if args.out else None
    cfg = fit_config(args)
    cfg.validate()
    result = fit_image(cfg, out)
    metrics = result["metrics"]
    where = f" -> {out}" if out else ""
    sys.stdout.write(f"{json.dumps(metrics)}{where}\n")
    return 0


def register(sub) -> None:
    p = sub.add_parser("fit-image", help="fit a coordinate→RGB network to an image and export it")
    add_image_options(p)
    p.add_argument("--out", help="model directory to write, e.g. models/astronaut")
    p.set_defaults(func=cmd_fit_image)

