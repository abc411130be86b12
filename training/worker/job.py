"""One fit job from the store: the same parse, fit, evaluate and export as `fit-image --out`, with
progress (loss, PSNR, ETA, a small preview) written to the store as it goes."""

from __future__ import annotations

import io
import logging
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from opentelemetry import trace
from PIL import Image

from commandline import OneLineParser
from fitstore import FINISHED, PRESETS, FitStore, uploads
from modelrepo import Guard, Repository, SpecError, Target, open_repository
from modelrepo.blocks import BlockLayout
from telemetry import tracing

from .. import regions
from ..blocks import fit_piece
from ..cli_image import add_image_options, fit_config
from ..encodings.grid_target import missed
from ..errors import UsageError
from ..fit_image import evaluate, export_image_model, finish, predict, preview_pixels, train
from ..images import fit_dims, load_image, pixel_centres
from ..metrics import psnr_from_mse
from . import memory as sizing
from . import pieces

log = logging.getLogger(__name__)
PREVIEW = 64  # preview renders are PREVIEW pixels along the longer side, in the image's aspect
PROGRESS_EVENTS = 40  # about this many progress events per fit
PREVIEW_EVERY = 4  # a preview with every 4th progress event, and with the last
CHECK_EVERY = 10  # cancel, deadline, SIGTERM and a lost claim are checked at least every 10 steps
EVENT_EVERY_S = 2.0  # and a progress event goes out at least every 2 s
# the finish's seconds (refit, rate control, evaluation, export) per second of the start, one torch thread: 3.95 at
# 3.8 MP, 3.84 at 4 MP, 2.62 at 12 MP (`finish` chooses the tables' steps since the rate control; it was ~1.3 before)
FINISH_PER_SETUP = 3.3
MIN_PIXELS = 16 * 16  # the smallest fit a worker must have the memory for


class Stop(Exception):
    """The fit ends early: `state` is what the job becomes (None: the job is no longer ours)."""

    def __init__(self, state: str | None, reason: str):
        super().__init__(reason)
        self.state, self.reason = state, reason


@dataclass
class JobContext:
    store: FitStore
    models: Repository  # where fits are written: a folder, or S3 (a folder or URL given is opened)
    worker: str
    device: str = "auto"
    stopping: object = None  # a threading.Event set on SIGTERM
    uploads: Path | str = Path(uploads.DEFAULT)  # INR_FIT_UPLOADS: the uploads kept as files, or their bucket
    memory: int = sizing.DEFAULT  # INR_FIT_WORKER_MEMORY: one model or blocks (training/worker/memory.py)
    then: list = field(default_factory=list)  # what runs once a job's end is logged: a publish (pieces.after_piece)

    def __post_init__(self):
        if not isinstance(self.models, Repository):
            self.models = open_repository(self.models)


def fit_args(options: dict, image_path: Path, device: str, steps: int | None = None):
    """fit-image's parsed options for the job: its preset, then the job's own size (a cap on the longer side;
    none: native), steps (a piece's own: its share), protocol, seed."""
    preset = PRESETS[options["preset"]]
    size = ["--size", str(options["size"])] if options.get("size") else []
    argv = [
        "--image",
        str(image_path),
        *size,
        "--steps",
        str(steps or options["steps"]),
        "--protocol",
        options["protocol"],
        "--seed",
        str(options["seed"]),
        "--device",
        device,
        "--no-progress",
        *preset["argv"],
        *(["--target-bytes", str(options["target_bytes"])] if options.get("target_bytes") is not None else []),
        *(["--target-psnr", repr(options["target_psnr"])] if options.get("target_psnr") is not None else []),
        *(["--grid-rd-lambda", repr(options["rd_lambda"])] if options.get("rd_lambda") is not None else []),
    ]
    parser = OneLineParser(prog="fit job")
    add_image_options(parser)
    return parser.parse_args(argv)


def preview_dims(width: int, height: int) -> tuple[int, int]:
    """(w, h) of a preview: PREVIEW pixels along the longer side, the image's aspect, at least 1."""
    scale = PREVIEW / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def preview_png(model, device, size: tuple[int, int] = (PREVIEW, PREVIEW)) -> bytes:
    w, h = preview_dims(*size)
    coords = pixel_centres(h, w).reshape(-1, 2)
    rgb = predict(model, coords, device).reshape(h, w, 3)
    buf = io.BytesIO()
    Image.fromarray(np.clip(rgb * 255 + 0.5, 0, 255).astype(np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def check_target(out: Target) -> None:
    """The target must be an image model (or new): a fit never writes a version into a digits model."""
    task = out.task()
    if task is not None and task != "image":
        raise UsageError(f"model '{out.name}' is a {task} model; a fit writes image models only")


def upload_file(ctx: JobContext, rec: dict, tmp: Path) -> tuple[Path, bool]:
    """The job's image as a file, and whether it is the upload kept in the uploads folder or bucket
    (fitstore.uploads): a piece's pixels, or an upload small enough for the store, are written to `tmp`; a kept
    upload in a bucket is read into `tmp` with ranged GETs."""
    if rec.get("piece") or not uploads.name_of(rec["source"]):
        path = tmp / "upload.png"
        path.write_bytes(ctx.store.image(rec["id"]) or b"")
        return path, False
    try:
        return uploads.fetch(ctx.uploads, rec["source"], tmp), True
    except FileNotFoundError:
        raise UsageError(
            f"the upload {uploads.name_of(rec['source'])} is not in the uploads folder {ctx.uploads} "
            "(worker --uploads, INR_FIT_UPLOADS): the API and the workers must share that folder, or a bucket"
        ) from None


def read_kept(path: Path, args) -> tuple[np.ndarray, dict]:
    """A kept upload reduced to the size its fit asks for (`size`, the grid's pixel limit), as load_image's pair."""
    width, height = regions.image_size(path)
    dims = fit_dims(width, height, args.size, False, args.max_pixels)
    img = regions.read_scaled(path, max(dims))
    return img, {
        "kind": "file",
        "path": path.name,
        "original_size": [width, height],
        "size": [img.shape[1], img.shape[0]],
    }


def within_memory(memory: int) -> int:
    """The most pixels one model may have in this worker (training/worker/memory.py); UsageError when none fits."""
    pixels = sizing.one_model_pixels(memory)
    if pixels < MIN_PIXELS:
        raise UsageError(
            f"a fit needs at least {sizing.one_model_peak(MIN_PIXELS) >> 20} MiB; this worker has {memory >> 20} MiB "
            "(worker --memory, INR_FIT_WORKER_MEMORY)"
        )
    return pixels


def release(ctx: JobContext, done: dict | None) -> None:
    """A job that ended needs its kept upload no more; a piece never owns one."""
    if done is not None and not done.get("piece") and done["state"] in FINISHED:
        uploads.release(ctx.uploads, done.get("source") or {})


def run_job(ctx: JobContext, job_id: str, attempt: int) -> dict | None:
    """Claim the job's attempt and fit it; the record as it ends (None: not ours to run). Traced, in the trace
    of the API's enqueue span that the record keeps: `inr.fit.claim`, then `inr.fit` (progress as events) with
    `inr.fit.export` and `inr.fit.write` in it."""
    claimed = time.time_ns()
    rec = ctx.store.claim(job_id, attempt, ctx.worker)
    if not rec:
        return None
    if not tracing.ON:
        done = run_claimed(ctx, rec)
        release(ctx, done)
        return done
    parent = tracing.parent_from(rec.get("traceparent"))
    attrs = {"inr.fit.job": job_id, "inr.fit.attempt": attempt, "inr.fit.worker": ctx.worker}
    tracing.tracer.start_span("inr.fit.claim", context=parent, attributes=attrs, start_time=claimed).end()
    with tracing.span(
        "inr.fit", context=parent, attributes={**attrs, "inr.fit.name": rec["name"], "inr.fit.steps": rec["steps"]}
    ):
        done = run_claimed(ctx, rec)
        release(ctx, done)
        tracing.annotate({"inr.fit.state": (done or {}).get("state") or "dropped"})
        return done


def run_claimed(ctx: JobContext, rec: dict) -> dict | None:
    """Fit the claimed job and end it; its start and its end are one log line each (INFO; a failure a WARNING).
    Then what the job left to run after its end (`ctx.then`: the publish its last piece claimed), whose lines come
    after the job's own."""
    log.info("fit %s: %s", rec["id"], what(rec))
    start = time.monotonic()
    try:
        done = fit_and_end(ctx, rec)
        said(rec, done, time.monotonic() - start)
    finally:
        while ctx.then:  # a claimed publish runs even when the piece's line could not be said
            ctx.then.pop(0)()
    return done


def what(rec: dict) -> str:
    """The job as its start's log line says it: the model, the image, the preset and the steps, or the piece."""
    o, src = rec["options"], rec.get("source") or {}
    size = f"{src['width']}×{src['height']} " if src.get("width") and src.get("height") else ""
    image = f"{size}{src.get('filename') or 'upload'}"
    attempt = f", attempt {rec['attempt']}" if rec.get("attempt", 1) > 1 else ""
    if rec.get("piece"):
        return (
            f"piece {rec['piece']} of fit {rec['parent']} ({image} into {rec['name']}), {rec['steps']} steps{attempt}"
        )
    return f"{image} into {rec['name']}, preset {o['preset']}, {rec['steps']} steps{attempt}"


def said(rec: dict, done: dict | None, seconds: float) -> None:
    """The end's log line: the state, and for a fitted model or piece its PSNR over all pixels and SSIM."""
    if done is None:
        return  # not ours any more: said where it was found out
    state, job = done["state"], rec["id"]
    if state == "succeeded":
        m = done.get("metrics") or {}
        quality = f"PSNR {m['full_psnr']:.2f} dB over all pixels" if m.get("full_psnr") is not None else "no PSNR"
        if m.get("ssim") is not None:
            quality += f", SSIM {m['ssim']:.4f}"
        target = f"piece {rec['piece']}" if rec.get("piece") else f"{done['name']} version {done.get('version')}"
        log.info("fit %s: %s done in %.1f s: %s", job, target, seconds, quality)
    elif state == "running" and done.get("children"):
        log.info("fit %s: split in %.1f s; its %d pieces are on the queue", job, seconds, len(done["children"]))
    elif state == "queued":
        log.info("fit %s: handed back to the queue after %.1f s", job, seconds)
    elif state == "failed":
        log.warning("fit %s: failed after %.1f s: %s", job, seconds, done.get("error"))
    else:
        log.info("fit %s: %s after %.1f s", job, state, seconds)


def eta(pace: dict, done: int, steps: int, now: float) -> float | None:
    """Seconds left: the steps to go at the pace since the first step, and the finish (a grid's refit of its finest
    level, the evaluation over every pixel, the export), which goes over the pixels as the start before the first
    step did and is counted as long as it took (FINISH_PER_SETUP). None at the first step: no pace yet."""
    if done <= pace["done"]:
        return None
    rate = (now - pace["time"]) / (done - pace["done"])
    return round(rate * (steps - done) + FINISH_PER_SETUP * pace["setup"], 2)


def fit_and_end(ctx: JobContext, rec: dict) -> dict | None:
    store, job_id = ctx.store, rec["id"]
    try:
        return fit(ctx, rec)
    except Stop as stop:
        if stop.state is None:
            log.warning("fit %s: %s", job_id, stop.reason)
            return None
        if stop.state == "queued":
            return store.hand_back(rec, stop.reason)
        return ended(
            store,
            store.finish(
                rec,
                stop.state,
                reason="deadline" if stop.state == "failed" else None,
                error=stop.reason if stop.state == "failed" else None,
            ),
        )
    except (UsageError, SpecError, ValueError) as e:  # fitmetrics' reason: the job's input or options
        return ended(
            store,
            store.finish(
                rec,
                "failed",
                reason="invalid",
                error=f"{e.__class__.__name__}: {e}" if not isinstance(e, UsageError) else str(e),
            ),
        )
    except Exception as e:  # noqa: BLE001 - a job fails with its reason; the worker carries on
        log.exception("fit %s failed", job_id)
        return ended(store, store.finish(rec, "failed", reason="error", error=f"{e.__class__.__name__}: {e}"))


def ended(store: FitStore, rec: dict | None) -> dict | None:
    """A piece of a larger image that failed or was cancelled ends its job too (fitstore/pieces.py)."""
    if rec is not None:
        store.child_ended(rec)
    return rec


def fit(ctx: JobContext, rec: dict) -> dict:
    store, opts = ctx.store, rec["options"]
    out = ctx.models.target(rec["name"])
    check_target(out)
    deadline = rec["started"] + rec["deadline_s"]
    with tempfile.TemporaryDirectory(prefix="inr-fit-") as tmp:
        path, kept = upload_file(ctx, rec, Path(tmp))
        args = fit_args(opts, path, ctx.device, rec["steps"] if rec.get("piece") else None)
        if opts.get("size"):  # fitted whole, reduced: no more pixels than one model this worker can hold
            args.max_pixels = min(args.max_pixels, within_memory(ctx.memory))
        if not kept:
            cfg = fit_config(args)
            cfg.validate()
        layout = None if rec.get("piece") else pieces.plan(rec["id"], opts, path, ctx.memory, args.max_pixels)
        if layout is not None and opts.get("target_bytes") is not None:
            raise UsageError(
                f"target_bytes is for one model; this {layout.width}×{layout.height} upload is fitted in blocks of "
                f"{layout.block} (more than one worker's model): give target_psnr (each block meets it)"
            )
        if layout is not None:  # too large for one model here, or blocks asked for (training/worker/pieces.py)
            done = pieces.split(store, rec, layout, path, Path(tmp), args)
            if done is not None and kept:  # each block's pixels are in the store now
                uploads.release(ctx.uploads, rec["source"])
            return done
        if kept:  # a large upload fitted whole: read reduced, never decoded whole (training/regions.py)
            img, loaded = read_kept(path, args)
            cfg = fit_config(args, dims=(img.shape[1], img.shape[0]))
            cfg.validate()
        else:
            img, loaded = load_image(str(path), cfg.size, cfg.crop, cfg.max_pixels)
    cfg.image = rec["source"].get("filename") or rec["name"]
    check_every = max(1, min(CHECK_EVERY, cfg.steps // PROGRESS_EVENTS))
    t0, emitted = time.monotonic(), {"events": 0, "step": 0, "time": time.monotonic()}
    pace: dict = {}
    dims = (img.shape[1], img.shape[0])  # the previews' aspect (the closure keeps no reference to the image)

    def check(step: int) -> None:
        if store.cancel_requested(rec["id"]) or (rec.get("parent") and store.cancel_requested(rec["parent"])):
            raise Stop("cancelled", f"cancelled at step {step}")
        if not store.still_mine(rec):
            raise Stop(None, "another process declared this worker dead; dropping the fit")
        if store.now() > deadline:  # the store's clock, which set `started`
            raise Stop(
                "failed",
                f"the fit ran past its deadline of {rec['deadline_s']:g} s (INR_FIT_DEADLINE_S) at step {step}",
            )
        if ctx.stopping is not None and ctx.stopping.is_set():
            raise Stop("queued", f"worker {ctx.worker} stopped (SIGTERM) at step {step}")

    def on_step(step: int, loss: float, model) -> bool:
        """Every few steps: checks; an event every steps/PROGRESS_EVENTS steps or EVENT_EVERY_S seconds."""
        nonlocal rec
        check(step)
        done, now = step + 1, time.monotonic()
        if not pace:  # the first step: what came before it (a grid's pyramid start) is not the steps' pace
            pace.update(time=now, done=done, setup=now - t0)
        last = done == cfg.steps
        if not last and done - emitted["step"] < cfg.steps / PROGRESS_EVENTS and now - emitted["time"] < EVENT_EVERY_S:
            return False
        emitted.update(events=emitted["events"] + 1, step=done, time=now)
        preview = (
            preview_png(model, next(model.parameters()).device, dims)
            if emitted["events"] % PREVIEW_EVERY == 1 or last
            else None
        )
        elapsed, psnr = now - t0, psnr_from_mse(loss, 3)  # finite or None: the event is JSON (docs/training.md)
        written = store.progress(
            rec,
            {
                "step": done,
                "steps": cfg.steps,
                "loss": loss if math.isfinite(loss) else None,
                "psnr": psnr,
                "elapsed_s": round(elapsed, 3),
                "eta_s": eta(pace, done, cfg.steps, now),
            },
            preview,
        )
        if written is None:
            raise Stop(None, "another process declared this worker dead; dropping the fit")
        rec = written
        if tracing.ON:  # coarse progress (about PROGRESS_EVENTS per fit) as events of the `inr.fit` span
            attrs = {"step": done, "loss": float(loss), "psnr": psnr}
            trace.get_current_span().add_event("progress", {k: v for k, v in attrs.items() if v is not None})
        return False

    if rec.get("piece"):  # a block or the overview of a larger image
        piece = fit_piece(cfg, BlockLayout.plan(**rec["layout"]), rec["piece"], img, on_step, check_every)
        check(cfg.steps)
        return pieces.after_piece(ctx, rec, piece, cfg)
    model, history = train(cfg, img, on_step=on_step, every=check_every)
    model = finish(model, cfg, img, history, soft_target=True)  # a target out of reach: the closest model, said
    metrics, full = evaluate(model, img, cfg.protocol)
    check(cfg.steps)  # the last moment a cancel or a lost claim keeps the repository untouched
    source = {
        "kind": "upload",
        "job": rec["id"],
        **{k: rec["source"][k] for k in ("filename", "width", "height", "sha256", "bytes") if k in rec["source"]},
        "size": loaded["size"],
    }
    if tracing.ON:  # the API's load of this version joins the fit's trace (service/engine/control.py)
        source["traceparent"] = tracing.current_traceparent()
    guard = Guard.from_json(rec.get("access"))  # the policy the API allowed this fit to publish over
    preview = preview_pixels(full)
    del img, full  # the export's peak (its parity run decodes the tables) holds neither the image nor its render
    written = export_image_model(model, cfg, out, source, metrics, history, preview, guard)
    warning = missed(((history.get("native_refit") or {}).get("rate")) or {})
    extra = {"warning": warning} if warning else {}
    return store.finish(rec, "succeeded", version=written["version"], metrics=metrics, **extra)
