"""The session of the IIIF access service (docs/access.md, "IIIF Authorization Flow 2.0"): who is logged in, and
the logout, at /iiif/auth (included in auth.py's router).

- **Logout** (`AuthLogoutService2`) `GET /iiif/auth/logout` is a page, in a window the client opens, that changes
  nothing: it shows a "Log out" button, a form that POSTs to the same URL. `POST /iiif/auth/logout` forgets the
  cookie and ends the key's sessions on the server, only for a request from this service's pages or an allowed
  origin (`authpage.cross_site`): a logout is a change, and a `SameSite=Lax` cookie goes with another site's
  top-level navigation, so a GET that logged out let any page end every session of the visitor's key (and rewrite
  the shared keys file). Another site's POST is a 403 naming the check. Access tokens already made from the
  session live until their expiry (INR_ACCESS_TOKEN_TTL_S, 300 s by default): they are signed, not stored.
- **Who** `GET /iiif/auth/whoami`: the caller's own subject, its key's name and its scopes (`{"sub": null}` for no
  one), for the service's pages to say who is logged in. Never another caller's; a request with an Origin that is
  not allowed is a 403, and the answer carries no CORS header, so another origin's script cannot read it.
"""

from __future__ import annotations

import html
import logging

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from ...auth.caller import COOKIE, Authority, NotAuthenticated, from_scope, from_values
from ...auth.keys import KeyError_
from ...auth.policy import ANONYMOUS, Caller
from ..deps import SettingsDep
from ..schemas import ErrorBody
from .authpage import allowed_origin, cross_site, page, wants_html

router = APIRouter(tags=["IIIF Authorization Flow 2.0"])
log = logging.getLogger(__name__)
audit = logging.getLogger("inr.audit")
PRIVATE = {"Cache-Control": "private, no-store", "Vary": "Cookie, Authorization, Origin"}


def session_of(request: Request) -> Caller:
    """The caller of the session cookie alone (never the Authorization header): whose session a logout ends."""
    authority: Authority = request.app.state.authority
    try:
        return from_values(authority, None, request.headers.get("cookie"))
    except NotAuthenticated:
        return ANONYMOUS  # already ended, or not ours


def who(request: Request, caller: Caller) -> dict:
    """The caller's own subject, its key's name and its scopes; `sub` None for no one."""
    c = caller.claims
    if c is None:
        return {"sub": None, "name": None, "scopes": []}
    name = None
    if c.sub.startswith("key:"):
        record = request.app.state.authority.keys.get(c.sub[4:])
        name = record.name if record is not None else None
    return {"sub": c.sub, "name": name, "scopes": sorted(c.scopes)}


def label(me: dict) -> str:
    return f"{me['name']} ({me['sub']})" if me["name"] else str(me["sub"])


@router.get("/logout", response_class=HTMLResponse)
async def logout_page(request: Request, settings: SettingsDep) -> HTMLResponse:
    """The logout service: a page with a "Log out" button (a form that POSTs here); opening it changes nothing."""
    me = who(request, session_of(request))
    status = f"You are logged in as {html.escape(label(me))}." if me["sub"] else "You are not logged in."
    form = (
        f'<h1>Log out</h1><p class="who">{status}</p><form method="post"><button type="submit">Log out</button></form>'
    )
    return page("Log out", form, frames=settings.access_origins)


@router.post(
    "/logout",
    response_model=None,
    responses={403: {"model": ErrorBody, "description": "not from this service's pages or an allowed origin"}},
)
async def logout(request: Request, settings: SettingsDep) -> Response:
    """Forget the session cookie, and end the session on the server: a key's sessions are refused from the next
    request on, a copy of the cookie included (service/auth/keys.py). Only from this service's pages or an allowed
    origin (403 otherwise, and nothing changes)."""
    refused = cross_site(request, settings)
    if refused is not None:
        message = f"logout refused: {refused}; log out from this service's own logout page"
        log.info("%s", message)
        if wants_html(request):
            response = page("Refused", f"<p>{html.escape(message)}</p>", frames=settings.access_origins)
            response.status_code = 403
            return response
        return JSONResponse({"error": message}, status_code=403, headers=PRIVATE)
    authority: Authority = request.app.state.authority
    claims = session_of(request).claims
    sub = claims.sub if claims is not None else ""
    if sub.startswith("key:"):
        try:
            await run_in_threadpool(authority.keys.end_sessions, sub[4:])
            audit.info("sessions ended key=%s by=logout", sub[4:])
        except (KeyError_, OSError) as e:  # the cookie is still forgotten; its copies live until they expire
            log.warning("logout of key %s: the keys file could not be written (%s)", sub[4:], e)
    if wants_html(request):  # the logout page's form: the window closes itself where a client opened it
        response = page(
            "Logged out", "<p>Logged out.</p>", "if (window.opener) window.close();", settings.access_origins
        )
    else:
        response = JSONResponse({"logged_out": True}, headers=PRIVATE)
    response.delete_cookie(COOKIE, httponly=True, samesite="lax", secure=request.url.scheme == "https")
    return response


@router.get("/whoami", responses={403: {"model": ErrorBody, "description": "an Origin that is not allowed"}})
async def whoami(request: Request, settings: SettingsDep) -> JSONResponse:
    """Who the caller is (its session cookie, bearer token or a trusted proxy's user): its own subject, its key's
    name and its scopes. A request with an Origin that is not allowed is a 403."""
    origin = request.headers.get("origin")
    if origin is not None and not allowed_origin(origin, request, settings):
        message = f"whoami refused: the Origin {origin[:100]!r} is neither this service's nor one of INR_ACCESS_ORIGINS"
        return JSONResponse({"error": message}, status_code=403, headers=PRIVATE)
    caller = getattr(request.state, "caller", None)  # ModelAccess's judgement of the credentials
    if caller is None:
        try:
            caller = from_scope(request.app.state.authority, request.scope)
        except NotAuthenticated as e:
            return JSONResponse({"error": str(e)}, status_code=401, headers=PRIVATE)
    return JSONResponse(who(request, caller), headers=PRIVATE)
