"""The API's side of fits (docs/fits.md): one job store per app, its blocking calls off the event loop.

The store (`fitstore.FitStore`, huey's storage: SQLite, Redis or PostgreSQL) is opened on
first use and closed at shutdown. Workers (`python -m training worker`) fit; the API only queues,
reads, streams and cancels. Nothing here imports torch or `training/`.

Records leave the API with `links`, `workers` (live heartbeats) and, while queued with no worker, a
`note` saying so. The API also reaps: a running job whose worker stopped sending heartbeats goes
back to the queue once, then fails (at most one reap every REAP_EVERY_S per process).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time

import anyio

from fitstore import FINISHED, PRESETS, Duplicate, FitStore, JobFinished, NameTaken, QueueFull, StoreUrl, uploads
from modelrepo import LocalRepository, Repository
from telemetry import tracing

from ..errors import Conflict, NotFound, TooManyRequests
from ..settings import Settings
from .upload import Upload, check_target, derive_name

REAP_EVERY_S = 2.0
CANCEL_WAIT_S = 5.0
POLL_S = 0.25


def no_worker(settings: Settings) -> str:
    """The note of a job that waits for no worker: the command that starts one on this service's store and models
    (`make worker` is that command for `make serve`'s defaults)."""
    cmd = f".venv/bin/python -m training worker --store {settings.fit_store} --models {settings.models}"
    if str(settings.fit_uploads) != uploads.DEFAULT:
        cmd += f" --uploads {settings.fit_uploads}"
    make = " `make worker` in the repository, or" if cmd.endswith(MAKE_WORKER) else ""
    return f"no worker is connected; start one with{make}: {cmd}"


MAKE_WORKER = "--store sqlite:///build/fits.sqlite --models models"  # what `make worker` runs (Makefile)


class Fits:
    def __init__(self, settings: Settings, repository: Repository | None = None):
        self.settings = settings
        self.repository = repository or LocalRepository(settings.models)  # where fits are published (a name taken?)
        self._store: FitStore | None = None
        self._opening = threading.Lock()
        self._naming = asyncio.Lock()  # a derived name is unique among this process's submits too
        self._reaped = -math.inf

    # -- the store, off the event loop -------------------------------------------------------------
    def store(self) -> FitStore:
        with self._opening:
            if self._store is None:
                self._store = FitStore(self.settings.fit_store, stale_s=self.settings.fit_stale_s)
            return self._store

    def created(self) -> bool:
        """False while the store is a SQLite file nobody has created (no fit yet): a scrape does not create it."""
        return self._store is not None or StoreUrl.parse(self.settings.fit_store).exists()

    async def call(self, method: str, *args, **kwargs):
        return await anyio.to_thread.run_sync(lambda: getattr(self.store(), method)(*args, **kwargs))

    def close(self) -> None:
        with self._opening:
            if self._store is not None:
                self._store.close()
                self._store = None

    async def reap(self) -> None:
        if time.monotonic() - self._reaped >= REAP_EVERY_S:
            self._reaped = time.monotonic()
            await self.call("reap")

    # -- what routes need ----------------------------------------------------------------------------
    async def submit(
        self,
        upload: Upload,
        options: dict,
        name: str | None,
        reuse: bool = False,
        job_id: str | None = None,
        visible=None,
        admit=None,
        access: dict | None = None,
    ) -> tuple[int, dict]:
        """Queue a normalised upload: (202, the new record). Without a name, one derived from the file name and
        made unique against the repository's folders and the targets of queued, running and succeeded jobs: the
        store checks it again in the transaction that inserts the job, and a name another process took first
        is passed over for the next. 429 when full. With `reuse` (`skip_existing`), a job queued, running or
        succeeded with the same bytes is answered instead, (200, its record), checked in that transaction too.
        `job_id`: the id the job gets (an upload kept as a file is named after it, fitstore.uploads). `visible`: the
        jobs the caller may see (only those are reused); `admit(records)`: the caller's quotas, in the transaction;
        `access`: the guard the worker checks when it publishes (service/auth/fitaccess.py)."""
        with tracing.span(
            "inr.fit.enqueue",
            attributes={"inr.fit.preset": options.get("preset", ""), "inr.fit.steps": options.get("steps", 0)},
        ):
            try:
                return 202, await self._submit(upload, options, name, reuse, job_id, visible, admit, access)
            except Duplicate as e:
                tracing.annotate({"inr.fit.job": e.record["id"], "inr.fit.reused": True})
                return 200, await self.present(e.record)

    async def fitted(self, sha256: str, visible=None) -> dict | None:
        """The newest job queued, running or succeeded whose upload had these bytes (and that `visible` lets the
        caller see), as the API shows it."""
        record = await self.call("fitted", sha256, visible)
        return None if record is None else await self.present(record)

    def _fits_folder_may_hold(self, name: str) -> None:
        """409 for a name another repository holds when fits have a folder of their own (INR_FIT_MODELS): its
        version would be written beside the model, never served over it."""
        fits = getattr(self.repository, "writable", None)  # modelrepo/union.py
        if fits is None or fits.folder(name) is not None or self.repository.folder(name) is None:
            return
        raise Conflict(
            f"model '{name}' is in {self.repository.part(name).url} (INR_MODELS), which fits do not write; fits go "
            f"into {fits.url} (INR_FIT_MODELS): choose another name"
        )

    async def _submit(
        self, upload: Upload, options: dict, name: str | None, reuse: bool, job_id: str | None, visible, admit, access
    ) -> dict:
        """submit, in the `inr.fit.enqueue` span whose context the record keeps (the worker's spans continue it)."""
        s = self.settings
        trace = tracing.current_traceparent()
        derived, passed = name is None, set()
        if not derived:
            await anyio.to_thread.run_sync(check_target, name, self.repository)
            await anyio.to_thread.run_sync(self._fits_folder_may_hold, name)
        async with self._naming:
            while True:
                if derived:
                    active = await self.call("active_names")
                    name = await anyio.to_thread.run_sync(
                        derive_name,
                        upload.source.get("filename", ""),
                        lambda n: n in active or n in passed or self.repository.folder(n) is not None,
                    )
                try:
                    record = await self.call(
                        "submit",
                        name=name,
                        options=options,
                        image_png=upload.png,
                        source=upload.source,
                        deadline_s=s.fit_deadline_s,
                        max_running=s.fit_max_running,
                        queue_limit=s.fit_queue_limit,
                        derived=derived,
                        traceparent=trace,
                        reuse=reuse,
                        job_id=job_id,
                        visible=visible,
                        admit=admit,
                        access=access,
                    )
                    break
                except NameTaken:
                    passed.add(name)
                except QueueFull as e:
                    raise TooManyRequests(
                        f"{e.active} fits are queued or running; the limit is {e.limit} (INR_FIT_MAX_RUNNING="
                        f"{s.fit_max_running} + INR_FIT_QUEUE_LIMIT={s.fit_queue_limit}): retry after "
                        f"{math.ceil(e.retry_after)} s",
                        e.retry_after,
                    ) from None
        tracing.annotate({"inr.fit.job": record["id"], "inr.fit.name": record["name"]})
        return await self.present(record)

    async def record(self, job_id: str, visible=None) -> dict:
        """The raw record, or 404: also for a job `visible(record)` does not let the caller see (its existence is
        not told either)."""
        record = await self.call("get", job_id)
        if record is None or (visible is not None and not visible(record)):
            raise NotFound(f"unknown fit job '{job_id}'")
        return record

    async def get(self, job_id: str, visible=None) -> dict:
        await self.reap()
        record = await self.record(job_id, visible)
        if record.get("state") == "running" and record.get("children"):  # in pieces: their progress (docs/fits.md)
            record.update(await self.call("pieces_progress", record))
        if record.get("state") == "running" and await self.call("cancel_requested", job_id):
            record["cancel_requested"] = True  # a DELETE answered 202: the worker stops at its next step
        return await self.present(record)

    async def list(self, sha256: str | None = None, visible=None) -> list[dict]:
        """The newest jobs, newest first; with `sha256`, the jobs whose upload had those bytes, in any state; only
        those `visible(record)` lets the caller see."""
        await self.reap()
        workers = len(await self.call("workers"))
        records = await (self.call("with_sha256", sha256) if sha256 else self.call("list"))
        return [present(r, workers, no_worker(self.settings)) for r in records if visible is None or visible(r)]

    async def cancel(self, job_id: str, visible=None) -> tuple[int, dict]:
        """200 with the cancelled record; 202 while a running job's worker has not stopped after
        CANCEL_WAIT_S; 409 for a finished job, 404 for an unknown one (or one `visible` hides from the caller)."""
        await self.record(job_id, visible)
        try:
            record = await self.call("cancel", job_id)
        except KeyError:
            raise NotFound(f"unknown fit job '{job_id}'") from None
        except JobFinished as e:
            raise Conflict(
                f"fit job '{job_id}' is already {e.record.get('state')}; only a queued or running job can be cancelled"
            ) from None
        end = time.monotonic() + CANCEL_WAIT_S
        while record.get("state") not in FINISHED and time.monotonic() < end:
            await asyncio.sleep(POLL_S)
            record = await self.record(job_id)
        if record.get("state") in FINISHED and record.get("state") != "cancelled":
            raise Conflict(f"fit job '{job_id}' {record['state']} before the cancel reached its worker")
        if record.get("state") == "cancelled":
            await anyio.to_thread.run_sync(uploads.release, self.settings.fit_uploads, record.get("source") or {})
            return 200, await self.present(record)
        return 202, await self.present({**record, "cancel_requested": True})  # the store keeps it apart

    async def preview(self, job_id: str, seq: int, visible=None) -> tuple[bytes, dict]:
        """The PNG of event `seq`, and its job's record (what its caching depends on); 404 as `record`."""
        record = await self.record(job_id, visible)
        png = await self.call("preview", job_id, seq)
        if png is None:
            raise NotFound(f"fit job '{job_id}' has no preview at event {seq}")
        return png, record

    async def pieces_event(self, record: dict) -> dict:
        """A job fitted in pieces as a `progress` event of a one-model job (docs/fits.md): its pieces' steps, their
        training PSNR, an ETA that counts the pieces still queued, the whole image's latest preview, and `pieces`."""
        p = await self.call("pieces_progress", record)
        event = {k: p[k] for k in ("step", "steps", "loss", "psnr", "eta_s", "pieces")}
        event.update(type="progress", time=time.time(), preview=None)
        if p.get("preview_of"):
            event["preview"] = f"/v1/fits/{p['preview_of']['job']}/previews/{p['preview_of']['seq']}.png"
        return event

    async def present(self, record: dict) -> dict:
        return present(record, len(await self.call("workers")), no_worker(self.settings))


def present(record: dict, workers: int, note: str = "no worker is connected") -> dict:
    """The record as the API shows it: with `links`, `workers` and, when it waits for none, a `note`."""
    out = dict(record)
    job = out["id"]
    base = f"/v1/fits/{job}"
    links = {"self": base, "events": f"{base}/events"}
    seq = record.get("preview_seq")  # the event seq of the latest preview (fitstore)
    if seq is not None:
        links["preview"] = f"{base}/previews/{seq}.png"
    elif record.get("preview_of"):  # a job in pieces: the overview's, the whole image (fitstore/pieces.py)
        links["preview"] = f"/v1/fits/{record['preview_of']['job']}/previews/{record['preview_of']['seq']}.png"
    name, version = out.get("name"), out.get("version")
    if out.get("state") == "succeeded" and name and version:
        links.update(
            model=f"/v1/models/{name}",  # its versions, this one among them
            render=f"/v1/models/{name}/versions/{version}/render?width=512",
            iiif=f"/iiif/3/{name}/info.json",
            viewer=f"/?model={name}",
        )
    out["links"] = links
    out["workers"] = workers
    if out.get("state") == "queued" and workers == 0:
        out["note"] = note
    return out


def event_data(job_id: str, event: dict) -> dict:
    """An event as SSE data: a stored `"preview": true` becomes the preview's URL."""
    data = dict(event)
    if data.get("preview") is True:
        data["preview"] = f"/v1/fits/{job_id}/previews/{data['seq']}.png"
    return data


__all__ = ["Fits", "PRESETS", "FINISHED", "present", "event_data"]
