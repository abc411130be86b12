"""The ONNX model runtime (KServe style: `load()`, `ready`, `predict(ndarray)`).

One `ModelRuntime` per loaded *version* of a model. `load()` checks the version against the
model repository contract (modelrepo, docs/model-repository.md): its `N/metadata.json`, the
sha256 of `N/model.onnx` against the recorded one, and the ONNX graph's inputs and outputs
against the model's spec. A failure becomes `status="failed"` with the reason, once, at load;
the exception is a device that does not really run the model, which raises DeviceError.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnxruntime as ort

from modelrepo import (
    MODEL_FILE,
    ONNX_TO_V2,
    CacheTooSmall,
    ContractError,
    ImageSource,
    ModelSpec,
    Repository,
    SeparableStage,
    SpecError,
    StorageUnavailable,
    VersionRecord,
    check_onnx_geometry,
    check_version,
    read_version,
    sha256_file,
)
from modelrepo.autocomplete import check_external_data

from ..errors import ModelLoadError, ModelTooLargeForCache, RepositoryUnavailable
from ..metrics import Metrics
from .foreign import DTYPES, ForeignImage
from .lattice import Lattice, load_lattice
from .modelfile import ModelFile
from .runs import RUNS
from .separable import SeparableBody, load_separable
from .session_cache import SessionCache
from .sessions import CPU, device_session, session_options
from .split import Splitter
from .warmup import run_warmups

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimeOptions:
    device: str = "cpu"  # cpu | cuda | auto
    threads: int = 1  # intra-op threads per session
    render_threads: int = 0  # intra-op threads of the sessions render tiles run on; 0 = `threads`
    spin: bool = False  # let idle intra-op threads busy-wait (faster on dedicated cores only)
    session_cache: SessionCache | None = field(default=None, compare=False)  # optimised graphs on disk
    metrics: Metrics | None = field(default=None, compare=False)  # where every run is counted
    repository: Repository | None = field(default=None, compare=False)  # S3: version files fetched at the load
    splitter: Splitter | None = field(default=None, compare=False)  # large runs in pieces on every core (split.py)


class ModelRuntime:
    """One version of a model, served by one onnxruntime session.

    Listed from its files by `describe` (no session: `resident` is False) or loaded whole by `load`. A listed
    version is loaded, and a loaded one unloaded, only through the residency (service/engine/residency.py),
    which never unloads a version a request holds (`inflight`). A reload builds a new runtime beside it, and a
    request that holds this object finishes on it. `retired` is set when the registry stops serving it.
    """

    def __init__(self, path: Path, spec: ModelSpec, version: int, options: RuntimeOptions):
        self.path = Path(path)  # the model folder
        self.name = self.path.name
        self.spec = spec
        self.version = version
        self.options = options
        self.record: VersionRecord | None = None
        self._metadata: tuple | None = None
        self._identity: tuple | None = None
        self.status = "loading"
        self.error: str | None = None
        self.provider: str | None = None
        self.session: ort.InferenceSession | None = None
        self.render_session: ort.InferenceSession | None = None  # renders' tiles: see _render_sessions
        self.retired = False
        self.separable: SeparableBody | None = None
        self.lattice: Lattice | None = None  # a dense grid's tables and head: axis-aligned renders (lattice.py)
        self.splitter: Splitter | None = None  # an image model's large runs, in pieces side by side (split.py)
        self.stamp = self.files_stamp()  # what was on disk when this runtime was built
        self.bytes: int | None = None  # memory its sessions take, measured at a load (residency.py)
        self.bytes_quiet = False  # measured at a load that no session run overlapped (measure.py)
        self.load_peak: int | None = None  # the resident set's peak growth during that load (measure.py)
        self.inflight = 0  # requests holding it (residency.py)
        # an image network made elsewhere: its declared convention (service/engine/foreign.py); None for ours
        self.foreign = ForeignImage(spec) if spec.convention is not None else None
        # what every run is fed: float32 for our own models, a graph made elsewhere its own input's datatype
        self.input_dtype = DTYPES[spec.input.datatype] if spec.task == "generic" or self.foreign else np.float32

    @property
    def remote(self) -> bool:
        """Its files are a mirror of S3 (modelrepo/s3.py), fetched at the load."""
        return self.options.repository is not None and self.options.repository.remote

    def fetch(self, rel: str, sha256: str | None) -> Path:
        """The version's file `rel` on local disk (from S3 on first use). A storage that does not answer is a 503
        for the request (RepositoryUnavailable), a file larger than the whole disk cache a 507
        (ModelTooLargeForCache), never a failed version."""
        if not self.remote:
            return self.version_dir / rel
        try:
            return self.options.repository.fetch(self.name, self.version, rel, sha256)
        except StorageUnavailable as e:
            raise RepositoryUnavailable(f"model '{self.name}' version {self.version}: {e}") from None
        except CacheTooSmall as e:
            raise ModelTooLargeForCache(f"model '{self.name}' version {self.version}: {e}") from None
        except FileNotFoundError as e:
            raise ModelLoadError(f"{self.version}/{rel}: {e}") from None

    def files_stamp(self) -> tuple:
        """(mtime_ns, size) of N/model.onnx, N/metadata.json and the separable N/body.onnx now; None for
        a missing file. On S3: (ETag, size) of each, from the listing."""
        if self.remote:
            return self.options.repository.version_stamp(self.name, self.version)
        out = []
        for name in ("model.onnx", "metadata.json", "body.onnx"):
            try:
                st = (self.path / str(self.version) / name).stat()
                out.append((st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    def file_bytes(self) -> int:
        """Bytes of its ONNX files on disk (model.onnx and a separable body.onnx)."""
        return sum(st[1] for st in self.stamp[:1] + self.stamp[2:] if st is not None)

    def packed_bytes(self) -> int | None:
        """A dense grid's packed corner cells as its export recorded them (`export.tables.packed_bytes`): what its CPU
        session holds, whatever its file's coding (service/engine/shared_tables.py); None for another model."""
        tables = (self.metadata.get("export") or {}).get("tables") if self.record is not None else None
        packed = tables.get("packed_bytes") if isinstance(tables, dict) else None
        return packed if isinstance(packed, int) and packed > 0 else None

    @property
    def resident(self) -> bool:
        """It holds its sessions now (a listed version does not, until its first use)."""
        return self.session is not None

    @property
    def task(self) -> str:
        return self.spec.task

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    @property
    def max_batch_size(self) -> int:
        return self.spec.max_batch_size

    @property
    def metadata(self) -> dict:
        """The model's metadata.json with this version's metadata over it (what /v1/models shows); built
        once per (spec, record), not on every access."""
        cached = self._metadata
        if cached is None or cached[0] is not self.spec or cached[1] is not self.record:
            record = self.record.to_json() if self.record else {"version": self.version}
            merged = {**self.spec.to_json(), **record, "version": self.version}
            cached = self._metadata = (self.spec, self.record, merged)
        return cached[2]

    @property
    def identity(self) -> dict:
        """What identifies the version's function (the cache keys' part, service/engine/cache.py): its name, version
        and file digests, read from its metadata, so the same loaded or not (a load checks the files against them)."""
        cached = self._identity
        if cached is None or cached[0] is not self.record:
            body = stage = None
            entry = self.metadata.get("separable")
            if isinstance(entry, dict):
                try:
                    contract = SeparableStage.from_metadata(entry)
                    body, stage = contract.body_sha256, contract.stage_sha256
                except ContractError:
                    pass  # the load fails on it
            onnx = self.record.onnx_sha256 if self.record else None
            ident = {
                "model": self.name,
                "version": str(self.version),
                "onnx_sha256": onnx,
                "body_sha256": body,
                "stage_sha256": stage,
            }
            cached = self._identity = (self.record, ident)
        return cached[1]

    @property
    def image_size(self) -> tuple[int, int] | None:
        """The native pixel grid (W, H) an image model's version records (`source.native_size` or `source.size`,
        modelrepo.ImageSource); None when it records none (a square model)."""
        return ImageSource.from_metadata(self.metadata).native

    @property
    def version_dir(self) -> Path:
        return self.path / str(self.version)

    def load(self) -> bool:
        """Check and load the version; return `ready`. Never raises for a broken version folder."""
        try:
            self._load()
            self.status, self.error = "ready", None
            log.info("model %s version %d: ready (%s, %s)", self.name, self.version, self.task, self.provider)
        except (ModelLoadError, SpecError) as e:
            self.status, self.error = "failed", str(e)
            self.unload()
            log.warning("model %s version %d: failed: %s", self.name, self.version, e)
        return self.ready

    def describe(self) -> bool:
        """List the version from its metadata, with no session (loaded on first use); return `ready`. A version
        whose metadata cannot be read is failed; a broken ONNX file shows at its load."""
        try:
            self.record = read_version(self.path, self.version, need_file=not self.remote)
            self.status, self.error = "ready", None
        except (ModelLoadError, SpecError) as e:
            self.status, self.error = "failed", str(e)
            log.warning("model %s version %d: failed: %s", self.name, self.version, e)
        return self.ready

    def unload(self) -> None:
        """Drop the sessions (the residency's call, when no request holds it); the version stays listed."""
        self.session = self.render_session = self.separable = self.lattice = self.splitter = None

    def _load(self) -> None:
        self.record = read_version(self.path, self.version, need_file=not self.remote)
        self.fetch(MODEL_FILE, self.record.onnx_sha256 or None)
        try:
            onnx_path = check_version(self.path, self.record)
            if not self.record.onnx_sha256:  # made elsewhere, fetched from S3 now: its digest is its caches' key
                self.record = replace(self.record, onnx_sha256=sha256_file(onnx_path))
            check_external_data(onnx_path, self.path)
        except OSError as e:  # no permission, an I/O error on a bad disk or mount
            raise ModelLoadError(f"unreadable {self.version}/model.onnx: {e.strerror or e}") from None
        cached = None if self.options.session_cache is None else (self.options.session_cache, self.record.onnx_sha256)
        # decoded once, for the session and the lattice; a photo model's tables shared by both on the CPU
        source = ModelFile(onnx_path, share=self.task == "image")
        self.session = self._session(source, self.session_threads, cached)
        self._check_signature()
        if self.foreign is not None:  # a network made elsewhere: its declared size, and finite values
            self.foreign.check(self.session, self.name, self.version)
        elif self.task == "image":  # the graph's recorded geometry, when the export wrote one, is the version's
            try:
                check_onnx_geometry(
                    ImageSource.from_metadata(self.record.metadata),
                    self.session.get_modelmeta().custom_metadata_map,
                    self.version,
                )
            except ContractError as e:
                raise ModelLoadError(str(e)) from None
        self._render_sessions(onnx_path, source)
        if getattr(self.session, "shared_tables", None) is not None and self.lattice is None:
            # the session on shared tables disagrees with the lattice on them: a defect, so the plain session serves
            log.warning("model %s version %d: shared tables disagree; loading it unshared", self.name, self.version)
            source = ModelFile(onnx_path, share=False)
            self.session = self._session(source, self.session_threads, cached)
            self._render_sessions(onnx_path, source)
        if self.task == "image" and self.provider == CPU and self.session_threads == 1:
            self.splitter = self.options.splitter
        # config.pbtxt model_warmup: not ready until it has run (service/engine/warmup.py)
        self.warmup_seconds = run_warmups(self.session, self.spec, self.path, self.version)

    @property
    def session_threads(self) -> int:
        """Intra-op threads of the session: an image model's one session runs its queries and its render tiles on
        `render_threads` (the render workers run tiles side by side, and a one-thread session has no fork and join
        per node), other models on `threads`. A large query of an image model still takes `threads` cores: its
        rows run in pieces side by side (`options.splitter`, service/engine/split.py)."""
        if self.task == "image":
            return self.options.render_threads or self.options.threads
        return self.options.threads

    def _render_sessions(self, onnx_path: Path, source: ModelFile) -> None:
        """The sessions render tiles run on: the model's own, and for a separable model its body graph
        (service/engine/separable.py), which serves only renders."""
        threads = self.session_threads
        # the body graph for separable renders; None = render the plain way
        entry = self.metadata.get("separable")
        if self.remote and isinstance(entry, dict):  # its body graph, from S3 (load_separable checks it)
            try:
                contract = SeparableStage.from_metadata(entry)
                self.fetch(contract.body, contract.body_sha256)
            except ContractError:
                pass  # load_separable says what is wrong
        self.separable = load_separable(entry, onnx_path.parent, lambda path: self._session(path, threads))
        self.render_session = self.session
        self.lattice = self._lattice(source, threads)

    def _lattice(self, onnx_path: ModelFile, threads: int) -> Lattice | None:
        """A dense grid model's lattice (service/engine/lattice.py) on a CPU session; None for any other model, and
        for one whose lattice cannot be read (it renders the plain way)."""
        if self.task != "image" or self.provider != CPU or self.foreign is not None:
            return None
        opts = session_options(threads, self.options.spin)
        # the head's activations are bounded by a lattice tile: its own arena keeps them, instead of the heap
        # (where tiles of every size, freed in between, left the resident set ~150 MiB higher under 4 clients)
        opts.enable_cpu_mem_arena = True
        try:
            return load_lattice(
                onnx_path, lambda head: ort.InferenceSession(head, opts, providers=[CPU]), self.session, self.name
            )
        except Exception as e:  # the optional fast path never fails a load: the plain path serves the model
            log.warning("model %s version %d: no lattice renders: %s", self.name, self.version, e)
            return None

    def _session(self, onnx_path: Path, threads: int | None = None, cached=None) -> ort.InferenceSession:
        return device_session(
            onnx_path, self.options.device, threads or self.options.threads, self.options.spin, self.name, cached
        )

    def _check_signature(self) -> None:
        """The graph's inputs and outputs must be the spec's: same names, datatypes and shapes."""
        for kind, declared, found in (
            ("inputs", self.spec.inputs, self.session.get_inputs()),
            ("outputs", self.spec.outputs, self.session.get_outputs()),
        ):
            have = {t.name: (ONNX_TO_V2.get(t.type, t.type), _dims(t.shape)) for t in found}
            for t in declared:
                got = have.get(t.name)
                if got is None or got[0] != t.datatype or not _shape_matches(got[1], t.shape):
                    raise ModelLoadError(
                        f"the ONNX graph of version {self.version} disagrees with the spec: {kind} "
                        f"{[(n, d, list(s)) for n, (d, s) in have.items()]}, the spec says "
                        f"{[(x.name, x.datatype, list(x.shape)) for x in declared]}"
                    )
            if kind == "inputs" and len(have) != len(declared):
                raise ModelLoadError(
                    f"the ONNX graph of version {self.version} takes inputs {list(have)}; "
                    f"the spec says {[x.name for x in declared]}"
                )
        self.provider = self.session.get_providers()[0]

    def predict(self, x: np.ndarray, requests: int = 1) -> dict[str, np.ndarray]:
        """Run the whole batch `x` (float32, the spec's input shape) for `requests` requests; return the
        spec's outputs by name. The one place every inference runs, so the one place it is counted
        (rows, runs, compute time). Synchronous and thread-safe: call it from a worker thread."""
        if self.session is None:
            raise RuntimeError(f"model {self.name} version {self.version} is not loaded")
        names, feed = [o.name for o in self.spec.outputs], np.ascontiguousarray(x, self.input_dtype)
        session, name, splitter = self.session, self.spec.input.name, self.splitter
        start = time.perf_counter()
        with RUNS:
            if splitter is None:
                outs = session.run(names, {name: feed})
            else:  # an image model: a large run in pieces, side by side (service/engine/split.py)
                outs = splitter.run(lambda rows: session.run(names, {name: rows}), feed)
        if self.options.metrics is not None:
            self.options.metrics.execution(self.name, len(x), requests, time.perf_counter() - start, self.version)
        return dict(zip(names, outs))

    def render_rgb(self, x: np.ndarray) -> np.ndarray:
        """A plain render's tile: coordinates [N, 2] → rgb [N, 3] on the render session. Counted as one run of
        N rows, like `predict`."""
        start = time.perf_counter()
        with RUNS:
            if self.foreign is not None:  # a network made elsewhere, in its declared convention
                rgb = self.foreign.run(self.render_session, x)
            else:
                rgb = self.render_session.run(["rgb"], {self.spec.input.name: np.ascontiguousarray(x, np.float32)})[0]
        if self.options.metrics is not None:
            self.options.metrics.execution(self.name, len(x), 1, time.perf_counter() - start, self.version)
        return rgb

    def predict_features(self, features: np.ndarray) -> np.ndarray:
        """A separable render's tile: the body graph on the first stage's features [N, F] → rgb [N, 3]
        (service/render/separable.py). Counted as one run of N rows, like `predict`."""
        return self._counted(self.separable.run, features, len(features))

    def predict_lattice(self, axes: list) -> np.ndarray:
        """A lattice render's tile (service/render/lattice.py): a dense grid's rgb [N, 3] on the lattice `axes`
        (service/engine/lattice.py). Counted as one run of N rows, like `predict`."""
        lattice = self.lattice
        return self._counted(lattice.rgb, axes, len(axes[0][0].first) * len(axes[0][1].first))

    def paint_lattice(self, kernel, axes: tuple, x0: int, y0: int, out: np.ndarray) -> None:
        """A lattice render's tile by the lattice's kernel (`kernel`, its `axes`): the pixels of its columns x0 …
        and rows y0 … written into `out` (uint8 [R, C, 3]). Counted as one run of R·C rows."""
        self._counted(lambda _: kernel.tile(axes, x0, y0, out), None, out.shape[0] * out.shape[1])

    def _counted(self, run, x: np.ndarray, rows: int) -> np.ndarray:
        start = time.perf_counter()
        with RUNS:
            rgb = run(x)
        if self.options.metrics is not None:
            self.options.metrics.execution(self.name, rows, 1, time.perf_counter() - start, self.version)
        return rgb


def _dims(shape) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else -1 for d in shape)


def _shape_matches(found: tuple, want: tuple) -> bool:
    """Dynamic dims (-1) match anything; fixed dims must be equal."""
    return len(found) == len(want) and all(w < 0 or f < 0 or f == w for f, w in zip(found, want))
