"""deploy/k8s-s3 run by `podman kube play` as `kubectl kustomize` renders it (docs/s3.md, "Models on S3"):
the api Deployment and the fit worker Deployment with no ReadWriteMany claim, the models and the uploads in a bucket
of a real S3 server, the fit jobs in the Redis Deployment of deploy/k8s. The api pod pulls a pushed model from the
bucket into its own cache and serves a tile; a fit POSTed to the api pod is fitted by the worker pod, its upload read
back from the bucket's uploads/, published into the bucket, and served by the api pod: the two pods share no folder.
No cluster runs here; tests/deploy/test_s3_k8s.py validates the same render against the Kubernetes API.

Things differ from the render only where a cluster would supply them:
- the S3 server: the ConfigMap names `s3.storage.svc:8333`, a Service elsewhere in the cluster; here the suite's S3
  image (deploy/s3, Swift's S3 API, as docker-compose.s3.yml runs it) under that name, a network alias on a Podman
  network of the suite's own, and the bucket filled once with `python -m modelrepo push` (run as a one-off container
  of the api image, as `kubectl run` would);
- the Service `inr-serve-redis`: a network alias of the Redis pod (the rendered Redis Deployment, played as it is);
- the Secret `inr-serve-s3`, made as the kustomization's comment says (`kubectl create secret generic`), handed to
  Podman as the podman secret its envFrom `secretRef` reads (Podman 4.3 reads a JSON map of base64 values; it
  cannot read back a `kind: Secret` document it was given, podman#17071); the ConfigMaps `inr-serve-fits` and
  `inr-serve-s3` as rendered, given with `kube play --configmap`;
- each pod's emptyDirs: the kubelet makes them per pod, Podman 4.3 makes a named volume of each emptyDir's name (the
  api's /tmp and the worker's would be one volume `tmp`, kept after the run), so each is renamed for its pod;
- one replica each, a hostPort on the api (free on this machine) so the test reaches it, and the optional access
  Secret's entry left out, as the kubelet leaves it out when that Secret is missing (as test_kube.py does).
One setting is the test's own: INR_MAX_UPLOAD_PIXELS=1500 on the api, so that a 48×40 photo is kept as a file and
travels through the bucket's uploads/ (as a photo over the default 25 MP would) and the fit stays small.
"""

from __future__ import annotations

import io
import json
import secrets
import shutil
import subprocess
import time

import httpx
import pytest
import yaml
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from .engine import PREFIX, ROOT, RUNTIME_IMAGE, TRAIN_IMAGE, build_s3_image
from .stack import metric
from .test_fits import OPTIONS, photo
from .test_kube import play, podman, wait_ready  # noqa: F401 (podman: the fixture)

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (its built-in kustomize) is missing")

NETWORK = f"{PREFIX}-kube-s3"
SERVER = f"{PREFIX}-kube-s3-server"
SECRET = "inr-serve-s3"  # the name the Deployments' secretRef reads
NAME = "photo-k8s"
BUNDLED = ("astronaut", "dandelion", "digits")

# The bucket's keys, listed from inside a pod with its own credentials (the Secret) and endpoint (the ConfigMap).
LIST = """
import os, boto3
from modelrepo import parse_s3
where = parse_s3(os.environ['INR_MODELS'])
pages = boto3.client('s3', endpoint_url=where.endpoint).get_paginator('list_objects_v2')
for page in pages.paginate(Bucket=where.bucket):
    for item in page.get('Contents', []):
        print(item['Key'])
"""


def rendered() -> dict[tuple[str, str], dict]:
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / "deploy" / "k8s-s3")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}


def own_empty_dirs(pod_spec: dict, pod: str) -> None:
    """Each emptyDir of the pod a volume of its own (Podman 4.3 names the volume after the emptyDir)."""
    renamed = {v["name"]: f"{PREFIX}-{pod}-{v['name']}" for v in pod_spec.get("volumes", []) if "emptyDir" in v}
    for v in pod_spec.get("volumes", []):
        v["name"] = renamed.get(v["name"], v["name"])
    for c in pod_spec["containers"]:
        for m in c.get("volumeMounts", []):
            m["name"] = renamed.get(m["name"], m["name"])


def secret_for_podman(access: str, key: str) -> str:
    """`kubectl create secret generic inr-serve-s3 …` (deploy/k8s-s3/kustomization.yaml), its data as Podman 4.3
    reads a secret for envFrom: a JSON map of base64 values."""
    made = subprocess.run(
        ["kubectl", "create", "secret", "generic", SECRET, f"--from-literal=AWS_ACCESS_KEY_ID={access}"]
        + [f"--from-literal=AWS_SECRET_ACCESS_KEY={key}", "--dry-run=client", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.dumps(json.loads(made.stdout)["data"])


class Cluster:
    def __init__(self, podman, folder):
        self.podman, self.dir = podman, folder
        self.objects = rendered()
        self.api_port, self.api, self.worker, self.push_log = 0, "", "", ""

    def configmaps(self) -> list[str]:
        args = []
        for name in ("inr-serve-fits", "inr-serve-s3"):
            path = self.dir / f"{name}.yaml"
            path.write_text(yaml.safe_dump(self.objects["ConfigMap", name]))
            args += ["--configmap", str(path)]
        return args

    def up(self, report: dict) -> None:
        podman = self.podman
        access, key = "inr:inr", secrets.token_hex(16)
        s3 = self.objects["ConfigMap", "inr-serve-s3"]["data"]
        endpoint = s3["INR_MODELS"].removeprefix("s3://").split("/")[0]  # s3.storage.svc:8333
        creds = ["-e", f"AWS_ACCESS_KEY_ID={access}", "-e", f"AWS_SECRET_ACCESS_KEY={key}"]
        podman("network", "create", NETWORK)
        alias = endpoint.split(":")[0]
        data = f"--volume={SERVER}-data:/data"  # its objects: a volume of the suite's, gone with cleanup()
        podman(
            "run", "-d", "--name", SERVER, "--network", NETWORK, "--network-alias", alias, data, *creds, "inr-serve:s3"
        )
        t0 = time.monotonic()
        push = ["push", "--create-bucket", "--wait", "180", "/app/models", s3["INR_MODELS"]]
        one_off = ["run", "--rm", "--network", NETWORK, *creds, "-e", f"AWS_REGION={s3['AWS_REGION']}"]
        pushed = podman(*one_off, "--entrypoint", "python", RUNTIME_IMAGE, "-m", "modelrepo", *push, timeout=300)
        self.push_log = pushed.stdout
        report["kube_s3_push_s"] = round(time.monotonic() - t0, 1)
        podman("secret", "rm", SECRET, check=False)
        (self.dir / "secret.json").write_text(secret_for_podman(access, key))
        podman("secret", "create", SECRET, str(self.dir / "secret.json"))
        configmaps = self.configmaps()

        redis = self.objects["Deployment", "inr-serve-redis"]
        own_empty_dirs(redis["spec"]["template"]["spec"], "redis")
        redis["metadata"]["name"] = f"{PREFIX}redis"
        (self.dir / "redis.yaml").write_text(yaml.safe_dump(redis))
        podman("kube", "play", "--network", f"{NETWORK}:alias=inr-serve-redis", str(self.dir / "redis.yaml"))

        t0 = time.monotonic()
        api = self.objects["Deployment", "inr-serve"]
        api["spec"]["replicas"] = 1
        pod_spec = api["spec"]["template"]["spec"]
        own_empty_dirs(pod_spec, "api")
        (container,) = pod_spec["containers"]
        assert container["image"] == RUNTIME_IMAGE
        container["env"] = [e for e in container["env"] if "valueFrom" not in e]  # the optional access Secret
        container["env"].append({"name": "INR_MAX_UPLOAD_PIXELS", "value": "1500"})
        for e in container["env"]:  # the test fits without keys; the manifest's default is `key`
            if e["name"] == "INR_FIT_ACCESS":
                e["value"] = "open"
        self.api_port, self.api = play(podman, self.dir, api, container, "api", "--network", NETWORK, *configmaps)

        worker = self.objects["Deployment", "inr-serve-worker"]
        pod_spec = worker["spec"]["template"]["spec"]
        own_empty_dirs(pod_spec, "worker")
        (container,) = pod_spec["containers"]
        assert container["image"] == TRAIN_IMAGE  # kustomization.yaml's inr-serve-train, renamed
        worker["metadata"]["name"] = f"{PREFIX}worker"
        (self.dir / "worker.yaml").write_text(yaml.safe_dump(worker))
        podman("kube", "play", "--network", NETWORK, *configmaps, str(self.dir / "worker.yaml"))
        pod = podman("pod", "ls", "--format", "{{.Name}}", "--filter", f"name={PREFIX}worker").stdout.split()[0]
        self.worker = f"{pod}-{container['name']}"
        wait_ready(self.api_port, "/health/ready")
        deadline = time.monotonic() + 120
        while " ready: store " not in (logs := podman("logs", self.worker, check=False)).stderr:
            assert time.monotonic() < deadline, logs.stdout + logs.stderr
            time.sleep(1)
        report["kube_s3_api_ready_s"] = round(time.monotonic() - t0, 1)

    def down(self) -> None:
        for doc in ("api", "worker", "redis"):
            self.podman("kube", "down", str(self.dir / f"{doc}.yaml"), check=False)
        self.podman("rm", "-f", "-t", "0", SERVER, check=False)
        self.podman("secret", "rm", SECRET, check=False)
        self.podman.cleanup()  # the network and the pods' volumes (the suite's prefix)

    def keys(self) -> list[str]:
        return self.podman("exec", self.api, "python", "-c", LIST).stdout.split()

    def repository_gets(self, client: httpx.Client) -> float:
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(client.get("/metrics").text)
            for s in family.samples
        }
        return metric(samples, "inr_model_repository_requests", operation="GET")


@pytest.fixture(scope="module")
def cluster(podman, tmp_path_factory, report):  # noqa: F811 (the fixture imported above)
    t0 = time.monotonic()
    report["s3_build_s"] = build_s3_image(podman)
    c = Cluster(podman, tmp_path_factory.mktemp("kube-s3"))
    try:
        c.up(report)
        yield c
    finally:
        c.down()
        report["kube_s3_module_s"] = round(time.monotonic() - t0, 1)


@pytest.fixture(scope="module")
def client(cluster) -> httpx.Client:
    with httpx.Client(base_url=f"http://127.0.0.1:{cluster.api_port}", timeout=60) as c:
        yield c


def test_the_pods_share_no_volume_and_mount_no_claim(cluster):
    for name in ("inr-serve", "inr-serve-worker"):
        volumes = cluster.objects["Deployment", name]["spec"]["template"]["spec"]["volumes"]
        assert volumes and all(set(v) == {"name", "emptyDir"} for v in volumes), (name, volumes)
    for model in BUNDLED:
        assert f"{model}: 1 -> " in cluster.push_log, cluster.push_log
    mounts = {c: cluster.podman.inspect(c)["Mounts"] for c in (cluster.api, cluster.worker)}
    assert {m["Destination"] for m in mounts[cluster.api]} == {"/cache", "/tmp"}, mounts[cluster.api]
    assert {m["Destination"] for m in mounts[cluster.worker]} == {"/tmp"}, mounts[cluster.worker]
    sources = [m["Source"] for listed in mounts.values() for m in listed]
    assert len(set(sources)) == len(sources), f"a folder mounted in both pods: {mounts}"
    for c in (cluster.api, cluster.worker):
        info = cluster.podman.inspect(c)
        assert info["HostConfig"]["ReadonlyRootfs"] is True and info["RestartCount"] == 0, c
    log = cluster.podman("logs", cluster.worker).stderr
    s3 = cluster.objects["ConfigMap", "inr-serve-s3"]["data"]
    assert f"models {s3['INR_MODELS']}, uploads {s3['INR_FIT_UPLOADS']}" in log, log[-2000:]


def test_the_api_pod_pulls_a_pushed_model_from_the_bucket_and_serves_a_tile(cluster, client):
    before = cluster.repository_gets(client)
    r = client.get("/iiif/3/astronaut/full/64,/0/default.png")
    assert r.status_code == 200, r.text[:300]
    assert Image.open(io.BytesIO(r.content)).size[0] == 64
    assert cluster.repository_gets(client) > before, "the model files came from the bucket"
    cached = cluster.podman("exec", cluster.api, "find", "/cache", "-name", "model.onnx").stdout.split()
    assert any("astronaut" in p for p in cached), cached  # in the pod's own cache (its emptyDir)


def test_a_fit_posted_to_the_api_pod_is_fitted_by_the_worker_pod_through_the_bucket(cluster, client, report):
    t0 = time.monotonic()
    r = client.post("/v1/fits", files={"file": (f"{NAME}.png", photo(3), "image/png")}, data={**OPTIONS, "name": NAME})
    assert r.status_code == 202, r.text[:500]
    record = r.json()
    upload = record["source"].get("upload")
    assert upload, f"the upload was not kept as a file in the bucket: {record['source']}"
    deadline = time.monotonic() + 240
    while (job := client.get(record["links"]["self"]).json())["state"] not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, f"not fitted after 240 s: {job}"
        time.sleep(1)
    logs = cluster.podman("logs", "--tail", "30", cluster.worker, check=False)
    assert job["state"] == "succeeded", f"{job}\n{logs.stdout}{logs.stderr}"
    report["kube_s3_fit_s"] = round(time.monotonic() - t0, 1)
    hostname = cluster.podman.inspect(cluster.worker)["Config"]["Hostname"]
    assert job["worker"].split(":")[0] == hostname, (job["worker"], hostname)
    version = job["version"]
    keys = cluster.keys()
    assert f"models/{NAME}/{version}/.published" in keys and f"models/{NAME}/{version}/model.onnx" in keys, keys
    assert not [k for k in keys if k.startswith("uploads/")], f"the fitted upload was not deleted: {keys}"

    # served by the api pod once its poll (INR_REPOSITORY_POLL_SECS, 5 s) lists the new version
    deadline = time.monotonic() + 60
    while (r := client.get(f"/v1/models/{NAME}")).status_code != 200 or r.json().get("version") != version:
        assert time.monotonic() < deadline, f"{NAME} {version} not served: {r.status_code} {r.text[:300]}"
        time.sleep(0.5)
    tile = client.get(f"/iiif/3/{NAME}/full/32,/0/default.png")
    assert tile.status_code == 200 and Image.open(io.BytesIO(tile.content)).size[0] == 32, tile.text[:300]
    render = client.get(f"/v1/models/{NAME}/versions/{version}/render?width=48&height=40")
    assert render.status_code == 200 and Image.open(io.BytesIO(render.content)).size == (48, 40)
    report["kube_s3_posted_to_served_s"] = round(time.monotonic() - t0, 1)
