"""Who may fit into a model, and who may see a fit (docs/security.md, docs/fits.md "Who sees a fit").

A fit publishes a new version of its target model, so it is judged like a write to that model:

- into an existing model, the caller must be one who may read it (a restricted model's scopes, or admin); the
  version keeps the model's policy;
- a fit may ask for a policy (`access`, `access_scopes`, `access_substitute`, as in config.pbtxt): for a new model,
  a restricted one only by a caller who could then read it; for an existing one, a change only by an admin;
- what was decided travels with the job as a `modelrepo.access.Guard`, and the worker's write refuses a target whose
  policy is no longer the one the caller was judged against.

A fit's record (state, file name, previews of the new pixels) is shown to its owner (the key or token subject that
queued it), to an admin (limited to its models, if it has a list), and, for a fit queued without credentials, to
whoever may read its target model. Anyone else gets the 404 of an unknown job.
"""

from __future__ import annotations

from modelrepo.access import KEYS, RESTRICTED, Access, AccessError, Guard

from ..errors import AccessDenied, InvalidOption
from .policy import ADMIN, Caller, decide, who


def is_admin(caller: Caller, name: str | None = None) -> bool:
    """The scope admin, for `name` when the caller is limited to some models."""
    c = caller.claims
    if c is None or ADMIN not in c.scopes:
        return False
    return c.models is None or (name is not None and name in c.models)


def requested(form: dict) -> Access | None:
    """The policy a fit's form asks for (its fields named as config.pbtxt's parameters); None when it asks none."""
    params = {k: form[k].strip() for k in KEYS if form.get(k, "").strip()}
    if not params:
        return None
    try:
        return Access.from_parameters(params)
    except AccessError as e:
        raise InvalidOption(str(e).replace("config.pbtxt: ", "")) from None


def guard_for(caller: Caller, name: str, current: Access | None, asked: Access | None, default: str) -> Guard:
    """The guard of a fit by `caller` into `name`, whose policy is `current` (None: no such model); 401/403 when the
    caller may not write it, or may not set the policy it asks for."""
    if current is not None:
        decision = decide(caller, name, current, default)
        if not decision.allowed:
            raise AccessDenied(decision.status, f"{decision.reason}: a fit writes a new version of it")
        if asked is not None and asked.parameters() != current.parameters():
            if not is_admin(caller, name):
                raise AccessDenied(
                    401 if caller.anonymous else 403,
                    f"changing the access policy of model '{name}' needs the scope admin; leave access, "
                    "access_scopes and access_substitute out to keep it",
                )
            return Guard(current.parameters(), asked.parameters())
        return Guard(current.parameters())
    if asked is not None and asked.effective(default) == RESTRICTED and not caller.may_read(name, asked, default):
        raise AccessDenied(
            401 if caller.anonymous else 403,
            f"a restricted model can be made only by a caller who may then read it: "
            f"{who(caller)} has none of the scopes {', '.join(asked.readers)}",
        )
    return Guard(None, asked.parameters() if asked is not None else None)


def owner_of(record: dict) -> str | None:
    return (record.get("source") or {}).get("owner")


def may_see(caller: Caller, record: dict, access_of, default: str) -> bool:
    """Whether `caller` may see the fit `record` (its record, events, previews; find it by its upload's hash)."""
    owner = owner_of(record)
    if is_admin(caller, record.get("name")):
        return True
    if owner is not None:
        return caller.claims is not None and caller.claims.sub == owner
    access = access_of(record.get("name", "")) or Access()  # a new model: under the server's default
    return caller.may_read(record.get("name", ""), access, default)


def public(record: dict, access_of, default: str) -> bool:
    """Whether anyone may see it: what its previews' Cache-Control says (private otherwise)."""
    return owner_of(record) is None and (access_of(record.get("name", "")) or Access()).effective(default) != RESTRICTED


def may_cancel(caller: Caller, record: dict, access_of, default: str) -> bool:
    """The owner or an admin; a fit queued without credentials, whoever may see it (INR_FIT_ACCESS=open)."""
    return may_see(caller, record, access_of, default)
