"""Where a model repository is: a local folder, or a bucket and prefix on S3 in Triton's form.

    models                              a folder (relative or absolute)
    s3://bucket/path/to/models          AWS S3 (the region, credentials and any AWS_ENDPOINT_URL from AWS_* variables)
    s3://host:port/bucket/path          an S3-compatible server (MinIO, SeaweedFS, Ceph, Swift) over HTTP, path-style
    s3://https://host:port/bucket/path  the same over HTTPS

As Triton parses `--model-repository`: a first component with `:PORT` is the server, the next one the bucket.
Credentials are never part of the URL: they come from the usual AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or any
source botocore reads: AWS_PROFILE, a web identity token, an instance role).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")
HOST_RE = re.compile(r"^[0-9A-Za-z.-]+:[0-9]{1,5}\Z")
SEGMENT_RE = re.compile(r"^[0-9A-Za-z._-]+\Z")


class LocationError(ValueError):
    """A repository URL that does not parse; the message says which part and the forms that do."""


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str = ""  # "" or "path/to/models/" (always ending in '/')
    endpoint: str | None = None  # "http://host:port"; None: AWS, or AWS_ENDPOINT_URL(_S3)

    @property
    def url(self) -> str:
        host = ""
        if self.endpoint:
            scheme, _, hostport = self.endpoint.partition("://")
            host = (f"{scheme}://" if scheme == "https" else "") + hostport + "/"
        return f"s3://{host}{self.bucket}/{self.prefix}".rstrip("/")

    def key(self, *parts: str) -> str:
        return self.prefix + "/".join(parts)

    def child(self, name: str) -> "S3Location":
        return S3Location(self.bucket, f"{self.prefix}{name}/", self.endpoint)


def is_s3(value: str | Path) -> bool:
    return isinstance(value, str) and value.startswith("s3://")


def parse_s3(url: str) -> S3Location:
    """`s3://[http(s)://host:port/]bucket[/path]`; LocationError naming what is wrong."""
    if not url.startswith("s3://"):
        raise LocationError(f"'{url[:80]}' is not an s3:// URL")
    rest, endpoint = url[len("s3://") :], None
    scheme = "http"
    for given in ("http://", "https://"):
        if rest.startswith(given):
            scheme, rest = given[:-3], rest[len(given) :]
    parts = [p for p in rest.split("/") if p]
    if parts and HOST_RE.match(parts[0]):
        endpoint = f"{scheme}://{parts.pop(0)}"
    elif scheme == "https" or rest != url[len("s3://") :]:
        raise LocationError(f"'{url[:80]}': a scheme inside s3:// needs host:port, as in s3://https://host:9000/bucket")
    if not parts:
        raise LocationError(f"'{url[:80]}' names no bucket: s3://bucket/path or s3://host:port/bucket/path")
    bucket, path = parts[0], parts[1:]
    if not BUCKET_RE.match(bucket):
        raise LocationError(
            f"'{url[:80]}': '{bucket[:64]}' is not a bucket name (3-63 lower-case letters, digits, '.', '-')"
        )
    bad = [p for p in path if not SEGMENT_RE.match(p) or p in (".", "..")]
    if bad:
        raise LocationError(f"'{url[:80]}': path segment '{bad[0][:40]}' must be letters, digits, '.', '_' or '-'")
    return S3Location(bucket, "".join(f"{p}/" for p in path), endpoint)
