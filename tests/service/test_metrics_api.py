"""GET /metrics: Prometheus text that parses, Triton's counter names, and values that rise with traffic."""

from __future__ import annotations

import numpy as np
from prometheus_client.parser import text_string_to_metric_families


def scrape(client) -> dict[tuple, float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels) -> float:
    """Sum of the samples of `name` whose labels include `labels` (the parser reads counters as NAME_total)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n in (name, f"{name}_total") and want <= set(ls))


def classify_body(n: int) -> dict:
    return {"images": np.random.default_rng(n).random((n, 28, 28)).round(3).tolist()}


def test_metrics_rise_after_inference_requests(client):
    before = scrape(client)
    assert client.post("/v1/models/digits/classify", json=classify_body(3)).status_code == 200
    assert client.post("/v1/models/astronaut/query", json={"coords": [[0.5, 0.5], [0.1, 0.9]]}).status_code == 200
    v2 = {"inputs": [{"name": "images", "datatype": "FP32", "shape": [2, 1, 28, 28], "data": [0.5] * 1568}]}
    assert client.post("/v2/models/digits/infer", json=v2).status_code == 200
    assert client.post("/v1/models/digits/classify", json={"images": [[0.5] * 3]}).status_code == 400
    after = scrape(client)

    def rise(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    digits = {"model": "digits", "version": "1"}
    assert rise("nv_inference_request_success", **digits) == 2
    assert rise("nv_inference_request_failure", **digits) == 1
    assert rise("nv_inference_count", **digits) == 5  # 3 + 2 images
    assert 1 <= rise("nv_inference_exec_count", **digits) <= 2
    assert rise("nv_inference_count", model="astronaut") == 2
    for name in ("nv_inference_request_duration_us", "nv_inference_compute_infer_duration_us"):
        assert rise(name, **digits) > 0
    assert rise("nv_inference_queue_duration_us", **digits) >= 0
    assert (
        rise("inr_request_duration_seconds_count", model="digits", endpoint="/v1/models/{name}/classify", code="200")
        == 1
    )
    assert rise("inr_request_duration_seconds_count", model="digits", endpoint="/v2/models/{name}/infer") == 1
    assert rise("inr_request_duration_seconds_count", model="digits", code="400") == 1
    assert rise("inr_batch_size_sum", model="digits") == 5
    assert rise("inr_inference_compute_duration_seconds_count", model="digits") >= 1
    assert rise("inr_inference_queue_duration_seconds_count", model="digits") == 2


def test_metrics_count_models_by_state_and_keep_unknown_names_out_of_labels(client):
    client.get("/v1/models/made-up-name-123")
    samples = scrape(client)
    states = [m["status"] for m in client.get("/v1/models").json()["models"]]
    assert value(samples, "inr_models", state="ready") == states.count("ready") == 2
    assert value(samples, "inr_models", state="failed") == states.count("failed") >= 4
    assert not any("made-up" in str(labels) for _, labels in samples)
    assert value(samples, "inr_request_duration_seconds_count", endpoint="/v1/models/{name}", model="", code="404") >= 1


def test_triton_counters_use_tritons_names_without_suffixes(client):
    text = client.get("/metrics").text
    for name in (
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
    ):
        assert f"# TYPE {name} counter" in text and f'\n{name}{{model="digits",version="1"' in text
    assert "# TYPE inr_batch_size histogram" in text


def test_a_render_counts_its_samples_as_inference(client):
    before = scrape(client)
    r = client.get("/v1/models/astronaut/render", params={"width": 40, "height": 30, "supersample": 2})
    assert r.status_code == 200
    after = scrape(client)

    def rise(name):
        return value(after, name, model="astronaut") - value(before, name, model="astronaut")

    assert rise("nv_inference_count") == 40 * 30 * 4
    assert rise("nv_inference_exec_count") >= 1  # one run per tile
    assert rise("nv_inference_compute_infer_duration_us") > 0
    assert rise("nv_inference_request_success") == 1


def test_requests_in_flight_counts_the_scrape_itself_and_a_running_render(server):
    """inr_requests_in_flight: what a drain would wait for (the /metrics request is one of them). The render
    is in flight by construction while the gauge is read: its headers are in, its body held back (a render
    that is merely large can finish before a scrape sees it, on a fast CPU)."""
    import httpx

    from tests.servers import HeldRequest, in_flight, wait_for

    assert value(scrape(httpx.Client(base_url=server.url)), "inr_requests_in_flight") == 1
    render = HeldRequest(server.url, "/v1/models/astronaut/render", {"width": 64, "height": 64})
    wait_for(lambda: in_flight(server.url) >= 2, 30, "the render to be counted")
    assert value(scrape(httpx.Client(base_url=server.url)), "inr_requests_in_flight") == 2
    render.release()
    status, headers, _ = render.answer()
    assert status == 200 and headers["content-type"] == "image/png"
    assert value(scrape(httpx.Client(base_url=server.url)), "inr_requests_in_flight") == 1


def test_fit_metrics_read_an_unmade_store_as_zeros_and_an_unreachable_one_as_down(model_repo, tmp_path):
    """The fit metrics come from the job store at each scrape (docs/fits.md, "Metrics"): a SQLite store nobody
    made yet reads as zeros and is not made by the scrape; a store that does not answer is inr_fit_store_up 0,
    never a failed scrape."""
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import Settings

    for store, up in ((f"sqlite:///{tmp_path}/fits.sqlite", 1), ("redis://127.0.0.1:1/0", 0)):
        with TestClient(create_app(Settings(models=model_repo, grpc_port=0, fit_store=store))) as c:
            samples = scrape(c)
        assert samples["inr_fit_store_up", ()] == up
        assert (("inr_fit_jobs", (("state", "queued"),)) in samples) == bool(up)
    assert samples["inr_fit_store_up", ()] == 0 and not (tmp_path / "fits.sqlite").exists()
