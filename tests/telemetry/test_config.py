"""telemetry.config: the OTEL_* variables and Triton's --trace-config, read and checked as the service and the
fit worker read them (the end-to-end checks, with a real receiver, are tests/service/test_traces*.py)."""

from __future__ import annotations

import pytest

from telemetry.config import TraceConfigError, read_config, trace_config_env


def test_off_unless_an_exporter_is_named():
    assert read_config({}) is None
    assert read_config({"OTEL_TRACES_EXPORTER": "none"}) is None
    assert read_config({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}) is None


def test_the_standard_defaults_and_endpoints():
    c = read_config({"OTEL_TRACES_EXPORTER": "otlp"})
    assert (c.protocol, c.endpoint, c.sampler, c.queue_size, c.batch_size) == (
        "http/protobuf",
        "http://localhost:4318/v1/traces",
        "parentbased_always_on",
        2048,
        512,
    )
    base = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}
    assert read_config(base).endpoint == "http://collector:4318/v1/traces"  # the base URL gets the signal's path
    grpc = {**base, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}
    assert read_config(grpc).endpoint == "http://collector:4317"
    own = {
        **base,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://x.example/otlp",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
    }
    assert (read_config(own).endpoint, read_config(own).protocol) == ("https://x.example/otlp", "grpc")
    ratio = read_config(
        {
            "OTEL_TRACES_EXPORTER": "otlp,console",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.25",
        }
    )
    assert (ratio.exporters, ratio.ratio) == (("otlp", "console"), 0.25)


def test_trace_config_becomes_otel_variables():
    env = trace_config_env(
        [
            "mode=opentelemetry",
            "opentelemetry,url=collector:4318/v1/traces",
            "rate=10",
            "opentelemetry,resource=deployment.environment=prod",
            "opentelemetry,bsp_max_queue_size=64",
        ],
        {"OTEL_RESOURCE_ATTRIBUTES": "team=vision"},
    )
    assert env["OTEL_TRACES_EXPORTER"] == "otlp"
    assert env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == "http://collector:4318/v1/traces"
    assert (env["OTEL_TRACES_SAMPLER"], float(env["OTEL_TRACES_SAMPLER_ARG"])) == ("parentbased_traceidratio", 0.1)
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == "team=vision,deployment.environment=prod"
    c = read_config(env)
    assert (c.protocol, c.endpoint, c.queue_size, c.ratio) == (
        "http/protobuf",
        "http://collector:4318/v1/traces",
        64,
        0.1,
    )
    assert trace_config_env(["rate=0"], {})["OTEL_TRACES_SAMPLER"] == "parentbased_always_off"
    assert read_config(trace_config_env(["mode=opentelemetry", "level=OFF"], {})) is None


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "http/json is not supported"),
        ({"OTEL_TRACES_SAMPLER_ARG": "1.5"}, "OTEL_TRACES_SAMPLER_ARG"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://collector"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        ({"OTEL_BSP_SCHEDULE_DELAY": "1e3"}, "OTEL_BSP_SCHEDULE_DELAY"),
    ],
)
def test_a_bad_value_names_its_variable(env, needle):
    with pytest.raises(TraceConfigError, match=needle):
        read_config({"OTEL_TRACES_EXPORTER": "otlp", **env})
