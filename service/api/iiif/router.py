"""IIIF Image API 3.0, level 2, at /iiif/3/{identifier}: every image model is a IIIF image service (and, with
service/api/iiif/manifest.py, a Presentation 3.0 Manifest).

Image requests are planned as a typed render (service/api/iiif/plan.py) and answered by the render
service, so limits, metrics, the ETag and the render concurrency are those of /render.
Every response, errors included, carries CORS; OPTIONS answers the preflight.
"""

from __future__ import annotations

import hashlib
import math
from typing import Callable
from urllib.parse import unquote

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from telemetry import tracing

from ...auth.caching import cache_control
from ...errors import NotFound, ServiceError, error_response, validation_message
from ...render.admission import caller_key
from ...render.cache import etag_matches
from ...render.imaging import MEDIA_TYPES
from ...render.service import RenderJob
from ..deps import RegistryDep, SettingsDep
from ..schemas import ErrorBody
from . import auth, manifest, post, substitute
from .info import (
    INFO_MEDIA_TYPE,
    PREFIX,
    PROFILE_URI,
    Identifier,
    image_id,
    image_size,
    info_document,
    max_size,
    resolve,
)
from .params import ImageRequest
from .plan import JPEG_QUALITY, plan

CORS = {"Access-Control-Allow-Origin": "*"}
PREFLIGHT = {**CORS, "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS", "Access-Control-Max-Age": "86400"}
EXPOSE = "ETag, Link, Content-Length"


class IIIFRoute(APIRoute):
    """Errors answered here (the same `{"error": …}` bodies as service/errors.py), so that CORS is on them."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                response = await handler(request)
            except ServiceError as e:  # with its headers: a 429's or 503's Retry-After
                response = error_response(e.status, str(e), e.headers)
            except RequestValidationError as e:
                response = error_response(400, validation_message(e))
            except StarletteHTTPException as e:
                response = error_response(e.status_code, str(e.detail), getattr(e, "headers", None))
            response.headers.update(CORS)
            response.headers["Access-Control-Expose-Headers"] = EXPOSE
            return response

        return handle


GET_HEAD = ["GET", "HEAD"]


def get_head(router: APIRouter, path: str, **kwargs):
    """A GET route and a HEAD route of one endpoint, each with an operation id of its own in the schema (one route
    of both methods gives both operations one id: a duplicate, which the schema's generation warns about)."""

    def register(endpoint):
        for method in GET_HEAD:
            router.api_route(path, methods=[method], **kwargs)(endpoint)
        return endpoint

    return register


# Every code an IIIF route answers: a bad identifier or parameter (400), an unknown model (404), a
# format it does not make (501), a model not ready or a render queue full (503); the image routes also
# a region over maxArea (413) and 304.
ERRORS = {
    400: {"model": ErrorBody, "description": "a bad identifier, region, size, rotation, quality or format"},
    404: {"model": ErrorBody, "description": "no such model"},
    501: {"model": ErrorBody, "description": "a format the service does not make"},
    503: {"model": ErrorBody, "description": "the model is not ready, or the service is busy or draining"},
}
NOT_MODIFIED = {304: {"description": "not modified: If-None-Match names this response's ETag"}}
router = APIRouter(prefix=PREFIX, tags=["IIIF Image API 3.0"], route_class=IIIFRoute, responses=ERRORS)
manifest.add_routes(router, get_head)  # Presentation 3: /collection.json and /{name}/manifest.json, first


def limit_to(doc: dict, long_side: int) -> dict:
    """The information of a substitute: the sizes and tile scale factors of at most `long_side` pixels."""
    scale = long_side / max(doc["width"], doc["height"])
    factors = [f for f in doc["tiles"][0]["scaleFactors"] if 1 / f <= scale]
    if not factors:  # every level of the pyramid is too fine: the first power of two that is not
        factors = [2 ** math.ceil(math.log2(1 / scale))]
    return {
        **doc,
        "maxWidth": max(1, int(doc["width"] * scale)),
        "maxHeight": max(1, int(doc["height"] * scale)),
        "tiles": [{**doc["tiles"][0], "scaleFactors": factors}],
        "sizes": [s for s in doc["sizes"] if max(s["width"], s["height"]) <= long_side],
    }


def _caching(settings, etag: str, private: bool = False) -> dict:
    """A restricted image's information depends on who asks (the whole, or the substitute): revalidated each time."""
    return {"ETag": etag, "Cache-Control": cache_control(private, settings.iiif_max_age, per_caller=private)}


def _etag(model, key: str) -> str:
    sha = model.record.onnx_sha256 if model.record else ""
    digest = hashlib.sha256(f"{sha}|{key}".encode()).hexdigest()
    return f'"{digest[:32]}"'


@get_head(router, "/{name}", status_code=303, response_class=RedirectResponse)
async def base(request: Request, name: str, registry: RegistryDep, settings: SettingsDep):
    """The base URI redirects (303) to the image information document."""
    ident = Identifier.parse(name)
    resolve(registry, ident)
    return RedirectResponse(f"{image_id(request, settings, ident)}/info.json", status_code=303)


@get_head(router, "/{name}/info.json", responses=NOT_MODIFIED)
async def info(request: Request, name: str, registry: RegistryDep, settings: SettingsDep) -> Response:
    """Image information: size, tiles, sizes, maxArea, the qualities, formats and features."""
    ident = Identifier.parse(name)
    model = resolve(registry, ident)
    width, height = image_size(model.metadata)
    service_id = image_id(request, settings, ident)
    doc = info_document(service_id, width, height, settings.max_render_pixels, settings.iiif_zoom)
    refused = request.scope.get("state", {}).get("refused")
    restricted = registry.restricted(model.name)
    if restricted:
        doc["service"] = auth.services(request, settings, str(ident))  # IIIF Auth 2.0, whoever asks
        if refused is not None:  # the auth services still told (a client starts the flow from them), no pixels
            if not refused.substitute:
                return JSONResponse(doc, status_code=refused.status, headers={"Cache-Control": "no-store"})
            doc = limit_to(doc, refused.substitute)
    accept = request.headers.get("accept", "")
    media = "application/json" if "application/json" in accept and "ld+json" not in accept else INFO_MEDIA_TYPE
    etag = _etag(
        model, f"{service_id}|{width}x{height}|{settings.max_render_pixels}|{settings.iiif_zoom}|{doc['maxWidth']}"
    )
    headers = {**_caching(settings, etag, restricted), "Link": f'<{PROFILE_URI}>;rel="profile"', "Vary": "Cookie"}
    if etag_matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers=headers)
    return JSONResponse(doc, media_type=media, headers=headers)


@get_head(
    router,
    "/{name}/{region}/{size}/{rotation}/{quality_format}",
    response_class=Response,
    responses={
        200: {"content": {t: {} for t in MEDIA_TYPES.values()}, "description": "the image"},
        **NOT_MODIFIED,
        413: {"model": ErrorBody, "description": "over maxArea, or estimated over INR_RENDER_MAX_COST_S"},
        429: {"model": ErrorBody, "description": "over the client's share of dear renders (INR_RENDER_CALLER_SHARE)"},
    },
)
async def image(
    request: Request,
    name: str,
    region: str,
    size: str,
    rotation: str,
    quality_format: str,
    registry: RegistryDep,
    settings: SettingsDep,
) -> Response:
    """`{region}/{size}/{rotation}/{quality}.{format}`, rendered by the model at the requested coordinates."""
    ident = Identifier.parse(name)
    model = resolve(registry, ident)
    width, height = image_size(model.metadata)
    with tracing.span(
        "inr.iiif.plan",
        attributes={
            "inr.model": model.name,
            "inr.iiif.region": region,
            "inr.iiif.size": size,
            "inr.iiif.rotation": rotation,
        },
    ):
        req = ImageRequest.parse(region, size, rotation, quality_format)
        p = plan(req, width, height, settings.max_render_pixels, max_size(width, height, settings.iiif_zoom))
    refused = request.scope.get("state", {}).get("refused")
    canonical = f"{p.canonical(width, height)}/{req.rotation.text()}/{req.quality}.{req.format}"
    service_id = image_id(request, settings, ident)
    link = f'<{service_id}/{canonical}>;rel="canonical", <{PROFILE_URI}>;rel="profile"'
    pinned = ident.version is not None
    caching = registry.caching(model.name, pinned, settings.iiif_max_age)  # private when restricted
    if refused is not None:  # the substitute only: from its fixed raster, never the network (substitute.py)
        if refused.substitute and req.size.kind == "max":  # the largest size info.json tells them: the substitute's
            side = substitute.max_side(p.box, width, height, refused.substitute)
            p = plan(req, width, height, settings.max_render_pixels, side)
        return await substitute.answer(request, model, p, width, height, refused, caching, link)
    job = RenderJob(p.render.spec(), p.render.format, JPEG_QUALITY, post.finisher(p, width, height), post.key(p))
    rendered = await request.app.state.renderer.render(
        model,
        job,
        cache_control=caching,
        if_none_match=request.headers.get("if-none-match"),
        is_disconnected=request.is_disconnected,
        caller=caller_key(request.scope),
    )
    return rendered.response({"Link": link})


@router.options("/{rest:path}", include_in_schema=False)
async def preflight(rest: str) -> Response:
    """CORS preflight for any IIIF URL."""
    return Response(status_code=204, headers=PREFLIGHT | {"Access-Control-Allow-Headers": "*"})


@router.api_route("/{rest:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
async def unmatched(request: Request, rest: str) -> Response:
    """Anything else under /iiif/3: an escaped slash in an identifier (400), a wrong method (405), else 404."""
    raw = request.scope.get("raw_path", request.url.path.encode()).decode("latin-1")
    parts = raw.split("?")[0][len(PREFIX) + 1 :].split("/")
    if len(parts) in (1, 2, 5) and (len(parts) != 2 or parts[1] == "info.json"):
        Identifier.parse(unquote(parts[0]))  # raises for a slash, '..' or a length over the limit
        if request.method not in GET_HEAD:
            return error_response(
                405,
                f"method {request.method} is not allowed on IIIF URLs; use GET or HEAD",
                {"Allow": "GET, HEAD, OPTIONS"},
            )
    raise NotFound(
        f"no IIIF route {request.url.path}: use {PREFIX}/{{identifier}}/info.json or "
        f"{PREFIX}/{{identifier}}/{{region}}/{{size}}/{{rotation}}/{{quality}}.{{format}}"
    )
