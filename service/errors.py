"""Domain errors and their HTTP status codes (and the gRPC code of each), in one place.

Routes and library code raise the domain errors below; `install_error_handlers`
maps them, FastAPI's validation errors, unknown routes (404), wrong methods (405),
oversized bodies (413) and anything unexpected (500) to one JSON shape:
`{"error": "..."}`.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

log = logging.getLogger(__name__)


class ServiceError(Exception):
    """Base class: an error whose message is safe to show to the caller."""

    status = 500
    headers: dict | None = None


class BadInput(ServiceError):
    """The request is well-formed JSON but its values make no sense (shape, range, NaN)."""

    status = 400


class NotANumber(BadInput):
    """A boolean, a string or null where a number belongs (a coordinate, a pixel): 422, as pydantic's."""

    status = 422


class ModelNotFound(ServiceError):
    status = 404

    def __init__(self, name: str, valid: list[str], shown: int = 20):
        valid = sorted(valid)
        names = ", ".join(valid[:shown]) or "none"
        more = f", … and {len(valid) - shown} more (GET /v1/models)" if len(valid) > shown else ""
        super().__init__(f"unknown model '{name}'; models: {names}{more}")


class WrongTask(ServiceError):
    """The model exists but does another job (e.g. classify on an image model)."""

    status = 400

    def __init__(self, name: str, task: str, needed: str, action: str):
        super().__init__(f"model '{name}' has task '{task}'; {action} needs a model with task '{needed}'")


class ModelNotReady(ServiceError):
    status = 503

    def __init__(self, name: str, state: str, reason: str | None):
        super().__init__(f"model '{name}' is {state}" + (f": {reason}" if reason else ""))


class ModelTooLarge(ServiceError):
    """A model version that needs more memory than the whole budget: it is not served, the others are (507)."""

    status = 507

    def __init__(self, name: str, version: int, size: int, budget: int):
        super().__init__(
            f"model '{name}' version {version} needs {size / 2**20:.1f} MiB, more than the whole memory budget of "
            f"{budget / 2**20:.1f} MiB (--memory-budget / INR_MEMORY_BUDGET)"
        )


class ModelTooLargeForCache(ServiceError):
    """A model version with a file larger than the whole disk cache of models on S3 (INR_MODEL_CACHE_BYTES): it is
    not downloaded, so not served; the others are (507)."""

    status = 507


class NotLoaded(ServiceError):
    status = 503


class NotFound(ServiceError):
    """Something other than a model is missing, e.g. a model version (V2 protocol)."""

    status = 404


class Overloaded(ServiceError):
    """A model's batching queue is full: come back later."""

    status = 503
    headers = {"retry-after": "1"}


class QueueTimeout(ServiceError):
    """A request waited longer than its deadline for a batch or a render slot (INR_QUEUE_TIMEOUT_S)."""

    status = 503

    def __init__(self, message: str, retry_after: int = 1):
        super().__init__(message)
        self.headers = {"retry-after": str(retry_after)}


class RepositoryUnavailable(ServiceError):
    """The storage of the models or of the uploads (S3) did not answer: come back later. The models on local disk
    keep serving."""

    status = 503
    headers = {"retry-after": "2"}


class DeadlineExceeded(ServiceError):
    """The caller's own deadline (gRPC's) passed before the request could run: gRPC DEADLINE_EXCEEDED."""

    status = 408


class RenderTimeout(ServiceError):
    """A render ran past INR_RENDER_TIMEOUT_S and was stopped at its next tile."""

    status = 503


class NotImplementedFeature(ServiceError):
    """A valid request for something the service does not implement (e.g. a IIIF format)."""

    status = 501


class TooLarge(ServiceError):
    """A request over one of the limits in settings."""

    status = 413


class StorageFull(ServiceError):
    """The disk an upload is written to is full (507 Insufficient Storage); nothing of the upload is kept."""

    status = 507


class AccessDenied(ServiceError):
    """A model its caller may not read (service/auth/policy.py): 401 without credentials or with bad ones, 403 with
    credentials that lack the scope. The message never quotes a token."""

    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


class Forbidden(ServiceError):
    """A restricted API group (--http-restricted-api) called without its header; never names the value."""

    status = 403

    def __init__(self, api: str, header: str):
        super().__init__(
            f"the '{api}' API is restricted: send the header '{header}' with the value set in "
            "--http-restricted-api (INR_HTTP_RESTRICTED_API)"
        )


class UnsupportedMedia(ServiceError):
    status = 415


class InvalidOption(ServiceError):
    """A form or query option out of its range (a fit's steps, size, preset, name): 422, as pydantic's."""

    status = 422


class Conflict(ServiceError):
    """The request contradicts the state of something that exists (a fit job already finished, a fit
    into a model of another task)."""

    status = 409


class TooManyRequests(ServiceError):
    """A limit on work in flight (INR_FIT_MAX_RUNNING + INR_FIT_QUEUE_LIMIT): come back after Retry-After."""

    status = 429

    def __init__(self, message: str, retry_after: float = 1):
        super().__init__(message)
        self.headers = {"retry-after": str(max(1, int(-(-retry_after // 1))))}


class NoPreview(ServiceError):
    status = 404

    def __init__(self, name: str):
        super().__init__(f"model '{name}' ships no preview image")


class ClientGone(ServiceError):
    """The caller disconnected; the work it asked for was abandoned (nginx's 499)."""

    status = 499


class ModelLoadError(Exception):
    """A model directory that cannot be served; the registry lists it as failed with this reason."""


class DeviceError(RuntimeError):
    """The requested device does not really run the models: start-up must fail."""


class BodyTooLarge(StarletteHTTPException):
    """Raised while the body is read; an HTTPException so FastAPI's body parsing re-raises it."""

    def __init__(self, limit: int, setting: str = "INR_MAX_BODY_BYTES"):
        super().__init__(413, f"request body is larger than the limit of {limit} bytes ({setting})")


# The gRPC status of each HTTP status, as Triton maps its errors (grpc.StatusCode names; service/api/grpc).
GRPC_CODES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    415: "INVALID_ARGUMENT",
    422: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "FAILED_PRECONDITION",
    413: "RESOURCE_EXHAUSTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    507: "RESOURCE_EXHAUSTED",
}


def grpc_code(status: int) -> str:
    return GRPC_CODES.get(status, "INTERNAL")


def error_response(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def validation_message(exc: RequestValidationError, limit: int = 5) -> str:
    """One line naming each bad field, e.g. `coords.3.1: Input should be a finite number`."""
    parts = []
    for err in exc.errors()[:limit]:
        loc = [str(p) for p in err.get("loc", ())]
        if loc and loc[0] == "body":
            loc = loc[1:]
        where = ".".join(loc) or "body"
        msg = err.get("msg", "invalid")
        if err.get("type") == "json_invalid":
            msg = f"invalid JSON ({err.get('ctx', {}).get('error', 'decode error')})"
        elif where == "body" and err.get("type") in ("model_attributes_type", "model_type", "dict_type"):
            msg = "expected a JSON object (send Content-Type: application/json)"
        elif where == "body" and err.get("type") == "missing":
            msg = "a JSON body is required"
        parts.append(f"{where}: {msg}")
    more = len(exc.errors()) - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service(_: Request, exc: ServiceError):
        return error_response(exc.status, str(exc), getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError):
        return error_response(422, validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        return error_response(exc.status_code, message, getattr(exc, "headers", None))

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, exc: ClientDisconnect):
        # The caller hung up while sending its body (load generators do at the end of a run):
        # nobody reads the answer, and it is not a server fault worth a traceback.
        log.info("client disconnected during %s %s", request.method, request.url.path)
        return error_response(ClientGone.status, "the client disconnected before sending the whole body")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(500, f"internal error ({exc.__class__.__name__}); see the server log")
