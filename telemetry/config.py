"""Trace settings, shared by the service and the fit workers: the standard `OTEL_*` environment variables,
and Triton's `--trace-config` translated into them (docs/operations.md, "Traces").

Off unless `OTEL_TRACES_EXPORTER` names an exporter (`otlp`, or `console` to print spans) or
`--trace-config mode=opentelemetry` is given. Every value is checked here, at start, so that a bad one is one
line naming the variable or option (exit 2), never a warning from the SDK and a silent fallback.
Torch-free and service-free: `python -m service` and `python -m training worker` both read it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import urlparse

PROTOCOLS = ("grpc", "http/protobuf")
EXPORTERS = ("otlp", "console", "none")
RATIO_SAMPLERS = ("traceidratio", "parentbased_traceidratio")
SAMPLERS = ("always_on", "always_off", "parentbased_always_on", "parentbased_always_off", *RATIO_SAMPLERS)
DEFAULT_PORT = {"grpc": 4317, "http/protobuf": 4318}
HTTP_PATH = "/v1/traces"
BSP = {
    "OTEL_BSP_MAX_QUEUE_SIZE": 2048,
    "OTEL_BSP_SCHEDULE_DELAY": 5000,
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": 512,
    "OTEL_BSP_EXPORT_TIMEOUT": 30000,
}
# --trace-config opentelemetry,KEY=VALUE → the variable it sets (Triton's keys, plus `protocol`)
OTEL_KEYS = {
    "url": "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "protocol": "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "bsp_max_queue_size": "OTEL_BSP_MAX_QUEUE_SIZE",
    "bsp_schedule_delay": "OTEL_BSP_SCHEDULE_DELAY",
    "bsp_max_export_batch_size": "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
}


class TraceConfigError(ValueError):
    """A bad trace setting; the message names the variable or option and the valid values."""


@dataclass(frozen=True)
class TraceConfig:
    exporters: tuple[str, ...]  # "otlp" and/or "console"
    protocol: str  # grpc | http/protobuf
    endpoint: str  # the traces URL the exporter sends to
    sampler: str
    ratio: float | None  # the ratio samplers' argument
    queue_size: int
    schedule_delay_ms: int
    batch_size: int
    export_timeout_ms: int


def _positive(name: str, text: str, integer: bool = True) -> float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        value = None
    if value is None or not value > 0 or value == float("inf"):
        kind = "whole number" if integer else "number"
        raise TraceConfigError(f"{name}: expected a positive {kind}, got {text!r}")
    return value


def check_protocol(name: str, value: str) -> str:
    if value not in PROTOCOLS:
        extra = " (http/json is not supported by the Python SDK)" if value == "http/json" else ""
        raise TraceConfigError(f"{name}: {value!r} is not an OTLP protocol here{extra}; use grpc or http/protobuf")
    return value


def check_url(name: str, value: str) -> str:
    try:
        u = urlparse(value)
        u.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
    except ValueError as e:
        raise TraceConfigError(f"{name}: {value!r} is not a URL ({e})") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise TraceConfigError(f"{name}: expected http(s)://HOST[:PORT][/PATH], got {value!r}")
    return value


def check_ratio(name: str, value: str) -> float:
    try:
        ratio = float(value)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise TraceConfigError(f"{name}: expected a sampling ratio from 0 to 1, got {value!r}")
    return ratio


def _endpoint(env: Mapping[str, str], protocol: str) -> str:
    """The traces URL: the signal's own variable as it is, else the base one (plus /v1/traces for HTTP)."""
    own = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if own:
        return check_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", own)
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or f"http://localhost:{DEFAULT_PORT[protocol]}"
    check_url("OTEL_EXPORTER_OTLP_ENDPOINT", base)
    return base if protocol == "grpc" else base.rstrip("/") + HTTP_PATH


def read_config(env: Mapping[str, str] | None = None) -> TraceConfig | None:
    """The trace settings in `env` (default: os.environ); None when traces are off. TraceConfigError names
    the first bad value."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "none").split(",") if n.strip()]
    for n in names:
        if n not in EXPORTERS:
            raise TraceConfigError(f"OTEL_TRACES_EXPORTER: unknown exporter {n!r}; use otlp, console or none")
    exporters = tuple(dict.fromkeys(n for n in names if n != "none"))
    if not exporters:
        return None
    pvar = (
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
        if env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "").strip()
        else "OTEL_EXPORTER_OTLP_PROTOCOL"
    )
    protocol = check_protocol(pvar, env.get(pvar, "").strip() or "http/protobuf")
    endpoint = _endpoint(env, protocol)
    for var in ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"):
        if env.get(var, "").strip():  # read by the exporter itself (the Python SDK reads seconds)
            _positive(var, env[var].strip(), integer=False)
    sampler = env.get("OTEL_TRACES_SAMPLER", "").strip().lower() or "parentbased_always_on"
    if sampler not in SAMPLERS:
        raise TraceConfigError(f"OTEL_TRACES_SAMPLER: unknown sampler {sampler!r}; use one of {', '.join(SAMPLERS)}")
    arg = env.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    ratio = check_ratio("OTEL_TRACES_SAMPLER_ARG", arg) if arg else None
    if sampler in RATIO_SAMPLERS and ratio is None:
        ratio = 1.0  # the specification's default
    bsp = {
        var: int(_positive(var, env[var].strip())) if env.get(var, "").strip() else default
        for var, default in BSP.items()
    }
    if not env.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "").strip():  # the default batch fits a smaller queue
        bsp["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"] = min(
            BSP["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"], bsp["OTEL_BSP_MAX_QUEUE_SIZE"]
        )
    if bsp["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"] > bsp["OTEL_BSP_MAX_QUEUE_SIZE"]:
        raise TraceConfigError(
            f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE ({bsp['OTEL_BSP_MAX_EXPORT_BATCH_SIZE']}) must be at "
            f"most OTEL_BSP_MAX_QUEUE_SIZE ({bsp['OTEL_BSP_MAX_QUEUE_SIZE']})"
        )
    return TraceConfig(exporters, protocol, endpoint, sampler, ratio, *bsp.values())


def _rate(item: str, value: str) -> dict[str, str]:
    """Triton's `rate=N`: one request in N starts a trace; 0 traces only requests that bring a sampled context."""
    if not value.isdigit():
        raise TraceConfigError(f"--trace-config {item}: rate must be a whole number (0: only propagated traces)")
    n = int(value)
    if n == 0:
        return {"OTEL_TRACES_SAMPLER": "parentbased_always_off"}
    if n == 1:
        return {"OTEL_TRACES_SAMPLER": "parentbased_always_on"}
    return {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": repr(1 / n)}


def _global(item: str, key: str, value: str) -> dict[str, str]:
    if key == "mode":
        if value != "opentelemetry":
            raise TraceConfigError(f"--trace-config {item}: only mode=opentelemetry is supported here")
        return {"OTEL_TRACES_EXPORTER": "otlp"}
    if key == "rate":
        return _rate(item, value)
    if key == "level":
        if value.upper() not in ("OFF", "TIMESTAMPS"):
            raise TraceConfigError(
                f"--trace-config {item}: level must be TIMESTAMPS or OFF (TENSORS is not "
                "supported in OpenTelemetry mode)"
            )
        return {"OTEL_TRACES_EXPORTER": "none"} if value.upper() == "OFF" else {}
    raise TraceConfigError(
        f"--trace-config {item}: unknown setting {key!r}; use mode, rate, level or "
        f"opentelemetry,{{{','.join([*OTEL_KEYS, 'resource'])}}}=VALUE"
    )


def _otel(item: str, key: str, value: str, env: Mapping[str, str]) -> dict[str, str]:
    name = f"--trace-config {item}"
    if key == "resource":
        k, eq, v = value.partition("=")
        if not eq or not k.strip():
            raise TraceConfigError(f"{name}: expected resource=KEY=VALUE")
        previous = env.get("OTEL_RESOURCE_ATTRIBUTES", "")
        return {"OTEL_RESOURCE_ATTRIBUTES": f"{previous},{k.strip()}={v.strip()}".lstrip(",")}
    if key not in OTEL_KEYS:
        raise TraceConfigError(f"{name}: unknown setting {key!r}; use one of {', '.join([*OTEL_KEYS, 'resource'])}")
    if key == "url":
        value = value if "://" in value else f"http://{value}"  # Triton's form is host:port/path
        check_url(name, value)
    elif key == "protocol":
        check_protocol(name, value)
    else:
        _positive(name, value)
    return {OTEL_KEYS[key]: value}


def trace_config_env(items: list[str] | None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`--trace-config` items (Triton's `KEY=VALUE` and `opentelemetry,KEY=VALUE`) as the OTEL_* variables
    they set, over `env` (default: os.environ): the whole environment the service's processes read."""
    out = dict(os.environ if env is None else env)
    for item in items or []:
        mode, comma, rest = item.partition(",")
        setting = rest if comma else item
        key, eq, value = setting.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not value:
            raise TraceConfigError(f"--trace-config {item}: expected KEY=VALUE or opentelemetry,KEY=VALUE")
        if comma and mode.strip() != "opentelemetry":
            raise TraceConfigError(f"--trace-config {item}: only opentelemetry settings are supported here")
        out.update(_otel(item, key, value, out) if comma else _global(item, key, value))
    return out
