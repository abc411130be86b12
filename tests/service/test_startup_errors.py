"""`python -m service` refusing to start: a taken port (HTTP or gRPC), a model repository that is
not a readable folder, or a bad setting is one line on stderr that names the option, no traceback, and the
documented exit code (2: a bad setting; 3: a port that cannot be listened on)."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from bench.common import free_port
from tests.servers import PY, ROOT


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "service", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def one_line(r: subprocess.CompletedProcess, code: int, starts: str) -> None:
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1 and r.stdout == "", r.stderr
    assert r.stderr.startswith(starts), r.stderr


@pytest.fixture
def taken():
    """A port held by a listening socket of this test, as another server would hold it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_taken_http_port_is_one_line_and_exit_3(tmp_path, taken):
    r = run_cli("--models", str(tmp_path), "--port", str(taken), "--grpc-port", str(free_port()))
    one_line(r, 3, f"error: --port / INR_PORT: port {taken} on 127.0.0.1 is taken by another process")


@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_taken_grpc_port_is_one_line_and_exit_3(tmp_path, taken, how):
    port = ("--port", str(free_port()))
    if how == "option":
        r = run_cli("--models", str(tmp_path), *port, "--grpc-port", str(taken))
    else:
        r = run_cli("--models", str(tmp_path), *port, env={"INR_GRPC_PORT": str(taken)})
    one_line(r, 3, f"error: --grpc-port / INR_GRPC_PORT (0 turns gRPC off): port {taken} on 127.0.0.1 is taken")


def test_the_same_port_for_http_and_grpc_is_a_bad_setting(tmp_path):
    port = str(free_port())
    one_line(
        run_cli("--models", str(tmp_path), "--port", port, "--grpc-port", port),
        2,
        f"error: --grpc-port / INR_GRPC_PORT: {port} is also the HTTP port (--port)",
    )


def test_a_file_given_as_the_repository_is_one_line_and_exit_2(tmp_path):
    f = tmp_path / "models.txt"
    f.write_text("not a folder")
    one_line(run_cli("--models", str(f), "--port", str(free_port())), 2, f"error: --models '{f}' is not a directory")


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root reads a folder whatever its mode; the in-process test below covers the refusal"
)
def test_an_unreadable_repository_is_one_line_and_exit_2(tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    repo.chmod(0)
    try:
        r = run_cli("--models", str(repo), "--port", str(free_port()))
    finally:
        repo.chmod(0o755)
    one_line(r, 2, f"error: --models '{repo}' cannot be read (Permission denied)")


def test_a_repository_that_cannot_be_listed_is_refused_before_start(tmp_path, monkeypatch):
    from service import __main__ as cli

    real = os.listdir

    def denied(path):
        if str(path) == str(tmp_path):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(cli.os, "listdir", denied)
    with pytest.raises(ValueError, match=r"^--models '.*' cannot be read \(Permission denied\)$"):
        cli.settings_from(cli.build_parser().parse_args(["--models", str(tmp_path)]))


@pytest.mark.parametrize(
    "env,starts",
    [
        ({"INR_MAX_BODY_BYTES": "lots"}, "error: --max-body-bytes: Input should be a valid integer"),
        ({"INR_GRPC_PORT": "-1"}, "error: --grpc-port: Input should be greater than or equal to 0"),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(tmp_path, env, starts):
    one_line(run_cli("--models", str(tmp_path), env={"INR_PORT": str(free_port()), **env}), 2, starts)


def test_a_bad_otel_setting_under_plain_uvicorn_is_one_line_and_exit_2():
    """`uvicorn --factory service.app:create_app` (docs/serving.md, "Under load") reads OTEL_* in the factory: the
    same line."""
    r = subprocess.run(
        [PY, "-m", "uvicorn", "--factory", "service.app:create_app", "--port", str(free_port())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "sometimes"},
    )
    one_line(r, 2, "OTEL_TRACES_SAMPLER: unknown sampler 'sometimes'")


@pytest.mark.parametrize(("models", "fits"), [("models", "s3://bucket/fits"), ("s3://bucket/models", "build/x")])
def test_a_fits_folder_beside_models_on_s3_is_one_line_and_exit_2(models, fits):
    r = run_cli("--models", models, "--port", str(free_port()), env={"INR_FIT_MODELS": fits})
    one_line(r, 2, "error: ")
    assert "INR_FIT_MODELS" in r.stderr and "S3" in r.stderr
