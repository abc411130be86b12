"""The bundled models behind LitServe (public API: `ls.LitAPI`, `ls.LitServer`).

    INR_PEER_MODELS=models python -m bench.peers_litserve --port 8101

POST /classify takes `{"images": [...]}` and POST /query `{"coords": [[x, y], ...]}`, the bodies of
this service's v1 API, and answer the same JSON. One inference worker per API, on the CPU.
"""

from __future__ import annotations

import argparse

import litserve as ls

from bench.peers_ort import Models


class Endpoint(ls.LitAPI):
    """POST /METHOD: the request's FIELD through `Models.METHOD` (in the inference worker)."""

    def __init__(self, method: str, field: str):
        super().__init__(api_path=f"/{method}")
        self.method, self.field = method, field

    def setup(self, device):
        self.run = getattr(Models(), self.method)

    def decode_request(self, request, **kwargs):
        return request[self.field]

    def predict(self, x, **kwargs):
        return self.run(x)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.peers_litserve")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    server = ls.LitServer(
        [Endpoint("classify", "images"), Endpoint("query", "coords")],
        accelerator="cpu",
        devices=1,
        workers_per_device=1,
        track_requests=False,
    )
    server.run(host="127.0.0.1", port=args.port, log_level="warning", generate_client_file=False)


if __name__ == "__main__":
    main()
