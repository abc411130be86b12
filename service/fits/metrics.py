"""The fit metrics at GET /metrics (docs/fits.md, "Metrics"), read from the job store at each scrape.

Workers export nothing themselves: what they do is already in the store (records, heartbeats, and the
counters the record's writer adds in the transaction that changes a job's state, fitstore.metrics), so
any API replica answers the same cluster-wide figures, a worker needs no port or scrape target, and a
worker that died still counts.

- gauges: `inr_fit_jobs{state}` (among the newest 200 jobs), `inr_fit_queue_depth` (jobs waiting for a
  worker), `inr_fit_running`, `inr_fit_workers` (live heartbeats), `inr_fit_queue_messages` (huey's queue
  and schedule), `inr_fit_store_up` (0 when the store could not be read: the others are then left out);
- counters: `inr_fit_finished_total{state}`, `inr_fit_failures_total{reason}`, `inr_fit_retries_total{reason}`;
- histograms: `inr_fit_duration_seconds` (the attempt that succeeded, claim to written version) and
  `inr_fit_steps_per_second` (its steps over that time).
"""

from __future__ import annotations

import logging

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from fitstore import FINISHED, STATES
from fitstore import metrics as fitmetrics

log = logging.getLogger(__name__)


def snapshot(fits) -> dict | None:
    """What a scrape shows, read from the store; None while a SQLite store has not been created (no fit yet)."""
    if not fits.created():
        return None
    store = fits.store()
    now = store.now()
    records = store.list()
    return {
        "states": {s: sum(r["state"] == s for r in records) for s in STATES},
        "workers": len(store.workers(now)),
        "counters": store.metric_counters(),
        "messages": store.huey.pending_count() + store.huey.scheduled_count(),
    }


class FitCollector:
    def __init__(self, fits):
        self.fits = fits

    def collect(self):
        try:
            snap = snapshot(self.fits)
        except Exception as e:  # noqa: BLE001 - a store that cannot be read must not fail the whole scrape
            log.warning("fit metrics: the job store could not be read: %s", e)
            yield GaugeMetricFamily("inr_fit_store_up", "1 when the fit job store answered this scrape", value=0)
            return
        snap = snap or {"states": dict.fromkeys(STATES, 0), "workers": 0, "counters": {}, "messages": 0}
        states, counters = snap["states"], snap["counters"]
        yield GaugeMetricFamily("inr_fit_store_up", "1 when the fit job store answered this scrape", value=1)
        jobs = GaugeMetricFamily("inr_fit_jobs", "fit jobs by state, among the newest 200", labels=["state"])
        for state in STATES:
            jobs.add_metric([state], states[state])
        yield jobs
        yield GaugeMetricFamily("inr_fit_queue_depth", "fit jobs queued, waiting for a worker", value=states["queued"])
        yield GaugeMetricFamily("inr_fit_running", "fits running now", value=states["running"])
        yield GaugeMetricFamily("inr_fit_workers", "fit workers with a live heartbeat", value=snap["workers"])
        yield GaugeMetricFamily(
            "inr_fit_queue_messages",
            "messages in the job queue and its schedule (a job's message, a retry's, a duplicate that will be dropped)",
            value=snap["messages"],
        )
        for name, doc, kind, labels in (
            ("inr_fit_finished", "fit jobs ended, by final state", "finished", tuple(sorted(FINISHED))),
            ("inr_fit_failures", "fit jobs failed, by reason", "failures", fitmetrics.FAILURES),
            ("inr_fit_retries", "fit attempts queued again, by reason", "retries", fitmetrics.RETRIES),
        ):
            family = CounterMetricFamily(name, doc, labels=["state" if kind == "finished" else "reason"])
            for label, n in fitmetrics.labelled(counters, kind, labels).items():
                family.add_metric([label], n)
            yield family
        for name, doc, key in (
            ("inr_fit_duration_seconds", "wall-clock seconds of each succeeded fit's attempt", "duration"),
            ("inr_fit_steps_per_second", "optimisation steps per second of each succeeded fit", "steps_rate"),
        ):
            buckets, total = fitmetrics.histogram(counters, key)
            yield HistogramMetricFamily(name, doc, buckets=buckets, sum_value=total)
