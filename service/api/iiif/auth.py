"""IIIF Authorization Flow API 2.0 (docs/access.md, "IIIF"): the probe, access, token and logout services of the
restricted image models, at /iiif/auth.

- **Probe** `GET /iiif/auth/probe/{name}`: an AuthProbeResult2 whose `status` is what the image's tiles would
  answer the access token in its `Authorization` header (200, 401 or 403), with a `heading` and a `note`, and the
  `substitute` when the model has one. The probe reads the header only, never the cookie, as the spec requires.
- **Access** (the `active` pattern) `GET /iiif/auth/login?origin=…`: a page in a window the client opens, with a
  form for an API key; its `POST` sets the session cookie and closes the window. A POST must carry an `Origin` of
  this service or of INR_ACCESS_ORIGINS (a cross-site form cannot log someone in, and one with no Origin is
  refused).
- **Token** `GET /iiif/auth/token?messageId=…&origin=…`: a page for an iframe that posts an AuthAccessToken2 (or
  AuthAccessTokenError2) to `origin` with `postMessage`, and to no other: an origin that is neither this service's
  nor in INR_ACCESS_ORIGINS gets `invalidOrigin` and no token.
- **Logout** `GET /iiif/auth/logout`: forgets the cookie. Access tokens already issued stay valid until their expiry
  (INR_ACCESS_TOKEN_TTL_S, 300 s by default): they are signed, not stored.
"""

from __future__ import annotations

import html
import json
import logging
import re
import time
from urllib.parse import urlsplit

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from modelrepo.access import Access

from ...auth.caller import COOKIE, Authority, NotAuthenticated, from_scope, from_values
from ...auth.keys import KeyError_
from ...auth.policy import ANONYMOUS, decide
from ..deps import RegistryDep, SettingsDep
from .info import PREFIX, base_url

AUTH = "/iiif/auth"
CONTEXT = "http://iiif.io/api/auth/2/context.json"
ORIGIN_RE = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+\Z")
SESSION_TTL_S = 8 * 3600
CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Headers": "Authorization",
    "Access-Control-Allow-Methods": "GET, OPTIONS",
}
router = APIRouter(prefix=AUTH, tags=["IIIF Authorization Flow 2.0"])
log = logging.getLogger(__name__)
audit = logging.getLogger("inr.audit")


def lang(text: str) -> dict:
    return {"en": [text]}


def service_root(request: Request, settings) -> str:
    return base_url(request, settings).removesuffix(PREFIX)


def own_origin(request: Request, settings) -> str:
    parts = urlsplit(service_root(request, settings))
    return f"{parts.scheme}://{parts.netloc}"


def allowed_origin(origin: str, request: Request, settings) -> bool:
    return origin == own_origin(request, settings) or origin in settings.access_origins


def services(request: Request, settings, name: str) -> list[dict]:
    """The auth services of a restricted image, for its info.json and its manifest."""
    root = f"{service_root(request, settings)}{AUTH}"
    token = {
        "id": f"{root}/token",
        "type": "AuthAccessTokenService2",
        "errorHeading": lang("Could not get access"),
        "errorNote": lang("Log in again, or ask for a key with this image's scope."),
    }
    external = [
        {
            "type": "AuthAccessService2",
            "profile": "external",
            "label": lang("Access through your institution's sign-in"),
            "service": [token],
        }
    ]
    return [
        {
            "id": f"{root}/probe/{name}",
            "type": "AuthProbeService2",
            "service": (external if settings.access_trusted_header else [])
            + [
                {
                    "id": f"{root}/login",
                    "type": "AuthAccessService2",
                    "profile": "active",
                    "label": lang("Log in to see this image"),
                    "heading": lang("This image is restricted"),
                    "note": lang("Log in with an API key that has one of its scopes."),
                    "confirmLabel": lang("Log in"),
                    "service": [
                        token,
                        {"id": f"{root}/logout", "type": "AuthLogoutService2", "label": lang("Log out")},
                    ],
                }
            ],
        }
    ]


@router.options("/{rest:path}", include_in_schema=False)
async def preflight(rest: str) -> Response:
    return Response(status_code=204, headers={**CORS, "Access-Control-Max-Age": "86400"})


@router.get("/probe/{name}")
async def probe(request: Request, name: str, registry: RegistryDep, settings: SettingsDep) -> JSONResponse:
    """What the image's tiles would answer the access token in the Authorization header."""
    root = f"{service_root(request, settings)}{AUTH}"
    body = {"@context": CONTEXT, "id": f"{root}/probe/{name}", "type": "AuthProbeResult2"}
    access = registry.access_of(name.partition("@")[0])
    if access is None:
        body |= {"status": 404, "heading": lang("No such image"), "note": lang(f"There is no image '{name[:64]}'.")}
        return JSONResponse(body, headers=CORS)
    authority: Authority = request.app.state.authority
    header = request.headers.get("authorization")
    try:
        caller = from_values(authority, header, None) if header else ANONYMOUS
    except NotAuthenticated as e:
        body |= {"status": 401, "heading": lang("Your access has ended"), "note": lang(str(e))}
        return JSONResponse(body, headers=CORS)
    decision = decide(caller, name.partition("@")[0], access, registry.access_default)
    if decision.allowed:
        body["status"] = 200
    else:
        body |= {"status": decision.status, "heading": lang("This image is restricted"), "note": lang(decision.reason)}
        if decision.substitute:
            body["substitute"] = [substitute(request, settings, name, access)]
    return JSONResponse(body, headers=CORS)


def substitute(request: Request, settings, name: str, access: Access) -> dict:
    size = access.substitute
    return {
        "id": f"{base_url(request, settings)}/{name}/full/!{size},{size}/0/default.jpg",
        "type": "Image",
        "label": lang(f"a public version, at most {size} pixels on its long side"),
    }


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


@router.get("/login", response_class=HTMLResponse)
async def login_form(origin: str = Query("", max_length=300)) -> HTMLResponse:
    """The access service: a form for an API key, in a window the client opened."""
    form = (
        '<h1>Log in</h1><form method="post"><label>API key <input name="key" type="password" autocomplete="off" '
        f'autofocus></label><input type="hidden" name="origin" value="{html.escape(origin)}">'
        '<button type="submit">Log in</button></form>'
    )
    return page("Log in", form)


@router.post("/login", response_class=HTMLResponse)
async def login(
    request: Request, settings: SettingsDep, key: str = Form("", max_length=200), origin: str = Form("", max_length=300)
) -> Response:
    """Check the key and set the session cookie; the window closes itself."""
    sent = request.headers.get("origin")
    if not sent or not allowed_origin(sent, request, settings):
        return page(
            "Refused", "<p>Refused: a login must come from this service's own page (no Origin, or another).</p>"
        )
    authority: Authority = request.app.state.authority
    try:
        caller = authority.key(key.strip())
    except NotAuthenticated as e:
        response = page("Not logged in", f"<p>{html.escape(str(e))}</p><p><a href=''>Try again</a></p>")
        response.status_code = 401
        return response
    c = caller.claims
    token, _ = authority.signer.issue(c.sub, c.scopes, SESSION_TTL_S, "session", c.models, gen=c.gen)
    response = page("Logged in", "<p>Logged in. This window closes itself.</p>", "window.close();")
    response.set_cookie(
        COOKIE, token, max_age=SESSION_TTL_S, httponly=True, samesite="lax", secure=request.url.scheme == "https"
    )
    return response


@router.get("/token", response_class=HTMLResponse)
async def token(
    request: Request,
    settings: SettingsDep,
    messageId: str = Query("", max_length=200),  # noqa: N803 (the spec's name)
    origin: str = Query("", max_length=300),
) -> HTMLResponse:
    """The access token service: posts the token (or an error) to `origin` from an iframe."""
    answer = {"@context": CONTEXT, "messageId": messageId}
    if not ORIGIN_RE.match(origin) or not messageId:
        return page("Token", "<p>Bad request: messageId and an origin (scheme://host[:port]) are needed.</p>")
    if not allowed_origin(origin, request, settings):
        answer |= error("invalidOrigin", "This site may not use this service's access tokens.")
    else:
        authority: Authority = request.app.state.authority
        try:  # the session cookie, or the trusted proxy's headers (the external pattern); never a bearer here
            caller = from_scope(authority, {**request.scope, "headers": without_authorization(request.scope)})
        except NotAuthenticated as e:
            caller, answer = None, answer | error("expiredAspect", str(e))
        if caller is not None and caller.anonymous:
            answer |= error("missingAspect", "You are not logged in.")
        elif caller is not None:
            c = caller.claims
            ttl = settings.access_token_ttl_s  # no longer than the session it comes from (a proxy's has no end)
            if c.expires:
                ttl = min(ttl, max(1, c.expires - int(time.time())))
            access_token, _ = authority.signer.issue(c.sub, c.scopes, ttl, "access", c.models)
            answer |= {"type": "AuthAccessToken2", "accessToken": access_token, "expiresIn": ttl}
    script = f"window.parent.postMessage({js(answer)}, {js(origin)});"
    return page("Token", "", script, settings.access_origins)


def without_authorization(scope) -> list:
    return [(k, v) for k, v in scope.get("headers", ()) if k != b"authorization"]


def error(profile: str, note: str) -> dict:
    return {"type": "AuthAccessTokenError2", "profile": profile, "heading": lang("No access"), "note": lang(note)}


@router.get("/logout", response_class=HTMLResponse)
async def logout(request: Request, settings: SettingsDep) -> HTMLResponse:
    """Forget the session cookie, and end the session on the server: a key's sessions are refused from the next
    request on, a copy of the cookie included (service/auth/keys.py). Access tokens already made from it live until
    their expiry (INR_ACCESS_TOKEN_TTL_S): they are signed, not stored."""
    authority: Authority = request.app.state.authority
    try:
        caller = from_values(authority, None, request.headers.get("cookie"))
    except NotAuthenticated:
        caller = ANONYMOUS  # already ended, or not ours
    sub = caller.claims.sub if caller.claims is not None else ""
    if sub.startswith("key:"):
        try:
            await run_in_threadpool(authority.keys.end_sessions, sub[4:])
            audit.info("sessions ended key=%s by=logout", sub[4:])
        except (KeyError_, OSError) as e:  # the cookie is still forgotten; its copies live until they expire
            log.warning("logout of key %s: the keys file could not be written (%s)", sub[4:], e)
    response = page("Logged out", "<p>Logged out.</p>", frames=settings.access_origins)
    response.delete_cookie(COOKIE, httponly=True, samesite="lax", secure=request.url.scheme == "https")
    return response
