"""The shared fixtures (tests/servers.py): a real model repository and the real server."""
from tests.servers import *  # noqa: F401,F403  (fixtures are found by name)
