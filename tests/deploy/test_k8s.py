"""Kubernetes and KServe manifests: valid against the Kubernetes API schemas (kubernetes-validate) and
KServe's InferenceService CRD (tests/deploy/schemas), the same image settings, probes on the
service's health endpoints, and an HPA that targets the Deployment. tests/containers/test_kube.py
runs the Deployment and the KServe predictor's container with the real image."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from .conftest import ROOT

MANIFESTS = sorted((ROOT / "deploy" / "k8s").glob("*.yaml")) + sorted((ROOT / "deploy" / "kserve").glob("*.yaml"))


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


@pytest.fixture(scope="module")
def k8s() -> dict[str, dict]:
    """The api's objects by kind (those named inr-serve where a kind has several: the fit worker's and
    the job store's are checked in test_fits_k8s.py)."""
    found = {}
    for path in sorted((ROOT / "deploy" / "k8s").glob("*.yaml")):
        for d in docs(path):
            if d["kind"] not in found or d["metadata"]["name"] == "inr-serve":
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
    env = {e["name"]: e["value"] for e in container["env"] if "valueFrom" not in e}
    for key in ("INR_MODELS", "INR_HOST", "INR_PORT", "INR_DEVICE"):
        assert env[key] == runtime_env[key], key
    port = int(env["INR_PORT"])
    assert port in [p["containerPort"] for p in container["ports"]]
    assert container["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert int(env["INR_THREADS"]) == int(env["OMP_NUM_THREADS"]) == int(container["resources"]["limits"]["cpu"])


def runtime_env(dockerfile) -> dict[str, str]:
    return dockerfile.stage("runtime").env()


def test_deployment_runs_the_image_non_root_with_probes(k8s, dockerfile):
    pod = k8s["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    check_container(container, runtime_env(dockerfile))
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["startupProbe"]["httpGet"]["path"] == "/health/ready"
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named[container["livenessProbe"]["httpGet"]["port"]] == 8000
    labels = k8s["Deployment"]["spec"]["template"]["metadata"]["labels"]
    # the api pods' own Service is the headless one the router shards over (test_shards_k8s.py)
    (api_service,) = [
        d for d in docs(ROOT / "deploy" / "k8s" / "service.yaml") if d["metadata"]["name"] == "inr-serve-api"
    ]
    assert api_service["spec"]["selector"].items() <= labels.items()
    assert k8s["Deployment"]["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_hpa_scales_the_deployment_on_cpu(k8s):
    hpa = k8s["HorizontalPodAutoscaler"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": k8s["Deployment"]["metadata"]["name"],
    }
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"


def test_kserve_custom_predictor_uses_the_same_image_settings(dockerfile):
    (isvc,) = docs(ROOT / "deploy" / "kserve" / "inferenceservice.yaml")
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1" and isvc["kind"] == "InferenceService"
    (container,) = isvc["spec"]["predictor"]["containers"]
    assert container["name"] == "kserve-container"
    check_container(container, runtime_env(dockerfile))


def test_grpc_is_exposed_where_the_service_listens(k8s):
    """The Deployment names its gRPC port, the Service routes to it as h2c, and the KServe gRPC
    predictor declares it as KServe expects: one port, named h2c."""
    (container,) = k8s["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "valueFrom" not in e}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["grpc"] == int(env["INR_GRPC_PORT"]) == 8001
    (grpc,) = [p for p in k8s["Service"]["spec"]["ports"] if p["name"] == "grpc"]
    assert grpc["targetPort"] == "grpc" and grpc["appProtocol"] == "kubernetes.io/h2c"
    (isvc,) = docs(ROOT / "deploy" / "kserve" / "inferenceservice-grpc.yaml")
    (predictor,) = isvc["spec"]["predictor"]["containers"]
    env = {e["name"]: e["value"] for e in predictor["env"]}
    assert predictor["ports"] == [{"name": "h2c", "containerPort": int(env["INR_GRPC_PORT"]), "protocol": "TCP"}]
    assert predictor["readinessProbe"]["httpGet"]["port"] == int(env["INR_PORT"])


def test_kserve_triton_example_serves_the_model_repository():
    (isvc,) = docs(ROOT / "deploy" / "kserve" / "inferenceservice-triton.yaml")
    model_spec = isvc["spec"]["predictor"]["model"]
    assert model_spec["modelFormat"]["name"] == "triton"
    assert model_spec["storageUri"]


# -- against the real schemas -----------------------------------------------------------------
K8S_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]  # the oldest still-supported minor we target, newest
KSERVE_SCHEMA = next((ROOT / "tests" / "deploy" / "schemas").glob("kserve-*-inferenceservice-v1beta1.json.gz"))


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(
    "path",
    sorted(set((ROOT / "deploy" / "k8s").glob("*.yaml")) - {ROOT / "deploy" / "k8s" / "kustomization.yaml"}),
    ids=lambda p: p.name,
)
def test_k8s_manifest_validates_strictly_against_the_kubernetes_api(path: Path, version: str):
    for doc in docs(path):
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(containerPort="http"), "http"),
        (lambda d: d["spec"]["template"]["spec"].update(terminationGracePeriod=30), "terminationGracePeriod"),
        (lambda d: d["spec"].update(replicas="two"), "two"),
    ],
)
def test_the_kubernetes_schemas_catch_typos_and_wrong_types(k8s, mutate, expected):
    doc = copy.deepcopy(k8s["Deployment"])
    mutate(doc)
    with pytest.raises(kubernetes_validate.ValidationError, match=expected):
        kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


def strict(schema: dict) -> dict:
    """The CRD's schema with unknown fields rejected, as `kubectl apply --validate=strict` does
    (structural schemas otherwise prune them silently), except where the CRD preserves them."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema.setdefault("additionalProperties", False)
    elif isinstance(schema, list):
        schema = [strict(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def isvc_validator() -> jsonschema.Validator:
    schema = strict(json.loads(gzip.decompress(KSERVE_SCHEMA.read_bytes())))
    schema["properties"]["apiVersion"]["enum"] = ["serving.kserve.io/v1beta1"]
    schema["properties"]["kind"]["enum"] = ["InferenceService"]
    return jsonschema.Draft7Validator(schema)


def isvc_errors(validator, doc: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


@pytest.mark.parametrize("path", sorted((ROOT / "deploy" / "kserve").glob("*.yaml")), ids=lambda p: p.name)
def test_kserve_manifest_validates_against_the_inferenceservice_crd(path: Path, isvc_validator):
    """Against KServe's own CRD schema; its version is in the file's name (tests/deploy/schemas/README.md)."""
    for doc in docs(path):
        assert isvc_errors(isvc_validator, doc) == []


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d["spec"]["predictor"].update(minReplica=1), "minReplica"),
        (lambda d: d["spec"]["predictor"].update(scaleMetric="gpu"), "gpu"),
        (lambda d: d["spec"]["predictor"]["containers"][0]["ports"][0].update(containerPort="8000"), "8000"),
    ],
)
def test_the_crd_schema_catches_typos_and_wrong_types(isvc_validator, mutate, expected):
    (doc,) = docs(ROOT / "deploy" / "kserve" / "inferenceservice.yaml")
    mutate(doc)
    assert any(expected in e for e in isvc_errors(isvc_validator, doc))


def test_the_access_key_comes_from_an_optional_secret_shared_by_every_pod(k8s):
    """docs/access.md: every replica signs and checks tokens with one key, from the Secret inr-serve-access."""
    (container,) = k8s["Deployment"]["spec"]["template"]["spec"]["containers"]
    (entry,) = [e for e in container["env"] if e["name"] == "INR_ACCESS_SECRET"]
    ref = entry["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"], ref["optional"]) == ("inr-serve-access", "secret", True)
