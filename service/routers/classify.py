"""POST /v1/models/{name}/classify: digits from JSON pixel arrays or uploaded PNG/JPEG files."""
from __future__ import annotations

import itertools

import numpy as np
from fastapi import APIRouter, Request
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from ..deps import DigitsModel, InferenceDep, SettingsDep
from ..errors import BadInput, TooLarge, UnsupportedMedia
from ..jsonbody import float_rows, json_response, read_json, validate
from ..preprocess import SIDE, decode, images_from_json, mnist_like
from ..schemas import ClassifyRequest, ClassifyResponse, ErrorBody
from ..settings import Settings

router = APIRouter(prefix="/v1/models", tags=["digit models"])
OPENAPI_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": ClassifyRequest.model_json_schema()},
    "multipart/form-data": {"schema": {"type": "object", "properties": {"files": {
        "type": "array", "items": {"type": "string", "format": "binary"},
        "description": "one or more PNG or JPEG files, any size and colours"}}}}}}}


async def json_images(request: Request, settings: Settings) -> np.ndarray:
    """orjson, then one numpy pass over well-formed pixels (service/jsonbody.py); anything else takes
    the checks of `images_from_json`, which name the bad image."""
    doc = await read_json(request)
    images = validate(ClassifyRequest, doc).images
    x = fast_images(images) if len(images) <= settings.max_classify_images else None
    return images_from_json(images, settings.max_classify_images) if x is None else x


def fast_images(images: list) -> np.ndarray | None:
    """[N, 1, 28, 28] float32 when every image is 784 numbers or 28 rows of 28, all in [0, 1]; else None."""
    if not images or set(map(type, images)) != {list}:
        return None
    lengths = set(map(len, images))
    if lengths == {SIDE * SIDE}:
        flat = float_rows(images, SIDE * SIDE)
    elif lengths == {SIDE}:
        flat = float_rows(list(itertools.chain.from_iterable(images)), SIDE)  # the rows of every image
    else:
        return None
    if flat is None or flat.min() < 0.0 or flat.max() > 1.0:
        return None
    return flat.astype(np.float32).reshape(len(images), 1, SIDE, SIDE)


async def uploaded_images(request: Request, settings: Settings) -> np.ndarray:
    try:
        form = await request.form(max_files=settings.max_classify_images, max_fields=16)
    except HTTPException as e:
        if "Too many files" in str(e.detail):
            raise TooLarge(f"more images than the limit of {settings.max_classify_images} per request "
                           "(INR_MAX_CLASSIFY_IMAGES)") from None
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
            raise TooLarge(f"{total} bytes of images is more than the limit of {settings.max_classify_bytes} "
                           "per request (INR_MAX_CLASSIFY_BYTES)")
        names = [f.filename or f"file {i}" for i, f in enumerate(files)]
        return np.stack([mnist_like(decode(d, n, settings.max_upload_pixels), n)
                         for d, n in zip(datas, names)])[:, None]
    finally:
        await form.close()


@router.post("/{name}/classify", response_model=ClassifyResponse, openapi_extra=OPENAPI_BODY,
             responses={c: {"model": ErrorBody} for c in (400, 404, 413, 415, 422, 503)})
async def classify(request: Request, model: DigitsModel, settings: SettingsDep, inference: InferenceDep,
                   include_input: bool = False):
    """Classify digits. JSON `{"images": [...]}` takes MNIST-style pixels as they are (28×28 or 784, white on
    black, [0,1]); uploads are made MNIST-like: greyscale, inverted if dark-on-light, cropped to the ink,
    longest side 20 px, centred by centre of mass in 28×28."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        x = await json_images(request, settings)
    elif kind == "multipart/form-data":
        x = await uploaded_images(request, settings)
    else:
        raise UnsupportedMedia(f"content type '{kind or 'none'}' is not accepted; send application/json "
                               "{\"images\": [...]} or multipart/form-data with image files")
    probs = np.round((await inference(model, x))["probabilities"].astype(np.float64), 6)
    preds = [{"label": label, "probabilities": p} for label, p in zip(np.argmax(probs, axis=1).tolist(), probs)]
    if include_input:
        for pred, img in zip(preds, np.round(x[:, 0].astype(np.float64), 4)):
            pred["input"] = img
    return json_response({"predictions": preds})
