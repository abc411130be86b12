"""Fixtures and helpers for the service and client tests (tests/conftest.py registers the fixtures): a real model
repository made by the training code, and the
real server (uvicorn in a subprocess on a free port) answering over HTTP.

The repository holds a tiny image model (`python -m training fit-image`), a tiny SineKAN digit
classifier (`python -m training fit-digits`) trained on digits drawn with Pillow's built-in font,
and broken folders the service must list as failed without stopping.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from filelock import FileLock
from PIL import Image, ImageDraw, ImageFont

from bench import serving

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def draw_digit(
    digit: int,
    size: int = 200,
    font_size: int | None = None,
    stroke: int = 6,
    offset: tuple[int, int] = (0, 0),
    angle: float = 0.0,
    ink=(30, 30, 80),
    paper=(245, 240, 225),
) -> Image.Image:
    """A digit drawn dark-on-light with Pillow's built-in font (available wherever Pillow is)."""
    font = ImageFont.load_default(size=font_size or int(size * 0.75))
    img = Image.new("RGB", (size, size), paper)
    ImageDraw.Draw(img).text(
        (size / 2 + offset[0], size / 2 + offset[1]),
        str(digit),
        font=font,
        fill=ink,
        anchor="mm",
        stroke_width=stroke,
        stroke_fill=ink,
    )
    if angle:
        img = img.rotate(angle, resample=Image.BILINEAR, fillcolor=paper)
    return img


def png_bytes(img: Image.Image, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()


def digit_training_set(n_per_digit: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Varied small drawings (size, stroke, tilt, position, polarity) through the service's own
    MNIST-style preprocessing, so training inputs look like what uploads become."""
    from service.engine.preprocess import mnist_like

    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for d in range(10):
        for _ in range(n_per_digit):
            dark = rng.random() < 0.5
            ink, paper = ((20, 20, 20), (235, 235, 235)) if dark else ((235, 235, 235), (20, 20, 20))
            img = draw_digit(
                d,
                size=64,
                font_size=int(rng.integers(30, 50)),
                stroke=int(rng.integers(0, 4)),
                offset=tuple(int(v) for v in rng.integers(-6, 7, 2)),
                angle=float(rng.uniform(-12, 12)),
                ink=ink,
                paper=paper,
            )
            xs.append(mnist_like(img))
            ys.append(d)
    return np.stack(xs)[:, None].astype(np.float32), np.array(ys)


def make_digits_model(out: Path, data_dir: Path) -> float:
    """Write drawn digits as IDX files and train a small SineKAN on them with
    `python -m training fit-digits`; return its test accuracy from metadata.json."""
    from training.digits.idx import write_idx

    x, y = digit_training_set(30, seed=0)
    xt, yt = digit_training_set(5, seed=1)
    data_dir.mkdir(parents=True, exist_ok=True)
    for stem, images, labels in (("train", x, y), ("t10k", xt, yt)):
        write_idx(data_dir / f"{stem}-images-idx3-ubyte", np.rint(images[:, 0] * 255).astype(np.uint8))
        write_idx(data_dir / f"{stem}-labels-idx1-ubyte", labels.astype(np.uint8))
    subprocess.run(
        [
            PY,
            "-m",
            "training",
            "fit-digits",
            "--data-dir",
            str(data_dir),
            "--model",
            "sinekan",
            "--hidden",
            "32",
            "--epochs",
            "15",
            "--batch-size",
            "16",
            "--gamma",
            "1",
            "--lr",
            "3e-3",
            "--device",
            "cpu",
            "--no-progress",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    return json.loads((out / "1" / "metadata.json").read_text())["metrics"]["test_accuracy"]


def add_broken_models(repo: Path) -> None:
    """Folders the registry must list as failed: unreadable ONNX, tampered file, a spec that disagrees
    with the graph, junk or no metadata, metadata without inputs, a truncated config.pbtxt."""
    from modelrepo import sha256_bytes

    def copy_model(src: Path, dst: Path) -> None:
        shutil.copytree(src, dst)
        cfg = dst / "config.pbtxt"
        cfg.write_text(cfg.read_text().replace(f'name: "{src.name}"', f'name: "{dst.name}"'))

    def version_meta(folder: Path, **changes) -> None:
        meta = json.loads((folder / "1" / "metadata.json").read_text())
        (folder / "1" / "metadata.json").write_text(json.dumps({**meta, **changes}))

    garbage = b"this is not an onnx file"
    bad = repo / "broken-onnx"
    copy_model(repo / "astronaut", bad)
    (bad / "1" / "model.onnx").write_bytes(garbage)
    version_meta(bad, onnx_sha256=sha256_bytes(garbage))

    tampered = repo / "tampered"
    copy_model(repo / "astronaut", tampered)
    onnx = bytearray((tampered / "1" / "model.onnx").read_bytes())
    onnx[-1] ^= 0xFF
    (tampered / "1" / "model.onnx").write_bytes(bytes(onnx))

    wrong = repo / "wrong-inputs"  # an image spec over a digits graph
    copy_model(repo / "astronaut", wrong)
    digits_onnx = (repo / "digits" / "1" / "model.onnx").read_bytes()
    (wrong / "1" / "model.onnx").write_bytes(digits_onnx)
    version_meta(wrong, onnx_sha256=sha256_bytes(digits_onnx))

    junk = repo / "junk-metadata"
    copy_model(repo / "astronaut", junk)
    (junk / "metadata.json").write_text(
        json.dumps({"task": "image", "version": "../astronaut/1", "description": 5, "inputs": "x", "metrics": [1]})
    )

    no_inputs = repo / "no-inputs"
    copy_model(repo / "digits", no_inputs)
    meta = json.loads((no_inputs / "metadata.json").read_text())
    (no_inputs / "metadata.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "inputs"}))

    truncated = repo / "truncated-config"
    copy_model(repo / "digits", truncated)
    text = (truncated / "config.pbtxt").read_text()
    (truncated / "config.pbtxt").write_text(text[: len(text) // 2])

    (repo / "no-metadata" / "1").mkdir(parents=True)  # a plain Triton folder, but for a backend other than ONNX's
    shutil.copy(repo / "astronaut" / "1" / "model.onnx", repo / "no-metadata" / "1" / "model.onnx")
    (repo / "no-metadata" / "config.pbtxt").write_text('platform: "tensorrt_plan"\nmax_batch_size: 8\n')
    (repo / ".half-written.tmp-1").mkdir()


def built_once(tmp_path_factory, name: str, build) -> Path:
    """A folder `build(folder)` fills, made once per test run and copied for each caller: pytest-xdist's workers
    (`make test` runs several) wait for the first one's build under a file lock instead of each fitting the same
    models again, and each still gets a copy of its own to change. Without xdist, built in place."""
    own = tmp_path_factory.mktemp(name)
    if "PYTEST_XDIST_WORKER" not in os.environ:
        build(own)
        return own
    shared = tmp_path_factory.getbasetemp().parent / f"built-{name}"  # the run's folder, above the workers'
    with FileLock(f"{shared}.lock"):
        done = Path(f"{shared}.done")
        if not done.exists():
            shutil.rmtree(shared, ignore_errors=True)
            shared.mkdir()
            build(shared)
            done.touch()
    shutil.copytree(shared, own, symlinks=True, dirs_exist_ok=True)
    return own


@pytest.fixture(scope="session")
def model_repo(tmp_path_factory) -> Path:
    return built_once(tmp_path_factory, "models", lambda repo: build_model_repo(repo, tmp_path_factory))


def build_model_repo(repo: Path, tmp_path_factory) -> None:
    subprocess.run(
        [
            PY,
            "-m",
            "training",
            "fit-image",
            "--image",
            "astronaut",
            "--size",
            "32",
            "--steps",
            "60",
            "--width",
            "32",
            "--depth",
            "3",
            "--features",
            "32",
            "--out",
            str(repo / "astronaut"),
            "--no-progress",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    acc = make_digits_model(repo / "digits", tmp_path_factory.mktemp("digit-idx"))
    assert acc >= 0.9, f"the test digit model only reached {acc:.2f} accuracy"
    add_broken_models(repo)


class Server(serving.Server):
    """`python -m service` in a subprocess (bench/serving.py's helper): command-line options after the
    models, warnings logged, the output kept for the error if it exits early; stopped by `stop()`."""

    def __init__(self, models: Path, *args: str, env: dict | None = None):
        super().__init__(models, "test server", env, args=args, log_level="warning", capture=True)

    @contextlib.contextmanager
    def running(self):
        """Ready inside the block, stopped after it (also when the block or the start fails)."""
        try:
            yield self.wait_ready()
        finally:
            self.stop()


@pytest.fixture(scope="session")
def server(model_repo):
    srv = Server(
        model_repo,
        env={
            # every model loaded at start: the tests read the broken ones' reasons from the first listing
            "INR_MODEL_LOADING": "startup",
            "INR_MAX_QUERY_COORDS": "5000",
            "INR_MAX_RENDER_PIXELS": "1000000",
            "INR_MAX_CLASSIFY_IMAGES": "8",
            "INR_MAX_BODY_BYTES": "2000000",
            "INR_MAX_CLASSIFY_BYTES": "500000",
            "INR_RENDER_TILE_SAMPLES": "1024",
        },
    )
    with srv.running():
        yield srv
    assert srv.proc.returncode in (0, -15), "the server did not shut down cleanly"


@pytest.fixture(scope="session")
def client(server):
    with httpx.Client(base_url=server.url, timeout=30.0) as c:
        yield c


def fit_iiif_test_model(out: Path) -> None:
    """The validator's test image, fitted with the command of docs/iiif.md: every option at its default."""
    subprocess.run(
        [
            PY,
            "-m",
            "training",
            "fit-image",
            "--image",
            "iiif-test",
            "--size",
            "128",
            "--protocol",
            "full",
            "--out",
            str(out),
            "--no-progress",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=3600,
    )


@pytest.fixture(scope="session")
def iiif_repo(tmp_path_factory) -> Path:
    """`iiif-test` (the default fit, once per session), a tiny astronaut (32², one IIIF level) and `cat`, a
    non-square 2400×1500 model (four levels) for the deep-zoom pages (tests/geometry.py)."""
    return built_once(tmp_path_factory, "iiif-models", build_iiif_repo)


def build_iiif_repo(repo: Path) -> None:
    from tests.geometry import make_nonsquare_model

    reuse = os.environ.get("INR_TEST_IIIF_MODEL")  # a model fitted by the same command, to iterate faster
    if reuse:
        shutil.copytree(reuse, repo / "iiif-test")
    else:
        fit_iiif_test_model(repo / "iiif-test")
    subprocess.run(
        [
            PY,
            "-m",
            "training",
            "fit-image",
            "--image",
            "astronaut",
            "--size",
            "32",
            "--steps",
            "60",
            "--width",
            "32",
            "--depth",
            "3",
            "--features",
            "32",
            "--out",
            str(repo / "astronaut"),
            "--no-progress",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    shutil.copytree(ROOT / "models" / "digits", repo / "digits")
    make_nonsquare_model(repo / "cat", size=(2400, 1500), steps=200)


@pytest.fixture(scope="session")
def iiif_server(iiif_repo):
    """The real server over the IIIF repository; IIIF upscaling (`^`) up to 64× the native size."""
    # the tests stand in for the proxy in front (X-Forwarded-*), from the loopback
    env = {"INR_IIIF_ZOOM": "64", "INR_MAX_RENDER_PIXELS": "4194304", "INR_FORWARDED_ALLOW_IPS": "127.0.0.1"}
    srv = Server(iiif_repo, env=env)
    with srv.running():
        yield srv


def wait_for(condition, timeout: float = 60.0, what: str = "condition"):
    """Poll `condition` until it is truthy (returned) or `timeout` seconds pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def in_flight(url: str) -> float:
    """inr_requests_in_flight from /metrics (the scrape itself is one of them)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    line = next(ln for ln in text.splitlines() if ln.startswith("inr_requests_in_flight"))
    return float(line.split()[-1])


class HeldRequest:
    """A JSON POST in flight by construction: its headers are sent, so the server runs its handler
    (which waits for the body), and the body is held back until `release()`. The server's
    INR_BODY_TIMEOUT_S must outlast the hold. `answer()` → (status, headers, body)."""

    def __init__(self, url: str, path: str, body: dict):
        u = httpx.URL(url)
        self.body = json.dumps(body).encode()
        self.conn = http.client.HTTPConnection(u.host, u.port, timeout=120)
        self.conn.putrequest("POST", path)
        self.conn.putheader("Content-Type", "application/json")
        self.conn.putheader("Content-Length", str(len(self.body)))
        self.conn.endheaders()

    def release(self) -> None:
        self.conn.send(self.body)

    def answer(self) -> tuple[int, dict, bytes]:
        try:
            r = self.conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            self.conn.close()
