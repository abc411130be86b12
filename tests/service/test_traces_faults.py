"""Traces, bad input: a trace collector that is down never slows or fails a request (its spans are
dropped and counted in inr_trace_spans_dropped_total), and a bad --trace-config or OTEL_* value is one line
at start with exit code 2, for the service and for the fit worker. JSON logs carry the request's trace id."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest

from bench.common import free_port
from tests.servers import ROOT, Server


def dropped(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(r'^inr_trace_spans_dropped_total\{reason="(\w+)"\} (\S+)$', text, re.M)
    }


def test_a_collector_that_is_down_costs_requests_nothing_and_drops_are_counted(tmp_path):
    repo = tmp_path / "models"
    shutil.copytree(ROOT / "models" / "digits", repo / "digits")
    closed = free_port()  # nothing listens there
    srv = Server(
        repo,
        "--log-level",
        "info",
        "--log-format",
        "json",
        env={
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed}",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
            "OTEL_BSP_MAX_QUEUE_SIZE": "4",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        },
    )
    with srv.running():
        assert set(dropped(srv.url)) == {"queue_full", "export_failed"}  # both series, from the start
        image = np.zeros((28, 28)).tolist()
        seconds, traces = [], set()
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            for _ in range(40):
                start = time.perf_counter()
                r = client.post("/v1/models/digits/classify", json={"images": [image]})
                seconds.append(time.perf_counter() - start)
                assert r.status_code == 200, r.text
                traces.add(r.headers["traceparent"].split("-")[1])
            deadline = time.monotonic() + 30
            while not all(dropped(srv.url).values()) and time.monotonic() < deadline:
                time.sleep(0.2)
        counts = dropped(srv.url)
        # 40 requests × 4 spans through a queue of 4 whose exports each wait 1 s for a collector that is not there
        assert counts["queue_full"] > 0 and counts["export_failed"] > 0, counts
        # each request as fast as ever: nothing waits for the exporter (one core's scheduling noise aside)
        assert max(seconds) < 1.0 and sorted(seconds)[len(seconds) // 2] < 0.2, seconds
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 10, "the stop waited for the collector"
    lines = [line for line in srv.proc.stdout.read().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is a JSON object
    access = [r for r in records if r["logger"] == "uvicorn.access" and "/classify" in r["message"]]
    assert len(access) == 40 and {r["trace_id"] for r in access} == traces, access[:2]
    assert all(len(r["span_id"]) == 16 for r in access)


BAD_SERVICE = [
    (
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"},
        [],
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER_ARG": "abc"}, [], "OTEL_TRACES_SAMPLER_ARG"),
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, [], "OTEL_TRACES_EXPORTER"),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "jaeger_remote"}, [], "OTEL_TRACES_SAMPLER"),
    (
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"},
        [],
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_BSP_MAX_QUEUE_SIZE": "0"}, [], "OTEL_BSP_MAX_QUEUE_SIZE"),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, [], "OTEL_EXPORTER_OTLP_TIMEOUT"),
    ({}, ["mode=triton"], "--trace-config mode=triton"),
    ({}, ["mode=opentelemetry", "opentelemetry,protocol=carrier-pigeon"], "--trace-config opentelemetry,protocol"),
    ({}, ["opentelemetry,url=http://host:99999/v1/traces"], "--trace-config opentelemetry,url"),
    ({}, ["rate=often"], "--trace-config rate=often"),
    ({}, ["level=TENSORS"], "--trace-config level=TENSORS"),
    ({}, ["opentelemetry,bsp_max_queue_size=-1"], "--trace-config opentelemetry,bsp_max_queue_size"),
    ({}, ["opentelemetry,colour=blue"], "--trace-config opentelemetry,colour"),
    ({}, ["justaword"], "--trace-config justaword"),
    (
        {"OTEL_TRACES_EXPORTER": "otlp"},
        ["opentelemetry,bsp_max_queue_size=8", "opentelemetry,bsp_max_export_batch_size=16"],
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    ),
]


@pytest.mark.parametrize("env, items, names", BAD_SERVICE)
def test_a_bad_trace_setting_is_one_line_and_exit_2(tmp_path, env, items, names):
    args = [a for item in items for a in ("--trace-config", item)]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    p = subprocess.run(
        [sys.executable, "-m", "service", "--models", str(tmp_path), "--port", str(free_port()), *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0], p.stderr


def test_a_bad_trace_setting_stops_the_fit_worker_in_one_line(tmp_path):
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "training",
            "worker",
            "--store",
            f"sqlite:///{tmp_path / 'f.sqlite'}",
            "--models",
            str(tmp_path),
            "--once",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and p.stderr.splitlines() == [
        "error: OTEL_EXPORTER_OTLP_PROTOCOL: 'carrier-pigeon' is not an OTLP protocol here; use grpc or http/protobuf"
    ], p.stderr
