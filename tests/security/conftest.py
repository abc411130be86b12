"""The attack suite's fixtures: one stack for the whole suite (tests/security/stack.py)."""

from __future__ import annotations

import pytest

from tests.security.stack import build


@pytest.fixture(scope="session")
def stack(model_repo, tmp_path_factory):
    s, started = build(tmp_path_factory.mktemp("attack"), model_repo)
    yield s
    for proc in reversed(started):
        proc.stop()
