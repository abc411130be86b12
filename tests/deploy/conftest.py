from __future__ import annotations

from pathlib import Path

import pytest

from .dockerfile import Dockerfile

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def dockerfile() -> Dockerfile:
    return Dockerfile.read(ROOT / "Dockerfile")
