"""The Open Inference Protocol (KServe V2 / Triton) REST endpoints under /v2.

Every model route exists with and without `/versions/{version}`; no version means the latest.
Status codes follow Triton: 400 for a bad request or a model that is not ready on `/ready`,
404 for an unknown model or version, 503 while models load or for a model that failed.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import Response

from ...errors import BadInput, NotLoaded
from ..deps import CallerDep, ModelName, RegistryDep
from ..hotroutes import hot
from ..schemas import ErrorBody
from .infer import config_of, infer, metadata_of, model_version, resolve
from .tensors import HEADER, decompress, parse_request

router = APIRouter(prefix="/v2", tags=["V2 inference protocol"])
ERRORS = {c: {"model": ErrorBody} for c in (400, 404, 413, 503)}
EXTENSIONS = ["binary_tensor_data", "classification", "model_configuration", "model_repository", "statistics"]


async def path_version(request: Request) -> str | None:
    return request.path_params.get("version")


async def declare_version(version: Annotated[str, Path(description="model version", examples=["1"])]) -> None:
    """Documents {version} in OpenAPI; handlers read it through `VersionDep`."""


VersionDep = Annotated[str | None, Depends(path_version)]


def both(method: str, tail: str, **kwargs):
    """Register the route as /models/{name}<tail> (latest version) and /models/{name}/versions/{version}<tail>."""

    def register(fn):
        route = getattr(router, method)
        route(f"/models/{{name}}{tail}", responses=ERRORS, **kwargs)(fn)
        route(
            f"/models/{{name}}/versions/{{version}}{tail}",
            responses=ERRORS,
            dependencies=[Depends(declare_version)],
            **kwargs,
        )(fn)
        return fn

    return register


INFER_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"type": "object", "description": "V2 inference request"}},
            "application/octet-stream": {
                "schema": {
                    "type": "string",
                    "format": "binary",
                    "description": "JSON header of Inference-Header-Content-Length bytes, then tensors",
                }
            },
        },
    }
}


@both("post", "/infer", response_class=Response, openapi_extra=INFER_BODY)
async def model_infer(request: Request, name: ModelName) -> Response:
    """Run the model on JSON or binary tensors; outputs come back as JSON data or binary, as requested."""
    state = request.app.state  # not dependencies, which cannot fail here: see service/api/deps.py
    model = resolve(state.registry, name, request.path_params.get("version"), ready=True)
    body = decompress(await request.body(), request.headers.get("content-encoding"), state.settings.max_body_bytes)
    req = parse_request(body, request.headers.get(HEADER))
    content, headers = await infer(req, model, state.dataplane)
    if headers["content-type"] == "application/json":
        return Response(content, media_type="application/json")
    return Response(
        content, headers={k: v for k, v in headers.items() if k != "content-type"}, media_type=headers["content-type"]
    )


async def model_infer_direct(request: Request, params: dict) -> Response:
    """`model_infer`, called by the server's hot path (service/api/hotroutes.py) with the path parameters (the version,
    where the route has one, is read from them by the endpoint itself)."""
    return await model_infer(request, params["name"])


hot(model_infer, model_infer_direct)


@router.get("")
async def server_metadata(request: Request) -> dict:
    """Server name, version and the protocol extensions it supports."""
    return {"name": "inr-serve", "version": request.app.version, "extensions": EXTENSIONS}


@router.get("/health/live")
async def live() -> dict:
    return {"live": True}


@router.get("/health/ready", responses={400: {"model": ErrorBody, "description": "still loading"}})
async def ready(registry: RegistryDep) -> dict:
    """200 once the models have loaded (failed ones are listed as failed), 400 before, as Triton does."""
    if not registry.loaded:
        raise BadInput("models are still loading")
    return {"ready": True}


@router.get("/models/stats", responses=ERRORS)
async def all_stats(request: Request, registry: RegistryDep, caller: CallerDep) -> dict:
    """Statistics of every ready model (Triton's statistics extension)."""
    if not registry.loaded:
        raise NotLoaded("models are still loading")
    shown = set(registry.names_for(caller, registry.models))
    return {
        "model_stats": [
            request.app.state.metrics.stats_json(m.name, model_version(m.serving))
            for m in registry.models.values()
            if m.ready and m.name in shown
        ]
    }


@both("get", "")
async def model_metadata(name: ModelName, registry: RegistryDep, version: VersionDep) -> dict:
    """Name, versions, platform and the input and output tensors."""
    return metadata_of(resolve(registry, name, version, ready=True), registry)


@both("get", "/ready")
async def model_ready(name: ModelName, registry: RegistryDep, version: VersionDep) -> dict:
    """200 when the model (version) serves requests; 400 when it failed to load."""
    state = registry.get(name)
    if not version and not state.versions:
        raise BadInput(f"model '{name}' is not ready: {state.status}" + (f": {state.reason}" if state.reason else ""))
    model = resolve(registry, name, version)
    if not model.ready:
        raise BadInput(
            f"model '{name}' version {model_version(model)} is not ready: {model.status}"
            + (f": {model.error}" if model.error else "")
        )
    return {"name": name, "ready": True}


@both("get", "/config")
async def model_config(name: ModelName, registry: RegistryDep, version: VersionDep) -> dict:
    """The model's Triton configuration as JSON, built from its spec (config.pbtxt + metadata.json)."""
    return config_of(resolve(registry, name, version, ready=True))


@both("get", "/stats")
async def model_stats(request: Request, name: ModelName, registry: RegistryDep, version: VersionDep) -> dict:
    model = resolve(registry, name, version, ready=True)
    return {"model_stats": [request.app.state.metrics.stats_json(name, model_version(model))]}
