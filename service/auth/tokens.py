"""Bearer tokens: JSON Web Tokens signed with HMAC-SHA256 (PyJWT), so that a tile's check is a signature and an
expiry, with no lookup. A token says who (`sub`), what it may read (`scope`: space-separated scopes; `models`:
optionally only these) and what it is (`typ`: `access` for an Authorization header, `session` for the access
service's cookie, so one cannot stand for the other). The signing key is `INR_ACCESS_SECRET` (at least 32 bytes,
shared by every replica), else random at start: tokens then end with the process."""

from __future__ import annotations

import secrets
import time
import uuid
from dataclasses import dataclass

import jwt

ALGORITHM = "HS256"
AUDIENCE = "inr-serve"
KINDS = ("access", "session")


class BadToken(Exception):
    """A token that is not valid now; the message names why and never quotes the token."""


@dataclass(frozen=True)
class Claims:
    sub: str
    scopes: frozenset[str]
    models: frozenset[str] | None  # None: any model its scopes allow
    kind: str
    expires: int
    id: str
    gen: int | None = None  # a key's session generation: logout and revocation end the older ones (keys.py)


class Signer:
    def __init__(self, secret: bytes | None = None):
        self.generated = secret is None
        self._key = secret if secret is not None else secrets.token_bytes(32)

    def issue(
        self,
        sub: str,
        scopes,
        ttl_s: int,
        kind: str = "access",
        models=None,
        now: float | None = None,
        gen: int | None = None,
    ) -> tuple[str, Claims]:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        now = int(time.time() if now is None else now)
        claims = Claims(
            sub, frozenset(scopes), None if models is None else frozenset(models), kind, now + ttl_s, "", gen
        )
        body = {
            "sub": sub,
            "scope": " ".join(sorted(claims.scopes)),
            "typ": kind,
            "aud": AUDIENCE,
            "iat": now,
            "exp": claims.expires,
            "jti": uuid.uuid4().hex,
        }
        if claims.models is not None:
            body["models"] = sorted(claims.models)
        if gen is not None:
            body["gen"] = gen
        token = jwt.encode(body, self._key, algorithm=ALGORITHM)
        return token, Claims(**{**claims.__dict__, "id": body["jti"]})

    def verify(self, token: str, kind: str = "access") -> Claims:
        try:
            body = jwt.decode(
                token,
                self._key,
                algorithms=[ALGORITHM],  # never the token's own choice ("none", or RS256 with our key as public)
                audience=AUDIENCE,
                options={"require": ["exp", "iat", "sub", "typ", "jti"]},
            )
        except jwt.ExpiredSignatureError:
            raise BadToken("the token has expired") from None
        except jwt.InvalidSignatureError:
            raise BadToken("the token's signature does not verify (signed with another key?)") from None
        except jwt.PyJWTError as e:
            raise BadToken(f"the token is not valid ({e.__class__.__name__})") from None
        if body["typ"] != kind:
            raise BadToken(f"a {body['typ']!s:.20} token where an {kind} token is needed")
        models, gen = body.get("models"), body.get("gen")
        if models is not None and not (isinstance(models, list) and all(isinstance(m, str) for m in models)):
            raise BadToken("the token's models claim is not a list of names")
        if gen is not None and (not isinstance(gen, int) or isinstance(gen, bool)):
            raise BadToken("the token's gen claim is not a whole number")
        return Claims(
            str(body["sub"]),
            frozenset(str(body.get("scope", "")).split()),
            None if models is None else frozenset(models),
            kind,
            int(body["exp"]),
            str(body["jti"]),
            gen,
        )
