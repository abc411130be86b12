"""telemetry.logs: log lines carry the current span's trace and span ids (text: a ` trace_id=… span_id=…`
suffix, JSON: fields), and nothing of the kind with traces off. The tracer is the real SDK's (telemetry.tracing),
exporting to a closed port; the service's own lines are checked end to end in tests/service/test_traces_faults.py."""

from __future__ import annotations

import io
import json
import logging
import threading

from bench.common import free_port
from telemetry import tracing
from telemetry.config import read_config
from telemetry.logs import TEXT, JsonFormatter, TraceIds, configure


def logger_to(stream: io.StringIO, formatter: logging.Formatter) -> logging.Logger:
    handler = logging.StreamHandler(stream)
    handler.addFilter(TraceIds())
    handler.setFormatter(formatter)
    log = logging.getLogger(f"test-logs-{id(stream)}")
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.INFO)
    return log


def test_lines_carry_the_ids_of_the_current_span_only(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # read by the SDK's exporter itself: retries end in 1 s
    text, lines = io.StringIO(), io.StringIO()
    plain, structured = logger_to(text, logging.Formatter(TEXT)), logger_to(lines, JsonFormatter())
    plain.info("before")
    tracing.install(
        read_config(
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{free_port()}/v1/traces",
            }
        ),
        "test",
    )
    try:
        plain.info("outside a span")
        with tracing.span("work") as span:
            plain.info("inside")
            structured.info("inside %s", "json")
            c = span.get_span_context()
        structured.info("outside")
    finally:
        # long enough for the exporter's one-second retries to give up: no export thread outlives the test
        tracing.shutdown(timeout_s=5)
    assert not tracing.ON
    assert not [t.name for t in threading.enumerate() if t.name == "otel-shutdown"]
    trace_id, span_id = f"{c.trace_id:032x}", f"{c.span_id:016x}"
    assert text.getvalue().splitlines() == [
        "INFO test-logs-%d: before" % id(text),
        "INFO test-logs-%d: outside a span" % id(text),
        f"INFO test-logs-{id(text)}: inside trace_id={trace_id} span_id={span_id}",
    ]
    inside, outside = (json.loads(line) for line in lines.getvalue().splitlines())
    assert (inside["message"], inside["trace_id"], inside["span_id"], inside["level"]) == (
        "inside json",
        trace_id,
        span_id,
        "INFO",
    )
    assert "trace_id" not in outside and outside["time"].endswith("Z")


def test_root_handler_writes_to_the_stderr_of_the_moment(monkeypatch):
    """configure() once, then stderr swapped and the first one closed (as pytest's capture does between tests):
    lines go to the new stream, never "--- Logging error ---" for the closed one."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    first, second = io.StringIO(), io.StringIO()
    try:
        monkeypatch.setattr("sys.stderr", first)
        configure(logging.INFO)
        logging.getLogger("test-stderr").info("one")
        first.close()
        monkeypatch.setattr("sys.stderr", second)
        logging.getLogger("test-stderr").warning("two")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    assert second.getvalue() == "WARNING test-stderr: two\n"
