"""The server on a bucket a model repository was uploaded into with boto3, as `aws s3 sync` uploads one (no
`.published` markers; modelrepo/s3settle.py): a whole model is served over V2 as onnxruntime answers on the same
file; a model cut off before its model.onnx is not served until the upload completes."""

from __future__ import annotations

import time

import httpx
import numpy as np
import onnxruntime as ort

from modelrepo import parse_s3
from tests.modelrepo.test_s3_sync import upload
from tests.servers import ROOT
from tests.service.test_s3_models import serve, until

COORDS = [[0.25, 0.5], [0.9, 0.1], [0.5, 0.5]]


def test_a_bucket_synced_without_markers_is_served_and_a_cut_off_model_is_not(s3_server, tmp_path):
    url = s3_server.url(s3_server.bucket())
    client, layout = s3_server.client(), parse_s3(url)
    upload(client, layout, ROOT / "models" / "astronaut")
    digits = ROOT / "models" / "digits"
    upload(client, layout, digits, [p for p in sorted(digits.rglob("*")) if p.is_file() and p.name != "model.onnx"])
    with serve(url, s3_server, tmp_path / "cache", INR_S3_SETTLE_S="1").running() as srv:
        listed = lambda: [m["name"] for m in httpx.get(f"{srv.url}/v1/models", timeout=10).json()["models"]]  # noqa: E731
        assert until(lambda: listed() == ["astronaut"], 30), listed()
        body = {"inputs": [{"name": "coords", "shape": [3, 2], "datatype": "FP32", "data": sum(COORDS, [])}]}
        r = httpx.post(f"{srv.url}/v2/models/astronaut/infer", json=body, timeout=60)
        assert r.status_code == 200, r.text
        session = ort.InferenceSession(str(ROOT / "models/astronaut/1/model.onnx"), providers=["CPUExecutionProvider"])
        want = session.run(None, {"coords": np.array(COORDS, np.float32)})[0]
        got = np.array(r.json()["outputs"][0]["data"], np.float32).reshape(want.shape)
        assert np.abs(got - want).max() < 1e-5
        time.sleep(2)  # digits' files have settled: still no model.onnx, still not served
        assert listed() == ["astronaut"]
        assert httpx.get(f"{srv.url}/v2/models/digits", timeout=10).status_code == 404
        upload(client, layout, digits, [digits / "1" / "model.onnx"])  # the sync's last file
        assert until(lambda: listed() == ["astronaut", "digits"], 30), listed()
        images = {"inputs": [{"name": "images", "shape": [1, 1, 28, 28], "datatype": "FP32", "data": [0.0] * 784}]}
        assert httpx.post(f"{srv.url}/v2/models/digits/infer", json=images, timeout=60).status_code == 200
