"""deploy/k8s-s3: the Kubernetes manifests with the models and the uploads on S3 (docs/s3.md, "Models on
S3"). What `kubectl kustomize` makes of them validates strictly against the Kubernetes API, and no pod of the api or
the fit workers mounts a PersistentVolumeClaim: the models come from the bucket into each api pod's own cache."""

from __future__ import annotations

import shutil

import kubernetes_validate
import pytest
import yaml

from modelrepo import parse_s3

from .conftest import ROOT
from .k8s import kustomize

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (its built-in kustomize) is missing")


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict]:
    docs = [d for d in yaml.safe_load_all(kustomize(ROOT / "deploy" / "k8s-s3")) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_the_manifests_validate_strictly(objects):
    for doc in objects.values():
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_no_claim_and_no_pod_mounts_one(objects):
    assert not [k for k in objects if k[0] == "PersistentVolumeClaim"]
    for name in ("inr-serve", "inr-serve-worker"):
        spec = objects["Deployment", name]["spec"]["template"]["spec"]
        assert not [v for v in spec["volumes"] if "persistentVolumeClaim" in v], name
        assert not spec.get("initContainers"), "nothing to seed: the models are in the bucket"


def test_api_and_workers_read_one_bucket_and_the_job_store(objects):
    config = objects["ConfigMap", "inr-serve-s3"]["data"]
    assert parse_s3(config["INR_MODELS"]).endpoint and parse_s3(config["INR_FIT_UPLOADS"]).bucket
    for name in ("inr-serve", "inr-serve-worker"):
        (c,) = objects["Deployment", name]["spec"]["template"]["spec"]["containers"]
        refs = [r.get("configMapRef", r.get("secretRef"))["name"] for r in c["envFrom"]]
        assert refs == ["inr-serve-fits", "inr-serve-s3", "inr-serve-s3"], name
        assert "INR_MODELS" not in {e["name"] for e in c.get("env", [])}, "an env entry would hide the ConfigMap's"
        assert "--models" not in c.get("args", [])
    api = objects["Deployment", "inr-serve"]["spec"]["template"]["spec"]
    (c,) = api["containers"]
    cache = {e["name"]: e.get("value") for e in c["env"]}["INR_MODEL_CACHE"]
    # a folder inside the emptyDir: the service makes it 0700 (an emptyDir is world-writable; modelrepo/private_dir.py)
    mount = next(m for m in c["volumeMounts"] if cache.startswith(m["mountPath"].rstrip("/") + "/"))
    assert "emptyDir" in next(v for v in api["volumes"] if v["name"] == mount["name"])


def test_each_pod_keeps_its_tmp_and_mounts_every_volume_it_has(objects):
    """The overlay deletes the claims' mounts by mountPath, the key volumeMounts merge on: the read-only root's /tmp
    stays an emptyDir (delete entries keyed by name dropped every mount but the new ones, and neither pod could
    start: tests/containers/test_kube_s3.py runs them)."""
    for name, paths in (("inr-serve", {"/cache", "/tmp"}), ("inr-serve-worker", {"/tmp"})):
        spec = objects["Deployment", name]["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        assert set(mounts) == paths, (name, mounts)
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert set(mounts.values()) == set(volumes), (name, mounts, volumes)
        assert all("emptyDir" in volumes[v] for v in mounts.values()), (name, volumes)
