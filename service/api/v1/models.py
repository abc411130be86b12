"""The model list and one model's metadata, status, provider and training metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse
from pydantic import ValidationError

from modelrepo import NAME_MAX, ImageSource

from ...engine.registry import ModelState
from ...errors import ModelNotFound, NoPreview
from ..deps import CallerDep, ModelName, RegistryDep, SettingsDep
from ..schemas import ErrorBody, ModelInfo, ModelList, ModelSummary, TensorInfo, VersionInfo

router = APIRouter(prefix="/v1/models", tags=["models"])
PAGE = 1000  # models per page, at most


def _typed(meta: dict, key: str, kind: type, default=None):
    """A metadata value of the expected type, else the default: a failed model's metadata may be junk."""
    value = meta.get(key)
    return value if isinstance(value, kind) and not isinstance(value, bool) else default


def preview_path(m: ModelState, fetch: bool = False) -> Path | None:
    """metadata's `preview` file, only when it is a plain file inside the serving version's folder
    (or, for older layouts, the model folder). On S3: listed in the bucket, and pulled into the cache with `fetch`
    (the preview route's; a listing of models reads none)."""
    name = _typed(m.metadata, "preview", str)
    if not name:
        return None
    current = m.serving
    if current is not None and current.remote:
        if "/" in name or name in (".", ".."):
            return None
        repo = current.options.repository
        listed = repo.model(m.name)
        if listed is None or f"{current.version}/{name}" not in listed.files:
            return None
        if not fetch:
            return current.version_dir / name
        try:
            return current.fetch(name, None)
        except Exception:  # noqa: BLE001 - S3 not answering, the object gone: no preview now
            return None
    for root in ([current.version_dir] if current else []) + [m.path]:
        root = root.resolve()
        path = (root / name).resolve()
        if path.parent == root and path.is_file():
            return path
    return None


SHOWN = {"name", "task", "description", "inputs", "outputs", "metrics", "version", "onnx_sha256", "preview"}
INTERNAL = {"separable"}  # how the service renders, not what the model is


def provenance(meta: dict) -> dict:
    """The free-form training record without the fields shown on their own, the render internals and the
    per-epoch history."""
    out = {k: v for k, v in meta.items() if k not in SHOWN | INTERNAL}
    if isinstance(out.get("training"), dict):
        out["training"] = {k: v for k, v in out["training"].items() if k != "history"}
    return out


def tensors(meta: dict, key: str) -> list[TensorInfo]:
    out = []
    for t in _typed(meta, key, list, []):
        try:
            out.append(TensorInfo.model_validate(t))
        except ValidationError:
            continue  # a failed model's junk: shown as absent
    return out


def native_size(m: ModelState) -> dict:
    """An image model's native width and height (its serving, else latest, version's `source`)."""
    size = ImageSource.from_metadata(m.metadata).native if m.task == "image" else None
    return {"width": size[0], "height": size[1]} if size else {}


def model_info(m: ModelState) -> ModelInfo:
    meta = m.metadata
    preview = f"/v1/models/{m.name}/preview" if preview_path(m) else None
    serving = m.serving
    versions = [
        VersionInfo(
            version=v.version,
            status=v.status,
            error=v.error,
            serving=v is serving,
            onnx_sha256=v.record.onnx_sha256 if v.record else None,
            resident=v.resident,
            bytes=v.bytes,
            load_peak_bytes=v.load_peak,
        )
        for v in m.versions
    ]
    return ModelInfo(
        name=m.name,
        task=m.task,
        version=serving.version if serving else None,
        status=m.status,
        error=m.reason,
        provider=m.provider,
        versions=versions,
        version_policy=m.spec.version_policy.describe() if m.spec else None,
        max_batch_size=m.spec.max_batch_size if m.spec else None,
        description=_typed(meta, "description", str),
        inputs=tensors(meta, "inputs"),
        outputs=tensors(meta, "outputs"),
        metrics=_typed(meta, "metrics", dict, {}),
        metadata=provenance(meta),
        preview_url=preview,
        **native_size(m),
    )


@router.get("", response_model=ModelList, response_model_exclude_unset=True)
def list_models(
    registry: RegistryDep,
    caller: CallerDep,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, le=PAGE, description="models per page")] = PAGE,
    after: Annotated[str, Query(max_length=NAME_MAX, description="the last name of the page before")] = "",
    q: Annotated[str, Query(max_length=NAME_MAX, description="only names that contain this, any case")] = "",
) -> ModelList:
    """One small summary per model, by name, a page at a time (`next`); GET /v1/models/NAME has the detail."""
    wanted = q.lower()
    names = registry.names_for(caller, (n for n in registry.names() if n > after and wanted in n.lower()), limit + 1)
    models = []
    for name in names[:limit]:
        try:
            models.append(summary(registry.get(name)))
        except ModelNotFound:  # its folder went since the listing
            continue
    more = len(names) > limit
    query = urlencode({"limit": limit, "after": names[limit - 1], **({"q": q} if q else {})}) if more else ""
    login = {"login": "/iiif/auth/login"} if settings.access_keys else {}
    return ModelList(models=models, **({"next": f"/v1/models?{query}"} if more else {}), **login)


def summary(m: ModelState) -> ModelSummary:
    return ModelSummary(
        name=m.name,
        task=m.task,
        status=m.status,
        error=m.reason,
        versions=[v.version for v in m.versions if v.ready],
        url=f"/v1/models/{m.name}",
    )


@router.get("/{name}", response_model=ModelInfo, responses={404: {"model": ErrorBody}})
def get_model(name: ModelName, registry: RegistryDep) -> ModelInfo:
    return model_info(registry.get(name))


@router.get(
    "/{name}/preview",
    response_class=FileResponse,
    responses={200: {"content": {"image/png": {}}}, 404: {"model": ErrorBody}},
)
def get_preview(name: ModelName, registry: RegistryDep) -> FileResponse:
    """The preview image written at training time (the fitted network at training resolution)."""
    model = registry.get(name)
    path = preview_path(model, fetch=True)
    if path is None:
        raise NoPreview(model.name)
    return FileResponse(path, media_type="image/png")
