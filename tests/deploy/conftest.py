from __future__ import annotations

import re
from pathlib import Path

import pytest

from .dockerfile import Dockerfile

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def dockerfile() -> Dockerfile:
    return Dockerfile.read(ROOT / "Dockerfile")


def compose_default(value: str) -> str:
    """A docker-compose.yml value as compose interpolates it with none of its variables set:
    `${VAR:-default}` becomes `default`."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value))
