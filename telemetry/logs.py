"""Log records with the trace and span ids of the span current when they were logged, as text or as JSON
lines (INR_LOG_FORMAT=json), for the service and the fit workers alike.

`TraceIds` is a handler filter: it sets `record.trace_id` and `record.span_id` ("" when traces are off or no
span is current), so that a log line leads to its trace, and `record.trace`, the two as ` trace_id=… span_id=…`
for text formats to end with (`%(trace)s`, empty without a span, so that text logs are unchanged with traces
off). `JsonFormatter` writes one object per line.
"""

from __future__ import annotations

import logging
import sys
import time

import orjson
from opentelemetry import trace

from . import tracing

FORMATS = ("text", "json")
TEXT = "%(levelname)s %(name)s: %(message)s%(trace)s"


class TraceIds(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.trace_id = record.span_id = record.trace = ""
        if tracing.ON:
            c = trace.get_current_span().get_span_context()
            if c.is_valid:
                record.trace_id, record.span_id = f"{c.trace_id:032x}", f"{c.span_id:016x}"
                record.trace = f" trace_id={record.trace_id} span_id={record.span_id}"
        return True


class JsonFormatter(logging.Formatter):
    """{"time", "level", "logger", "message", "trace_id", "span_id", and "exception" when there is one}."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if getattr(record, "trace_id", ""):
            out.update(trace_id=record.trace_id, span_id=record.span_id)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out).decode()

    converter = time.gmtime


def check_format(value: str, name: str = "INR_LOG_FORMAT") -> str:
    if value not in FORMATS:
        raise ValueError(f"{name}: expected text or json, got {value!r}")
    return value


class StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record is emitted (logging's last-resort handler does the
    same), so a stream swapped out and closed since (a test's capture, a redirect) is never written to."""

    def __init__(self):
        super().__init__()

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def configure(level: int | str, fmt: str = "text") -> None:
    """The root logger on stderr, in `fmt`, with trace ids (logging.basicConfig's place)."""
    handler = StderrHandler()
    handler.addFilter(TraceIds())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
