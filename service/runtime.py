"""The ONNX model runtime (KServe style: `load()`, `ready`, `predict(ndarray)`).

One `ModelRuntime` per model folder. `load()` checks the folder against the model
repository contract (docs/model-repository.md): metadata.json readable, task known,
sha256 of the ONNX file equal to metadata's `onnx_sha256`, inputs and outputs as the
task requires. A failure becomes `status="failed"` with the reason, except a device
that does not really run the model, which raises DeviceError: start-up must stop.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .errors import DeviceError, ModelLoadError

log = logging.getLogger(__name__)
CPU, CUDA = "CPUExecutionProvider", "CUDAExecutionProvider"


@dataclass(frozen=True)
class TaskSpec:
    """The tensors a task fixes (docs/model-repository.md, "Tensors")."""
    input: str
    input_shape: tuple[int | None, ...]  # None = dynamic
    outputs: tuple[str, ...]


TASKS = {
    "image": TaskSpec("coords", (None, 2), ("rgb",)),
    "digits": TaskSpec("images", (None, 1, 28, 28), ("logits", "probabilities")),
}


@dataclass(frozen=True)
class RuntimeOptions:
    device: str = "cpu"   # cpu | cuda | auto
    threads: int = 1      # intra-op threads per session
    spin: bool = False    # let idle intra-op threads busy-wait (faster on dedicated cores only)


def cgroup_cpu_limit(cpu_max: str | None = None, quota_us: str | None = None, period_us: str | None = None) -> int | None:
    """CPUs allowed by a cgroup quota: v2 `cpu.max` ("200000 100000" or "max 100000") or
    v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`. None when there is no quota."""
    try:
        if cpu_max is not None:
            quota, period = cpu_max.split()[:2]
            if quota == "max":
                return None
            return max(1, math.ceil(int(quota) / int(period)))
        if quota_us is not None and period_us is not None and int(quota_us) > 0:
            return max(1, math.ceil(int(quota_us) / int(period_us)))
    except (ValueError, ZeroDivisionError):
        return None
    return None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def available_cpus() -> int:
    """CPUs this process may use: its affinity mask, capped by the cgroup CPU quota."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    limit = cgroup_cpu_limit(_read("/sys/fs/cgroup/cpu.max"), _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
                             _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
    return max(1, min(n, limit) if limit else n)


def default_threads(workers: int = 1) -> int:
    return max(1, available_cpus() // max(1, workers))


def check_device_available(device: str) -> None:
    """Fail early when CUDA is demanded but this onnxruntime build has no CUDA provider."""
    if device == "cuda" and CUDA not in ort.get_available_providers():
        raise DeviceError(f"--device cuda: this onnxruntime has no {CUDA} (available: "
                          f"{', '.join(ort.get_available_providers())}); install onnxruntime-gpu or use --device cpu")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _dims(shape) -> tuple[int | None, ...]:
    return tuple(d if isinstance(d, int) else None for d in shape)


class ModelRuntime:
    """A model folder served by one onnxruntime session."""

    def __init__(self, path: Path, options: RuntimeOptions):
        self.path = Path(path)
        self.name = self.path.name
        self.options = options
        self.metadata: dict = {}
        self.status = "loading"
        self.error: str | None = None
        self.provider: str | None = None
        self.session: ort.InferenceSession | None = None
        self.spec: TaskSpec | None = None

    @property
    def task(self) -> str | None:
        return self.metadata.get("task")

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    def load(self) -> bool:
        """Check and load the model; return `ready`. Never raises for a broken model folder."""
        try:
            self._load()
            self.status, self.error = "ready", None
            log.info("model %s: ready (%s, %s)", self.name, self.task, self.provider)
        except ModelLoadError as e:
            self.status, self.error, self.session = "failed", str(e), None
            log.warning("model %s: failed: %s", self.name, e)
        return self.ready

    def _load(self) -> None:
        self.metadata = self._read_metadata()
        task = self.metadata.get("task")
        if task not in TASKS:
            raise ModelLoadError(f"metadata.json: unknown task '{task}'; valid: {', '.join(TASKS)}")
        self.spec = TASKS[task]
        version = self.metadata.get("version", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ModelLoadError(f"metadata.json: version must be a positive integer, got {version!r}")
        onnx_path = self.path / str(version) / "model.onnx"
        if not onnx_path.is_file():
            raise ModelLoadError(f"missing {onnx_path.relative_to(self.path)}")
        try:
            digest = sha256_file(onnx_path)
        except OSError as e:  # no permission, an I/O error on a bad disk or mount
            raise ModelLoadError(f"unreadable {onnx_path.relative_to(self.path)}: {e.strerror or e}") from None
        if digest != self.metadata.get("onnx_sha256"):
            raise ModelLoadError(f"sha256 of {onnx_path.relative_to(self.path)} ({digest[:12]}…) does not match "
                                 f"metadata.json onnx_sha256 ({str(self.metadata.get('onnx_sha256'))[:12]}…): "
                                 "tampered or stale")
        self.session = self._session(onnx_path)
        self._check_signature()

    def _read_metadata(self) -> dict:
        try:
            meta = json.loads((self.path / "metadata.json").read_text())
        except FileNotFoundError:
            raise ModelLoadError("missing metadata.json") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ModelLoadError(f"metadata.json is unreadable: {e}") from None
        if not isinstance(meta, dict):
            raise ModelLoadError("metadata.json is not a JSON object")
        return meta

    def _session_options(self) -> ort.SessionOptions:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.options.threads
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.options.spin else "0")
        opts.log_severity_level = 3
        return opts

    def _make_session(self, onnx_path: Path, providers: list[str]) -> ort.InferenceSession:
        try:
            with warnings.catch_warnings():  # a missing provider is reported by _session, not as a warning
                warnings.simplefilter("ignore", UserWarning)
                return ort.InferenceSession(str(onnx_path), sess_options=self._session_options(),
                                            providers=providers)
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
            raise DeviceError(f"--device cuda: model '{self.name}' does not run on {CUDA} "
                              f"(session providers: {', '.join(session.get_providers())})")
        log.info("model %s: CUDA did not take the session; using %s", self.name, CPU)
        return self._make_session(onnx_path, [CPU])

    def _check_signature(self) -> None:
        spec = self.spec
        inputs = self.session.get_inputs()
        found = [(i.name, _dims(i.shape), i.type) for i in inputs]
        if (len(inputs) != 1 or inputs[0].name != spec.input or inputs[0].type != "tensor(float)"
                or not _shape_matches(_dims(inputs[0].shape), spec.input_shape)):
            raise ModelLoadError(f"unexpected inputs {found}; a '{self.task}' model takes one float tensor "
                                 f"'{spec.input}' of shape {list(spec.input_shape)}")
        outputs = {o.name for o in self.session.get_outputs()}
        missing = [o for o in spec.outputs if o not in outputs]
        if missing:
            raise ModelLoadError(f"missing outputs {missing}; a '{self.task}' model gives {list(spec.outputs)}")
        self.provider = self.session.get_providers()[0]

    def predict(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Run the whole batch `x` (float32, the task's input shape); return the task's outputs by name."""
        if self.session is None:
            raise RuntimeError(f"model {self.name} is not loaded")
        outs = self.session.run(list(self.spec.outputs), {self.spec.input: np.ascontiguousarray(x, np.float32)})
        return dict(zip(self.spec.outputs, outs))


def _shape_matches(found: tuple, want: tuple) -> bool:
    """Dynamic dims (None) match anything; fixed dims must be equal."""
    return len(found) == len(want) and all(w is None or f is None or f == w for f, w in zip(found, want))
