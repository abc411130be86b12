"""The shared fixtures (tests/servers.py): a real model repository and the real server."""

import os

# Apps built in-process (TestClient) and servers started without the helper's free ports must not all reach
# for Triton's default gRPC port 8001; bench.serving.Server gives each server its own free gRPC port.
os.environ.setdefault("INR_GRPC_PORT", "0")

from tests.s3server import s3_env, s3_server  # noqa: E402,F401  (the real S3 server's fixtures)
from tests.servers import *  # noqa: E402,F401,F403  (fixtures are found by name)
