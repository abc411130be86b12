"""Traces and logs of every process here: the service and the fit workers (docs/operations.md, "Traces").

    config.py     the OTEL_* settings and Triton's --trace-config, checked at start
    tracing.py    the process's tracer: off (a no-op) unless installed
    spanqueue.py  the SDK's batch processor, counting the spans that never reach the collector
    logs.py       log records with trace ids, as text or JSON lines

Torch-free and service-free: `python -m service` and `python -m training worker` both import it.
"""
