"""The model list and one model's metadata, status, provider and training metrics."""
from __future__ import annotations

from fastapi import APIRouter

from ..deps import ModelName, RegistryDep
from ..runtime import ModelRuntime
from ..schemas import ErrorBody, ModelInfo, ModelList

router = APIRouter(prefix="/v1/models", tags=["models"])


def _typed(meta: dict, key: str, kind: type, default=None):
    """A metadata value of the expected type, else the default: a failed model's metadata may be junk."""
    value = meta.get(key)
    return value if isinstance(value, kind) and not isinstance(value, bool) else default


def model_info(m: ModelRuntime) -> ModelInfo:
    meta = m.metadata
    return ModelInfo(name=m.name, task=_typed(meta, "task", str), version=_typed(meta, "version", int),
                     status=m.status, error=m.error, provider=m.provider,
                     description=_typed(meta, "description", str),
                     inputs=[s for s in _typed(meta, "inputs", list, []) if isinstance(s, dict)],
                     outputs=[s for s in _typed(meta, "outputs", list, []) if isinstance(s, dict)],
                     metrics=_typed(meta, "metrics", dict, {}), metadata=meta)


@router.get("", response_model=ModelList)
def list_models(registry: RegistryDep) -> ModelList:
    return ModelList(models=[model_info(m) for m in registry.models.values()])


@router.get("/{name}", response_model=ModelInfo, responses={404: {"model": ErrorBody}})
def get_model(name: ModelName, registry: RegistryDep) -> ModelInfo:
    return model_info(registry.get(name))
