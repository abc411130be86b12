"""The IIIF collection of a repository larger than a page (INR_IIIF_COLLECTION_PAGE): a Collection of Collections,
one per page of models by name, each page a Collection of its image models' Manifests, every document checked
against the Presentation 3 schema (iiif-prezi3's models, generated from the presentation validator's schema)."""

from __future__ import annotations

import shutil

import httpx
import pytest
from iiif_prezi3 import Collection

from tests.servers import Server


@pytest.fixture(scope="module")
def paged(iiif_repo, tmp_path_factory):
    repo = tmp_path_factory.mktemp("paged-collection")
    for name in ("a", "b", "c", "d"):
        shutil.copytree(iiif_repo / "astronaut", repo / name)
        config = repo / name / "config.pbtxt"
        config.write_text(config.read_text().replace('name: "astronaut"', f'name: "{name}"'))
    shutil.copytree(iiif_repo / "digits", repo / "digits")
    srv = Server(repo, env={"INR_IIIF_COLLECTION_PAGE": "2"})
    with srv.running():
        yield srv


def test_a_large_collection_is_a_collection_of_pages_and_each_page_validates(paged):
    top = httpx.get(f"{paged.url}/iiif/3/collection.json")
    assert top.status_code == 200 and top.headers["access-control-allow-origin"] == "*"
    doc = top.json()
    Collection.model_validate(doc)
    assert [i["type"] for i in doc["items"]] == ["Collection"] * 3  # a b | c d | digits
    manifests = []
    for n, ref in enumerate(doc["items"], 1):
        assert ref["id"].endswith(f"/iiif/3/collection/{n}.json")
        page = httpx.get(ref["id"]).json()
        Collection.model_validate(page)
        assert page["partOf"][0]["id"] == doc["id"]
        manifests += [m["label"]["en"][0] for m in page["items"] if m["type"] == "Manifest"]
        assert len(page["items"]) <= 2
    assert manifests == ["a", "b", "c", "d"]  # digits is no image model: its page is empty
    assert httpx.get(f"{paged.url}/iiif/3/collection/{manifests and 1}.json").status_code == 200


@pytest.mark.parametrize("page", ["0", "4", "x"])
def test_a_page_that_is_not_there_is_a_clear_error(paged, page):
    r = httpx.get(f"{paged.url}/iiif/3/collection/{page}.json")
    assert r.status_code in (400, 404) and "error" in r.json()
