"""docker-compose.s3.yml up (docs/s3.md, "Models on S3"): the models and the uploads in a bucket of the `s3`
service, the fit jobs in Redis, 2 api replicas and a trainer that share no volume. `s3-init` pushes the bundled
models into the bucket and exits 0; each replica pulls what it is asked for from the bucket and serves the same
tiles; a fit POSTed to one replica is fitted by the trainer (its upload read back from the bucket), published into
the bucket, and served by the other replica, which never saw a file of it.

The replicas are reached one by one inside their containers (`exec`, as stack.py reads their metrics); nginx only
for what a user asks of the stack."""

from __future__ import annotations

import base64
import io
import json
import time

import httpx
import pytest
from PIL import Image

from .engine import build_s3_image
from .stack import Stack
from .test_fits import OPTIONS, photo

FILE = "docker-compose.s3.yml"
REPLICAS = 2
BUCKET, PREFIX = "inr-serve", "models/"
BUNDLED = ("astronaut", "dandelion", "digits")
NAME = "photo-s3"
TILE = "/iiif/3/astronaut/full/64,/0/default.png"

# One HTTP request from inside a replica's container, to its own port: "STATUS BASE64-BODY" on stdout.
FETCH = """
import base64, sys, urllib.error, urllib.request
method, path, ctype, body = sys.argv[1], sys.argv[2], sys.argv[3], base64.b64decode(sys.argv[4])
req = urllib.request.Request('http://127.0.0.1:8000' + path, data=body or None, method=method)
if ctype:
    req.add_header('content-type', ctype)
try:
    with urllib.request.urlopen(req, timeout=60) as r:
        code, data = r.status, r.read()
except urllib.error.HTTPError as e:
    code, data = e.code, e.read()
print(code, base64.b64encode(data).decode())
"""

# The bucket's keys under models/, listed from inside a replica with its own credentials (the AWS_* variables).
LIST = f"""
import boto3
pages = boto3.client('s3', endpoint_url='http://s3:8333').get_paginator('list_objects_v2')
for page in pages.paginate(Bucket='{BUCKET}', Prefix='{PREFIX}'):
    for item in page.get('Contents', []):
        print(item['Key'])
"""


@pytest.fixture(scope="module")
def stack(make_stack, images, report) -> Stack:
    report["s3_build_s"] = build_s3_image(images)
    s = make_stack("s3", FILE)
    # the 48×40 photo has more pixels: kept as a file, so it travels through the bucket's uploads/ to the trainer
    s.env["INR_MAX_UPLOAD_PIXELS"] = "1500"
    s.env["INR_FIT_MAX_UPLOAD_BYTES"] = str(20 << 20)
    report["s3_time_to_healthy_2_replicas_s"] = round(s.up(REPLICAS), 1)
    return s


def call(stack: Stack, container: str, method: str, path: str, body: bytes = b"", ctype: str = "") -> tuple[int, bytes]:
    """`method path` on the replica `container` itself, not through nginx."""
    out = stack.engine(
        "exec", container, "python", "-c", FETCH, method, path, ctype, base64.b64encode(body).decode()
    ).stdout.strip()
    code, _, data = out.partition(" ")
    return int(code), base64.b64decode(data)


def get_json(stack: Stack, container: str, path: str) -> dict:
    code, data = call(stack, container, "GET", path)
    assert code == 200, (container, path, code, data[:300])
    return json.loads(data)


def bucket_keys(stack: Stack, container: str) -> list[str]:
    return stack.engine("exec", container, "python", "-c", LIST).stdout.split()


def repository_gets(stack: Stack, container: str) -> float:
    samples = stack.replica_metrics(container)
    return samples[("inr_model_repository_requests", (("operation", "GET"),))]


def test_s3_init_pushed_the_bundled_models_and_no_volume_is_shared(stack, report):
    (init,) = stack.containers("s3-init", all_states=True)
    # Podman starts the finished push again with each service that depends on it (below): it may be running now
    deadline = time.monotonic() + 120
    while (state := stack.engine.inspect(init)["State"])["Status"] == "running" and time.monotonic() < deadline:
        time.sleep(1)
    assert state["Status"] == "exited" and state["ExitCode"] == 0, stack.diagnose("/v1/models")
    log = stack.engine("logs", init).stdout
    # Podman starts a finished dependency again with each service that depends on it (podman-compose's --requires):
    # the push is then run again and keeps what is there ("nothing new"); Docker Compose runs it once
    for model in BUNDLED:
        assert log.count(f"{model}: 1 -> s3://s3:8333/{BUCKET}/{PREFIX}{model}") == 1, log
    keys = bucket_keys(stack, stack.containers()[0])
    for model in BUNDLED:  # each version visible through its marker, written last; pushed once, whatever the runs
        assert f"{PREFIX}{model}/1/.published" in keys and f"{PREFIX}{model}/config.pbtxt" in keys, keys
        assert not any(k.startswith(f"{PREFIX}{model}/2/") for k in keys), keys
    report["s3_init_runs"] = log.count(f"{BUNDLED[0]}: ")

    # what each container mounts: the api replicas and the trainer nothing, s3 and redis each a volume of its own
    mounts: dict[str, list[dict]] = {}
    for service in ("api", "trainer", "s3", "redis", "s3-init", "nginx"):
        for container in stack.containers(service, all_states=True):
            mounts.setdefault(service, []).extend(stack.engine.inspect(container)["Mounts"])
    assert len(stack.containers("api")) == REPLICAS and len(stack.containers("trainer")) == 1
    for service in ("api", "trainer", "s3-init"):
        assert mounts[service] == [], (service, mounts[service])
    volumes: dict[str, set[str]] = {}
    for service, listed in mounts.items():
        for m in listed:
            if m["Type"] == "volume":
                volumes.setdefault(m["Name"], set()).add(service)
    assert sorted(volumes) == [f"{stack.project}_redis-data", f"{stack.project}_s3-data"], volumes
    assert all(len(users) == 1 for users in volumes.values()), volumes
    assert all(m["Type"] == "bind" and not m["RW"] for m in mounts["nginx"]), mounts["nginx"]  # its config files


def test_both_replicas_pull_a_bundled_model_from_the_bucket_and_serve_the_same_tile(stack, http):
    tiles = {}
    for api in stack.containers():
        before = repository_gets(stack, api)
        code, png = call(stack, api, "GET", TILE)
        assert code == 200, (api, png[:300])
        assert Image.open(io.BytesIO(png)).size[0] == 64
        tiles[api] = png
        # this replica's own copy, fetched from S3 into its own cache (nothing on a shared disk to read instead)
        assert repository_gets(stack, api) > before, api
    assert len(set(tiles.values())) == 1, "both replicas render the same tile from the same model files"
    through_nginx = http.get(TILE)
    assert through_nginx.status_code == 200 and through_nginx.content == next(iter(tiles.values()))


def test_a_fit_posted_to_one_replica_is_published_to_the_bucket_and_served_by_the_other(stack, report):
    first, second = stack.containers()
    sent = httpx.Request(
        "POST",
        "http://replica/v1/fits",
        files={"file": (f"{NAME}.png", photo(3), "image/png")},
        data={**OPTIONS, "name": NAME},
    )
    t0 = time.monotonic()
    code, data = call(stack, first, "POST", "/v1/fits", sent.read(), sent.headers["content-type"])
    assert code == 202, data[:500]
    record = json.loads(data)
    assert record["source"].get("upload"), f"the upload was not kept in the bucket: {record['source']}"
    # the other replica reads the same job from Redis until the trainer finishes it
    deadline = time.monotonic() + 240
    while (job := get_json(stack, second, record["links"]["self"]))["state"] not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, f"not fitted after 240 s: {job}\n{stack.diagnose(record['links']['self'])}"
        time.sleep(1)
    assert job["state"] == "succeeded", f"{job}\n{stack.diagnose(record['links']['self'])}"
    fitted = time.monotonic() - t0
    version = job["version"]
    (trainer,) = stack.containers("trainer")
    assert job["worker"].split(":")[0] == stack.engine.inspect(trainer)["Config"]["Hostname"], job["worker"]
    keys = bucket_keys(stack, second)
    assert f"{PREFIX}{NAME}/{version}/.published" in keys and f"{PREFIX}{NAME}/{version}/model.onnx" in keys, keys
    assert not any(k.startswith(f"{PREFIX}{NAME}/{version}/.claim") for k in keys), keys

    # served by the replica it was not posted to, once its poll (INR_REPOSITORY_POLL_SECS, 5 s) lists it
    deadline = time.monotonic() + 60
    while True:
        code, data = call(stack, second, "GET", f"/v1/models/{NAME}")
        if code == 200 and json.loads(data).get("status") == "ready" and json.loads(data).get("version") == version:
            break
        assert time.monotonic() < deadline, f"{NAME} {version} not served by {second}: {code} {data[:300]!r}"
        time.sleep(0.5)
    served = time.monotonic() - t0
    code, png = call(stack, second, "GET", f"/v1/models/{NAME}/versions/{version}/render?width=48&height=40")
    assert code == 200 and Image.open(io.BytesIO(png)).size == (48, 40), png[:300]
    code, tile = call(stack, second, "GET", f"/iiif/3/{NAME}/full/32,/0/default.png")
    assert code == 200 and Image.open(io.BytesIO(tile)).size[0] == 32, tile[:300]
    for container in (first, second, trainer):
        assert stack.engine.inspect(container)["RestartCount"] == 0, container
    report["s3_fit"] = {"posted_to_succeeded_s": round(fitted, 1), "posted_to_served_by_other_s": round(served, 1)}


def test_the_s3_service_is_healthy_by_its_image_healthcheck(stack):
    (s3,) = stack.containers("s3")
    assert stack.health(s3) == "healthy", stack.diagnose("/health/ready")
