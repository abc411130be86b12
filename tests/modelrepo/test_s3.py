"""The model repository on a real S3 server (tests/s3server.py: Swift's S3 API): publishing with a marker, listings
that ignore a writer's work in progress (versions without a marker: tests/modelrepo/test_s3_sync.py), the disk cache
(sha256, ETag revalidation, the byte budget), a dead writer's leftovers swept, and the faults: missing bucket, refused
credentials, a tampered or deleted object, S3 stopped."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelrepo import CacheTooSmall, LocationError, ModelSpec, SpecError, StorageUnavailable, open_repository, parse_s3
from modelrepo.s3 import RepositoryError, S3Repository
from modelrepo.s3publish import sweep


def tiny_onnx(seed: int = 0) -> bytes:
    """coords [N, 2] → rgb [N, 3]: sigmoid(x W), a valid image model of the contract."""
    w = np.random.default_rng(seed).normal(size=(2, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["coords", "w"], ["z"]), helper.make_node("Sigmoid", ["z"], ["rgb"])],
        "tiny",
        [helper.make_tensor_value_info("coords", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("rgb", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def publish(repo, name: str, seed: int = 0):
    return repo.write_version(name, ModelSpec.for_task(name, "image"), tiny_onnx(seed), {"seed": seed})


@pytest.fixture
def repo(s3_env, tmp_path):
    return open_repository(s3_env.url(s3_env.bucket()), tmp_path / "cache")


def test_triton_forms_of_the_url():
    assert parse_s3("s3://bucket/path/to/models").endpoint is None
    loc = parse_s3("s3://10.0.0.5:9000/models/prod")
    assert (loc.endpoint, loc.bucket, loc.prefix) == ("http://10.0.0.5:9000", "models", "prod/")
    assert parse_s3("s3://https://s3.local:443/bk1/x").endpoint == "https://s3.local:443"
    assert parse_s3("s3://host:8333/bucket").url == "s3://host:8333/bucket"
    for bad in ("s3://", "s3://Bad_Bucket/x", "s3://https://bucket/x", "s3://host:1/bucket/../x"):
        with pytest.raises(LocationError):
            parse_s3(bad)


def test_published_versions_are_listed_and_fetched_checked(repo):
    assert publish(repo, "tiny").record.version == 1
    assert publish(repo, "tiny", seed=1).record.version == 2
    assert repo.scan() == {"tiny": repo.root / "tiny"}
    folder = repo.folder("tiny")
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == [
        "1", "2", "config.pbtxt", "metadata.json"]  # fmt: skip
    assert not (folder / "2" / "model.onnx").exists()  # large files only when a load needs them
    record = __import__("modelrepo").read_version(folder, 2, need_file=False)
    path = repo.fetch("tiny", 2, "model.onnx", record.onnx_sha256)
    assert path.read_bytes() == tiny_onnx(1)
    gets = repo.requests["GET"]
    repo.fetch("tiny", 2, "model.onnx", record.onnx_sha256)
    assert repo.requests["GET"] == gets  # from the disk cache


def test_a_dead_writers_leftovers_are_never_listed_and_are_swept_another_tools_stay(repo, s3_env):
    publish(repo, "tiny")
    client, bucket = s3_env.client(), repo.location.bucket
    dead = {"2/.claim-00000000000000000001-dead": b"", "2/metadata.json": b"{}", "2/model.onnx": b"half"}
    for rel, body in dead.items():  # a writer of ours that died halfway: its claim stays
        client.put_object(Bucket=bucket, Key=repo.location.key("tiny", rel), Body=body)
    client.put_object(Bucket=bucket, Key=repo.location.key("other", "1", "model.onnx"), Body=b"x")  # another tool's
    repo.scan()
    assert list(repo.scan()) == ["tiny"] and repo.model("tiny").published == (1,)
    assert "a writer's claim is in it" in repo.index["tiny"].held[2]
    assert "written" in repo.index["other"].held[1]  # quiet for 30 s first (INR_S3_SETTLE_S)
    assert sweep(repo, grace_s=3600) == []  # young: a writer may still be at it
    assert sweep(repo, grace_s=60, now=time.time() + 120) == ["tiny/2"]  # the claimed one only
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]]
    assert not any("tiny/2/" in k for k in keys) and repo.location.key("other", "1", "model.onnx") in keys
    assert publish(repo, "tiny").record.version == 2  # the number is free again


def test_two_writers_at_once_take_two_numbers(repo):
    versions, errors = [], []

    def write(seed):
        try:
            versions.append(publish(repo, "race", seed).record.version)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=write, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and sorted(versions) == [1, 2, 3]
    repo.scan()
    assert repo.model("race").published == (1, 2, 3)


def test_restart_revalidates_by_etag_and_downloads_nothing_again(repo, tmp_path):
    publish(repo, "tiny")
    repo.scan()
    sha = __import__("modelrepo").read_version(repo.folder("tiny"), 1, need_file=False).onnx_sha256
    repo.fetch("tiny", 1, "model.onnx", sha)
    again = S3Repository(repo.url, tmp_path / "cache")  # a restart: same cache folder
    again.scan()
    again.folder("tiny")
    again.fetch("tiny", 1, "model.onnx", sha)
    assert again.requests["GET"] == 0 and again.requests["LIST"] >= 1


def test_tampered_or_deleted_objects_are_clear_errors_and_never_kept(repo, s3_env):
    publish(repo, "tiny")
    repo.scan()
    sha = __import__("modelrepo").read_version(repo.folder("tiny"), 1, need_file=False).onnx_sha256
    key = repo.location.key("tiny", "1", "model.onnx")
    s3_env.client().put_object(Bucket=repo.location.bucket, Key=key, Body=tiny_onnx(7))  # tampered
    repo.scan()
    with pytest.raises(SpecError, match="does not match the sha256 its metadata records"):
        repo.fetch("tiny", 1, "model.onnx", sha)
    assert not (repo.root / "tiny" / "1" / "model.onnx").exists()
    s3_env.client().delete_object(Bucket=repo.location.bucket, Key=key)  # deleted after the listing
    with pytest.raises(FileNotFoundError, match="model 'tiny' file 1/model.onnx is not in"):
        repo.fetch("tiny", 1, "model.onnx", sha)
    assert not list((repo.root / "tiny" / "1").glob(".part-*"))


def du(folder) -> int:
    """What `du -s` counts: every file's and folder's blocks."""
    return sum(p.lstat().st_blocks * 512 for p in [folder, *folder.rglob("*")])


def sha_of(repo, name: str) -> str:
    return __import__("modelrepo").read_version(repo.folder(name), 1, need_file=False).onnx_sha256


def budgeted(s3_env, tmp_path, names, files: int, **kwargs) -> S3Repository:
    """A repository of tiny models whose budget holds their small files and folders and `files` model files."""
    repo = S3Repository(s3_env.url(s3_env.bucket()), tmp_path / "cache", **kwargs)
    for n in names:
        publish(repo, n)
    repo.scan()
    for n in names:
        repo.folder(n)
    repo.budget.max_bytes = repo.budget.bytes + files * 4096
    return repo


def test_the_byte_budget_evicts_the_least_recently_used_and_bounds_the_disk(s3_env, tmp_path, monkeypatch):
    # The budget was of the model files' bytes alone (2 × size here), while the models' small files and folders
    # took more disk than those: it now bounds all the cache holds, as `du` counts it.
    monkeypatch.setattr("modelrepo.diskcache.RECENT_S", 0.0)
    repo = budgeted(s3_env, tmp_path, ("a", "b", "c"), files=2)
    for n in ("a", "b", "c"):
        repo.fetch(n, 1, "model.onnx", sha_of(repo, n))
        time.sleep(0.01)
        assert du(tmp_path / "cache") <= repo.budget.max_bytes
    assert repo.budget.bytes == du(tmp_path / "cache")
    assert not (repo.root / "a" / "1" / "model.onnx").exists()
    assert (repo.root / "c" / "1" / "model.onnx").exists()


def test_a_new_models_small_files_make_room_too(s3_env, tmp_path, monkeypatch):
    monkeypatch.setattr("modelrepo.diskcache.RECENT_S", 0.0)
    repo = budgeted(s3_env, tmp_path, ("a", "b", "c"), files=6)  # d's files and folders take about 6 blocks
    for n in ("a", "b", "c"):
        repo.fetch(n, 1, "model.onnx", sha_of(repo, n))
        time.sleep(0.01)
    publish(repo, "d")
    repo.scan()
    repo.folder("d")
    assert du(tmp_path / "cache") <= repo.budget.max_bytes
    assert not (repo.root / "a" / "1" / "model.onnx").exists()


def test_a_cache_over_its_budget_for_a_moment_is_trimmed_back_and_at_a_start(s3_env, tmp_path, monkeypatch):
    monkeypatch.setattr("modelrepo.diskcache.RECENT_S", 2.0)
    repo = budgeted(s3_env, tmp_path, ("a", "b", "c"), files=1)
    for n in ("a", "b"):  # b's room spares a, used just now: over the budget for a moment
        repo.fetch(n, 1, "model.onnx", sha_of(repo, n))
    assert du(tmp_path / "cache") > repo.budget.max_bytes
    assert until(lambda: du(tmp_path / "cache") <= repo.budget.max_bytes, 10)  # with no later fetch
    assert (repo.root / "b" / "1" / "model.onnx").exists()
    time.sleep(2.1)
    smaller = repo.budget.max_bytes - 4096  # a restart with a smaller budget: trimmed at the start
    again = S3Repository(repo.url, tmp_path / "cache", max_bytes=smaller)
    assert du(tmp_path / "cache") <= smaller and not (repo.root / "b" / "1" / "model.onnx").exists()
    again.scan()
    again.fetch("b", 1, "model.onnx", sha_of(again, "b"))  # fetched again, as it must be
    assert again.requests["GET"] == 1


def test_a_file_larger_than_the_whole_budget_is_refused_and_not_downloaded(s3_env, tmp_path):
    repo = S3Repository(s3_env.url(s3_env.bucket()), tmp_path / "cache", max_bytes=1000)
    publish(repo, "tiny")
    repo.scan()
    sha, gets = sha_of(repo, "tiny"), repo.requests["GET"]
    with pytest.raises(CacheTooSmall, match=r"1/model.onnx of model 'tiny' is \d+ bytes.*INR_MODEL_CACHE_BYTES=1,000"):
        repo.fetch("tiny", 1, "model.onnx", sha)
    assert repo.requests["GET"] == gets and not (repo.root / "tiny" / "1" / "model.onnx").exists()


def until(check, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_missing_bucket_and_wrong_credentials_name_the_setting(s3_env, tmp_path, monkeypatch):
    with pytest.raises(RepositoryError, match="no bucket 'nosuchbucket'.*INR_MODELS"):
        open_repository(s3_env.url("nosuchbucket"), tmp_path).check()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(RepositoryError, match="refused the credentials.*AWS_SECRET_ACCESS_KEY"):
        open_repository(s3_env.url(s3_env.bucket()), tmp_path).check()


def test_a_stopped_server_keeps_the_last_listing(repo, s3_env):
    publish(repo, "tiny")
    assert list(repo.scan()) == ["tiny"]
    dead = S3Repository(repo.url.replace(f":{s3_env.port}/", ":9/"), repo.root.parent)  # nothing listens on 9
    dead.index = dict(repo.index)
    assert list(dead.scan()) == ["tiny"]  # the last listing stands
    with pytest.raises(StorageUnavailable, match="S3 did not answer"):
        dead.check()


def test_a_key_that_climbs_out_of_its_folder_is_never_listed_nor_fetched(repo, s3_env):
    publish(repo, "tiny")
    s3_env.client().put_object(
        Bucket=repo.location.bucket, Key=repo.location.key("tiny", "1", "..", "..", "x"), Body=b""
    )
    repo.scan()
    assert all(".." not in rel for rel in repo.model("tiny").files)
    with pytest.raises(SpecError, match="not published"):
        repo.fetch("tiny", 1, "../../x")
    assert not (repo.root / "x").exists() and not (repo.root.parent / "x").exists()
