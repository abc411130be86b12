"""The admin API for API keys (docs/access.md, "Keys"): what `python -m service.auth keys` does, over HTTP, for a
caller with the scope admin. Every change is an audit line naming the key's id and the admin's, never a secret."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from ...auth.keys import KeyError_
from ...auth.policy import ADMIN
from ...auth.quotas import parse
from ...errors import AccessDenied, BadInput, NotFound
from ..deps import CallerDep
from ..schemas import ErrorBody

router = APIRouter(prefix="/v1/keys", tags=["keys"])
audit = logging.getLogger("inr.audit")
ERRORS = {c: {"model": ErrorBody} for c in (400, 401, 403, 404, 422)}
KeyId = Annotated[str, Path(pattern=r"^[0-9a-f]{12}$", description="the key's id (inr_ID_…)")]


class KeyRequest(BaseModel):
    name: str = Field(min_length=1, max_length=200, description="whose key it is, for people")
    scopes: list[str] = Field(min_length=1, max_length=32, description="read, fit, admin or a model's scope")
    models: list[str] | None = Field(None, max_length=1000, description="only these models")
    quotas: dict[str, str | float] = Field(default_factory=dict, description="rps, burst, fits_per_day, ...")


def admin(request: Request, caller) -> str:
    """The admin's name for the audit line; 401/403 for anyone else."""
    if caller.anonymous:
        raise AccessDenied(401, "the keys API needs a token or API key with the scope admin")
    if ADMIN not in caller.claims.scopes:
        raise AccessDenied(403, f"{caller.claims.sub} has no scope admin")
    return caller.claims.sub


def within(caller, record_models) -> bool:
    """Whether a key limited to `record_models` (None: every model) is within the admin's own models: an admin
    limited with --models manages only keys limited to models of its own, so it cannot make or see a wider one."""
    mine = caller.claims.models
    return mine is None or (record_models is not None and set(record_models) <= mine)


def store(request: Request):
    keys = request.app.state.authority.keys
    if keys.path is None:
        raise BadInput("no keys file: start the service with INR_ACCESS_KEYS (--access-keys)")
    return keys


@router.get("", responses=ERRORS)
def list_keys(request: Request, caller: CallerDep) -> dict:
    """Every key, without its secret or hash."""
    admin(request, caller)
    return {"keys": [r.public() for r in store(request).records() if within(caller, r.models)]}


@router.post("", status_code=201, responses=ERRORS)
def create_key(request: Request, body: KeyRequest, caller: CallerDep) -> JSONResponse:
    """A new key: its secret is in this answer only."""
    who = admin(request, caller)
    if not within(caller, body.models):
        raise AccessDenied(
            403,
            f"{who} is limited to the models {', '.join(sorted(caller.claims.models))}: a key it makes must list "
            "models, all of them among those",
        )
    try:
        quotas = parse([f"{k}={v}" for k, v in body.quotas.items()])
        key, record = store(request).create(body.name, body.scopes, body.models, quotas)
    except (KeyError_, ValueError) as e:
        raise BadInput(str(e)) from None
    audit.info("key created id=%s scopes=%s by=%s", record.id, ",".join(record.scopes), who)
    return JSONResponse({"key": key, **record.public()}, status_code=201)


@router.delete("/{key_id}", responses=ERRORS)
def revoke_key(request: Request, key_id: KeyId, caller: CallerDep) -> dict:
    """Revoke a key: refused from its next request on."""
    who = admin(request, caller)
    keys = store(request)
    found = keys.get(key_id)
    if found is None or not within(caller, found.models):  # a wider key is not this admin's to see
        raise NotFound(f"no key with id '{key_id}'")
    try:
        record = keys.revoke(key_id)
    except KeyError_ as e:
        raise NotFound(str(e)) from None
    audit.info("key revoked id=%s by=%s", record.id, who)
    return record.public()
