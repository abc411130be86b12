"""docker-compose.yml validates against the Compose Specification schema and its services
agree with the Dockerfile and nginx config.

The schema is the compose-spec project's JSON schema as vendored by the check-jsonschema
package (builtin_schemas/vendor/compose-spec.json, Apache-2.0), so no network is needed.
"""
from __future__ import annotations

import copy
import importlib.resources
import json
import re
import shutil
import subprocess

import jsonschema
import pytest
import yaml

from .conftest import ROOT, load_deploy_module

model = load_deploy_module("dockerfile_model")


@pytest.fixture(scope="module")
def schema():
    text = (importlib.resources.files("check_jsonschema") / "builtin_schemas/vendor/compose-spec.json").read_text()
    return json.loads(text)


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def errors(schema, doc) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_compose_file_validates_against_the_compose_specification(schema, compose):
    assert errors(schema, compose) == []


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d["services"]["api"].update(helthcheck={}), "helthcheck"),
    (lambda d: d["services"]["api"]["deploy"]["resources"]["limits"].update(cpu="2"), "cpu"),
    (lambda d: d["services"]["api"].update(restart=["always"]), "restart"),
])
def test_the_schema_catches_typos_and_wrong_types(schema, compose, mutate, expected):
    doc = copy.deepcopy(compose)
    mutate(doc)
    assert any(expected in e for e in errors(schema, doc))


def test_api_is_cpu_read_only_healthchecked_limited_and_scalable(compose, dockerfile):
    api = compose["services"]["api"]
    assert api["build"]["target"] == "runtime" and "profiles" not in api
    assert "ports" not in api and api["expose"] == ["8000"], "a fixed host port would break --scale api=N"
    mount = api["volumes"][0]
    assert (mount["source"], mount["target"], mount["read_only"]) == ("./models", "/app/models", True)
    assert api["restart"] == "unless-stopped"
    image_hc = model.parse_healthcheck(dockerfile.stage("runtime").last("HEALTHCHECK"))
    assert api["healthcheck"]["test"] == ["CMD"] + image_hc.command
    cpus = float(api["deploy"]["resources"]["limits"]["cpus"])
    assert int(api["environment"]["INR_THREADS"]) == int(api["environment"]["OMP_NUM_THREADS"]) == cpus


def test_api_gpu_reserves_an_nvidia_gpu_and_demands_cuda(compose):
    gpu = compose["services"]["api-gpu"]
    assert gpu["profiles"] == ["gpu"] and gpu["build"]["target"] == "gpu"
    device = gpu["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert gpu["environment"]["INR_DEVICE"] == "cuda"
    assert gpu["restart"].startswith("on-failure:"), "a GPU-less host must end in Exited, not a restart loop"


def test_train_writes_into_the_models_folder_the_api_reads(compose):
    train = compose["services"]["train"]
    assert train["profiles"] == ["train"] and train["build"]["target"] == "train"
    mount = train["volumes"][0]
    assert (mount["source"], mount["target"]) == ("./models", "/app/models")
    assert not mount.get("read_only", False)


def test_api_polls_the_folder_train_writes_into(compose):
    """A model the `train` profile writes is served without a restart: the api polls ./models."""
    from service.settings import Settings

    api, train = compose["services"]["api"], compose["services"]["train"]
    env = api["environment"]
    assert env["INR_MODEL_CONTROL_MODE"] == "poll"
    settings = Settings(**{k.removeprefix("INR_").lower(): v for k, v in env.items() if k.startswith("INR_")})
    assert settings.model_control_mode == "poll" and 0 < settings.repository_poll_secs <= 60
    assert api["volumes"][0]["source"] == train["volumes"][0]["source"]
    assert api["volumes"][0]["target"] == env["INR_MODELS"]


def test_nginx_fronts_the_api_and_re_resolves_docker_dns(compose):
    nginx = compose["services"]["nginx"]
    conf_mount = nginx["volumes"][0]
    conf = (ROOT / conf_mount["source"]).read_text()
    listen = re.search(r"listen\s+(\d+);", conf).group(1)
    assert nginx["ports"] == [f"${{INR_HTTP_PORT:-8000}}:{listen}"]
    assert re.search(r"resolver\s+127\.0\.0\.11\b", conf)
    # proxy_pass through a variable: resolved per request, so new replicas are found
    backend = re.search(r"set\s+\$(\w+)\s+http://api:(\d+);", conf)
    assert backend and f"proxy_pass ${backend.group(1)};" in conf
    assert backend.group(2) == compose["services"]["api"]["expose"][0]
    assert nginx["depends_on"]["api"]["condition"] == "service_healthy"
    assert conf.count("{") == conf.count("}")


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed (apt-get install nginx-light)")
def test_nginx_accepts_the_config():
    result = subprocess.run(["nginx", "-t", "-c", str(ROOT / "deploy" / "nginx" / "nginx.conf")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
