"""A fit job of an image larger than a block (docs/fits.md, "Giant images"): split into pieces on the queue, each
fitted by whichever worker takes it, published by the worker that fits the last (fitstore/pieces.py)."""

from __future__ import annotations

import logging
from pathlib import Path

from modelrepo import Guard
from modelrepo.blocks import MIN_BLOCK, BlockLayout

from ..blocks import OVERVIEW, Piece, piece_steps, whole_metrics, write_blocked_model
from ..encodings.grid_export import MAX_CELLS
from ..errors import UsageError
from ..regions import image_size, region_png, scaled_png, tiled
from . import memory as sizing

log = logging.getLogger(__name__)


def plan(job: str, options: dict, path: Path, memory: int, max_pixels: int) -> BlockLayout | None:
    """The job's blocks, or None: one model. A job with a `size` cap is fitted whole, downscaled. At its native size
    an image is one model when this worker can fit it as one (its measured bound within `memory`, the worker's, and
    at most `max_pixels`, the preset's largest one model) in the dense grid layout (its native level within
    grid_export.MAX_CELLS cells: ~16.7 MP), unless the job asks for blocks (`blocks: always`); else
    it is fitted in blocks of the job's block size, or of a smaller side when a block of that would not fit."""
    block = options.get("block")
    if not block or options.get("size"):
        return None
    width, height = image_size(str(path))
    # and within the dense grid layout, whose tiles the service paints with its kernel: a larger model keeps the
    # traced graph (every tile through the whole graph, ~12× the CPU, and a parity gate that fails now and then)
    dense = (width + 1) * (height + 1) <= MAX_CELLS
    whole = width * height <= min(max_pixels, sizing.one_model_pixels(memory)) and dense
    if whole and options.get("blocks") != "always":
        log.info(
            "fit %s: %d×%d, one model (at most %s of the worker's %s)",
            job,
            width,
            height,
            mib(sizing.one_model_peak(width * height)),
            mib(memory),
        )
        return None
    overlap = options.get("overlap", 32)
    if not whole:
        side = sizing.block_side(memory, overlap)
        if side < MIN_BLOCK:
            raise UsageError(
                f"a block of {MIN_BLOCK} pixels needs {mib(sizing.one_model_peak((MIN_BLOCK + 2 * overlap) ** 2))}, "
                f"more than this worker's memory of {mib(memory)} (worker --memory, INR_FIT_WORKER_MEMORY)"
            )
        block = min(block, side)
    if width <= block and height <= block:
        return None
    return BlockLayout.plan(width, height, block, min(overlap, block // 4))


def mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB"


def layout_args(layout: BlockLayout) -> dict:
    return {"width": layout.width, "height": layout.height, "block": layout.block, "overlap": layout.overlap}


def split(store, rec: dict, layout: BlockLayout, path: Path, scratch: Path, args) -> dict | None:
    """Queue the blocks and the overview as jobs of their own, each with its share of the job's steps (`args`, its
    fit-image options: `piece_steps`); the parent waits on them. Each piece's pixels are cut out of the upload one at
    a time, through a tiled copy in `scratch` (the worker's temp folder, never the uploads folder: the copy goes with
    the fit)."""
    source = tiled(path, scratch / "upload.tiled.tif")  # a region then costs its tiles, not a decode from the top

    def steps(pixels: int) -> int:
        return piece_steps(args.steps, pixels, layout, args.max_pixels, args.batch_size)

    pieces = [(b.file, region_png(source, b.x, b.y, b.w, b.h), steps(b.w * b.h)) for b in layout.blocks]
    ow, oh = layout.overview
    pieces.append((OVERVIEW, scaled_png(source, max(ow, oh)), steps(ow * oh)))
    done = store.split(rec, layout_args(layout), pieces)
    if done is not None:
        reused = [c for c in store.children(done) if c.get("reused_from")]
        log.info(
            "fit %s: split into %d blocks and an overview (%d×%d), %d steps in all, %d of them taken from an earlier "
            "fit of the same bytes",
            rec["id"],
            len(layout.blocks),
            ow,
            oh,
            sum(n for _, _, n in pieces),
            len(reused),
        )
    return done


def after_piece(ctx, rec: dict, piece: Piece, cfg) -> dict | None:
    """Write the piece and end its job. When it was the last piece to be written, this worker claims the version's
    publish and leaves it in `ctx.then`, which runs once the piece's own end is logged (job.run_claimed), so that
    the log says the piece's end before the version's."""
    done = ctx.store.finish_piece(rec, piece.onnx, piece.to_json())
    if done is None:
        return None
    parent = ctx.store.get(rec["parent"])
    if parent and parent["state"] == "running" and ctx.store.pieces_written(parent):
        if ctx.store.claim_publish(parent["id"], ctx.worker):
            ctx.then.append(lambda: publish(ctx, parent, cfg))
    return done


def publish(ctx, parent: dict, cfg) -> dict | None:
    """Every piece is written: the version, all at once, and the parent succeeds with the whole image's metrics."""
    store = ctx.store
    try:
        pieces = [Piece.from_json(meta, onnx) for meta, onnx in store.pieces(parent)]
        layout = BlockLayout.plan(**parent["layout"])
        source = {
            "kind": "upload",
            "job": parent["id"],
            **{
                k: parent["source"][k]
                for k in ("filename", "width", "height", "sha256", "bytes")
                if k in parent["source"]
            },
            "size": [layout.width, layout.height],
        }
        cfg.image = parent["source"].get("filename") or parent["name"]
        guard = Guard.from_json(parent.get("access"))  # the policy the API allowed this fit to publish over
        written = write_blocked_model(ctx.models.target(parent["name"]), cfg, layout, pieces, source, guard)
    except Exception as e:  # noqa: BLE001 - the job fails with its reason; the pieces stay in the store
        log.exception("fit %s: publish failed", parent["id"])
        return store.finish_parent(
            parent["id"], "failed", reason="error", error=f"publish: {e.__class__.__name__}: {e}"
        )
    metrics = whole_metrics(pieces)
    log.info(
        "fit %s: %s version %s done in %.1f s from %d pieces: PSNR %s dB over all pixels (at least), SSIM %s",
        parent["id"],
        parent["name"],
        written["version"],
        store.now() - parent["started"],
        len(pieces),
        metrics["full_psnr"],
        metrics["ssim"],
    )
    return store.finish_parent(parent["id"], "succeeded", version=written["version"], metrics=metrics)
