"""The gRPC benchmarks' own parts (bench.rpc), on the test repository's tiny models: the floors answer tritonclient
with the service's own answer, `measure` (grpc_http's) measures them, and `grpc_ours` times the servicer and the HTTP
route in-process. Speed is never asserted: it lives in docs/benchmarks.md, grpc_http, grpc_profile and grpc_ours."""

from __future__ import annotations

import argparse

import numpy as np
import tritonclient.grpc as tg
import tritonclient.http as th

from bench import rpc
from bench.rpc import floors


def infer(protocol: str, url: str, model: str, name: str, x: np.ndarray) -> dict[str, np.ndarray]:
    lib = tg if protocol == "grpc" else th
    t = lib.InferInput(name, list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    c = lib.InferenceServerClient(url)
    try:
        r = c.infer(model, [t])
        outputs = r.get_response().outputs if protocol == "grpc" else r.get_response()["outputs"]
        return {
            o.name if protocol == "grpc" else o["name"]: r.as_numpy(o.name if protocol == "grpc" else o["name"])
            for o in outputs
        }
    finally:
        c.close()


def test_the_floors_answer_tritonclient_as_the_service_does_and_are_measured(server):
    workloads = {w: rpc.WORKLOADS[w] for w in ("2,000 coordinates", "one digit")}
    started = floors(server, workloads)
    try:
        assert [(n, p) for n, p, _ in started] == [
            ("HTTP floor", "http"),
            ("gRPC floor (aio)", "grpc"),
            ("gRPC floor (sync)", "grpc"),
        ]
        for model, name, shape in workloads.values():
            x = np.random.default_rng(0).random(shape, dtype=np.float32)  # the floors answer this tensor's answer
            want = infer("grpc", server.grpc_url, model, name, x)
            assert want and all(len(v) == shape[0] for v in want.values())
            for _, protocol, floor in started:
                url = floor.grpc_url if protocol == "grpc" else floor.url.removeprefix("http://")
                got = infer(protocol, url, model, name, x)
                assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)
        r = rpc.measure(started[1][2], "grpc", "one digit", 1, 0.5)
        assert r["req_s"] > 0 and r["errors"] == 0 and r["cpu_ms"] > 0
    finally:
        for _, _, floor in started:
            floor.stop()


def test_the_wide_table_gives_each_target_against_the_first():
    rows = [
        {"workload": "one digit", "clients": 1, "target": t, "req_s": r, "cpu_ms": c, "errors": e}
        for t, r, c, e in (("HTTP binary", 400, 2.0, 0), ("gRPC", 300, 2.5, 1))
    ]
    table = rpc.wide(rows, ["HTTP binary", "gRPC"]).splitlines()
    assert table[0] == "| workload | clients | HTTP binary | gRPC | errors |"
    assert table[2] == "| one digit | 1 | 400 (2.00, 1.00×) | 300 (2.50, 0.75×) | 1 |"


def test_ours_times_the_servicer_and_the_http_route_beside_the_model(model_repo):
    import asyncio

    args = argparse.Namespace(models=model_repo, workload=["one digit"], calls=90)
    table = asyncio.run(rpc.grpc_ours(args))["table"].splitlines()
    assert table[0].startswith("| workload | model alone µs |") and len(table) == 3
    cells = [c.strip() for c in table[2].split("|")[1:-1]]
    assert cells[0] == "one digit" and float(cells[1]) > 0
    assert all(float(c.split(" ")[0]) > 0 for c in cells[2:])


def test_the_profile_puts_each_sample_in_the_category_of_its_innermost_known_frame():
    import os

    from bench.rpc import summarise, thread_cpu

    raw = "\n".join(
        [
            "run (uvicorn/server.py:86);handler (service/api/grpc/servicer.py:57);run (onnxruntime/capi/x.py:1) 7",
            "handler (service/api/grpc/servicer.py:57);infer_request (service/api/grpc/convert.py:9) 2",
            "Runner.run (asyncio/runners.py:118) 5",
            "main (<frozen runpy>:1) 1",
            "not a sample line",
        ]
    )
    assert summarise(raw) == {
        "model (onnxruntime)": 7,
        "ours: gRPC ↔ V2 conversion": 2,
        "asyncio / threads": 5,
        "other": 1,
    }
    assert thread_cpu(os.getpid())["main (the event loop)"] > 0
