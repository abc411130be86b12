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

from .conftest import ROOT, compose_default
from .nginxconf import SHARDS, rendered, servers


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


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d["services"]["api"].update(helthcheck={}), "helthcheck"),
        (lambda d: d["services"]["api"]["deploy"]["resources"]["limits"].update(cpu="2"), "cpu"),
        (lambda d: d["services"]["api"].update(restart=["always"]), "restart"),
    ],
)
def test_the_schema_catches_typos_and_wrong_types(schema, compose, mutate, expected):
    doc = copy.deepcopy(compose)
    mutate(doc)
    assert any(expected in e for e in errors(schema, doc))


def test_api_is_cpu_read_only_healthchecked_limited_and_scalable(compose, dockerfile):
    api = compose["services"]["api"]
    assert api["build"]["target"] == "runtime" and "profiles" not in api
    assert "ports" not in api and api["expose"] == ["8000", "8001"], "a fixed host port would break --scale api=N"
    mount = api["volumes"][0]
    assert (mount["source"], mount["target"], mount["read_only"]) == ("./models", "/app/models", True)
    assert api["restart"] == "unless-stopped"
    assert api["healthcheck"]["test"] == ["CMD"] + dockerfile.stage("runtime").healthcheck()
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
    settings = Settings(
        **{k.removeprefix("INR_").lower(): compose_default(v) for k, v in env.items() if k.startswith("INR_")}
    )
    assert settings.model_control_mode == "poll" and 0 < settings.repository_poll_secs <= 60
    assert api["volumes"][0]["source"] == train["volumes"][0]["source"]
    assert api["volumes"][0]["target"] == env["INR_MODELS"]


def test_nginx_fronts_the_api_and_resolves_with_the_containers_own_dns(compose):
    nginx = compose["services"]["nginx"]
    mounts = {m["target"]: m for m in nginx["volumes"]}
    template = mounts["/etc/nginx/templates/nginx.conf.template"]
    assert template["read_only"] and nginx["environment"]["NGINX_ENVSUBST_OUTPUT_DIR"] == "/etc/nginx"
    for script in ("15-container-resolver.envsh", "40-api-shards.sh"):
        mounted = mounts[f"/docker-entrypoint.d/{script}"]
        assert mounted["read_only"] and mounted["source"] == f"./deploy/nginx/{script}"
        assert (ROOT / mounted["source"]).stat().st_mode & 0o111, "the image only runs executable scripts"
    conf = (ROOT / template["source"]).read_text()
    listen = re.search(r"listen\s+(\d+);", conf).group(1)
    grpc_listen = re.search(r"listen\s+(\d+)\s+http2;", conf).group(1)
    assert nginx["ports"] == [f"${{INR_HTTP_PORT:-8000}}:{listen}", f"${{INR_GRPC_HOST_PORT:-8001}}:{grpc_listen}"]
    grpc_backend = re.search(r"set\s+\$(\w+)\s+grpc://\$\{NGINX_API_HOST\}:(\d+);", conf)
    assert grpc_backend and f"grpc_pass ${grpc_backend.group(1)};" in conf
    api = compose["services"]["api"]
    assert grpc_backend.group(2) == api["environment"]["INR_GRPC_PORT"] and grpc_backend.group(2) in api["expose"]
    assert re.search(r"resolver\s+\$\{NGINX_RESOLVER\}\s", conf), "no hard-coded resolver address"
    # only NGINX_* variables are substituted, and only those set: every other ${...} would be emptied or left
    assert set(re.findall(r"\$\{(\w+)\}", conf)) == {"NGINX_RESOLVER", "NGINX_API_HOST"}
    for name in ("NGINX_RESOLVER", "NGINX_API_HOST"):
        assert re.fullmatch(nginx["environment"]["NGINX_ENVSUBST_FILTER"].strip("^") + r"\w*", name)
    assert nginx["environment"]["NGINX_API_HOST"] == "api", "the service's name: one DNS answer per replica"
    # HTTP goes to the sharded upstream, whose servers 40-api-shards.sh writes (port: NGINX_API_PORT, 8000)
    assert set(re.findall(r"proxy_pass\s+([^;]+);", conf)) == {"http://api_replicas"}
    assert "NGINX_API_PORT" not in nginx["environment"] and api["expose"][0] == "8000"
    assert nginx["depends_on"]["api"]["condition"] == "service_healthy"
    assert conf.count("{") == conf.count("}")


def test_nginx_shards_http_by_model_on_a_consistent_hash_ring():
    """The upstream hashes $model (consistent), its servers included from the file 40-api-shards.sh writes;
    tests/deploy/test_shards_nginx.py runs it."""
    conf = (ROOT / "deploy" / "nginx" / "nginx.conf.template").read_text()
    upstream = re.search(r"upstream\s+api_replicas\s*\{(.*?)\}", conf, re.S).group(1)
    assert re.search(r"^\s*hash\s+\$model\s+consistent;", upstream, re.M)
    (included,) = re.findall(r"include\s+(\S+);", upstream)
    script = (ROOT / "deploy" / "nginx" / "40-api-shards.sh").read_text()
    assert f"file=${{NGINX_SHARDS_FILE:-{included}}}" in script
    assert "resolve" not in upstream, "servers sharing a name share their ring points: one line per address"
    assert re.search(r"map\s+\$uri\s+\$model\s*\{", conf)


def test_the_resolver_script_takes_the_first_nameserver(tmp_path):
    script = (ROOT / "deploy" / "nginx" / "15-container-resolver.envsh").read_text()
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("search dns.podman\nnameserver 10.89.0.1\nnameserver 10.255.255.53\n")
    out = subprocess.run(
        ["sh", "-c", script.replace("/etc/resolv.conf", str(resolv)) + 'echo "$NGINX_RESOLVER"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "10.89.0.1"
    resolv.write_text("nameserver fd00::1\n")
    out = subprocess.run(
        ["sh", "-c", script.replace("/etc/resolv.conf", str(resolv)) + 'echo "$NGINX_RESOLVER"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "[fd00::1]"


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed (apt-get install nginx-light)")
def test_nginx_accepts_the_rendered_config(tmp_path):
    shards = tmp_path / "api.conf"
    shards.write_text(servers(["10.89.0.5:8000", "10.89.0.6:8000"]))
    conf = tmp_path / "nginx.conf"
    conf.write_text(rendered().replace(SHARDS, str(shards)))
    result = subprocess.run(["nginx", "-t", "-c", str(conf)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
