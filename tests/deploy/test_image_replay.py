"""deploy/check_image_commands.py replays a Dockerfile target natively and fails for the
reasons a real build or `docker run` would. The full replay of the project's Dockerfile
needs PyPI (pip install '.[serve]') and runs in .ci/run; these cases use a small build
context whose commands need no network."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .conftest import ROOT, load_deploy_module

check = load_deploy_module("check_image_commands")

APP = '''\
import http.server, os, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path in ("/health/live", "/health/ready") else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
port = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ["INR_PORT"])
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''

DOCKERFILE = '''\
# syntax=docker/dockerfile:1
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
COPY app.py ./
RUN python -m venv --without-pip /opt/venv \\
 && test -f /src/app.py
FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/venv/bin:$PATH INR_PORT=8000
RUN groupadd --system app && useradd --system --gid app app
COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
COPY app.py healthcheck.py ./
USER 10001
EXPOSE 8000
HEALTHCHECK --interval=1s --timeout=2s --start-period=3s --retries=1 CMD ["python", "/app/healthcheck.py"]
CMD {cmd}
'''


def context(tmp_path: Path, cmd: str = '["python", "/app/app.py"]', dockerignore: str = "*\n!app.py\n!healthcheck.py\n",
            edit=lambda text: text) -> Path:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "app.py").write_text(APP)
    shutil.copy(ROOT / "deploy" / "healthcheck.py", ctx / "healthcheck.py")
    (ctx / ".dockerignore").write_text(dockerignore)
    (ctx / "Dockerfile").write_text(edit(DOCKERFILE.replace("{cmd}", cmd)))
    return ctx


def replay(ctx: Path) -> int:
    return check.main(["--dockerfile", str(ctx / "Dockerfile"), "--context", str(ctx), "--timeout", "20"])


def test_replay_passes_when_the_cmd_serves_on_inr_port(tmp_path, capsys):
    assert replay(context(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "skip line 10 (creates the image's user" in out
    assert "PASS" in out


def test_replay_fails_when_the_cmd_ignores_inr_port(tmp_path, capsys):
    port = check.free_port()
    assert replay(context(tmp_path, cmd=f'["python", "/app/app.py", "{port}"]')) == 1
    assert "not healthy within the HEALTHCHECK budget" in capsys.readouterr().err


def test_replay_fails_when_dockerignore_drops_a_copied_file(tmp_path, capsys):
    assert replay(context(tmp_path, dockerignore="*\n!app.py\n")) == 1
    assert "'healthcheck.py' is excluded by .dockerignore" in capsys.readouterr().err


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("USER 10001\n", ""), "runs as root"),
    (lambda t: t.replace("test -f /src/app.py", "test -f /src/missing.py"), "RUN exited 1"),
    (lambda t: t.replace('CMD ["python", "/app/app.py"]', "CMD python /app/app.py"), "exec (JSON) form"),
])
def test_replay_fails_like_a_build_or_run_would(tmp_path, capsys, edit, message):
    assert replay(context(tmp_path, edit=edit)) == 1
    assert message in capsys.readouterr().err
