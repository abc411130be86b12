"""The served models: per model folder, the versions its version_policy selects, each a `ModelRuntime`.

A broken folder or version is listed as failed with its reason and never stops the others.
Hidden folders (a writer's `.NAME.tmp-*` while it writes) are skipped.

Two ways to start: `load_all` loads every version at once (`--model-loading startup`); `list_all` only lists the
folders (`on-demand`, the default): a model's spec and versions are read the first time it is asked for
(`describe`, no session), and a version is loaded when a request first needs it, under the memory budget
(`acquire`, service/engine/residency.py).

Thread and async safety: `load`, `unload` and `load_all` block (they build onnxruntime
sessions) and are meant for a worker thread (`run_in_threadpool`). Loads of one name are
serialized by a per-name lock; loads of different names run in parallel. The table of models
is an immutable mapping of immutable `ModelState`s, replaced in one assignment, so readers
(`get`, `ready_model`, `models`) never lock and never see half a swap.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from modelrepo import (
    NAME_RE,
    CacheTooSmall,
    LocalRepository,
    ModelSpec,
    Repository,
    SpecError,
    StorageUnavailable,
    read_access,
    read_spec,
    version_numbers,
)
from modelrepo.access import PUBLIC, RESTRICTED, Access
from modelrepo.autocomplete import needs_graph

from ..auth.caching import render_cache_control
from ..auth.policy import ANONYMOUS, Caller
from ..errors import ModelNotFound, ModelNotReady, NotLoaded, RepositoryUnavailable, WrongTask
from .runtime import ModelRuntime, RuntimeOptions
from .state import ModelState

if TYPE_CHECKING:
    from .residency import Residency
from .tasks import runtime_for

log = logging.getLogger(__name__)
Listener = Callable[["Registry", str, list[ModelRuntime]], None]  # (registry, model changed, versions dropped)


class Registry:
    """The model repository as served. See the module docstring for the concurrency rules."""

    def __init__(self, root: Path | Repository, options: RuntimeOptions, residency: Residency | None = None):
        self.repo = root if isinstance(root, Repository) else LocalRepository(root)  # a folder, or S3's mirror
        self.root = self.repo.root
        self.options = options
        self.residency = residency
        self.access_default = PUBLIC  # INR_ACCESS_DEFAULT: the policy of a model whose config.pbtxt names none
        self._access: dict[str, tuple[int | None, Access]] = {}  # listed models' policies (`access_of`)
        self.listing: dict[str, Path] | None = None  # on-demand: the folders listed, described when asked for
        self.stamps: dict[str, tuple] = {}  # each model's folder_stamp when it was last read (control.py's rescan)
        self._models: Mapping[str, ModelState] = {}
        self._swap = threading.Lock()  # guards the table's replacement
        self._name_locks: dict[str, threading.Lock] = {}
        self.listeners: list[Listener] = []  # called after every change, with the runtimes dropped
        self.loaded = False

    # -- reading (lock-free) ----------------------------------------------------------------------
    @property
    def models(self) -> Mapping[str, ModelState]:
        """The current table, name → ModelState (a snapshot: it never changes under the caller)."""
        return self._models

    def scan(self) -> dict[str, Path]:
        """The model folders in the repository now, name → path (served or not): modelrepo's Repository.scan (a
        folder's entries, or S3's paged listing)."""
        return self.repo.scan()

    def folder(self, name: str) -> Path:
        """The model's folder, current (S3: its small files fetched when they changed); 404 when there is none, 503
        when S3 does not answer for a model not on local disk."""
        try:
            path = self.repo.folder(name) if NAME_RE.match(name) else None
        except StorageUnavailable as e:
            raise RepositoryUnavailable(f"model '{name}': {e}") from None
        if path is None or not path.is_dir():
            raise ModelNotFound(name, self.public(self.names()))
        return path

    def discover(self) -> list[Path]:
        return list(self.scan().values())

    def names(self) -> list[str]:
        """Every model served or listed, sorted."""
        return sorted(set(self.listing or ()) | set(self._models))

    def names_for(self, caller: Caller, names: Iterable[str] | None = None, limit: int | None = None) -> list[str]:
        """The names `caller` may see, sorted, at most `limit`: a restricted model is not listed to someone who may
        not read it."""
        default, out = self.access_default, []
        for n in self.names() if names is None else sorted(names):
            if limit is not None and len(out) >= limit:
                break
            try:
                access = self.access_of(n) or Access(RESTRICTED)
            except RepositoryUnavailable:  # a policy S3 cannot give now: not listed (closed)
                access = Access(RESTRICTED)
            if caller.may_read(n, access, default):
                out.append(n)
        return out

    def public(self, names: Iterable[str]) -> list[str]:
        """The names anyone may see (what an error that lists models shows)."""
        return self.names_for(ANONYMOUS, names)

    def access_of(self, name: str) -> Access | None:
        """The model's access policy (modelrepo/access.py); None for a name that is no model. Read from its
        config.pbtxt alone (`read_access`) and remembered while the file's stat is unchanged: one stat a request, so
        that a policy edited in place (an editor saving over the file) holds from the next request, in every model
        control mode. A config.pbtxt that does not parse counts as restricted: the model fails at its load anyway."""
        if not NAME_RE.match(name):
            return None  # no model has this name; never a path out of the repository
        state = self._models.get(name)
        path = self.repo.path(name)  # a folder of the model's repository (modelrepo/union.py: one of several)
        if self.repo.remote:
            try:  # the policy is in config.pbtxt: fetched when it changed; never guessed while S3 does not answer
                self.repo.sync_file(name, "config.pbtxt")
            except StorageUnavailable as e:
                raise RepositoryUnavailable(f"model '{name}': its access policy is not on local disk: {e}") from None
        try:
            st = os.stat(path / "config.pbtxt")
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = None
            if state is not None and state.spec is not None:
                return state.spec.access  # its folder removed, not unloaded yet: as it was served
            if state is None and (self.listing is None or name not in self.listing):
                return None  # no such model (or not one this server could read)
        known = self._access.get(name)
        if known is not None and known[0] == stamp:
            return known[1]
        try:
            access = read_access(path)
        except SpecError:
            access = Access(RESTRICTED)
        self._access[name] = (stamp, access)
        return access

    def restricted(self, name: str) -> bool:
        """Whether model `name` is restricted now (its policy, else the server's default; an unknown name: no)."""
        return (self.access_of(name) or Access()).effective(self.access_default) == RESTRICTED

    def caching(self, name: str, pinned: bool, max_age: int) -> str:
        """The Cache-Control of a render or tile of model `name` (service/auth/caching.py): private when restricted."""
        return render_cache_control(self.restricted(name), pinned, max_age)

    def resident_names(self) -> set[str]:
        """The models with a version in memory now (the residency's table; every loaded one when there is none)."""
        if self.residency is not None:
            return {runtime.name for runtime in self.residency.resident_now()}
        return {name for name, state in self._models.items() if any(v.resident for v in state.versions)}

    def get(self, name: str) -> ModelState:
        """The model's state; a listed one is described now (its spec and versions read, no session)."""
        if not self.loaded:
            raise NotLoaded("models are still loading")
        state = self._models.get(name)
        if state is None and self.listing is not None and name in self.listing:
            state = self.describe(name)
        if state is None:
            raise ModelNotFound(name, self.public(self.names()))
        return state

    # -- requests (on the event loop) -------------------------------------------------------------
    async def acquire(
        self, name: str, task: str, action: str, version: int | None = None, timeout: float | None = None
    ) -> ModelRuntime:
        """`ready_model`, loaded and held for a request until `release` (service/engine/residency.py)."""
        return await self.acquire_runtime(self.ready_model(name, task, action, version), timeout)

    async def acquire_runtime(self, model: ModelRuntime, timeout: float | None = None) -> ModelRuntime:
        """The same for a version already looked up (V2 and gRPC resolve theirs)."""
        return model if self.residency is None else await self.residency.acquire(model, timeout)

    def release(self, model: ModelRuntime) -> None:
        if self.residency is not None:
            self.residency.release(model)

    def runtime(self, name: str, version: int | None = None) -> ModelRuntime:
        """Version `version` of the model, or its highest ready version; ready, else 503 / 404."""
        state = self.get(name)
        if version is None:
            if state.serving is None:
                raise ModelNotReady(name, state.status, state.reason)
            return state.serving
        model = state.known_version(version)
        if not model.ready:
            raise ModelNotReady(name, f"{model.status} in version {version}", model.error)
        return model

    def ready_model(self, name: str, task: str, action: str, version: int | None = None) -> ModelRuntime:
        """The named model's serving (or given) version, ready and of `task`; `action` names the endpoint."""
        state = self.get(name)
        if state.task is not None and state.task != task:
            raise WrongTask(name, state.task, task, action)
        model = self.runtime(name, version)
        if model.task != task:
            raise WrongTask(name, model.task, task, action)
        return model

    # -- changing (blocking: call from a worker thread) ---------------------------------------------
    def list_all(self) -> None:
        """On-demand start: list the model folders; nothing is read or loaded until asked for."""
        self.listing = self.scan()
        self.loaded = True
        log.info("models: %d listed in %s, each loaded on first use", len(self.listing), self.root)

    def describe(self, name: str) -> ModelState:
        """Read a listed model's spec and versions, with no session (blocking: a few milliseconds)."""
        with self._lock(name):
            state = self._models.get(name)
            if state is None:
                path = self.folder(name)
                stamp = self.repo.stamp(name)
                state = self._build(name, path, None, load=False)
                self._set(name, state, None, stamp)
            return state

    def load_all(self, names: Iterable[str] | None = None) -> None:
        """Load every model folder (or the given names). DeviceError propagates (start-up must fail)."""
        for name in self.scan() if names is None else names:
            self.load(name)
        self.loaded = True
        ready = sum(m.ready for m in self._models.values())
        log.info("models: %d ready, %d failed, from %s", ready, len(self._models) - ready, self.root)

    def load(self, name: str, load: bool = True) -> ModelState:
        """(Re)load model `name` from its folder and return its new state.

        New versions are built beside the serving ones and the table is swapped only once they
        are loaded: a version whose files (N/model.onnx, N/metadata.json) are unchanged since it was
        built is kept as it is, ready or failed (so a poll does not retry a broken one); versions no
        longer selected by version_policy (or whose folder is gone) are dropped; if no selected
        version becomes ready, the versions that served before and whose folders still exist keep
        serving and the failure is visible in `versions` / `error`. Requests already holding a
        runtime finish on it. Raises ModelNotFound when there is no such folder. Two loads of one
        name run one after the other. `load=False` (on-demand): new versions are described, not loaded.
        """
        if not NAME_RE.match(name):
            raise ModelNotFound(name, self.public(self.scan()))
        with self._lock(name):
            old = self._models.get(name)
            path = self.folder(name)
            stamp = self.repo.stamp(name)
            state = self._build(name, path, old, load)
            self._set(name, state, old, stamp)
            return state

    def unload(self, name: str) -> None:
        """Stop serving `name`. Requests already running on it finish; new ones get 404.
        Raises ModelNotFound when it is not loaded."""
        with self._lock(name):
            old = self._models.get(name)
            if old is None:
                raise ModelNotFound(name, self.public(self._models))
            self._set(name, None, old)

    # -- internals --------------------------------------------------------------------------------
    def _lock(self, name: str) -> threading.Lock:
        with self._swap:
            return self._name_locks.setdefault(name, threading.Lock())

    def _build(self, name: str, path: Path, old: ModelState | None, load: bool = True) -> ModelState:
        previous = [v for v in (old.versions if old else ()) if v.ready and v.version_dir.is_dir()]
        try:
            if self.repo.remote and needs_graph(path):  # a config completed from the graph: the graph from S3 first
                self._fetch_graph(name, path)
            spec = read_spec(path)
        except SpecError as e:
            log.warning("model %s: failed: %s", name, e)
            return ModelState(name, path, old.spec if previous else None, tuple(previous), str(e))
        wanted = spec.version_policy.select(version_numbers(path))
        if not wanted:
            error = (
                f"no version folder N/model.onnx that version_policy {spec.version_policy.describe()} selects"
                if version_numbers(path)
                else "no version folder (N/model.onnx)"
            )
            return ModelState(name, path, spec if not previous else old.spec, tuple(previous), error)
        versions = [self._version(path, spec, n, old, load) for n in wanted]
        if not any(v.ready for v in versions) and previous:
            kept = {v.version for v in versions}
            versions = sorted([*versions, *(v for v in previous if v.version not in kept)], key=lambda v: v.version)
            return ModelState(
                name, path, old.spec, tuple(versions), "no new version became ready; the previous ones keep serving"
            )
        return ModelState(name, path, spec, tuple(versions))

    def _fetch_graph(self, name: str, path: Path) -> None:
        """The highest version's model.onnx of a model on S3 into its mirror (modelrepo/autocomplete.py reads it)."""
        versions = version_numbers(path)
        if not versions:
            return  # read_spec says there is none
        try:
            self.repo.fetch(name, versions[-1], "model.onnx", None)
        except StorageUnavailable as e:
            raise RepositoryUnavailable(f"model '{name}': {e}") from None
        except (CacheTooSmall, OSError) as e:
            raise SpecError(f"version {versions[-1]}'s model.onnx, to complete config.pbtxt from: {e}") from None

    def _version(self, path: Path, spec: ModelSpec, n: int, old: ModelState | None, load: bool) -> ModelRuntime:
        current = old.version(n) if old else None
        if current is not None and current.spec == spec and current.stamp == current.files_stamp():
            return current  # nothing changed on disk: keep it, ready or failed (a poll never re-tries a broken one)
        runtime = runtime_for(path, spec, n, self.options)
        if not load:
            runtime.describe()
        elif self.residency is not None:
            self.residency.load_now(runtime)  # measured, and counted in the budget
        else:
            runtime.load()
        return runtime

    def _set(self, name: str, state: ModelState | None, old: ModelState | None, stamp: tuple = ()) -> None:
        with self._swap:
            table = dict(self._models)
            if state is None:
                table.pop(name, None)
                self.stamps.pop(name, None)
            else:
                table[name] = state
                self.stamps[name] = stamp
            self._models = table
        keep = {id(v) for v in (state.versions if state else ())}
        dropped = [v for v in (old.versions if old else ()) if id(v) not in keep]
        for v in dropped:
            v.retired = True
            if self.residency is not None:
                self.residency.forget(v)
        for listener in list(self.listeners):
            try:
                listener(self, name, dropped)
            except Exception:  # noqa: BLE001 - a listener must not break a swap
                log.exception("registry listener failed")
