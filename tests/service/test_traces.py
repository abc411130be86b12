"""OpenTelemetry traces, received by a real OTLP receiver (tests/otlp.py: opentelemetry-proto's
TraceService over gRPC, and ExportTraceServiceRequest over HTTP).

The real server (`python -m service`, poll mode) exports over OTLP/gRPC; a real `python -m training worker`
exports over OTLP/HTTP. An HTTP classify, a gRPC infer and a render arrive as trees of spans under their
server spans, continuing the client's `traceparent`; a fit arrives as one trace from the upload to the
version the API serves. A malformed `traceparent` starts a new trace and is never an error."""

from __future__ import annotations

import shutil
import time

import grpc
import httpx
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from fitstore import FitStore
from tests.fits import Worker, photo, png
from tests.otlp import Receiver
from tests.servers import ROOT, Server

FAST = {"preset": "fourier-small", "size": "32", "steps": "60", "protocol": "paper", "seed": "0"}
CLIENT = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"  # a client's trace and span ids
SERVER_KIND = 2  # SPAN_KIND_SERVER in the OTLP protobuf


def tree(spans: list, parent: str = "", pad: str = "") -> str:
    """The spans indented by parent (roots: those whose parent is not among them), with the service, duration, a
    few attributes, events and links."""
    ids, lines = {s.span_id for s in spans}, []
    for s in sorted(spans, key=lambda s: s.start_ns):
        if (s.parent_id if s.parent_id in ids else "") == parent:
            keep = ("inr.", "http.route", "http.response", "rpc.")
            attrs = " ".join(f"{k}={v}" for k, v in s.attributes.items() if k.startswith(keep))
            lines.append(f"{pad}{s.name} [{s.service}] {(s.end_ns - s.start_ns) / 1e6:.1f} ms {attrs}".rstrip())
            lines += [f"{pad}    event {name} {attributes}" for name, attributes in s.events]
            lines += [f"{pad}    links to {len(s.links)} span(s)"] * bool(s.links)
            lines.append(tree(spans, s.span_id, pad + "  "))
    return "\n".join(x for x in lines if x)


def otel(endpoint: str, protocol: str) -> dict:
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """The receiver, the server (gRPC export) and a fit worker (HTTP export) on one SQLite store. The server
    batches with Triton's delay policy (20 ms), so that concurrent requests share a batch."""
    receiver = Receiver().start()
    repo = tmp_path_factory.mktemp("traces-models")
    for name in ("digits", "astronaut"):
        shutil.copytree(ROOT / "models" / name, repo / name)
    url = f"sqlite:///{tmp_path_factory.mktemp('traces-store') / 'fits.sqlite'}"
    srv = Server(
        repo,
        "--model-control-mode",
        "poll",
        "--repository-poll-secs",
        "0.5",
        env={"INR_FIT_STORE": url, "INR_MAX_QUEUE_DELAY_MS": "20", **otel(receiver.grpc_url, "grpc")},
    ).wait_ready()
    srv.repo = repo  # a test adds a model folder to it
    worker = Worker(
        url, repo, tmp_path_factory.mktemp("traces-log") / "worker.log", env=otel(receiver.http_url, "http/protobuf")
    )
    store = FitStore(url)
    try:
        yield srv, worker, receiver, store
    finally:
        store.close()
        worker.stop()
        srv.stop()
        receiver.stop()


def ids(traceparent: str) -> tuple[str, str]:
    version, trace_id, span_id, flags = traceparent.split("-")
    assert version == "00" and len(trace_id) == 32 and len(span_id) == 16 and flags in ("01", "03"), traceparent
    return trace_id, span_id


def by_name(spans, name: str):
    found = [s for s in spans if s.name == name]
    assert found, f"no {name} span in:\n{tree(spans)}"
    return found


def test_an_http_classify_continues_the_clients_trace(stack):
    srv, _, receiver, _ = stack
    image = np.zeros((28, 28)).tolist()
    r = httpx.post(
        f"{srv.url}/v1/models/digits/classify",
        json={"images": [image]},
        headers={"traceparent": f"00-{CLIENT[0]}-{CLIENT[1]}-01"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    trace_id, span_id = ids(r.headers["traceparent"])
    assert trace_id == CLIENT[0] and span_id != CLIENT[1]
    spans = receiver.wait_trace(trace_id, "POST /v1/models/{name}/classify", "inr.infer", "inr.run")
    print(f"\nan HTTP classify:\n{tree(spans)}")
    [root] = by_name(spans, "POST /v1/models/{name}/classify")
    assert root.span_id == span_id and root.parent_id == CLIENT[1] and root.kind == SERVER_KIND
    assert root.service == "inr-serve" and root.attributes["http.response.status_code"] == 200
    [infer] = by_name(spans, "inr.infer")
    assert infer.parent_id == root.span_id and infer.attributes["inr.model"] == "digits"
    assert infer.attributes["inr.rows"] == 1
    [run] = by_name(spans, "inr.run")  # alone in its batch: the run is in this request's trace
    assert run.parent_id == infer.span_id and run.attributes["inr.batch.size"] == 1
    assert infer.attributes["inr.batch.size"] == 1 and 0 <= infer.attributes["inr.queue.seconds"] < 30
    assert infer.links == [(run.trace_id, run.span_id)] and run.links == [(infer.trace_id, infer.span_id)]
    assert not [s for s in spans if s.name == "inr.queue"]  # the wait is inr.infer's attribute, not a span


def test_a_request_the_sampler_left_out_makes_no_spans_and_answers_its_trace(stack):
    """A parent that is not sampled (flags 00): the default parent-based sampler records nothing of the
    request, the dataplane makes no spans for it, and the answer continues the trace, still unsampled."""
    srv, _, receiver, _ = stack
    image = np.zeros((28, 28)).tolist()
    left_out, sampled = "5" * 32, "6" * 32
    for trace_id, flags in ((left_out, "00"), (sampled, "01")):
        r = httpx.post(
            f"{srv.url}/v1/models/digits/classify",
            json={"images": [image]},
            headers={"traceparent": f"00-{trace_id}-{'7' * 16}-{flags}"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert r.headers["traceparent"].startswith(f"00-{trace_id}-") and r.headers["traceparent"].endswith(flags)
    receiver.wait_trace(sampled, "POST /v1/models/{name}/classify", "inr.infer", "inr.run")
    assert receiver.trace(left_out) == []  # exported in order: the sampled one came after it


def digits_request(images: int) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(
        model_name="digits",
        inputs=[pb.ModelInferRequest.InferInputTensor(name="images", datatype="FP32", shape=[images, 1, 28, 28])],
    )
    request.raw_input_contents.append(np.zeros((images, 1, 28, 28), np.float32).tobytes())
    return request


def rpc(channel: grpc.Channel, name: str, response, stream: bool = False):
    """A KServe V2 method on the raw channel (its trailing metadata is what the test reads)."""
    kind = channel.stream_stream if stream else channel.unary_unary
    return kind(
        f"/inference.GRPCInferenceService/{name}",
        request_serializer=pb.ModelInferRequest.SerializeToString,
        response_deserializer=response.FromString,
    )


def test_a_grpc_infer_continues_the_trace_in_its_metadata(stack):
    srv, _, receiver, _ = stack
    request, trace_id = digits_request(2), "1" * 32
    with grpc.insecure_channel(srv.grpc_url) as channel:
        infer = rpc(channel, "ModelInfer", pb.ModelInferResponse)
        response, call = infer.with_call(
            request, metadata=[("traceparent", f"00-{trace_id}-{'2' * 16}-01")], timeout=30
        )
        assert [o.name for o in response.outputs] == ["logits", "probabilities", "is_digit"]  # all the graph has
        assert len(response.raw_output_contents) == 3
        answered = dict(call.trailing_metadata())["traceparent"]
        with pytest.raises(grpc.RpcError) as err:  # an error answers it too
            infer.with_call(pb.ModelInferRequest(model_name="no-such-model"), timeout=30)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert ids(dict(err.value.trailing_metadata())["traceparent"])[0] != trace_id
    assert ids(answered)[0] == trace_id
    spans = receiver.wait_trace(trace_id, "inference.GRPCInferenceService/ModelInfer", "inr.infer", "inr.run")
    print(f"\na gRPC infer:\n{tree(spans)}")
    [root] = by_name(spans, "inference.GRPCInferenceService/ModelInfer")
    assert root.parent_id == "2" * 16 and root.kind == SERVER_KIND and root.span_id == ids(answered)[1]
    assert root.attributes["rpc.method"] == "ModelInfer"
    [infer_span] = by_name(spans, "inr.infer")
    assert infer_span.parent_id == root.span_id and infer_span.attributes["inr.rows"] == 2
    [run] = by_name(spans, "inr.run")
    assert run.parent_id == infer_span.span_id


def test_a_grpc_stream_is_one_server_span_over_its_requests(stack):
    srv, _, receiver, _ = stack
    request, trace_id = digits_request(1), "3" * 32
    with grpc.insecure_channel(srv.grpc_url) as channel:
        stream = rpc(channel, "ModelStreamInfer", pb.ModelStreamInferResponse, stream=True)
        call = stream(
            iter([request, request, request]), metadata=[("traceparent", f"00-{trace_id}-{'4' * 16}-01")], timeout=30
        )
        answers = list(call)
        assert len(answers) == 3 and not any(a.error_message for a in answers)
        assert ids(dict(call.trailing_metadata())["traceparent"])[0] == trace_id
    receiver.wait(
        lambda rc: (
            len([s for s in rc.trace(trace_id) if s.name == "inr.infer"]) == 3
            and any(s.name.endswith("/ModelStreamInfer") for s in rc.trace(trace_id))
        ),
        what="the stream's spans",
    )
    spans = receiver.trace(trace_id)
    [root] = by_name(spans, "inference.GRPCInferenceService/ModelStreamInfer")
    assert root.parent_id == "4" * 16 and root.kind == SERVER_KIND
    assert all(s.parent_id == root.span_id for s in by_name(spans, "inr.infer"))


def test_a_batch_links_its_requests_and_they_link_it(stack):
    srv, _, receiver, _ = stack
    import concurrent.futures

    image = np.zeros((28, 28)).tolist()

    def classify(_):
        return httpx.post(f"{srv.url}/v1/models/digits/classify", json={"images": [image] * 4}, timeout=30)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(classify, range(32)))
    assert all(a.status_code == 200 for a in answers)
    traces = {ids(a.headers["traceparent"])[0] for a in answers}
    receiver.wait(
        lambda rc: all(any(s.name == "inr.infer" for s in rc.trace(t)) for t in traces),
        what="every request's inr.infer",
    )
    runs = [s for s in receiver.named("inr.run") if s.attributes["inr.batch.size"] > 1 and s.trace_id in traces]
    assert runs, "no two of 32 requests from 8 threads shared a batch within 20 ms"
    run = runs[0]
    print(f"\na batch of {run.attributes['inr.batch.size']}:\n{tree(receiver.trace(run.trace_id))}")
    infers = {(s.trace_id, s.span_id): s for s in receiver.named("inr.infer")}
    linked = [infers[link] for link in run.links]
    assert len(linked) == run.attributes["inr.batch.size"] and run.parent_id == linked[0].span_id
    for request in linked:  # each request's inr.infer has the batch's size, its wait and a link back to the run
        assert (run.trace_id, run.span_id) in request.links
        assert request.attributes["inr.batch.size"] == run.attributes["inr.batch.size"]
        assert 0 <= request.attributes["inr.queue.seconds"] < 30


def test_a_render_has_plan_tiles_encode_and_a_cache_hit(stack):
    srv, _, receiver, _ = stack
    path = "/v1/models/astronaut/render?width=48&height=40&format=png"
    first, second = (httpx.get(srv.url + path, timeout=30) for _ in range(2))
    assert first.status_code == second.status_code == 200
    miss, hit = ids(first.headers["traceparent"])[0], ids(second.headers["traceparent"])[0]
    assert miss != hit  # no traceparent sent: each request starts its own trace
    spans = receiver.wait_trace(
        miss, "GET /v1/models/{name}/render", "inr.render", "inr.render.plan", "inr.render.tiles", "inr.render.encode"
    )
    print(f"\na render:\n{tree(spans)}")
    [root] = by_name(spans, "GET /v1/models/{name}/render")
    [render] = by_name(spans, "inr.render")
    assert render.parent_id == root.span_id and render.attributes["inr.cache"] == "miss"
    assert (render.attributes["inr.width"], render.attributes["inr.height"]) == (48, 40)
    for name in ("inr.render.plan", "inr.render.tiles", "inr.render.encode"):
        assert by_name(spans, name)[0].parent_id == render.span_id
    assert by_name(spans, "inr.render.tiles")[0].attributes["inr.tiles"] >= 1
    cached = by_name(receiver.wait_trace(hit, "inr.render"), "inr.render")
    assert cached[0].attributes["inr.cache"] == "hit"
    assert not [s for s in receiver.trace(hit) if s.name == "inr.render.tiles"]


def test_an_iiif_tile_is_planned_then_rendered(stack):
    srv, _, receiver, _ = stack
    r = httpx.get(f"{srv.url}/iiif/3/astronaut/0,0,128,128/32,/0/default.png", timeout=30)
    assert r.status_code == 200, r.text
    trace_id, _ = ids(r.headers["traceparent"])
    spans = receiver.wait_trace(
        trace_id,
        "GET /iiif/3/{name}/{region}/{size}/{rotation}/{quality_format}",
        "inr.iiif.plan",
        "inr.render",
        "inr.render.tiles",
    )
    [root] = by_name(spans, "GET /iiif/3/{name}/{region}/{size}/{rotation}/{quality_format}")
    [planned] = by_name(spans, "inr.iiif.plan")
    [render] = by_name(spans, "inr.render")
    assert planned.parent_id == render.parent_id == root.span_id and planned.end_ns <= render.start_ns
    assert (planned.attributes["inr.iiif.region"], planned.attributes["inr.iiif.size"]) == ("0,0,128,128", "32,")
    assert render.attributes["inr.width"] == 32


@pytest.mark.parametrize(
    "header",
    [
        "garbage",
        "00-" + "0" * 32 + "-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01",
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-xyz-abc-01",
        "",
    ],
)
def test_a_malformed_traceparent_starts_a_new_trace(stack, header):
    srv, _, receiver, _ = stack
    r = httpx.post(
        f"{srv.url}/v1/models/digits/classify",
        json={"images": [np.zeros((28, 28)).tolist()]},
        headers={"traceparent": header},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    trace_id, span_id = ids(r.headers["traceparent"])
    assert trace_id not in header
    [root] = receiver.wait(lambda rc: [s for s in rc.trace(trace_id) if s.span_id == span_id], what="the root span")
    assert root.parent_id == ""


def test_a_fit_is_one_trace_from_upload_to_the_served_version(stack):
    srv, worker, receiver, store = stack
    with httpx.Client(base_url=srv.url, timeout=30) as client:
        r = client.post("/v1/fits", files={"file": ("traced.png", png(photo(48, 40)))}, data=FAST)
        assert r.status_code == 202, r.text
        trace_id, upload_span = ids(r.headers["traceparent"])
        job = r.json()["id"]
        assert ids(store.get(job)["traceparent"])[0] == trace_id  # the record keeps the enqueue span's context
        deadline = time.monotonic() + 240
        while client.get(f"/v1/fits/{job}").json()["state"] not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline, worker.output()[-3000:]
            time.sleep(0.3)
        assert client.get(f"/v1/fits/{job}").json()["state"] == "succeeded", worker.output()[-3000:]
    spans = receiver.wait_trace(
        trace_id,
        "POST /v1/fits",
        "inr.fit.enqueue",
        "inr.fit.claim",
        "inr.fit",
        "inr.fit.export",
        "inr.fit.write",
        "inr.fit.served",
        timeout=60,
    )
    print(f"\nthe fit's trace ({len(spans)} spans):\n{tree(spans)}")
    [upload] = by_name(spans, "POST /v1/fits")
    assert upload.span_id == upload_span and upload.parent_id == "" and upload.service == "inr-serve"
    [enqueue] = by_name(spans, "inr.fit.enqueue")
    assert enqueue.parent_id == upload.span_id and enqueue.attributes["inr.fit.job"] == job
    [claim] = by_name(spans, "inr.fit.claim")
    [fit] = by_name(spans, "inr.fit")
    assert claim.parent_id == fit.parent_id == enqueue.span_id
    assert claim.service == fit.service == "inr-fit-worker" and fit.attributes["inr.fit.state"] == "succeeded"
    steps = [attrs["step"] for name, attrs in fit.events if name == "progress"]
    assert steps and steps == sorted(steps) and steps[-1] == 60
    [export] = by_name(spans, "inr.fit.export")
    [write] = by_name(spans, "inr.fit.write")
    assert export.parent_id == write.parent_id == fit.span_id and write.attributes["inr.model.version"] == 1
    [served] = by_name(spans, "inr.fit.served")
    assert served.parent_id == fit.span_id and served.service == "inr-serve"
    assert served.attributes["inr.model"] == "traced" and served.attributes["inr.model.version"] == 1
    [load] = [s for s in receiver.named("inr.model.load") if (s.trace_id, s.span_id) in served.links]
    assert load.attributes["inr.model"] == "traced"


def test_a_first_use_load_is_a_span_of_the_request_that_caused_it(stack):
    """On demand, the request that first needs a model waits for its load: `inr.model.load` is in its trace."""
    srv, _, receiver, _ = stack
    repo = srv.repo
    shutil.copytree(repo / "astronaut", repo / "astronaut-copy")
    config = repo / "astronaut-copy" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "astronaut"', 'name: "astronaut-copy"'))
    deadline = time.monotonic() + 30
    while httpx.get(f"{srv.url}/v1/models/astronaut-copy", timeout=10).status_code != 200:  # the poll lists it
        assert time.monotonic() < deadline, "the copy was not listed"
        time.sleep(0.2)
    r = httpx.get(f"{srv.url}/v1/models/astronaut-copy/render?width=16&height=16&format=png", timeout=60)
    assert r.status_code == 200, r.text
    trace_id, _ = ids(r.headers["traceparent"])
    spans = receiver.wait_trace(trace_id, "GET /v1/models/{name}/render", "inr.render", "inr.model.load")
    print(f"\na first use:\n{tree(spans)}")
    [render] = by_name(spans, "inr.render")
    [load] = by_name(spans, "inr.model.load")
    assert load.parent_id == render.span_id and load.attributes["inr.model"] == "astronaut-copy"
