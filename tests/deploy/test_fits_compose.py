"""Fits over HTTP in docker-compose.yml, the Dockerfile and nginx (docs/fits.md): the `trainer`
service (the worker) shares the models folder (read-write; the api mounts it read-only) and the job store
with the api; the store's folder is writable by both; nginx lets the upload through, never sends a POST
/v1/fits to a second replica, and streams /v1/fits/ID/events unbuffered.
tests/containers/test_fits.py runs all of it for real."""

from __future__ import annotations

import re

import pytest
import yaml

from .conftest import ROOT, compose_default

MiB = 1 << 20
SIZE = {"": 1, "k": 1 << 10, "m": MiB, "g": 1 << 30}
DURATION = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def mount(service: dict, target: str) -> dict:
    (found,) = [m for m in service["volumes"] if m["target"] == target]
    return found


def worker_args(trainer: dict) -> dict[str, str]:
    args = trainer["command"]
    assert args[0] == "worker"
    return dict(zip(args[1::2], args[2::2]))


def test_trainer_runs_the_worker_in_the_default_profile(services):
    trainer = services["trainer"]
    assert "profiles" not in trainer, "`docker compose up` must start a worker"
    assert trainer["image"] == "inr-serve:train" and trainer["build"]["target"] == "train"
    args = worker_args(trainer)
    assert set(args) <= {"--store", "--models", "--threads", "--nice", "--heartbeat-s"}
    assert int(args["--nice"]) >= 10 and int(args["--threads"]) == int(trainer["environment"]["OMP_NUM_THREADS"])
    assert trainer["restart"] == "unless-stopped" and trainer["stop_grace_period"]
    limits = trainer["deploy"]["resources"]["limits"]
    assert float(limits["cpus"]) <= float(services["api"]["deploy"]["resources"]["limits"]["cpus"])
    assert limits["memory"]


def test_trainer_writes_the_models_folder_the_api_reads_read_only(services):
    api, trainer = services["api"], services["trainer"]
    models = api["environment"]["INR_MODELS"]
    assert worker_args(trainer)["--models"] == trainer["environment"]["INR_MODELS"] == models
    theirs, ours = mount(api, models), mount(trainer, models)
    assert theirs["source"] == ours["source"] == "./models"
    assert theirs["read_only"] is True and not ours.get("read_only", False)
    # as the `train` profile: the files it writes into ./models belong to the user who started it
    assert trainer["user"] == services["train"]["user"] == "${HOST_UID:-10001}:${HOST_GID:-10001}"
    assert api["environment"]["INR_MODEL_CONTROL_MODE"] == "poll", "a new version is served without a restart"


def store_path(url: str) -> str:
    m = re.fullmatch(r"\$\{INR_FIT_STORE:-sqlite:///(/.+)\}", url)
    assert m, f"not an overridable absolute sqlite URL: {url}"
    return m.group(1)


@pytest.mark.parametrize("service", ["api", "api-gpu"])
def test_the_api_and_the_trainer_share_one_store(services, compose, service):
    api, trainer = services[service], services["trainer"]
    url = trainer["environment"]["INR_FIT_STORE"]
    assert api["environment"]["INR_FIT_STORE"] == url
    folder = store_path(url).rsplit("/", 1)[0]
    theirs, ours = mount(api, folder), mount(trainer, folder)
    assert theirs["type"] == ours["type"] == "volume" and theirs["source"] == ours["source"]
    assert not theirs.get("read_only") and not ours.get("read_only")
    assert theirs["source"] in compose["volumes"]
    assert "--store" not in worker_args(trainer), "one place names the store: INR_FIT_STORE"


def test_the_api_fit_settings_are_settings(services):
    from service.settings import Settings

    env = services["api"]["environment"]
    fits = {k for k in env if k.startswith("INR_FIT_")}
    assert {
        "INR_FIT_STORE",
        "INR_FIT_MAX_RUNNING",
        "INR_FIT_QUEUE_LIMIT",
        "INR_FIT_DEADLINE_S",
        "INR_FIT_MAX_UPLOAD_BYTES",
    } <= fits
    known = Settings.model_fields
    if "fit_store" in known:  # the API's settings (branch fits-api); until merged, only the names are checked
        settings = Settings(
            **{k.removeprefix("INR_").lower(): compose_default(v) for k, v in env.items() if k.startswith("INR_")}
        )
        assert settings.fit_store == "sqlite:////app/fits/jobs.sqlite" and settings.fit_max_upload_bytes == 3 << 30
        assert {k.removeprefix("INR_").lower() for k in fits} <= known.keys()


@pytest.mark.parametrize("target", ["runtime", "gpu", "train"])
def test_the_images_make_the_store_folder_writable_by_both(dockerfile, services, target):
    """A fresh named volume copies the image's folder (owner, mode, contents). The api runs as 10001; the
    trainer as HOST_UID with group 10001 added; SQLite gives -wal/-shm the mode of the database file,
    so that file exists already, group-writable, in a setgid folder."""
    path = store_path(services["trainer"]["environment"]["INR_FIT_STORE"])
    assert dockerfile.stage(target).env()["INR_FIT_STORE"] == f"sqlite:///{path}", "the image's default is compose's"
    folder, db = path.rsplit("/", 1)
    run = "\n".join(i.value for i in dockerfile.stage(target).all("RUN"))
    assert f"mkdir -p {folder}" in run and f"touch {folder}/{db}" in run
    assert f"chown -R 10001:10001 {folder}" in run
    assert f"chmod 2775 {folder}" in run and f"chmod 664 {folder}/{db}" in run
    assert dockerfile.stage("runtime").last("USER").value == "10001:10001"
    assert services["trainer"]["group_add"] == ["10001"]


def test_redis_is_an_optional_store_under_its_own_profile(services, compose):
    redis = services["redis"]
    assert redis["profiles"] == ["redis"] and redis["image"].startswith("redis:7")
    assert "6379" in redis["expose"] and "--appendonly" in redis["command"]
    assert mount(redis, "/data")["source"] in compose["volumes"]
    header = (ROOT / "docker-compose.yml").read_text().split("\nname:")[0]
    assert "INR_FIT_STORE=redis://redis:6379/0 docker compose --profile redis up" in header


# -- nginx ------------------------------------------------------------------------------------
def locations() -> list[tuple[str, str, str]]:
    """(modifier, pattern, body) of each location of the HTTP server, in order."""
    conf = (ROOT / "deploy" / "nginx" / "nginx.conf.template").read_text()
    http_server = conf.split("listen 8080;", 1)[1].split("listen 8081", 1)[0]
    return re.findall(r"location\s+(=|~)?\s*(\S+)\s*\{(.*?)\n\s*\}", http_server, re.S)


def pick(path: str) -> str:
    """The location nginx picks for `path`: an exact match, else the first regex, else a prefix."""
    found = locations()
    for mod, pattern, body in found:
        if mod == "=" and pattern == path:
            return body
    for mod, pattern, body in found:
        if mod == "~" and re.search(pattern, path):
            return body
    return max(((p, b) for m, p, b in found if not m and path.startswith(p)), key=lambda pb: len(pb[0]))[1]


def directive(body: str, name: str) -> str | None:
    m = re.search(rf"^\s*{name}\s+([^;]+);", body, re.M)
    return m.group(1).strip() if m else None


def size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([kmg]?)", text.lower())
    return int(m.group(1)) * SIZE[m.group(2)]


def seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+)(ms|s|m|h|d)?", text)
    return int(m.group(1)) * DURATION[m.group(2) or "s"]


def test_nginx_lets_a_full_size_upload_through_to_the_service(services):
    body = pick("/v1/fits")
    limit = int(compose_default(services["api"]["environment"]["INR_FIT_MAX_UPLOAD_BYTES"]))
    assert limit == 3 * 1024 * MiB  # a gigapixel's uncompressed TIFF
    assert directive(body, "proxy_request_buffering") == "off", "streamed to the replica, not spooled by nginx"
    # the service's own limit on the request is the upload plus 64 KiB of multipart envelope
    assert size(directive(body, "client_max_body_size")) >= limit + 64 * 1024
    root = (ROOT / "deploy" / "nginx" / "nginx.conf.template").read_text()
    assert size(re.search(r"^\s*client_max_body_size\s+(\w+);", root, re.M).group(1)) < limit, (
        "only the upload route gets the larger limit"
    )


@pytest.mark.parametrize("path", ["/v1/fits", "/v1/fits/f3a9c2e1d0b4", "/v1/fits/f3a9c2e1d0b4/events"])
def test_nginx_never_retries_a_fit_request_on_another_replica_once_sent(path):
    """POST /v1/fits queues a job: a replica that got it and failed must not be followed by a second."""
    body = pick(path)
    assert "non_idempotent" not in (directive(body, "proxy_next_upstream") or "")
    assert "proxy_pass http://api_replicas;" in body


@pytest.mark.parametrize(
    "path", ["/v1/models/astronaut/query", "/v2/models/digits/infer", "/v1/models/astronaut/versions/2/render"]
)
def test_inference_is_still_retried(path):
    assert "non_idempotent" in directive(pick(path), "proxy_next_upstream")


def test_nginx_streams_fit_events_unbuffered_with_a_long_read_timeout():
    body = pick("/v1/fits/f3a9c2e1d0b4/events")
    assert directive(body, "proxy_buffering") == "off" and directive(body, "proxy_cache") == "off"
    assert seconds(directive(body, "proxy_read_timeout")) >= 600
    assert directive(body, "proxy_set_header") is None, "it would drop the server's Host and X-Request-Id"
    for other in ("/v1/fits", "/v1/fits/f3a9c2e1d0b4/previews/3.png", "/v1/fits/a/events/x"):
        assert directive(pick(other), "proxy_buffering") != "off", other
