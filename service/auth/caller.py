"""The caller of an HTTP request or a gRPC call: a bearer token or an API key in the `Authorization` header
(metadata for gRPC), else the access service's session cookie (what a browser's image requests carry), else
anonymous. A token in the query string is refused rather than read: URLs end up in logs, histories and Referer
headers."""

from __future__ import annotations

from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl

from .keys import PREFIX, KeyStore
from .policy import ANONYMOUS, Caller
from .tokens import BadToken, Claims, Signer

COOKIE = "inr_session"
QUERY_TOKENS = ("access_token", "token", "authorization")


class NotAuthenticated(Exception):
    """Credentials that were sent but are not valid (401); the message never quotes them."""


def bearer(value: str) -> str:
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise NotAuthenticated("the Authorization header must be 'Bearer TOKEN'")
    return token.strip()


class Authority:
    """What verifies credentials: the token signer and the key store."""

    def __init__(self, signer: Signer, keys: KeyStore | None = None):
        self.signer, self.keys = signer, keys or KeyStore(None)

    def key(self, key: str) -> Caller:
        record = self.keys.verify(key)
        if record is None:
            raise NotAuthenticated("the API key is not valid (unknown, revoked or mistyped)")
        models = None if record.models is None else frozenset(record.models)
        return Caller(Claims(f"key:{record.id}", frozenset(record.scopes), models, "access", 0, record.id))


def from_values(authority: Authority, authorization: str | None, cookie: str | None, query: str = "") -> Caller:
    if query and any(k.lower() in QUERY_TOKENS for k, _ in parse_qsl(query, keep_blank_values=True)):
        raise NotAuthenticated("a token in the query string is refused: send it in the Authorization header")
    signer = authority.signer
    try:
        if authorization is not None:
            credential = bearer(authorization)
            if credential.startswith(PREFIX):
                return authority.key(credential)
            return Caller(signer.verify(credential, "access"))
        session = _cookie(cookie)
        if session is not None:
            return Caller(signer.verify(session, "session"))
    except BadToken as e:
        raise NotAuthenticated(str(e)) from None
    return ANONYMOUS


def from_scope(authority: Authority, scope) -> Caller:
    """From an ASGI scope's headers and query string."""
    authorization = cookie = None
    for key, value in scope.get("headers", ()):
        if key == b"authorization":
            authorization = value.decode("latin-1")
        elif key == b"cookie":
            cookie = value.decode("latin-1")
    return from_values(authority, authorization, cookie, scope.get("query_string", b"").decode("latin-1"))


def _cookie(header: str | None) -> str | None:
    if not header or COOKIE not in header:
        return None
    try:
        jar = SimpleCookie(header)
    except CookieError:
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None and morsel.value else None
