"""The bundled models behind KServe's Python ModelServer (public API: `kserve.Model`, `kserve.ModelServer`).

    INR_PEER_MODELS=models python -m bench.peers_kserve --port 8100

Serves the Open Inference Protocol (V2) REST endpoints, JSON and binary tensors, for `astronaut` and
`digits`: each model is an onnxruntime session that answers the outputs the request asks for. No gRPC,
no access or latency log lines. It listens on
0.0.0.0 (KServe's RESTServer fixes the host); the benchmark talks to it on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import logging
import uuid

import kserve
from kserve import InferOutput, InferRequest, InferResponse

from bench.peers_ort import model_path, session

DATATYPE = {"tensor(float)": "FP32"}


class OnnxModel(kserve.Model):
    def __init__(self, name: str):
        super().__init__(name)
        self.session = None

    def load(self) -> bool:
        self.session = session(model_path(self.name))
        self.ready = True
        return self.ready

    def predict(self, payload: InferRequest, headers=None, response_headers=None) -> InferResponse:
        feeds = {t.name: t.as_numpy() for t in payload.inputs}
        wanted = [o.name for o in payload.request_outputs] if payload.request_outputs else None
        names = wanted or [o.name for o in self.session.get_outputs()]
        types = {o.name: DATATYPE[o.type] for o in self.session.get_outputs()}
        arrays = self.session.run(names, feeds)
        outputs = [InferOutput(n, list(a.shape), types[n], data=a) for n, a in zip(names, arrays)]
        return InferResponse(
            payload.id or str(uuid.uuid4()),
            self.name,
            outputs,
            use_binary_outputs=payload.use_binary_outputs,
            requested_outputs=payload.request_outputs,
        )


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.peers_kserve")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--models", default="astronaut,digits")
    args, _ = p.parse_known_args()  # kserve also reads argv, at import, for flags of its own
    models = [OnnxModel(n) for n in args.models.split(",")]
    for m in models:
        m.load()
    server = kserve.ModelServer(http_port=args.port, workers=1, enable_grpc=False, enable_latency_logging=False)
    for name in ("uvicorn.access", "kserve.trace"):  # one line per request otherwise
        logging.getLogger(name).setLevel(logging.WARNING)
    server.start(models)


if __name__ == "__main__":
    main()
