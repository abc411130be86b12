"""The fit store on each backend: SQLite (a file), a real redis-server and a real PostgreSQL server, both
started here for the session (tests/fits.py, tests/pgserver.py; each skips with its reason when missing)."""

from __future__ import annotations

import pytest

from tests.fits import RedisServer
from tests.pgserver import PostgresServer

BACKENDS = ["sqlite", "redis", "postgresql"]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_server():
    server = PostgresServer()
    yield server
    server.stop()


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path):
    """An empty store on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/fits.sqlite"
    if request.param == "redis":
        server = request.getfixturevalue("redis_server")
        import redis

        redis.Redis.from_url(server.url).flushall()
        return server.url
    server = request.getfixturevalue("pg_server")
    server.flush()
    return server.url
