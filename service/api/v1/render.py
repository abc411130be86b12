"""POST and GET /v1/models/{name}/render (and /versions/{version}/render): an image of any size and region."""

from __future__ import annotations

import json
import logging
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError

from modelrepo.serving import MAX_SIDE

from ...engine.runtime import ModelRuntime
from ...errors import BadInput, TooLarge
from ...geometry import transform as tf
from ...geometry.sampling import Background
from ...render.admission import caller_key
from ...render.imaging import MEDIA_TYPES, RenderSpec
from ...render.service import RenderJob
from ...settings import Settings
from ..deps import ImageModel, ModelName, RegistryDep, SettingsDep
from ..schemas import ErrorBody, RenderRequest, sampling_matrix

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/models", tags=["image models"])
RESPONSES = {
    200: {"content": {t: {} for t in MEDIA_TYPES.values()}, "description": "the image"},
    304: {"description": "not modified: the If-None-Match ETag is this render's"},
    **{c: {"model": ErrorBody} for c in (400, 404, 413, 422, 429, 503)},
}


def job_of(req: RenderRequest, size: tf.Size = None) -> RenderJob:
    """A public render request as the render service's typed job, for a model of native `size` (W, H): the
    transform in its square pixels, the viewport turned into the render frame, a missing side from the frame's
    aspect (service/geometry/transform.py)."""
    frame = tf.render_frame(req.viewport, req.transform.frame_rotate if req.transform else 0.0, size)
    width, height = tf.frame_pixels(req.width, req.height, frame, size)
    if max(width, height) > MAX_SIDE:
        raise TooLarge(
            f"the render would be {width}×{height} pixels (the missing side follows the image's "
            f"aspect); each side is limited to {MAX_SIDE}: give both width and height"
        )
    spec = RenderSpec(
        width=width,
        height=height,
        matrix=sampling_matrix(req.transform, size),
        viewport=frame,
        supersample=req.supersample,
        background=Background.parse(req.background),
    )
    return RenderJob(spec, req.format, req.quality)


async def respond(
    request: Request, model: ModelRuntime, req: RenderRequest, settings: Settings, pinned: bool = False
) -> Response:
    """Decode → the render service → encode: 304, a cached or a fresh image, with one ETag."""
    rendered = await request.app.state.renderer.render(
        model,
        job_of(req, model.image_size),
        cache_control=request.app.state.registry.caching(model.name, pinned, settings.render_cache_max_age_s),
        if_none_match=request.headers.get("if-none-match"),
        is_disconnected=request.is_disconnected,
        caller=caller_key(request.scope),
    )
    return rendered.response()


def _pair(text: str | None) -> list[str] | None:
    return None if text is None else text.split(",")


def query_request(
    width: Annotated[int | None, Query(description="pixels; without it, from height and the native aspect")] = None,
    height: Annotated[int | None, Query(description="pixels; without it, from width and the native aspect")] = None,
    viewport: Annotated[str | None, Query(description="x0,y0,x1,y1", examples=["0,0,0.5,0.5"])] = None,
    transform: Annotated[str | None, Query(description='the transform as JSON, e.g. {"rotate":90}')] = None,
    rotate: Annotated[float | None, Query(description="degrees counter-clockwise")] = None,
    scale: Annotated[str | None, Query(description="s or sx,sy")] = None,
    translate: Annotated[str | None, Query(description="tx,ty")] = None,
    center: Annotated[str | None, Query(description="cx,cy")] = None,
    supersample: int = 1,
    format: Literal["png", "jpeg", "webp"] = "png",
    quality: int = 90,
    background: str = "extrapolate",
) -> RenderRequest:
    """GET render's query parameters as a RenderRequest. The transform is either `transform` (JSON)
    or `rotate`/`scale`/`translate`/`center`."""
    fields = {"supersample": supersample, "format": format, "quality": quality, "background": background}
    fields.update({k: v for k, v in (("width", width), ("height", height)) if v is not None})
    if viewport is not None:
        fields["viewport"] = _pair(viewport)
    parts = {
        k: v
        for k, v in {
            "rotate": rotate,
            "scale": _pair(scale),
            "translate": _pair(translate),
            "center": _pair(center),
        }.items()
        if v is not None
    }
    if isinstance(parts.get("scale"), list) and len(parts["scale"]) == 1:
        parts["scale"] = parts["scale"][0]
    if transform is not None:
        if parts:
            raise BadInput("give the transform either as JSON in 'transform' or as rotate/scale/translate/center")
        try:
            fields["transform"] = json.loads(transform)
        except json.JSONDecodeError as e:
            raise BadInput(f"transform is not valid JSON: {e.msg}") from None
    elif parts:
        fields["transform"] = parts
    try:
        return RenderRequest.model_validate(fields)
    except ValidationError as e:
        raise RequestValidationError([{**err, "loc": ("query", *err["loc"])} for err in e.errors()]) from None


async def pinned_image_model(
    name: ModelName, version: Annotated[int, PathParam(ge=1, description="model version")], registry: RegistryDep
) -> ModelRuntime:
    return registry.ready_model(name, "image", "/render", version)


QueryRender = Annotated[RenderRequest, Depends(query_request)]
PinnedImageModel = Annotated[ModelRuntime, Depends(pinned_image_model)]


@router.post("/{name}/render", response_class=Response, responses=RESPONSES)
async def render_post(request: Request, body: RenderRequest, model: ImageModel, settings: SettingsDep) -> Response:
    """Render the model as png, jpeg or webp. Large renders run in tiles of bounded memory."""
    return await respond(request, model, body, settings)


@router.get("/{name}/render", response_class=Response, responses=RESPONSES)
async def render_get(request: Request, model: ImageModel, settings: SettingsDep, req: QueryRender) -> Response:
    """The same render as POST, with the fields as query parameters so that `<img src=…>` works."""
    return await respond(request, model, req, settings)


@router.post("/{name}/versions/{version}/render", response_class=Response, responses=RESPONSES)
async def render_post_version(
    request: Request, body: RenderRequest, model: PinnedImageModel, settings: SettingsDep
) -> Response:
    """A render of one model version: its files never change, so the answer is `immutable`."""
    return await respond(request, model, body, settings, pinned=True)


@router.get("/{name}/versions/{version}/render", response_class=Response, responses=RESPONSES)
async def render_get_version(
    request: Request, model: PinnedImageModel, settings: SettingsDep, req: QueryRender
) -> Response:
    """GET render of one model version (`immutable`)."""
    return await respond(request, model, req, settings, pinned=True)
