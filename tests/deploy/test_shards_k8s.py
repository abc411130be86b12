"""Sharding on Kubernetes (docs/sharding.md, "Sharding"): deploy/k8s/router.yaml runs the nginx of compose, with
the same files (deploy/k8s/nginx/ are copies of deploy/nginx/, put into a ConfigMap by kustomize) mounted where
compose mounts them, in front of the headless Service of the api pods; the public Service `inr-serve` goes to
it. test_k8s.py validates the files against the Kubernetes API schemas; this checks that the pieces fit."""

from __future__ import annotations

import re
import shutil

import pytest
import yaml

from .conftest import ROOT
from .k8s import K8S, container, env, kustomize, load_objects

FILES = ("nginx.conf.template", "15-container-resolver.envsh", "40-api-shards.sh")


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict]:
    return load_objects()


@pytest.fixture(scope="module")
def router(objects) -> dict:
    return objects["Deployment", "inr-serve-router"]


def ports(c: dict) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in c["ports"]}


def selects(service: dict, deployment: dict) -> bool:
    return service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize("name", FILES)
def test_the_kustomize_copies_are_the_compose_files(name):
    ours, compose = K8S / "nginx" / name, ROOT / "deploy" / "nginx" / name
    assert ours.read_bytes() == compose.read_bytes(), f"copy deploy/nginx/{name} to deploy/k8s/nginx/"


def test_the_router_mounts_the_files_where_compose_mounts_them(router):
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["nginx"]
    c = container(router)
    assert c["image"] == compose["image"]
    wanted = {m["target"]: m["source"].rsplit("/", 1)[1] for m in compose["volumes"]}
    mounted = {m["mountPath"]: m.get("subPath") for m in c["volumeMounts"] if m["name"] == "nginx-files"}
    assert mounted == wanted
    (files,) = [v for v in router["spec"]["template"]["spec"]["volumes"] if v["name"] == "nginx-files"]
    assert files["configMap"]["defaultMode"] & 0o111 == 0o111, "the entrypoint runs only executable scripts"
    e = env(c)
    for key in ("NGINX_ENVSUBST_OUTPUT_DIR", "NGINX_ENVSUBST_FILTER"):
        assert e[key] == compose["environment"][key], key


def test_the_router_is_non_root_with_a_read_only_root_and_writes_only_its_empty_dirs(router):
    pod = router["spec"]["template"]["spec"]
    c = container(router)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    empty = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    writable = {m["mountPath"] for m in c["volumeMounts"] if m["name"] in empty}
    # the rendered nginx.conf, the servers file of 40-api-shards.sh, and every path the template writes
    assert env(c)["NGINX_ENVSUBST_OUTPUT_DIR"] in writable
    script = (ROOT / "deploy" / "nginx" / "40-api-shards.sh").read_text()
    servers_file = re.search(r"file=\$\{NGINX_SHARDS_FILE:-(\S+)\}", script).group(1)
    template = (ROOT / "deploy" / "nginx" / "nginx.conf.template").read_text()
    paths = re.findall(r"^\s*(?:pid|\w+_temp_path|proxy_cache_path)\s+(\S+)", template, re.M)
    for path in [servers_file, *[p.rstrip(";") for p in paths]]:
        assert any(path.startswith(w + "/") for w in writable), path
    assert c["readinessProbe"]["httpGet"]["path"] == "/nginx-health" == c["livenessProbe"]["httpGet"]["path"]


def test_the_router_shards_over_the_headless_service_of_the_api_pods(objects, router):
    api = objects["Deployment", "inr-serve"]
    headless = objects["Service", "inr-serve-api"]
    assert headless["spec"]["clusterIP"] == "None", "one DNS answer per ready pod, not a cluster IP"
    assert selects(headless, api) and not selects(headless, router)
    assert not headless["spec"].get("publishNotReadyAddresses"), "a pod not ready is not on the ring"
    e = env(container(router))
    assert e["NGINX_API_HOST"] == "inr-serve-api.$(POD_NAMESPACE).svc.cluster.local"
    (namespace,) = [v for v in container(router)["env"] if v["name"] == "POD_NAMESPACE"]
    assert namespace["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    names = [v["name"] for v in container(router)["env"]]
    assert names.index("POD_NAMESPACE") < names.index("NGINX_API_HOST"), "$(VAR) needs VAR defined before"
    # the api's ports are those nginx sends to: 8000 (40-api-shards.sh's default) and gRPC's 8001
    template = (ROOT / "deploy" / "nginx" / "nginx.conf.template").read_text()
    grpc = int(re.search(r"grpc://\$\{NGINX_API_HOST\}:(\d+);", template).group(1))
    assert ports(container(api)) == {"http": 8000, "grpc": grpc}
    assert {p["name"]: p["targetPort"] for p in headless["spec"]["ports"]} == {"http": "http", "grpc": "grpc"}


def test_the_public_service_goes_to_the_router_on_the_templates_ports(objects, router):
    service = objects["Service", "inr-serve"]
    assert selects(service, router) and not selects(service, objects["Deployment", "inr-serve"])
    template = (ROOT / "deploy" / "nginx" / "nginx.conf.template").read_text()
    http = int(re.search(r"listen\s+(\d+);", template).group(1))
    grpc = int(re.search(r"listen\s+(\d+)\s+http2;", template).group(1))
    assert ports(container(router)) == {"http": http, "grpc": grpc}
    targets = {p["name"]: p["targetPort"] for p in service["spec"]["ports"]}
    assert targets == {"http": "http", "grpc": "grpc"}
    pdb = objects["PodDisruptionBudget", "inr-serve-router"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= router["spec"]["template"]["metadata"]["labels"].items()
    assert router["spec"]["replicas"] > pdb["spec"]["minAvailable"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) is not installed")
def test_kustomize_makes_the_configmap_the_router_mounts():
    out = kustomize(K8S)
    built = [d for d in yaml.safe_load_all(out) if d]
    (config,) = [d for d in built if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("inr-serve-nginx")]
    assert config["data"] == {name: (ROOT / "deploy" / "nginx" / name).read_text() for name in FILES}
    (router,) = [d for d in built if d["kind"] == "Deployment" and d["metadata"]["name"] == "inr-serve-router"]
    (volume,) = [v for v in router["spec"]["template"]["spec"]["volumes"] if v["name"] == "nginx-files"]
    assert volume["configMap"]["name"] == config["metadata"]["name"], "the generated name, with its hash"
