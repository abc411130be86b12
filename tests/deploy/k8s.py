"""The k8s manifests (deploy/k8s/*.yaml) as the deploy tests read them: every object by (kind, name), and the
parts of a Deployment they look at."""

from __future__ import annotations

import subprocess

import yaml

from .conftest import ROOT

K8S = ROOT / "deploy" / "k8s"


def load_objects() -> dict[tuple[str, str], dict]:
    found = {}
    for path in sorted(K8S.glob("*.yaml")):
        for d in yaml.safe_load_all(path.read_text()):
            if d and d["kind"] != "Kustomization":
                found[d["kind"], d["metadata"]["name"]] = d
    return found


def pod(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]


def container(deployment: dict) -> dict:
    (c,) = pod(deployment)["containers"]
    return c


def env(c: dict) -> dict[str, str]:
    """The container's plain values (an entry from a Secret, `valueFrom`, is not known here)."""
    return {e["name"]: e.get("value") for e in c.get("env", []) if "valueFrom" not in e}


def kustomize(folder) -> str:
    """`kubectl kustomize FOLDER`: the manifests as kubectl would apply them."""
    return subprocess.run(["kubectl", "kustomize", str(folder)], capture_output=True, text=True, check=True).stdout
