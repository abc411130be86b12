"""The gRPC server: started by the app's lifespan on the same event loop, so that it shares the process, the
registry, the dataplane (batching), the metrics and the drain with HTTP.

* `--grpc-port` / `INR_GRPC_PORT` (Triton's 8001; 0 = no gRPC server), on `--host`.
* `grpc.max_receive_message_length` is INR_MAX_BODY_BYTES: a larger message is RESOURCE_EXHAUSTED.
* `grpc.health.v1.Health`: "" and "inference.GRPCInferenceService" are SERVING once the models have loaded,
  NOT_SERVING from the moment a drain begins.
* With several uvicorn workers every worker binds the port with SO_REUSEPORT and the kernel spreads the
  connections, as it does for HTTP; with one worker the port must be free, or start-up fails.
"""

from __future__ import annotations

import logging

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from .servicer import SERVICE, InferenceService, handlers

log = logging.getLogger(__name__)


class GrpcServer:
    def __init__(self, state):
        self.settings = state.settings
        self.service = InferenceService(state)
        self.health = health.aio.HealthServicer()
        self.server: grpc.aio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        s = self.settings
        self.server = grpc.aio.server(
            options=[("grpc.max_receive_message_length", s.max_body_bytes), ("grpc.so_reuseport", int(s.workers > 1))]
        )
        self.server.add_generic_rpc_handlers((handlers(self.service),))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        address = f"[{s.host}]:{s.grpc_port}" if ":" in s.host else f"{s.host}:{s.grpc_port}"
        try:
            self.port = self.server.add_insecure_port(address)
        except RuntimeError as e:
            self.port = 0
            log.error("gRPC: cannot listen on %s (%s)", address, e)
        if not self.port:
            raise RuntimeError(f"gRPC cannot listen on {address} (--grpc-port / INR_GRPC_PORT; 0 turns gRPC off)")
        await self.server.start()
        for name in ("", SERVICE):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("gRPC (KServe V2) on %s", address)

    async def draining(self) -> None:
        await self.health.enter_graceful_shutdown()

    async def stop(self, grace: float = 1.0) -> None:
        if self.server is not None:
            await self.server.stop(grace)
