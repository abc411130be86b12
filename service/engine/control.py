"""Model control, with Triton's modes and meanings (`--model-control-mode`).

* `none`: every model folder is loaded at start; later changes to the repository are ignored, and
  load / unload requests are refused (400).
* `poll`: the same start, then a background task scans the repository every
  `--repository-poll-secs` and loads new models and versions, reloads changed ones and unloads
  removed ones. Load / unload requests are refused (400), as in Triton.
* `explicit`: only the `--load-model` names are loaded at start (`*` = all); afterwards models are
  loaded, reloaded and unloaded by `POST /v2/repository/models/NAME/load|unload`.

With `--model-loading on-demand` (the default) "loaded at start" in `none` and `poll` means listed: each model is
read when first asked for and holds a session from its first request (residency.py); `explicit` loads as told.

Loads run in worker threads, never on the event loop. A reload goes through `Registry.load`,
which builds the new versions beside the serving ones and swaps only once they are ready; a
broken new version leaves the old one serving, and the failure shows in the index
(`POST /v2/repository/index`). Requests already running on an old version finish on it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from starlette.concurrency import run_in_threadpool

from telemetry import tracing

from ..auth.policy import ANONYMOUS, Caller
from ..errors import BadInput, ModelNotFound
from .registry import ModelState, Registry

log = logging.getLogger(__name__)
Fingerprint = tuple[tuple[str, int, int], ...]
NOT_RESIDENT = "not resident: loads on first use"  # the reason of a READY version with no session (on-demand)


def fingerprint(folder: Path) -> Fingerprint:
    """What a model folder holds now: (relative path, size, mtime) of each file, hidden entries
    (a writer's temporary folders) skipped. Any change to a file changes it."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            if f.startswith("."):
                continue
            path = Path(root) / f
            try:
                st = path.stat()
            except OSError:  # removed while we looked: the next scan sees the rest
                continue
            found.append((str(path.relative_to(folder)), st.st_size, st.st_mtime_ns))
    return tuple(found)


def failures(state: ModelState) -> str:
    """What failed in a model's last load: each failed version's reason, then the model's own."""
    parts = [f"version {v.version}: {v.error}" for v in state.versions if not v.ready]
    return "; ".join(parts + ([state.error] if state.error else []))


def index_entries(name: str, state: ModelState | None, loading: bool) -> list[dict]:
    """A model's rows in Triton's repository index: one per loaded version, else one for the model."""
    if loading:
        return [{"name": name, "state": "LOADING", "reason": ""}]
    if state is None:
        return [{"name": name, "state": "UNAVAILABLE", "reason": "unloaded"}]
    if not state.versions:
        return [{"name": name, "state": "UNAVAILABLE", "reason": state.reason or "not loaded"}]
    rows = [
        {
            "name": name,
            "version": str(v.version),
            "state": "READY" if v.ready else "UNAVAILABLE",
            "reason": (NOT_RESIDENT if not v.resident else "") if v.ready else (v.error or ""),
        }
        for v in state.versions
    ]
    if state.error:  # e.g. a new spec that does not parse, while older versions keep serving
        rows.append({"name": name, "state": "UNAVAILABLE", "reason": state.error})
    return rows


class ModelControl:
    """Starts the models for the mode, runs the poll task, and answers the repository API."""

    def __init__(
        self,
        registry: Registry,
        mode: str,
        poll_secs: float = 15.0,
        startup: list[str] | None = None,
        on_demand: bool = False,
        pinned: list[str] | None = None,
    ):
        self.registry, self.mode, self.poll_secs = registry, mode, poll_secs
        self.startup = list(startup or [])
        self.on_demand = on_demand and mode != "explicit"  # explicit mode loads what it is told, on demand never
        self.pinned = list(pinned or [])
        self.seen: dict[str, Fingerprint] = {}  # what each folder held at its last load (or attempt)
        self.loading: set[str] = set()  # names with a load under way (shown as LOADING)
        self.task: asyncio.Task | None = None

    # -- start and stop ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the start-up models (blocking start-up, as Triton does), then start polling."""
        names = None
        if self.mode == "explicit":
            names = list(self.registry.scan()) if self.startup == ["*"] else self.startup
        await run_in_threadpool(self._load_startup, names)
        if self.mode == "poll":
            self.task = asyncio.get_running_loop().create_task(self._poll_forever(), name="repository-poll")

    def _load_startup(self, names: list[str] | None) -> None:
        if self.on_demand:  # listed now, each loaded on first use (service/engine/residency.py)
            self.registry.list_all()
            self._load_pinned()
            return
        folders = self.registry.scan()
        for name in [n for n in (names or []) if n not in folders]:
            log.error("--load-model %s: no such model folder in %s", name, self.registry.root)
        wanted = list(folders) if names is None else [n for n in names if n in folders]
        before = {n: self._fingerprint(n) for n in wanted}  # taken first: a change during the load shows
        self.registry.load_all(wanted)
        self.seen.update({n: f for n, f in before.items() if n in self.registry.models})
        self._load_pinned()

    def _load_pinned(self) -> None:
        """--pin-model: each pinned model's serving version loaded now (never unloaded: residency.py)."""
        for name in self.pinned:
            listed = self.registry.listing is not None or name in self.registry.models
            state = self.registry.get(name) if listed else self.registry.load(name)
            serving = state.serving
            if serving is not None and not serving.resident and self.registry.residency is not None:
                self.registry.residency.load_now(serving)
            if serving is None or not serving.resident:
                log.warning("--pin-model %s: %s", name, serving.error if serving else state.reason)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None

    # -- poll mode --------------------------------------------------------------------------------
    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.poll_secs)
            try:
                await run_in_threadpool(self.poll_once)
            except Exception:  # noqa: BLE001 - one bad scan must not end polling
                log.exception("repository poll failed; trying again in %.3g s", self.poll_secs)

    def poll_once(self) -> list[str]:
        """One scan (blocking): load new or changed folders, unload removed ones; the names changed."""
        if not self.registry.repo.remote and not self.registry.root.is_dir():  # unmounted for a moment? unloading
            # everything would be worse
            log.warning("repository %s is not a directory; nothing changed", self.registry.root)
            return []
        if self.registry.listing is not None:
            return self._rescan_listed()
        folders = self.registry.scan()
        changed = []
        for name in [n for n in self.registry.models if n not in folders]:
            log.info("model %s: folder removed from the repository; unloading", name)
            self._unload(name)
            changed.append(name)
        for name in folders:
            now = self._fingerprint(name)
            if self.seen.get(name) == now and name in self.registry.models:
                continue
            log.info(
                "model %s: %s in the repository; loading", name, "changed" if name in self.registry.models else "new"
            )
            try:
                self._load(name, now)
            except Exception:  # noqa: BLE001 - e.g. removed between scan and load; the next scan sees it
                log.exception("model %s: load failed", name)
            changed.append(name)
        return changed

    def _rescan_listed(self) -> list[str]:
        """On-demand: list the folders again; forget removed models, read new ones, and read again each model
        already read whose folder changed (folder_unchanged: one stat for a model not in memory, a few for one in
        memory, nothing for one never asked for). A changed model with a version in memory is loaded again at once, so
        that requests do not pay for it."""
        registry, changed = self.registry, []
        names = registry.scan()
        for name in sorted((registry.listing.keys() | registry.models.keys()) - names.keys()):
            log.info("model %s: folder removed from the repository; unloading", name)
            registry.listing.pop(name, None)
            if name in registry.models:
                self._unload(name)
            changed.append(name)
        for name in sorted(names.keys() - registry.listing.keys()):
            log.info("model %s: new in the repository; read, loaded on first use", name)
            registry.listing[name] = names[name]
            try:  # read now (a few milliseconds): a version a fit wrote is served from here (served_span)
                self._load(name, None, load=False)
            except Exception:  # noqa: BLE001 - e.g. removed again; the next scan sees it
                log.exception("model %s: could not be read", name)
            changed.append(name)
        in_memory, stamps = registry.resident_names(), registry.stamps
        moved = []
        with registry.repo.changes() as differs:  # a folder: stats; S3: the listing just taken
            for name in registry.models:
                # a model in memory has its files checked whole: a changed one is loaded again at once
                if name in names and differs(name, stamps.get(name, ()), name in in_memory):
                    moved.append(name)
        for name in moved:
            resident = name in in_memory
            log.info("model %s: changed in the repository; %s", name, "loading" if resident else "read again")
            try:
                self._load(name, None, load=resident)
            except Exception:  # noqa: BLE001 - e.g. removed between scan and load; the next scan sees it
                log.exception("model %s: load failed", name)
            changed.append(name)
        return changed

    # -- the repository API -----------------------------------------------------------------------
    def _explicit_only(self, action: str) -> None:
        if self.mode != "explicit":
            raise BadInput(
                f"{action} requests are refused in model control mode '{self.mode}': start the "
                "server with --model-control-mode explicit (INR_MODEL_CONTROL_MODE)"
            )

    async def load(self, name: str) -> ModelState:
        """Load or reload `name` (explicit mode). 404 for no such folder; 400 when nothing of it is ready."""
        self._explicit_only("load")
        state = await run_in_threadpool(self._load, name, None)
        if not state.ready:
            raise BadInput(f"failed to load '{name}': {failures(state)}")
        if failures(state):  # ready, but a version failed: e.g. a broken new one beside the old
            raise BadInput(
                f"model '{name}' loaded with failures ({failures(state)}); serving version {state.serving.version}"
            )
        return state

    async def unload(self, name: str) -> None:
        """Stop serving `name` (explicit mode); requests already running on it finish. 404 if not loaded."""
        self._explicit_only("unload")
        await run_in_threadpool(self._unload, name)

    def index(
        self, ready_only: bool = False, limit: int | None = None, after: str = "", caller: Caller = ANONYMOUS
    ) -> list[dict]:
        """Triton's repository index: every model in the repository or loaded, with its state, by name; with
        `limit`, the first `limit` models after `after` (a page). Blocking (it lists the repository, and reads
        the models on the page not yet read): call it from a worker thread."""
        listed = self.registry.listing is not None
        names = sorted(set(self.registry.scan()) | set(self.registry.models) | self.loading)
        names = self.registry.names_for(caller, (n for n in names if n > after), limit)
        rows = []
        for n in names:
            state = self.registry.models.get(n)
            if state is None and listed and n not in self.loading:
                try:
                    state = self.registry.get(n)
                except ModelNotFound:
                    continue
            rows.extend(index_entries(n, state, n in self.loading))
        return [r for r in rows if r["state"] == "READY"] if ready_only else rows

    # -- blocking helpers (worker threads) --------------------------------------------------------
    def _load(self, name: str, now: Fingerprint | None, load: bool = True) -> ModelState:
        """Traced as `inr.model.load` (a child of the repository API's request, or a root span for a poll);
        a version a fit wrote starts serving in the fit's own trace (served_span)."""
        self.loading.add(name)
        try:
            with tracing.span("inr.model.load", attributes={"inr.model": name}):
                before = self.registry.models.get(name)
                before = before.serving if before is not None else None
                now = now if now is not None else self._fingerprint(name)
                state = self.registry.load(name, load)
                self.seen[name] = now
                if failures(state):
                    log.warning("model %s: %s", name, failures(state))
                serving = state.serving
                if tracing.ON and serving is not None and (before is None or serving.version != before.version):
                    served_span(state)
                return state
        finally:
            self.loading.discard(name)

    def _fingerprint(self, name: str) -> Fingerprint | tuple:
        """What the model holds now: its files' sizes and times in a folder, their ETags on S3 (the listing)."""
        repo = self.registry.repo
        return repo.stamp(name) if repo.remote else fingerprint(repo.path(name))

    def _unload(self, name: str) -> None:
        if name not in self.registry.models and name in self.registry.scan():
            return  # a model folder that is not loaded: already unloaded, as Triton answers
        with tracing.span("inr.model.unload", attributes={"inr.model": name}):
            self.registry.unload(name)
        self.seen.pop(name, None)


def served_span(state: ModelState) -> None:
    """`inr.fit.served`, in the trace of the fit that wrote the version now serving (its metadata's
    `source.traceparent`, modelrepo's fit job record): the trace runs from the upload to the served version.
    It links to the load that started serving it."""
    from opentelemetry import trace
    from opentelemetry.trace import Link

    serving = state.serving
    source = serving.metadata.get("source")
    parent = tracing.parent_from(source.get("traceparent")) if isinstance(source, dict) else None
    if parent is None:
        return
    load = trace.get_current_span()  # inr.model.load: the served span covers the load
    span = tracing.tracer.start_span(
        "inr.fit.served",
        context=parent,
        links=[Link(load.get_span_context())],
        start_time=getattr(load, "start_time", None),
        attributes={
            "inr.model": state.name,
            "inr.model.version": serving.version,
            "inr.fit.job": source.get("job", ""),
        },
    )
    span.end()
