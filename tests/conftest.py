"""The shared fixtures (tests/servers.py): a real model repository and the real server."""

import os

import pytest

# Apps built in-process (TestClient) and servers started without the helper's free ports must not all reach
# for Triton's default gRPC port 8001; bench.serving.Server gives each server its own free gRPC port.
os.environ.setdefault("INR_GRPC_PORT", "0")

from tests.s3server import s3_env, s3_server  # noqa: E402,F401  (the real S3 server's fixtures)
from tests.servers import *  # noqa: E402,F401,F403  (fixtures are found by name)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, which a run without it does not know
def pytest_xdist_make_scheduler(config, log):
    """`make test`'s workers (pytest-xdist, `--dist loadfile`): a file's tests on one worker, so that its module
    fixtures (servers, fits) start once, and all of tests/containers on one worker, in order, since its files share
    one engine, one set of images and a cleanup that removes every inr- container (tests/containers/conftest.py).
    xdist's own `xdist_group` mark cannot say that here: pytest 9 ignores the node id suffix it relies on."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ByFile(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "tests/containers" if path.startswith("tests/containers/") else path

    return ByFile(config, log)
