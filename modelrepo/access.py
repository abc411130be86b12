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

import re
from dataclasses import dataclass

PUBLIC, RESTRICTED = "public", "restricted"
KINDS = (PUBLIC, RESTRICTED)
KEYS = ("access", "access_scopes", "access_substitute")
SCOPE_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
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
        that starts with `access` and is not one of KEYS is a typo that would leave a model open."""
        odd = sorted(k for k in params if k.startswith("access") and k not in KEYS)
        if odd:
            raise AccessError(f"config.pbtxt: unknown parameter '{odd[0]}'; access parameters: {', '.join(KEYS)}")
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
        if (scopes or substitute) and kind == PUBLIC:
            raise AccessError("config.pbtxt: access_scopes and access_substitute apply to a restricted model only")
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
