"""POST /v1/models/{name}/query: RGB at coordinates, through an optional transform."""
from __future__ import annotations

import numpy as np
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ..deps import ImageModel, InferenceDep, SettingsDep
from ..imaging import Background
from ..limits import check_rows
from ..schemas import ErrorBody, QueryRequest, QueryResponse, sampling_matrix

router = APIRouter(prefix="/v1/models", tags=["image models"])
ERRORS = {c: {"model": ErrorBody} for c in (400, 404, 413, 422, 503)}


@router.post("/{name}/query", response_model=QueryResponse, responses=ERRORS)
async def query(body: QueryRequest, model: ImageModel, settings: SettingsDep, inference: InferenceDep):
    """The model's colour at each coordinate; with a transform, at the inverse-mapped coordinates."""
    check_rows(model, len(body.coords), settings)
    src = model.preprocess(body.coords, sampling_matrix(body.transform))
    out = await inference(model, src.astype(np.float32))
    rgb = model.postprocess(out, src, Background.parse(body.background))
    return JSONResponse({"rgb": np.round(rgb.astype(np.float64), 6).tolist()})
