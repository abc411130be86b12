"""The response cache (config.pbtxt `response_cache { enable: true }`, `--cache-config local,size=BYTES`) against the
real server: repeats are answered from the cache over HTTP and gRPC with the same tensors, counted under Triton's
nv_cache_* names per model and version; a new version never answers from an old version's entries; a model
without the setting is never cached; a malformed --cache-config is one line and exit 2."""

from __future__ import annotations

import os
import re
import subprocess

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from live import add_version, private_repo, wait_for

from tests.servers import PY, ROOT, Server


def counter(url: str, name: str, model: str, version: str = "1") -> float:
    text = httpx.get(f"{url}/metrics").text
    m = re.search(rf'^{name}{{model="{model}",version="{version}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def infer(url: str, x: np.ndarray) -> tuple[np.ndarray, str]:
    c = th.InferenceServerClient(url.removeprefix("http://"))
    t = th.InferInput("coords", list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    r = c.infer("astronaut", [t])
    c.close()
    return r.as_numpy("rgb"), r.get_response()["model_version"]


@pytest.fixture
def cached(model_repo, tmp_path):
    repo = private_repo(model_repo, tmp_path / "models")
    cfg = repo / "astronaut" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "response_cache {\n  enable: true\n}\n")
    srv = Server(
        repo, "--model-control-mode", "poll", "--repository-poll-secs", "0.3", "--cache-config", "local,size=8000000"
    ).wait_ready()
    yield srv, repo
    srv.stop()


def test_repeats_are_answered_from_the_cache_and_a_new_version_never_is(cached):
    srv, repo = cached
    hits = lambda v="1": counter(srv.url, "nv_cache_num_hits_per_model", "astronaut", v)  # noqa: E731
    misses = lambda v="1": counter(srv.url, "nv_cache_num_misses_per_model", "astronaut", v)  # noqa: E731
    x = np.random.default_rng(1).random((500, 2), dtype=np.float32)
    first, _ = infer(srv.url, x)
    assert (hits(), misses()) == (0, 1)
    again, _ = infer(srv.url, x)
    assert (hits(), misses()) == (1, 1) and np.array_equal(again, first)
    g = tg.InferenceServerClient(srv.grpc_url)
    t = tg.InferInput("coords", list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    assert np.array_equal(g.infer("astronaut", [t]).as_numpy("rgb"), first)
    assert hits() == 2
    other = x.copy()
    other[0, 0] += 1e-3  # one coordinate differs: a miss
    infer(srv.url, other)
    assert (hits(), misses()) == (2, 2)
    stats = g.get_inference_statistics("astronaut", as_json=True)["model_stats"][0]["inference_stats"]
    assert int(stats["cache_hit"]["count"]) == 2 and int(stats["cache_miss"]["count"]) == 2
    assert "nv_cache_num_entries 2" in httpx.get(f"{srv.url}/metrics").text
    g.close()

    add_version(repo / "astronaut")
    wait_for(lambda: infer(srv.url, x[:1])[1] == "2", 60, "version 2 to serve")
    rgb, version = infer(srv.url, x)  # the same tensor on the new version: run, not answered from version 1
    assert version == "2" and misses("2") == 2 and hits("2") == 0
    infer(srv.url, x)
    assert hits("2") == 1


def test_a_model_without_response_cache_is_never_cached(server):
    c = th.InferenceServerClient(server.url.removeprefix("http://"))
    x = th.InferInput("images", [1, 1, 28, 28], "FP32")
    x.set_data_from_numpy(np.zeros((1, 1, 28, 28), np.float32))
    for _ in range(3):
        c.infer("digits", [x])
    c.close()
    assert counter(server.url, "nv_cache_num_hits_per_model", "digits") == 0


@pytest.mark.parametrize(
    "value, message",
    [
        ("local", "expected local,size=BYTES"),
        ("redis,size=100", "expected local,size=BYTES"),
        ("local,size=64MB", "size must be a whole number of bytes, got '64MB'"),
        ("local,bytes=100", "expected local,size=BYTES"),
    ],
)
def test_a_malformed_cache_config_is_one_line_and_exit_2(model_repo, value, message):
    for args, env in ((["--cache-config", value], {}), ([], {"INR_CACHE_CONFIG": value})):
        r = subprocess.run(
            [PY, "-m", "service", "--models", str(model_repo), "--grpc-port", "0", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **env},
        )
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith("error: --cache-config: ") and message in r.stderr
