"""Triton's per-model statistics: the cumulative counters of each model version, served as Triton's Prometheus
families (`nv_inference_*`, `nv_cache_*`, under Triton's exact names and labels) and as the entries of the V2
statistics extension (`GET /v2/models/NAME/stats`). service/metrics/__init__.py records them."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, seconds: float, n: int = 1) -> None:
        self.count += n
        self.ns += int(seconds * 1e9) * n

    def json(self) -> dict:
        return {"count": self.count, "ns": self.ns}


@dataclass
class ModelStats:
    """Cumulative statistics of one model, in the fields of Triton's statistics extension."""

    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    fail_reasons: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    queue: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    pending: int = 0
    batches: dict[int, Duration] = field(default_factory=lambda: defaultdict(Duration))
    cache_hit: Duration = field(default_factory=Duration)  # render cache lookups (service/render/cache.py)
    cache_miss: Duration = field(default_factory=Duration)


# Triton's families: (name, type, help, the samples of one model version as [(extra labels, value)])
FAMILIES: list[tuple[str, str, str, Callable[[ModelStats], list[tuple[dict, float]]]]] = [
    (
        "nv_inference_request_success",
        "counter",
        "Number of successful inference requests, all batch sizes",
        lambda s: [({}, s.success.count)],
    ),
    (
        "nv_inference_request_failure",
        "counter",
        "Number of failed inference requests, all batch sizes",
        lambda s: [({"reason": r}, n) for r, n in sorted(s.fail_reasons.items())] or [({"reason": "OTHER"}, 0)],
    ),
    (
        "nv_inference_count",
        "counter",
        "Number of inferences performed (rows: images or coordinates)",
        lambda s: [({}, s.inference_count)],
    ),
    (
        "nv_inference_exec_count",
        "counter",
        "Number of model executions performed (onnxruntime runs)",
        lambda s: [({}, s.execution_count)],
    ),
    (
        "nv_inference_request_duration_us",
        "counter",
        "Cumulative inference request duration in microseconds",
        lambda s: [({}, (s.success.ns + s.fail.ns) // 1000)],
    ),
    (
        "nv_inference_queue_duration_us",
        "counter",
        "Cumulative inference queuing duration in microseconds",
        lambda s: [({}, s.queue.ns // 1000)],
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "counter",
        "Cumulative compute inference duration in microseconds",
        lambda s: [({}, s.compute_infer.ns // 1000)],
    ),
    (
        "nv_inference_pending_request_count",
        "gauge",
        "Instantaneous number of pending requests awaiting execution per-model",
        lambda s: [({}, s.pending)],
    ),
    (
        "nv_cache_num_hits_per_model",
        "counter",
        "Number of cache hits per model (renders and inference responses)",
        lambda s: [({}, s.cache_hit.count)],
    ),
    (
        "nv_cache_num_misses_per_model",
        "counter",
        "Number of cache misses per model (renders and inference responses)",
        lambda s: [({}, s.cache_miss.count)],
    ),
    (
        "nv_cache_hit_duration_per_model",
        "counter",
        "Total cache hit duration per model, in microseconds",
        lambda s: [({}, s.cache_hit.ns // 1000)],
    ),
    (
        "nv_cache_miss_duration_per_model",
        "counter",
        "Total cache miss (render and insertion) duration per model, in microseconds",
        lambda s: [({}, s.cache_miss.ns // 1000)],
    ),
]


def family(name: str, kind: str, doc: str, samples: list[str]) -> str:
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n" + "".join(f"{name}{row}\n" for row in samples)


def triton_text(models: dict[tuple[str, str], ModelStats], cache_info: dict | None) -> str:
    """The families over every (model, version), then the cache store's own gauges (`cache_info`: entries, bytes,
    max_bytes, evictions; None when there is no cache)."""
    families = []
    for name, kind, doc, value in FAMILIES:
        rows = []
        for (model, version), s in sorted(models.items()):
            for extra, v in value(s):
                labels = {"model": model, "version": version, **extra}
                rows.append("{" + ",".join(f'{k}="{text}"' for k, text in labels.items()) + f"}} {v}")
        families.append(family(name, kind, doc, rows))
    if cache_info is not None:
        util = cache_info["bytes"] / cache_info["max_bytes"] if cache_info["max_bytes"] else 0.0
        for name, kind, doc, v in (
            (
                "nv_cache_num_entries",
                "gauge",
                "Number of renders and responses stored in the cache",
                cache_info["entries"],
            ),
            ("nv_cache_num_evictions", "counter", "Number of cache evictions", cache_info["evictions"]),
            ("nv_cache_util", "gauge", "Cache utilization [0.0 - 1.0]", util),
        ):
            families.append(family(name, kind, doc, [f" {v}"]))
    return "".join(families)


def stats_json(name: str, version: str, s: ModelStats) -> dict:
    """One model version's entry of `model_stats` in Triton's statistics extension."""
    zero = Duration().json()
    return {
        "name": name,
        "version": version,
        "last_inference": s.last_inference_ms,
        "inference_count": s.inference_count,
        "execution_count": s.execution_count,
        "inference_stats": {
            "success": s.success.json(),
            "fail": s.fail.json(),
            "queue": s.queue.json(),
            "compute_input": zero,
            "compute_infer": s.compute_infer.json(),
            "compute_output": zero,
            "cache_hit": s.cache_hit.json(),
            "cache_miss": s.cache_miss.json(),
        },
        "batch_stats": [
            {"batch_size": size, "compute_input": zero, "compute_infer": d.json(), "compute_output": zero}
            for size, d in sorted(s.batches.items())
        ],
        "memory_usage": [],
    }
