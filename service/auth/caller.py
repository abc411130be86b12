"""The caller of an HTTP request or a gRPC call: a bearer token or an API key in the `Authorization` header
(metadata for gRPC), else the access service's session cookie (what a browser's image requests carry), else
anonymous. A token in the query string is refused rather than read: URLs end up in logs, histories and Referer
headers."""

from __future__ import annotations

from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl

from .keys import PREFIX, KeyStore
from .policy import ANONYMOUS, Caller, StaleSession
from .quotas import Buckets
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
    """What verifies credentials: the token signer, the key store, and the headers a trusted proxy sets (IIIF's
    `external` pattern: INR_ACCESS_TRUSTED_HEADER names the user, INR_ACCESS_TRUSTED_SCOPES_HEADER their scopes).
    Without a scopes header the proxy's users have no scopes. Both headers reach this only from the proxies of
    INR_FORWARDED_ALLOW_IPS: service/server/forwarded.py removes them from every other peer's requests."""

    def __init__(self, signer: Signer, keys: KeyStore | None = None, trusted: tuple[str, str | None] | None = None):
        self.signer, self.keys = signer, keys or KeyStore(None)
        self.buckets = Buckets()  # one per process, shared by HTTP and gRPC
        self.trusted = tuple(h.lower().encode("latin-1") if h else None for h in trusted) if trusted else None

    def over_quota(self, caller: Caller) -> tuple[float, str] | None:
        """(seconds to wait, why) when the caller's key is over its requests-a-second quota (service/auth/quotas.py),
        counted the same for every protocol: HTTP, gRPC and the streams' messages; None when it may go."""
        sub = caller.claims.sub if caller.claims is not None else ""
        if not sub.startswith("key:"):
            return None
        record = self.keys.get(sub[4:])
        rps = record.quotas.get("rps") if record is not None else None
        wait = self.buckets.take(record.id, rps, record.quotas.get("burst")) if rps else 0.0
        return (wait, f"key {record.id}: over its quota of {rps:g} requests a second") if wait else None

    def proxied(self, user: str, scopes: str) -> Caller:
        """A user the proxy in front authenticated: trusted as it says (docs/access.md, "external")."""
        names = frozenset(s for s in scopes.replace(",", " ").split() if s)
        return Caller(Claims(f"proxy:{user[:200]}", names, None, "access", 0, ""))

    def key(self, key: str) -> Caller:
        record = self.keys.verify(key)
        if record is None:
            raise NotAuthenticated("the API key is not valid (unknown, revoked or mistyped)")
        models = None if record.models is None else frozenset(record.models)
        claims = Claims(f"key:{record.id}", frozenset(record.scopes), models, "access", 0, record.id, record.generation)
        return Caller(claims)

    def live(self, claims: Claims) -> Caller:
        """A verified token, checked against the key it came from (`key:ID`), at the next request, on every replica
        (the keys file is shared): any token of a revoked key is refused, and a session that was logged out (its
        key's generation bumped since), a copy of its cookie included. An access token made from a session before
        its logout lives until its expiry (INR_ACCESS_TOKEN_TTL_S), as IIIF Auth 2.0's stateless tokens do; tokens
        of other subjects (a trusted proxy's users) live until their expiry."""
        if claims.sub.startswith("key:"):
            record = self.keys.get(claims.sub[4:])
            if record is None or record.revoked is not None:
                raise NotAuthenticated("the API key this token came from is revoked or unknown")
            if claims.kind == "session" and (claims.gen or 0) != record.generation:
                raise NotAuthenticated("this session was logged out; log in again")
        return Caller(claims)


def from_values(
    authority: Authority, authorization: str | None, cookie: str | None, query: str = "", proxied: Caller | None = None
) -> Caller:
    if query and any(k.lower() in QUERY_TOKENS for k, _ in parse_qsl(query, keep_blank_values=True)):
        raise NotAuthenticated("a token in the query string is refused: send it in the Authorization header")
    signer = authority.signer
    try:
        if authorization is not None:
            credential = bearer(authorization)
            if credential.startswith(PREFIX):
                return authority.key(credential)
            return authority.live(signer.verify(credential, "access"))
        if proxied is not None:
            return proxied
    except BadToken as e:
        raise NotAuthenticated(str(e)) from None
    session = _cookie(cookie)
    if session is not None:  # a browser sends it with every request, public ones too: one that fails is no one
        try:
            return authority.live(signer.verify(session, "session"))
        except (BadToken, NotAuthenticated) as e:
            return StaleSession(why=f"the session cookie was not used: {e}")
    return ANONYMOUS


def from_scope(authority: Authority, scope) -> Caller:
    """From an ASGI scope's headers and query string."""
    authorization = cookie = user = None
    scopes = ""
    trusted = authority.trusted or (None, None)
    for key, value in scope.get("headers", ()):
        if key == b"authorization":
            authorization = value.decode("latin-1")
        elif key == b"cookie":
            cookie = value.decode("latin-1")
        elif key == trusted[0]:
            user = value.decode("latin-1").strip()
        elif key == trusted[1]:
            scopes = value.decode("latin-1")
    proxied = authority.proxied(user, scopes) if user else None
    return from_values(authority, authorization, cookie, scope.get("query_string", b"").decode("latin-1"), proxied)


def _cookie(header: str | None) -> str | None:
    if not header or COOKIE not in header:
        return None
    try:
        jar = SimpleCookie(header)
    except CookieError:
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None and morsel.value else None
