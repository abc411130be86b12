"""Keep-alive and graceful-shutdown settings agree across the Dockerfile, compose, Kubernetes and
the service: the keep-alive outlives nginx's idle timeout, and every orchestrator waits longer than
the drain before it kills the process."""

from __future__ import annotations

import re

import pytest
import yaml

from service.settings import Settings

from .conftest import ROOT

NGINX_KEEPALIVE_S = 75  # nginx's default keepalive_timeout, the longest common proxy idle timeout
KEYS = ("INR_TIMEOUT_KEEP_ALIVE", "INR_GRACEFUL_SHUTDOWN_S")


def seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(s?)", str(text))
    assert m, f"not a duration in seconds: {text!r}"
    return float(m.group(1))


def check(env: dict[str, str], kill_after: float, where: str) -> None:
    for key in KEYS:
        assert key in env, f"{where} does not set {key}"
        assert key[4:].lower() in Settings.model_fields, f"{key} is no setting"
    assert float(env["INR_TIMEOUT_KEEP_ALIVE"]) > NGINX_KEEPALIVE_S, where
    # the drain, plus the one second uvicorn's own shutdown gets (service/__main__.py)
    assert kill_after > float(env["INR_GRACEFUL_SHUTDOWN_S"]) + 1, where


def test_settings_defaults_outlive_proxies():
    s = Settings()
    assert s.timeout_keep_alive > NGINX_KEEPALIVE_S
    assert 0 < s.graceful_shutdown_s < 30  # docker's and Kubernetes' usual kill timeouts


@pytest.mark.parametrize("target", ["runtime", "gpu"])
def test_image_sets_them_and_stops_with_sigterm(dockerfile, target):
    stage = dockerfile.stage(target)
    env = stage.env()
    assert stage.last("STOPSIGNAL").value == "SIGTERM"
    check(env, kill_after=30, where=f"Dockerfile {target} (with `docker stop -t 30`)")


@pytest.mark.parametrize("service", ["api", "api-gpu"])
def test_compose_waits_longer_than_the_drain(service):
    api = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"][service]
    check(api["environment"], seconds(api["stop_grace_period"]), f"compose {service}")


def test_kubernetes_waits_longer_than_the_drain():
    dep = yaml.safe_load((ROOT / "deploy" / "k8s" / "deployment.yaml").read_text())
    pod = dep["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    check(
        {e["name"]: e["value"] for e in container["env"] if "valueFrom" not in e},
        pod["terminationGracePeriodSeconds"],
        "k8s",
    )
