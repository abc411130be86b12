"""The API docs pages, `/docs` (Swagger UI) and `/redoc` (ReDoc), with their scripts and styles served by this
service from the `fastapi-offline` package (its `static/` folder: Swagger UI's bundle and CSS, ReDoc's standalone
bundle), not from a CDN: they work with no internet. Each page's Content-Security-Policy lets it load nothing but
this origin's files (Swagger UI's one inline script by its sha256), so a page never reaches another host."""

from __future__ import annotations

import base64
import hashlib
import re
from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"  # the assets' mount
FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")
INLINE = re.compile(rb"<script>(.*?)</script>", re.S)
POLICY = (
    "default-src 'none'; script-src 'self'{scripts}; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; frame-ancestors 'self'; base-uri 'none'; "
    "form-action 'none'"
)
router = APIRouter(include_in_schema=False)


def folder() -> Path:
    """fastapi-offline's assets (a dependency of the serving install, pyproject.toml)."""
    return Path(str(files("fastapi_offline") / "static"))


def assets() -> StaticFiles:
    return StaticFiles(directory=folder())


def asset_paths() -> frozenset[str]:
    """The assets' paths: a page's own files, not a key's API requests (service/server/model_access.py)."""
    return frozenset(f"{ASSETS}/{name}" for name in FILES)


def _secured(page: HTMLResponse) -> HTMLResponse:
    """The page with a policy that allows this origin's files and its own inline scripts, by their sha256."""
    hashes = "".join(
        f" 'sha256-{base64.b64encode(hashlib.sha256(s).digest()).decode()}'" for s in INLINE.findall(page.body)
    )
    page.headers["Content-Security-Policy"] = POLICY.format(scripts=hashes)
    page.headers["X-Content-Type-Options"] = "nosniff"
    page.headers["Referrer-Policy"] = "no-referrer"
    return page


def _page(request: Request, make, title: str, assets: dict[str, str], **options) -> HTMLResponse:
    """A docs page from FastAPI's own template, its assets (argument → file) under this service's ASSETS."""
    root = request.scope.get("root_path", "").rstrip("/")
    urls = {arg: f"{root}{ASSETS}/{name}" for arg, name in assets.items()}
    page = make(
        openapi_url=f"{root}{request.app.openapi_url}", title=f"{request.app.title} - {title}", **urls, **options
    )
    return _secured(page)


@router.get("/docs")
async def swagger(request: Request) -> HTMLResponse:
    assets = {"swagger_js_url": "swagger-ui-bundle.js", "swagger_css_url": "swagger-ui.css"}
    assets["swagger_favicon_url"] = "favicon.png"
    return _page(
        request,
        get_swagger_ui_html,
        "Swagger UI",
        assets,
        oauth2_redirect_url=None,
        swagger_ui_parameters={"validatorUrl": None},  # no badge from validator.swagger.io
    )


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    assets = {"redoc_js_url": "redoc.standalone.js", "redoc_favicon_url": "favicon.png"}
    return _page(request, get_redoc_html, "ReDoc", assets, with_google_fonts=False)
