"""Models made elsewhere on S3 (issue 56): a repository of plain Triton folders pushed to a real S3 server
(tests/s3server.py) and served with `--models s3://…`: a SIREN whose config.pbtxt declares only its convention and a
classifier without any config.pbtxt are completed from their graphs (the highest version's model.onnx fetched for
it), and answer as onnxruntime does on the same files."""

from __future__ import annotations

import io

import httpx
import numpy as np
import torch
import tritonclient.http as th
from PIL import Image

from tests.modelrepo import foreign_nets as F
from tests.service.test_s3_models import push, serve

torch.set_num_threads(1)


def test_models_made_elsewhere_are_completed_and_served_from_s3(s3_server, tmp_path):
    repo = tmp_path / "repo"
    siren, classifier = F.siren_onnx(), F.classifier_onnx()
    F.write_model(repo, "siren", siren, F.SIREN_CONFIG)
    F.write_model(repo, "classifier", classifier, None)
    url = s3_server.url(s3_server.bucket())
    push(s3_server, url, repo)
    with serve(url, s3_server, tmp_path / "cache").running() as srv:
        x = np.random.default_rng(0).normal(size=(3, 8)).astype(np.float32)
        t = th.InferInput("features", [3, 8], "FP32")
        t.set_data_from_numpy(x)
        got = th.InferenceServerClient(srv.url.removeprefix("http://")).infer("classifier", [t]).as_numpy("scores")
        np.testing.assert_array_equal(got, F.ort_values(classifier, x))
        cfg = httpx.get(f"{srv.url}/v2/models/classifier/config", timeout=30).json()
        assert cfg["max_batch_size"] == 4 and cfg["input"][0]["dims"] == [8]
        r = httpx.get(f"{srv.url}/v1/models/siren/render", params={"width": 40}, timeout=60)
        assert r.status_code == 200, r.text
        got = np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB"), np.float64)
        v = F.ort_values(siren, F.siren_grid(40, 24))
        want = np.rint(np.clip((v + 1) / 2, 0, 1) * 255).reshape(24, 40, 3)
        assert F.psnr(got / 255, want / 255) >= 60
