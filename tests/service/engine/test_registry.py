"""The registry: every folder listed, broken ones failed without stopping the others."""

import pytest

from service.engine.registry import Registry
from service.engine.runtime import RuntimeOptions
from service.errors import ModelNotFound, ModelNotReady, NotLoaded, WrongTask


@pytest.fixture(scope="module")
def registry(model_repo):
    reg = Registry(model_repo, RuntimeOptions())
    reg.load_all()
    return reg


def test_every_visible_folder_is_listed_and_hidden_ones_are_skipped(registry):
    assert sorted(registry.models) == [
        "astronaut",
        "broken-onnx",
        "digits",
        "junk-metadata",
        "no-inputs",
        "no-metadata",
        "tampered",
        "truncated-config",
        "wrong-inputs",
    ]


def test_good_models_are_ready_beside_broken_ones(registry):
    ready = {n for n, m in registry.models.items() if m.ready}
    assert ready == {"astronaut", "digits"}


def test_unknown_model_error_lists_the_models(registry):
    with pytest.raises(ModelNotFound, match="unknown model 'nope'; models: astronaut, broken-onnx"):
        registry.get("nope")


def test_wrong_task_names_the_model_and_both_tasks(registry):
    with pytest.raises(WrongTask, match="'astronaut' has task 'image'; /classify needs a model with task 'digits'"):
        registry.ready_model("astronaut", "digits", "/classify")


def test_failed_model_is_not_ready_and_says_why(registry):
    with pytest.raises(ModelNotReady, match="'tampered' is failed: version 1: sha256"):
        registry.ready_model("tampered", "image", "/query")


def test_nothing_is_served_before_loading(model_repo):
    with pytest.raises(NotLoaded):
        Registry(model_repo, RuntimeOptions()).get("astronaut")


def test_an_empty_or_missing_repository_loads_nothing(tmp_path):
    for root in (tmp_path, tmp_path / "missing"):
        reg = Registry(root, RuntimeOptions())
        reg.load_all()
        assert reg.loaded and reg.models == {}
