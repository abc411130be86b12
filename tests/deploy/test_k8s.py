"""Kubernetes and KServe manifests: valid YAML, the same image settings, probes on the
service's health endpoints, and an HPA that targets the Deployment."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from .conftest import ROOT, load_deploy_module

model = load_deploy_module("dockerfile_model")
MANIFESTS = sorted((ROOT / "deploy" / "k8s").glob("*.yaml")) + sorted((ROOT / "deploy" / "kserve").glob("*.yaml"))


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


@pytest.fixture(scope="module")
def k8s() -> dict[str, dict]:
    found = {}
    for path in (ROOT / "deploy" / "k8s").glob("*.yaml"):
        for d in docs(path):
            found[d["kind"]] = d
    return found


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_valid_yaml_with_kind_and_name(path: Path):
    for d in docs(path):
        assert {"apiVersion", "kind"} <= d.keys()
        if d["kind"] != "Kustomization":
            assert d["metadata"]["name"]


def test_kustomization_lists_every_manifest(k8s):
    listed = set(k8s["Kustomization"]["resources"])
    assert listed == {p.name for p in (ROOT / "deploy" / "k8s").glob("*.yaml")} - {"kustomization.yaml"}


def check_container(container: dict, runtime_env: dict[str, str]) -> None:
    env = {e["name"]: e["value"] for e in container["env"]}
    for key in ("INR_MODELS", "INR_HOST", "INR_PORT", "INR_DEVICE"):
        assert env[key] == runtime_env[key], key
    port = int(env["INR_PORT"])
    assert port in [p["containerPort"] for p in container["ports"]]
    assert container["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert int(env["INR_THREADS"]) == int(env["OMP_NUM_THREADS"]) == int(container["resources"]["limits"]["cpu"])


def runtime_env(dockerfile) -> dict[str, str]:
    return {k: v for i in dockerfile.stage("runtime").all("ENV") for k, v in model.parse_env(i)}


def test_deployment_runs_the_image_non_root_with_probes(k8s, dockerfile):
    pod = k8s["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    check_container(container, runtime_env(dockerfile))
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["startupProbe"]["httpGet"]["path"] == "/health/ready"
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named[container["livenessProbe"]["httpGet"]["port"]] == 8000
    labels = k8s["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert k8s["Service"]["spec"]["selector"].items() <= labels.items()
    assert k8s["Deployment"]["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_hpa_scales_the_deployment_on_cpu(k8s):
    hpa = k8s["HorizontalPodAutoscaler"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": k8s["Deployment"]["metadata"]["name"]}
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"


def test_kserve_custom_predictor_uses_the_same_image_settings(dockerfile):
    (isvc,) = docs(ROOT / "deploy" / "kserve" / "inferenceservice.yaml")
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1" and isvc["kind"] == "InferenceService"
    (container,) = isvc["spec"]["predictor"]["containers"]
    assert container["name"] == "kserve-container"
    check_container(container, runtime_env(dockerfile))


def test_kserve_triton_example_serves_the_model_repository():
    (isvc,) = docs(ROOT / "deploy" / "kserve" / "inferenceservice-triton.yaml")
    model_spec = isvc["spec"]["predictor"]["model"]
    assert model_spec["modelFormat"]["name"] == "triton"
    assert model_spec["storageUri"]
