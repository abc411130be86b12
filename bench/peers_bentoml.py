"""The bundled models as a BentoML service (public API: `@bentoml.service`, `@bentoml.api`).

    INR_PEER_MODELS=models bentoml serve bench.peers_bentoml:Peer --host 127.0.0.1 --port 8102

POST /classify takes `{"images": [...]}` and POST /query `{"coords": [[x, y], ...]}`, the bodies of this
service's v1 API (BentoML reads each JSON field as the argument of that name, here as numpy arrays),
and answer the same JSON. One worker, no access log.
"""

from __future__ import annotations

from typing import Annotated

import bentoml
import numpy as np
from bentoml.validators import DType

from bench.peers_ort import Models

Float32 = Annotated[np.ndarray, DType("float32")]


@bentoml.service(workers=1, traffic={"timeout": 30}, logging={"access": {"enabled": False}})
class Peer:
    def __init__(self) -> None:
        self.models = Models()

    @bentoml.api
    def classify(self, images: Float32) -> dict:
        return self.models.classify(images)

    @bentoml.api
    def query(self, coords: Float32) -> dict:
        return self.models.query(coords)
