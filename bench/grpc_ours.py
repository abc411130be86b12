"""The service's own CPU per V2 infer call, in-process, without any server around it: what the gRPC
servicer does with a call (bytes → `ModelInferRequest` → drain, metrics, deadline, checks, dataplane → response →
bytes) against what the HTTP route does (bytes → `parse_request` → the same `infer` → body), and the model alone.

    python -m bench.grpc_ours [--calls 2000]

The app is built by `create_app` on the bundled models with one onnxruntime thread and its lifespan entered; each
call runs on the event loop as a lone request does (the run on the loop, service/engine/batching.py). Figures
are CPU µs per call (time.process_time), the median of 9 batches, interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import numpy as np

from .grpc_http import WORKLOADS
from .serving import ROOT, median

BATCHES = 9


class Context:
    """What the servicer asks of grpc.aio's ServicerContext on the success path: no deadline, no metadata."""

    def time_remaining(self):
        return None

    def invocation_metadata(self):
        return ()


async def measure(app, workload: str, calls: int) -> dict[str, float]:
    import tritonclient.http as th
    from tritonclient.grpc import service_pb2 as pb

    from service.api.grpc.servicer import InferenceService, reader
    from service.api.v2.infer import infer, resolve
    from service.api.v2.tensors import parse_request

    state = app.state
    model_name, name, shape = WORKLOADS[workload]
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    msg = pb.ModelInferRequest(model_name=model_name)
    msg.inputs.add(name=name, datatype="FP32", shape=list(shape))
    msg.raw_input_contents.append(x.tobytes())
    wire = msg.SerializeToString()
    t = th.InferInput(name, list(shape), "FP32")
    t.set_data_from_numpy(x)
    body, size = th.InferenceServerClient.generate_request_body([t])
    service, read, ctx = InferenceService(state), reader(pb.ModelInferRequest), Context()
    model = resolve(state.registry, model_name, None, ready=True)

    async def grpc_call():
        return (await service.ModelInfer(read(wire), ctx)).SerializeToString()

    async def http_call():
        state.drain.inflight += 1  # as DrainGuard counts it
        try:
            return await infer(
                parse_request(body, str(size)), resolve(state.registry, model_name, None, True), state.dataplane
            )
        finally:
            state.drain.inflight -= 1

    async def model_call():
        return model.predict(x)

    fns = {"model alone": model_call, "HTTP route core": http_call, "gRPC servicer": grpc_call}
    per: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        for _ in range(50):
            await fn()
    for b in range(BATCHES):  # interleaved, in an order that rotates, so that each moment of the machine is shared
        order = list(fns)[b % 3 :] + list(fns)[: b % 3]
        for label in order:
            c0 = time.process_time()
            for _ in range(calls // BATCHES):
                await fns[label]()
            per[label].append((time.process_time() - c0) * 1e6 / (calls // BATCHES))
    out = {k: median(v) for k, v in per.items()}
    return out


async def run(args) -> str:
    from service.app import create_app
    from service.settings import Settings

    app = create_app(Settings(models=args.models, grpc_port=0, threads=1, log_level="error", model_loading="startup"))
    lines = [
        "| workload | model alone µs | HTTP route core µs (above the model) | gRPC servicer µs (above the model) |",
        "|---|---:|---:|---:|",
    ]
    async with app.router.lifespan_context(app):
        for w in args.workload or ["2,000 coordinates", "one digit"]:
            r = await measure(app, w, args.calls)
            m = r["model alone"]
            lines.append(
                f"| {w} | {m:.0f} | {r['HTTP route core']:.0f} ({r['HTTP route core'] - m:.0f}) | "
                f"{r['gRPC servicer']:.0f} ({r['gRPC servicer'] - m:.0f}) |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.grpc_ours", description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, default=ROOT / "models")
    p.add_argument("--workload", action="append", choices=list(WORKLOADS))
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args(argv)
    print(asyncio.run(run(args)))  # noqa: T201  (a command's result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
