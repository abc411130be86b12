"""The access policy in config.pbtxt (modelrepo/access.py): written and read back through Triton's ModelConfig,
read alone for a listing, and refused when it would leave a model open by mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelrepo import Access, SpecError, read_access, read_spec
from modelrepo.triton import apply_config, config_text, parse_config

PHOTO = Path(__file__).resolve().parents[2] / "models" / "dandelion"


def with_params(text: str) -> str:
    return (PHOTO / "config.pbtxt").read_text() + text


def param(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}\n'


def test_a_policy_goes_through_config_pbtxt_and_back(tmp_path):
    spec = read_spec(PHOTO)
    assert spec.access == Access() and spec.access.effective("public") == "public"
    policy = Access("restricted", ("conservation", "staff"), 512)
    text = config_text(spec.with_(access=policy))
    assert apply_config(spec, parse_config(text)).access == policy
    (tmp_path / "config.pbtxt").write_text(text)
    assert read_access(tmp_path) == policy
    assert policy.readers == ("conservation", "staff") and Access("restricted").readers == ("read",)


def test_a_folder_without_access_is_read_without_parsing(tmp_path):
    (tmp_path / "config.pbtxt").write_text("this does not parse, but names no policy")
    assert read_access(tmp_path) == Access()
    assert read_access(tmp_path / "missing") == Access()


@pytest.mark.parametrize(
    "params,says",
    [
        (param("access", "secret"), "public or restricted"),
        (param("access_scope", "staff"), "unknown parameter 'access_scope'"),
        (param("access", "restricted") + param("access_scopes", "Staff Room"), "access_scopes"),
        (param("access", "restricted") + param("access_substitute", "-5"), "access_substitute"),
        (param("access", "restricted") + param("access_substitute", "100000"), "1..65536"),
        (param("access", "public") + param("access_scopes", "staff"), "restricted model only"),
    ],
)
def test_a_policy_that_would_leave_a_model_open_by_mistake_is_refused(tmp_path, params, says):
    with pytest.raises(SpecError, match=says):
        apply_config(read_spec(PHOTO), parse_config(with_params(params)))
    (tmp_path / "config.pbtxt").write_text(with_params(params))
    with pytest.raises(SpecError, match=says):
        read_access(tmp_path)
