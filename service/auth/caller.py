"""The caller of an HTTP request or a gRPC call: a bearer token in the `Authorization` header (metadata for gRPC),
else the access service's session cookie (what a browser's image requests carry), else anonymous. A token in the
query string is refused rather than read: URLs end up in logs, histories and Referer headers."""

from __future__ import annotations

from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl

from .policy import ANONYMOUS, Caller
from .tokens import BadToken, Signer

COOKIE = "inr_session"
QUERY_TOKENS = ("access_token", "token", "authorization")


class NotAuthenticated(Exception):
    """Credentials that were sent but are not valid (401); the message never quotes them."""


def bearer(value: str) -> str:
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise NotAuthenticated("the Authorization header must be 'Bearer TOKEN'")
    return token.strip()


def from_values(signer: Signer, authorization: str | None, cookie: str | None, query: str = "") -> Caller:
    if query and any(k.lower() in QUERY_TOKENS for k, _ in parse_qsl(query, keep_blank_values=True)):
        raise NotAuthenticated("a token in the query string is refused: send it in the Authorization header")
    try:
        if authorization is not None:
            return Caller(signer.verify(bearer(authorization), "access"))
        session = _cookie(cookie)
        if session is not None:
            return Caller(signer.verify(session, "session"))
    except BadToken as e:
        raise NotAuthenticated(str(e)) from None
    return ANONYMOUS


def from_scope(signer: Signer, scope) -> Caller:
    """From an ASGI scope's headers and query string."""
    authorization = cookie = None
    for key, value in scope.get("headers", ()):
        if key == b"authorization":
            authorization = value.decode("latin-1")
        elif key == b"cookie":
            cookie = value.decode("latin-1")
    return from_values(signer, authorization, cookie, scope.get("query_string", b"").decode("latin-1"))


def _cookie(header: str | None) -> str | None:
    if not header or COOKIE not in header:
        return None
    try:
        jar = SimpleCookie(header)
    except CookieError:
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None and morsel.value else None
