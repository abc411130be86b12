"""Who may call what: Triton's restricted API groups, `--http-restricted-api API[,API...]:KEY=VALUE`.

A request to an API of a restricted group must carry the header `KEY: VALUE` (HTTP) or metadata (gRPC); the
value is compared in constant time (`hmac.compare_digest`) and never appears in logs, settings dumps, `repr`
or error text: it is a `SecretStr`.

The groups are Triton's names, plus `fit`: every `/v1/fits` route (upload, list, status, events,
previews, cancel; docs/fits.md), and `keys`: the admin API of API keys (docs/access.md), which Triton does not
have. Each route falls into one group by its
path template (`group_of`); the viewer's static files, `/docs` and `/openapi.json` are in none.
An API may be in one group only, as in Triton. The settings parse the groups, the HTTP middleware
(service/server/restricted.py) and the gRPC servicer enforce them.
"""

from __future__ import annotations

import hmac
import re

from pydantic import BaseModel, ConfigDict, SecretStr

GROUPS = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
    "fit",
    "keys",
)
HEADER_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")  # an HTTP header name (RFC 9110 token)


class RestrictedGroup(BaseModel):
    """APIs that need the header `key` with `value`."""

    model_config = ConfigDict(frozen=True)
    apis: tuple[str, ...]
    key: str
    value: SecretStr

    @classmethod
    def parse(cls, spec: str) -> "RestrictedGroup":
        """`model-repository,statistics:admin-key=s3cret`. Errors never quote the value."""
        apis, sep, header = spec.partition(":")
        key, eq, value = header.partition("=")
        if not sep or not eq:
            raise ValueError("expected API[,API...]:KEY=VALUE, e.g. model-repository:admin-key=VALUE")
        names = tuple(a.strip() for a in apis.split(","))
        unknown = [a for a in names if a not in GROUPS]
        if unknown:
            raise ValueError(f"unknown API {unknown[0]!r}; valid: {', '.join(GROUPS)}")
        key = key.strip()
        if not HEADER_RE.match(key):
            raise ValueError("KEY must be an HTTP header name (letters, digits, '-', ...)")
        if not value:
            raise ValueError(f"the value for header '{key}' is empty")
        return cls(apis=names, key=key.lower(), value=SecretStr(value))

    def spec(self) -> str:
        """The Triton form, value included: only for handing the setting to worker processes."""
        return f"{','.join(self.apis)}:{self.key}={self.value.get_secret_value()}"


def check_groups(groups: list[RestrictedGroup]) -> None:
    seen: set[str] = set()
    for g in groups:
        for api in g.apis:
            if api in seen:
                raise ValueError(f"API '{api}' is in more than one restricted group")
            seen.add(api)


V1_METADATA = re.compile(r"^/v1/models(/\{name\}(/preview|/versions/\{version\})?)?\Z")


def group_of(template: str) -> str | None:
    """The API group of a route, from its path template (e.g. `/v2/models/{name}/infer`)."""
    if template == "/v1/fits" or template.startswith("/v1/fits/"):
        return "fit"
    if template == "/v1/keys" or template.startswith("/v1/keys/"):
        return "keys"
    if template.startswith("/v2/repository"):
        return "model-repository"
    if template.startswith(("/health", "/v2/health")) or template.endswith("/ready"):
        return "health"
    if template.endswith("/config"):
        return "model-config"
    if template.endswith("/stats") or template == "/metrics":
        return "statistics"
    if template == "/v2" or template.startswith("/v2/models/{name}") and not template.endswith("/infer"):
        return "metadata"
    if V1_METADATA.match(template):
        return "metadata"
    if template.startswith(("/v1/models/", "/v2/models/", "/iiif")):
        return "inference"
    return None


def carries_key(sent: list[bytes], restriction: RestrictedGroup) -> bool:
    """The values sent under the group's key (HTTP headers, gRPC metadata) are exactly its one value."""
    expected = restriction.value.get_secret_value().encode()
    # compare_digest takes time independent of where the bytes differ; one header, exactly
    return len(sent) == 1 and hmac.compare_digest(sent[0], expected)
