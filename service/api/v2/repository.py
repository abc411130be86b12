"""Triton's model repository extension: `POST /v2/repository/index`, `.../models/{name}/load`, `/unload`.

The index answers in every mode; load and unload only in `--model-control-mode explicit`
(400 otherwise, as in Triton). Bodies are optional, as tritonclient sends them:
index `{"ready": bool}`, load `{"parameters": {...}}`, unload `{"parameters": {"unload_dependents": bool}}`.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from ...auth.policy import who
from ...engine.control import ModelControl
from ...errors import BadInput
from ..deps import CallerDep, ModelName
from ..jsonbody import JSONError, loads
from ..schemas import ErrorBody

audit = logging.getLogger("inr.audit")  # model loads and unloads, naming who asked
router = APIRouter(prefix="/v2/repository", tags=["V2 model repository"])
ERRORS = {c: {"model": ErrorBody} for c in (400, 403, 404)}
BODY = {"requestBody": {"required": False, "content": {"application/json": {"schema": {"type": "object"}}}}}


async def get_control(request: Request) -> ModelControl:
    return request.app.state.control


ControlDep = Annotated[ModelControl, Depends(get_control)]


async def json_body(request: Request) -> dict:
    """The optional JSON object body; empty means {}."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = loads(raw)
    except JSONError as e:
        raise BadInput(f"body: invalid JSON ({e})") from None
    if not isinstance(body, dict):
        raise BadInput("body: expected a JSON object")
    return body


Body = Annotated[dict, Depends(json_body)]


def parameters(body: dict, allowed: set[str]) -> dict:
    params = body.get("parameters", {})
    if not isinstance(params, dict):
        raise BadInput("parameters: expected a JSON object")
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise BadInput(
            f"parameters: {', '.join(unknown)} not supported (a model is loaded from its folder in "
            "the repository; 'config' and 'file:' overrides are not)"
        )
    return params


@router.post("/index", responses=ERRORS, openapi_extra=BODY)
async def repository_index(control: ControlDep, body: Body, caller: CallerDep) -> list[dict]:
    """Every model in the repository (loaded or not) with its versions, states and reasons; a READY version that
    is not in memory says so in its reason (it loads on first use). `{"limit": N, "after": NAME}` (an extension)
    pages through a large repository by name."""
    ready = body.get("ready", False)
    if not isinstance(ready, bool):
        raise BadInput(f"ready: expected true or false, got {ready!r}")
    limit, after = body.get("limit"), body.get("after", "")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise BadInput(f"limit: expected a whole number of models of at least 1, got {limit!r}")
    if not isinstance(after, str):
        raise BadInput(f"after: expected the last model name of the page before, got {after!r}")
    return await run_in_threadpool(control.index, ready, limit, after, caller)


@router.post("/models/{name}/load", responses=ERRORS, openapi_extra=BODY)
async def load_model(name: ModelName, control: ControlDep, body: Body, caller: CallerDep) -> list[dict]:
    """Load the model, or reload it: new versions are loaded beside the serving ones and swapped in
    once ready. Answers the model's index rows."""
    parameters(body, set())
    await control.load(name)
    audit.info("model load name=%s by=%s", name, who(caller))
    return [r for r in await run_in_threadpool(control.index, False, None, "", caller) if r["name"] == name]


@router.post("/models/{name}/unload", responses=ERRORS, openapi_extra=BODY)
async def unload_model(name: ModelName, control: ControlDep, body: Body, caller: CallerDep) -> dict:
    """Stop serving the model; requests already running on it finish."""
    if parameters(body, {"unload_dependents"}).get("unload_dependents") not in (None, False, True):
        raise BadInput("parameters.unload_dependents: expected true or false")
    await control.unload(name)
    audit.info("model unload name=%s by=%s", name, who(caller))
    return {}
