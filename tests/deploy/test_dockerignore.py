"""The .dockerignore matcher that the replay uses follows Docker's rules."""
from __future__ import annotations

import pytest

from .conftest import ROOT, load_deploy_module

DockerIgnore = load_deploy_module("dockerfile_model").DockerIgnore


@pytest.mark.parametrize("path, excluded", [
    ("service/app.py", False),
    ("service/routers/health.py", False),
    ("models/astronaut/1/model.onnx", False),
    ("deploy/healthcheck.py", False),
    ("pyproject.toml", False),
    ("service/__pycache__/app.cpython-311.pyc", True),   # **/__pycache__ anywhere
    ("models/.astronaut.tmp-x1/1/model.onnx", True),     # half-written model from training
    ("tests/service/test_app.py", True),                 # not on the allow-list
    ("deploy/nginx/nginx.conf", True),
    (".git/HEAD", True),
    (".venv/bin/python", True),
])
def test_project_dockerignore_keeps_exactly_what_the_images_need(path, excluded):
    assert DockerIgnore.load(ROOT).excluded(path) is excluded


def test_last_matching_rule_wins_and_directory_rules_cover_their_files():
    rules = DockerIgnore("data\n!data/keep.txt\n*.log\n!important.log\nsrc/**/tmp\n")
    assert rules.excluded("data/big.bin")
    assert not rules.excluded("data/keep.txt")
    assert rules.excluded("x.log") and not rules.excluded("important.log")
    assert rules.excluded("src/tmp/a") and rules.excluded("src/a/b/tmp/c")
    assert not rules.excluded("src/a/tmpx")
    assert not rules.excluded("sub/x.log")   # `*` does not cross '/'
