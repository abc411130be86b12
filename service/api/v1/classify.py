"""POST /v1/models/{name}/classify: digits from JSON pixel arrays or uploaded PNG/JPEG files."""

from __future__ import annotations

import numpy as np
from fastapi import APIRouter, Request
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from ...engine.dataplane import DataPlane
from ...engine.json_numbers import only_numbers
from ...engine.tasks import DigitsRuntime
from ...errors import BadInput, TooLarge, UnsupportedMedia
from ...settings import Settings
from ..deps import DigitsModel, digits_model
from ..hotroutes import hot
from ..jsonbody import json_response, parse_body, read_body, validate
from ..schemas import ClassifyRequest, ClassifyResponse, ErrorBody

router = APIRouter(prefix="/v1/models", tags=["digit models"])
OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": ClassifyRequest.model_json_schema()},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "files": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "description": "one or more PNG or JPEG files, any size and colours",
                        }
                    },
                }
            },
        },
    }
}


async def uploaded_images(
    request: Request, model: DigitsRuntime, settings: Settings, dataplane: DataPlane
) -> np.ndarray:
    """The uploaded files, decoded and made MNIST-like."""
    limit = dataplane.row_limit(model)
    try:
        form = await request.form(max_files=limit, max_fields=16)
    except HTTPException as e:
        if "Too many files" in str(e.detail):
            dataplane.check_rows(model, limit + 1)  # the form parser stops at limit + 1 files
        raise
    try:
        files = [v for _, v in form.multi_items() if isinstance(v, UploadFile)]
        fields = [k for k, v in form.multi_items() if not isinstance(v, UploadFile)]
        if fields:
            raise BadInput(f"unexpected form field '{fields[0]}'; send image files only")
        if not files:
            raise BadInput("no image files in the upload")
        datas = [await f.read() for f in files]
        total = sum(len(d) for d in datas)
        if total > settings.max_classify_bytes:
            raise TooLarge(
                f"{total} bytes of images is more than the limit of {settings.max_classify_bytes} "
                "per request (INR_MAX_CLASSIFY_BYTES)"
            )
        names = [f.filename or f"file {i}" for i, f in enumerate(files)]
        return model.preprocess_files(list(zip(datas, names)), settings.max_upload_pixels)
    finally:
        await form.close()


@router.post(
    "/{name}/classify",
    response_model=ClassifyResponse,
    openapi_extra=OPENAPI_BODY,
    responses={c: {"model": ErrorBody} for c in (400, 404, 413, 415, 422, 503)},
)
async def classify(request: Request, model: DigitsModel, include_input: bool = False):
    """Classify digits. JSON `{"images": [...]}` takes MNIST-style pixels as they are (28×28 or 784, white on
    black, [0,1]); uploads are made MNIST-like: greyscale, inverted if dark-on-light, cropped to the ink,
    longest side 20 px, centred by centre of mass in 28×28."""
    dataplane: DataPlane = request.app.state.dataplane  # not dependencies: see service/api/deps.py
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":  # orjson, then pixels into numpy in one pass (service/api/jsonbody.py)
        raw = await read_body(request)
        values = only_numbers(raw, "images")  # the usual body: {"images": [...]} with numbers only
        x = model.pixel_array(values) if values is not None else None
        if x is not None:
            predictions = await dataplane.classify(model, x, include_input)
        else:  # any other body: parsed and checked value by value, so that the answer names what is wrong
            images = validate(ClassifyRequest, parse_body(raw)).images
            predictions = await dataplane.classify_json(model, images, include_input)
    elif kind == "multipart/form-data":
        x = await uploaded_images(request, model, request.app.state.settings, dataplane)
        predictions = await dataplane.classify(model, x, include_input)
    else:
        raise UnsupportedMedia(
            f"content type '{kind or 'none'}' is not accepted; send application/json "
            '{"images": [...]} or multipart/form-data with image files'
        )
    return json_response({"predictions": predictions})


async def classify_direct(request: Request, params: dict):
    """`classify` without a query string (so `include_input` keeps its default), called by the server's hot path
    (service/api/hotroutes.py) with the path parameters."""
    return await classify(request, await digits_model(params["name"], request))


hot(classify, classify_direct, bare=True)
