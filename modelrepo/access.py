"""Who may read a model: its access policy, written in its config.pbtxt as Triton `parameters` (Triton reads the
folder still, and ignores them):

    parameters { key: "access" value { string_value: "restricted" } }
    parameters { key: "access_scopes" value { string_value: "staff,conservation" } }
    parameters { key: "access_substitute" value { string_value: "512" } }

- `access`: `public` (anyone) or `restricted` (a token or key with one of its scopes). Without it the model takes
  the server's default (`INR_ACCESS_DEFAULT`, `public` unless set).
- `access_scopes`: the scopes that may read a restricted model, comma-separated; without it, the scope `read`
  (any reader). A key limited to listed models must also list this one.
- `access_substitute`: a restricted image model's public form (IIIF's "substitute"): renders and tiles of at most
  this many pixels on the long side, for anyone.

docs/model-repository.md, "Access"; the service enforces it (service/auth/).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

PUBLIC, RESTRICTED = "public", "restricted"
KINDS = (PUBLIC, RESTRICTED)
KEYS = ("access", "access_scopes", "access_substitute")
SCOPE_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}\Z")
READ = "read"
SUBSTITUTE_MAX = 65_536


class AccessError(ValueError):
    """A config.pbtxt access parameter that does not parse (a SpecError where the folder is read)."""


@dataclass(frozen=True)
class Access:
    kind: str | None = None  # public | restricted | None: the server's default
    scopes: tuple[str, ...] = ()  # who may read a restricted model; () = READ
    substitute: int | None = None  # long side in px of the public form of a restricted image model

    def effective(self, default: str) -> str:
        return self.kind or default

    @property
    def readers(self) -> tuple[str, ...]:
        return self.scopes or (READ,)

    @classmethod
    def from_parameters(cls, params: dict[str, str]) -> "Access":
        """From config.pbtxt's `parameters` (key → string_value); other keys are not its business, but a key
        that starts with `access` in any case and is not one of KEYS is a typo that would leave a model open, and so
        are scopes or a substitute without `access: restricted`: each is an AccessError, and the model fails to load."""
        odd = sorted(k for k in params if k not in KEYS and _looks_like_access(k))
        if odd:
            raise AccessError(f"config.pbtxt: unknown parameter '{odd[0][:60]}'; access parameters: {', '.join(KEYS)}")
        kind = params.get("access", "").strip() or None
        if kind is not None and kind not in KINDS:
            raise AccessError(f"config.pbtxt: parameter access must be public or restricted, got '{kind[:40]}'")
        scopes = tuple(s.strip() for s in params.get("access_scopes", "").split(",") if s.strip())
        bad = [s for s in scopes if not SCOPE_RE.match(s)]
        if bad:
            raise AccessError(
                f"config.pbtxt: access_scopes '{bad[0][:40]}' must be lower-case letters, digits, '_', '.' or '-'"
            )
        substitute = None
        text = params.get("access_substitute", "").strip()
        if text:
            if not text.isdigit() or not 1 <= int(text) <= SUBSTITUTE_MAX:
                raise AccessError(
                    f"config.pbtxt: access_substitute must be a long side in pixels, 1..{SUBSTITUTE_MAX}, "
                    f"got '{text[:40]}'"
                )
            substitute = int(text)
        if (scopes or substitute) and kind != RESTRICTED:  # without `access` they would be ignored: fail, not open
            raise AccessError(
                "config.pbtxt: access_scopes and access_substitute apply to a restricted model only: "
                'add parameters { key: "access" value { string_value: "restricted" } }'
            )
        return cls(kind, scopes, substitute)

    def parameters(self) -> dict[str, str]:
        """The config.pbtxt parameters that say this policy (none for the server's default)."""
        out = {}
        if self.kind:
            out["access"] = self.kind
        if self.scopes:
            out["access_scopes"] = ",".join(self.scopes)
        if self.substitute:
            out["access_substitute"] = str(self.substitute)
        return out


def _looks_like_access(key: str) -> bool:
    """`ACCESS`, `access_scope`, `acces_scopes`: a parameter meant as a policy whose typo would leave it unread."""
    low = key.strip().lower()
    return low.startswith("access") or bool(difflib.get_close_matches(low, KEYS, n=1, cutoff=0.8))


class PolicyChanged(AccessError):
    """The target's access policy is not the one its writer was allowed to write under (write_version refuses)."""


@dataclass(frozen=True)
class Guard:
    """What a writer of a new version was allowed to publish over, decided where the caller was known (the API's
    POST /v1/fits) and checked where the version is written (modelrepo.write_version, in the worker):

    - `seen`: the target's access parameters then (`Access.parameters()`; {} for a model under the server's default),
      or None when there was no such model;
    - `policy`: the parameters the caller asked for and was allowed to set, or None to keep the target's.

    A publish keeps the target's policy unless `policy` says otherwise, and is refused when the target's policy is
    no longer `seen` (restricted meanwhile, or a model made under another policy by someone else)."""

    seen: dict | None
    policy: dict | None = None

    def to_json(self) -> dict:
        return {"seen": self.seen, "policy": self.policy}

    @classmethod
    def from_json(cls, obj) -> "Guard | None":
        if not isinstance(obj, dict):
            return None
        seen, policy = obj.get("seen"), obj.get("policy")
        return cls(dict(seen) if isinstance(seen, dict) else None, dict(policy) if isinstance(policy, dict) else None)

    def check(self, name: str, current: dict | None) -> Access | None:
        """The policy to write over a target whose parameters are `current` (None: no such model now); None keeps
        the target's. PolicyChanged when the target is not what the writer was allowed to publish over."""
        wanted = self.policy if self.policy is not None else self.seen
        if current is not None and current != (self.seen if self.seen is not None else self.policy or {}):
            raise PolicyChanged(
                f"model '{name}': its access policy changed since this fit was queued "
                f"({_shown(self.seen)} then, {_shown(current)} now); queue it again"
            )
        if current is None:  # a new model, or one removed meanwhile: made under the policy the writer was given
            return Access.from_parameters(wanted or {})
        return None if self.policy is None or self.policy == current else Access.from_parameters(self.policy)


def _shown(params: dict | None) -> str:
    if params is None:
        return "no such model"
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items())) or "the server's default"
