"""The gRPC floors of `python -m bench.grpc_http --floor`: grpc.aio on uvloop (as the service runs it), or the sync
`grpc.server` with a thread pool, answering `ModelInfer` with the service's own answer to the same request (its
serialised bytes, looked up by model and rows after parsing the request, which any server must). What no Python
server of that kind goes below, as bench/floor_app.py is for HTTP.

    python -m bench.grpc_floor --port P --answers answers.json [--sync]

answers.json: {"MODEL ROWS": base64 of a serialised ModelInferResponse}.
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from tritonclient.grpc import service_pb2 as pb

from .serving import ROOT, Server, free_port

SERVICE = "inference.GRPCInferenceService"


class GrpcFloor(Server):
    """bench/grpc_floor.py in a subprocess, with the Server's cpu_seconds and stop."""

    def __init__(self, answers: Path, sync: bool):
        self.name, self.grpc_port = "gRPC floor", free_port()
        self.grpc_url = f"127.0.0.1:{self.grpc_port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.grpc_floor",
                "--port",
                str(self.grpc_port),
                "--answers",
                str(answers),
                *(["--sync"] if sync else []),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def wait(self, timeout: float = 60) -> "GrpcFloor":
        with grpc.insecure_channel(self.grpc_url) as ch:
            grpc.channel_ready_future(ch).result(timeout=timeout)
        return self


def floors(service: Server, workloads: dict[str, tuple]) -> list[tuple[str, str, Server]]:
    """The HTTP floor and the two gRPC floors, answering each workload with `service`'s own answer to it:
    (name, protocol, started server). At most one workload per model (the HTTP floor answers by path)."""
    import httpx
    import numpy as np
    import tritonclient.grpc as tg
    import tritonclient.http as th

    from .floor import FloorServer
    from .peers_loads import HEADER

    tmp = Path(tempfile.mkdtemp(prefix="bench-grpc-floor-"))
    http_answers, grpc_answers = {}, {}
    for model, name, shape in workloads.values():
        path = f"/v2/models/{model}/infer"
        if path in http_answers:
            raise SystemExit(f"--floor: one workload per model ({model} twice)")
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        t = th.InferInput(name, list(shape), "FP32")
        t.set_data_from_numpy(x)
        body, size = th.InferenceServerClient.generate_request_body([t])
        headers = {"content-type": "application/octet-stream", **({HEADER: str(size)} if size is not None else {})}
        r = httpx.post(service.url + path, content=body, headers=headers, timeout=60)
        r.raise_for_status()
        extra = {HEADER: r.headers[HEADER]} if HEADER in r.headers else {}
        http_answers[path] = (r.headers["content-type"], extra, base64.b64encode(r.content).decode())
        g = tg.InferInput(name, list(shape), "FP32")
        g.set_data_from_numpy(x)
        with tg.InferenceServerClient(service.grpc_url) as c:
            answer = c.infer(model, [g]).get_response().SerializeToString()
        grpc_answers[f"{model} {shape[0]}"] = base64.b64encode(answer).decode()
    (tmp / "http.json").write_text(json.dumps(http_answers))
    (tmp / "grpc.json").write_text(json.dumps(grpc_answers))
    return [
        ("HTTP floor", "http", FloorServer(tmp / "http.json").wait()),
        ("gRPC floor (aio)", "grpc", GrpcFloor(tmp / "grpc.json", False).wait()),
        ("gRPC floor (sync)", "grpc", GrpcFloor(tmp / "grpc.json", True).wait()),
    ]


def handler(answers: dict[str, bytes], sync: bool) -> grpc.GenericRpcHandler:
    def answer(request: pb.ModelInferRequest) -> bytes:
        return answers[f"{request.model_name} {request.inputs[0].shape[0]}"]

    if sync:

        def infer(request, context):
            return answer(request)
    else:

        async def infer(request, context):
            return answer(request)

    method = grpc.unary_unary_rpc_method_handler(infer, request_deserializer=pb.ModelInferRequest.FromString)
    return grpc.method_handlers_generic_handler(SERVICE, {"ModelInfer": method})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.grpc_floor", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--answers", type=Path, required=True)
    p.add_argument("--sync", action="store_true", help="grpc.server with a thread pool instead of grpc.aio")
    p.add_argument("--threads", type=int, default=8, help="--sync: the pool's threads")
    args = p.parse_args(argv)
    answers = {k: base64.b64decode(v) for k, v in json.loads(args.answers.read_text()).items()}
    address = f"127.0.0.1:{args.port}"
    if args.sync:
        server = grpc.server(ThreadPoolExecutor(max_workers=args.threads))
        server.add_generic_rpc_handlers((handler(answers, True),))
        server.add_insecure_port(address)
        server.start()
        server.wait_for_termination()
        return 0

    async def serve() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler(answers, False),))
        server.add_insecure_port(address)
        await server.start()
        await server.wait_for_termination()

    import uvloop

    uvloop.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
