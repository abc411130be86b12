"""`INR_PEER_MODELS=models python -m bench.peer_apps kserve|litserve|bentoml --port N`: the peers of bench.peers, the
bundled models behind KServe's ModelServer (V2 REST, JSON and binary), LitServe and BentoML (v1's bodies and answers:
POST /query, /classify), each through its public API on onnxruntime, one worker, no access log, $INR_PEER_THREADS
threads a model (0: onnxruntime's default). In a virtual environment of their own (`pip install '.[peers]'`)."""

import functools
import logging
import os
import sys
import uuid
from typing import Annotated

import numpy as np
import onnxruntime as ort


@functools.cache
def session(name: str) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = int(os.environ.get("INR_PEER_THREADS", "1")), 1
    opts.log_severity_level = 3
    path = os.path.join(os.environ.get("INR_PEER_MODELS", "models"), name, "1", "model.onnx")
    return ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])


def answer(field: str, x) -> dict:  # v1's answer to a query (`field` coords) or a classify (images)
    if field == "coords":
        (rgb,) = session("astronaut").run(["rgb"], {"coords": np.asarray(x, dtype=np.float32).reshape(-1, 2)})
        return {"rgb": np.round(rgb.astype(np.float64), 6).tolist()}
    x = np.asarray(x, dtype=np.float32).reshape(-1, 1, 28, 28)
    (probs,) = session("digits").run(["probabilities"], {"images": x})
    rounded = np.round(probs.astype(np.float64), 6).tolist()
    return {"predictions": [{"label": int(np.argmax(p)), "probabilities": q} for p, q in zip(probs, rounded)]}


def __getattr__(name: str):
    """LitServe's Endpoint (its spawned workers unpickle it from here) and BentoML's Peer (`bentoml serve
    bench.peer_apps:Peer`), each made on first use, importing its framework, and kept: pickle wants the same."""
    if name == "Endpoint":
        import litserve as ls

        class Endpoint(ls.LitAPI):  # POST /query or /classify, answered in the inference worker
            __qualname__ = "Endpoint"  # where pickle finds it

            def __init__(self, field: str):
                super().__init__(api_path="/query" if field == "coords" else "/classify")
                self.field = field

            def setup(self, device):
                session("astronaut"), session("digits")

            def decode_request(self, request, **kwargs):
                return request[self.field]

            def predict(self, x, **kwargs):
                return answer(self.field, x)

        globals()[name] = Endpoint
    elif name == "Peer":
        import bentoml
        from bentoml.validators import DType

        Float32 = Annotated[np.ndarray, DType("float32")]  # a JSON field, read as the argument of its name

        @bentoml.service(workers=1, traffic={"timeout": 30}, logging={"access": {"enabled": False}})
        class Peer:
            __qualname__ = "Peer"  # BentoML's workers import it by that name

            @bentoml.api
            def classify(self, images: Float32) -> dict:
                return answer("images", images)

            @bentoml.api
            def query(self, coords: Float32) -> dict:
                return answer("coords", coords)

        globals()[name] = Peer
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return globals()[name]


if __name__ == "__main__":  # APP --port N, read by hand: kserve reads sys.argv too, for flags of its own
    app, port = sys.argv[1], int(sys.argv[sys.argv.index("--port") + 1])
    if app == "kserve":
        import kserve

        class OnnxModel(kserve.Model):  # the outputs the request asks for, all by default
            def predict(self, payload, headers=None, response_headers=None):
                model, asked = session(self.name), payload.request_outputs
                names = [o.name for o in asked or []] or [o.name for o in model.get_outputs()]
                arrays = model.run(names, {t.name: t.as_numpy() for t in payload.inputs})
                outputs = [kserve.InferOutput(n, list(a.shape), "FP32", data=a) for n, a in zip(names, arrays)]
                kw = {"use_binary_outputs": payload.use_binary_outputs, "requested_outputs": asked}
                return kserve.InferResponse(payload.id or str(uuid.uuid4()), self.name, outputs, **kw)

        models = [OnnxModel(name) for name in ("astronaut", "digits") if session(name)]  # the sessions made first
        server = kserve.ModelServer(http_port=port, workers=1, enable_grpc=False, enable_latency_logging=False)
        logging.disable(logging.INFO)  # uvicorn's and KServe's line per request
        server.start([m for m in models if m.load()])  # on 0.0.0.0: KServe's RESTServer fixes the host
    elif app == "litserve":
        import litserve as ls

        apis = [sys.modules[__name__].Endpoint(field) for field in ("coords", "images")]  # one class, kept
        server = ls.LitServer(apis, accelerator="cpu", devices=1, workers_per_device=1, track_requests=False)
        server.run(host="127.0.0.1", port=port, log_level="warning", generate_client_file=False)
    else:  # bentoml, in place of this process, which the benchmark stops as a group
        serve = ["-m", "bentoml", "serve", "bench.peer_apps:Peer", "--host", "127.0.0.1", "--port", str(port)]
        os.execv(sys.executable, [sys.executable, *serve])
