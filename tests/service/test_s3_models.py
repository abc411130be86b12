"""The server on a model repository in a real S3 server (tests/s3server.py): `--models s3://…` lists, loads on first
use through the disk cache, keeps a model's access policy, serves a version a fit publishes to the bucket, and
answers through faults: S3 stopped (cached models serve, the others 503 with Retry-After, all again once it is
back), a restart (from the disk cache: no GET), a missing bucket or refused credentials (one line, exit 2)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import ROOT, Server

RESTRICTED = 'parameters { key: "access" value { string_value: "restricted" } }\n'
QUERY = {"coords": [[0.5, 0.5], [0.1, 0.9]]}


def push(s3, url: str, folder) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "modelrepo", "push", str(folder), url],
        env={**os.environ, **s3.env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def gets(srv) -> dict[str, float]:
    text = httpx.get(f"{srv.url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        if family.name == "inr_model_repository_requests":
            return {s.labels["operation"]: s.value for s in family.samples}
    return {}


def until(check, seconds: float = 30.0):
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


@pytest.fixture
def bucket_url(s3_server, model_repo, tmp_path):
    url = s3_server.url(s3_server.bucket())
    for name in ("astronaut", "digits"):
        push(s3_server, url, model_repo / name)
    secret = tmp_path / "secret"  # a restricted copy: its policy is in its config.pbtxt, on S3 too
    shutil.copytree(model_repo / "astronaut", secret)
    (secret / "config.pbtxt").write_text((secret / "config.pbtxt").read_text() + RESTRICTED)
    push(s3_server, url, secret)
    return url


def serve(url, s3, cache, *args, **env):
    return Server(
        url,
        "--model-control-mode",
        "poll",
        "--repository-poll-secs",
        "0.5",
        *args,
        env={**s3.env, "INR_MODEL_CACHE": str(cache), "INR_ACCESS_SECRET": "s" * 40, **env},
    )


def test_served_from_s3_through_the_disk_cache(s3_server, bucket_url, tmp_path):
    cache = tmp_path / "cache"
    with serve(bucket_url, s3_server, cache).running() as srv:
        names = [m["name"] for m in httpx.get(f"{srv.url}/v1/models").json()["models"]]
        assert names == ["astronaut", "digits"]  # the restricted one is not listed to anyone
        assert gets(srv).get("GET", 0) <= 8  # listed from pages; no model file read (small files of the listed)
        r = httpx.post(f"{srv.url}/v1/models/astronaut/query", json=QUERY, timeout=60)
        assert r.status_code == 200, r.text
        assert httpx.get(f"{srv.url}/iiif/3/astronaut/0,0,16,16/16,/0/default.png", timeout=60).status_code == 200
        preview = httpx.get(f"{srv.url}/v1/models/astronaut/preview", timeout=60)  # pulled when asked for
        assert preview.status_code == 200 and preview.content.startswith(b"\x89PNG"), preview.text
        assert httpx.get(f"{srv.url}/v1/models/secret", timeout=10).status_code == 401
        assert httpx.post(f"{srv.url}/v1/models/secret/query", json=QUERY, timeout=10).status_code == 401

        # a fit publishes version 2 to the bucket: listed and served without a restart
        fit = subprocess.run(
            [sys.executable, "-m", "training", "fit-image", "--image", "astronaut", "--size", "16", "--steps", "5",
             "--width", "16", "--depth", "2", "--features", "16", "--out", f"{bucket_url}/astronaut", "--no-progress"],
            cwd=ROOT, env={**os.environ, **s3_server.env}, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert fit.returncode == 0, fit.stderr
        assert until(lambda: httpx.get(f"{srv.url}/v1/models/astronaut").json().get("version") == 2, 60)
        assert httpx.post(f"{srv.url}/v1/models/astronaut/query", json=QUERY, timeout=60).status_code == 200

        # S3 stopped: what is on local disk keeps serving; a model never loaded answers 503 with Retry-After
        s3_server.stop()
        try:
            for _ in range(5):
                assert httpx.post(f"{srv.url}/v1/models/astronaut/query", json=QUERY, timeout=60).status_code == 200
            r = httpx.post(
                f"{srv.url}/v2/models/digits/infer",
                json={"inputs": [{"name": "images", "shape": [1, 1, 28, 28], "datatype": "FP32", "data": [0.0] * 784}]},
                timeout=60,
            )
            assert r.status_code == 503 and r.headers.get("retry-after"), r.text
            assert "digits" in r.json()["error"] and "S3" in r.json()["error"]
        finally:
            s3_server.start()
        assert until(
            lambda: (
                httpx.post(
                    f"{srv.url}/v2/models/digits/infer",
                    json={
                        "inputs": [{"name": "images", "shape": [1, 1, 28, 28], "datatype": "FP32", "data": [0.0] * 784}]
                    },
                    timeout=60,
                ).status_code
                == 200
            ),
            60,
        )

    # a restart on the same disk cache: the models serve from it, revalidated by ETag, nothing downloaded again
    with serve(bucket_url, s3_server, cache).running() as srv:
        assert httpx.post(f"{srv.url}/v1/models/astronaut/query", json=QUERY, timeout=60).status_code == 200
        assert gets(srv).get("GET", 0) == 0


def test_a_model_larger_than_the_whole_disk_cache_is_a_507_naming_the_setting(s3_server, bucket_url, tmp_path):
    push(s3_server, bucket_url, ROOT / "models" / "dandelion")  # its model.onnx: 3 MB
    cache = tmp_path / "cache"  # 1 MB: astronaut's files fit, dandelion's never can
    with serve(bucket_url, s3_server, cache, INR_MODEL_CACHE_BYTES="1000000").running() as srv:
        for _ in range(2):  # the same answer each time: the version is not failed, the budget is too small
            r = httpx.get(f"{srv.url}/iiif/3/dandelion/0,0,64,64/64,/0/default.png", timeout=60)
            assert r.status_code == 507, r.text
            error = r.json()["error"]
            assert "model 'dandelion'" in error and "INR_MODEL_CACHE_BYTES=1,000,000" in error, error
        assert httpx.post(f"{srv.url}/v1/models/astronaut/query", json=QUERY, timeout=60).status_code == 200
        assert httpx.get(f"{srv.url}/health/ready", timeout=10).status_code == 200
    assert not list(cache.rglob("dandelion/1/*.onnx")) and not list(cache.rglob(".part-*"))


@pytest.mark.parametrize("case", ["bucket", "credentials"])
def test_a_missing_bucket_or_refused_credentials_is_one_line_and_exit_2(s3_server, tmp_path, case):
    url = s3_server.url("nosuchbucket") if case == "bucket" else s3_server.url(s3_server.bucket())
    env = {**os.environ, **s3_server.env, "INR_MODEL_CACHE": str(tmp_path)}
    if case == "credentials":
        env["AWS_SECRET_ACCESS_KEY"] = "wrong"
    done = subprocess.run(
        [sys.executable, "-m", "service", "--models", url, "--port", "0", "--grpc-port", "0"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: --models") and (
        "no bucket 'nosuchbucket'" in line if case == "bucket" else "AWS_SECRET_ACCESS_KEY" in line
    ), done.stderr
