"""Block models (modelrepo/blocks.py, docs/model-repository.md "Block models"): an image larger than a block is
fitted as overlapping blocks, each a grid model of its crop, plus an overview of the whole image at a quarter of its
side (at most a block's), and written as one version.

The pieces of an image one model could hold share the steps that one model would take (`piece_steps`), so its
blocks cost what one model would, plus their overlaps and the overview; a giant's pieces each take the steps, as
photos of their own (docs/fits.md, "Giant images").

Each piece is fitted on its own (`fit_piece`), so the pieces of one image can go to different workers
(training/worker/blocks.py); `write_blocked_model` publishes them all at once. `fit_blocked` does it all in one
process, for the command line. Nothing here holds more than one block of the image in floating point.

The whole-image PSNR is computed from each block's squared errors weighted by its blend weights: by convexity that
is at least the blended render's squared error, so the PSNR written is a lower bound of the served image's
(docs/model-repository.md).

A PSNR target (`--target-psnr`, POST /v1/fits `target_psnr`) is the whole image's: each block meets it over its
crop raised by its overlap's share (`block_target`), so that the blocks' weighted errors, and so the whole image's
PSNR, meet it too; the overview, which draws the coarse views, meets it where its fit can, else keeps its finest
rounding (docs/fits.md).
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from modelrepo import Guard, onnxfile, sha256_bytes
from modelrepo.blocks import BlockLayout, axis_weights

from .errors import UsageError
from .fit_image import (
    IMAGE_INPUTS,
    IMAGE_OUTPUTS,
    PREVIEW_SIDE,
    TARGET_PSNR,
    FitConfig,
    evaluate,
    finish,
    image_metadata,
    image_onnx,
    train,
)
from .image_models import count_parameters
from .images import fit_dims, pixel_centres, save_png
from .metrics import psnr_from_mse
from .regions import read_region, read_scaled, tiled
from .repository import write_model_dir

log = logging.getLogger(__name__)
OVERVIEW = "overview"  # the piece that is the whole image at a block's size


@dataclass
class Piece:
    """A fitted block (or the overview): its ONNX file and what the version records of it."""

    key: str  # a block's file name (blocks/rRcC.onnx), or OVERVIEW
    onnx: bytes | Callable[[], bytes]  # the file, or how to read it when it is written (the publisher's, one at a time)
    metrics: dict
    export: dict
    history: dict
    size: list[int]  # the pixels it was fitted on [w, h]
    parameters: int = 0
    architecture: dict = field(default_factory=dict)  # the fit's model config (a grid's levels follow its pixels)
    weighted_se: float = 0.0  # sum of blend weight × squared error over its crop (blocks only)
    weight: float = 0.0  # sum of blend weight × 3 channels over its crop
    seconds: float = 0.0
    preview: np.ndarray | None = field(default=None, repr=False)  # the overview's render (the version's preview)
    sha256: str = ""

    def __post_init__(self) -> None:
        if not self.sha256:
            self.sha256 = sha256_bytes(self.data())

    def data(self) -> bytes:
        return self.onnx() if callable(self.onnx) else self.onnx

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "metrics": self.metrics,
            "export": self.export,
            "history": self.history,
            "size": self.size,
            "parameters": self.parameters,
            "architecture": self.architecture,
            "weighted_se": self.weighted_se,
            "weight": self.weight,
            "seconds": self.seconds,
            "sha256": self.sha256,
        }

    @classmethod
    def from_json(cls, d: dict, onnx: bytes | Callable[[], bytes]) -> "Piece":
        return cls(onnx=onnx, **d)


def piece_steps(steps: int, pixels: int, layout: BlockLayout, max_pixels: int, batch: int) -> int:
    """A piece's steps. An image one model could hold (at most `max_pixels`, 25 MP for the grid preset): the pieces
    share the steps that one model would take, each making as many passes over its `pixels` as `steps` batches of
    `batch` pixels make over the image (at least 1; a piece no larger than a batch takes every step, as the whole
    image would), so its blocks cost about what one model of it would, their overlaps and the overview a few percent
    more. A larger image: every piece takes the `steps`, fitted as a photo of its own (docs/benchmarks.md, giant)."""
    whole = layout.width * layout.height
    if whole > max_pixels:
        return steps
    passes = steps * min(batch, whole) / whole
    return max(1, min(steps, round(passes * pixels / min(batch, pixels))))


def piece_pixels(layout: BlockLayout, key: str, image: str) -> np.ndarray:
    """The [h, w, 3] float32 pixels `key` is fitted on: a block's crop, read by region, or the overview."""
    if key == OVERVIEW:
        return read_scaled(image, max(layout.overview))
    b = next(b for b in layout.blocks if b.file == key)
    return read_region(image, b.x, b.y, b.w, b.h)


def blend_weights(layout: BlockLayout, key: str) -> np.ndarray:
    """[h, w] the blend weight of each pixel of block `key`'s crop (the weights of all blocks sum to 1 a pixel)."""
    b = next(b for b in layout.blocks if b.file == key)
    wx = axis_weights(layout.x_edges, layout.overlap, b.col, b.x + np.arange(b.w) + 0.5)
    wy = axis_weights(layout.y_edges, layout.overlap, b.row, b.y + np.arange(b.h) + 0.5)
    return wy[:, None] * wx[None, :]


def block_target(target: float, weights: np.ndarray) -> float:
    """The PSNR a block must reach over its whole crop for its blend-weighted error to meet `target`: its squared
    error over the crop bounds its weighted one, so a mean error of target's × (weights' sum / pixels) is enough
    (+0.27 dB for an inner block of 2048 with overlaps of 32). Every block so, the blocks' weighted errors sum to at
    most the target's over the image's pixels: the whole image's PSNR (`whole_metrics`) meets it."""
    return min(TARGET_PSNR, round(target + 10 * np.log10(weights.size / float(weights.sum())), 3))


def fit_piece(cfg: FitConfig, layout: BlockLayout, key: str, img: np.ndarray, on_step=None, every: int = 25) -> Piece:
    """Fit one block (or the overview) on its pixels `img`, score it, export it to ONNX. With a PSNR target, a block
    meets `block_target` of it; the overview meets it where it can, else keeps its finest rounding."""
    t0 = time.monotonic()
    weights = None if key == OVERVIEW else blend_weights(layout, key)
    piece_cfg = cfg
    if cfg.target_psnr is not None and weights is not None:
        piece_cfg = replace(cfg, target_psnr=block_target(cfg.target_psnr, weights))
    model, history = train(piece_cfg, img, on_step=on_step, every=every)
    try:
        model = finish(model, piece_cfg, img, history, soft_target=key == OVERVIEW)
    except UsageError as e:
        if piece_cfg is cfg:
            raise
        reason = str(e).split(": ", 1)[-1]  # the rate control's "--target-psnr N: this fit reaches …"
        raise UsageError(
            f"block {key} ({img.shape[1]}×{img.shape[0]} with its overlap) needs {piece_cfg.target_psnr:.2f} dB over "
            f"its pixels for the whole image to reach {cfg.target_psnr:g}; {reason}"
        ) from None
    metrics, full = evaluate(model, img, cfg.protocol)
    h, w = img.shape[:2]
    parameters = count_parameters(model)
    extra = {"preview": full}
    if key == OVERVIEW:  # its ONNX file records the whole image's grid: it answers the same coordinates
        onnx, export, _ = image_onnx(model, cfg, [layout.width, layout.height])
    else:
        onnx, export, _ = image_onnx(model, cfg, [w, h])
        se = float((weights * ((full - img) ** 2).sum(axis=2)).sum())
        extra = {"weighted_se": se, "weight": float(weights.sum() * 3)}
    return Piece(
        key,
        onnx,
        metrics,
        export,
        history,
        [w, h],
        parameters,
        architecture=cfg.model.to_dict(),
        seconds=time.monotonic() - t0,
        **extra,
    )


def whole_metrics(pieces: list[Piece]) -> dict:
    """The version's metrics, in the fields of a one-model fit's where they apply: the whole image's PSNR bound from
    the blocks' weighted errors (`full_psnr`, also `train_psnr` when every pixel was trained on), the blocks' SSIM
    weighted the same way, and the blocks' range."""
    blocks = [p for p in pieces if p.key != OVERVIEW]
    se, n = sum(p.weighted_se for p in blocks), sum(p.weight for p in blocks)
    block_psnr = [p.metrics["full_psnr"] for p in blocks]
    overview = next((p for p in pieces if p.key == OVERVIEW), None)
    ssims = [(p.metrics["ssim"], p.weight) for p in blocks if p.metrics.get("ssim") is not None]
    full = round(psnr_from_mse(se / n), 3) if n else None
    out = {"train_psnr": full} if all("test_psnr" not in p.metrics for p in blocks) else {}
    return {
        **out,
        "full_psnr": full,
        "full_psnr_is": "a lower bound: the blocks' squared errors weighted by their blend weights",
        "ssim": round(sum(s * w for s, w in ssims) / sum(w for _, w in ssims), 4) if ssims else None,
        "ssim_is": "the blocks' SSIM, weighted by their blend weights",
        "block_psnr_min": min(block_psnr, default=None),
        "block_psnr_max": max(block_psnr, default=None),
        "overview_psnr": overview.metrics["full_psnr"] if overview else None,
    }


def overview_render(onnx: bytes, size: list[int], side: int = PREVIEW_SIDE) -> np.ndarray:
    """[h, w, 3] of the overview's network at the pixel centres of the whole image, at most `side` pixels along the
    longer side: the version's preview when its pieces were fitted elsewhere (the worker that publishes has only
    their files)."""
    import onnxruntime as ort

    w, h = fit_dims(size[0], size[1], min(side, max(size)))
    session = ort.InferenceSession(onnxfile.decoded(onnx), providers=["CPUExecutionProvider"])  # its coded tables
    coords = pixel_centres(h, w).reshape(-1, 2)
    rgb = [session.run(["rgb"], {"coords": coords[i : i + 65536]})[0] for i in range(0, len(coords), 65536)]
    return np.concatenate(rgb).reshape(h, w, 3)


def write_blocked_model(
    out: Path, cfg: FitConfig, layout: BlockLayout, pieces: list[Piece], source: dict, guard: Guard | None = None
) -> dict:
    """Write the version: the overview as model.onnx, the blocks under blocks/, the layout and the whole image's
    metrics in metadata.json; one atomic rename (modelrepo.write_version)."""
    by_key = {p.key: p for p in pieces}
    missing = [b.file for b in layout.blocks if b.file not in by_key] + ([OVERVIEW] if OVERVIEW not in by_key else [])
    if missing:
        raise ValueError(f"cannot publish {out.name}: {len(missing)} piece(s) not fitted ({', '.join(missing[:4])})")
    overview = by_key[OVERVIEW]
    digests = {b.file: by_key[b.file].sha256 for b in layout.blocks}
    size = [layout.width, layout.height]
    metrics = whole_metrics(pieces)
    meta = image_metadata_for(cfg, size, source, metrics, overview)
    meta["blocks"] = layout.with_digests(digests).with_overview(overview.size).to_metadata()
    meta["whole"] = {  # the version as a whole, where architecture and export describe the overview alone
        "parameters": sum(p.parameters for p in pieces),
        "bytes": sum(int(p.export.get("bytes", 0)) for p in pieces),
        "files": len(pieces),
    }
    meta["block_fits"] = {  # each piece's fit: its PSNR, time, pixels and the pixel grid its encoding was sized for
        p.key: {
            "psnr": p.metrics["full_psnr"],
            "seconds": round(p.seconds, 2),
            "size": p.size,
            "encoding_size": (p.architecture or {}).get("encoding", {}).get("image_size"),
        }
        for p in pieces
    }

    def extras(d: Path) -> None:
        (d / "blocks").mkdir()
        for b in layout.blocks:
            (d / b.file).write_bytes(by_key[b.file].data())  # one block's file in memory at a time
        preview = overview.preview if overview.preview is not None else overview_render(overview.data(), size)
        save_png(preview, d / "preview.png", max_side=PREVIEW_SIDE)

    return write_model_dir(
        out,
        task="image",
        onnx_bytes=overview.data(),
        inputs=IMAGE_INPUTS,
        outputs=IMAGE_OUTPUTS,
        metadata=meta,
        extras=extras,
        guard=guard,
    )


def image_metadata_for(cfg: FitConfig, size: list[int], source: dict, metrics: dict, overview: Piece) -> dict:
    meta = image_metadata(cfg, size, source, metrics, overview.history, overview.parameters)
    if overview.architecture:  # model.onnx is the overview: its own architecture, whichever piece ended last
        meta["architecture"] = {**meta["architecture"], **overview.architecture}
        meta["encoding"] = overview.architecture.get("encoding", meta["encoding"])
    meta["export"] = overview.export
    meta["description"] = (
        f"{cfg.model.model} on {cfg.model.encoding.name} features fitted to '{cfg.image}' at {size[0]}×{size[1]} "
        f"in blocks, with an overview at {overview.size[0]}×{overview.size[1]}"
    )
    return meta


def fit_blocked(
    cfg_for: Callable[[tuple[int, int]], FitConfig], image: str, block: int, overlap: int, out: Path, source: dict
) -> dict:
    """The command line's blocked fit, in this process: every block, then the overview, then the version. Each
    piece's fit is `cfg_for((w, h))` of its pixels, with its share of the steps (`piece_steps`)."""
    width, height = source["size"]
    layout = BlockLayout.plan(width, height, block, overlap)
    pieces = []
    with tempfile.TemporaryDirectory(prefix="inr-blocks-") as tmp:
        tiff = tiled(image, Path(tmp) / "image.tif")  # a block then costs its tiles, not a decode from the top
        for key in [b.file for b in layout.blocks] + [OVERVIEW]:
            pixels = piece_pixels(layout, key, str(tiff))
            cfg = cfg_for((pixels.shape[1], pixels.shape[0]))
            cfg.steps = piece_steps(
                cfg.steps, pixels.shape[0] * pixels.shape[1], layout, cfg.max_pixels, cfg.batch_size
            )
            piece = fit_piece(cfg, layout, key, pixels)
            log.info("%s: %s, %.1f dB in %.1f s", out.name, key, piece.metrics["full_psnr"], piece.seconds)
            pieces.append(piece)
    written = write_blocked_model(out, cfg, layout, pieces, source)
    return {**written, "metrics": whole_metrics(pieces), "blocks": len(layout.blocks)}
