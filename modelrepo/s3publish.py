"""Publishing a version to S3 without a rename (modelrepo/s3.py): S3 has no atomic folder rename, so a writer

1. claims the next number N (`NAME/N/.claim-TIME-RANDOM`, then a listing of `NAME/N/`: anything else there, or an
   older claim, and it takes N+1 instead), so two workers publishing into one model never share a number;
2. uploads the version's files (the same files `write_version` writes into a folder: model.onnx, metadata.json,
   a preview, blocks/; multipart above MULTIPART_BYTES), then the model's config.pbtxt and metadata.json when they
   change (a new model, a new spec);
3. writes `NAME/N/.published` last: the version's files with their sizes and sha256, and then deletes its claim.
   A listing serves a version with its marker at once; one without (uploaded by another tool) only once it has
   settled, and never while a claim is in it (modelrepo/s3settle.py).

A writer that fails before step 3 deletes what it uploaded, then its claim; one that dies leaves its claim, so its
version is never served, and `sweep` (the fit workers run it) deletes such claimed leftovers, and unfinished
multipart uploads, once they are older than a grace period. A version without a claim is another tool's: never
swept.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import secrets
import tempfile
import time
from pathlib import Path

from .folder import Written, _fill_version, next_spec_files
from .s3layout import CLAIM, MARKER, ModelIndex
from .spec import SpecError
from .triton import config_text

log = logging.getLogger(__name__)
MULTIPART_BYTES = 64 << 20  # files above this go up in parts of this size (a giant's blocks, an upload)
GRACE_S = 3600.0


def transfer_config():
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(multipart_threshold=MULTIPART_BYTES, multipart_chunksize=MULTIPART_BYTES, max_concurrency=4)


def _keys(repo, prefix: str) -> list[str]:
    keys, token = [], None
    while True:
        page = repo.call(
            "LIST", "list_objects_v2", prefix, Prefix=prefix, **({"ContinuationToken": token} if token else {})
        )
        keys += [o["Key"] for o in page.get("Contents", ())]
        if not page.get("IsTruncated"):
            return keys
        token = page["NextContinuationToken"]


def _old_spec(repo, name: str, model: ModelIndex):
    """The model's spec as published and its config.pbtxt's text (None, None for a new model). SpecError for a
    model whose files cannot be read: it is never written over (its config.pbtxt counts as restricted)."""
    from .folder import read_spec, unreadable

    if not model.published:
        return None, None
    with tempfile.TemporaryDirectory(prefix="inr-spec-") as tmp:
        folder = Path(tmp) / name
        folder.mkdir()
        for rel in ("config.pbtxt", "metadata.json"):
            if rel in model.files:
                body = repo.call("GET", "get_object", rel, Key=repo.location.key(name, rel))["Body"].read()
                (folder / rel).write_bytes(body)
        try:
            spec = read_spec(folder)
        except SpecError as e:
            raise unreadable(name, e) from None
        config = folder / "config.pbtxt"
        return spec, config.read_text() if config.exists() else None


def _claim(repo, name: str, first: int) -> tuple[int, str]:
    n = first
    while True:
        mine = repo.location.key(name, str(n), f"{CLAIM}{time.time_ns():020d}-{secrets.token_hex(4)}")
        repo.call("PUT", "put_object", mine, Key=mine, Body=b"")
        others = [k for k in _keys(repo, repo.location.key(name, str(n)) + "/") if k != mine]
        lost = [k for k in others if not k.rsplit("/", 1)[-1].startswith(CLAIM) or k < mine]
        if not lost:
            return n, mine
        repo.call("DELETE", "delete_object", mine, Key=mine)
        n += 1


def publish(repo, name: str, spec, onnx_bytes: bytes, metadata: dict, extras=None, guard=None) -> Written:
    """The next version, as modelrepo.folder.write_version writes one into a folder: the model's own config.pbtxt
    and metadata.json kept (next_spec_files), a fit's `guard` checked against its policy."""
    spec = spec.with_(name=name)
    spec.validate()
    model = repo._list(repo.location.key(name) + "/").get(name, ModelIndex())
    old, old_config = _old_spec(repo, name, model)
    if old is None:  # a new model: under the policy its writer was given
        new_files = {"metadata.json": _json(spec.to_json()), "config.pbtxt": None}
        if guard is not None:
            spec = spec.with_(access=guard.check(name, None))
        new_files["config.pbtxt"] = config_text(spec)
    else:
        spec, config, meta = next_spec_files(name, old, old_config, spec, guard)
        new_files = {"metadata.json": meta, "config.pbtxt": config}
    version, claim = _claim(repo, name, max([*model.published, *model.pending], default=0) + 1)
    uploaded: list[str] = []  # deleted again if the marker is never written, before the claim is
    try:
        with tempfile.TemporaryDirectory(prefix="inr-publish-") as tmp:
            vdir = Path(tmp) / str(version)
            record = _fill_version(vdir, version, onnx_bytes, metadata, extras)
            files = {}
            for path in sorted(p for p in vdir.rglob("*") if p.is_file()):
                rel = path.relative_to(vdir).as_posix()
                key = repo.location.key(name, str(version), rel)
                repo.requests["PUT"] += 1
                uploaded.append(key)
                repo.client.upload_file(str(path), repo.location.bucket, key, Config=transfer_config())
                files[rel] = {"size": path.stat().st_size, "sha256": _sha256(path)}
            for rel, text in new_files.items():  # the model's own files only when they change
                if text is not None:
                    key = repo.location.key(name, rel)
                    repo.call("PUT", "put_object", key, Key=key, Body=text.encode())
            marker = {
                "version": version,
                "files": files,
                "published": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            }
            key = repo.location.key(name, str(version), MARKER)
            repo.call("PUT", "put_object", key, Key=key, Body=json.dumps(marker, indent=1).encode())
            uploaded = []
    finally:
        try:
            for key in uploaded:  # without their claim they could pass for another tool's version
                repo.call("DELETE", "delete_object", key, Key=key)
            repo.call("DELETE", "delete_object", claim, Key=claim)
        except Exception:  # noqa: BLE001 - a claim left behind is swept with the leftovers
            log.warning("publish %s version %d: the claim %s stays until the sweep", name, version, claim)
    log.info("published %s version %d to %s", name, version, repo.url)
    return Written(spec, record, Path(f"{name}/{version}"))


def sweep(repo, grace_s: float = GRACE_S, now: float | None = None) -> list[str]:
    """Delete the versions that have a writer's claim, no marker and no object newer than `grace_s` (a writer of ours
    that died; a version without a claim is another tool's, and stays), and abort the multipart uploads into such
    versions started before that; the versions deleted, as NAME/N, and the uploads aborted, as their keys."""
    now = time.time() if now is None else now
    gone, dead = [], []
    for name, model in repo._list(repo.location.prefix).items():
        for n, version in sorted(model.unmarked.items()):
            if not version.claimed or now - version.newest < grace_s:
                continue
            dead.append(repo.location.key(name, str(n)) + "/")
            for key in _keys(repo, repo.location.key(name, str(n)) + "/"):  # one by one: a few objects, and every
                repo.call("DELETE", "delete_object", key, Key=key)  # S3-compatible server has DeleteObject
            gone.append(f"{name}/{n}")
    token = {}
    while True:
        page = repo.call("LIST", "list_multipart_uploads", "the uploads", Prefix=repo.location.prefix, **token)
        for up in page.get("Uploads", ()):
            mine = any(up["Key"].startswith(folder) for folder in dead)  # another tool's may take hours
            if mine and now - up["Initiated"].timestamp() >= grace_s:
                repo.call("DELETE", "abort_multipart_upload", up["Key"], Key=up["Key"], UploadId=up["UploadId"])
                gone.append(up["Key"])
        if not page.get("IsTruncated"):
            break
        token = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}
    if gone:
        log.info("%s: deleted %d unpublished leftovers older than %g s", repo.url, len(gone), grace_s)
    return gone


def _sha256(path: Path) -> str:
    from .folder import sha256_file

    return sha256_file(path)


def _json(obj) -> str:
    from .folder import _json_text

    return _json_text(obj)


def push_model(repo, folder: Path) -> list[int]:
    """Copy a local model folder into the repository on S3, each version under its own number, published (marker
    last) unless it is already: the spec files first (a new model stays invisible until its first marker), then each
    version's files and its marker. The versions copied."""
    name = folder.name
    model = repo._list(repo.location.key(name) + "/").get(name, ModelIndex())
    for rel in ("metadata.json", "config.pbtxt"):
        if (folder / rel).is_file():
            key = repo.location.key(name, rel)
            repo.call("PUT", "put_object", key, Key=key, Body=(folder / rel).read_bytes())
    for warm in sorted((folder / "warmup").rglob("*")) if (folder / "warmup").is_dir() else ():
        if warm.is_file():
            key = repo.location.key(name, warm.relative_to(folder).as_posix())
            repo.call("PUT", "put_object", key, Key=key, Body=warm.read_bytes())
    copied = []
    for vdir in sorted((p for p in folder.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)):
        n = int(vdir.name)
        if n in model.published or str(n) != vdir.name or n < 1:
            continue
        files = {}
        for path in sorted(p for p in vdir.rglob("*") if p.is_file() and not p.name.startswith(".")):
            rel = path.relative_to(vdir).as_posix()
            repo.requests["PUT"] += 1
            repo.client.upload_file(
                str(path), repo.location.bucket, repo.location.key(name, str(n), rel), Config=transfer_config()
            )
            files[rel] = {"size": path.stat().st_size, "sha256": _sha256(path)}
        marker = {"version": n, "files": files, "published": dt.datetime.now(dt.timezone.utc).isoformat()}
        key = repo.location.key(name, str(n), MARKER)
        repo.call("PUT", "put_object", key, Key=key, Body=json.dumps(marker, indent=1).encode())
        copied.append(n)
    return copied
