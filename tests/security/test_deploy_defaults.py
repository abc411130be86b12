"""Attack on the deployments' defaults: an anonymous client that reaches the compose nginx (or the Kubernetes
router) publishes a new version of a public model through `POST /v1/fits`.

The service runs here with the environment each deployment file gives its api (defaults of `${VAR:-default}`
taken, the container's paths moved into a temporary folder), so the test follows the files as they are.
"""

from __future__ import annotations

import re

import httpx
import pytest
import yaml

from service.auth.keys import KeyStore
from tests.fits import photo, png
from tests.layout import ROOT
from tests.security.stack import FAST
from tests.servers import Server

COMPOSE = ("docker-compose.yml", "docker-compose.s3.yml")
DEFAULT = re.compile(r"\$\{(\w+):-([^}]*)\}")


def compose_env(file: str) -> dict[str, str]:
    api = yaml.safe_load((ROOT / file).read_text())["services"]["api"]
    env = api.get("environment") or {}
    return {k: DEFAULT.sub(lambda m: m.group(2), str(v)) for k, v in env.items() if isinstance(v, (str, int))}


def k8s_env() -> dict[str, str]:
    docs = yaml.safe_load_all((ROOT / "deploy/k8s/deployment.yaml").read_text())
    (api,) = [d for d in docs if d and d.get("kind") == "Deployment"]
    (container,) = api["spec"]["template"]["spec"]["containers"]
    return {e["name"]: str(e["value"]) for e in container["env"] if "value" in e}


@pytest.mark.parametrize("file", [*COMPOSE, "deploy/k8s/deployment.yaml"])
def test_the_deployments_need_a_key_to_publish(file):
    """Secure answer: compose and the Kubernetes manifests default to INR_FIT_ACCESS=key and believe forwarded
    headers only from private addresses (their proxy); `make serve` on the loopback stays open (main: compose
    defaulted to `open`, where anyone who reached nginx could publish over any public model)."""
    env = k8s_env() if file.startswith("deploy/") else compose_env(file)
    assert env.get("INR_FIT_ACCESS") == "key", file
    proxies = env.get("INR_FORWARDED_ALLOW_IPS", "")
    assert proxies and "*" not in proxies and "0.0.0.0/0" not in proxies, file


def test_an_anonymous_fit_through_the_compose_api_is_refused(stack, tmp_path):
    """The compose api's own settings, started for real: an anonymous fit into a public model is a 401 and queues
    nothing; a key with the scope `fit` queues it."""
    env = {k: v for k, v in compose_env("docker-compose.yml").items() if k.startswith("INR_FIT_ACCESS")}
    keys = tmp_path / "keys.json"
    key, _ = KeyStore(keys).create("fitter", ["fit"], None)
    env |= {"INR_ACCESS_KEYS": str(keys), "INR_FIT_STORE": f"sqlite:///{tmp_path / 'fits.sqlite'}"}
    env |= {"INR_FIT_UPLOADS": str(tmp_path / "uploads")}
    with Server(stack.repo, env=env).running() as srv:
        files = {"file": ("open.png", png(photo(40, 32, 1)), "image/png")}
        r = httpx.post(f"{srv.url}/v1/fits", files=files, data={**FAST, "name": "open"}, timeout=60)
        assert r.status_code == 401, r.text
        assert httpx.get(f"{srv.url}/v1/fits").json().get("fits", []) == []
        auth = {"Authorization": f"Bearer {key}"}
        r = httpx.post(f"{srv.url}/v1/fits", files=files, data={**FAST, "name": "open"}, headers=auth, timeout=60)
        assert r.status_code in (201, 202), r.text
