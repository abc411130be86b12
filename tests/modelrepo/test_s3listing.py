"""The listing of a repository on S3 in ranges side by side (modelrepo/s3listing.py), on a real S3 server: whatever
the cuts (names that sort differently once a '/' follows them, models added, deleted or given a version between two
listings), it finds exactly what one listing from the first key to the last finds, and reads no object."""

from __future__ import annotations

import concurrent.futures as cf
import random

import pytest

from modelrepo import open_repository
from modelrepo import s3listing as listing
from modelrepo.s3layout import MARKER

# '-' and '.' sort below '/', '_' and letters above: "m1-x/…" < "m1.x/…" < "m1/…" < "m10/…" < "m1_x/…" in key order
TRICKY = ["m1", "m1-x", "m1.x", "m10", "m1_x", "A", "a", "a-", "a.b", "z9", "0", "m1--", "m1-x-y"]


def names(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    alphabet = "ab-._0m"
    found = set(TRICKY)
    while len(found) < n:
        found.add(rng.choice("abm0") + "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 4))))
    return sorted(found)


def put_models(s3_env, repo, models: dict[str, list[int]], pending: dict[str, int] | None = None) -> None:
    """Each model with its published versions (files and marker), and a version without its marker for some."""
    client, bucket = s3_env.client(), repo.location.bucket
    keys = []
    for name, versions in models.items():
        keys += [repo.location.key(name, "config.pbtxt"), repo.location.key(name, "metadata.json")]
        for v in versions:
            keys += [repo.location.key(name, str(v), f) for f in ("model.onnx", "metadata.json", MARKER)]
    for name, v in (pending or {}).items():
        keys.append(repo.location.key(name, str(v), "model.onnx"))
    with cf.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=k.encode()), keys))


def one_listing(repo) -> dict:
    """The index as one listing from the first key to the last finds it."""
    return listing.build_index(listing.list_range(repo, repo.location.prefix)[0], len(repo.location.prefix))


@pytest.fixture
def small_pages(monkeypatch):
    """Pages of 7 keys and 3 listers: a few dozen models take many ranges and pages."""
    monkeypatch.setattr(listing, "PAGE", 7)
    monkeypatch.setattr(listing, "LISTERS", 3)


def test_ranges_find_what_one_listing_finds_first_and_again(s3_env, tmp_path, small_pages):
    repo = open_repository(s3_env.url(s3_env.bucket()), tmp_path / "cache")
    all_names = names(40)
    put_models(s3_env, repo, {n: [1, 2] if i % 3 == 0 else [1] for i, n in enumerate(all_names)}, {"m1": 3, "a": 1})
    truth = one_listing(repo)
    assert sorted(n for n, m in truth.items() if m.published) == all_names and truth["m1"].pending.keys() == {3}

    first = listing.list_all(repo, repo.location.prefix, None)  # a first listing: cut by a delimiter listing
    assert first == truth
    gets, lists = repo.requests["GET"], repo.requests["LIST"]
    again = listing.list_all(repo, repo.location.prefix, first)  # a rescan: cut by the last index
    assert again == truth and repo.requests["GET"] == gets == 0
    # each range asks for one key more than it had: an unchanged bucket is not read a page past each range
    keys = sum(listing._keys(m) for m in truth.values())
    assert repo.requests["LIST"] - lists <= -(-keys // listing.PAGE) + listing.LISTERS

    # models added between the old cuts, one deleted, a version published: the old index's cuts still find it all
    client, bucket = s3_env.client(), repo.location.bucket
    put_models(s3_env, repo, {"m1-a": [1], "m1.": [1], "zz": [1, 2], "0-": [1]})
    put_models(s3_env, repo, {"a.b": [2]})
    for key in [
        o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=repo.location.key("m10") + "/")["Contents"]
    ]:
        client.delete_object(Bucket=bucket, Key=key)
    truth = one_listing(repo)
    assert "m10" not in truth and truth["a.b"].published == (1, 2) and "zz" in truth
    assert listing.list_all(repo, repo.location.prefix, first) == truth
    assert listing.list_all(repo, repo.location.prefix, None) == truth


def test_a_small_repository_is_one_request(s3_env, tmp_path):
    repo = open_repository(s3_env.url(s3_env.bucket()), tmp_path / "cache")
    put_models(s3_env, repo, {"one": [1], "two": [1, 2]})
    index = listing.list_all(repo, repo.location.prefix, None)
    assert sorted(index) == ["one", "two"] and repo.requests["LIST"] == 1
    assert listing.list_all(repo, repo.location.prefix, index) == index and repo.requests["LIST"] == 2


def test_the_fast_timestamps_are_botocores(s3_env, tmp_path):
    """The client of the repository parses LastModified in C; the times are the ones botocore's parser gives."""
    repo = open_repository(s3_env.url(s3_env.bucket()), tmp_path / "cache")
    put_models(s3_env, repo, {"one": [1]})
    ours = listing.list_range(repo, repo.location.prefix)[0]
    theirs = s3_env.client().list_objects_v2(Bucket=repo.location.bucket)["Contents"]
    assert [o["LastModified"] for o in ours] == [o["LastModified"] for o in theirs]
    assert all(o["LastModified"].tzinfo is not None for o in ours)
