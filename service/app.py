"""The application factory: settings → registry (loaded in the lifespan) → routers.

    python -m service --models models            (the command line, see __main__)
    uvicorn --factory service.app:create_app     (settings from INR_* variables)

Only `python -m service` sets uvicorn's server options from the settings: INR_TIMEOUT_KEEP_ALIVE,
INR_HEADER_TIMEOUT_S (service.server.guards.HeaderTimeoutProtocol) and the one second uvicorn's shutdown
adds after the drain. Plain `uvicorn --factory` uses uvicorn's own defaults (5 s keep-alive, no
header timeout) unless given `--timeout-keep-alive 90 --timeout-graceful-shutdown 1
--http service.server.guards:HeaderTimeoutProtocol`. The app-level parts work either way: the drain on
SIGTERM within INR_GRACEFUL_SHUTDOWN_S, INR_BODY_TIMEOUT_S, the queue timeouts, and traces: the app reads the
OTEL_* variables itself (telemetry.config; `python -m service` checks them first, for its one-line error, and
turns --trace-config into them).
"""

from __future__ import annotations

import asyncio
import logging
import os
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from commandline import parse_bytes
from modelrepo import LocalRepository, open_repository
from modelrepo.union import UnionRepository
from telemetry import tracing
from telemetry.config import TraceConfigError, read_config

from .api import docs, iiif, v2
from .api import metrics as metrics_api
from .api.grpc import GrpcServer
from .api.hotroutes import hot_call
from .api.jsonbody import add_body_schemas
from .api.v1 import classify, fits, health, keys, models, query, render
from .api.v2 import repository as v2_repository
from .auth.caller import Authority
from .auth.keys import KeyStore
from .auth.proxies import Proxies
from .auth.tokens import Signer
from .engine.cache import CacheStore
from .engine.control import ModelControl
from .engine.cpus import default_threads
from .engine.dataplane import DataPlane
from .engine.memory import budget as memory_budget
from .engine.memory import format_bytes
from .engine.registry import Registry
from .engine.residency import Residency, ResidencyOptions
from .engine.runtime import RuntimeOptions
from .engine.session_cache import SessionCache
from .engine.split import Splitter
from .errors import install_error_handlers
from .fits.jobs import Fits
from .fits.metrics import FitCollector
from .metrics import Metrics
from .render.service import RenderService
from .server.drain import Drain, DrainGuard
from .server.forwarded import ForwardedHeaders
from .server.guards import BodyLimit, BodyTimeout
from .server.heap import Heap, settle
from .server.hotpath import HotRoutes
from .server.model_access import ModelAccess
from .server.request_metrics import MetricsMiddleware
from .server.restricted import RestrictedApi
from .server.spans import TraceRequests
from .settings import Settings

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
DESCRIPTION = """Coordinate queries with affine transforms, continuous-resolution rendering, and digit
classification over an ONNX model repository.

* Coordinates: (x, y) in the unit square, x right, y down; pixel (i, j) of a W×H render has its
  centre at ((j+½)/W, (i+½)/H) of the viewport.
* Transform: `{rotate, scale, translate, center}` moves the image — rotate counter-clockwise on
  screen about `center` (default [0.5, 0.5]), then scale about `center`, then translate — and the
  model is sampled at the inverse-mapped coordinates; or `{matrix: [[a, b, c], [d, e, f]]}`,
  applied directly to the query coordinates.
* Outside the unit square, `background` decides: `extrapolate` (default, the network's own
  values), `transparent` (png/webp) or a colour (`white`, `#ff8800`).
* Every error is `{"error": "..."}`."""


FIT_ENVELOPE = 64 * 1024  # multipart boundaries, part headers and the option fields around a fit's image
ERROR_REF = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
COMMON = {"503": "draining (SIGTERM), not ready, or busy: see Retry-After"}
WITH_BODY = {
    "408": "the body paused longer than INR_BODY_TIMEOUT_S",
    "413": "the body is larger than INR_MAX_BODY_BYTES",
}


def document_common_codes(schema: dict) -> dict:
    """The codes any route can answer from the middleware (the drain's 503; for a route with a body,
    the body limit's 413 and the body timeout's 408), on every operation of the OpenAPI document."""
    for operations in schema.get("paths", {}).values():
        for op in operations.values():
            codes = {**COMMON, **(WITH_BODY if "requestBody" in op else {})}
            responses = op.setdefault("responses", {})
            for code, text in codes.items():
                responses.setdefault(code, {"description": text, "content": ERROR_REF})
    return schema


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    threads = settings.threads or default_threads(settings.workers)
    metrics = Metrics()
    try:  # OTEL_* (python -m service has checked them, and turned --trace-config into them)
        traces = read_config()
    except TraceConfigError as e:  # `uvicorn --factory` calls this first: one line and exit 2, as python -m service
        log.error("%s", e)
        raise SystemExit(2) from None
    if traces is not None:
        tracing.install(traces, "inr-serve", on_drop=metrics.spans_dropped)
        for reason in ("queue_full", "export_failed"):
            metrics.trace_drops.labels(reason)  # both series at 0 from the start
    s3 = {"settle_s": settings.s3_settle_s} if settings.models.startswith("s3://") else {}
    repository = open_repository(
        settings.models, settings.model_cache, max_bytes=parse_bytes(settings.model_cache_bytes), **s3
    )  # a folder, or S3 through the disk cache (modelrepo/s3.py)
    if settings.fit_models:  # fits written into a folder of their own, served beside the models (modelrepo/union.py)
        Path(settings.fit_models).mkdir(parents=True, exist_ok=True)
        repository = UnionRepository([repository, LocalRepository(settings.fit_models)])
    options = RuntimeOptions(
        repository=repository,
        device=settings.device,
        threads=threads,
        render_threads=settings.render_threads,
        spin=settings.spin,
        splitter=Splitter(threads, settings.split_rows),
        metrics=metrics,
        session_cache=None
        if settings.session_cache.lower() in ("", "off")
        else SessionCache(Path(settings.session_cache), parse_bytes(settings.session_cache_bytes)),
    )
    budget, budget_from = memory_budget(settings.memory_budget)
    residency = Residency(
        ResidencyOptions(
            budget, settings.max_concurrent_loads, frozenset(settings.pin_model), settings.queue_timeout_s
        ),
        metrics,
    )
    registry = Registry(repository, options, residency)
    registry.access_default = settings.access_default
    secret = settings.access_secret.get_secret_value()
    trusted = (settings.access_trusted_header, settings.access_trusted_scopes_header or None)
    authority = Authority(
        Signer(secret.encode() if secret else None),
        KeyStore(settings.access_keys),
        trusted if settings.access_trusted_header else None,
    )
    metrics.watch_models(registry)
    if repository.remote:
        metrics.watch_repository(repository)
    control = ModelControl(
        registry,
        settings.model_control_mode,
        settings.repository_poll_secs,
        settings.load_model,
        on_demand=settings.model_loading == "on-demand",
        pinned=settings.pin_model,
    )
    drain = Drain(settings.graceful_shutdown_s)
    metrics.in_flight.set_function(lambda: drain.inflight)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        log.info("loading models from %s (device %s, %d threads per model)", settings.models, settings.device, threads)
        log.info("memory budget: %s, %s", format_bytes(budget), budget_from)
        if repository.remote:
            log.info(
                "models on S3: %s, pulled on first use into %s, at most %s on disk",
                repository.url,
                repository.root,
                format_bytes(repository.budget.max_bytes),
            )
        if options.session_cache is not None:
            cache = options.session_cache
            log.info("session cache: %s, at most %s on disk", cache.folder, format_bytes(cache.max_bytes))
        loop = asyncio.get_running_loop()
        heap = Heap(loop)

        def changed(reg: Registry, name: str, dropped: list) -> None:  # runs in the thread that loaded
            metrics.model_changed(name, reg.models.get(name))
            if dropped:
                heap.release(dropped)  # nothing of theirs stays frozen (service/server/heap.py)
                loop.call_soon_threadsafe(app.state.dataplane.retire, dropped)

        registry.listeners.append(changed)
        await asyncio.to_thread(residency.prime)
        await control.start()
        pinned = residency.pinned_bytes()
        if pinned > budget:  # one line and exit 2, as a bad setting (uvicorn would print a traceback and exit 3)
            log.error(
                "error: --memory-budget %s is below the pinned models' %s (--pin-model %s)",
                format_bytes(budget),
                format_bytes(pinned),
                ",".join(settings.pin_model),
            )
            logging.shutdown()
            os._exit(2)
        app.state.renderer.start()
        grpc_server = GrpcServer(app.state) if settings.grpc_port else None
        if grpc_server is not None:  # same loop, same dataplane (service/api/grpc)
            await grpc_server.start()
            drain.listeners.append(lambda: loop.create_task(grpc_server.draining()))
        drain.install()  # SIGTERM: finish what runs, refuse what comes (service/server/drain.py)
        settle()  # later full collections skip what start-up left alive (service/server/heap.py)
        try:
            yield
        finally:
            heap.close()
            drain.uninstall()
            if grpc_server is not None:
                await grpc_server.stop()
            await control.stop()
            await app.state.dataplane.close()
            app.state.renderer.close()
            options.splitter.close()
            await asyncio.to_thread(app.state.fits.close)
            await asyncio.to_thread(tracing.shutdown)  # the last spans, within tracing.SHUTDOWN_S

    # FastAPI's own OpenTelemetry is off: the service's spans and metrics are its own (TraceRequests, Metrics),
    # and deciding per request whether FastAPI's were on cost about 20 µs (docs/benchmarks.md, floor)
    app = FastAPI(
        title="INR model service",
        version="0.1.0",
        lifespan=lifespan,
        description=DESCRIPTION,
        telemetry={"tracing": False, "metrics": False, "logs": False, "auto_configure": False},
        docs_url=None,  # /docs and /redoc with their assets served here, not from a CDN (service/api/docs.py)
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.version = app.version
    app.state.registry = registry
    app.state.authority = authority
    app.state.metrics = metrics
    app.state.drain = drain
    app.state.control = control
    app.state.cache_store = CacheStore(settings.cache_bytes)  # renders and inference responses, one budget
    app.state.dataplane = DataPlane(
        settings, metrics, app.state.cache_store, inflight=lambda: drain.inflight, residency=residency
    )
    app.state.renderer = RenderService(settings, metrics, app.state.cache_store, residency)
    app.state.fits = Fits(settings, repository)  # the fit job store, opened on first use (service/fits/jobs.py)
    metrics.registry.register(FitCollector(app.state.fits))  # read from the store at each scrape
    metrics.cache_info = app.state.cache_store.info
    install_error_handlers(app)
    # innermost: the inference routes' endpoints, reached without FastAPI's routing (service/server/hotpath.py)
    app.add_middleware(HotRoutes, find=hot_call)
    # an upload to fit may be larger than other bodies: its own limit, plus the multipart envelope
    app.add_middleware(
        BodyLimit,
        limit=settings.max_body_bytes,
        larger={
            "/v1/fits": (
                settings.fit_max_upload_bytes + FIT_ENVELOPE,
                f"INR_FIT_MAX_UPLOAD_BYTES={settings.fit_max_upload_bytes} plus {FIT_ENVELOPE} bytes of form",
            )
        },
    )
    app.add_middleware(BodyTimeout, seconds=settings.body_timeout_s)
    # the caller, and each model's access policy on the routes that name one; a refused body is never read
    static = frozenset({"/"} | {f"/{p.relative_to(STATIC).as_posix()}" for p in STATIC.rglob("*") if p.is_file()})
    static |= docs.asset_paths()
    app.add_middleware(
        ModelAccess, authority=authority, access_of=registry.access_of, default=settings.access_default, static=static
    )
    if settings.http_restricted_api:  # outside BodyLimit: a refused request's body is never read
        app.add_middleware(RestrictedApi, groups=settings.http_restricted_api)
    app.add_middleware(MetricsMiddleware, metrics=metrics, known_models=lambda: registry.models)
    app.add_middleware(DrainGuard, drain=drain)  # counts every request in flight
    if tracing.ON:  # only with traces on: the server span and `traceparent` (service/server/spans.py)
        app.add_middleware(TraceRequests)
    # outermost: forwarded and trusted-proxy headers believed only from INR_FORWARDED_ALLOW_IPS, removed otherwise
    app.add_middleware(
        ForwardedHeaders,
        proxies=Proxies(settings.forwarded_allow_ips),
        identity=(settings.access_trusted_header, settings.access_trusted_scopes_header),
    )
    for r in (health, models, query, render, classify, fits, keys, v2, v2_repository, metrics_api, iiif, docs):
        app.include_router(r.router)
    app.include_router(iiif.auth_router)  # IIIF Authorization Flow 2.0 (service/api/iiif/auth.py)
    openapi = app.openapi
    app.openapi = lambda: app.openapi_schema or document_common_codes(add_body_schemas(openapi()))
    app.mount(docs.ASSETS, docs.assets(), name="docs-assets")
    if STATIC.is_dir():
        app.mount("/", StaticFiles(directory=STATIC, html=True), name="static")
    return app
