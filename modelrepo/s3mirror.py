"""What the S3 mirror holds (modelrepo/s3.py), and the check of each file when it is used.

Each model's mirror folder has `.etags.json`: for each file, the ETag of the object it was downloaded from and the
sha256 it had then, signed with the cache folder's key (HMAC-SHA256, modelrepo/private_dir.py). A manifest whose
digest does not verify (planted, or written by an older version) counts as empty, so its files are downloaded
again. A file is current when its ETag is the listing's and its content still has the recorded sha256 (and the
contract's, when the caller gives it): checked at every use, and skipped only while its stat (ctime included,
which no one can set back) is the one it had when it last matched.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
from pathlib import Path

from .folder import sha256_file
from .private_dir import sign, verify
from .s3layout import MANIFEST

log = logging.getLogger(__name__)


class Manifests:
    def __init__(self, root: Path, key: bytes):
        self.root, self._key = root, key
        self._manifests: dict[str, dict[str, tuple[str, str]]] = {}  # name → rel → (ETag, sha256 when fetched)
        self._checked: dict[Path, tuple] = {}  # path → (its stat, its sha256) when it last matched

    def of(self, name: str) -> dict[str, tuple[str, str]]:
        """rel → (ETag, sha256) of the model's files in the mirror, as this user recorded them: a manifest whose
        keyed digest does not verify (planted, or left by an older version) counts as empty."""
        if name not in self._manifests:
            path, files = self.root / name / MANIFEST, {}
            try:
                saved = json.loads(path.read_text())
                text = json.dumps(saved["files"], sort_keys=True)
                if verify(self._key, saved.get("mac"), name, text):
                    files = {rel: (etag, sha) for rel, (etag, sha) in saved["files"].items()}
                else:
                    log.warning("model cache: %s was not written by this user (its digest does not verify)", path)
            except (OSError, ValueError, TypeError, KeyError, AttributeError):
                pass
            self._manifests[name] = files
        return self._manifests[name]

    def save(self, name: str) -> None:
        path = self.root / name / MANIFEST
        tmp = path.with_name(f"{MANIFEST}.{secrets.token_hex(4)}")
        text = json.dumps({rel: list(entry) for rel, entry in self.of(name).items()}, sort_keys=True)
        tmp.write_text(json.dumps({"files": json.loads(text), "mac": sign(self._key, name, text)}, sort_keys=True))
        os.replace(tmp, path)

    def current(self, name: str, rel: str, etag: str, sha256: str | None = None) -> bool:
        """Whether the mirror's `rel` is the listing's (its ETag) and its content the one recorded when it was
        downloaded (and `sha256`, the contract's, when given): checked at every use, by its stat when unchanged."""
        entry = self.of(name).get(rel)
        if entry is None or entry[0] != etag or (sha256 is not None and entry[1] != sha256):
            return False
        path = self.root / name / rel
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                return False
            seen = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if self._checked.get(path) == (seen, entry[1]):
                return True
            if sha256_file(path) == entry[1]:
                self._checked[path] = (seen, entry[1])
                return True
        except OSError:
            return False
        log.warning("model cache: %s is not the file downloaded (its sha256 differs); downloading it again", path)
        return False

    def remember(self, path: Path, sha256: str) -> None:
        """`path` as checked or written just now (its stat changed: a touch, a rename)."""
        st = os.lstat(path)
        self._checked[path] = ((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns), sha256)
