"""What a model costs a viewer (docs/benchmarks.md, render_cost): µs per sample under onnxruntime, plain graph and
separable body.

For each fit-image configuration (NAME=OPTIONS), the untrained network is built and exported the way
fit-image exports it (weights do not change the cost): `model.onnx` on coordinates, and — where the
first stage is sines of affine functions of the coordinates — the separable `body.onnx` that the
service's render path runs per pixel on precomputed row and column sines. One call of SAMPLES
samples, median of ROUNDS, side by side, one onnxruntime thread.

    python -m bench.render_cost                       # the Gaussian MLP against --model sinekan
    python -m bench.render_cost --model "mine=--model sinekan --width 64"
"""

from __future__ import annotations

import numpy as np

from commandline import OneLineParser

from .common import (
    fit_image_config,
    log,
    machine,
    median,
    named_options,
    ort_session,
    set_threads,
    setup_logging,
    time_calls,
    write_json,
)

DEFAULT_MODELS = ("gaussian-mlp=--model mlp --encoding gaussian --scale 5", "sinekan=--model sinekan --scale 3")


def cost(options: list[str], samples: int, rounds: int) -> dict:
    import torch

    from training.export import export_onnx
    from training.image_models import ImageINR, count_parameters
    from training.separable import BODY_INPUT, export_separable

    cfg = fit_image_config(["--size", "128", *options])
    torch.manual_seed(0)
    model = ImageINR(cfg.model).eval()
    coords = np.random.default_rng(0).random((samples, 2), dtype=np.float32)
    plain = ort_session(export_onnx(model, torch.rand(8, 2), "coords", ["rgb"]), threads=1)
    row = {
        "options": " ".join(options),
        "parameters": count_parameters(model),
        "plain_us_per_sample": median(
            time_calls(lambda: plain.run(["rgb"], {"coords": coords}), repeats=rounds, min_seconds=0.3)
        )
        / samples
        * 1e6,
    }
    sep = export_separable(model, coords[:256].astype(np.float64))
    if sep is not None:
        body_bytes, entry = sep
        feats = np.sin(coords.astype(np.float64) @ np.asarray(entry["P"]).T + np.asarray(entry["phase"]))
        feats = feats.astype(np.float32)
        body = ort_session(body_bytes, threads=1)
        row["body_features"] = entry["features"]
        row["body_us_per_sample"] = (
            median(time_calls(lambda: body.run(["rgb"], {BODY_INPUT: feats}), repeats=rounds, min_seconds=0.3))
            / samples
            * 1e6
        )
    return row


def main(argv: list[str] | None = None) -> dict:
    p = OneLineParser(prog="python -m bench.render_cost", description=__doc__.splitlines()[0])
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=OPTIONS",
        help="fit-image options of one model (repeatable; default: the Gaussian MLP and --model sinekan)",
    )
    p.add_argument("--samples", type=int, default=16384)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--name", default="render_cost")
    p.add_argument("--out-dir", default=None)
    a = p.parse_args(argv)
    models = named_options(a.model or list(DEFAULT_MODELS), p, "--model")
    if a.samples < 1 or a.rounds < 1:
        p.error("--samples and --rounds must be >= 1")
    set_threads(1)
    result = {
        "machine": machine(),
        "samples": a.samples,
        "rounds": a.rounds,
        "models": {n: cost(o, a.samples, a.rounds) for n, o in models.items()},
    }
    for n, r in result["models"].items():
        log.info(
            "%-14s %8d params  plain %.2f µs/sample  body %s",
            n,
            r["parameters"],
            r["plain_us_per_sample"],
            f"{r['body_us_per_sample']:.2f} µs/sample" if "body_us_per_sample" in r else "–",
        )
    write_json(a.name, result, a.out_dir)
    return result


if __name__ == "__main__":
    setup_logging()
    main()
