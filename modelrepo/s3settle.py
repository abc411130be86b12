"""Versions without a marker on S3 (modelrepo/s3.py): a repository uploaded by any tool (`aws s3 sync`, boto3,
rclone, `mc mirror`) has no `NAME/N/.published`, and is served once each version has settled.

S3 shows an object whole or not at all (a PUT, or a multipart upload once completed), so a version half uploaded
lacks objects, never bytes. A version without its marker is served once it is

1. **unclaimed**: no writer's claim in it (`N/.claim-…`): a writer of ours is at work, and publishes with a marker;
2. **complete**: its `model.onnx` is listed; in a model of this project's layout (a `metadata.json` beside its
   `config.pbtxt`) its `N/metadata.json` too, and every file that one names (the separable body, the blocks, the
   preview), each checked against its sha256 when it is fetched;
3. **quiet**: no object of it, nor of the model's own files, is younger than `settle_s` (INR_S3_SETTLE_S) by S3's
   own clock: each object's LastModified against the Date of the listing's answer, so a sync still at work is waited
   for and no clock of this host is involved.

A version once served stays served while its own objects are the same (keys and ETags): a new `config.pbtxt` does
not withdraw it, a changed or added object in it does, until it is quiet and complete again. A version with its
marker is served at once, as before.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from .s3layout import ModelIndex, Unmarked

log = logging.getLogger(__name__)
MODEL_FILE = "model.onnx"
SETTING = "INR_S3_SETTLE_S"


class Settler:
    """A repository's versions without a marker settled at each listing (`settle`), the files their metadata.json
    name read once an ETag, and each reason a version is held logged once."""

    def __init__(self, repo, settle_s: float):
        self.repo, self.settle_s = repo, settle_s
        self._named: dict[tuple[str, int, str], set[str]] = {}  # (name, N, ETag of N/metadata.json) → files named

    def settle(self, index: dict[str, ModelIndex], last: dict[str, ModelIndex] | None, now: float) -> None:
        settle(index, last, now, self.settle_s, self.named)
        for name, model in index.items():
            for n, why in model.held.items():
                if (last or {}).get(name) is None or last[name].held.get(n) != why:
                    log.info("%s: %s", self.repo.url, why)

    def named(self, name: str, version: int, etag: str) -> set[str]:
        """The files `N/metadata.json` names; unreadable, the graph alone (and the load names what is wrong)."""
        key = (name, version, etag)
        if key not in self._named:
            rel = f"{version}/metadata.json"
            repo = self.repo
            body = repo.call("GET", "get_object", f"model '{name}' file {rel}", Key=repo.location.key(name, rel))
            try:
                self._named[key] = named_files(json.loads(body["Body"].read()))
            except ValueError:
                self._named[key] = named_files(None)
        return self._named[key]


def named_files(metadata) -> set[str]:
    """The files of a version that its `N/metadata.json` names, relative to the version's folder: the graph, the
    separable body, the preview, each block. Names that are not plain relative paths are left to the load's checks."""
    found = {MODEL_FILE}
    if not isinstance(metadata, dict):
        return found
    separable = metadata.get("separable")
    blocks = metadata.get("blocks")
    names = [metadata.get("preview"), separable.get("body") if isinstance(separable, dict) else None]
    if isinstance(blocks, dict) and isinstance(blocks.get("blocks"), list):
        names += [b.get("file") for b in blocks["blocks"] if isinstance(b, dict)]
    for rel in names:
        if isinstance(rel, str) and rel and not rel.startswith("/") and ".." not in rel.split("/"):
            found.add(rel)
    return found


def settle(
    index: dict[str, ModelIndex],
    previous: dict[str, ModelIndex] | None,
    now: float,
    settle_s: float,
    named: Callable[[str, int, str], set[str]],
) -> None:
    """Serve (add to `published`) the versions of `index` without a marker that have settled; record why the others
    are held. `previous`: the last listing (a version served then with the same objects stays served); `now`: S3's
    clock; `named(name, version, etag)`: the files the version's metadata.json names (read from S3 once an ETag)."""
    for name, model in index.items():
        before = (previous or {}).get(name)
        for n, version in sorted(model.unmarked.items()):
            why = _held(name, model, n, version, before, now, settle_s, named)
            if why:
                model.held[n] = why
                continue
            model.files.update(version.files)
            model.published = tuple(sorted((*model.published, n)))
            model.settled += (n,)


def _held(name, model, n, version: Unmarked, before, now, settle_s, named) -> str | None:
    what = f"model '{name}' version {n} (no {n}/.published)"
    if version.claimed:
        return f"{what}: a writer's claim is in it; served once it publishes"
    if f"{n}/{MODEL_FILE}" not in version.files:
        return f"{what}: {n}/{MODEL_FILE} is not uploaded"
    meta = f"{n}/metadata.json"
    if "metadata.json" in model.files and meta not in version.files:
        return f"{what}: {meta} is not uploaded, and the model's metadata.json says it is one of this project's"
    mine = {k: v for k, v in (before.files if before else {}).items() if k.startswith(f"{n}/")}
    if before is not None and n in before.settled and mine == version.files:
        return None  # served at the last listing, and nothing in it changed
    age = now - max(version.newest, model.newest)
    if age < settle_s:
        wait = f"served once nothing in it changed for {settle_s:g} s ({SETTING})"
        return f"{what}: written {max(age, 0.0):.0f} s ago; {wait}"
    if meta in version.files:
        missing = sorted(r for r in named(name, n, version.files[meta][0]) if f"{n}/{r}" not in version.files)
        if missing:
            return f"{what}: {meta} names {', '.join(missing)}, not uploaded"
    return None
