"""Liveness (the process answers) and readiness (the models have loaded)."""

from __future__ import annotations

from fastapi import APIRouter

from ...errors import NotLoaded
from ..deps import RegistryDep
from ..schemas import ErrorBody, Live, Ready

router = APIRouter(prefix="/health", tags=["health"])


@router.get("/live", response_model=Live)
def live() -> Live:
    return Live()


@router.get("/ready", response_model=Ready, responses={503: {"model": ErrorBody, "description": "still loading"}})
def ready(registry: RegistryDep) -> Ready:
    if not registry.loaded:
        raise NotLoaded("models are still loading")
    models = registry.models
    failed = sum(not m.ready for m in list(models.values()))
    return Ready(models_ready=len(registry.names()) - failed, models_failed=failed)
