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
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

from modelrepo import (
    ONNX_TO_V2,
    ContractError,
    ImageSource,
    ModelSpec,
    SpecError,
    VersionRecord,
    check_onnx_geometry,
    check_version,
    read_version,
)

from ..errors import DeviceError, ModelLoadError
from ..metrics import Metrics
from .separable import SeparableBody, load_separable
from .warmup import run_warmups

log = logging.getLogger(__name__)
CPU, CUDA = "CPUExecutionProvider", "CUDAExecutionProvider"


@dataclass(frozen=True)
class RuntimeOptions:
    device: str = "cpu"  # cpu | cuda | auto
    threads: int = 1  # intra-op threads per session
    render_threads: int = 0  # intra-op threads of the sessions render tiles run on; 0 = `threads`
    spin: bool = False  # let idle intra-op threads busy-wait (faster on dedicated cores only)
    metrics: Metrics | None = field(default=None, compare=False)  # where every run is counted


def check_device_available(device: str) -> None:
    """Fail early when CUDA is demanded but this onnxruntime build has no CUDA provider."""
    if device == "cuda" and CUDA not in ort.get_available_providers():
        raise DeviceError(
            f"--device cuda: this onnxruntime has no {CUDA} (available: "
            f"{', '.join(ort.get_available_providers())}); install onnxruntime-gpu or use --device cpu"
        )


class ModelRuntime:
    """One version of a model, served by one onnxruntime session.

    Immutable once loaded: a reload builds a new runtime beside it, and a request that holds
    this object finishes on it. `retired` is set when the registry stops serving it.
    """

    def __init__(self, path: Path, spec: ModelSpec, version: int, options: RuntimeOptions):
        self.path = Path(path)  # the model folder
        self.name = self.path.name
        self.spec = spec
        self.version = version
        self.options = options
        self.record: VersionRecord | None = None
        self._metadata: tuple | None = None
        self.status = "loading"
        self.error: str | None = None
        self.provider: str | None = None
        self.session: ort.InferenceSession | None = None
        self.render_session: ort.InferenceSession | None = None  # renders' tiles: see _render_sessions
        self.retired = False
        self.separable: SeparableBody | None = None
        self.stamp = self.files_stamp()  # what was on disk when this runtime was built

    def files_stamp(self) -> tuple:
        """(mtime_ns, size) of N/model.onnx, N/metadata.json and the separable N/body.onnx now; None for
        a missing file."""
        out = []
        for name in ("model.onnx", "metadata.json", "body.onnx"):
            try:
                st = (self.path / str(self.version) / name).stat()
                out.append((st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

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
            self.status, self.error, self.session = "failed", str(e), None
            log.warning("model %s version %d: failed: %s", self.name, self.version, e)
        return self.ready

    def _load(self) -> None:
        self.record = read_version(self.path, self.version)
        try:
            onnx_path = check_version(self.path, self.record)
        except OSError as e:  # no permission, an I/O error on a bad disk or mount
            raise ModelLoadError(f"unreadable {self.version}/model.onnx: {e.strerror or e}") from None
        self.session = self._session(onnx_path)
        self._check_signature()
        if self.task == "image":  # the graph's recorded geometry, when the export wrote one, is the version's
            try:
                check_onnx_geometry(
                    ImageSource.from_metadata(self.record.metadata),
                    self.session.get_modelmeta().custom_metadata_map,
                    self.version,
                )
            except ContractError as e:
                raise ModelLoadError(str(e)) from None
        self._render_sessions(onnx_path)
        # config.pbtxt model_warmup: not ready until it has run (service/engine/warmup.py)
        self.warmup_seconds = run_warmups(self.session, self.spec, self.path, self.version)

    def _render_sessions(self, onnx_path: Path) -> None:
        """The sessions render tiles run on. On CPU they have `render_threads` intra-op threads: the render
        workers run tiles side by side, and a one-thread session has no fork and join per node (a grid
        model's graph is many small passes). The separable body (service/engine/separable.py) serves only
        renders; a model without one gets a second session of its graph when the thread counts differ."""
        threads = self.options.render_threads or self.options.threads
        own = self.provider == CPU and threads != self.options.threads
        make = (lambda path: self._make_session(path, [CPU], threads)) if own else self._session
        # the body graph for separable renders; None = render the plain way
        self.separable = load_separable(self.metadata.get("separable"), onnx_path.parent, make)
        self.render_session = self.session
        if self.task == "image" and self.separable is None and own:
            self.render_session = make(onnx_path)

    def _session_options(self, threads: int | None = None) -> ort.SessionOptions:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads or self.options.threads
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.options.spin else "0")
        opts.log_severity_level = 3
        return opts

    def _make_session(self, onnx_path: Path, providers: list[str], threads: int | None = None) -> ort.InferenceSession:
        try:
            with warnings.catch_warnings():  # a missing provider is reported by _session, not as a warning
                warnings.simplefilter("ignore", UserWarning)
                return ort.InferenceSession(
                    str(onnx_path), sess_options=self._session_options(threads), providers=providers
                )
        except Exception as e:  # onnxruntime raises several types for a bad file
            first = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
            raise ModelLoadError(f"unreadable ONNX file: {first[:300]}") from None

    def _session(self, onnx_path: Path) -> ort.InferenceSession:
        device = self.options.device
        if device == "cpu" or (device == "auto" and CUDA not in ort.get_available_providers()):
            return self._make_session(onnx_path, [CPU])
        session = self._make_session(onnx_path, [CUDA, CPU])
        if CUDA in session.get_providers():
            return session
        if device == "cuda":
            raise DeviceError(
                f"--device cuda: model '{self.name}' does not run on {CUDA} "
                f"(session providers: {', '.join(session.get_providers())})"
            )
        log.info("model %s: CUDA did not take the session; using %s", self.name, CPU)
        return self._make_session(onnx_path, [CPU])

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
        names = [o.name for o in self.spec.outputs]
        start = time.perf_counter()
        outs = self.session.run(names, {self.spec.input.name: np.ascontiguousarray(x, np.float32)})
        if self.options.metrics is not None:
            self.options.metrics.execution(self.name, len(x), requests, time.perf_counter() - start, self.version)
        return dict(zip(names, outs))

    def render_rgb(self, x: np.ndarray) -> np.ndarray:
        """A plain render's tile: coordinates [N, 2] → rgb [N, 3] on the render session. Counted as one run of
        N rows, like `predict`."""
        start = time.perf_counter()
        rgb = self.render_session.run(["rgb"], {self.spec.input.name: np.ascontiguousarray(x, np.float32)})[0]
        if self.options.metrics is not None:
            self.options.metrics.execution(self.name, len(x), 1, time.perf_counter() - start, self.version)
        return rgb

    def predict_features(self, features: np.ndarray) -> np.ndarray:
        """A separable render's tile: the body graph on the first stage's features [N, F] → rgb [N, 3]
        (service/render/separable.py). Counted as one run of N rows, like `predict`."""
        start = time.perf_counter()
        rgb = self.separable.run(features)
        if self.options.metrics is not None:
            self.options.metrics.execution(self.name, len(features), 1, time.perf_counter() - start, self.version)
        return rgb


def _dims(shape) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else -1 for d in shape)


def _shape_matches(found: tuple, want: tuple) -> bool:
    """Dynamic dims (-1) match anything; fixed dims must be equal."""
    return len(found) == len(want) and all(w < 0 or f < 0 or f == w for f, w in zip(found, want))
