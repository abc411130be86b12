"""`python -m inr_client COMMAND`: talk to a running INR service from the shell.

    python -m inr_client models
    python -m inr_client query --model astronaut 0.5,0.5 0.25,0.75
    python -m inr_client render --model astronaut --width 8192 --height 8192 --out big.png
    python -m inr_client classify --model digits-sinekan seven.png
    python -m inr_client fit --wait photos/ 'more/**/*.jpg'

Bad input prints one line, `error: …`, and exits with code 2 (a 4xx from the service too);
an unreachable service or a 5xx exits with 1. No half-written output file is ever left.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import signal
import sys

import httpx

from commandline import OneLineParser, positive_float, positive_int

from .api import DEFAULT_URL, AsyncClient, Client
from .calls import ClientError, ServiceError
from .fitting import Fitter
from .output import check_output
from .photos import Photo, collect, summary, table


def numbers(count: int | tuple[int, ...], label: str):
    """argparse type: comma-separated finite numbers, `count` of them (or one of a tuple of counts)."""
    counts = count if isinstance(count, tuple) else (count,)

    def parse(text: str) -> list[float]:
        try:
            values = [float(v) for v in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{label} must be numbers separated by commas, got '{text}'") from None
        if len(values) not in counts or not all(math.isfinite(v) for v in values):
            want = " or ".join(str(c) for c in counts)
            raise argparse.ArgumentTypeError(f"{label} must be {want} finite number(s), got '{text}'")
        return values

    return parse


def add_transform(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("transform (how the image moves in the unit square)")
    g.add_argument("--rotate", type=numbers(1, "--rotate"), help="degrees counter-clockwise about --center")
    g.add_argument("--scale", type=numbers((1, 2), "--scale"), help="s or sx,sy")
    g.add_argument("--translate", type=numbers(2, "--translate"), help="tx,ty")
    g.add_argument("--center", type=numbers(2, "--center"), help="cx,cy (default 0.5,0.5)")


def transform_of(args: argparse.Namespace) -> dict | None:
    t = {}
    if args.rotate is not None:
        t["rotate"] = args.rotate[0]
    if args.scale is not None:
        t["scale"] = args.scale[0] if len(args.scale) == 1 else args.scale
    if args.translate is not None:
        t["translate"] = args.translate
    if args.center is not None:
        t["center"] = args.center
    return t or None


def cmd_models(args, out) -> int:
    with Client(args.url, timeout=args.timeout) as c:
        for m in c.models():
            out.write(f"{m.get('name')}\t{m.get('task')}\t{m.get('status')}\t{m.get('provider') or '-'}\n")
    return 0


def cmd_query(args, out) -> int:
    with Client(args.url, timeout=args.timeout) as c:
        rgb = c.query(args.model, args.coords, transform_of(args))
    out.write(json.dumps({"rgb": [[round(float(v), 6) for v in row] for row in rgb]}) + "\n")
    return 0


def cmd_classify(args, out) -> int:
    for f in args.files:
        if not os.path.isfile(f):
            raise ClientError(f"no such file '{f}'")
    with Client(args.url, timeout=args.timeout) as c:
        predictions = c.classify_files(args.model, args.files)
    for f, p in zip(args.files, predictions):
        probs = " ".join(f"{v:.3f}" for v in p.probabilities)
        out.write(f"{f}\t{p.label}\t{max(p.probabilities):.3f}\t[{probs}]\n")
    return 0


class LazyBar:
    """A tqdm bar that appears with the first finished tile, so an error before any progress is
    still the only line on stderr."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.bar = total, enabled, None

    def update(self, n: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, unit="px", unit_scale=True, desc="render", file=sys.stderr)
        self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def cmd_render(args, out) -> int:
    check_output(args.out)
    options = dict(viewport=args.viewport, transform=transform_of(args), supersample=args.supersample)
    bar = LazyBar(args.width * args.height, not args.no_progress)

    async def run() -> None:
        # `kill` (SIGTERM) cancels the render like Ctrl-C does, so the partial file is removed.
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
        async with AsyncClient(args.url, timeout=args.timeout, tile=args.tile, concurrency=args.concurrency) as c:
            await c.render_to_file(args.out, args.model, args.width, args.height, progress=bar.update, **options)

    try:
        asyncio.run(run())
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None
    finally:
        bar.close()
    out.write(f"{args.out}\t{args.width}x{args.height}\n")
    return 0


def non_negative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 0, got '{text}'")
    return v


def header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=") if "=" in text else text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got '{text}'")
    return name.strip(), value.strip()


def cmd_fit(args, out) -> int:
    """Fit every photo PATHs name; the table and a summary line on stdout; exit 1 when any failed."""
    photos = [Photo(p) for p in collect(args.paths)]
    options = {k: getattr(args, k) for k in ("preset", "size", "steps", "protocol", "seed")}
    client = Client(args.url, timeout=args.timeout, headers=dict(args.header or []))
    fitter = Fitter(
        client, photos, options, wait=args.wait, refit=args.refit, retries=args.retries, progress=not args.no_progress
    )
    try:  # `kill` ends it like Ctrl-C: with the table
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: signals stay as they are
        previous = None
    try:
        fitter.run()
    except KeyboardInterrupt:
        out.write(table(photos) + summary(photos, fitter.waits, fitter.waited_s))
        sys.stderr.write("error: interrupted; the jobs already queued go on (the same command skips them)\n")
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        client.close()
    out.write(table(photos) + summary(photos, fitter.waits, fitter.waited_s))
    failed = sum(p.failed for p in photos)
    if failed:
        sys.stderr.write(f"error: {failed} of {len(photos)} photos failed; the table above says why\n")
        return 1
    return 0


def interrupt(*_) -> None:
    raise KeyboardInterrupt


def add_connection(p: argparse.ArgumentParser, url, timeout) -> None:
    p.add_argument("--url", default=url, help=f"service base URL (env INR_SERVICE_URL, default {DEFAULT_URL})")
    p.add_argument("--timeout", type=positive_float, default=timeout, help="seconds per request")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m inr_client", description=__doc__.splitlines()[0])
    add_connection(parser, os.environ.get("INR_SERVICE_URL", DEFAULT_URL), 120.0)
    # The same options after the subcommand; SUPPRESS keeps the top-level values when absent.
    common = OneLineParser(add_help=False)
    add_connection(common, argparse.SUPPRESS, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    sub.add_parser = functools.partial(sub.add_parser, parents=[common])

    p = sub.add_parser("models", help="list the models")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("query", help="RGB at unit-square coordinates")
    p.add_argument("--model", required=True)
    p.add_argument("coords", nargs="+", type=numbers(2, "a coordinate"), metavar="X,Y")
    add_transform(p)
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("render", help="render an image of any size, fetched as tiles")
    p.add_argument("--model", required=True)
    p.add_argument("--width", type=positive_int, required=True)
    p.add_argument("--height", type=positive_int, required=True)
    p.add_argument("--out", required=True, help="output file: .png (streamed), .jpg or .webp")
    p.add_argument("--viewport", type=numbers(4, "--viewport"), help="x0,y0,x1,y1 of the unit square")
    p.add_argument("--supersample", type=positive_int, default=1, help="k×k samples per pixel")
    p.add_argument("--tile", type=positive_int, default=1024, help="largest tile side in pixels")
    p.add_argument("--concurrency", type=positive_int, default=2, help="tile requests in flight")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_transform(p)
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("classify", help="classify digit images (PNG/JPEG, any size)")
    p.add_argument("--model", required=True)
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(func=cmd_classify)

    p = sub.add_parser("fit", help="fit many photos (files, folders, globs); skips photos already fitted")
    p.add_argument("paths", nargs="+", metavar="PATH", help="image files, folders of them, or quoted globs ('**')")
    p.add_argument("--preset", help="grid (the service's default), fourier, fourier-small, sinekan")
    p.add_argument("--size", type=positive_int, help="cap on the longer side (default: the preset's)")
    p.add_argument("--steps", type=positive_int, help="training steps (default: the preset's)")
    p.add_argument("--protocol", choices=("full", "paper"), help="full (default): every pixel; paper: every other")
    p.add_argument("--seed", type=non_negative_int)
    p.add_argument("--wait", action="store_true", help="follow each job to its end (else: end once all are queued)")
    p.add_argument("--refit", action="store_true", help="upload every photo, even those whose bytes were fitted")
    p.add_argument("--retries", type=non_negative_int, default=4, help="tries again after a connection error or a 5xx")
    p.add_argument("--header", type=header, action="append", metavar="NAME=VALUE", help="e.g. the fit group's key")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=cmd_fit)
    return parser


def main(argv: list[str] | None = None, out=None) -> int:
    args = build_parser().parse_args(argv)
    out = out or sys.stdout
    try:
        return args.func(args, out)
    except ClientError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    except ServiceError as e:
        sys.stderr.write(f"error: service answered {e.status}: {e.message}\n")
        return 2 if e.status < 500 else 1
    except httpx.HTTPError as e:
        sys.stderr.write(f"error: cannot talk to {args.url}: {str(e) or type(e).__name__}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted; nothing was written\n")
        return 130
