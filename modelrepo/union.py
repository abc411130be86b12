"""Several model repositories served as one, as Triton serves several `--model-repository` (modelrepo/open.py
`open_repository` with `more`): the service's `--models` and the folder fits are written into (INR_FIT_MODELS), so
the bundled models stay as git has them while fitted ones are served beside them.

Every model of every part is listed; a name in two parts is served from the first and the other is logged, once
(Triton refuses such a model; here the bundled one keeps serving, and the API refuses a fit into a name the fits'
folder does not hold: service/fits/jobs.py). Each call on a model goes to the part that holds it; a version is
written into the last part, the fits' folder.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack, contextmanager
from pathlib import Path

from .repository import Repository

log = logging.getLogger(__name__)


class UnionRepository(Repository):
    def __init__(self, parts: list[Repository]):
        if not parts or any(p.remote for p in parts):
            raise ValueError("a union of repositories takes local folders")
        self.parts = parts
        self.root = parts[0].root  # the first part's: what logs name
        self.url = " + ".join(p.url for p in parts)
        self._where: dict[str, Repository] = {}  # name → its part, at the last scan
        self._shadowed: set[tuple[str, str]] = set()

    def scan(self) -> dict[str, Path]:
        found: dict[str, Path] = {}
        where: dict[str, Repository] = {}
        for part in self.parts:
            for name, path in part.scan().items():
                if name not in found:
                    found[name], where[name] = path, part
                elif (name, part.url) not in self._shadowed:
                    self._shadowed.add((name, part.url))
                    log.warning("model '%s' is in %s and in %s: served from %s", name, where[name].url, part.url,
                                where[name].url)  # fmt: skip
        self._where = where
        return found

    def part(self, name: str) -> Repository:
        """The part that holds `name`: the last scan's, else the first that has its folder now, else the first."""
        known = self._where.get(name)
        if known is not None:
            return known
        return next((p for p in self.parts if p.folder(name) is not None), self.parts[0])

    @property
    def writable(self) -> Repository:
        return self.parts[-1]

    def folder(self, name: str) -> Path | None:
        return self.part(name).folder(name)

    def path(self, name: str) -> Path:
        return self._where.get(name, self.parts[0]).path(name)

    def stamp(self, name: str) -> tuple:
        return self.part(name).stamp(name)

    @contextmanager
    def changes(self):
        with ExitStack() as stack:
            differs = {id(p): stack.enter_context(p.changes()) for p in self.parts}
            yield lambda name, stamp, whole: differs[id(self.part(name))](name, stamp, whole)

    def version_stamp(self, name: str, version: int) -> tuple | None:
        return self.part(name).version_stamp(name, version)

    def fetch(self, name: str, version: int, rel: str, sha256: str | None = None) -> Path:
        return self.part(name).fetch(name, version, rel, sha256)

    def task_of(self, name: str) -> str | None:
        return self.part(name).task_of(name)

    def write_version(self, name: str, spec, onnx_bytes: bytes, metadata: dict, extras=None, guard=None):
        return self.writable.write_version(name, spec, onnx_bytes, metadata, extras, guard)
