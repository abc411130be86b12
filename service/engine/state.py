"""One model as served now (`ModelState`): its spec and its versions, listed, loaded or failed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from modelrepo import ModelSpec, folder_stamp, folder_unchanged  # noqa: F401 - re-exported

from ..errors import NotFound
from .runtime import ModelRuntime


@dataclass(frozen=True)
class ModelState:
    """One model as served now: its spec and its loaded versions (ready or failed), ascending.

    `error` is a model-level failure (unreadable spec, no version folder); when a reload fails,
    the versions that served before stay in `versions`, still ready, and `error` says why."""

    name: str
    path: Path
    spec: ModelSpec | None
    versions: tuple[ModelRuntime, ...] = ()
    error: str | None = None

    @property
    def serving(self) -> ModelRuntime | None:
        """The highest ready version (what /v1 and unversioned /v2 use)."""
        return next((v for v in reversed(self.versions) if v.ready), None)

    def version(self, n: int) -> ModelRuntime | None:
        return next((v for v in self.versions if v.version == n), None)

    def known_version(self, n: int) -> ModelRuntime:
        """Version `n`, loaded or not; 404 naming the versions there are."""
        model = self.version(n)
        if model is None:
            have = ", ".join(str(v.version) for v in self.versions) or "none"
            raise NotFound(f"unknown version {n} of model '{self.name}'; versions: {have}")
        return model

    @property
    def ready(self) -> bool:
        return self.serving is not None

    @property
    def status(self) -> str:
        return "ready" if self.ready else "failed"

    @property
    def reason(self) -> str | None:
        """Why the model (or its newest version) is not what is on disk; None when all is well."""
        if self.error:
            return self.error
        failed = [v for v in self.versions if not v.ready]
        return f"version {failed[-1].version}: {failed[-1].error}" if failed else None

    @property
    def task(self) -> str | None:
        return self.spec.task if self.spec else None

    @property
    def provider(self) -> str | None:
        return self.serving.provider if self.serving else None

    @property
    def metadata(self) -> dict:
        current = self.serving or (self.versions[-1] if self.versions else None)
        return current.metadata if current else (self.spec.to_json() if self.spec else {})
