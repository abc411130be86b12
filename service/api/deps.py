"""FastAPI dependencies as `Annotated` aliases: settings, registry, the dataplane, and models by task.

The inference routes (v1 query and classify, V2 infer) take only what can fail as a dependency (the model,
by its validated name) and read the app's state themselves: each dependency FastAPI solves costs a few
microseconds per request. `image_model` and `digits_model` read the registry directly for the
same reason."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request

from modelrepo import NAME_MAX

from ..auth.policy import ANONYMOUS, Caller
from ..engine.dataplane import DataPlane
from ..engine.registry import Registry
from ..engine.tasks import DigitsRuntime, ImageRuntime
from ..settings import Settings


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_registry(request: Request) -> Registry:
    return request.app.state.registry


async def get_dataplane(request: Request) -> DataPlane:
    return request.app.state.dataplane


SettingsDep = Annotated[Settings, Depends(get_settings)]
RegistryDep = Annotated[Registry, Depends(get_registry)]


def get_caller(request: Request) -> Caller:
    """Who sent the request (service/server/model_access.py puts it in the request's state)."""
    return request.scope.get("state", {}).get("caller", ANONYMOUS)


CallerDep = Annotated[Caller, Depends(get_caller)]
DataPlaneDep = Annotated[DataPlane, Depends(get_dataplane)]
ModelName = Annotated[str, Path(description="model folder name", examples=["astronaut"], max_length=NAME_MAX)]


def _endpoint(request: Request) -> str:
    return "/" + request.scope["path"].rstrip("/").rsplit("/", 1)[-1]


async def image_model(name: ModelName, request: Request) -> ImageRuntime:
    return request.app.state.registry.ready_model(name, "image", _endpoint(request))


async def digits_model(name: ModelName, request: Request) -> DigitsRuntime:
    return request.app.state.registry.ready_model(name, "digits", _endpoint(request))


ImageModel = Annotated[ImageRuntime, Depends(image_model)]
DigitsModel = Annotated[DigitsRuntime, Depends(digits_model)]
