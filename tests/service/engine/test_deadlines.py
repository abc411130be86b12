"""Queue deadlines: a request still waiting for its batch after INR_QUEUE_TIMEOUT_S, or after V2's
`timeout` parameter (microseconds, Triton's schedule policy), gets 503 with Retry-After, counted in
/metrics; the server goes on answering."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from tests.servers import Server


@pytest.fixture(scope="module")
def busy(model_repo):
    # Triton's fixed-delay policy holds a lone request 1 s for batch-mates, 20 times its 50 ms queue timeout:
    # every queued request times out, on any event loop and however loaded the machine (the adaptive policy
    # would run it at once). A 0.1 ms timeout against a 0.5 ms delay held only through uvloop's order (due
    # timers before ready callbacks); on asyncio's own loop a worker woken 0.5 ms after the request took it first.
    srv = Server(
        model_repo, env={"INR_QUEUE_TIMEOUT_S": "0.05", "INR_MAX_QUEUE_DELAY_MS": "1000", "INR_BATCH_POLICY": "delay"}
    )
    with srv.running():
        yield srv


def queue_timeouts(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('inr_queue_timeouts_total{model="astronaut",queue="batch"}')
    )


def test_a_request_past_the_queue_timeout_gets_503_with_retry_after(busy):
    before = queue_timeouts(busy.url)
    r = httpx.post(f"{busy.url}/v1/models/astronaut/query", json={"coords": [[0.5, 0.5]]})
    assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
    assert "INR_QUEUE_TIMEOUT_S" in r.json()["error"]
    assert queue_timeouts(busy.url) == before + 1
    assert httpx.get(f"{busy.url}/health/ready").status_code == 200


def infer(url: str, timeout_us: int | None):
    client = triton.InferenceServerClient(url.removeprefix("http://"))
    x = triton.InferInput("coords", [4, 2], "FP32")
    x.set_data_from_numpy(np.full((4, 2), 0.5, np.float32), binary_data=True)
    return client.infer("astronaut", [x], timeout=timeout_us)


def test_v2_timeout_parameter_bounds_the_wait(server):
    assert infer(server.url, None).as_numpy("rgb").shape == (4, 3)
    assert infer(server.url, 0).as_numpy("rgb").shape == (4, 3)  # 0: no timeout of its own, as in Triton
    with pytest.raises(InferenceServerException) as e:
        infer(server.url, 1)  # 1 µs: gone before its batch could gather
    assert "timeout parameter" in str(e.value)
    assert infer(server.url, 5_000_000).as_numpy("rgb").shape == (4, 3)


@pytest.mark.parametrize("value", [-1, 1.5, "10", True])
def test_a_bad_v2_timeout_is_a_400(client, value):
    r = client.post(
        "/v2/models/astronaut/infer",
        json={
            "parameters": {"timeout": value},
            "inputs": [{"name": "coords", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 0.5]}],
        },
    )
    assert r.status_code == 400 and "parameters.timeout" in r.json()["error"]
