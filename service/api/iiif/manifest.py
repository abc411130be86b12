"""IIIF Presentation API 3.0 over the image models, for viewers that open manifests (Mirador, the Universal Viewer).

* `GET /iiif/3/{identifier}/manifest.json`: a Manifest with one Canvas per ready version of the image model
  (`NAME@VERSION`: that version's Canvas only). Each Canvas has the model's IIIF size, a painting Annotation
  whose Image body carries the version's Image API 3.0 service (`/iiif/3/NAME@VERSION`), a label, a summary,
  the training metadata a person reads (source, training size, PSNR, SSIM, parameters) and a thumbnail.
* `GET /iiif/3/collection.json`: a Collection of every ready image model's Manifest; for a repository of more than
  INR_IIIF_COLLECTION_PAGE models (1,000, Presentation 3's collections of collections), a Collection of pages,
  `GET /iiif/3/collection/N.json`, each the image models among one page of models by name.

The JSON is built with `iiif-prezi3` (the IIIF community's Presentation 3 library, its models generated from
the presentation validator's schema), never by hand. CORS as on info.json (service/api/iiif/router.py).
"""

from __future__ import annotations

import json
import math

from fastapi import APIRouter, Request
from fastapi.responses import Response
from iiif_prezi3 import (
    Annotation,
    AnnotationBody,
    AnnotationPage,
    Canvas,
    Collection,
    CollectionRef,
    KeyValueString,
    Manifest,
    ManifestRef,
    ServiceV3,
    config,
)
from starlette.concurrency import run_in_threadpool

from modelrepo.serving import ImageSource

from ...auth.caching import cache_control
from ...engine.runtime import ModelRuntime
from ...errors import NotFound, ServiceError
from ..deps import CallerDep, RegistryDep, SettingsDep
from . import auth
from .info import Identifier, base_url, image_id, image_size, resolve

config.configs["helpers.auto_fields.AutoLang"].auto_lang = "en"  # plain strings become {"en": [...]}
MEDIA_TYPE = 'application/ld+json;profile="http://iiif.io/api/presentation/3/context.json"'
THUMBNAIL = 256
LABEL = "INR image models"


def _number(value) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def training_metadata(meta: dict) -> list[KeyValueString]:
    """What a person wants to read about a fit: the source image, its size, PSNR, SSIM, the model's size (the
    free-form provenance of the version's metadata.json, shown as it is; the size typed through the contract)."""
    rows = []
    source = meta.get("source") if isinstance(meta.get("source"), dict) else {}
    if source.get("name") or source.get("image"):
        kind = f" ({source['kind']})" if isinstance(source.get("kind"), str) else ""
        rows.append(("Source", f"{source.get('name') or source.get('image')}{kind}"))
    source_size = ImageSource.from_metadata(meta)
    if source_size.native:
        rows.append(("Native size", f"{source_size.native[0]} × {source_size.native[1]} pixels"))
    if source_size.size and source_size.size != source_size.native:
        rows.append(("Training size", f"{source_size.size[0]} × {source_size.size[1]} pixels"))
    metrics = meta.get("metrics") if isinstance(meta.get("metrics"), dict) else {}
    psnr = _number(metrics.get("full_psnr", metrics.get("train_psnr")))
    if psnr is not None:
        rows.append(("PSNR", f"{psnr:.2f} dB"))
    if _number(metrics.get("ssim")) is not None:
        rows.append(("SSIM", f"{metrics['ssim']:.4f}"))
    arch = meta.get("architecture") if isinstance(meta.get("architecture"), dict) else {}
    if isinstance(arch.get("parameters"), int):
        rows.append(("Parameters", f"{arch['parameters']:,}"))
    if isinstance(arch.get("model"), str):
        rows.append(("Model", arch["model"]))
    rows.append(("Version", str(meta.get("version", ""))))
    return [KeyValueString(label=k, value=v) for k, v in rows]


def canvas_of(request: Request, settings, model: ModelRuntime, manifest_id: str, bare: bool = False) -> Canvas:
    """A version's Canvas; `bare`: its image and size alone, for a caller who may not read the model (no summary,
    training metadata, thumbnail or version in its label)."""
    ident = Identifier(model.name, model.version)
    service_id = image_id(request, settings, ident)
    width, height = image_size(model.metadata)  # the native size and aspect, as info.json
    service = [ServiceV3(id=service_id, type="ImageService3", profile="level2")]
    canvas_id = f"{manifest_id.removesuffix('/manifest.json')}/canvas/{'1' if bare else model.version}"
    body = AnnotationBody(
        id=f"{service_id}/full/max/0/default.jpg",
        type="Image",
        format="image/jpeg",
        width=width,
        height=height,
        service=service,
    )
    painting = Annotation(id=f"{canvas_id}/annotation/1", motivation="painting", body=body, target=canvas_id)
    page = AnnotationPage(id=f"{canvas_id}/page/1", items=[painting])
    if bare:
        return Canvas(id=canvas_id, width=width, height=height, label=model.name, items=[page])
    up = "^" if max(width, height) < THUMBNAIL else ""  # a smaller image is upscaled by the model, and says so
    thumbnail = AnnotationBody(
        id=f"{service_id}/full/{up}!{THUMBNAIL},{THUMBNAIL}/0/default.jpg",
        type="Image",
        format="image/jpeg",
        service=service,
    )
    description = model.metadata.get("description")
    return Canvas(
        id=canvas_id,
        width=width,
        height=height,
        label=f"{model.name}, version {model.version}",
        summary=description
        if isinstance(description, str) and description
        else f"the image model {model.name}, version {model.version}",
        metadata=training_metadata(model.metadata),
        thumbnail=[thumbnail],
        items=[page],
    )


def manifest_of(request: Request, settings, registry, ident: Identifier, bare: bool = False) -> Manifest:
    """404 for an unknown model or version, 400 for a model that is not an image model (resolve). `bare`: for a
    caller who may not read the model (a 401 that carries the auth services, or a substitute's reader): one Canvas
    of the image and its size, without the description, the training metadata, the thumbnail or the versions."""
    serving = resolve(registry, ident)
    manifest_id = f"{image_id(request, settings, ident)}/manifest.json"
    if bare:
        return Manifest(
            id=manifest_id, label=str(ident), items=[canvas_of(request, settings, serving, manifest_id, True)]
        )
    state = registry.get(ident.name)
    versions = [serving] if ident.version is not None else [v for v in state.versions if v.ready]
    description = serving.metadata.get("description")
    canvases = [canvas_of(request, settings, v, manifest_id) for v in versions]
    return Manifest(
        id=manifest_id,
        label=str(ident),
        summary=description if isinstance(description, str) and description else f"the image model {ident}",
        metadata=training_metadata(serving.metadata),
        thumbnail=canvases[-1].thumbnail,
        items=canvases,
    )


def manifest_refs(request: Request, settings, registry, names: list[str]) -> list[ManifestRef]:
    """The Manifests of the ready image models among `names` (blocking: a model not yet read is read now)."""
    refs = []
    for name in names:
        try:
            model = registry.get(name).serving
        except ServiceError:  # gone since the listing
            continue
        if model is not None and model.task == "image":
            refs.append(
                ManifestRef(
                    id=f"{image_id(request, settings, Identifier(name))}/manifest.json", type="Manifest", label=name
                )
            )
    return refs


def ld_json(resource, settings, pinned: bool, per_caller: bool = False) -> Response:
    """`per_caller`: what it lists depends on who asks (a caller with credentials may see restricted models)."""
    age = settings.iiif_max_age if pinned else settings.render_cache_max_age_s  # a version may appear any time
    return Response(
        json.dumps(json.loads(resource.jsonld()), ensure_ascii=False),
        media_type=MEDIA_TYPE,
        headers={"Cache-Control": cache_control(False, age, per_caller=per_caller)},
    )


def add_routes(router: APIRouter, get_head) -> None:
    """Registered on the IIIF router (its CORS and error bodies), before its catch-all route; `get_head(router, path,
    **kwargs)` registers an endpoint for GET and for HEAD (service/api/iiif/router.py)."""

    @get_head(
        router,
        "/collection.json",
        response_class=Response,
        responses={200: {"content": {MEDIA_TYPE: {}}, "description": "IIIF Presentation 3 Collection"}},
    )
    async def collection(request: Request, registry: RegistryDep, settings: SettingsDep, caller: CallerDep) -> Response:
        """A IIIF Presentation 3.0 Collection of every ready image model's Manifest; past INR_IIIF_COLLECTION_PAGE
        models (1,000), a Collection of Collections, one per page of models by name (collection/N.json)."""
        names, size = await run_in_threadpool(registry.names_for, caller), settings.iiif_collection_page
        base = base_url(request, settings)
        if len(names) <= size:
            refs = await run_in_threadpool(manifest_refs, request, settings, registry, names)
            return ld_json(
                Collection(id=f"{base}/collection.json", label=LABEL, items=refs), settings, False, not caller.anonymous
            )
        pages = [names[i : i + size] for i in range(0, len(names), size)]
        refs = [
            CollectionRef(
                id=f"{base}/collection/{n}.json", type="Collection", label=f"{LABEL}, page {n}: {page[0]} … {page[-1]}"
            )
            for n, page in enumerate(pages, 1)
        ]
        return ld_json(
            Collection(id=f"{base}/collection.json", label=LABEL, items=refs), settings, False, not caller.anonymous
        )

    @get_head(
        router,
        "/collection/{page}.json",
        response_class=Response,
        responses={200: {"content": {MEDIA_TYPE: {}}, "description": "a page of the Collection"}},
    )
    async def collection_page(
        request: Request, page: int, registry: RegistryDep, settings: SettingsDep, caller: CallerDep
    ) -> Response:
        """Page `page` (from 1) of the Collection: the ready image models among that page's models by name."""
        names, size = await run_in_threadpool(registry.names_for, caller), settings.iiif_collection_page
        count = max(1, -(-len(names) // size))
        if not 1 <= page <= count:
            raise NotFound(f"no page {page} of the collection; pages: 1 to {count}")
        base = base_url(request, settings)
        refs = await run_in_threadpool(
            manifest_refs, request, settings, registry, names[(page - 1) * size : page * size]
        )
        top = {"id": f"{base}/collection.json", "type": "Collection", "label": {"en": [LABEL]}}
        return ld_json(
            Collection(
                id=f"{base}/collection/{page}.json", label=f"{LABEL}, page {page} of {count}", items=refs, partOf=[top]
            ),
            settings,
            False,
            not caller.anonymous,
        )

    @get_head(
        router,
        "/{name}/manifest.json",
        response_class=Response,
        responses={200: {"content": {MEDIA_TYPE: {}}, "description": "IIIF Presentation 3 Manifest"}},
    )
    async def manifest(request: Request, name: str, registry: RegistryDep, settings: SettingsDep) -> Response:
        """A IIIF Presentation 3.0 Manifest: one Canvas per ready version of the image model. A restricted model's
        images carry the IIIF Auth 2.0 services; without access it is a 401 that still carries them."""
        ident = Identifier.parse(name)
        refused = request.scope.get("state", {}).get("refused")
        manifest = manifest_of(request, settings, registry, ident, bare=refused is not None)
        response = ld_json(manifest, settings, ident.version is not None)
        if not registry.restricted(ident.name):
            return response
        doc = json.loads(response.body)
        for canvas in doc["items"]:
            for body in (a["body"] for page in canvas["items"] for a in page["items"]):
                body["service"] = body.get("service", []) + auth.services(request, settings, str(ident))
        return Response(
            json.dumps(doc, ensure_ascii=False),
            status_code=refused.status if refused is not None and not refused.substitute else 200,
            media_type=MEDIA_TYPE,
            headers={"Cache-Control": cache_control(True, 0, per_caller=True), "Vary": "Cookie, Authorization"},
        )
