"""Helpers for the fit tests: a real `python -m training worker` subprocess, a real redis-server, a
small photo-like PNG, and waiting on a job in the store."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bench.common import free_port
from fitstore import FINISHED, FitStore

ROOT = Path(__file__).resolve().parents[1]
FAST = {"preset": "fourier-small", "size": 32, "steps": 60, "protocol": "paper", "seed": 0}


def photo(width: int = 48, height: int = 40, seed: int = 0) -> Image.Image:
    """Smooth colour gradients with a few discs: something a 32² fit gets well above chance."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    x, y = xx / max(width, height), yy / max(width, height)
    rgb = np.stack([x, y, 0.5 + 0.5 * np.sin(6 * x + 3 * y)], -1)
    for _ in range(3):
        cx, cy, r = rng.random(3) * [width, height, 10] + [0, 0, 4]
        rgb[(xx - cx) ** 2 + (yy - cy) ** 2 < r * r] = rng.random(3)
    return Image.fromarray((rgb * 255).astype(np.uint8))


def png(img: Image.Image | None = None, fmt: str = "PNG", **save) -> bytes:
    buf = io.BytesIO()
    (img or photo()).save(buf, fmt, **save)
    return buf.getvalue()


def submit(
    store: FitStore,
    name: str = "upload",
    image: bytes | None = None,
    max_running: int = 1,
    queue_limit: int = 4,
    deadline_s: float = 300,
    **options,
) -> dict:
    """A job as the API submits it (the API normalises the upload to an RGB PNG first)."""
    return store.submit(
        name=name,
        options={**FAST, **options},
        image_png=image or png(),
        source={"filename": f"{name}.png", "width": 48, "height": 40, "mode": "RGB", "frames": 1},
        deadline_s=deadline_s,
        max_running=max_running,
        queue_limit=queue_limit,
    )


def wait_for(store: FitStore, job_id: str, predicate, timeout: float = 240, what: str = "") -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rec = store.get(job_id)
        if predicate(rec):
            return rec
        time.sleep(0.2)
    raise AssertionError(f"job {job_id}: {what or 'condition'} not reached in {timeout} s; record: {store.get(job_id)}")


def wait_finished(store: FitStore, job_id: str, timeout: float = 240) -> dict:
    return wait_for(store, job_id, lambda r: r["state"] in FINISHED, timeout, "a finished state")


class Worker:
    """`python -m training worker` in a subprocess, on `store` and `models`; output kept in a log file; `env`:
    more environment variables."""

    def __init__(
        self,
        store: str,
        models: Path,
        log: Path,
        *args: str,
        stale_s: float = 3,
        heartbeat_s: float = 0.5,
        env: dict | None = None,
    ):
        self.log_path = log
        self.log = open(log, "ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **(env or {})}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "training",
                "-v",
                "worker",
                "--store",
                store,
                "--models",
                str(models),
                "--stale-s",
                str(stale_s),
                "--heartbeat-s",
                str(heartbeat_s),
                "--poll-s",
                "0.2",
                "--nice",
                "0",
                *args,
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def registered(self, store: FitStore, seconds: float = 120) -> None:
        """Wait until the store lists a worker: this one imports torch, then sends its first heartbeat."""
        deadline = time.monotonic() + seconds
        while not store.workers() and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.2)
        assert store.workers(), self.output()[-3000:]

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.log.close()
        return self.proc.returncode


class RedisServer:
    """A real redis-server on a free port, without persistence."""

    def __init__(self, folder: Path):
        exe = shutil.which("redis-server")
        if exe is None:
            if os.environ.get("INR_REQUIRE_REDIS") == "1":
                pytest.fail("redis-server is not installed (apt-get install redis-server) and INR_REQUIRE_REDIS=1")
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(folder),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)
