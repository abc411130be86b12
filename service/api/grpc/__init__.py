"""KServe V2 over gRPC (`inference.GRPCInferenceService`) and `grpc.health.v1`, beside the HTTP server."""

from .server import GrpcServer

__all__ = ["GrpcServer"]
