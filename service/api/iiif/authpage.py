"""What the pages of the IIIF Authorization Flow share (service/api/iiif/auth.py, session.py): the service's own
origin and the allowed ones (INR_ACCESS_ORIGINS), the check that a request which changes a session comes from one
of them, and the HTML pages themselves (framing, caching, a JSON value safe inside a script)."""

from __future__ import annotations

import html
import json
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.responses import HTMLResponse

from .info import PREFIX, base_url

AUTH = "/iiif/auth"


def lang(text: str) -> dict:
    return {"en": [text]}


def service_root(request: Request, settings) -> str:
    return base_url(request, settings).removesuffix(PREFIX)


def own_origin(request: Request, settings) -> str:
    parts = urlsplit(service_root(request, settings))
    return f"{parts.scheme}://{parts.netloc}"


def allowed_origin(origin: str, request: Request, settings) -> bool:
    return origin == own_origin(request, settings) or origin in settings.access_origins


def cross_site(request: Request, settings) -> str | None:
    """Why a request that changes a session (a logout) is refused as another site's (cross-site request forgery);
    None when it comes from this service's pages or an allowed origin. Its `Origin` header must be this service's
    or one of INR_ACCESS_ORIGINS; without one (an older browser's same-origin POST), its `Referer` must be a page of
    this service, and `Sec-Fetch-Site` must not say cross-site."""
    origin = request.headers.get("origin")
    if origin is not None:
        if allowed_origin(origin, request, settings):
            return None
        return f"its Origin {origin[:100]!r} is neither this service's nor one of INR_ACCESS_ORIGINS"
    if request.headers.get("sec-fetch-site", "").lower() == "cross-site":
        return "it comes from another site (Sec-Fetch-Site: cross-site) and has no Origin header"
    referer = urlsplit(request.headers.get("referer", ""))
    if referer.scheme and f"{referer.scheme}://{referer.netloc}" == own_origin(request, settings):
        return None
    return "it has no Origin header and no Referer of this service's pages"


def wants_html(request: Request) -> bool:
    """A browser's form or navigation (an HTML answer), rather than a script's fetch (a JSON one)."""
    return "text/html" in request.headers.get("accept", "")


def page(title: str, body: str, script: str = "", frames: list[str] | None = None) -> HTMLResponse:
    """An HTML page of the flow. `frames`: the origins that may show it in an iframe (the token and logout pages,
    for the allowed origins); otherwise only this service's own pages may (the login form: no clickjacking)."""
    doc = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>'
        f"<body>{body}{f'<script>{script}</script>' if script else ''}</body></html>"
    )
    ancestors = " ".join(["'self'", *(frames or [])])
    headers = {"Cache-Control": "no-store", "Content-Security-Policy": f"frame-ancestors {ancestors}"}
    if frames is None:
        headers["X-Frame-Options"] = "SAMEORIGIN"
    return HTMLResponse(doc, headers=headers)


def js(value) -> str:
    """A JSON value safe inside <script>: no '<', '>', '&' or line separators that could end it."""
    text = json.dumps(value)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text
