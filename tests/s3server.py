"""A real S3 server for the tests, started like Redis and PostgreSQL are: OpenStack Swift with its S3 API, from
Debian's packages, through deploy/s3/s3server.py (the same launcher the compose file's `s3` image runs), in a
temporary folder on free ports of 127.0.0.1. It skips with the reason when Swift is missing; with
INR_REQUIRE_S3=1 (CI) it fails instead.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from bench.common import free_port

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "deploy" / "s3" / "s3server.py"
ACCESS, SECRET = "inr:inr", "inr-secret-for-tests"


def _missing(reason: str):
    if os.environ.get("INR_REQUIRE_S3") == "1":
        pytest.fail(f"{reason} and INR_REQUIRE_S3=1")
    pytest.skip(reason)


class S3Server:
    def __init__(self, folder: Path | None = None):
        if shutil.which("swift-proxy-server") is None or shutil.which("memcached") is None:
            _missing(
                "Swift is not installed (apt-get install swift-proxy swift-account swift-container swift-object "
                "memcached)"
            )
        self.env = {"AWS_ACCESS_KEY_ID": ACCESS, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1"}
        self.proc: subprocess.Popen | None = None
        for attempt in range(3):  # a port of the block may be taken by another process before Swift binds it
            self.dir = Path(folder or tempfile.mkdtemp(prefix="inr-s3-"))
            self.port = free_port(5)  # the S3 port and the Swift servers' own
            self.endpoint = f"http://127.0.0.1:{self.port}"
            try:
                self.start()
                return
            except RuntimeError:
                if attempt == 2 or folder is not None:
                    raise
                shutil.rmtree(self.dir, ignore_errors=True)

    def start(self) -> None:
        self.log = self.dir / "server.log"
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen(
                ["/usr/bin/python3", str(LAUNCHER), "--dir", str(self.dir), "--port", str(self.port)],
                env={**os.environ, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 120  # Swift's servers start in seconds, or half a minute on a busy machine
        while "S3 on" not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                text = self.log.read_text()[-3000:]
                self.stop()
                raise RuntimeError(f"the S3 server did not start: {text}")
            time.sleep(0.2)
        self._wait()

    def _wait(self) -> None:
        deadline = time.monotonic() + 60
        client = self.client()
        while True:
            try:
                client.list_buckets()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def client(self, secret: str = SECRET):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS,
            aws_secret_access_key=secret,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def bucket(self, name: str | None = None) -> str:
        """A new empty bucket (each test its own, on the one server of the session)."""
        name = name or f"t{secrets.token_hex(6)}"
        self.client().create_bucket(Bucket=name)
        return name

    def url(self, bucket: str, path: str = "models") -> str:
        return f"s3://127.0.0.1:{self.port}/{bucket}/{path}".rstrip("/")

    def stop(self) -> None:
        """Stop it (SIGTERM to the launcher, which stops the Swift servers); the objects stay in `dir`."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_server():
    server = S3Server()
    yield server
    server.close()


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """The AWS_* variables of the test server, in this process's environment (botocore reads them)."""
    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    return s3_server
