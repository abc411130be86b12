"""`python -m training worker`: take fit jobs from the store (docs/fits.md) and fit them, one at a time.

The loop is huey's primitives (scheduled messages moved to the queue when due, an atomic dequeue,
`execute`); it is ours rather than huey's consumer so that SIGTERM lets the current fit hand its job
back at the next progress step instead of abandoning it. A heartbeat thread keeps the worker's seat in
the store and reaps jobs whose workers died.

Its folders are this user's alone (issue 54): the S3 model cache (`--model-cache`, by default
`$XDG_CACHE_HOME/inr-serve/fit-models`, else `~/.cache/inr-serve/fit-models`) and its temporary files (an upload read
from the bucket, its tiled copy, a version staged for S3: `$XDG_CACHE_HOME/inr-serve/fit-uploads`), made 0700 and
never in TMPDIR; one another user owns or can write stops the start in one line, exit 2, before anything is read or
written (modelrepo/private_dir.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path

from commandline import byte_size, positive_float, positive_int
from fitstore import DEFAULT as DEFAULT_STORE
from fitstore import FitStore, StoreError, uploads, worker_id
from modelrepo import LocationError, StorageUnavailable, is_s3, open_repository
from modelrepo.private_dir import UnsafeFolder, check, default_cache, ensure
from modelrepo.s3publish import GRACE_S
from telemetry import tracing
from telemetry.config import TraceConfigError, read_config

from ..errors import UsageError
from . import memory as sizing
from .job import JobContext, run_job

log = logging.getLogger(__name__)
LOG_LEVELS = ("debug", "info", "warning", "error")


class Heartbeat(threading.Thread):
    def __init__(self, store: FitStore, seat: int, wid: str, every_s: float, info: dict):
        super().__init__(name="fit-heartbeat", daemon=True)
        self.store, self.seat, self.wid, self.every_s, self.info = store, seat, wid, every_s, info
        self.stop = threading.Event()

    def run(self) -> None:
        last_reap = 0.0
        while not self.stop.wait(self.every_s):
            try:
                self.store.beat(self.seat, self.wid, self.info)
                if time.monotonic() - last_reap >= self.store.stale_s / 2:
                    last_reap = time.monotonic()
                    for job in self.store.reap():
                        log.warning("job %s: its worker died; retried or failed", job)
            except Exception:  # noqa: BLE001 - a store hiccup must not stop the heartbeat for good
                log.exception("heartbeat")


def lower_priority(nice: int, threads: int) -> None:
    """Fits yield the CPU to serving: a higher nice value and a bounded number of torch threads."""
    import torch

    if nice:
        os.nice(nice)
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)


def start_traces() -> None:
    """OTEL_* as the service reads them (telemetry.config); a bad one is the CLI's one line, exit 2."""
    try:
        config = read_config()
    except TraceConfigError as e:
        raise UsageError(str(e)) from None
    if config is not None:
        tracing.install(
            config,
            "inr-fit-worker",
            on_drop=lambda reason, n: log.warning("traces: %d span(s) dropped (%s)", n, reason),
        )


SWEEP_EVERY_S = 600.0  # a repository on S3 is swept of dead writers' leftovers at most this often
_swept = [float("-inf")]


def sweep_repository(models) -> None:
    """On S3: delete the versions that workers which died left unpublished (modelrepo/s3publish.py), at most every
    SWEEP_EVERY_S; a failure is logged, never the job's."""
    if not models.remote or time.monotonic() - _swept[0] < SWEEP_EVERY_S:
        return
    _swept[0] = time.monotonic()
    try:
        models.sweep(GRACE_S)
    except StorageUnavailable as e:
        log.warning("sweeping %s: %s", models.url, e)


MODEL_CACHE = "--model-cache / INR_FIT_MODEL_CACHE"


def private_folders(args: argparse.Namespace) -> Path | None:
    """The worker's own folders, checked and made 0700 before anything is read or written (UsageError, one line,
    when another user could write one): its temporary folder, which becomes tempfile's (and TMPDIR for what this
    process runs), and, with models on S3, the model cache, returned (None: models in a folder)."""
    cache = (args.model_cache, MODEL_CACHE) if is_s3(args.models) else None
    scratch = (default_cache(uploads.SCRATCH), uploads.SCRATCH_SETTING)
    try:
        for folder, setting in filter(None, (cache, scratch)):  # all checked before any is made
            check(folder, setting)
        cache_dir, scratch_dir = (ensure(*pair) if pair else None for pair in (cache, scratch))
    except UnsafeFolder as e:
        raise UsageError(str(e)) from None
    tempfile.tempdir = os.environ["TMPDIR"] = str(scratch_dir)
    return cache_dir


def serve_jobs(args: argparse.Namespace) -> int:
    if args.log_level not in LOG_LEVELS:  # from INR_LOG_LEVEL, which argparse's choices do not check
        raise UsageError(f"--log-level / INR_LOG_LEVEL: {args.log_level!r} is not one of {', '.join(LOG_LEVELS)}")
    logging.getLogger().setLevel(args.log_level.upper())  # the worker talks: a line per job's start, piece, end
    # libvips' own notes ("threadpool completed with 2 workers", one per region read) reach pyvips' logger at INFO:
    # only its warnings, unless the worker logs at debug
    logging.getLogger("pyvips").setLevel(logging.DEBUG if args.log_level == "debug" else logging.WARNING)
    cache = private_folders(args)
    start_traces()
    stopping = threading.Event()
    wid = worker_id()
    info = {"host": socket.gethostname(), "pid": os.getpid(), "job": None}
    try:
        models = open_repository(args.models, cache)
        if models.remote:
            models.check()  # the bucket and the credentials, before the first job
    except (LocationError, StorageUnavailable) as e:
        raise UsageError(f"--models: {e}") from None
    except UnsafeFolder as e:  # its key, or a folder within it (modelrepo/s3.py)
        raise UsageError(str(e)) from None
    ctx = JobContext(
        store=None,
        models=models,
        worker=wid,
        device=args.device,
        stopping=stopping,
        uploads=args.uploads if uploads.is_s3(args.uploads) else Path(args.uploads),
        memory=args.memory,
    )

    def run(job_id: str, attempt: int):
        info["job"] = job_id
        try:
            return run_job(ctx, job_id, attempt)
        finally:
            info["job"] = None
            uploads.sweep(ctx.store, ctx.uploads)  # files whose job ended elsewhere (reaped, cancelled)
            sweep_repository(ctx.models)

    try:
        store = FitStore(args.store, stale_s=args.stale_s, run=run)
    except StoreError as e:
        raise UsageError(str(e)) from None
    ctx.store = store
    lower_priority(args.nice, args.threads)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    seat = store.register_worker(wid, info)
    beat = Heartbeat(store, seat, wid, args.heartbeat_s, info)
    beat.start()
    log.info(
        "worker %s ready: store %s, models %s, uploads %s, memory %d MiB (one model up to %.1f MP)",
        wid,
        args.store,
        args.models,
        args.uploads,
        args.memory >> 20,
        sizing.one_model_pixels(args.memory) / 1e6,
    )
    done, idle = 0, 0.05
    try:
        while not stopping.is_set():
            for task in store.huey.read_schedule():
                store.huey.enqueue(task)
            task = store.huey.dequeue()
            if task is None:
                stopping.wait(idle)
                idle = min(idle * 1.5, args.poll_s)
                continue
            idle = 0.05
            ended = store.huey.execute(task)
            done += ended is not None
            if ended is not None:
                store.compact()  # the space of its upload (and a published job's pieces) back to the disk
            if args.once and ended is not None:
                break
    finally:
        beat.stop.set()
        store.unregister_worker(seat, wid)
        store.close()
        tracing.shutdown()  # the last fit's spans, within tracing.SHUTDOWN_S
    return 0


def register(sub) -> None:
    p = sub.add_parser("worker", help="fit the images uploaded to POST /v1/fits (docs/fits.md)")
    p.add_argument(
        "--store",
        default=os.environ.get("INR_FIT_STORE", DEFAULT_STORE),
        help="job store: sqlite:///PATH, redis://HOST:PORT/DB or postgresql://… "
        "(default: $INR_FIT_STORE, else %(default)s)",
    )
    p.add_argument(
        "--uploads",
        default=os.environ.get("INR_FIT_UPLOADS", uploads.DEFAULT),
        help="the API's uploads folder (INR_FIT_UPLOADS), shared, or its bucket (s3://…): an image too large for the "
        "store is read from there by region (default: $INR_FIT_UPLOADS, else %(default)s)",
    )
    p.add_argument(
        "--models",
        default=os.environ.get("INR_MODELS", "models"),
        help="model repository the fits are written to (default: $INR_MODELS, else models)",
    )
    p.add_argument(
        "--model-cache",
        default=os.environ.get("INR_FIT_MODEL_CACHE") or str(default_cache("fit-models")),
        help="with --models on S3: the folder the models are mirrored into, this user's alone (another user's, or "
        "one group or others can write, is refused) (default: $INR_FIT_MODEL_CACHE, else %(default)s)",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=int(os.environ.get("INR_FIT_THREADS", "1")),
        help="torch threads per fit (default: $INR_FIT_THREADS, else 1)",
    )
    p.add_argument(
        "--nice",
        type=int,
        default=10,
        choices=range(0, 20),
        metavar="0..19",
        help="CPU priority below the service's (default: 10)",
    )
    p.add_argument(
        "--memory",
        type=byte_size,
        default=os.environ.get("INR_FIT_WORKER_MEMORY", "2GiB"),
        help="the memory this worker may use, e.g. 3GiB: an upload whose one-model fit needs more (measured, "
        "docs/fits.md) is fitted in blocks (default: $INR_FIT_WORKER_MEMORY, else 2GiB)",
    )
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--heartbeat-s", type=positive_float, default=2.0, help="seconds between heartbeats")
    p.add_argument(
        "--stale-s",
        type=positive_float,
        default=float(os.environ.get("INR_FIT_STALE_S", "15")),
        help="a worker silent this long is dead; its job is retried once (default: $INR_FIT_STALE_S, else 15)",
    )
    p.add_argument(
        "--poll-s", type=positive_float, default=0.25, help="longest wait between queue polls (default: 0.25)"
    )
    p.add_argument("--once", action="store_true", help="exit after one job has ended")
    p.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=os.environ.get("INR_LOG_LEVEL", "info").lower(),
        help="info (the default, $INR_LOG_LEVEL): a line as each job or piece starts and ends, with its PSNR and "
        "time; warning: failures only",
    )
    p.set_defaults(func=serve_jobs)
