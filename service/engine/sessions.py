"""onnxruntime sessions as the service makes them: its options (threads, no spinning unless asked, no arena), and
the device a session really runs on."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import onnxruntime as ort

from ..errors import DeviceError, ModelLoadError
from .modelfile import CPU, ModelFile, new_session
from .session_cache import SessionCache

log = logging.getLogger(__name__)
CUDA = "CUDAExecutionProvider"
Cached = tuple[SessionCache, str]  # the cache and the ONNX file's sha256


def check_device_available(device: str) -> None:
    """Fail early when CUDA is demanded but this onnxruntime build has no CUDA provider."""
    if device == "cuda" and CUDA not in ort.get_available_providers():
        raise DeviceError(
            f"--device cuda: this onnxruntime has no {CUDA} (available: "
            f"{', '.join(ort.get_available_providers())}); install onnxruntime-gpu or use --device cpu"
        )


def session_options(threads: int, spin: bool) -> ort.SessionOptions:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    # no arena: a run's activations go back to the heap after it, and a model's steady memory is its weights
    # (the arena kept the peak of the warmup's 8,192-row batch for good: docs/benchmarks.md, memory)
    opts.enable_cpu_mem_arena = False
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    opts.log_severity_level = 3
    return opts


def make_session(
    onnx_path: Path | ModelFile, providers: list[str], threads: int, spin: bool, cached: Cached | None = None
) -> ort.InferenceSession:
    try:
        with warnings.catch_warnings():  # a missing provider is reported by device_session, not as a warning
            warnings.simplefilter("ignore", UserWarning)
            # the CPU graph only: CUDA's may not be saved whole; a graph sharing its tables with the lattice has no
            # packing left to skip (service/engine/shared_tables.py)
            shares = isinstance(onnx_path, ModelFile) and providers == [CPU] and onnx_path.tables() is not None
            if cached is not None and providers == [CPU] and not shares:
                cache, digest = cached
                return cache.session(onnx_path, digest, providers, lambda: session_options(threads, spin))
            return new_session(onnx_path, session_options(threads, spin), providers)
    except ModelLoadError:
        raise
    except Exception as e:  # onnxruntime raises several types for a bad file
        first = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
        raise ModelLoadError(f"unreadable ONNX file: {first[:300]}") from None


def device_session(
    onnx_path: Path, device: str, threads: int, spin: bool, name: str, cached: Cached | None = None
) -> ort.InferenceSession:
    """A session on `device`: cpu; cuda (DeviceError unless CUDA really takes it); auto (CUDA when it does).
    `cached`: the session cache and the file's verified sha256, for a CPU session (service/engine/session_cache.py)."""
    if device == "cpu" or (device == "auto" and CUDA not in ort.get_available_providers()):
        return make_session(onnx_path, [CPU], threads, spin, cached)
    session = make_session(onnx_path, [CUDA, CPU], threads, spin)
    if CUDA in session.get_providers():
        return session
    if device == "cuda":
        raise DeviceError(
            f"--device cuda: model '{name}' does not run on {CUDA} (session providers: "
            f"{', '.join(session.get_providers())})"
        )
    log.info("model %s: CUDA did not take the session; using %s", name, CPU)
    return make_session(onnx_path, [CPU], threads, spin, cached)
