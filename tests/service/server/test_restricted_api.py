"""--http-restricted-api: restricted groups need their header (403 otherwise), the value never leaks."""

from __future__ import annotations

import os
import subprocess

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from tests.servers import PY, ROOT, Server

SECRET = "s3cr3t-Value-42"
HEADER = {"X-Infer-Key": SECRET}


@pytest.fixture(scope="module")
def restricted(model_repo):
    srv = Server(
        model_repo,
        "--log-level",
        "debug",
        "--http-restricted-api",
        f"inference,model-config:x-infer-key={SECRET}",
        "--http-restricted-api",
        "statistics:stats-key=other-value",
    )
    with srv.running():
        yield srv


def test_a_restricted_group_answers_403_without_its_header_and_works_with_it(restricted):
    url = restricted.url
    body = {"coords": [[0.5, 0.5]]}
    r = httpx.post(f"{url}/v1/models/astronaut/query", json=body)
    assert r.status_code == 403
    error = r.json()["error"]
    assert "'inference' API is restricted" in error and "x-infer-key" in error and SECRET not in error
    assert (
        httpx.post(
            f"{url}/v1/models/astronaut/query", json=body, headers={"X-Infer-Key": "s3cr3t-Value-43"}
        ).status_code
        == 403
    )
    assert (
        httpx.post(f"{url}/v1/models/astronaut/query", json=body, headers={"X-Infer-Key": SECRET[:-1]}).status_code
        == 403
    )
    assert httpx.post(f"{url}/v1/models/astronaut/query", json=body, headers=HEADER).status_code == 200
    # the header name is case-insensitive, as HTTP says
    assert httpx.post(f"{url}/v1/models/astronaut/query", json=body, headers={"x-INFER-key": SECRET}).status_code == 200
    assert httpx.get(f"{url}/v2/models/digits/config").status_code == 403
    assert httpx.get(f"{url}/v2/models/digits/config", headers=HEADER).status_code == 200
    assert httpx.get(f"{url}/v2/models/stats", headers=HEADER).status_code == 403  # another group's key
    assert httpx.get(f"{url}/v2/models/stats", headers={"stats-key": "other-value"}).status_code == 200
    assert httpx.get(f"{url}/metrics").status_code == 403


def test_a_refused_request_is_refused_before_its_body_is_read(restricted):
    r = httpx.post(f"{restricted.url}/v1/models/astronaut/query", content=b"{not json")
    assert r.status_code == 403


def test_groups_left_open_stay_open(restricted):
    url = restricted.url
    for path in (
        "/health/ready",
        "/v2/health/ready",
        "/v2/models/digits/ready",
        "/v1/models",
        "/v1/models/digits",
        "/v2",
        "/v2/models/digits",
        "/",
    ):
        assert httpx.get(url + path).status_code == 200, path
    assert httpx.get(f"{url}/v2/no-such-route").status_code == 404


def test_tritonclient_sends_the_header_and_gets_403_without_it(restricted):
    tc = triton.InferenceServerClient(restricted.url.removeprefix("http://"))
    x = np.zeros((2, 1, 28, 28), np.float32)
    inp = triton.InferInput("images", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException) as e:
        tc.infer("digits", [inp])
    assert e.value.status() == "403"
    assert tc.infer("digits", [inp], headers=HEADER).as_numpy("probabilities").shape == (2, 10)
    assert tc.is_model_ready("digits")  # health is not restricted
    tc.close()


def test_the_value_is_never_logged(restricted):
    httpx.post(f"{restricted.url}/v1/models/astronaut/query", json={"coords": [[0.5, 0.5]]})
    restricted.stop()
    restricted.output = restricted.proc.stdout.read()
    assert "restricted" in restricted.output or "403" in restricted.output  # the log was captured
    assert SECRET not in restricted.output and "other-value" not in restricted.output


@pytest.mark.parametrize(
    "spec, message",
    [
        ("model-repository:admin-key=", "the value for header 'admin-key' is empty"),
        ("bogus:admin-key=hunter2-secret", "unknown API 'bogus'"),
        ("model-repository=hunter2-secret", "expected API[,API...]:KEY=VALUE"),
        ("model-repository:bad key=hunter2-secret", "KEY must be an HTTP header name"),
    ],
)
def test_bad_specs_are_one_line_errors_that_never_quote_the_value(tmp_path, spec, message):
    for args, env in (([f"--http-restricted-api={spec}"], {}), ([], {"INR_HTTP_RESTRICTED_API": spec})):
        r = subprocess.run(
            [PY, "-m", "service", "--models", str(tmp_path), *args],
            cwd=ROOT,
            text=True,
            capture_output=True,
            timeout=60,
            env={**os.environ, **env},
        )
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith(f"error: --http-restricted-api: {message}"), r.stderr
        assert "hunter2" not in r.stderr


def test_an_api_in_two_groups_is_refused(tmp_path):
    r = subprocess.run(
        [
            PY,
            "-m",
            "service",
            "--models",
            str(tmp_path),
            "--http-restricted-api",
            "health:a=1",
            "--http-restricted-api",
            "health,metadata:b=2",
        ],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr == "error: API 'health' is in more than one restricted group\n"


def test_every_api_route_belongs_to_a_group(tmp_path):
    """A new route must be classified, or --http-restricted-api would leave it open."""
    from fastapi.routing import APIRoute, iter_route_contexts

    from service.app import create_app
    from service.auth.restricted import group_of
    from service.settings import Settings

    app = create_app(Settings(models=tmp_path))
    open_by_design = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
    routes = [c.path_format for c in iter_route_contexts(app.routes) if isinstance(c.original_route, APIRoute)]
    assert "/v2/models/{name}/infer" in routes
    unclassified = [r for r in routes if group_of(r) is None]
    assert not set(unclassified) - open_by_design, unclassified
    assert group_of("/v2/models/{name}/versions/{version}/infer") == "inference"
    assert group_of("/v2/models/{name}/versions/{version}") == "metadata"
    assert group_of("/v1/models/{name}/render") == "inference"
    assert group_of("/v1/models/{name}/preview") == "metadata"
    assert "/v1/fits/{job_id}/events" in routes
    assert {group_of(r) for r in routes if r.startswith("/v1/fits")} == {"fit"}


def test_the_value_is_not_in_the_settings_repr_dump_or_validation_errors(monkeypatch):
    from pydantic import ValidationError

    from service.settings import Settings

    s = Settings(http_restricted_api="model-repository:admin-key=hunter2-secret")
    for text in (repr(s), str(s), str(s.model_dump()), s.model_dump_json()):
        assert "hunter2" not in text and "admin-key" in text
    assert "hunter2-secret" in s.environment()["INR_HTTP_RESTRICTED_API"]  # only for the worker processes
    monkeypatch.setenv("INR_HTTP_RESTRICTED_API", "bogus:admin-key=hunter2-secret")
    with pytest.raises(ValidationError) as e:
        Settings()
    assert "hunter2" not in str(e.value)
