"""schemathesis over the service's own /openapi.json, against the real server: no 5xx, and every
documented response matches its schema.

schemathesis' `prefixItems` bug (its issues 3842 and 4099: it rewrites OpenAPI 3.1 tuple schemas
into a list-valued `items`, then rejects its own rewrite as an invalid schema) is worked around in
the schema: fixed-length tuples are published as `items` + `minItems`/`maxItems` (service/api/schemas.py,
`numbers`), which states the same constraint. The test asserts that no `prefixItems` is left.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.servers import Server

CONFIG = """
[[operations]]
include-path-regex = "/classify$"
parameters = { name = "digits" }

[[operations]]
include-path-regex = "/(query|render|infer)$"
parameters = { name = "astronaut" }
"""


@pytest.fixture(scope="module")
def fuzzed(model_repo, tmp_path_factory):
    # only loadable models: a failed one answers 503 by design (Triton's code), which the check counts as
    # a server error
    repo = tmp_path_factory.mktemp("fuzz-models")
    for name in ("astronaut", "digits"):
        shutil.copytree(model_repo / name, repo / name)
    store = tmp_path_factory.mktemp("fuzz-fits") / "fits.sqlite"  # fuzzed fits queue there, not in build/
    srv = Server(
        repo,
        env={
            "INR_MAX_RENDER_PIXELS": "65536",
            "INR_MAX_QUERY_COORDS": "5000",
            "INR_RENDER_TILE_SAMPLES": "4096",
            "INR_MAX_CLASSIFY_IMAGES": "8",
            "INR_FIT_STORE": f"sqlite:///{store}",
        },
    )
    with srv.running():
        yield srv


def test_the_schema_has_no_prefix_items(fuzzed):
    assert "prefixItems" not in httpx.get(f"{fuzzed.url}/openapi.json").text


def test_schemathesis_finds_no_server_error_and_no_schema_violation(fuzzed, tmp_path: Path):
    exe = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert exe, "schemathesis is not installed (the dev extra)"
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    run = subprocess.run(
        [
            exe,
            "--config-file",
            str(config),
            "run",
            f"{fuzzed.url}/openapi.json",
            "--checks",
            "not_a_server_error,response_schema_conformance,status_code_conformance",
            "--phases",
            "examples,fuzzing",
            "--max-examples",
            "6",
            "--seed",
            "1",
            "--request-timeout",
            "30",
            "--workers",
            "2",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )  # its cache goes there
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]
    generated = re.search(r"(\d+) generated, (\d+) passed", out)
    assert generated and int(generated.group(1)) >= 100 and generated.group(1) == generated.group(2), out[-3000:]
    assert "errored" not in out.split("SUMMARY")[-1], out[-3000:]
