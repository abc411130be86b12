"""`inference.GRPCInferenceService`: the KServe V2 / Triton RPCs, on the dataplane the HTTP routes use.

Each RPC is one method here; `rpc` wraps it once with what every call shares with HTTP: the drain (new calls
are UNAVAILABLE while the process drains), the restricted API groups (the key travels as metadata), the
domain errors of service/errors.py mapped to gRPC codes as Triton maps them, the count of calls in flight
that a drain waits for, and the request metrics. Inference goes through `service.api.v2.infer.run`, the same
checks, limits, batching and deadlines as `POST /v2/models/NAME/infer`; the gRPC deadline is the timeout.
"""

from __future__ import annotations

import functools
import logging
import time

import grpc
from starlette.concurrency import run_in_threadpool
from tritonclient.grpc import service_pb2 as pb

from telemetry import tracing

from ...auth.caller import NotAuthenticated, from_values
from ...auth.policy import ANONYMOUS, Caller, decide, who
from ...auth.restricted import carries_key
from ...errors import (
    AccessDenied,
    BadInput,
    DeadlineExceeded,
    Forbidden,
    NotLoaded,
    QueueTimeout,
    ServiceError,
    TooManyRequests,
    grpc_code,
)
from ..v2.infer import config_of, metadata_of, model_version, resolve, run
from ..v2.routes import EXTENSIONS
from .convert import from_json, infer_request, infer_response, model_config, parameter
from .spans import traced, traced_stream

log = logging.getLogger(__name__)
audit = logging.getLogger("inr.audit")
SERVICE = "inference.GRPCInferenceService"
UNAUTHENTICATED = ("ServerLive", "ServerReady")  # health never needs credentials, as over HTTP


class Malformed:
    """A request whose bytes are not the RPC's protobuf message (the deserializer's answer, not an exception,
    so that the caller gets INVALID_ARGUMENT naming the message rather than grpc's generic INTERNAL)."""

    def __init__(self, message: str, error: Exception):
        self.text = f"the request is not a valid {message} protobuf ({error})"


def reader(cls):
    def read(data: bytes):
        try:
            return cls.FromString(data)
        except Exception as e:  # google.protobuf.message.DecodeError, or a RuntimeError from the upb parser
            return Malformed(cls.__name__, e)

    return read


def rpc(group: str, infer: bool = False):
    """Wrap an RPC method: drain, restricted group, errors → gRPC codes, in-flight count, metrics."""

    def wrap(fn):
        @functools.wraps(fn)
        async def handler(self: "InferenceService", request, context: grpc.aio.ServicerContext):
            start, status = time.perf_counter(), 200
            self.drain.inflight += 1
            try:
                self.admit(fn.__name__, group, context)
                if isinstance(request, Malformed):
                    raise BadInput(request.text)
                caller = ANONYMOUS if fn.__name__ in UNAUTHENTICATED else self.caller(context)
                self.check_quota(caller)
                self.check_model(getattr(request, "name", "") or getattr(request, "model_name", ""), caller)
                return await fn(self, request, context)
            except ServiceError as e:
                status = e.status
                await abort(context, e)
            except (grpc.aio.AbortError, grpc.aio.UsageError):
                raise
            except Exception as e:
                status = 500
                log.exception("unexpected error in gRPC %s", fn.__name__)
                await context.abort(
                    grpc.StatusCode.INTERNAL, f"internal error ({e.__class__.__name__}); see the server log"
                )
            finally:
                self.drain.inflight -= 1
                if infer:
                    self.count(request, fn.__name__, status, start, getattr(request, "model_version", ""))

        return handler

    return wrap


async def abort(context: grpc.aio.ServicerContext, e: ServiceError) -> None:
    """End the call with the error's gRPC code; its Retry-After (a 429's) as `retry-after` trailing metadata."""
    retry = (getattr(e, "headers", None) or {}).get("retry-after")
    if retry is not None:
        context.set_trailing_metadata((("retry-after", str(retry)),))
    await context.abort(getattr(grpc.StatusCode, grpc_code(e.status)), str(e))


class InferenceService:
    def __init__(self, state):
        self.registry, self.dataplane, self.control = state.registry, state.dataplane, state.control
        self.metrics, self.drain, self.version = state.metrics, state.drain, state.version
        self.by_api = {api: g for g in state.settings.http_restricted_api for api in g.apis}
        self.authority = state.authority

    def count(self, request, method: str, status: int, start: float, version: str = "") -> None:
        """An inference call in the request metrics, labelled as the HTTP ones are: the model (when it is one of
        ours), the method as its endpoint, the status the error would have had over HTTP."""
        name = getattr(request, "model_name", "")
        model = name if name in self.registry.models else ""
        self.metrics.request(model, f"/{SERVICE}/{method}", "GRPC", status, time.perf_counter() - start, version)

    def caller(self, context: grpc.aio.ServicerContext) -> Caller:
        """From the `authorization` metadata, as over HTTP (service/auth/caller.py); no cookies over gRPC."""
        sent = [v for k, v in context.invocation_metadata() or () if k.lower() == "authorization"]
        try:
            value = sent[0] if sent else None
            return from_values(self.authority, value.decode() if isinstance(value, bytes) else value, None)
        except NotAuthenticated as e:
            raise AccessDenied(401, str(e)) from None

    def check_quota(self, caller: Caller) -> None:
        """The key's requests-a-second quota, the one bucket HTTP takes from too: every call and every message of a
        stream is a request (RESOURCE_EXHAUSTED, with `retry-after` in the trailing metadata)."""
        over = self.authority.over_quota(caller)
        if over is not None:
            raise TooManyRequests(over[1], over[0])

    def check_model(self, name: str, caller: Caller) -> None:
        """The model's access policy against the caller (no substitute over gRPC: no renders here)."""
        access = self.registry.access_of(name) if name else None
        if access is not None:
            decision = decide(caller, name, access, self.registry.access_default)
            if not decision.allowed:
                raise AccessDenied(decision.status, decision.reason)

    def admit(self, method: str, group: str, context: grpc.aio.ServicerContext) -> None:
        if self.drain.draining and method != "ServerLive":
            raise NotLoaded("the server is shutting down; send the request to another replica")
        restriction = self.by_api.get(group)
        if restriction is not None:
            sent = [
                v.encode() if isinstance(v, str) else v
                for k, v in context.invocation_metadata() or ()
                if k.lower() == restriction.key
            ]
            if not carries_key(sent, restriction):
                raise Forbidden(group, restriction.key)

    # -- health and metadata ---------------------------------------------------------------------
    @rpc("health")
    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    @rpc("health")
    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=self.registry.loaded)

    @rpc("health")
    async def ModelReady(self, request, context):
        try:
            model = resolve(self.registry, request.name, request.version)
        except ServiceError as e:
            if isinstance(e, BadInput):
                raise
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=model.ready)

    @rpc("metadata")
    async def ServerMetadata(self, request, context):
        return pb.ServerMetadataResponse(name="inr-serve", version=self.version, extensions=EXTENSIONS)

    @rpc("metadata")
    async def ModelMetadata(self, request, context):
        model = resolve(self.registry, request.name, request.version, ready=True)
        return from_json(metadata_of(model, self.registry), pb.ModelMetadataResponse())

    @rpc("model-config")
    async def ModelConfig(self, request, context):
        return model_config(config_of(resolve(self.registry, request.name, request.version, ready=True)))

    @rpc("statistics")
    async def ModelStatistics(self, request, context):
        if not self.registry.loaded:
            raise NotLoaded("models are still loading")
        if request.name:
            model = resolve(self.registry, request.name, request.version, ready=True)
            stats = [self.metrics.stats_json(model.name, model_version(model))]
        else:
            shown = set(self.registry.names_for(self.caller(context), self.registry.models))
            stats = [
                self.metrics.stats_json(m.name, model_version(m.serving))
                for m in self.registry.models.values()
                if m.ready and m.name in shown
            ]
        return from_json({"model_stats": stats}, pb.ModelStatisticsResponse())

    # -- inference -------------------------------------------------------------------------------
    async def _infer(self, msg: pb.ModelInferRequest, deadline: float | None) -> pb.ModelInferResponse:
        """`deadline`: the seconds left of the call's gRPC deadline; it bounds the wait for a batch."""
        model = resolve(self.registry, msg.model_name, msg.model_version, ready=True)
        request = infer_request(msg)
        if deadline is not None and deadline <= 0:
            raise DeadlineExceeded("the call's deadline had passed when it reached the server")
        try:
            outputs = await run(request, model, self.dataplane, deadline)
        except QueueTimeout as e:
            if deadline is None:
                raise
            raise DeadlineExceeded(f"the call's deadline passed while it waited ({e})") from None
        return infer_response(model.name, model_version(model), msg.id, outputs)

    @rpc("inference", infer=True)
    async def ModelInfer(self, request, context):
        return await self._infer(request, context.time_remaining())

    async def ModelStreamInfer(self, requests, context):
        """Bidirectional: each request's answer (or its error, as `error_message`) in order, on one stream."""
        try:
            self.admit("ModelStreamInfer", "inference", context)
            caller = self.caller(context)
        except ServiceError as e:
            await abort(context, e)
        async for request in requests:
            start, status = time.perf_counter(), 200
            self.drain.inflight += 1
            try:
                if isinstance(request, Malformed):
                    raise BadInput(request.text)
                self.check_quota(caller)
                self.check_model(request.model_name, caller)
                yield pb.ModelStreamInferResponse(infer_response=await self._infer(request, context.time_remaining()))
            except ServiceError as e:
                status = e.status
                yield pb.ModelStreamInferResponse(
                    error_message=str(e),
                    infer_response=pb.ModelInferResponse(
                        model_name=getattr(request, "model_name", ""), id=getattr(request, "id", "")
                    ),
                )
            finally:
                self.drain.inflight -= 1
                self.count(request, "ModelStreamInfer", status, start)

    # -- model repository ------------------------------------------------------------------------
    @rpc("model-repository")
    async def RepositoryIndex(self, request, context):
        rows = await run_in_threadpool(self.control.index, request.ready, None, "", self.caller(context))
        return from_json({"models": rows}, pb.RepositoryIndexResponse())

    @rpc("model-repository")
    async def RepositoryModelLoad(self, request, context):
        if request.parameters:
            raise BadInput(
                f"parameters: {', '.join(sorted(request.parameters))} not supported (a model is loaded "
                "from its folder in the repository; 'config' and 'file:' overrides are not)"
            )
        await self.control.load(request.model_name)
        audit.info("model load name=%s by=%s (gRPC)", request.model_name, who(self.caller(context)))
        return pb.RepositoryModelLoadResponse()

    @rpc("model-repository")
    async def RepositoryModelUnload(self, request, context):
        unknown = sorted(set(request.parameters) - {"unload_dependents"})
        if unknown:
            raise BadInput(f"parameters: {', '.join(unknown)} not supported")
        if "unload_dependents" in request.parameters and not isinstance(
            parameter(request.parameters["unload_dependents"]), bool
        ):
            raise BadInput("parameters.unload_dependents: expected bool_param")
        await self.control.unload(request.model_name)
        audit.info("model unload name=%s by=%s (gRPC)", request.model_name, who(self.caller(context)))
        return pb.RepositoryModelUnloadResponse()


UNARY = {
    "ServerLive": pb.ServerLiveRequest,
    "ServerReady": pb.ServerReadyRequest,
    "ModelReady": pb.ModelReadyRequest,
    "ServerMetadata": pb.ServerMetadataRequest,
    "ModelMetadata": pb.ModelMetadataRequest,
    "ModelInfer": pb.ModelInferRequest,
    "ModelConfig": pb.ModelConfigRequest,
    "ModelStatistics": pb.ModelStatisticsRequest,
    "RepositoryIndex": pb.RepositoryIndexRequest,
    "RepositoryModelLoad": pb.RepositoryModelLoadRequest,
    "RepositoryModelUnload": pb.RepositoryModelUnloadRequest,
}


def handlers(service: InferenceService) -> grpc.GenericRpcHandler:
    """The service's method handlers, with the stubs' messages and a deserializer that reports bad bytes; with
    traces on, each call in its server span (service/api/grpc/spans.py), else nothing more."""

    def method(name: str):
        fn = getattr(service, name)
        if not tracing.ON:
            return fn
        return traced_stream(SERVICE, name, fn) if name == "ModelStreamInfer" else traced(SERVICE, name, fn)

    methods = {
        name: grpc.unary_unary_rpc_method_handler(
            method(name), request_deserializer=reader(cls), response_serializer=lambda m: m.SerializeToString()
        )
        for name, cls in UNARY.items()
    }
    methods["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(
        method("ModelStreamInfer"),
        request_deserializer=reader(pb.ModelInferRequest),
        response_serializer=lambda m: m.SerializeToString(),
    )
    return grpc.method_handlers_generic_handler(SERVICE, methods)
