"""/v1/fits: upload an image to fit, follow the fit, cancel it (docs/fits.md; restricted group `fit`).

Thin routes: the upload is checked in service/fits/upload.py, the job store is reached through
service/fits/jobs.py; the workers (`python -m training worker`) do the fitting.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Annotated, AsyncIterator, Callable

import anyio
from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from fitstore import DEFAULT_PRESET, new_id, uploads
from fitstore.uploads import file_name
from modelrepo.private_dir import default_cache, ensure

from ...auth.caching import cache_control
from ...auth.fitaccess import guard_for, may_see, public, requested
from ...auth.policy import Caller, who
from ...auth.quotas import fit_refusal
from ...errors import AccessDenied, BadInput, InvalidOption, RepositoryUnavailable, TooManyRequests, UnsupportedMedia
from ...fits.files import received
from ...fits.jobs import FINISHED, POLL_S, PRESETS, Fits, event_data
from ...fits.stream import Reader, StreamedFile
from ...fits.upload import FIELDS, as_bool, check_cost, check_name, options
from ..deps import SettingsDep, get_caller
from ..schemas import ErrorBody

audit = logging.getLogger("inr.audit")  # one line per fit action, naming the key id, never a secret
router = APIRouter(prefix="/v1/fits", tags=["fits"])
JobId = Annotated[str, Path(description="the job's id", max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
KEEPALIVE_S = 15.0
PIECES_ETA_EVERY_S = 2.0  # a job in pieces: a progress event at least this often, for its ETA
ERRORS = {c: {"model": ErrorBody} for c in (400, 401, 403, 404, 409, 413, 415, 422, 429)}
Sha256 = Annotated[
    str | None,
    Query(description="only the jobs whose upload had these bytes (sha256, hex)", pattern=r"^[0-9a-fA-F]{64}$"),
]
UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "the image: PNG, JPEG, GIF, WebP, TIFF …",
                        },
                        "preset": {"type": "string", "enum": list(PRESETS), "default": DEFAULT_PRESET},
                        "size": {
                            "type": "integer",
                            "description": "cap on the longer side, 16 … INR_FIT_MAX_SIZE; default: the "
                            "whole image at its native size (at most INR_MAX_UPLOAD_PIXELS pixels)",
                        },
                        "steps": {"type": "integer", "description": "1 … INR_FIT_MAX_STEPS; default: the preset's"},
                        "protocol": {"type": "string", "enum": ["paper", "full"], "default": "full"},
                        "seed": {"type": "integer", "default": 0},
                        "name": {
                            "type": "string",
                            "description": "target model; default: from the file name, made unique",
                        },
                        "skip_existing": {
                            "type": "boolean",
                            "default": False,
                            "description": "when a job queued, running or succeeded had the same file bytes "
                            "(sha256), answer 200 with that job's record instead of queueing another",
                        },
                    },
                }
            }
        },
    }
}


def fits(request: Request) -> Fits:
    return request.app.state.fits


def may_fit(request: Request, settings) -> Caller:
    """The caller, when it may queue or cancel fits: anyone with INR_FIT_ACCESS=open; with `key`, a token or API
    key with the scope fit or admin (401 without credentials, 403 without the scope)."""
    caller = get_caller(request)
    if settings.fit_access == "key" and not (caller.claims and caller.claims.scopes & {"fit", "admin"}):
        if caller.anonymous:
            raise AccessDenied(401, "fits need an API key or token with the scope fit (INR_FIT_ACCESS=key)")
        raise AccessDenied(403, f"{who(caller)} has no scope fit (INR_FIT_ACCESS=key)")
    return caller


def quotas_of(request: Request, caller: Caller, upload_bytes: int) -> Callable[[list[dict]], None] | None:
    """The caller's key's fit quotas as a check of the store's newest records (service/auth/quotas.py): 429 with
    Retry-After when over one. None for a caller without quotas."""
    sub = caller.claims.sub if caller.claims is not None else ""
    record = request.app.state.authority.keys.get(sub[4:]) if sub.startswith("key:") else None
    if record is None or not record.quotas:
        return None

    def admit(jobs: list[dict]) -> None:
        refusal = fit_refusal(record.id, record.quotas, jobs, upload_bytes)
        if refusal is not None:
            audit.info("fit refused key=%s: %s", record.id, refusal.message)
            raise TooManyRequests(refusal.message, refusal.retry_after)

    return admit


def viewer(request: Request) -> Callable[[dict], bool]:
    """Which fit records the caller may see (service/auth/fitaccess.py): its own, an admin's, open fits of models
    it may read; the others are unknown jobs to it (404). With INR_FIT_ACCESS=key, none without credentials (401)."""
    caller, registry = get_caller(request), request.app.state.registry
    if caller.anonymous and request.app.state.settings.fit_access == "key":
        raise AccessDenied(401, "fits need an API key or token (INR_FIT_ACCESS=key)")
    return lambda record: may_see(caller, record, registry.access_of, registry.access_default)


def guard(request: Request, caller: Caller, name: str | None, fields: dict) -> dict:
    """Whether the caller may fit into `name` and set the policy the form asks for (401/403), as the guard the
    worker checks again when it writes the version (modelrepo.access.Guard)."""
    registry = request.app.state.registry
    current = registry.access_of(name) if name else None  # a derived name is a new model
    return guard_for(caller, name or "", current, requested(fields), registry.access_default).to_json()


@router.post(
    "",
    status_code=202,
    openapi_extra=UPLOAD_BODY,
    responses={**ERRORS, 200: {"description": "skip_existing: a job with the same bytes, answered instead"}},
)
async def submit(request: Request, settings: SettingsDep):
    """Queue a fit of the uploaded image (202 with the job's record and `Location`). The upload and the
    options are checked before anything is queued; over the queue limit, 429 with Retry-After. With
    `skip_existing`, a job queued, running or succeeded with the same file bytes: 200 with its record."""
    caller = may_fit(request, settings)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "multipart/form-data":
        raise UnsupportedMedia(
            f"content type '{kind or 'none'}' is not accepted; send multipart/form-data with the image as 'file'"
        )
    private = (
        ensure(default_cache(uploads.SCRATCH), uploads.SCRATCH_SETTING) if uploads.is_s3(settings.fit_uploads) else None
    )
    reader = Reader(uploads.scratch(settings.fit_uploads, private), len(FIELDS))
    items = await reader.read(request)  # the image streamed into INR_FIT_UPLOADS, hashed on the way
    kept = None  # the upload, once kept as the job's file
    try:
        fields: dict[str, str] = {}
        upload: StreamedFile | None = None
        for key, value in items:
            if key not in FIELDS:
                raise InvalidOption(f"unexpected form field '{key[:40]}'; fields: {', '.join(FIELDS)}")
            if key == "file":
                if not isinstance(value, StreamedFile):
                    raise BadInput("'file' must be an uploaded file, not a text field")
                upload = value
            elif not isinstance(value, str):
                raise InvalidOption(f"'{key}' must be a text field, not a file")
            else:
                fields[key] = value
        if upload is None:
            raise BadInput("no 'file' in the upload; send the image as the form field 'file'")
        opts = options(
            fields,
            PRESETS,
            settings.fit_max_size,
            settings.fit_max_steps,
            settings.fit_block_size,
            settings.fit_block_overlap,
        )
        name = check_name(fields["name"]) if fields.get("name") else None
        access = guard(request, caller, name, fields)
        reuse, visible = as_bool(fields, "skip_existing"), viewer(request)
        same = await fits(request).fitted(upload.sha256, visible) if reuse else None  # seen: no decode
        if same is not None:
            return JSONResponse(same, status_code=200, headers={"location": same["links"]["self"]})
        admit = quotas_of(request, caller, upload.size)
        if admit is not None:  # before the decode; counted again in the store's transaction
            admit(await fits(request).call("list"))
        image = await anyio.to_thread.run_sync(
            received, upload, settings.fit_max_upload_bytes, settings.max_upload_pixels, settings.fit_max_upload_pixels
        )
        if caller.anonymous:
            check_cost(image.source, opts.get("size"), settings.fit_anonymous_max_pixels)
        if caller.claims is not None:  # whose fit it is (the quotas count it; never a secret)
            image.source.update(owner=caller.claims.sub, bytes=upload.size)
        job_id = None
        if image.path is not None:  # kept as a file, named after its job: the worker reads it by region
            job_id = new_id()
            kept_as = file_name(job_id, image.source["format"].lower())
            try:  # renamed into the uploads folder, or put into the bucket (fitstore/uploads.py)
                await anyio.to_thread.run_sync(uploads.keep, settings.fit_uploads, image.path, kept_as)
            except uploads.UploadsUnavailable as e:
                raise RepositoryUnavailable(f"the upload was not kept: {e}") from None
            kept = image.source["upload"] = kept_as
        status, record = await fits(request).submit(
            image, opts, name, reuse, job_id, visible, admit, access
        )  # reuse and the quotas: checked again, in the store's transaction
        if status == 202:
            kept = None  # the job's now: its worker deletes it (fitstore.uploads)
            audit.info("fit queued job=%s name=%s by=%s", record["id"], record["name"], who(caller))
    finally:
        reader.discard()
        if kept is not None:  # not queued: the kept file goes again
            await anyio.to_thread.run_sync(uploads.release, settings.fit_uploads, {"upload": kept})
    return JSONResponse(record, status_code=status, headers={"location": record["links"]["self"]})


@router.get("", responses=ERRORS)
async def list_fits(request: Request, sha256: Sha256 = None):
    """The newest jobs, newest first; with `sha256`, the jobs (any state) whose upload had those bytes."""
    return {"fits": await fits(request).list(sha256.lower() if sha256 else None, viewer(request))}


@router.get("/{job_id}", responses=ERRORS)
async def get_fit(request: Request, job_id: JobId):
    """One job: state, step, loss, PSNR, ETA; once succeeded, the model's version and links."""
    return await fits(request).get(job_id, viewer(request))


@router.delete(
    "/{job_id}", responses={**ERRORS, 202: {"description": "cancel requested; the worker has not stopped yet"}}
)
async def cancel_fit(request: Request, job_id: JobId, settings: SettingsDep):
    """Cancel a queued or running job: 200 cancelled, 202 while its worker stops; 409 when finished."""
    caller = may_fit(request, settings)
    status, record = await fits(request).cancel(job_id, viewer(request))
    audit.info("fit cancelled job=%s status=%d by=%s", job_id, status, who(caller))
    return JSONResponse(record, status_code=status)


@router.get(
    "/{job_id}/previews/{seq}.png",
    response_class=Response,
    responses={**ERRORS, 200: {"content": {"image/png": {}}, "description": "the 64×64 preview of event SEQ"}},
)
async def preview(request: Request, job_id: JobId, seq: Annotated[int, Path(ge=1)]):
    png, record = await fits(request).preview(job_id, seq, viewer(request))
    registry = request.app.state.registry
    private = not public(record, registry.access_of, registry.access_default)  # a restricted model's new pixels
    return Response(
        png, media_type="image/png", headers={"cache-control": cache_control(private, 86400, immutable=True)}
    )


@router.get(
    "/{job_id}/events",
    response_class=StreamingResponse,
    responses={**ERRORS, 200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events"}},
)
async def events(
    request: Request,
    job_id: JobId,
    last_event_id: Annotated[str | None, Header(include_in_schema=False)] = None,
    after: Annotated[int | None, Query(alias="last_event_id", ge=0)] = None,
):
    """Server-Sent Events (`id`, `event`, `data`), from after `Last-Event-ID` (header or `?last_event_id=`);
    the stream ends after the final event. On a finished job: the whole history, then the end."""
    start = after or 0
    if last_event_id is not None:
        if not last_event_id.strip().isdigit():
            raise InvalidOption(f"Last-Event-ID must be an event number, got {last_event_id[:20]!r}")
        start = int(last_event_id)
    service = fits(request)
    await service.record(job_id, viewer(request))  # 404 before the stream starts
    return StreamingResponse(
        stream(request, service, job_id, start),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )


async def stream(request: Request, service: Fits, job_id: str, after: int) -> AsyncIterator[str]:
    """Poll the store every POLL_S while the job runs; after a finished record, one last read of the
    events (the final one may land just after the state), then the end. A job fitted in pieces gets `progress`
    events made from its pieces (`Fits.pieces_event`), the fields of a one-model job's, with no `id`: they are not
    stored, and a client that reconnects resumes after the last stored event."""
    yield "retry: 1000\n\n"
    idle, finished_seen = 0.0, False
    drain = request.app.state.drain
    pieces: tuple = ((), 0.0)  # the last pieces event sent, and when
    while True:
        await service.reap()  # a dead worker's job is retried or failed, never left running
        record = await service.record(job_id)
        new = await service.call("events", job_id, after)
        for event in new:
            after = event["seq"]
            data = json.dumps(event_data(job_id, event), separators=(",", ":"))
            yield f"id: {event['seq']}\nevent: {event['type']}\ndata: {data}\n\n"
        if record.get("state") == "running" and record.get("children"):
            event = await service.pieces_event(record)
            changed = [event[k] for k in ("step", "psnr", "preview", "pieces")]
            if changed != pieces[0] or time.monotonic() - pieces[1] >= PIECES_ETA_EVERY_S:
                pieces = (changed, time.monotonic())
                new = new or [event]
                yield f"event: progress\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"
        if record.get("state") in FINISHED:
            if finished_seen or (new and new[-1]["type"] in FINISHED):
                return
            finished_seen = True
            await anyio.sleep(POLL_S)
            continue
        if drain.draining:  # the client reconnects elsewhere with Last-Event-ID
            return
        idle = 0.0 if new else idle + POLL_S
        if idle >= KEEPALIVE_S:
            idle = 0.0
            yield ": keep-alive\n\n"
        await anyio.sleep(POLL_S)
