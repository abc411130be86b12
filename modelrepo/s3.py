"""A model repository on S3 (`--models s3://…`, modelrepo/location.py), read through a local mirror on disk.

Layout in the bucket: the local one under the URL's prefix (`NAME/config.pbtxt`, `NAME/N/model.onnx`, …), and, from
this project's writers, one object more per version, `NAME/N/.published`, written last (modelrepo/s3publish.py): a
version with it is listed at once. A version uploaded by any other tool has none, and is listed once it has settled:
no writer's claim, complete, and quiet for INR_S3_SETTLE_S by S3's clock (modelrepo/s3settle.py); so nobody ever
sees half of one. A model with no listed version is not listed either.

* **Listing** (`scan`): paged ListObjectsV2 of the whole prefix (1,000 keys a request), ranges of it side by side
  (modelrepo/s3listing.py), no object read. The keys and ETags make the index: each model's published files, its
  versions, and its stamp (a rescan compares stamps: an unchanged bucket costs its listing pages and nothing else).
* **The mirror** (`root`, in INR_MODEL_CACHE): `folder(name)` fetches a model's small files whose ETag differs from
  the mirror's copy (`.etags.json` in each model's folder records them); `fetch` a version's large file on first
  use, written under a temporary name, checked against the sha256 its metadata records, then renamed in. The mirror
  stays under INR_MODEL_CACHE_BYTES on disk, large files least recently used first out (modelrepo/diskcache.py).
  After a restart the mirror is revalidated by ETag against the listing: nothing unchanged is downloaded again.
* **Trust**: the cache folder is private to this user (modelrepo/private_dir.py: made 0700; another user's, or one
  group or others can write, refused), and every file in it is checked when it is used, not only when it is
  downloaded: against the sha256 it had then, in `.etags.json`, signed with the folder's key (modelrepo/s3mirror.py),
  and a version's graphs also against the sha256 its metadata records. A file that does not match is downloaded
  again, never used: a `config.pbtxt` or a graph planted in the folder, or left there before it was private.
* **Faults**: S3 not answering raises StorageUnavailable (the service answers 503 with Retry-After and keeps serving
  what is on local disk); a listing that fails keeps the last one (or, at a start, the mirror's own); a file gone
  while read, truncated or not matching its sha256 is never renamed into the mirror.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shutil
import threading
import time
from collections import Counter
from email.utils import parsedate_to_datetime
from pathlib import Path

from .diskcache import BLOCK, DiskBudget, is_large, on_disk
from .location import parse_s3
from .private_dir import KEY_FILE, default_cache, ensure
from .private_dir import key as folder_key
from .repository import Repository, StorageUnavailable
from .s3layout import ModelIndex
from .s3listing import build_index, fast_timestamps, list_all, list_range
from .s3mirror import Manifests
from .s3publish import publish, sweep
from .s3settle import Settler
from .spec import NAME_RE, SpecError

log = logging.getLogger(__name__)
CHUNK = 1 << 20
DOWN_S = 2.0  # after S3 did not answer, calls fail at once for this long
SETTING = "INR_MODEL_CACHE"


class RepositoryError(StorageUnavailable):
    """S3 answered, and refused: no such bucket, credentials refused. Fatal at a start; later, like a down S3."""


def client_for(location, timeout_s: float = 10.0, connect_s: float = 2.0, retries: int = 3):
    """A boto3 S3 client: credentials, region and AWS_ENDPOINT_URL from the environment as botocore reads them;
    path-style addressing for any endpoint other than AWS's own. `retries` after a request's first try (botocore's
    `max_attempts` counts them, not the tries)."""
    import boto3
    import botocore.session
    from botocore.config import Config

    custom = location.endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    config = Config(
        s3={"addressing_style": "path"} if custom else {},
        retries={"max_attempts": retries, "mode": "standard"},
        connect_timeout=connect_s,
        read_timeout=timeout_s,
        max_pool_connections=32,
        # checksums only where S3 requires them: the CRC trailers newer SDKs add by default are not spoken by every
        # S3-compatible server
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    core = botocore.session.get_session()
    fast_timestamps(core)  # a listing page's times parsed in C (modelrepo/s3listing.py)
    return boto3.session.Session(botocore_session=core).client(
        "s3", endpoint_url=location.endpoint, region_name=region, config=config
    )


class S3Repository(Repository):
    remote = True

    def __init__(
        self,
        url: str,
        cache: str | os.PathLike | None = None,
        max_bytes: int = 4 << 30,
        client=None,
        settle_s: float = 30.0,
    ):
        self.location = parse_s3(url)
        self.url = self.location.url
        base = ensure(cache if cache is not None else default_cache("models"), SETTING)  # private, or refused
        self.root = ensure(base / f"s3-{hashlib.sha256(self.url.encode()).hexdigest()[:12]}", SETTING)
        self.manifests = Manifests(self.root, folder_key(self.root, SETTING))  # what the mirror holds, signed
        self._client = client
        self.requests: Counter[str] = Counter()  # S3 requests by operation (GET, LIST, PUT, …): /metrics, benchmarks
        self.index: dict[str, ModelIndex] | None = None
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._down: tuple[float, str] | None = None  # (until, why): S3 did not answer (`call`)
        self.pause_s = DOWN_S  # how long `_down` holds
        self._usual_client = client
        self.budget = DiskBudget(self.root, max_bytes, self._forget, extra=(self.root / KEY_FILE,))
        self.settler = Settler(self, settle_s)  # versions without a marker: listed once settled
        self._skew = 0.0  # S3's clock minus this host's, from the Date of the last listing's answer

    # -- S3 calls ----------------------------------------------------------------------------------------
    @property
    def client(self):
        if self._client is None:
            self._client = client_for(self.location)
        return self._client

    def polling(self, answer_s: float) -> None:
        """For a caller that polls S3 until it answers (`python -m modelrepo push --wait`): each request tried once,
        1 s to connect and `answer_s` to answer, and no pause after one that S3 did not answer (DOWN_S), so a try
        follows another as soon as the caller likes. `polling(0)`: the usual client and pause again."""
        if answer_s:
            self._client = client_for(self.location, answer_s, connect_s=min(1.0, answer_s), retries=0)
            self.pause_s = 0.0
        else:
            self._client, self.pause_s = self._usual_client, DOWN_S
        self._down = None

    def call(self, op: str, method: str, what: str, **kwargs):
        """One S3 request, counted; its errors as StorageUnavailable / RepositoryError / FileNotFoundError. After S3
        did not answer, the calls of the next DOWN_S seconds fail at once (a request for a model not on local disk
        gets its 503 without waiting on retries, and the event loop is never held up by them)."""
        from botocore.exceptions import BotoCoreError, ClientError

        down = self._down
        if down is not None and time.monotonic() < down[0]:
            raise StorageUnavailable(f"{down[1]} (reading {what}; tried again within {DOWN_S:g} s)")
        with self._lock:
            self.requests[op] += 1
        try:
            answer = getattr(self.client, method)(Bucket=self.location.bucket, **kwargs)
        except ClientError as e:
            error = self.error(e, what)
            if type(error) is StorageUnavailable:
                self._down = (time.monotonic() + self.pause_s, str(error))
            raise error from None
        except BotoCoreError as e:
            reason = f"{self.url}: S3 did not answer ({e.__class__.__name__}: {e})"
            self._down = (time.monotonic() + self.pause_s, reason)
            raise StorageUnavailable(f"{reason} reading {what}") from None
        self._down = None
        if op == "LIST":
            self._clock(answer)
        return answer

    def _clock(self, answer) -> None:
        """S3's clock against this host's, from the Date of an answer (a second's resolution, so S3's now is read
        up to a second early: a version is only ever held longer)."""
        date = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        try:
            self._skew = parsedate_to_datetime(date).timestamp() - time.time()
        except (TypeError, ValueError):
            pass

    def error(self, e, what: str) -> Exception:
        err = e.response.get("Error", {})
        code, status = str(err.get("Code", "")), e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code == "NoSuchBucket" or (status == 404 and what == "the bucket"):
            return RepositoryError(f"{self.url}: no bucket '{self.location.bucket}' there (INR_MODELS / --models)")
        if code in ("NoSuchKey", "404", "NotFound"):
            return FileNotFoundError(f"{what} is not in {self.url} (deleted while it was read?)")
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403") or status == 403:
            return RepositoryError(
                f"{self.url}: S3 refused the credentials ({code or status}) reading {what}: check AWS_ACCESS_KEY_ID "
                "and AWS_SECRET_ACCESS_KEY"
            )
        return StorageUnavailable(f"{self.url}: S3 answered {status} {code} reading {what}")

    def check(self) -> None:
        """At a start: the bucket is there and the credentials work (RepositoryError), S3 answers
        (StorageUnavailable)."""
        self.call("HEAD", "head_bucket", "the bucket")
        self.call("LIST", "list_objects_v2", "the bucket", Prefix=self.location.prefix, MaxKeys=1)

    # -- the index --------------------------------------------------------------------------------------
    def _list(self, prefix: str) -> dict[str, ModelIndex]:
        """The index of the models under `prefix`: the whole repository's in ranges side by side, one model's (its
        prefix 'NAME/') in one go (modelrepo/s3listing.py)."""
        last = dict(self.index) if self.index else None  # a copy: a request's relist (`model`) may add to it
        if prefix == self.location.prefix:
            index = list_all(self, prefix, last)
        else:
            index = build_index(list_range(self, prefix)[0], len(self.location.prefix))
        self.settler.settle(index, last, time.time() + self._skew)
        return index

    def scan(self) -> dict[str, Path]:
        """The models with a published version, name → mirror folder. A listing that fails keeps the last one (at a
        start: the mirror's), so a stopped S3 unlists nothing."""
        try:
            index = self._list(self.location.prefix)
        except StorageUnavailable as e:
            if self.index is None:
                self.index = self._index_from_mirror()
                log.warning("%s; serving the %d models of the disk cache %s", e, len(self.index), self.root)
            else:
                log.warning("%s; the last listing stands", e)
            index = self.index
        self.index = index
        return {n: self.root / n for n, m in sorted(index.items()) if m.published}

    def _index_from_mirror(self) -> dict[str, ModelIndex]:
        found = {}
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir() and NAME_RE.match(p.name)):
            manifest = self.manifests.of(folder.name)
            files = {rel: (etag, _size(folder / rel)) for rel, (etag, _) in manifest.items()}
            published = tuple(sorted({int(r.split("/")[0]) for r in files if r.split("/")[0].isdigit()}))
            found[folder.name] = ModelIndex(files, published)
        return found

    def model(self, name: str, relist: bool = False) -> ModelIndex | None:
        if self.index is None:
            self.scan()
        if relist and NAME_RE.match(name):
            self.index.update(self._list(self.location.key(name) + "/") or {name: ModelIndex()})
        found = self.index.get(name)
        return found if found is not None and found.published else None

    def stamp(self, name: str) -> tuple:
        m = self.model(name)
        return m.stamp() if m else ()

    def version_stamp(self, name: str, version: int) -> tuple:
        m = self.model(name)
        files = m.files if m else {}
        return tuple(files.get(f"{version}/{f}") for f in ("model.onnx", "metadata.json", "body.onnx"))

    def task_of(self, name: str) -> str | None:
        if self.model(name, relist=True) is None:
            return None
        path = self.folder(name)
        return json.loads((path / "metadata.json").read_text()).get("task") if path else None

    # -- the mirror -------------------------------------------------------------------------------------
    def _lock_of(self, key: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(key, threading.Lock())

    def _forget(self, path: Path) -> None:
        rel = path.relative_to(self.root).as_posix()
        name, _, rel = rel.partition("/")
        with self._lock_of(name):
            if self.manifests.of(name).pop(rel, None) is not None:
                self.manifests.save(name)

    def folder(self, name: str) -> Path | None:
        """The model's mirror with its small files current: those whose ETag changed fetched, those gone removed.
        None when the listing has no such model."""
        m = self.model(name)
        if m is None:
            return None
        with self._lock_of(name):
            mirror, manifest = self.root / name, self.manifests.of(name)
            stale = [
                (rel, size)
                for rel, (etag, size) in m.files.items()
                if not is_large(rel) and not self.manifests.current(name, rel, etag)
            ]
            if stale:  # room for them, and for the model's folders and ETags, within the budget
                self.budget.make_room(sum(on_disk(size) for _, size in stale) + 3 * BLOCK)
            mirror.mkdir(exist_ok=True)
            for rel, size in stale:
                self._download(name, rel, size)
            for rel in [r for r in manifest if r not in m.files]:
                (mirror / rel).unlink(missing_ok=True)
                del manifest[rel]
            for child in mirror.iterdir():
                if child.is_dir() and child.name.isdigit() and int(child.name) not in m.published:
                    shutil.rmtree(child, ignore_errors=True)
            for n in m.published:  # a version of large files alone (no N/metadata.json) is a folder there too
                (mirror / str(n)).mkdir(exist_ok=True)
            self.manifests.save(name)
        self.budget.note(mirror)
        return mirror

    def sync_file(self, name: str, rel: str) -> None:
        m = self.model(name)
        entry = m.files.get(rel) if m else None
        if entry is None:
            return
        with self._lock_of(name):
            if not self.manifests.current(name, rel, entry[0]):
                (self.root / name).mkdir(exist_ok=True)
                self._download(name, rel, entry[1])
                self.manifests.save(name)
                self.budget.note(self.root / name)

    def fetch(self, name: str, version: int, rel: str, sha256: str | None = None) -> Path:
        """`N/rel` of the model on local disk: from the mirror when its ETag is the listing's, else downloaded and
        checked against `sha256` (SpecError when it does not match: the file is not kept)."""
        key, path = f"{version}/{rel}", self.root / name / str(version) / rel
        m = self.model(name)
        if m is None or key not in m.files:
            m = self.model(name, relist=True)  # published since the last listing?
        if m is None or key not in m.files:
            raise SpecError(f"{key} is not in {self.url}/{name}: not published, or deleted")
        etag, size = m.files[key]
        with self._lock_of(f"{name}/{key}"):
            if self.manifests.current(name, key, etag, sha256):
                self._use(name, key, path)
                return path
            self.budget.check(f"{key} of model '{name}'", size)
            self.budget.make_room(size)
            self._download(name, key, size, sha256)
        with self._lock_of(name):
            self.manifests.save(name)
        self.budget.note(self.root / name)
        self._use(name, key, path)
        return path

    def _use(self, name: str, key: str, path: Path) -> None:
        """A large file used now: first out of the budget last, and remembered as checked (a touch changes its
        stat)."""
        self.budget.touch(path)
        entry = self.manifests.of(name).get(key)
        if entry is not None:
            try:
                self.manifests.remember(path, entry[1])
            except OSError:
                pass  # deleted for room meanwhile: the next use downloads it again

    def _download(self, name: str, rel: str, size: int, sha256: str | None = None) -> None:
        """GET one object into the mirror under a temporary name; renamed in only whole and, when given, with its
        sha256. Records its ETag in the model's manifest (saved by the caller)."""
        path = self.root / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".part-{secrets.token_hex(6)}")
        what = f"model '{name}' file {rel}"
        digest, got = hashlib.sha256(), 0
        try:
            answer = self.call("GET", "get_object", what, Key=self.location.key(name, rel))
            with open(tmp, "wb") as out:
                try:
                    for chunk in answer["Body"].iter_chunks(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        got += len(chunk)
                except Exception as e:  # noqa: BLE001 - the body stopped (S3 stopped, the connection reset)
                    raise StorageUnavailable(f"{self.url}: {what} stopped after {got} bytes ({e})") from None
            if got != answer.get("ContentLength", got):
                raise StorageUnavailable(f"{self.url}: {what} is truncated ({got} of {answer['ContentLength']} bytes)")
            if sha256 is not None and digest.hexdigest() != sha256:
                raise SpecError(
                    f"sha256 of {rel} from {self.url} ({digest.hexdigest()[:12]}…) does not match the sha256 its "
                    f"metadata records ({sha256[:12]}…): tampered or truncated; not kept"
                )
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        self.manifests.of(name)[rel] = (answer["ETag"].strip('"'), digest.hexdigest())
        self.manifests.remember(path, digest.hexdigest())

    # -- writing ----------------------------------------------------------------------------------------
    def write_version(self, name: str, spec, onnx_bytes: bytes, metadata: dict, extras=None, guard=None):
        return publish(self, name, spec, onnx_bytes, metadata, extras, guard)

    def sweep(self, grace_s: float) -> list[str]:
        return sweep(self, grace_s)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
