"""Identifiers, the image's IIIF size, the service's public base URL and the info.json document."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from urllib.parse import quote

from fastapi import Request

from modelrepo import NAME_RE, ImageSource

from ...engine.registry import Registry
from ...engine.runtime import ModelRuntime
from ...errors import BadInput, NotFound
from ...settings import Settings

CONTEXT = "http://iiif.io/api/image/3/context.json"
PROFILE_URI = "http://iiif.io/api/image/3/level2.json"
INFO_MEDIA_TYPE = f'application/ld+json;profile="{CONTEXT}"'
PREFIX = "/iiif/3"
MAX_IDENTIFIER = 128  # a model name is at most 64 characters, plus @VERSION
MAX_SIDE = 65_536  # the render's largest width or height (schemas.RenderRequest)
TILE = 512
DEFAULT_SIZE = 256  # the native size of a model whose metadata records none (square)
QUALITIES = ["color", "gray", "bitonal"]
EXTRA_FORMATS = ["webp"]  # jpg and png are level 2
EXTRA_FEATURES = ["mirroring", "rotationArbitrary", "sizeUpscaling", "canonicalLinkHeader", "profileLinkHeader"]


@dataclass(frozen=True)
class Identifier:
    name: str
    version: int | None = None

    @classmethod
    def parse(cls, text: str) -> "Identifier":
        """`NAME` or `NAME@VERSION` (percent-decoded). 400 for what can never name a model."""
        if len(text) > MAX_IDENTIFIER:
            raise BadInput(
                f"identifier is {len(text)} characters, more than {MAX_IDENTIFIER}: it is a model "
                "name (at most 64 characters) with an optional @VERSION"
            )
        if "/" in text or "\\" in text:
            raise BadInput(f"identifier '{text}' contains a slash (an escaped %2F); model names have none")
        if ".." in text:
            raise BadInput(f"identifier '{text}' contains '..'; it is a model name, not a path")
        name, at, version = text.partition("@")
        if at and not re.fullmatch(r"[1-9]\d{0,8}", version):
            raise BadInput(f"identifier '{text}': the version after @ must be a positive integer")
        return cls(name, int(version) if at else None)

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}@{self.version}"


def resolve(registry: Registry, ident: Identifier) -> ModelRuntime:
    """The ready image model the identifier names (its serving version, or the pinned one); 404 for an
    unknown name or version."""
    if not NAME_RE.match(ident.name):
        raise NotFound(f"unknown identifier '{ident}': no model has that name")
    return registry.ready_model(ident.name, "image", "IIIF", ident.version)


def image_size(metadata: dict) -> tuple[int, int]:
    """The IIIF width and height: the model's native pixel grid (modelrepo.ImageSource: `source.native_size`,
    else `source.size`; the iiif-test image is defined at 1000×1000 and is served at exactly that); a model
    that records neither is 256×256."""
    return ImageSource.from_metadata(metadata).native or (DEFAULT_SIZE, DEFAULT_SIZE)


def max_size(width: int, height: int, zoom: int) -> tuple[int, int]:
    """maxWidth, maxHeight: how far past its native size an image may be asked for with `^` (sizeUpscaling),
    INR_IIIF_ZOOM × the native size, within the render's largest side."""
    return min(width * zoom, MAX_SIDE), min(height * zoom, MAX_SIDE)


def _first(value: str | None) -> str | None:
    return value.split(",")[0].strip() or None if value else None


def base_url(request: Request, settings: Settings) -> str:
    """scheme://host[:port][/prefix]/iiif/3: the setting, else the request behind any X-Forwarded-* proxy."""
    if settings.iiif_base_url:
        return settings.iiif_base_url.rstrip("/")
    h = request.headers
    scheme = _first(h.get("x-forwarded-proto")) or request.url.scheme
    host = _first(h.get("x-forwarded-host")) or h.get("host") or request.url.netloc
    port = _first(h.get("x-forwarded-port"))
    if port and not re.search(r":\d+$", host) and port != {"http": "80", "https": "443"}.get(scheme):
        host = f"{host}:{port}"
    prefix = (_first(h.get("x-forwarded-prefix")) or request.scope.get("root_path", "")).rstrip("/")
    return f"{scheme}://{host}{prefix}{PREFIX}"


def image_id(request: Request, settings: Settings, ident: Identifier) -> str:
    return f"{base_url(request, settings)}/{quote(str(ident), safe='')}"


def scale_factors(width: int, height: int, tile: int = TILE) -> list[int]:
    """1, 2, 4, … up to the first factor at which the whole image fits in one tile."""
    factors = [1]
    while math.ceil(width / factors[-1]) > tile or math.ceil(height / factors[-1]) > tile:
        factors.append(factors[-1] * 2)
    return factors


def info_document(service_id: str, width: int, height: int, max_area: int, zoom: int = 1) -> dict:
    """`width`/`height` native; upscaled sizes up to `maxWidth`/`maxHeight` (native × zoom) with `^`."""
    factors = scale_factors(width, height)
    max_w, max_h = max_size(width, height, zoom)
    sizes = [{"width": math.ceil(width / f), "height": math.ceil(height / f)} for f in reversed(factors)]
    return {
        "@context": CONTEXT,
        "id": service_id,
        "type": "ImageService3",
        "protocol": "http://iiif.io/api/image",
        "profile": "level2",
        "width": width,
        "height": height,
        "maxWidth": max_w,
        "maxHeight": max_h,
        "maxArea": max_area,
        "tiles": [{"width": TILE, "height": TILE, "scaleFactors": factors}],
        "sizes": [s for s in sizes if s["width"] * s["height"] <= max_area],
        "extraQualities": QUALITIES,
        "extraFormats": EXTRA_FORMATS,
        "extraFeatures": EXTRA_FEATURES,
    }
