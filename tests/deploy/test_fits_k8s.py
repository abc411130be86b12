"""Fits over HTTP on Kubernetes (docs/fits.md): the worker Deployment, the Redis job store and
the ReadWriteMany models volume, wired to the api Deployment. test_k8s.py validates every file against
the Kubernetes API schemas; this checks that the pieces fit together: one store URL for api and
worker, pointing at the Redis Service; the worker writes the volume the api mounts read-only; the
worker runs the train image as the api runs the runtime image (non-root, read-only root, no
capabilities); and the api's init container seeds the volume with the bundled models."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from .k8s import K8S, container, env, kustomize, load_objects, pod


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict]:
    return load_objects()


@pytest.fixture(scope="module")
def api(objects) -> dict:
    return objects["Deployment", "inr-serve"]


@pytest.fixture(scope="module")
def worker(objects) -> dict:
    return objects["Deployment", "inr-serve-worker"]


def config_env(objects, c: dict) -> dict[str, str]:
    """What the container gets from its envFrom ConfigMaps."""
    out = {}
    for source in c.get("envFrom", []):
        out.update(objects["ConfigMap", source["configMapRef"]["name"]]["data"])
    return out


def test_api_and_worker_read_the_same_store_which_is_the_redis_service(objects, api, worker):
    a, w = container(api), container(worker)
    assert a["envFrom"] == w["envFrom"], "one ConfigMap names the store for both"
    assert "INR_FIT_STORE" not in env(a) and "INR_FIT_STORE" not in env(w), "env would override the ConfigMap"
    assert "--store" not in w["args"]
    url = config_env(objects, a)["INR_FIT_STORE"]
    m = re.fullmatch(r"redis://([a-z0-9-]+):(\d+)/(\d+)", url)
    assert m, url
    service = objects["Service", m.group(1)]
    (port,) = service["spec"]["ports"]
    assert port["port"] == int(m.group(2))
    redis = objects["Deployment", m.group(1)]
    assert service["spec"]["selector"].items() <= redis["spec"]["template"]["metadata"]["labels"].items()
    (rc,) = pod(redis)["containers"]
    assert (
        rc["image"].startswith("redis:7")
        and {p["name"]: p["containerPort"] for p in rc["ports"]}[port["targetPort"]] == 6379
    )
    assert redis["spec"]["replicas"] == 1 and redis["spec"]["strategy"]["type"] == "Recreate"
    assert "--appendonly" in rc["args"] and rc["args"][rc["args"].index("--maxmemory-policy") + 1] == "noeviction"
    # the store's data: an emptyDir (survives container restarts; docs say what a lost pod costs)
    (data,) = rc["volumeMounts"]
    assert data["mountPath"] == "/data"
    assert next(v for v in pod(redis)["volumes"] if v["name"] == data["name"]).keys() >= {"emptyDir"}


def volume_of(deployment: dict, mount: dict) -> dict:
    return next(v for v in pod(deployment)["volumes"] if v["name"] == mount["name"])


def models_mount(deployment: dict, c: dict | None = None) -> dict:
    c = c or container(deployment)
    (m,) = [
        m
        for m in c["volumeMounts"]
        if volume_of(deployment, m).get("persistentVolumeClaim") and m["mountPath"] == "/app/models"
    ]
    return m


def test_api_and_worker_share_the_uploads_volume_at_the_images_uploads_folder(objects, api, worker):
    """A large upload is streamed by an api pod into INR_FIT_UPLOADS and read by region by any worker: one
    ReadWriteMany claim, mounted read-write by both where the images' INR_FIT_UPLOADS points."""
    dockerfile = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text()
    assert dockerfile.count("INR_FIT_UPLOADS=/app/fits/uploads") == 3  # runtime, gpu and train images
    claims = []
    for deployment in (api, worker):
        c = container(deployment)
        assert "INR_FIT_UPLOADS" not in env(c) and "INR_FIT_UPLOADS" not in config_env(objects, c)
        (m,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/app/fits/uploads"]
        assert not m.get("readOnly")
        claims.append(volume_of(deployment, m)["persistentVolumeClaim"]["claimName"])
    assert claims[0] == claims[1]
    assert objects["PersistentVolumeClaim", claims[0]]["spec"]["accessModes"] == ["ReadWriteMany"]


def test_worker_writes_the_models_volume_the_api_reads_read_only(objects, api, worker):
    a, w = container(api), container(worker)
    theirs, ours = models_mount(api), models_mount(worker)
    assert theirs["readOnly"] is True and not ours.get("readOnly", False)
    assert theirs["mountPath"] == env(a)["INR_MODELS"] and ours["mountPath"] == env(w)["INR_MODELS"]
    assert w["args"][w["args"].index("--models") + 1] == env(w)["INR_MODELS"]
    claim = volume_of(api, theirs)["persistentVolumeClaim"]["claimName"]
    assert volume_of(worker, ours)["persistentVolumeClaim"]["claimName"] == claim
    pvc = objects["PersistentVolumeClaim", claim]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"], "api replicas and workers on several nodes"
    assert env(a)["INR_MODEL_CONTROL_MODE"] == "poll", "a fitted version is served without a restart"
    # the worker writes as group 10001, which owns the volume (fsGroup) in both pods
    assert pod(api)["securityContext"]["fsGroup"] == pod(worker)["securityContext"]["fsGroup"] == 10001


def test_worker_runs_the_train_image_as_the_api_runs_its_own(api, worker, dockerfile):
    w = container(worker)
    assert w["args"][0] == "worker" and dockerfile.stage("train").last("ENTRYPOINT").exec_form() == [
        "python",
        "-m",
        "training",
    ]
    args = dict(zip(w["args"][1::2], w["args"][2::2]))
    assert int(args["--nice"]) >= 10 and int(args["--threads"]) == int(env(w)["OMP_NUM_THREADS"])
    assert float(w["resources"]["limits"]["cpu"]) >= int(args["--threads"])
    assert {"cpu", "memory"} <= w["resources"]["limits"].keys() and {"cpu", "memory"} <= w["resources"][
        "requests"
    ].keys()
    for key in ("runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile"):
        assert pod(worker)["securityContext"][key] == pod(api)["securityContext"][key], key
    assert w["securityContext"] == container(api)["securityContext"]
    # read-only root: torch and the worker write only under /tmp (HOME=/tmp as in the image)
    tmp = next(m for m in w["volumeMounts"] if m["mountPath"] == "/tmp")
    assert "emptyDir" in volume_of(worker, tmp) and env(w)["HOME"] == "/tmp"
    assert pod(worker)["terminationGracePeriodSeconds"] >= 10


def test_worker_pods_are_not_api_pods(objects, api, worker):
    """The api's Service, PDB and HPA must never select or count the workers."""
    labels = worker["spec"]["template"]["metadata"]["labels"]
    for kind in ("Service", "PodDisruptionBudget"):
        selector = objects[kind, "inr-serve"]["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        assert not selector.items() <= labels.items(), kind
    assert objects["HorizontalPodAutoscaler", "inr-serve"]["spec"]["scaleTargetRef"]["name"] == "inr-serve"


def test_the_api_sets_the_fit_limits_as_valid_settings(objects, api, worker):
    from service.settings import Settings

    c = container(api)
    e = {**config_env(objects, c), **env(c)}
    settings = Settings(**{k.removeprefix("INR_").lower(): v for k, v in e.items() if k.startswith("INR_")})
    assert settings.fit_store.startswith("redis://") and settings.model_control_mode == "poll"
    assert settings.fit_max_upload_bytes == 3 << 30 and settings.fit_deadline_s > 0
    assert settings.fit_max_running == worker["spec"]["replicas"], "a slot per worker, a worker per slot"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) is not installed")
def test_kustomize_gives_the_worker_the_train_image_and_the_api_the_runtime_image(tmp_path: Path):
    def images(folder: Path) -> dict[str, str]:
        out = kustomize(folder)
        return {
            d["metadata"]["name"]: [c["image"] for c in d["spec"]["template"]["spec"]["containers"]][0]
            for d in yaml.safe_load_all(out)
            if d and d["kind"] == "Deployment"
        }

    assert images(K8S) == {
        "inr-serve": "inr-serve:cpu",
        "inr-serve-worker": "inr-serve:train",
        "inr-serve-redis": "redis:7-alpine",
        "inr-serve-router": "nginx:1.29-alpine",
    }
    # `kustomize edit set image inr-serve=REGISTRY/...` (docs/kubernetes.md) leaves the worker's alone
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    kz = yaml.safe_load((copy / "kustomization.yaml").read_text())
    kz["images"][0].update(newName="registry.example/inr-serve", newTag="0.1.0")
    (copy / "kustomization.yaml").write_text(yaml.safe_dump(kz))
    assert images(copy)["inr-serve"] == "registry.example/inr-serve:0.1.0"
    assert images(copy)["inr-serve-worker"] == "inr-serve:train"


def seed(script: str, image_models: Path, volume: Path, hostname: str) -> None:
    script = script.replace("/app/models", str(image_models)).replace("/volume", str(volume))
    subprocess.run(["sh", "-c", script], check=True, env={"HOSTNAME": hostname, "PATH": "/usr/bin:/bin"})


def test_the_init_container_seeds_the_volume_without_overwriting(api, tmp_path: Path):
    (init,) = pod(api)["initContainers"]
    assert init["image"] == container(api)["image"], "the bundled models are the api image's"
    assert init["volumeMounts"][0]["name"] == models_mount(api)["name"]
    assert not init["volumeMounts"][0].get("readOnly", False)
    assert init["securityContext"] == container(api)["securityContext"]
    script = init["command"][2]
    image_models, volume = tmp_path / "image", tmp_path / "volume"
    for name in ("astronaut", "digits"):
        (image_models / name / "1").mkdir(parents=True)
        (image_models / name / "1" / "model.onnx").write_text(f"bundled {name}")
    (volume / "astronaut" / "2").mkdir(parents=True)  # a fitted version 2 and nothing else: kept as it is
    (volume / "astronaut" / "2" / "model.onnx").write_text("fitted")
    seed(script, image_models, volume, "pod-a")
    seed(script, image_models, volume, "pod-b")  # a second pod: nothing changes
    assert sorted(p.name for p in volume.iterdir()) == ["astronaut", "digits"], "no temporary folders left"
    assert (
        not (volume / "astronaut" / "1").exists()
        and (volume / "astronaut" / "2" / "model.onnx").read_text() == "fitted"
    )
    assert (volume / "digits" / "1" / "model.onnx").read_text() == "bundled digits"
