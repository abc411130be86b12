"""docker-compose.s3.yml (docs/s3.md, "Models on S3"): valid against the Compose Specification, and no
volume shared between services: the api replicas and the trainers meet only through the bucket and Redis."""

from __future__ import annotations

import yaml

from modelrepo import parse_s3

from .conftest import ROOT
from .test_compose import errors, schema  # noqa: F401 - the fixture


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.s3.yml").read_text())


def test_validates_against_the_compose_specification(schema):  # noqa: F811
    assert errors(schema, compose()) == []


def test_no_service_shares_a_volume_or_mounts_the_models():
    users: dict[str, set[str]] = {}
    for name, service in compose()["services"].items():
        for v in service.get("volumes", []):
            users.setdefault(v["source"], set()).add(name)
            assert not v["source"].endswith("models"), (name, v)
    assert all(len(who) == 1 for who in users.values()), users


def test_api_and_trainer_read_the_same_bucket_and_store():
    services = compose()["services"]
    api, trainer = services["api"]["environment"], services["trainer"]["environment"]
    for key in ("INR_MODELS", "INR_FIT_UPLOADS", "INR_FIT_STORE", "AWS_ACCESS_KEY_ID"):
        assert api[key] == trainer[key], key
    default = api["INR_MODELS"].replace("${INR_S3:-", "").replace("}", "")
    assert parse_s3(default).endpoint == "http://s3:8333" and parse_s3(default).prefix == "models/"
    assert "--models" not in services["trainer"]["command"]
    assert services["api"]["depends_on"]["s3-init"]["condition"] == "service_completed_successfully"
    assert services["s3"]["build"]["dockerfile"] == "s3.Containerfile"
