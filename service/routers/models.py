"""The model list and one model's metadata, status, provider and training metrics."""
from __future__ import annotations

from fastapi import APIRouter

from ..deps import ModelName, RegistryDep
from ..runtime import ModelRuntime
from ..schemas import ErrorBody, ModelInfo, ModelList

router = APIRouter(prefix="/v1/models", tags=["models"])


def model_info(m: ModelRuntime) -> ModelInfo:
    meta = m.metadata
    return ModelInfo(name=m.name, task=meta.get("task"), version=meta.get("version"), status=m.status,
                     error=m.error, provider=m.provider, description=meta.get("description"),
                     inputs=meta.get("inputs") or [], outputs=meta.get("outputs") or [],
                     metrics=meta.get("metrics") or {}, metadata=meta)


@router.get("", response_model=ModelList)
def list_models(registry: RegistryDep) -> ModelList:
    return ModelList(models=[model_info(m) for m in registry.models.values()])


@router.get("/{name}", response_model=ModelInfo, responses={404: {"model": ErrorBody}})
def get_model(name: ModelName, registry: RegistryDep) -> ModelInfo:
    return model_info(registry.get(name))
