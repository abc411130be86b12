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
- **Logout** `GET /iiif/auth/logout`: a page with a "Log out" button; its `POST`, from this service's pages or an
  allowed origin only, forgets the cookie and ends the key's sessions (service/api/iiif/session.py, with `whoami`).
"""

from __future__ import annotations

import html
import re
import time

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from modelrepo.access import Access

from ...auth.caller import COOKIE, Authority, NotAuthenticated, from_scope, from_values
from ...auth.policy import ANONYMOUS, decide
from ..deps import RegistryDep, SettingsDep
from . import session
from .authpage import AUTH, allowed_origin, js, lang, page, service_root
from .info import base_url

CONTEXT = "http://iiif.io/api/auth/2/context.json"
ORIGIN_RE = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+\Z")
SESSION_TTL_S = 8 * 3600
CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Headers": "Authorization",
    "Access-Control-Allow-Methods": "GET, OPTIONS",
}
router = APIRouter(prefix=AUTH, tags=["IIIF Authorization Flow 2.0"])


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


router.include_router(session.router)  # GET/POST /logout and GET /whoami (service/api/iiif/session.py)
