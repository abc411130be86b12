"""The fit job store: the queue and records that the API (which submits, reads and cancels) and the fit
workers (which claim, report progress and finish) share, on SQLite, Redis or PostgreSQL (docs/fits.md).

    urls.py      the one parser of store URLs (INR_FIT_STORE, `worker --store`)
    backends/    one module per backend: huey on it, its transaction, clock and counters
    store.py     FitStore: jobs, events, previews; the API's calls (submit, read, cancel)
    worker_calls.py  the worker's calls: claim, progress, finish, hand back
    recovery.py  heartbeats; dead workers' jobs retried, lost messages sent again
    pieces.py    a job split into blocks: its pieces on the queue, their progress, the publish
    dedupe.py    jobs by the sha256 of their upload: the index written with each job, and the lookup
    jsontext.py  records and events as strict JSON: a float that is not finite is null
    metrics.py   fit metrics counted in the store, in the transaction of what they count
    presets.py   the sets of fit options a job names
    uploads.py   uploads too large for the store, kept as files in INR_FIT_UPLOADS: names, release, sweep

Torch-free and service-free: the API and the workers both import it; it imports neither.
"""

from .dedupe import Duplicate
from .presets import DEFAULT_PRESET, PRESETS, RD_LAMBDA, TARGET_BYTES, TARGET_PSNR
from .recovery import MAX_FAILURES
from .store import FINISHED, STATES, FitStore, JobFinished, NameTaken, QueueFull, new_id, worker_id
from .urls import DEFAULT, StoreError, StoreUrl, check_url

__all__ = [
    "DEFAULT",
    "DEFAULT_PRESET",
    "Duplicate",
    "FINISHED",
    "MAX_FAILURES",
    "PRESETS",
    "STATES",
    "TARGET_BYTES",
    "TARGET_PSNR",
    "RD_LAMBDA",
    "FitStore",
    "JobFinished",
    "NameTaken",
    "new_id",
    "QueueFull",
    "StoreError",
    "StoreUrl",
    "check_url",
    "worker_id",
]
