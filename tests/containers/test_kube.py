"""The Kubernetes Deployments (the api's and the fit worker's) and the KServe predictor's container, run
as written by `podman kube play` with the images the compose stack ran: its securityContext (read-only root, uid
10001, no
capabilities), its limits and env, and its probes answering on the declared port. No cluster runs
here; tests/deploy/test_k8s.py validates the same files against the Kubernetes and KServe schemas.

Things differ from the files only where the cluster would supply them: one replica, a hostPort (free on
this machine) so the probes can be reached from the test, the models volume (a Podman named volume with
the suite's prefix for the ReadWriteMany claim, which the init container seeds with the bundled models),
and the fits ConfigMap given to `kube play --configmap` with a SQLite store in the pod's /tmp (no Redis
runs here; test_fits_k8s.py checks the Redis wiring statically).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest
import yaml

from bench.common import free_port

from .engine import PREFIX, ROOT, RUNTIME_IMAGE, TRAIN_IMAGE

INIT_TYPE = "io.podman.annotations.init.container.type"


@pytest.fixture(scope="module")
def podman(images):
    if images.cli != "podman":
        pytest.skip("`kube play` is Podman's")
    return images


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def play(podman, tmp_path, doc: dict, container: dict, name: str, *options: str) -> tuple[int, str]:
    """Run `doc` (whose pod template holds `container`) with a free hostPort; (port, container name)."""
    port = free_port()
    container["ports"][0]["hostPort"] = port
    doc["metadata"]["name"] = f"{PREFIX}{name}"
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    podman("kube", "play", *options, str(path), timeout=300)
    pod = podman("pod", "ls", "--format", "{{.Name}}", "--filter", f"name={PREFIX}{name}").stdout.split()[0]
    return port, f"{pod}-{container['name']}"


def wait_ready(port: int, path: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while get(f"http://127.0.0.1:{port}{path}") != 200:
        assert time.monotonic() < deadline, f"{path} not 200 within {timeout} s"
        time.sleep(0.5)


def fits_configmap(tmp_path) -> str:
    """deploy/k8s/fits-store.yaml's ConfigMap with a SQLite store in the pod's /tmp (no Redis here)."""
    (fits,) = [
        d
        for d in yaml.safe_load_all((ROOT / "deploy" / "k8s" / "fits-store.yaml").read_text())
        if d["kind"] == "ConfigMap"
    ]
    fits["data"]["INR_FIT_STORE"] = "sqlite:////tmp/fits.sqlite"
    path = tmp_path / "fits-configmap.yaml"
    path.write_text(yaml.safe_dump(fits))
    return str(path)


def test_the_deployment_runs_as_written(podman, tmp_path):
    doc = yaml.safe_load((ROOT / "deploy" / "k8s" / "deployment.yaml").read_text())
    doc["spec"]["replicas"] = 1
    pod_spec = doc["spec"]["template"]["spec"]
    (container,) = pod_spec["containers"]
    assert container["image"] == RUNTIME_IMAGE
    # the optional Secret of the access key (docs/access.md) is not made here: its entry left out, as kubelet
    # leaves it out when the Secret is missing
    container["env"] = [e for e in container["env"] if "valueFrom" not in e]
    volume = f"{PREFIX}kube-models"
    for v in pod_spec["volumes"]:
        if "persistentVolumeClaim" in v:
            v["persistentVolumeClaim"]["claimName"] = volume
    # Podman 4.3 removes a finished `once` init container while the pod starts, and sometimes finds it still
    # running ("failed to remove once init container", podman#18477, fixed after 4.3): kept (`always`), it
    # runs the same, before the api, and nothing races
    doc["spec"]["template"]["metadata"].setdefault("annotations", {})[INIT_TYPE] = "always"
    doc["metadata"].setdefault("annotations", {})[INIT_TYPE] = "always"
    port, name = play(podman, tmp_path, doc, container, "kube", "--configmap", fits_configmap(tmp_path))
    try:
        wait_ready(port, container["startupProbe"]["httpGet"]["path"])
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            assert get(f"http://127.0.0.1:{port}{container[probe]['httpGet']['path']}") == 200, probe
        info = podman.inspect(name)
        host = info["HostConfig"]
        assert host["ReadonlyRootfs"] is True
        assert info["Config"]["User"].split(":")[0] == str(pod_spec["securityContext"]["runAsUser"])
        assert host["Memory"] == 1 << 30  # limits.memory 1Gi
        assert "no-new-privileges" in host["SecurityOpt"]
        assert {"CAP_CHOWN", "CAP_SETUID", "CAP_NET_RAW"} <= set(host["CapDrop"])
        env = dict(e.split("=", 1) for e in info["Config"]["Env"])
        assert {e["name"]: e["value"] for e in container["env"] if "valueFrom" not in e}.items() <= env.items()
        # it serves from a read-only root with /tmp an emptyDir
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/models/astronaut/query",
            method="POST",
            data=b'{"coords": [[0.5, 0.5]]}',
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200
        # the models come from the volume the init container seeded, mounted read-only
        models = podman("exec", name, "ls", "/app/models").stdout.split()
        assert {"astronaut", "digits"} <= set(models) and not [m for m in models if m.startswith(".")]
        touch = podman("exec", name, "touch", "/app/models/x", check=False)
        assert touch.returncode != 0 and "Read-only file system" in touch.stderr
    finally:
        podman("kube", "down", str(tmp_path / "kube.yaml"), check=False)
        podman("volume", "rm", "-f", volume, check=False)


def test_the_kserve_predictor_container_runs_as_written(podman, tmp_path):
    isvc = yaml.safe_load((ROOT / "deploy" / "kserve" / "inferenceservice.yaml").read_text())
    (container,) = isvc["spec"]["predictor"]["containers"]
    assert container["image"] == RUNTIME_IMAGE
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": ""}, "spec": {"containers": [container]}}
    port, _ = play(podman, tmp_path, pod, container, "kserve")
    try:
        wait_ready(port, container["readinessProbe"]["httpGet"]["path"])
        assert get(f"http://127.0.0.1:{port}{container['livenessProbe']['httpGet']['path']}") == 200
        assert get(f"http://127.0.0.1:{port}/v2/models/digits/ready") == 200  # KServe's V2 readiness
    finally:
        podman("kube", "down", str(tmp_path / "kserve.yaml"), check=False)


def test_the_worker_deployment_runs_as_written(podman, tmp_path):
    """deploy/k8s/worker.yaml: the train image's worker starts on the store, under the same securityContext
    as the api (read-only root, uid 10001, no capabilities), at nice 10, and keeps running."""
    doc = yaml.safe_load((ROOT / "deploy" / "k8s" / "worker.yaml").read_text())
    pod_spec = doc["spec"]["template"]["spec"]
    (container,) = pod_spec["containers"]
    assert container["image"] == "inr-serve-train"  # kustomization.yaml's name for it
    container["image"] = TRAIN_IMAGE
    volume = f"{PREFIX}worker-models"
    for v in pod_spec["volumes"]:
        if "persistentVolumeClaim" in v:
            v["persistentVolumeClaim"]["claimName"] = volume
    doc["metadata"]["name"] = f"{PREFIX}worker"
    path = tmp_path / "worker.yaml"
    path.write_text(yaml.safe_dump(doc))
    podman("kube", "play", "--configmap", fits_configmap(tmp_path), str(path), timeout=300)
    try:
        pod = podman("pod", "ls", "--format", "{{.Name}}", "--filter", f"name={PREFIX}worker").stdout.split()[0]
        name = f"{pod}-{container['name']}"
        deadline = time.monotonic() + 60
        while "store sqlite:////tmp/fits.sqlite" not in (logs := podman("logs", name, check=False)).stderr:
            assert time.monotonic() < deadline, logs.stdout + logs.stderr
            time.sleep(1)
        time.sleep(3)  # a few heartbeats
        info = podman.inspect(name)
        assert info["State"]["Status"] == "running" and info["RestartCount"] == 0, podman("logs", name).stderr
        assert info["HostConfig"]["ReadonlyRootfs"] is True and info["Config"]["User"].split(":")[0] == "10001"
        stat = podman("exec", name, "cat", "/proc/1/stat").stdout
        assert stat.rsplit(")", 1)[1].split()[16] == "10", "nice 10"  # field 19 of /proc/PID/stat
        # the models volume is writable by the worker (fitted versions are written there)
        podman("exec", name, "touch", "/app/models/.inrci-write-check")
    finally:
        podman("kube", "down", str(path), check=False)
        podman("volume", "rm", "-f", volume, check=False)
