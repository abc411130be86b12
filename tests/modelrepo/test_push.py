"""`python -m modelrepo push` (a stack's s3-init, docs/deployment.md "Models on S3") against a real S3 server: the
bucket created, each version published once, S3 waited for when it is not up yet (`--wait`), and bad arguments or
refusals as one line and exit code 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from modelrepo import open_repository

ROOT = Path(__file__).resolve().parents[2]


def push(s3, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **s3.env, **env}
    return subprocess.run(
        [sys.executable, "-m", "modelrepo", "push", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def test_push_creates_the_bucket_publishes_once_and_the_copy_serves(s3_server, tmp_path):
    source = tmp_path / "models"
    shutil.copytree(ROOT / "models" / "astronaut", source / "astronaut")
    url = s3_server.url("pushed")
    first = push(s3_server, "--create-bucket", str(source), url)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["created the bucket pushed", f"astronaut: 1 -> {url}/astronaut"]
    again = push(s3_server, "--create-bucket", str(source / "astronaut"), url)  # one model's folder, already there
    assert again.returncode == 0 and again.stdout.splitlines() == [f"astronaut: nothing new -> {url}/astronaut"]
    for k, v in s3_server.env.items():
        os.environ.setdefault(k, v)
    repo = open_repository(url, tmp_path / "cache")
    assert list(repo.scan()) == ["astronaut"] and repo.model("astronaut").published == (1,)


def test_push_waits_for_an_s3_server_that_is_not_up_yet(s3_server, tmp_path):
    source = tmp_path / "models"
    shutil.copytree(ROOT / "models" / "astronaut", source / "astronaut")
    url = s3_server.url("waited")
    s3_server.stop()
    started = time.monotonic()
    try:
        waiting = subprocess.Popen(
            [sys.executable, "-m", "modelrepo", "push", "--create-bucket", "--wait", "300", str(source), url],
            env={**os.environ, **s3_server.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(3)
        assert waiting.poll() is None, waiting.communicate()  # still waiting, not failed
    finally:
        s3_server.start()
    out, err = waiting.communicate(timeout=300)
    assert waiting.returncode == 0, err
    assert f"astronaut: 1 -> {url}/astronaut" in out.splitlines() and time.monotonic() - started > 3


def test_bad_arguments_and_refusals_are_one_line_and_exit_2(s3_server, tmp_path):
    source = tmp_path / "models"
    shutil.copytree(ROOT / "models" / "astronaut", source / "astronaut")
    cases = {
        ("--wait", "-1", str(source), s3_server.url("xbad")): "--wait -1: seconds from 0 to 3600",
        ("--wait", "nan", str(source), s3_server.url("xbad")): "--wait nan: seconds from 0 to 3600",
        (str(source), "/tmp/models"): "must be an s3:// URL",
        (str(tmp_path / "none"), s3_server.url("xbad")): "is not a folder",
        (str(source), s3_server.url("nosuchbucket")): "no bucket 'nosuchbucket'",
        ("--wait", "2", str(source), s3_server.url("xbad").replace(f":{s3_server.port}/", ":9/")): "waited 2 s",
    }
    for args, message in cases.items():
        result = push(s3_server, *args)
        assert result.returncode == 2 and result.stdout == "", (args, result)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (args, lines)
    t0 = time.monotonic()
    wrong = push(s3_server, "--wait", "120", str(source), s3_server.url("xbad"), AWS_SECRET_ACCESS_KEY="wrong")
    assert wrong.returncode == 2 and "refused the credentials" in wrong.stderr, wrong.stderr
    assert time.monotonic() - t0 < 60  # a refusal is not waited on: waiting would not change it
