"""Fit metrics kept in the store (docs/fits.md, "Metrics"). Counters are added by the record's writer in the
same transaction as the state change they count (fitstore.backends), so each finish, retry and failure
counts exactly once, whichever process (worker, reaper, API) wrote it, and every API replica's /metrics
shows the same cluster-wide figures. Histograms are kept as one counter per bucket, plus count and sum.
"""

from __future__ import annotations

PREFIX = "m:"
DURATION_BUCKETS = (1, 2, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600)  # seconds of the attempt that succeeded
RATE_BUCKETS = (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)  # optimisation steps per second
HISTOGRAMS = {"duration": DURATION_BUCKETS, "steps_rate": RATE_BUCKETS}
# The reasons a fit fails or is retried: a fixed set, so that labels cannot grow.
FAILURES = ("deadline", "worker_died", "invalid", "error")
RETRIES = ("worker_died", "worker_stopped", "lost_message")


def _observe(incr: dict, name: str, value: float) -> None:
    bounds = HISTOGRAMS[name]
    bucket = next((str(i) for i, b in enumerate(bounds) if value <= b), "inf")
    incr[f"{PREFIX}{name}:b:{bucket}"] = 1
    incr[f"{PREFIX}{name}:count"] = 1
    incr[f"{PREFIX}{name}:sum_milli"] = round(value * 1000)


def finished(rec: dict, state: str, reason: str | None, now: float) -> dict:
    """The counters a job's end adds: its final state; for a failure its reason; for a success the attempt's
    duration and steps per second."""
    incr = {f"{PREFIX}finished:{state}": 1}
    if state == "failed":
        incr[f"{PREFIX}failures:{reason if reason in FAILURES else 'error'}"] = 1
    if state == "succeeded":
        seconds = max(0.0, now - (rec.get("attempt_started") or rec.get("started") or now))
        _observe(incr, "duration", seconds)
        if seconds > 0:
            _observe(incr, "steps_rate", rec["steps"] / seconds)
    return incr


def retried(reason: str) -> dict:
    return {f"{PREFIX}retries:{reason}": 1}


def histogram(counters: dict[str, int], name: str) -> tuple[list[tuple[str, int]], float]:
    """Cumulative Prometheus buckets [(le, count)] ending with +Inf, and the sum."""
    bounds, total, out = HISTOGRAMS[name], 0, []
    for i, b in enumerate(bounds):
        total += counters.get(f"{PREFIX}{name}:b:{i}", 0)
        out.append((f"{b:g}", total))
    out.append(("+Inf", total + counters.get(f"{PREFIX}{name}:b:inf", 0)))
    return out, counters.get(f"{PREFIX}{name}:sum_milli", 0) / 1000


def labelled(counters: dict[str, int], kind: str, labels: tuple[str, ...]) -> dict[str, int]:
    """{label: count} of `m:KIND:LABEL` counters, every known label present (0 when never counted)."""
    return {label: counters.get(f"{PREFIX}{kind}:{label}", 0) for label in labels}
