"""Large queries over HTTP run in pieces (service/engine/split.py: over INR_SPLIT_ROWS rows, 4,096 by default) and
answer exactly what onnxruntime answers for the whole request, alone and batched with other clients' requests."""

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import onnxruntime as ort

ROWS = 5000  # the test server's INR_MAX_QUERY_COORDS: two pieces alone, ten in a batch of eight


def binary_query(url: str, x: np.ndarray) -> np.ndarray:
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "coords",
                    "datatype": "FP32",
                    "shape": list(x.shape),
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "outputs": [{"name": "rgb", "parameters": {"binary_data": True}}],
        }
    ).encode()
    r = httpx.post(
        f"{url}/v2/models/astronaut/infer",
        content=head + x.tobytes(),
        headers={"content-type": "application/octet-stream", "inference-header-content-length": str(len(head))},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    n = int(r.headers["inference-header-content-length"])
    return np.frombuffer(r.content[n:], np.float32).reshape(len(x), 3)


def test_a_large_query_in_pieces_answers_as_onnxruntime_does_whole(server, model_repo):
    whole = ort.InferenceSession(str(model_repo / "astronaut" / "1" / "model.onnx"))
    coords = [np.random.default_rng(seed).random((ROWS, 2), dtype=np.float32) for seed in range(8)]
    want = [whole.run(["rgb"], {"coords": x})[0] for x in coords]
    assert np.abs(binary_query(server.url, coords[0]) - want[0]).max() <= 1e-6
    with ThreadPoolExecutor(8) as pool:  # eight at once: batched, and the batch in pieces
        got = list(pool.map(lambda x: binary_query(server.url, x), coords))
    assert all(np.abs(g - w).max() <= 1e-6 for g, w in zip(got, want))
    r = httpx.post(f"{server.url}/v1/models/astronaut/query", json={"coords": coords[1].tolist()}, timeout=60)
    assert r.status_code == 200 and np.abs(np.asarray(r.json()["rgb"]) - want[1]).max() <= 5e-7 + 1e-6
