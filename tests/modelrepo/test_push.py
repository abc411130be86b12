"""`python -m modelrepo push` (a stack's s3-init, docs/s3.md "Models on S3") against a real S3 server: the
bucket created, each version published once, S3 waited for when it is not up yet (`--wait`), and bad arguments or
refusals as one line and exit code 2."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.common import free_port
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
        # argparse's own refusals: one line too, not its usage text
        ("--wait", "abc", str(source), s3_server.url("xbad")): "argument --wait: invalid float value: 'abc'",
        ("--wait",): "argument --wait: expected one argument",
        (str(source),): "the following arguments are required: target",
        ("--bogus", str(source), s3_server.url("xbad")): "unrecognized arguments: --bogus",
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


@pytest.mark.serial
def test_a_wait_polls_promptly_and_gives_up_after_its_seconds(s3_server, tmp_path):
    """While S3 does not answer, --wait tries again within a fraction of a second (not once per pause of the
    repository's, nor after botocore's retries), each try bounded by what is left of the wait; past it, one line and
    exit code 2."""
    source = tmp_path / "models"
    shutil.copytree(ROOT / "models" / "astronaut", source / "astronaut")
    with socket.socket() as silent:  # accepts connections, never answers: a server that hangs
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        refusing = s3_server.url("xwait").replace(f":{s3_server.port}/", f":{free_port()}/")
        hanging = s3_server.url("xwait").replace(f":{s3_server.port}/", f":{silent.getsockname()[1]}/")
        for url, wait_s in ((refusing, 4), (hanging, 4)):
            t0 = time.monotonic()
            result = push(s3_server, "--create-bucket", "--wait", str(wait_s), str(source), url, timeout=120)
            took = time.monotonic() - t0
            lines = result.stderr.strip().splitlines()
            assert result.returncode == 2 and result.stdout == "" and len(lines) == 1, (url, result)
            assert lines[0].startswith("error: ") and "S3 did not answer" in lines[0], lines
            tries = int(re.search(rf"waited {wait_s} s, (\d+) tr", lines[0]).group(1))
            # the interpreter's start is part of `took`; before, a hanging server held one try for 4 x 10 s
            assert wait_s <= took < wait_s + 15, (url, took)
            if url == refusing:  # each refused try fails at once: tried again after POLL_S (0.2 s), not every 2 s
                assert tries >= wait_s, lines[0]  # at least one a second, on a loaded machine too
