"""Class 7, a policy edited in place, and a policy that is wrong (docs/security.md, "Policies"). The secure answer:
an `access` parameter appended to a served model's config.pbtxt in place (the file's inode kept, as an editor saves)
holds from the next request and is seen by the rescan; a policy that would leave a model open by mistake
(`access_scopes` or a substitute without `access`, `access` given twice, `ACCESS` in capitals) fails the model's
load instead, and the model is never served open."""

from __future__ import annotations

import os
import time

import httpx
import pytest

from service.engine.state import folder_stamp, folder_unchanged
from tests.security.stack import RESTRICTED, param
from tests.service.engine.test_residency import copy_model


def wait_status(url: str, path: str, status: int, headers=None, timeout: float = 30) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.get(url + path, headers=headers or {})
        if r.status_code == status or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def test_access_appended_in_place_holds_from_the_next_request(stack):
    name = "edited-in-place"
    copy_model(stack.repo / "open", stack.repo / name)
    render = f"/v1/models/{name}/render?width=8"
    assert wait_status(stack.open_url, render, 200).status_code == 200
    config = stack.repo / name / "config.pbtxt"
    inode = config.stat().st_ino
    with open(config, "a") as f:  # in place: same inode, the folder's mtime unchanged
        f.write(RESTRICTED)
    assert config.stat().st_ino == inode
    assert httpx.get(stack.open_url + render).status_code == 401  # no poll needed
    assert httpx.get(stack.open_url + render, headers=stack.auth("admin")).status_code == 200


def test_the_rescan_sees_a_config_edited_in_place(tmp_path, model_repo):
    copy_model(model_repo / "astronaut", tmp_path / "m")
    stamp = folder_stamp(tmp_path / "m")
    root = os.open(tmp_path, os.O_RDONLY)
    try:
        assert folder_unchanged("m", stamp, root)
        with open(tmp_path / "m" / "config.pbtxt", "a") as f:
            f.write(RESTRICTED)
        assert not folder_unchanged("m", stamp, root) and folder_stamp(tmp_path / "m") != stamp
    finally:
        os.close(root)


@pytest.mark.parametrize(
    "name,extra,words",
    [
        ("scopes-alone", param("access_scopes", "staff"), "restricted model only"),
        ("substitute-alone", param("access_substitute", "8"), "restricted model only"),
        ("access-twice", RESTRICTED + param("access", "public"), "given twice"),
        ("access-capitals", param("ACCESS", "restricted"), "unknown parameter 'ACCESS'"),
        ("access-typo", param("acces_scopes", "staff") + RESTRICTED, "unknown parameter"),
    ],
)
def test_a_policy_that_would_fail_open_fails_the_load(stack, name, extra, words):
    copy_model(stack.repo / "open", stack.repo / name)
    config = stack.repo / name / "config.pbtxt"
    config.write_text(config.read_text() + extra)
    r = wait_status(stack.open_url, f"/v1/models/{name}", 200, stack.auth("admin"))
    assert words in r.text, r.text
    rendered = httpx.get(f"{stack.open_url}/v1/models/{name}/render?width=8")
    assert rendered.status_code == 401, rendered.text  # never served open
    assert (
        httpx.get(f"{stack.open_url}/v1/models/{name}/render?width=8", headers=stack.auth("admin")).status_code != 200
    )
