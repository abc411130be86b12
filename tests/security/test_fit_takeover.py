"""Class 1, takeover by fit (docs/security.md): a fit publishes a new version of its target, so it is judged like
a write to that model. The secure answer: a caller who may not read a restricted model cannot fit into it (401
anonymous, 403 with a key that lacks its scope, in both fit modes); a fit that may (an admin's) keeps the model's
policy and every other parameter of its config.pbtxt; a policy changed while a fit waits fails the fit, never the
model; a fit may ask for a policy only as far as its caller may read it (new model) or administer it (existing)."""

from __future__ import annotations

import httpx
import pytest

from modelrepo import SpecError, read_spec, write_version
from tests.security.stack import RESTRICTED, param, restrict
from tests.service.engine.test_residency import copy_model

RESTRICTED_BROKEN = RESTRICTED + "max_batch_size: {"  # names a policy, and does not parse


def config(stack, name: str) -> str:
    return (stack.repo / name / "config.pbtxt").read_text()


def versions(stack, name: str) -> list[str]:
    return sorted(p.name for p in (stack.repo / name).iterdir())


def test_anonymous_fit_into_a_restricted_model_is_refused_and_changes_nothing(stack):
    before, files = config(stack, "secret"), versions(stack, "secret")
    r = stack.fit("secret")
    assert r.status_code == 401, r.text
    assert "restricted" in r.json()["error"] and "new version" in r.json()["error"]
    assert config(stack, "secret") == before and versions(stack, "secret") == files


def test_a_fit_key_without_the_scope_is_refused_in_key_mode(stack):
    r = stack.fit("secret", role="fit", url=stack.key_url)
    assert r.status_code == 403, r.text
    assert "staff" in r.json()["error"]


def test_an_admins_fit_keeps_the_policy_and_the_older_versions_stay_closed(stack):
    name = "takeover-admin"
    copy_model(stack.repo / "secret", stack.repo / name)
    text = config(stack, name).replace("max_queue_delay_microseconds: 500", "max_queue_delay_microseconds: 777")
    text = text.replace("num_versions: 1", "num_versions: 2")  # both versions served: the old one must stay closed
    (stack.repo / name / "config.pbtxt").write_text(text + param("custom_note", "kept"))
    old = max(int(v) for v in versions(stack, name) if v.isdigit())  # what `secret` had when it was copied
    r = stack.fit(name, role="admin")
    assert r.status_code == 202, r.text
    assert stack.finished(r.json()["id"])["state"] == "succeeded"
    text = config(stack, name)
    assert "restricted" in text and '"staff"' in text and "custom_note" in text and "777" in text
    assert "num_versions: 2" in text
    assert read_spec(stack.repo / name).access.scopes == ("staff",)
    stack.served(name, old + 1)
    for path in (f"/iiif/3/{name}@{old}/full/8,/0/default.png", f"/iiif/3/{name}/full/8,/0/default.png"):
        assert httpx.get(stack.open_url + path).status_code == 401  # neither the old nor the new pixels
        assert httpx.get(stack.open_url + path, headers=stack.auth("staff")).status_code == 200


def test_a_policy_that_changes_while_the_fit_waits_fails_the_fit_not_the_model(stack):
    """The name is free when the anonymous fit is queued; an operator restricts the model it names before the
    worker publishes (here: a model of that name appears, restricted). The worker's write refuses it."""
    name = "takeover-race"
    r = stack.fit(name, steps=400)  # long enough for the model to appear first
    assert r.status_code == 202, r.text
    copy_model(stack.repo / "open", stack.repo / name)
    restrict(stack.repo / name)
    rec = stack.finished(r.json()["id"])
    assert rec["state"] == "failed" and "access policy changed" in rec["error"], rec
    assert not (stack.repo / name / "2").exists() and "restricted" in config(stack, name)


def test_a_restricted_model_is_made_only_by_a_caller_who_could_read_it(stack):
    policy = {"access": "restricted", "access_scopes": "staff"}
    assert stack.fit("made-by-anonymous", **policy).status_code == 401
    assert stack.fit("made-by-fit-key", role="fit", url=stack.key_url, **policy).status_code == 403
    assert stack.fit("made-bad", access="RESTRICTED").status_code == 422
    r = stack.fit("made-by-staff", role="staff", **policy)
    assert r.status_code == 202, r.text
    assert stack.finished(r.json()["id"])["state"] == "succeeded"
    assert read_spec(stack.repo / "made-by-staff").access.scopes == ("staff",)
    stack.served("made-by-staff", 1)
    assert httpx.get(f"{stack.open_url}/v1/models/made-by-staff/render?width=8").status_code == 401


def test_changing_a_models_policy_by_fit_needs_admin(stack):
    r = stack.fit("secret", role="staff", access="public")
    assert r.status_code == 403 and "admin" in r.json()["error"], r.text
    r = stack.fit("open", access="restricted")
    assert r.status_code == 401 and "admin" in r.json()["error"], r.text
    assert "access" not in config(stack, "open")


def test_a_fit_never_overwrites_a_model_whose_config_does_not_parse(stack):
    """A config.pbtxt that does not parse counts as restricted when it names a policy (401 to anonymous); either way
    a fit into it is refused (409), and a worker's write would be too: the file stays as the operator left it."""
    for name, text in (
        ("takeover-broken", "this { is not a config"),
        ("takeover-broken-policy", RESTRICTED_BROKEN),
    ):
        copy_model(stack.repo / "open", stack.repo / name)
        (stack.repo / name / "config.pbtxt").write_text(text)
        anonymous = stack.fit(name)
        assert anonymous.status_code == (401 if "access" in text else 409), anonymous.text
        assert stack.fit(name, role="admin").status_code == 409
        assert config(stack, name) == text


def test_the_write_refuses_a_model_it_cannot_read(tmp_path, model_repo):
    """The worker's side of it (modelrepo.write_version): a version is never written into an unreadable model."""
    copy_model(model_repo / "astronaut", tmp_path / "m")
    (tmp_path / "m" / "config.pbtxt").write_text(RESTRICTED_BROKEN)
    onnx = (tmp_path / "m" / "1" / "model.onnx").read_bytes()
    with pytest.raises(SpecError, match="cannot be read"):
        write_version(tmp_path / "m", read_spec(model_repo / "astronaut"), onnx, {})
    assert (tmp_path / "m" / "config.pbtxt").read_text() == RESTRICTED_BROKEN
    assert sorted(p.name for p in (tmp_path / "m").iterdir() if p.name.isdigit()) == ["1"]
