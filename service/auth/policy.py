"""A model's access policy (modelrepo/access.py) against a caller: who may read what."""

from __future__ import annotations

from dataclasses import dataclass

from modelrepo.access import PUBLIC, Access

from .tokens import Claims

ADMIN = "admin"


@dataclass(frozen=True)
class Caller:
    """Who sent a request: anonymous (no credentials), or the subject of a verified token."""

    claims: Claims | None = None

    @property
    def anonymous(self) -> bool:
        return self.claims is None

    def may_read(self, name: str, access: Access, default: str) -> bool:
        if access.effective(default) == PUBLIC:
            return True
        c = self.claims
        if c is None:
            return False
        if c.models is not None and name not in c.models:
            return False
        return ADMIN in c.scopes or bool(c.scopes & set(access.readers))


ANONYMOUS = Caller()


@dataclass(frozen=True)
class StaleSession(Caller):
    """A browser's session cookie that no longer holds (expired, logged out, its key revoked, signed by an older
    secret): anonymous, `why` told beside a refusal, and the cookie cleared (service/server/model_access.py)."""

    why: str = ""


def who(caller: Caller) -> str:
    """A caller as the audit log names it: the key's id or the token's subject, never a secret."""
    return caller.claims.sub if caller.claims is not None else "anonymous"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    substitute: int | None = None  # refused, but renders up to this long side are public
    status: int = 200  # 401: no credentials; 403: credentials without the scope
    reason: str = ""


def decide(caller: Caller, name: str, access: Access, default: str) -> Decision:
    if caller.may_read(name, access, default):
        return Decision(True)
    scopes = ", ".join(access.readers)
    if caller.anonymous:
        return Decision(
            False,
            access.substitute,
            401,
            f"model '{name}' is restricted: send Authorization: Bearer TOKEN with one of the scopes {scopes}",
        )
    return Decision(False, access.substitute, 403, f"model '{name}' needs one of the scopes {scopes}")
