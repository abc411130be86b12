"""POST and GET /v1/models/{name}/render: an image of any size and region, in tiles."""
from __future__ import annotations

import json
from typing import Annotated, Literal

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError

from ..deps import ImageModel, SettingsDep
from ..errors import BadInput
from ..imaging import MEDIA_TYPES, Background, RenderSpec, check_render_coords, encode, render
from ..runtime import ModelRuntime
from ..schemas import ErrorBody, RenderRequest, sampling_matrix
from ..settings import Settings

router = APIRouter(prefix="/v1/models", tags=["image models"])
RESPONSES = {200: {"content": {t: {} for t in MEDIA_TYPES.values()}, "description": "the image"},
             **{c: {"model": ErrorBody} for c in (400, 404, 413, 422, 503)}}


def render_bytes(model: ModelRuntime, req: RenderRequest, settings: Settings) -> bytes:
    samples = req.width * req.height * req.supersample ** 2
    if req.supersample > settings.max_supersample:
        raise BadInput(f"supersample {req.supersample} is more than the limit of {settings.max_supersample} "
                       "(INR_MAX_SUPERSAMPLE)")
    if samples > settings.max_render_pixels:
        raise BadInput(f"width × height × supersample² = {samples} is more than the limit of "
                       f"{settings.max_render_pixels} (INR_MAX_RENDER_PIXELS)")
    spec = RenderSpec(width=req.width, height=req.height, matrix=sampling_matrix(req.transform),
                      viewport=req.viewport, supersample=req.supersample,
                      background=Background.parse(req.background))
    try:
        check_render_coords(spec)
    except ValueError as e:
        raise BadInput(str(e)) from None
    pixels = render(lambda x: model.predict(x)["rgb"], spec, settings.render_tile_samples)
    return encode(pixels, req.format, req.quality)


async def respond(request: Request, model: ModelRuntime, req: RenderRequest, settings: Settings) -> Response:
    """Render in a worker thread; at most `render_concurrency` renders run at once, the rest wait."""
    limiter = getattr(request.app.state, "render_limiter", None)
    data = await anyio.to_thread.run_sync(render_bytes, model, req, settings, limiter=limiter)
    return Response(data, media_type=MEDIA_TYPES[req.format])


@router.post("/{name}/render", response_class=Response, responses=RESPONSES)
async def render_post(request: Request, body: RenderRequest, model: ImageModel, settings: SettingsDep) -> Response:
    """Render the model as png, jpeg or webp. Large renders run in tiles of bounded memory."""
    return await respond(request, model, body, settings)


def _pair(text: str | None) -> list[str] | None:
    return None if text is None else text.split(",")


@router.get("/{name}/render", response_class=Response, responses=RESPONSES)
async def render_get(
    request: Request,
    model: ImageModel,
    settings: SettingsDep,
    width: int = 256,
    height: int = 256,
    viewport: Annotated[str | None, Query(description="x0,y0,x1,y1", examples=["0,0,0.5,0.5"])] = None,
    transform: Annotated[str | None, Query(description="the transform as JSON, e.g. {\"rotate\":90}")] = None,
    rotate: Annotated[float | None, Query(description="degrees counter-clockwise")] = None,
    scale: Annotated[str | None, Query(description="s or sx,sy")] = None,
    translate: Annotated[str | None, Query(description="tx,ty")] = None,
    center: Annotated[str | None, Query(description="cx,cy")] = None,
    supersample: int = 1,
    format: Literal["png", "jpeg", "webp"] = "png",
    quality: int = 90,
    background: str = "extrapolate",
) -> Response:
    """The same render as POST, with the fields as query parameters so that `<img src=…>` works.
    The transform is either `transform` (JSON) or `rotate`/`scale`/`translate`/`center`."""
    fields = {"width": width, "height": height, "supersample": supersample, "format": format, "quality": quality,
              "background": background}
    if viewport is not None:
        fields["viewport"] = _pair(viewport)
    parts = {k: v for k, v in {"rotate": rotate, "scale": _pair(scale), "translate": _pair(translate),
                               "center": _pair(center)}.items() if v is not None}
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
        req = RenderRequest.model_validate(fields)
    except ValidationError as e:
        raise RequestValidationError([{**err, "loc": ("query", *err["loc"])} for err in e.errors()]) from None
    return await respond(request, model, req, settings)
