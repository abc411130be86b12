"""Class 6, escalation through the keys API (docs/security.md, "Keys"). The secure answer: an admin limited to some
models makes, sees and revokes only keys limited to models of its own (never an unlimited or wider one); a models
list that is empty is refused, not stored as every model; a quota that is not a finite number is refused before
anything is written, by the API and the CLI alike."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from tests.servers import ROOT


def create(stack, role: str, **body) -> httpx.Response:
    return httpx.post(f"{stack.open_url}/v1/keys", json={"name": "made", **body}, headers=stack.auth(role))


def count(stack) -> int:
    return len(json.loads(stack.keys_path.read_text()))


@pytest.mark.parametrize(
    "body",
    [
        {"scopes": ["admin"]},  # unlimited: every model
        {"scopes": ["read"]},
        {"scopes": ["admin"], "models": ["open", "secret"]},  # wider than its own
        {"scopes": ["staff"], "models": ["secret"]},
    ],
)
def test_a_limited_admin_cannot_make_a_wider_key(stack, body):
    before = count(stack)
    r = create(stack, "limited", **body)
    assert r.status_code == 403 and "limited to the models open" in r.json()["error"], r.text
    assert count(stack) == before


def test_a_limited_admin_makes_keys_within_its_models_and_sees_only_those(stack):
    r = create(stack, "limited", scopes=["admin"], models=["open"])
    assert r.status_code == 201 and r.json()["models"] == ["open"], r.text
    listed = httpx.get(f"{stack.open_url}/v1/keys", headers=stack.auth("limited")).json()["keys"]
    assert {k["id"] for k in listed} >= {r.json()["id"], stack.ids["limited"]}
    assert stack.ids["admin"] not in {k["id"] for k in listed} and stack.ids["staff"] not in {k["id"] for k in listed}
    wider = httpx.delete(f"{stack.open_url}/v1/keys/{stack.ids['admin']}", headers=stack.auth("limited"))
    assert wider.status_code == 404
    assert httpx.get(f"{stack.open_url}/v1/models", headers=stack.auth("admin")).status_code == 200


@pytest.mark.parametrize(
    "body,words",
    [
        ({"scopes": ["read"], "models": []}, "at least one model"),
        ({"scopes": ["read"], "models": ["../x"]}, "not a model name"),
        ({"scopes": ["read"], "quotas": {"rps": "nan"}}, "finite"),
        ({"scopes": ["read"], "quotas": {"rps": "inf"}}, "finite"),
        ({"scopes": ["read"], "quotas": {"rps": 1e400}}, "finite"),
        ({"scopes": ["read\n"]}, "scope"),
    ],
)
def test_bad_keys_are_refused_before_anything_is_written(stack, body, words):
    before = count(stack)
    r = httpx.post(
        f"{stack.open_url}/v1/keys",
        content=json.dumps({"name": "bad", **body}).replace("Infinity", "1e400"),
        headers={**stack.auth("admin"), "Content-Type": "application/json"},
    )
    assert r.status_code in (400, 422) and words in r.text, r.text
    assert count(stack) == before


@pytest.mark.parametrize("args,words", [(["--models", ""], "at least one model"), (["--quota", "rps=nan"], "finite")])
def test_the_cli_refuses_them_in_one_line_with_exit_2(stack, args, words):
    before = count(stack)
    made = subprocess.run(
        [sys.executable, "-m", "service.auth", "keys", "create", "--keys", str(stack.keys_path), "--name", "x"]
        + ["--scope", "read", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert made.returncode == 2 and made.stdout == "" and words in made.stderr, made
    assert len(made.stderr.strip().splitlines()) == 1 and count(stack) == before
