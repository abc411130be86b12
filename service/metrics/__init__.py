"""Prometheus metrics (served at GET /metrics by service/api/metrics.py), and the per-model statistics behind the
V2 `/stats` extension.

Two kinds of series:

* Triton's cumulative counters, under Triton's names and labels (`model`, `version`), so that
  dashboards made for Triton work. As in Triton each loaded version counts on its own: after a
  swap the old version's series keeps its numbers and the new one starts at zero. `nv_inference_request_success`,
  `nv_inference_request_failure`
  (with `reason`), `nv_inference_count` (rows inferred: images or coordinates),
  `nv_inference_exec_count` (onnxruntime runs), `nv_inference_request_duration_us`,
  `nv_inference_queue_duration_us`, `nv_inference_compute_infer_duration_us`, and the gauge
  `nv_inference_pending_request_count`.
* Histograms and gauges from prometheus_client: `inr_request_duration_seconds` per model and
  endpoint, `inr_inference_queue_duration_seconds`, `inr_inference_compute_duration_seconds`,
  `inr_batch_size` (rows per run), `inr_queue_timeouts_total` (503s after waiting longer than
  INR_QUEUE_TIMEOUT_S, by model and queue), `inr_models` (models by state), the memory budget's
  (`inr_models_resident`, `inr_model_resident_bytes`, `inr_model_memory_budget_bytes`, `inr_model_loads_total`,
  `inr_model_evictions_total`, `inr_model_load_duration_seconds`, `inr_model_load_wait_seconds`) and, with traces on,
  `inr_trace_spans_dropped_total` (spans that never reached the collector, by reason; docs/operations.md, "Traces").

With several uvicorn workers each process counts its own requests; a scrape sees the worker that
answered it. The fit metrics (`inr_fit_*`) are not counted here but read from the job store at each scrape
(service/fits/metrics.py), so every process and replica shows the same figures.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .triton import ModelStats, stats_json, triton_text

INFER_ENDPOINTS = ("/query", "/classify", "/render", "/infer", "/ModelInfer", "/ModelStreamInfer")  # + gRPC
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
LOAD_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536)


class Metrics:
    """All the service's counters. Thread-safe: batches finish in pool threads, requests on the loop."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.lock = threading.Lock()
        self.models: dict[tuple[str, str], ModelStats] = defaultdict(ModelStats)  # by (name, version)
        self.versions: dict[str, str] = {}  # the serving version of each model, for requests that name none
        self.request_seconds = Histogram(
            "inr_request_duration_seconds",
            "HTTP request latency by model and endpoint",
            ["model", "endpoint", "method", "code"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.queue_seconds = Histogram(
            "inr_inference_queue_duration_seconds",
            "time a request waited before its onnxruntime run started",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.compute_seconds = Histogram(
            "inr_inference_compute_duration_seconds",
            "duration of one onnxruntime run (a whole batch)",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.batch_rows = Histogram(
            "inr_batch_size",
            "rows (images or coordinates) per onnxruntime run",
            ["model"],
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.batch_requests = Histogram(
            "inr_batch_requests",
            "requests merged into one onnxruntime run",
            ["model"],
            buckets=BATCH_BUCKETS[:10],
            registry=self.registry,
        )
        self.queue_timeouts = Counter(
            "inr_queue_timeouts",
            "requests answered 503 after waiting longer than their deadline "
            "(INR_QUEUE_TIMEOUT_S or V2's timeout parameter) for a batch or a render slot",
            ["model", "queue"],
            registry=self.registry,
        )
        self.models_gauge = Gauge("inr_models", "models in the repository by state", ["state"], registry=self.registry)
        self.render_deadlines = Counter(
            "inr_render_deadline_exceeded",
            "renders stopped at a tile past INR_RENDER_TIMEOUT_S",
            ["model"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "inr_requests_in_flight",
            "HTTP requests being answered now (a drain waits for them; set by the app from its Drain)",
            registry=self.registry,
        )
        self.trace_drops = Counter(
            "inr_trace_spans_dropped",
            "spans that never reached the trace collector: queue_full (OTEL_BSP_MAX_QUEUE_SIZE) or export_failed",
            ["reason"],
            registry=self.registry,
        )
        # The memory budget (service/engine/residency.py); no model label: a collection has thousands of models
        self.model_loads = Counter(
            "inr_model_loads",
            "model versions loaded on first use, by result: loaded, failed, too_large",
            ["result"],
            registry=self.registry,
        )
        self.model_evictions = Counter(
            "inr_model_evictions",
            "model versions unloaded to make room within the memory budget",
            registry=self.registry,
        )
        self.model_load_seconds = Histogram(
            "inr_model_load_duration_seconds",
            "seconds one load and warmup of a model version took",
            buckets=LOAD_BUCKETS,
            registry=self.registry,
        )
        self.load_waits = Histogram(
            "inr_model_load_wait_seconds",
            "seconds a request waited for its model's first-use load",
            buckets=LOAD_BUCKETS,
            registry=self.registry,
        )
        self.resident_models = Gauge(
            "inr_models_resident", "model versions with sessions in memory", registry=self.registry
        )
        self.resident_bytes = Gauge(
            "inr_model_resident_bytes", "measured bytes of the resident model versions", registry=self.registry
        )
        self.budget_bytes = Gauge(
            "inr_model_memory_budget_bytes", "the memory budget (--memory-budget)", registry=self.registry
        )
        # models on S3 (modelrepo/s3.py): the requests to S3 by operation, read from the repository at each scrape
        self.repository_requests = Gauge(
            "inr_model_repository_requests",
            "requests this process made to the model repository on S3 since it started, by operation "
            "(GET, LIST, HEAD, PUT, DELETE)",
            ["operation"],
            registry=self.registry,
        )
        self.model_cache_bytes = Gauge(
            "inr_model_cache_bytes",
            "disk bytes of the cache of the models on S3, as du counts them (INR_MODEL_CACHE_BYTES bounds it)",
            registry=self.registry,
        )
        self.cache_info = None  # () -> CacheStore.info(), set by the app
        # Label children bound once per label set: `labels()` takes a lock and builds its key on every call,
        # several times per request. Keys are known models, route templates and status codes.
        self._request_children: dict[tuple, object] = {}
        self._model_children: dict[str, tuple] = {}

    # -- recording -------------------------------------------------------------------------------
    def residency(self, residency) -> None:
        """Read the resident models and bytes from `residency` at each scrape."""
        self.resident_models.set_function(lambda: len(residency.resident))
        self.resident_bytes.set_function(lambda: residency.bytes)
        self.budget_bytes.set(residency.options.budget)

    def model_load(self, model: str, result: str, seconds: float) -> None:
        self.model_loads.labels(result).inc()
        if result == "loaded":
            self.model_load_seconds.observe(seconds)

    def model_evicted(self, model: str) -> None:
        self.model_evictions.inc()

    def load_wait(self, model: str, seconds: float) -> None:
        self.load_waits.observe(seconds)

    def spans_dropped(self, reason: str, n: int) -> None:
        """telemetry.tracing's drop hook (called from the span processor's threads)."""
        self.trace_drops.labels(reason).inc(n)

    # `version` is the version that ran (ModelRuntime.version); None = the model's serving version.
    def _stats(self, model: str, version: int | str | None) -> ModelStats:
        return self.models[model, self.versions.get(model, "1") if version is None else str(version)]

    def watch_repository(self, repository) -> None:
        """The S3 requests and the disk cache's bytes of a repository on S3, read at each scrape."""
        for op in ("GET", "LIST", "HEAD", "PUT", "DELETE"):
            self.repository_requests.labels(op).set_function(lambda op=op: repository.requests[op])
        self.model_cache_bytes.set_function(lambda: repository.budget.bytes)

    def watch_models(self, registry) -> None:
        """`inr_models` by state, counted from the registry at each scrape: ready and failed (described), and
        listed (on-demand: in the repository, not yet asked for)."""

        def count(state: str) -> int:
            models = registry.models
            if state == "listed":
                return len(set(registry.listing or ()) - set(models))
            return sum(m.status == state for m in list(models.values()))

        for state in ("ready", "failed", "listed"):
            self.models_gauge.labels(state).set_function(lambda state=state: count(state))

    def set_models(self, models: dict) -> None:
        """Record every model's serving version (model_changed for each)."""
        for name, state in models.items():
            self.model_changed(name, state)

    def model_changed(self, name: str, state) -> None:
        """After the registry changed model `name` (its state, or None once gone): its serving version for labels."""
        if state is not None and state.serving is not None:
            self.versions[name] = str(state.serving.version)
        else:
            self.versions.pop(name, None)

    def _per_model(self, model: str) -> tuple:
        """The queue, compute, batch-rows and batch-requests histograms of `model`, bound once."""
        children = self._model_children.get(model)
        if children is None:
            children = self._model_children[model] = tuple(
                h.labels(model)
                for h in (self.queue_seconds, self.compute_seconds, self.batch_rows, self.batch_requests)
            )
        return children

    def request(
        self, model: str, endpoint: str, method: str, code: int, seconds: float, version: str | None = None
    ) -> None:
        key = (model, endpoint, method, code)
        child = self._request_children.get(key)
        if child is None:
            child = self._request_children[key] = self.request_seconds.labels(model, endpoint, method, str(code))
        child.observe(seconds)
        if not model or not endpoint.endswith(INFER_ENDPOINTS):
            return
        with self.lock:
            # A version named in the URL counts only once it has run: made-up versions cannot grow the labels.
            s = self.models.get((model, version)) if version else None
            s = s if s is not None else self._stats(model, None)
            if code < 400:
                s.success.add(seconds)
            else:
                s.fail.add(seconds)
                s.fail_reasons["REJECTED" if code == 503 else "BACKEND" if code >= 500 else "OTHER"] += 1

    def queue_timeout(self, model: str, queue: str) -> None:
        """A request gave up waiting: `queue` is "batch" (for a batch), "alone" (for a pool thread, a request
        run alone; both service/engine/batching.py) or "render" (a render slot)."""
        self.queue_timeouts.labels(model, queue).inc()

    def pending(self, model: str, delta: int, version: int | None = None) -> None:
        with self.lock:
            self._stats(model, version).pending += delta

    def queued(self, model: str, queue_seconds: list[float], version: int | None = None) -> None:
        """Requests that waited `queue_seconds` each before their run started (the batcher)."""
        child = self._per_model(model)[0]
        for q in queue_seconds:
            child.observe(q)
        with self.lock:
            s = self._stats(model, version)
            for q in queue_seconds:
                s.queue.add(q)

    def execution(
        self, model: str, rows: int, requests: int, compute_seconds: float, version: int | None = None
    ) -> None:
        """One onnxruntime run of `rows` rows for `requests` requests (ModelRuntime.predict: every query,
        classify, V2 infer batch and render tile)."""
        _, compute, batch_rows, batch_requests = self._per_model(model)
        compute.observe(compute_seconds)
        batch_rows.observe(rows)
        batch_requests.observe(requests)
        with self.lock:
            s = self._stats(model, version)
            s.compute_infer.add(compute_seconds, requests)
            s.inference_count += rows
            s.execution_count += 1
            s.batches[rows].add(compute_seconds)
            s.last_inference_ms = int(time.time() * 1000)

    def cache(self, model: str, hit: bool, seconds: float, version: int | None = None) -> None:
        """One render cache lookup; `seconds` is the request's time to its answer (Triton's hit/miss duration)."""
        with self.lock:
            s = self._stats(model, version)
            (s.cache_hit if hit else s.cache_miss).add(seconds)

    # -- reading ---------------------------------------------------------------------------------
    def triton_text(self) -> str:
        """Triton's counters in the Prometheus text format, under Triton's exact names."""
        with self.lock:
            snapshot = dict(self.models)
        return triton_text(snapshot, self.cache_info() if self.cache_info else None)

    def exposition(self) -> bytes:
        return self.triton_text().encode() + generate_latest(self.registry)

    def stats_json(self, name: str, version: str) -> dict:
        """One model version's entry of `model_stats` in Triton's statistics extension."""
        with self.lock:
            return stats_json(name, version, self.models.get((name, str(version))) or ModelStats())
