"""POST and GET /v1/models/{name}/render: an image of any size and region, in tiles."""
from __future__ import annotations

import json
import logging
import threading
from typing import Annotated, Literal

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError

from ..deps import ImageModel, SettingsDep
from ..errors import BadInput, ClientGone, TooLarge
from ..imaging import MEDIA_TYPES, Background, RenderSpec, check_render_coords, encode, render
from ..runtime import ModelRuntime
from ..schemas import ErrorBody, RenderRequest, sampling_matrix
from ..settings import Settings

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/models", tags=["image models"])
RESPONSES = {200: {"content": {t: {} for t in MEDIA_TYPES.values()}, "description": "the image"},
             **{c: {"model": ErrorBody} for c in (400, 404, 413, 422, 503)}}


DISCONNECT_POLL_S = 0.1


def render_bytes(model: ModelRuntime, req: RenderRequest, settings: Settings,
                 cancelled: threading.Event | None = None) -> bytes:
    samples = req.width * req.height * req.supersample ** 2
    if req.supersample > settings.max_supersample:
        raise TooLarge(f"supersample {req.supersample} is more than the limit of {settings.max_supersample} "
                       "(INR_MAX_SUPERSAMPLE)")
    if samples > settings.max_render_pixels:
        raise TooLarge(f"width × height × supersample² = {samples} is more than the limit of "
                       f"{settings.max_render_pixels} (INR_MAX_RENDER_PIXELS)")
    spec = RenderSpec(width=req.width, height=req.height, matrix=sampling_matrix(req.transform),
                      viewport=req.viewport, supersample=req.supersample,
                      background=Background.parse(req.background))
    try:
        check_render_coords(spec)
    except ValueError as e:
        raise BadInput(str(e)) from None

    def tile(x):
        if cancelled is not None and cancelled.is_set():  # checked before every tile
            raise ClientGone("the client disconnected; render abandoned")
        return model.predict(x)["rgb"]

    pixels = render(tile, spec, settings.render_tile_samples)
    return encode(pixels, req.format, req.quality)


async def respond(request: Request, model: ModelRuntime, req: RenderRequest, settings: Settings) -> Response:
    """Render in a worker thread; at most `render_concurrency` renders run at once, the rest wait.

    A caller that disconnects (a viewer that zoomed again) cancels its render: the next tile
    sees the flag and stops, so an abandoned render frees its slot instead of finishing.
    """
    limiter = getattr(request.app.state, "render_limiter", None)
    cancelled = threading.Event()
    outcome: dict = {}

    async def work(scope: anyio.CancelScope) -> None:
        try:
            outcome["data"] = await anyio.to_thread.run_sync(render_bytes, model, req, settings, cancelled,
                                                             limiter=limiter)
        except Exception as e:  # re-raised below, outside the task group, for the error handlers
            outcome["error"] = e
        finally:
            scope.cancel()  # stop watching

    async def watch() -> None:
        while not await request.is_disconnected():
            await anyio.sleep(DISCONNECT_POLL_S)
        cancelled.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(work, tg.cancel_scope)
        tg.start_soon(watch)
    if isinstance(outcome.get("error"), ClientGone):
        log.info("render of %s %dx%d abandoned: the client disconnected", model.name, req.width, req.height)
    if "error" in outcome:
        raise outcome["error"]
    data = outcome["data"]
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
