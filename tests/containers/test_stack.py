"""docker-compose.yml up with one api replica: health, the read-only models mount, a broken model in
the mount, every protocol through nginx, nginx's render cache, and nginx before any replica is up."""

from __future__ import annotations

import io
import json
import secrets
import threading
import time
import urllib.error
import urllib.request

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from PIL import Image

from tests.otlp import Receiver

from .stack import Stack, metric, settle


@pytest.fixture(scope="module")
def otlp():
    """A real OTLP receiver on this host, which the replicas reach as host.containers.internal (Podman's name for
    the host; Docker's needs an extra_hosts entry, so the trace test runs under Podman only)."""
    receiver = Receiver(host="0.0.0.0", advertise="host.containers.internal").start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def stack(make_stack, report, otlp) -> Stack:
    s = make_stack("one")
    if s.engine.cli == "podman":  # traces on, over OTLP/HTTP, for the traceparent test below
        s.env.update(
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.http_url.removesuffix("/v1/traces"),
            }
        )
    broken = s.models / "broken"  # a model folder whose ONNX file is not what its metadata says
    (broken / "1").mkdir(parents=True)
    for f in ("config.pbtxt",):
        (broken / f).write_text((s.models / "astronaut" / f).read_text().replace('"astronaut"', '"broken"'))
    (broken / "1" / "metadata.json").write_text((s.models / "astronaut" / "1" / "metadata.json").read_text())
    (broken / "1" / "model.onnx").write_bytes(b"not an onnx file")
    report["time_to_healthy_1_replica_s"] = round(s.up(1), 1)
    return s


def test_the_replica_is_healthy_non_root_and_cannot_write_its_models(stack):
    (api,) = stack.containers()
    assert stack.health(api) == "healthy"
    assert stack.engine("exec", api, "id", "-u").stdout.strip() == "10001"
    touch = stack.engine("exec", api, "touch", "/app/models/x", check=False)
    assert touch.returncode != 0 and "Read-only file system" in touch.stderr
    limits = stack.engine.inspect(api)["HostConfig"]
    assert limits["Memory"] == 1 << 30 and limits["NanoCpus"] == 2 * 10**9


def test_a_broken_model_in_the_mount_is_listed_failed_and_the_others_serve(http):
    broken = http.get("/v1/models/broken").json()
    assert broken["status"] == "failed" and broken["error"], broken
    assert http.get("/v1/models/astronaut").json()["status"] == "ready"
    assert http.get("/health/ready").status_code == 200


def test_query_render_and_classify_through_nginx(http):
    rgb = http.post("/v1/models/astronaut/query", json={"coords": [[0.5, 0.5], [0.25, 0.75]]}).json()["rgb"]
    assert np.array(rgb).shape == (2, 3)
    png = http.get("/v1/models/astronaut/render", params={"width": 96, "height": 64})
    assert png.status_code == 200 and Image.open(io.BytesIO(png.content)).size == (96, 64)
    digit = Image.new("L", (64, 64), 255)
    digit.paste(0, (28, 8, 36, 56))  # a stroke: a "1"
    buf = io.BytesIO()
    digit.save(buf, "PNG")
    r = http.post("/v1/models/digits/classify", files={"files": ("one.png", buf.getvalue(), "image/png")})
    assert r.status_code == 200 and r.json()["predictions"][0]["label"] == 1, r.text


def test_a_traceparent_sent_through_nginx_comes_back_in_the_replicas_span(stack, http, otlp):
    """Traces: nginx passes the caller's trace context on; the replica's server span continues it (exported
    to the receiver on the host), and the answer's traceparent names that span; a malformed one starts anew."""
    if stack.engine.cli != "podman":
        pytest.skip("the replicas reach the host's receiver as host.containers.internal under Podman only")
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    r = http.post(
        "/v1/models/astronaut/query",
        json={"coords": [[0.5, 0.5]]},
        headers={"traceparent": f"00-{trace_id}-{parent}-01"},
    )
    assert r.status_code == 200, r.text
    version, answered_trace, answered_span, flags = r.headers["traceparent"].split("-")
    assert (version, answered_trace, flags) == ("00", trace_id, "01") and answered_span != parent
    spans = otlp.wait_trace(trace_id, "inr.infer", timeout=60)
    server = next(s for s in spans if s.span_id == answered_span)
    assert server.parent_id == parent and server.service == "inr-serve" and server.kind == 2  # SERVER
    assert any(s.name == "inr.infer" and s.parent_id == answered_span for s in spans)
    bad = http.post(
        "/v1/models/astronaut/query", json={"coords": [[0.5, 0.5]]}, headers={"traceparent": f"00-{trace_id}-zz-01"}
    )
    assert bad.status_code == 200 and bad.headers["traceparent"].split("-")[1] != trace_id


def test_v2_infer_with_tritonclient_through_nginx(stack):
    tc = triton.InferenceServerClient(stack.url.removeprefix("http://"), network_timeout=60)
    try:
        assert tc.is_server_ready() and tc.is_model_ready("digits")
        x = np.random.default_rng(0).random((3, 1, 28, 28), dtype=np.float32)
        inp = triton.InferInput("images", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=True)
        probs = tc.infer("digits", [inp]).as_numpy("probabilities")
        assert probs.shape == (3, 10) and np.allclose(probs.sum(axis=1), 1, atol=1e-4)
    finally:
        tc.close()


def test_v2_over_grpc_with_tritonclient_through_nginx(stack):
    """gRPC on nginx's published gRPC port, proxied over HTTP/2 to the replica's INR_GRPC_PORT."""
    import tritonclient.grpc as grpcclient

    tc = grpcclient.InferenceServerClient(f"127.0.0.1:{stack.grpc_port}")
    try:
        assert tc.is_server_live() and tc.is_server_ready() and tc.is_model_ready("digits")
        assert tc.get_model_metadata("astronaut").inputs[0].name == "coords"
        x = np.random.default_rng(1).random((2, 1, 28, 28), dtype=np.float32)
        inp = grpcclient.InferInput("images", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        probs = tc.infer("digits", [inp]).as_numpy("probabilities")
        assert probs.shape == (2, 10) and np.allclose(probs.sum(axis=1), 1, atol=1e-4)
    finally:
        tc.close()


def test_iiif_info_and_a_tile_through_nginx(http):
    info = http.get("/iiif/3/astronaut/info.json")
    assert info.status_code == 200 and info.json()["type"] == "ImageService3"
    assert info.json()["id"].endswith("/iiif/3/astronaut")
    tile = http.get("/iiif/3/astronaut/0,0,512,512/256,/0/default.png")
    assert tile.status_code == 200 and Image.open(io.BytesIO(tile.content)).size == (256, 256)


def test_metrics_through_nginx_count_the_requests(http):
    from prometheus_client.parser import text_string_to_metric_families

    text = http.get("/metrics").text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert metric(samples, "nv_inference_request_success", model="digits") >= 1


def test_nginx_caches_a_get_render_and_revalidates_with_the_etag(http):
    url = "/v1/models/astronaut/render?width=80&height=80&viewport=0.1,0.1,0.6,0.6"
    first, second = http.get(url), http.get(url)
    assert first.status_code == second.status_code == 200
    assert first.headers["x-cache-status"] in ("MISS", "EXPIRED")
    assert second.headers["x-cache-status"] == "HIT" and second.content == first.content
    etag = first.headers["etag"]
    again = http.get(url, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert http.get(url, headers={"If-None-Match": '"something-else"'}).status_code == 200


# Unbroken 200s for longer than nginx's resolver cache (`valid=1s`) plus its connect timeout (1 s): by then
# every nginx worker has looked the replicas up again, so no request can still go to an old address.
STABLE_S = 4.0


def test_nginx_answers_json_503_while_no_replica_runs_then_serves_without_a_restart(stack, report):
    (nginx,) = stack.containers("nginx")
    started = stack.engine.inspect(nginx)["State"]["StartedAt"]
    before = {n: stack.address(n) for n in stack.containers()}
    stack.engine("stop", "-t", "30", *stack.containers())
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(stack.url + "/v1/models", timeout=30)
        assert refused.value.code == 503 and refused.value.headers["Retry-After"] == "1"
        assert "no api replica" in json.loads(refused.value.read())["error"]
    finally:
        stack.engine("start", *stack.containers(None, all_states=True))
    came_back = settle(stack, "/v1/models/astronaut", deadline_s=120, stable_s=STABLE_S)
    report["restart_new_address"] = {n: [before[n], stack.address(n)] for n in before}
    report["restart_first_200_s"] = came_back.first_ok and round(came_back.first_ok, 2)
    report["restart_stale_window_s"] = came_back.stale_window
    report["restart_stale_answers"] = came_back.stale
    if not came_back.stable:
        diagnosis = stack.diagnose("/v1/models/astronaut")
        running = [n for n in stack.containers() if stack.engine.inspect(n)["State"].get("Running")]
        dns = stack.engine("exec", nginx, "getent", "hosts", "api", check=False)
        if running and dns.returncode != 0:
            # seen once in CI (Podman 4.3, aardvark-dns 1.4), never reproduced in 5 loaded runs here
            pytest.xfail(
                "the engine's DNS no longer answers 'api' inside the nginx container although a replica "
                f"runs; nginx cannot route without it\n{diagnosis}"
            )
        pytest.fail(
            f"nginx did not serve the restarted replica for {STABLE_S:g} s without a break within 120 s "
            f"(first 200 at {came_back.first_ok} s; failures after it: {came_back.stale})\n{diagnosis}"
        )
    assert stack.engine.inspect(nginx)["State"]["StartedAt"] == started, "nginx was restarted"


def test_compose_down_with_requests_in_flight_leaves_nothing_behind(stack, report):
    """Last in this module: `down` while a render and queries run; each finishes or gets an error."""
    outcomes = []

    def render():
        try:
            r = httpx.post(stack.url + "/v1/models/astronaut/render", json={"width": 1024, "height": 1024}, timeout=60)
            outcomes.append(r.status_code)
        except httpx.HTTPError as e:
            outcomes.append(type(e).__name__)

    thread = threading.Thread(target=render)
    thread.start()
    time.sleep(1.0)
    stack.compose("down", "-v", "-t", "30")
    thread.join(60)
    report["compose_down_render_in_flight"] = outcomes
    assert len(outcomes) == 1 and (outcomes[0] in (200, 502, 503) or isinstance(outcomes[0], str)), outcomes
    assert stack.containers(None, all_states=True) == []
    networks = stack.engine("network", "ls", "--format", "{{.Name}}").stdout.split()
    assert not [n for n in networks if n.startswith(stack.project)], networks
    if stack.engine.cli == "podman":
        pods = stack.engine("pod", "ls", "--format", "{{.Name}}").stdout.split()
        assert f"pod_{stack.project}" not in pods, pods
