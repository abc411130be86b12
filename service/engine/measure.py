"""How much memory a loaded model version takes (service/engine/residency.py counts it against the budget).

A version's bytes are the growth of the process's resident set across its load and warmup, between two
`malloc_trim`s (engine/memory.py), one load at a time and with no unload meanwhile (`Measure.lock`). The growth is
the version's only if no session ran meanwhile: a render elsewhere allocates and frees tens of megabytes of
activations, and the server measured 2-25 MiB for copies of one 13 MiB model under load (docs/benchmarks.md,
collection). `RUNS` counts the session runs, so a load knows whether it was quiet. A load that overlapped runs
keeps the version's last quiet measurement, or takes an estimate at a high ratio of the quiet loads' bytes per byte
of what predicts them: a dense grid's packed corner cells where its export recorded them (its CPU session holds
them, and little else), else its file's size. A file's size predicts badly since tables are entropy-coded: the
bytes in memory per file byte ranged from 4 (an uncoded file) to 17, and under a stream of loads that never ran
quiet the estimates from the first few let the server hold 1.6 GiB under a 1 GiB budget
(docs/benchmarks.md, collection). The peak during a load (VmHWM, started again before it) is measured and estimated
the same way, so that the residency frees room for the load's transient memory as well as for its result.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from .memory import peak_rss, reset_peak, rss, trim
from .runs import RUNS

if TYPE_CHECKING:
    from .runtime import ModelRuntime

FIRST_RATIO = 6.0  # bytes in memory per byte of ONNX file, before any load has been measured
FIRST_PEAK_RATIO = 40.0  # the same for the peak during a load (a graph onnxruntime folds: a float16 grid's tables)
FIRST_PACKED_RATIO = 1.25  # bytes in memory per packed corner byte, before any is measured (1.05-1.09 measured)
FIRST_PACKED_PEAK_RATIO = 3.0  # the same for the peak (2.3-2.7 measured: the file decoded and the cells packed)
PACKED_MIN = 4 * 2**20  # packed cells that predict a version's bytes: below, its fixed costs (its session, head and
# objects, ~1 MiB) outweigh them, and a block of a few KB measured 100-300× its cells; such versions go by their file
RATIOS_KEPT = 64


class Measure:
    def __init__(self):
        self.lock = threading.Lock()  # one load measured at a time, and no unload during one
        # bytes and the peak during a load per byte of what predicts them (`basis`), of the last quiet loads
        self.ratios: dict[str, list[float]] = {"file": [], "packed": []}
        self.peak_ratios: dict[str, list[float]] = {"file": [], "packed": []}

    @staticmethod
    def basis(runtime: ModelRuntime) -> tuple[str, int]:
        """What predicts a version's bytes before they are measured: (kind, bytes)."""
        packed = runtime.packed_bytes()
        return ("packed", packed) if packed is not None and packed >= PACKED_MIN else ("file", runtime.file_bytes())

    def _estimate(self, runtime: ModelRuntime, peak: bool = False) -> int:
        kind, size = self.basis(runtime)
        if kind == "packed":
            first = FIRST_PACKED_PEAK_RATIO if peak else FIRST_PACKED_RATIO
        else:
            first = FIRST_PEAK_RATIO if peak else FIRST_RATIO
        return int(size * high((self.peak_ratios if peak else self.ratios)[kind], first))

    def estimate(self, runtime: ModelRuntime) -> int:
        """The bytes a version will take: measured when it was loaded before, else from what predicts them."""
        if runtime.bytes is not None:
            return runtime.bytes
        return self._estimate(runtime)

    def room(self, runtime: ModelRuntime) -> int:
        """The bytes its load needs at its peak (what the residency frees before it): the file decoded, and for a graph
        onnxruntime optimises, the copies its constant folding makes on the way, at several times the result (a dense
        grid on the CPU is packed by the service instead: service/engine/shared_tables.py)."""
        if runtime.load_peak is not None:
            return max(runtime.load_peak, self.estimate(runtime))
        return max(self.estimate(runtime), self._estimate(runtime, peak=True))

    def load(self, runtime: ModelRuntime) -> tuple[float, int, bool]:
        """Load and warm up `runtime` (blocking) and set its `bytes` and `load_peak`; (seconds, growth, quiet)."""
        with self.lock:
            trim()
            mark, before, start = RUNS.mark(), rss(), time.perf_counter()
            peaks = reset_peak()
            runtime.load()
            seconds = time.perf_counter() - start
            peak = peak_rss() - before if peaks else 0
            trim()  # the load's transient memory
            grown, quiet = max(rss() - before, 0), RUNS.quiet_since(mark)
        if runtime.resident:
            size = runtime.file_bytes()
            kind, basis = self.basis(runtime)
            if quiet:
                runtime.bytes, runtime.bytes_quiet = max(grown, size), True
                keep(self.ratios[kind], runtime.bytes / max(basis, 1))
            elif not runtime.bytes_quiet:
                runtime.bytes = max(size, self._estimate(runtime))
            if peaks:  # runs that overlapped add to the peak: too high then, never too low
                runtime.load_peak = max(peak, runtime.bytes)
                if quiet:
                    keep(self.peak_ratios[kind], runtime.load_peak / max(basis, 1))
        return seconds, grown, quiet


def keep(ratios: list[float], ratio: float) -> None:
    ratios.append(ratio)
    del ratios[:-RATIOS_KEPT]


def high(ratios: list[float], first: float) -> float:
    """The 90th percentile of `ratios`, `first` before there are any."""
    if not ratios:
        return first
    ordered = sorted(ratios)
    return ordered[int(0.9 * (len(ordered) - 1))]
