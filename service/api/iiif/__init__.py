"""IIIF Image API 3.0 over the image models: /iiif/3/{identifier} (docs/iiif.md)."""

from .auth import router as auth_router
from .router import router

__all__ = ["router", "auth_router"]
