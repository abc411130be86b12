"""Uploads kept as files, in a bucket instead of a shared folder (INR_FIT_UPLOADS=s3://…, docs/fits.md "Giant
images"): the API streams the upload to its own scratch disk as it arrives (it reads the header there), then puts it
into the bucket, in parts of PART_BYTES above that size; the worker that fits or splits the job reads it back with
ranged GETs, PART_BYTES each and several at once, into its own temporary folder. So the API and the workers share
no folder. The URL has Triton's form, as `--models s3://…` (modelrepo/location.py): `s3://host:port/bucket/path`
for an S3-compatible server, `s3://bucket/path` for AWS; credentials from the AWS_* variables.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

PART_BYTES = 64 << 20
S3_RE = re.compile(r"^s3://(?:(https?)://)?(?:([0-9A-Za-z.-]+:[0-9]{1,5})/)?([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/.*)?\Z")


class UploadsUnavailable(OSError):
    """The bucket of the uploads did not answer, or refused: the message names INR_FIT_UPLOADS."""


def is_s3(where) -> bool:
    return isinstance(where, str) and where.startswith("s3://")


class S3Uploads:
    def __init__(self, url: str):
        found = S3_RE.match(url.rstrip("/"))
        if not found or (found.group(1) and not found.group(2)):
            raise ValueError(f"'{url[:80]}' is not s3://[host:port/]bucket[/path] (INR_FIT_UPLOADS)")
        scheme, host, self.bucket, path = found.groups()
        self.endpoint = f"{scheme or 'http'}://{host}" if host else None
        self.prefix = "".join(f"{p}/" for p in (path or "").split("/") if p)
        self.url = url.rstrip("/")
        self._client = None

    @property
    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config

            custom = self.endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            config = Config(
                s3={"addressing_style": "path"} if custom else {},
                retries={"max_attempts": 3, "mode": "standard"},
                connect_timeout=2,
                read_timeout=30,
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            )
            region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
            self._client = boto3.session.Session().client(
                "s3", endpoint_url=self.endpoint, region_name=region, config=config
            )
        return self._client

    def _transfer(self):
        from boto3.s3.transfer import TransferConfig

        return TransferConfig(multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES, max_concurrency=4)

    def _call(self, what: str, fn, *args, **kwargs):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(*args, **kwargs)
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NotFound"):
                raise FileNotFoundError(f"{what} is not in {self.url} (INR_FIT_UPLOADS)") from None
            raise UploadsUnavailable(f"{self.url} (INR_FIT_UPLOADS) answered {code} to {what}") from None
        except (BotoCoreError, OSError) as e:
            raise UploadsUnavailable(f"{self.url} (INR_FIT_UPLOADS) did not answer for {what} ({e})") from None

    def keep(self, local: Path, name: str) -> None:
        """Put the upload at `local` into the bucket as `name` (in parts above PART_BYTES)."""
        self._call(f"the upload {name}", self.client.upload_file, str(local), self.bucket, self.prefix + name,
                   Config=self._transfer())  # fmt: skip

    def fetch(self, name: str, folder: Path) -> Path:
        """The upload `name`, read with ranged GETs into `folder` (a part file renamed in once whole)."""
        path = Path(folder) / name
        tmp = path.with_name(f".part-{secrets.token_hex(6)}")
        try:
            self._call(f"the upload {name}", self.client.download_file, self.bucket, self.prefix + name, str(tmp),
                       Config=self._transfer())  # fmt: skip
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path

    def release(self, name: str) -> None:
        self._call(f"deleting {name}", self.client.delete_object, Bucket=self.bucket, Key=self.prefix + name)

    def objects(self) -> list[tuple[str, float]]:
        """(name, age in seconds since its last change) of each upload in the bucket's prefix."""
        import time

        found, token = [], {}
        while True:
            page = self._call("the listing", self.client.list_objects_v2, Bucket=self.bucket, Prefix=self.prefix,
                              **token)  # fmt: skip
            for obj in page.get("Contents", ()):
                found.append((obj["Key"][len(self.prefix) :], time.time() - obj["LastModified"].timestamp()))
            if not page.get("IsTruncated"):
                return found
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def abort_stale(self, grace_s: float) -> int:
        """Abort the multipart uploads begun more than `grace_s` ago (an API replica that died mid-upload)."""
        import time

        page = self._call("the uploads", self.client.list_multipart_uploads, Bucket=self.bucket, Prefix=self.prefix)
        stale = [u for u in page.get("Uploads", ()) if time.time() - u["Initiated"].timestamp() >= grace_s]
        for u in stale:
            self._call("an abort", self.client.abort_multipart_upload, Bucket=self.bucket, Key=u["Key"],
                       UploadId=u["UploadId"])  # fmt: skip
        return len(stale)
