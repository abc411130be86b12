"""Tools for the model-control tests: a private copy of the test repository, new and corrupt
versions written as a writer would (atomically), the repository index, and a load of clients
that records every answer."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from tests.servers import PY, ROOT, wait_for

COORDS = [[0.1 + 0.1 * i, 0.9 - 0.1 * i] for i in range(8)]


def private_repo(model_repo: Path, dest: Path, names=("astronaut", "digits")) -> Path:
    """The session's good models, copied so that a test may change them."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copytree(model_repo / name, dest / name)
    return dest


def versions_on_disk(model: Path) -> list[int]:
    return sorted(int(p.name) for p in model.iterdir() if p.is_dir() and p.name.isdigit())


def train_next_version(model: Path, seed: int, wait: bool = True) -> subprocess.Popen:
    """`python -m training fit-image --out MODEL` into an existing model: it writes the next version."""
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "training",
            "fit-image",
            "--image",
            "astronaut",
            "--size",
            "16",
            "--steps",
            "20",
            "--width",
            "16",
            "--depth",
            "2",
            "--features",
            "16",
            "--seed",
            str(seed),
            "--out",
            str(model),
            "--no-progress",
        ],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if wait:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out
    return proc


def add_version(model: Path, corrupt: bool = False) -> int:
    """Copy the highest version to the next number, written in a hidden folder and renamed into
    place; `corrupt` makes its model.onnx garbage (with its sha256 recorded, so that only the ONNX
    parse fails)."""
    last = versions_on_disk(model)[-1]
    new = last + 1
    tmp = model / f".{new}.tmp"
    shutil.copytree(model / str(last), tmp)
    record = tmp / "metadata.json"  # the version's own record: its number, and its file's sha256
    meta = json.loads(record.read_text())
    meta["version"] = new
    if corrupt:
        garbage = b"not an onnx graph " * 64
        (tmp / "model.onnx").write_bytes(garbage)
        meta["onnx_sha256"] = hashlib.sha256(garbage).hexdigest()
    record.write_text(json.dumps(meta))
    os.rename(tmp, model / str(new))
    return new


def index(url: str, headers: dict | None = None, ready: bool | None = None) -> list[dict]:
    body = {} if ready is None else {"ready": ready}
    r = httpx.post(f"{url}/v2/repository/index", json=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def entry(rows: list[dict], name: str, version: int | None = None) -> dict | None:
    return next((r for r in rows if r["name"] == name and (version is None or r.get("version") == str(version))), None)


def query_rgb(url: str) -> np.ndarray:
    r = httpx.post(f"{url}/v1/models/astronaut/query", json={"coords": COORDS}, timeout=30)
    assert r.status_code == 200, r.text
    return np.array(r.json()["rgb"])


@dataclass
class Answer:
    kind: str
    started: float
    finished: float
    status: int
    rgb: np.ndarray | None = None
    text: str = ""


@dataclass
class Clients:
    """`n` threads, each sending v1 queries and classifies in turn, `pause` seconds apart (a client's
    think time; it leaves the training CLI some CPU on a small machine)."""

    url: str
    n: int = 16
    pause: float = 0.05
    answers: list[Answer] = field(default_factory=list)

    def __post_init__(self):
        self.stop = threading.Event()
        self.lock = threading.Lock()
        image = np.random.default_rng(0).random((28, 28)).round(3).tolist()
        self.classify_body = {"images": [image]}
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(self.n)]

    def start(self) -> "Clients":
        self.t0 = time.monotonic()
        for t in self.threads:
            t.start()
        return self

    def run(self, i: int) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as c:
            k = i
            while not self.stop.is_set():
                k += 1
                started = time.monotonic()
                try:
                    if k % 2:
                        r = c.post("/v1/models/astronaut/query", json={"coords": COORDS})
                        rgb = np.array(r.json()["rgb"]) if r.status_code == 200 else None
                        a = Answer("query", started, time.monotonic(), r.status_code, rgb, r.text[:300])
                    else:
                        r = c.post("/v1/models/digits/classify", json=self.classify_body)
                        a = Answer("classify", started, time.monotonic(), r.status_code, text=r.text[:300])
                except httpx.HTTPError as e:
                    a = Answer("error", started, time.monotonic(), 0, text=repr(e))
                with self.lock:
                    self.answers.append(a)
                self.stop.wait(self.pause)

    def answered(self, what: str, predicate=lambda a: True, n: int = 1, timeout: float = 120) -> None:
        """Wait until `n` answers satisfy `predicate`: a state of the run by its answers, not by the clock."""

        def count() -> int:
            with self.lock:
                return sum(1 for a in self.answers if predicate(a))

        wait_for(lambda: count() >= n, timeout, what)

    def finish(self, at_least: float) -> list[Answer]:
        """Keep going until `at_least` seconds since start, then stop and return every answer."""
        time.sleep(max(0.0, self.t0 + at_least - time.monotonic()))
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)
        self.ran = time.monotonic() - self.t0
        return self.answers


def check_switch(answers: list[Answer], old: np.ndarray, new: np.ndarray) -> float:
    """Every answer is 200; each query answer is the old or the new version's; once a new answer
    has come back, every query started after it gets the new one. Returns when the switch came."""
    bad = [a for a in answers if a.status != 200]
    assert not bad, f"{len(bad)} of {len(answers)} answers were not 200, e.g. {bad[0]}"
    assert not np.allclose(old, new, atol=1e-3), "the new version answers as the old one did"
    queries = sorted((a for a in answers if a.kind == "query"), key=lambda a: a.started)
    is_new = []
    for a in queries:
        if np.allclose(a.rgb, new, atol=1e-4):
            is_new.append(True)
        else:
            assert np.allclose(a.rgb, old, atol=1e-4), f"an answer from neither version: {a.rgb}"
            is_new.append(False)
    assert any(is_new) and not all(is_new), "the answers did not switch during the run"
    switched = min(a.finished for a, n in zip(queries, is_new) if n)
    late_old = [a for a, n in zip(queries, is_new) if not n and a.started > switched]
    assert not late_old, f"{len(late_old)} queries started after the switch got the old version"
    return switched
