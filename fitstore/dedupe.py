"""Jobs by the bytes of their upload (mixed into fitstore.store.FitStore; docs/fits.md, "Skip by content hash").

The API records the sha256 of the uploaded file, as sent, in the record's `source.sha256`; the store keeps an
index `sha:HEX` → the ids of the newest jobs with those bytes (oldest first, at most SHA_KEEP), written only by
the submit transaction, which expects `jobseq` unchanged: a submit that raced another one reads the index again
with everything else. So a submit asked to reuse (`POST /v1/fits` with `skip_existing`) finds a job queued,
running or succeeded with the same bytes, across every API process, or queues exactly one. Failed and cancelled
jobs do not count; the index is never written after the submit (a record keeps one writer).
"""

from __future__ import annotations

import json
import re

SHA256 = re.compile(r"[0-9a-f]{64}")
SHA_KEEP = 16  # job ids kept per upload hash: the newest
COUNTS = ("queued", "running", "succeeded")  # a job with the same bytes in one of these: the bytes are fitted


class Duplicate(Exception):
    """A submit asked to reuse found a job with the same bytes: `record`, the newest that counts (COUNTS)."""

    def __init__(self, record: dict):
        super().__init__(f"fit {record['id']} has the same bytes ({record['state']})")
        self.record = record


def sha_key(sha256: str) -> str:
    return f"sha:{sha256}"


class Dedupe:
    """The FitStore methods that find jobs by the sha256 of their upload."""

    def _sha_ids(self, sha256: str) -> list[str]:
        return self._get(sha_key(sha256)) or []

    def with_sha256(self, sha256: str) -> list[dict]:
        """Every job (of the newest SHA_KEEP) whose upload had these bytes, newest first, in any state."""
        sha256 = sha256.lower()
        if not SHA256.fullmatch(sha256):
            raise ValueError(f"not a sha256 in hex: {sha256[:80]!r}")
        ids = self._sha_ids(sha256)
        found = self._many([f"job:{i}" for i in ids])
        return [found[f"job:{i}"] for i in reversed(ids) if f"job:{i}" in found]

    def fitted(self, sha256: str, visible=None) -> dict | None:
        """The newest job with these bytes that is queued, running or succeeded (and `visible(record)`, the asking
        caller's view: another caller's job is not theirs to reuse); None if there is none."""
        return next(
            (r for r in self.with_sha256(sha256) if r["state"] in COUNTS and (visible is None or visible(r))), None
        )

    def _sha_puts(self, sha256: str | None, job_id: str) -> dict:
        """The index after adding job_id (for the submit transaction)."""
        if not sha256:
            return {}
        ids = [*self._sha_ids(sha256), job_id][-SHA_KEEP:]
        return {sha_key(sha256): json.dumps(ids).encode()}
