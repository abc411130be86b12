"""POST /v1/models/{name}/query: RGB at coordinates, through an optional transform.

The coordinates of the usual body are read from its text (`leading_rows`, service/engine/json_numbers.py); any other
body is parsed with orjson and its coordinates go straight into numpy (service/api/jsonbody.py);
`QueryRequest` documents the body and validates everything but well-formed coordinates, and all of
the body when the coordinates are not well-formed, so that its messages name the bad value."""

from __future__ import annotations

import numpy as np
from fastapi import APIRouter, Request

from ...engine.json_numbers import float_rows, leading_rows
from ...geometry.sampling import Background
from ..deps import ModelName
from ..hotroutes import hot
from ..jsonbody import collector_paused, json_response, openapi_body, parse_body, read_body, validate
from ..schemas import ErrorBody, QueryRequest, QueryResponse, sampling_matrix

router = APIRouter(prefix="/v1/models", tags=["image models"])
ERRORS = {c: {"model": ErrorBody} for c in (400, 404, 413, 422, 503)}
PLACEHOLDER = [[0.0, 0.0]]
OPENAPI_BODY = openapi_body(QueryRequest)


@router.post("/{name}/query", response_model=QueryResponse, responses=ERRORS, openapi_extra=OPENAPI_BODY)
async def query(request: Request, name: ModelName):
    """The model's colour at each coordinate; with a transform, at the inverse-mapped coordinates."""
    state = request.app.state  # not dependencies: the name is the only parameter (service/api/deps.py)
    model = state.registry.ready_model(name, "image", "/query")
    dataplane = state.dataplane
    raw = await read_body(request)
    fast = leading_rows(raw, "coords", 2)  # the usual body, read from its text
    if fast is not None:
        coords, doc = fast[0], {"coords": PLACEHOLDER, **fast[1]}
    else:
        with collector_paused():  # a list per coordinate: no collection while they live (service/api/jsonbody.py)
            doc = parse_body(raw)
            coords = float_rows(doc.get("coords"), 2) if isinstance(doc, dict) else None
            if coords is not None:
                doc = {**doc, "coords": PLACEHOLDER}  # the lists are freed here, before the collector resumes
    if coords is None:  # the slow path, for its messages
        body = validate(QueryRequest, doc)
        coords = np.asarray(body.coords, dtype=np.float64)
    else:
        body = validate(QueryRequest, doc)
    matrix = sampling_matrix(body.transform, model.image_size)  # rotation and scale in the model's square pixels
    rgb = await dataplane.query(model, coords, matrix, Background.parse(body.background))
    return json_response({"rgb": np.round(rgb.astype(np.float64), 6)})


async def query_direct(request: Request, params: dict):
    """`query`, called by the server's hot path (service/api/hotroutes.py) with the path parameters."""
    return await query(request, params["name"])


hot(query, query_direct)
